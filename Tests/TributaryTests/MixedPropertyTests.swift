import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

private struct Setting: Model {
    var _id: String
    var value: Value = .null
}

/// Mixed properties (Realm's `AnyRealmValue`): any single scalar value, or null, merged as any field (last writer
/// wins), queried across types as Realm does.
@Suite("Mixed: a property holding any single value")
struct MixedPropertyTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Setting", properties: [.scalar("_id", .string), .scalar("value", .mixed)])
        ])

    static let values: [Value] = [
        .int(5), .double(5), .double(2.5), .string("apple"), .string("banana"), .bool(true), .null,
        .date(Date(timeIntervalSince1970: 1_700_000_000)), .decimal(Decimal(string: "5.0")!), .float(1.5),
        .data(Data([1, 2])), .uuid(UUID(uuidString: "6BA7B810-9DAD-11D1-80B4-00C04FD430C8")!),
    ]

    func filled() throws -> Replica {
        let cluster = try Cluster(1, schema: Self.schema)
        let replica = cluster.replicas[0]
        try replica.write { txn in
            for (index, value) in Self.values.enumerated() {
                try txn.create("Setting", ["_id": .string("s\(index)"), "value": value])
            }
        }
        return replica
    }

    func ids(_ replica: Replica, _ query: String) throws -> [Int] {
        try replica.objects("Setting", where: query).compactMap {
            guard case .string(let id) = $0.primaryKey else { return nil }
            return Int(id.dropFirst())
        }.sorted()
    }

    @Test("Each value reads back as written, of its own type; a link without its type is refused")
    func valuesOfEveryType() throws {
        let replica = try filled()
        for (index, value) in Self.values.enumerated() {
            #expect(try replica.read { try $0.object("Setting", primaryKey: .string("s\(index)")) }?["value"] == value)
        }
        #expect(replica.schema[type: "Setting"]?[property: "value"]?.isOptional == true)
        #expect(throws: TributaryError.self) {
            try replica.write { try $0.create("Setting", ["_id": "bad", "value": .link(.string("x"))]) }
        }
        #expect(throws: TributaryError.self) {
            try replica.write { try $0.create("Setting", ["_id": "bad", "value": .list([.link(.string("x"))])]) }
        }
    }

    @Test(
        "Queries compare across types as Realm does, and @type names the type",
        arguments: [
            ("value == 5", [0, 1, 8]),
            ("value > 2", [0, 1, 2, 8]),
            ("value == 'apple'", [3]),
            ("value BEGINSWITH 'b'", [4]),
            ("value == true", [5]),
            ("value == nil", [6]),
            ("value.@type == 'string'", [3, 4]),
            ("value.@type == 'NUMERIC'", [0, 1, 2, 8, 9]),
            ("value.@type != 'numeric' AND value != nil", [3, 4, 5, 7, 10, 11]),
            ("value.@type IN {'bool', 'date'}", [5, 7]),
            ("value.@type == 'binary'", [10]),
        ] as [(String, [Int])])
    func queries(query: String, expected: [Int]) throws {
        #expect(try ids(try filled(), query) == expected, "\(query)")
    }

    @Test("Concurrent writes of values of different types: one wins everywhere (rule 1)")
    func lastWriterWins() throws {
        let cluster = try Cluster(2, schema: Self.schema)
        let (a, b) = (cluster.replicas[0], cluster.replicas[1])
        try a.write { try $0.create("Setting", ["_id": "s", "value": 1]) }
        try cluster.syncAll()
        try a.write { try $0.update("Setting", primaryKey: .string("s"), ["value": "text"]) }
        cluster.advanceClocks(byMilliseconds: 5)
        try b.write { try $0.update("Setting", primaryKey: .string("s"), ["value": .double(2.5)]) }
        try cluster.syncAll()
        #expect(try cluster.converged())
        #expect(try a.read { try $0.object("Setting", primaryKey: .string("s")) }?["value"] == .double(2.5))
    }

    @Test("A model's Value property is mixed; the schema JSON and binary forms keep it; an index is refused")
    func modelsAndSchemas() throws {
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(
            directory: directory.path, models: [Setting.self], schemaVersion: 1, configuration: configuration)
        #expect(replica.schema[type: "Setting"]?[property: "value"]?.kind == .scalar(.mixed))
        try replica.write { txn in
            try txn.create(Setting(_id: "a", value: .int(3)))
            try txn.create(Setting(_id: "b", value: .string("three")))
        }
        #expect(try replica.object(Setting.self, primaryKey: "a")?.value == .int(3))
        #expect(try replica.objects(Setting.self, where: "value.@type == 'string'").map(\._id) == ["b"])
        // Outside a replica a mixed value is its plain value: a link its primary key.
        let encoded = try JSONEncoder().encode(Setting(_id: "c", value: .link(.string("ada"))))
        #expect(String(decoding: encoded, as: UTF8.self).contains(#""value":"ada""#))
        #expect(try JSONDecoder().decode(Setting.self, from: Data(#"{"_id":"d","value":3}"#.utf8)).value == .int(3))
        // JSON: bsonType "mixed", and back.
        let json = Self.schema.jsonString()
        #expect(json.contains("mixed"))
        #expect(try Schema(json: json)[type: "Setting"]?[property: "value"]?.kind == .scalar(.mixed))
        var writer = BinaryWriter()
        writer.schema(Self.schema)
        var reader = BinaryReader(writer.bytes, subject: "schema")
        #expect(try reader.schema()[type: "Setting"]?[property: "value"]?.kind == .scalar(.mixed))
        let indexed = Schema(types: [
            ObjectSchema(name: "T", properties: [.scalar("_id", .string), .scalar("v", .mixed, indexed: true)])
        ])
        #expect(throws: SchemaError.self) { try indexed.validate() }
        let keyed = Schema(types: [ObjectSchema(name: "T", properties: [.scalar("_id", .mixed)])])
        #expect(throws: SchemaError.self) { try keyed.validate() }
    }
}
