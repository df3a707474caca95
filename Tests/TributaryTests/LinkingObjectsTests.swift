import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// A person, and the tasks assigned to them or that they review: `tasks` and `reviewing` are computed from the
/// tasks' links.
private struct Person: Model {
    var _id: String
    var name: String
    var tasks = LinkingObjects<Task>()
    var reviewing = LinkingObjects<Task>()
    static let originProperties = ["tasks": "assignee", "reviewing": "reviewers"]
}

private struct Task: Model {
    var _id: String
    var title: String
    var priority = 0
    var assignee: Link<Person>?
    var reviewers: [Link<Person>] = []
}

/// Declared backlinks (Realm's `LinkingObjects`): computed from links as objects are read, queried by name, observed,
/// and never stored or synced.
@Suite("LinkingObjects: properties computed from the links that point at an object")
struct LinkingObjectsTests {
    func open(_ directory: TemporaryDirectory) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(
            directory: directory.path, models: [Person.self, Task.self], schemaVersion: 1,
            configuration: configuration)
    }

    func fill(_ replica: Replica) async throws {
        try await replica.write { txn in
            for person in ["ada", "bob", "cy"] { try txn.create(Person(_id: person, name: person.capitalized)) }
            try txn.create(
                Task(_id: "t1", title: "write", priority: 5, assignee: Link("ada"), reviewers: [Link("bob")]))
            try txn.create(Task(_id: "t2", title: "test", priority: 2, assignee: Link("ada")))
            try txn.create(
                Task(
                    _id: "t3", title: "ship", priority: 4, assignee: Link("bob"), reviewers: [Link("ada"), Link("ada")])
            )
        }
    }

    @Test("A model reads the objects linking to it; a write leaves the computed property out of the schema and data")
    func modelsReadTheirBacklinks() async throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        try await fill(replica)
        let ada = try #require(try replica.object(Person.self, primaryKey: "ada"))
        #expect(ada.tasks.map(\.primaryKey) == [.string("t1"), .string("t2")])
        // t3 lists ada twice among its reviewers: it is listed twice, as Realm counts backlinks.
        #expect(ada.reviewing.map(\.primaryKey) == [.string("t3"), .string("t3")])
        let everyone = try replica.objects(Person.self)
        #expect(everyone.map(\.tasks.count) == [2, 1, 0])
        // The computed properties are neither in the stored schema nor written.
        #expect(replica.schema[type: "Person"]?[property: "tasks"] == nil)
        #expect(replica.schema[type: "Person"]?.linkingObjects.map(\.name) == ["tasks", "reviewing"])
        try await replica.write { try $0.update(ada) }
        #expect(try await replica.read { try $0.object("Person", primaryKey: .string("ada"))?.values["tasks"] } == nil)
        // Dynamically, by name.
        let linking = try await replica.read {
            try $0.linkingObjects("tasks", of: "Person", primaryKey: .string("bob"))
        }
        #expect(linking.map(\.primaryKey) == [.string("t3")])
        await #expect {
            try await replica.read { try $0.linkingObjects("friends", of: "Person", primaryKey: .string("bob")) }
        } throws: { error in
            (error as? TributaryError)?.code == .unknownProperty
        }
    }

    @Test(
        "Queries read a computed property as its backlinks",
        arguments: [
            ("tasks.@count == 2", ["ada"]),
            ("tasks.@count == 0", ["cy"]),
            ("ANY tasks.priority > 4", ["ada"]),
            ("ALL tasks.priority >= 4", ["bob", "cy"]),
            ("tasks.title == 'ship'", ["bob"]),
            ("reviewing.@count > 0 AND tasks.@count > 1", ["ada"]),
            ("SUBQUERY(tasks, $t, $t.priority < 3).@count == 1", ["ada"]),
            ("tasks[FIRST].title == 'write'", ["ada"]),
            ("tasks.@sum.priority == 7", ["ada"]),
        ] as [(String, [String])])
    func queries(query: String, expected: [String]) async throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        try await fill(replica)
        let found = try replica.objects(Person.self, where: query + " SORT(_id ASC)").map(\._id)
        #expect(found == expected, "\(query)")
    }

    @Test("Live results of a model follow its computed property when only a linking object changes")
    func liveResultsFollowLinkingObjects() async throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        try await fill(replica)
        var people = replica.observe(Person.self).makeAsyncIterator()
        #expect(try await people.next()?.results.first { $0._id == "cy" }?.tasks.count == 0)
        var busy = replica.observe(Person.self, where: "tasks.@count > 0 SORT(_id ASC)").makeAsyncIterator()
        #expect(try await busy.next()?.results.map(\._id) == ["ada", "bob"])
        // Only a Task is written.
        try await replica.write { try $0.create(Task(_id: "t4", title: "rest", assignee: Link("cy"))) }
        #expect(try await people.next()?.results.first { $0._id == "cy" }?.tasks.map(\.primaryKey) == [.string("t4")])
        #expect(try await busy.next()?.results.map(\._id) == ["ada", "bob", "cy"])
    }

    @Test("A replica opened without the declarations has the same schema, and refuses the name in queries")
    func declarationsAreNotStored() async throws {
        let directory = TemporaryDirectory()
        do {
            let replica = try open(directory)
            try await fill(replica)
            replica.close()
        }
        var configuration = Replica.Configuration()
        configuration.readOnly = true
        let plain = try Replica.open(directory: directory.path, configuration: configuration)
        defer { plain.close() }
        #expect(plain.schema[type: "Person"]?.linkingObjects.isEmpty == true)
        #expect(plain.schema[type: "Person"] == (try Schema(models: [Person.self, Task.self]))[type: "Person"])
        #expect(throws: TributaryError.self) { try plain.objects("Person", where: "tasks.@count > 0") }
        #expect(try plain.objects("Person", where: "@links.Task.assignee.@count > 0").count == 2)
    }

    @Test("Declarations that cannot be computed are refused, naming the fault")
    func refusals() throws {
        struct Stray: Model {
            var _id: String
            var tasks = LinkingObjects<Task>()
        }
        // Task has no link to Stray.
        #expect {
            try Schema(models: [Stray.self, Task.self, Person.self])
        } throws: { error in
            "\(error)".contains("Task has no Link<Stray> property")
        }
        // Declared on a plain schema.
        let person = ObjectSchema(
            name: "Person", properties: [.scalar("_id", .string)],
            linkingObjects: [LinkingObjectsProperty("tasks", originType: "Task", originProperty: "title")])
        let task = ObjectSchema(
            name: "Task",
            properties: [.scalar("_id", .string), .scalar("title", .string), Property("owner", .link("Person"))])
        #expect {
            try Schema(types: [person, task]).validateDeclaration()
        } throws: { error in
            "\(error)".contains("'Task.title', which is not a link to 'Person': its links to 'Person' are 'owner'")
        }
        var clash = person
        clash.linkingObjects = [LinkingObjectsProperty("_id", originType: "Task", originProperty: "owner")]
        #expect(throws: SchemaError.self) { try Schema(types: [clash, task]).validateDeclaration() }
        var unknown = person
        unknown.linkingObjects = [LinkingObjectsProperty("tasks", originType: "Job", originProperty: "owner")]
        #expect(throws: SchemaError.self) { try Schema(types: [unknown, task]).validateDeclaration() }
        // Equality ignores computed properties: they are not part of what is stored and synced.
        var plainPerson = person
        plainPerson.linkingObjects = []
        #expect(plainPerson == person)
    }

    @Test("Two links from one type: without originProperties the schema says which to name")
    func ambiguousOrigin() throws {
        struct Owner: Model {
            var _id: String
            var items = LinkingObjects<Item>()
        }
        struct Item: Model {
            var _id: String
            var owner: Link<Owner>?
            var previousOwner: Link<Owner>?
        }
        #expect {
            try Schema(models: [Owner.self, Item.self])
        } throws: { error in
            "\(error)".contains("Item links to Owner through owner and previousOwner")
                && "\(error)".contains("originProperties")
        }
    }

    @Test("A flexible-sync subscription cannot use a computed property")
    func subscriptionsRefuseComputedProperties() throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        #expect {
            try replica.subscriptions.commit { $0.append("Person", where: "ANY tasks.priority > 3") }
        } throws: { error in
            "\(error)".contains("cannot use backlinks")
        }
    }
}
