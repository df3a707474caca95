import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

private struct Stay: EmbeddedModel {
    var city = ""
    var street = ""
}

private struct Traveller: Model {
    var _id: String
    var places: [String: Stay?] = [:]
}

/// Embedded objects under a dictionary's keys (Realm's `Map<String, EmbeddedObject?>`): each key merged as a field
/// (rule 1), and the object under it field by field while it stays the same instance (rule 6).
@Suite("Dictionaries of embedded objects")
struct DictionaryEmbeddedTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Traveller",
                properties: [.scalar("_id", .string), Property("places", .embedded("Stay"), dictionary: true)]),
            ObjectSchema(
                name: "Stay", embedded: true,
                properties: [
                    .scalar("city", .string), .scalar("street", .string),
                    Property("host", .link("Traveller")),
                ]),
        ])

    static func place(_ city: String, _ street: String = "", host: String? = nil) -> Value {
        let fields: [String: Value] = [
            "city": .string(city), "street": .string(street), "host": host.map { .link(.string($0)) } ?? .null,
        ]
        return .embedded(EmbeddedObject(type: "Stay", fields: fields))
    }

    static func places(_ replica: Replica, _ id: String = "t") throws -> [String: Value] {
        try replica.read { try $0.object("Traveller", primaryKey: .string(id)) }?["places"].dictionaryValue ?? [:]
    }

    static func city(_ replica: Replica, _ key: String) throws -> Value? {
        try places(replica)[key]?.embeddedValue?["city"]
    }

    @Test("Written whole, updated field by field under a key, read back after a reopen, verified")
    func writesAndReads() throws {
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        do {
            let replica = try Replica.open(directory: directory.path, schema: Self.schema, configuration: configuration)
            defer { replica.close() }
            try replica.write { txn in
                try txn.create(
                    "Traveller",
                    ["_id": "t", "places": .dictionary(["home": Self.place("Oslo", "Storgata"), "none": .null])])
            }
            #expect(try Self.places(replica) == ["home": Self.place("Oslo", "Storgata"), "none": .null])
            try replica.write {
                try $0.update(
                    "Traveller", primaryKey: .string("t"),
                    ["places": .dictionary(["home": Self.place("Oslo", "Kirkegata"), "work": Self.place("Bergen")])])
            }
            // One field of the same instance, one new key, one erased key: three instructions, not the dictionary.
            let last = try #require(try replica.changesets(missingFrom: VersionVector()).last)
            #expect(last.instructions.count == 3, "\(last.instructions)")
            #expect(try replica.verify().passed)
        }
        let reopened = try Replica.open(directory: directory.path, schema: Self.schema, configuration: configuration)
        defer { reopened.close() }
        #expect(
            try Self.places(reopened) == ["home": Self.place("Oslo", "Kirkegata"), "work": Self.place("Bergen")])
    }

    @Test("Concurrent edits of two fields of the object under one key both stay (rule 6)")
    func concurrentFieldEdits() throws {
        let cluster = try Cluster(2, schema: Self.schema)
        try cluster[0].write {
            try $0.create("Traveller", ["_id": "t", "places": .dictionary(["home": Self.place("Oslo", "Storgata")])])
        }
        try cluster.syncAll()
        try cluster[0].write {
            try $0.update(
                "Traveller", primaryKey: .string("t"),
                ["places": .dictionary(["home": Self.place("Oslo", "Kirkegata")])])
        }
        cluster.advanceClocks(byMilliseconds: 5)
        try cluster[1].write {
            try $0.update(
                "Traveller", primaryKey: .string("t"),
                ["places": .dictionary(["home": Self.place("Bergen", "Storgata")])])
        }
        try cluster.syncAll()
        #expect(try cluster.converged())
        #expect(try Self.places(cluster[0]) == ["home": Self.place("Bergen", "Kirkegata")])
        // A path through the key edits the same instance.
        try cluster[0].write {
            try $0.set("Storgata", at: ["places", "home", "street"], of: "Traveller", primaryKey: .string("t"))
        }
        #expect(try Self.places(cluster[0]) == ["home": Self.place("Bergen", "Storgata")])
        let error = #expect(throws: TributaryError.self) {
            try cluster[0].write {
                try $0.set("x", at: ["places", "away", "street"], of: "Traveller", primaryKey: .string("t"))
            }
        }
        #expect(error?.description.contains("['away'] holds no embedded object") == true)
    }

    @Test("An erase of the key, or a new object under it, drops concurrent edits of the old one, in any order")
    func replacedInstances() throws {
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
            let cluster = try Cluster(4, schema: Self.schema)
            try cluster[3].write { txn in
                try txn.create(
                    "Traveller",
                    ["_id": "t", "places": .dictionary(["home": Self.place("Oslo"), "work": Self.place("Bergen")])])
            }
            try cluster.syncAll()
            // 0 edits home's city; 1 erases home and puts a new object under work (erase, then set: a new instance);
            // 2 edits work's city.
            try cluster[0].write {
                try $0.update(
                    "Traveller", primaryKey: .string("t"),
                    ["places": .dictionary(["home": Self.place("Tromsø"), "work": Self.place("Bergen")])])
            }
            cluster.advanceClocks(byMilliseconds: 3)
            try cluster[1].write {
                try $0.update("Traveller", primaryKey: .string("t"), ["places": .dictionary([:])])
            }
            try cluster[1].write {
                try $0.update(
                    "Traveller", primaryKey: .string("t"), ["places": .dictionary(["work": Self.place("Stavanger")])])
            }
            cluster.advanceClocks(byMilliseconds: 3)
            try cluster[2].write {
                try $0.update(
                    "Traveller", primaryKey: .string("t"),
                    ["places": .dictionary(["home": Self.place("Oslo"), "work": Self.place("Bodø")])])
            }
            try cluster.deliver(order.map { (target: 3, sources: [$0]) })
            // The edit of home came before its erase; the edit of work (later) named the instance 1 replaced.
            #expect(try Self.places(cluster[3]) == ["work": Self.place("Stavanger")], "order \(order)")
            try cluster.syncAll()
            #expect(try cluster.converged(), "order \(order)")
        }
    }

    @Test(
        "A removal of a field of the embedded type, concurrent with a create that gives it under a key: same in any order"
    )
    func removedFieldUnderKey() throws {
        for removalFirst in [true, false] {
            let cluster = try Cluster(3, schema: Self.schema)
            try cluster[0].write { try $0.emit(.removeProperty(type: "Stay", name: "street")) }
            try cluster[1].write { txn in
                try txn.create(
                    "Traveller",
                    ["_id": "t", "places": .dictionary(["home": Self.place("Oslo", "Storgata"), "none": .null])])
            }
            let refusals = try cluster.deliver(
                removalFirst ? [(target: 2, sources: [0, 1])] : [(target: 2, sources: [1, 0])])
            #expect(refusals.isEmpty, "removal first: \(removalFirst): \(refusals)")
            try cluster.syncAll()
            #expect(try cluster.converged(), "removal first: \(removalFirst)")
            let home = try Self.places(cluster[2])["home"]?.embeddedValue
            #expect(home?["city"] == "Oslo" && home?.fields["street"] == nil, "\(String(describing: home))")
        }
    }

    @Test(
        "A null dictionary in a create is an empty one, written then: it merges with a concurrent create's keys alike")
    func nullDictionaryInCreate() throws {
        for order in [[0, 1], [1, 0]] {
            let cluster = try Cluster(3, schema: Self.schema)
            try cluster[0].write { try $0.create("Traveller", ["_id": "t", "places": .null]) }
            cluster.advanceClocks(byMilliseconds: 2)
            try cluster[1].write {
                try $0.create("Traveller", ["_id": "t", "places": .dictionary(["home": Self.place("Oslo")])])
            }
            try cluster.deliver(order.map { (target: 2, sources: [$0]) })
            #expect(try Self.places(cluster[2]) == ["home": Self.place("Oslo")], "order \(order)")
            try cluster.syncAll()
            #expect(try cluster.converged(), "order \(order)")
        }
    }

    @Test("A link inside an object under a key reads as null once its target is erased")
    func linksInside() throws {
        let replica = try Cluster(1, schema: Self.schema).replicas[0]
        try replica.write { txn in
            try txn.create("Traveller", ["_id": "ada"])
            try txn.create("Traveller", ["_id": "t", "places": .dictionary(["home": Self.place("Oslo", host: "ada")])])
        }
        #expect(try Self.places(replica)["home"]?.embeddedValue?["host"] == .link(.string("ada")))
        try replica.write { _ = try $0.delete("Traveller", primaryKey: .string("ada")) }
        #expect(try Self.places(replica)["home"]?.embeddedValue?["host"] == .null)
    }

    @Test(
        "Queries follow a key, or every value, into the embedded objects",
        arguments: [
            ("places['home'].city == 'Oslo'", ["a"]),
            ("ANY places[*].city == 'Bergen'", ["a", "b"]),
            ("ALL places[*].city == 'Bergen'", ["b", "c"]),
            ("places.@count == 2", ["a"]),
            ("places['home'].city == nil", ["b", "c"]),
        ] as [(String, [String])])
    func queries(query: String, expected: [String]) throws {
        let replica = try Cluster(1, schema: Self.schema).replicas[0]
        try replica.write { txn in
            try txn.create(
                "Traveller",
                ["_id": "a", "places": .dictionary(["home": Self.place("Oslo"), "work": Self.place("Bergen")])])
            try txn.create("Traveller", ["_id": "b", "places": .dictionary(["work": Self.place("Bergen")])])
            try txn.create("Traveller", ["_id": "c"])
        }
        let found = try replica.objects("Traveller", where: query).compactMap { $0.primaryKey.value.stringValue }
        #expect(found.sorted() == expected, "\(query)")
    }

    @Test("Models: a [String: EmbeddedModel?]; the schema JSON and binary forms keep it; bad values are refused")
    func modelsAndSchemas() throws {
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(
            directory: directory.path, models: [Traveller.self], schemaVersion: 1, configuration: configuration)
        #expect(
            replica.schema[type: "Traveller"]?[property: "places"]?.typeDescription == "dictionary<embedded<Stay>?>")
        try replica.write { try $0.create(Traveller(_id: "t", places: ["home": Stay(city: "Oslo"), "gone": nil])) }
        #expect(
            try replica.object(Traveller.self, primaryKey: "t")?.places == ["home": Stay(city: "Oslo"), "gone": nil])
        var traveller = try #require(try replica.object(Traveller.self, primaryKey: "t"))
        traveller.places["home"]??.street = "Storgata"
        try replica.write { try $0.update(traveller) }
        #expect(try replica.object(Traveller.self, primaryKey: "t")?.places["home"]??.street == "Storgata")

        let json = Self.schema.jsonString()
        let parsed = try Schema(json: json)
        #expect(parsed[type: "Traveller"]?[property: "places"] == Self.schema[type: "Traveller"]?[property: "places"])
        var writer = BinaryWriter()
        writer.schema(Self.schema)
        var reader = BinaryReader(writer.bytes, subject: "schema")
        #expect(try reader.schema()[type: "Traveller"]?[property: "places"]?.kind == .embedded("Stay"))
        let error = #expect(throws: TributaryError.self) {
            try replica.write {
                try $0.create(
                    "Traveller",
                    [
                        "_id": "x",
                        "places": .dictionary(["a": .embedded(EmbeddedObject(type: "Stay", fields: ["city": 5]))]),
                    ]
                )
            }
        }
        #expect(error?.description.contains("city") == true, "\(String(describing: error))")
    }
}
