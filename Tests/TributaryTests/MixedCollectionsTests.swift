import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

private struct Pet: Model {
    var _id: String
    var name = ""
}

private struct Note: Model {
    var _id: String
    var payload: Value = .null
}

/// Mixed values that hold a link to an object of any type, or a list or dictionary of mixed values (Realm's
/// `AnyRealmValue.object`, and its nested collections since Realm 13).
@Suite("Mixed: links, lists and dictionaries inside a mixed value")
struct MixedCollectionsTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(name: "Note", properties: [.scalar("_id", .string), .scalar("payload", .mixed)]),
            ObjectSchema(name: "Pet", properties: [.scalar("_id", .string), .scalar("name", .string)]),
            ObjectSchema(name: "Counter", properties: [.scalar("_id", .int)]),
            ObjectSchema(name: "Tag", embedded: true, properties: [.scalar("label", .string)]),
        ])

    static let rex = Value.typedLink(type: "Pet", key: .string("rex"))
    static let counter = Value.typedLink(type: "Counter", key: .int(7))

    func payload(_ replica: Replica, _ id: String) throws -> Value? {
        try replica.read { try $0.object("Note", primaryKey: .string(id)) }?["payload"]
    }

    func filled() throws -> Replica {
        let replica = try Cluster(1, schema: Self.schema).replicas[0]
        try replica.write { txn in
            try txn.create("Pet", ["_id": "rex", "name": "Rex"])
            try txn.create("Counter", ["_id": 7])
            let payloads: [Value] = [
                Self.rex, Self.counter, .list([1, "two", Self.rex]),
                .dictionary(["pet": Self.rex, "n": 3, "inner": .list([.dictionary(["deep": true])])]), 5, .null,
                "hello",
            ]
            for (index, payload) in payloads.enumerated() {
                try txn.create("Note", ["_id": .string("n\(index)"), "payload": payload])
            }
        }
        return replica
    }

    func ids(_ replica: Replica, _ query: String, _ arguments: [Value] = []) throws -> [String] {
        try replica.objects("Note", where: query, arguments: arguments).compactMap { $0.primaryKey.value.stringValue }
            .sorted()
    }

    @Test("A link, a list or a dictionary in a mixed value reads back as written")
    func roundTrip() throws {
        let replica = try filled()
        #expect(try payload(replica, "n0") == Self.rex)
        #expect(try payload(replica, "n1") == Self.counter)
        #expect(try payload(replica, "n2") == .list([1, "two", Self.rex]))
        #expect(
            try payload(replica, "n3")
                == .dictionary(["pet": Self.rex, "n": 3, "inner": .list([.dictionary(["deep": true])])]))
        // Replaced by a value of another kind, and back.
        try replica.write { try $0.update("Note", primaryKey: .string("n2"), ["payload": "plain"]) }
        #expect(try payload(replica, "n2") == "plain")
        try replica.write { try $0.update("Note", primaryKey: .string("n2"), ["payload": .dictionary(["a": 1])]) }
        #expect(try payload(replica, "n2") == .dictionary(["a": 1]))
        // The replica's own checks agree with what it stored.
        #expect(try replica.verify().passed)
    }

    @Test("A link to an erased object reads as null, inside lists and dictionaries too, and comes back with it")
    func erasedTargets() throws {
        let replica = try filled()
        try replica.write { _ = try $0.delete("Pet", primaryKey: .string("rex")) }
        #expect(try payload(replica, "n0") == .null)
        #expect(try payload(replica, "n2") == .list([1, "two", .null]))
        #expect(try payload(replica, "n3")?.dictionaryValue?["pet"] == .null)
        #expect(try ids(replica, "payload == nil") == ["n0", "n5"])
        try replica.write { try $0.create("Pet", ["_id": "rex", "name": "Rex again"]) }
        #expect(try payload(replica, "n0") == Self.rex)
    }

    @Test("Links that name no type, a type without a primary key, or a key of the wrong type are refused")
    func refusedLinks() throws {
        let replica = try filled()
        let bad: [(Value, String)] = [
            (.link(.string("rex")), "names its target's type"),
            (.typedLink(type: "Ghost", key: .string("x")), "'Ghost'"),
            (.typedLink(type: "Tag", key: .string("x")), "'Tag'"),
            (.typedLink(type: "Pet", key: .int(1)), "needs a string primary key"),
            (.list([.typedLink(type: "Counter", key: .string("7"))]), "needs a int primary key"),
            (.dictionary(["a.b": 1]), "'.'"),
            (.list([.embedded(EmbeddedObject(type: "Tag", fields: ["label": "x"]))]), "embedded"),
        ]
        for (value, message) in bad {
            let error = #expect(throws: TributaryError.self) {
                try replica.write { try $0.create("Note", ["_id": "bad", "payload": value]) }
            }
            #expect(error?.description.contains(message) == true, "\(value): \(String(describing: error))")
        }
        var nested: Value = 1
        for _ in 0...Property.mixedNestingLimit { nested = .list([nested]) }
        #expect(throws: TributaryError.self) {
            try replica.write { try $0.create("Note", ["_id": "deep", "payload": nested]) }
        }
        #expect(try replica.read { try $0.object("Note", primaryKey: .string("bad")) } == nil)
    }

    @Test(
        "Queries: obj() equals the link of its type only, @type names links, lists and dictionaries",
        arguments: [
            ("payload == obj('Pet', 'rex')", ["n0"]),
            ("payload != obj('Pet', 'rex')", ["n1", "n2", "n3", "n4", "n5", "n6"]),
            ("payload == obj('Counter', 7)", ["n1"]),
            ("payload IN {obj('Counter', 7), obj('Pet', 'rex')}", ["n0", "n1"]),
            ("payload.@type == 'link'", ["n0", "n1"]),
            ("payload.@type == 'list'", ["n2"]),
            ("payload.@type == 'dictionary'", ["n3"]),
            ("payload.@type IN {'list', 'dictionary'}", ["n2", "n3"]),
            ("payload == 5", ["n4"]),
            // Into the list or dictionary a mixed value holds, as Realm's nested collections.
            ("payload[0] == 1", ["n2"]),
            ("payload[LAST] == obj('Pet', 'rex')", ["n2"]),
            ("payload[FIRST] == 1 OR payload[1] == 'two'", ["n2"]),
            ("payload['n'] == 3", ["n3"]),
            ("payload['pet'] == obj('Pet', 'rex')", ["n3"]),
            ("payload['n'] != nil", ["n3"]),
            ("payload['missing'] == nil AND payload.@type == 'dictionary'", ["n3"]),
            ("payload[*] == 'two'", ["n2"]),
            ("ANY payload[*] == 3", ["n3"]),
            ("ALL payload[*].@type == 'numeric'", ["n0", "n1", "n4", "n5", "n6"]),
            ("payload[*].@type == 'list'", ["n3"]),
            ("payload.@size == 3", ["n2", "n3"]),
            ("payload[SIZE] == 3", ["n2", "n3"]),
            ("payload.@count > 0", ["n2", "n3"]),
            ("payload.@count == 0", ["n0", "n1", "n4", "n5", "n6"]),
            ("payload.@size == 5", ["n6"]),
            // Into nested lists and dictionaries.
            ("payload['inner'][0]['deep'] == true", ["n3"]),
            ("payload['inner'][0].@type == 'dictionary'", ["n3"]),
            ("payload['inner'].@count == 1", ["n3"]),
            ("payload['inner'][0].@count == 1", ["n3"]),
            ("ANY payload[*][*]['deep'] == true", ["n3"]),
            ("payload['inner'][SIZE] == 1", ["n3"]),
            ("payload[2][0] == nil AND payload.@type == 'list'", ["n2"]),
            // Two subscripts of one mixed value in a conjunction: each reads its own element.
            ("payload[0] == 1 AND payload[1] == 'two'", ["n2"]),
            ("payload['n'] == 3 AND payload['pet'] != nil", ["n3"]),
        ] as [(String, [String])])
    func queries(query: String, expected: [String]) throws {
        #expect(try ids(try filled(), query) == expected, "\(query)")
    }

    @Test("A typed link as a query argument matches the mixed value linking to that object")
    func linkArguments() throws {
        let replica = try filled()
        #expect(try ids(replica, "payload == $0", [Self.counter]) == ["n1"])
        #expect(try ids(replica, "payload == $0", [.typedLink(type: "Counter", key: .int(8))]).isEmpty)
        // A link property's values name no type: comparing with one is refused, not silently false.
        let withOwner = Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: "Note",
                    properties: [.scalar("_id", .string), .scalar("payload", .mixed), Property("owner", .link("Pet"))]),
                ObjectSchema(name: "Pet", properties: [.scalar("_id", .string), .scalar("name", .string)]),
            ])
        let other = try Cluster(1, schema: withOwner).replicas[0]
        let error = #expect(throws: TributaryError.self) { try other.objects("Note", where: "payload == owner") }
        #expect(error?.description.contains("obj('Type', key)") == true, "\(String(describing: error))")
        // A bare key names no type: refused, not silently false.
        #expect(throws: TributaryError.self) { try ids(replica, "payload == $0", [.link(.int(7))]) }
    }

    @Test("Concurrent writes of a list, a dictionary, a link and a scalar: one wins whole, in every order (rule 1)")
    func concurrentWrites() throws {
        let writes: [Value] = [.list([1, 2]), .dictionary(["k": "v"]), Self.rex, "text"]
        // Each order of delivery of the four concurrent writes converges on the write with the greatest stamp.
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]] {
            let cluster = try Cluster(5, schema: Self.schema)
            try cluster[4].write { txn in
                try txn.create("Pet", ["_id": "rex", "name": "Rex"])
                try txn.create("Note", ["_id": "n", "payload": .list(["start"])])
            }
            try cluster.syncAll()
            for (replica, value) in writes.enumerated() {
                cluster.advanceClocks(byMilliseconds: 3)
                try cluster[replica].write { try $0.update("Note", primaryKey: .string("n"), ["payload": value]) }
            }
            try cluster.deliver(order.map { (target: 4, sources: [$0]) })
            #expect(try payload(cluster[4], "n") == "text", "order \(order)")
            try cluster.syncAll()
            #expect(try cluster.converged(), "order \(order)")
        }
    }

    @Test("Lists and dictionaries of mixed values hold links and nested collections too")
    func collectionsOfMixed() throws {
        let schema = Schema(
            version: 1,
            types: Self.schema.types + [
                ObjectSchema(
                    name: "Bag",
                    properties: [
                        .scalar("_id", .int), Property("items", .scalar(.mixed), list: true),
                        Property("byName", .scalar(.mixed), dictionary: true),
                    ])
            ])
        let cluster = try Cluster(2, schema: schema)
        let items: Value = .list([Self.rex, .list([1, .dictionary(["x": Self.counter])]), "s"])
        let byName: Value = .dictionary(["pet": Self.rex, "nested": .list([.list([])])])
        try cluster[0].write { txn in
            try txn.create("Pet", ["_id": "rex", "name": "Rex"])
            try txn.create("Counter", ["_id": 7])
            try txn.create("Bag", ["_id": 1, "items": items, "byName": byName])
        }
        try cluster.syncAll()
        let bag = try cluster[1].read { try $0.object("Bag", primaryKey: .int(1)) }
        #expect(bag?["items"] == items)
        #expect(bag?["byName"] == byName)
        try cluster[1].write { _ = try $0.delete("Counter", primaryKey: .int(7)) }
        try cluster.syncAll()
        let after = try cluster[0].read { try $0.object("Bag", primaryKey: .int(1)) }
        #expect(after?["items"] == .list([Self.rex, .list([1, .dictionary(["x": .null])]), "s"]))
        #expect(try cluster.converged())
    }

    @Test("A collection written to a mixed value wins over a scalar written earlier, in either order")
    func collectionWins() throws {
        for order in [[0, 1], [1, 0]] {
            let cluster = try Cluster(3, schema: Self.schema)
            try cluster[2].write { try $0.create("Note", ["_id": "n", "payload": 1]) }
            try cluster.syncAll()
            try cluster[0].write { try $0.update("Note", primaryKey: .string("n"), ["payload": "first"]) }
            cluster.advanceClocks(byMilliseconds: 3)
            try cluster[1].write {
                try $0.update("Note", primaryKey: .string("n"), ["payload": .dictionary(["a": .list([1, 2])])])
            }
            try cluster.deliver(order.map { (target: 2, sources: [$0]) })
            #expect(try payload(cluster[2], "n") == .dictionary(["a": .list([1, 2])]), "order \(order)")
            try cluster.syncAll()
            #expect(try cluster.converged(), "order \(order)")
        }
    }

    @Test("A mixed field of an embedded object holds a list or a dictionary as one value too")
    func mixedInEmbedded() throws {
        let schema = Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: "Box",
                    properties: [
                        .scalar("_id", .string), Property("inner", .embedded("Inner")),
                        Property("inners", .embedded("Inner"), list: true),
                        Property("byKey", .embedded("Inner"), dictionary: true),
                    ]),
                ObjectSchema(name: "Inner", embedded: true, properties: [.scalar("payload", .mixed)]),
            ])
        let cluster = try Cluster(2, schema: schema)
        func inner(_ payload: Value) -> Value { .embedded(EmbeddedObject(type: "Inner", fields: ["payload": payload])) }
        try cluster[0].write { try $0.create("Box", ["_id": "b", "inner": inner(.dictionary(["a": 1]))]) }
        func read(_ replica: Replica) throws -> Value? {
            try replica.read { try $0.object("Box", primaryKey: .string("b")) }?["inner"].embeddedValue?["payload"]
        }
        #expect(try read(cluster[0]) == .dictionary(["a": 1]))
        try cluster[0].write {
            try $0.set(.list([1, "x"]), at: ["inner", "payload"], of: "Box", primaryKey: .string("b"))
        }
        #expect(try read(cluster[0]) == .list([1, "x"]))
        cluster.advanceClocks(byMilliseconds: 3)
        try cluster[1].write { try $0.create("Box", ["_id": "b", "inner": inner(.list([2]))]) }
        try cluster.syncAll()
        #expect(try cluster.converged())
        #expect(try cluster[0].verify().passed)
        // Inserted into a list of embedded objects, and set under a dictionary's key, one by one.
        try cluster[0].write { txn in
            try txn.insert(inner(.list([3, 4])), at: 0, into: ["inners"], of: "Box", primaryKey: .string("b"))
            try txn.setValue(
                inner(.dictionary(["k": 5])), forKey: "x", in: ["byKey"], of: "Box", primaryKey: .string("b"))
        }
        let box = try cluster[0].read { try $0.object("Box", primaryKey: .string("b")) }
        #expect(box?["inners"].listValue?.first?.embeddedValue?["payload"] == .list([3, 4]))
        #expect(box?["byKey"].dictionaryValue?["x"]?.embeddedValue?["payload"] == .dictionary(["k": 5]))
        try cluster.syncAll()
        #expect(try cluster.converged())
    }

    @Test("Live results of a query on a mixed value follow its link's target", .timeLimit(.minutes(1)))
    func liveResultsFollowLinks() async throws {
        let replica = try filled()
        var nulls = replica.observe("Note", where: "payload == nil").makeAsyncIterator()
        #expect(try await nulls.next()?.results.map { $0.primaryKey.value.stringValue ?? "" } == ["n5"])
        var all = replica.observe("Note").makeAsyncIterator()
        #expect(try await all.next()?.results.first { $0.primaryKey == .string("n0") }?["payload"] == Self.rex)
        // Only the Pet is erased: the notes linking to it read otherwise.
        try await replica.write { _ = try $0.delete("Pet", primaryKey: .string("rex")) }
        #expect(try await nulls.next()?.results.map { $0.primaryKey.value.stringValue ?? "" }.sorted() == ["n0", "n5"])
        #expect(try await all.next()?.results.first { $0.primaryKey == .string("n0") }?["payload"] == .null)
    }

    @Test("A model's Value property holds links, lists and dictionaries")
    func models() throws {
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(
            directory: directory.path, models: [Note.self, Pet.self], schemaVersion: 1, configuration: configuration)
        let link = Value.link(to: Pet.self, primaryKey: .string("rex"))
        #expect(link == Self.rex)
        try replica.write { txn in
            try txn.create(Pet(_id: "rex", name: "Rex"))
            try txn.create(Note(_id: "a", payload: .list([link, .dictionary(["x": 1.5])])))
        }
        #expect(try replica.object(Note.self, primaryKey: "a")?.payload == .list([link, .dictionary(["x": 1.5])]))
        #expect(try replica.objects(Note.self, where: "payload.@type == 'list'").map(\._id) == ["a"])
    }

    @Test("Changesets and the schema's checks keep typed links; a default cannot be one")
    func encodings() throws {
        var writer = BinaryWriter()
        var names = NameTable.indexed()
        let value = Value.dictionary(["l": .list([Self.rex, Self.counter, .null])])
        writer.value(value, &names)
        var reader = BinaryReader(writer.bytes, subject: "value")
        #expect(try reader.value(NameTable(decoded: names.names)) == value)
        let defaulted = Schema(types: [
            ObjectSchema(
                name: "T", properties: [.scalar("_id", .string), Property("v", .scalar(.mixed), default: Self.rex)])
        ])
        #expect(throws: SchemaError.self) { try defaulted.validate() }
    }
}
