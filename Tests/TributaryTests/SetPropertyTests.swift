import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

private struct Post: Model {
    var _id: String
    var tags: Set<String> = []
    var likedBy: Set<Link<Reader>> = []
}

private struct Reader: Model {
    var _id: String
}

/// Sets (Realm's `MutableSet`): each value held once, concurrent additions of one value kept once, a removal takes out
/// what its writer saw, and an addition the remover did not see stays.
@Suite("Sets: distinct values that merge as an add-wins set")
struct SetPropertyTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Post",
                properties: [.scalar("_id", .string), Property("tags", .scalar(.string), set: true)])
        ])

    static func tags(_ replica: Replica, _ post: String = "p") throws -> [String] {
        try (replica.read { try $0.object("Post", primaryKey: .string(post)) }?["tags"].listValue ?? []).map {
            if case .string(let tag) = $0 { tag } else { "?" }
        }
    }

    @Test("A set reads each value once; updates add and remove values")
    func distinctValues() throws {
        let cluster = try Cluster(1, schema: Self.schema)
        let replica = cluster.replicas[0]
        try replica.write { try $0.create("Post", ["_id": "p", "tags": ["swift", "db", "swift"]]) }
        #expect(try Self.tags(replica) == ["swift", "db"])
        try replica.write { try $0.update("Post", primaryKey: .string("p"), ["tags": ["db", "sync", "db"]]) }
        #expect(try Self.tags(replica).sorted() == ["db", "sync"])
        #expect(replica.schema[type: "Post"]?[property: "tags"]?.typeDescription == "set<string>")
        // Queries read a set as a list.
        #expect(try replica.objects("Post", where: "'sync' IN tags AND tags.@count == 2").count == 1)
    }

    @Test("Two replicas that add one value concurrently hold it once")
    func concurrentAddsKeptOnce() throws {
        let cluster = try Cluster(2, schema: Self.schema)
        let (a, b) = (cluster.replicas[0], cluster.replicas[1])
        try a.write { try $0.create("Post", ["_id": "p", "tags": ["x"]]) }
        try cluster.syncAll()
        try a.write { try $0.update("Post", primaryKey: .string("p"), ["tags": ["x", "y"]]) }
        try b.write { try $0.update("Post", primaryKey: .string("p"), ["tags": ["x", "y", "z"]]) }
        try cluster.syncAll()
        #expect(try cluster.converged())
        #expect(try Self.tags(a).sorted() == ["x", "y", "z"])
        // A removal after both additions takes out both copies.
        try a.write { try $0.update("Post", primaryKey: .string("p"), ["tags": ["x", "z"]]) }
        try cluster.syncAll()
        #expect(try Self.tags(b).sorted() == ["x", "z"])
        #expect(try cluster.converged())
    }

    @Test("A removal concurrent with an addition of the same value: the addition stays (add wins)")
    func addWins() throws {
        let cluster = try Cluster(2, schema: Self.schema)
        let (a, b) = (cluster.replicas[0], cluster.replicas[1])
        try a.write { try $0.create("Post", ["_id": "p", "tags": ["x", "y"]]) }
        try cluster.syncAll()
        // a removes x; b, not having seen that, adds x again (it holds it already: nothing to write) and adds w.
        try a.write { try $0.update("Post", primaryKey: .string("p"), ["tags": ["y"]]) }
        try b.write { try $0.update("Post", primaryKey: .string("p"), ["tags": ["x", "y", "w"]]) }
        try cluster.syncAll()
        #expect(try Self.tags(a).sorted() == ["w", "y"])
        // b removes y while a adds y back after removing it: a's new addition was not seen by b's removal.
        try a.write { try $0.update("Post", primaryKey: .string("p"), ["tags": ["w"]]) }
        try cluster.syncAll()
        try a.write { try $0.update("Post", primaryKey: .string("p"), ["tags": ["w", "y"]]) }
        try b.write { try $0.update("Post", primaryKey: .string("p"), ["tags": []]) }
        try cluster.syncAll()
        #expect(try cluster.converged())
        #expect(try Self.tags(a) == ["y"])
    }

    @Test("Models: Swift Set properties are sets, of values and of links")
    func models() throws {
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(
            directory: directory.path, models: [Post.self, Reader.self], schemaVersion: 1,
            configuration: configuration)
        #expect(replica.schema[type: "Post"]?[property: "tags"]?.isSet == true)
        #expect(replica.schema[type: "Post"]?[property: "likedBy"]?.typeDescription == "set<link<Reader>>")
        try replica.write { txn in
            try txn.create(Reader(_id: "ada"))
            try txn.create(Post(_id: "p", tags: ["a", "b"], likedBy: [Link("ada")]))
        }
        var post = try #require(try replica.object(Post.self, primaryKey: "p"))
        #expect(post.tags == ["a", "b"] && post.likedBy == [Link("ada")])
        post.tags.remove("a")
        post.tags.insert("c")
        try replica.write { try $0.update(post) }
        #expect(try replica.object(Post.self, primaryKey: "p")?.tags == ["b", "c"])
    }

    @Test("A set of embedded objects is refused, and older builds refuse a schema with a set")
    func refusals() throws {
        let embedded = Schema(types: [
            ObjectSchema(
                name: "T", properties: [.scalar("_id", .string), Property("e", .embedded("E"), set: true)]),
            .embedded("E", properties: [.scalar("x", .int)]),
        ])
        #expect(throws: SchemaError.self) { try embedded.validate() }
        // The set flag is a property flag bit earlier builds do not know (they refuse it as unknown): the encoding
        // round-trips here.
        var writer = BinaryWriter()
        writer.schema(Self.schema)
        var reader = BinaryReader(writer.bytes, subject: "schema")
        #expect(try reader.schema()[type: "Post"]?[property: "tags"]?.isSet == true)
    }
}
