import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// Swift's `String` compares by canonical equivalence: "é" as one scalar and as "e" with a combining accent are `==`.
/// A replica stores keys as their UTF-8 bytes, so they are two objects, and every part of a replica must keep them
/// apart: a `Set` or `Dictionary` of keys that merges them loses one of the objects.
@Suite("Primary keys that differ only in Unicode normalization")
struct UnicodeKeyTests {
    static let composed = "Caf\u{E9}"
    static let decomposed = "Cafe\u{301}"
    static let schema = Schema(types: [
        ObjectSchema(
            name: "Place",
            properties: [
                .scalar("_id", .string), .scalar("name", .string), .scalar("visits", .int, indexed: true),
                Property("near", .link("Place"), optional: true),
            ])
    ])

    @Test("The two spellings are two objects, in one transaction, on a peer and after a rebuild")
    func twoObjectsEverywhere() throws {
        #expect(Self.composed == Self.decomposed, "the premise: Swift says these strings are equal")
        let cluster = try Cluster(2, schema: Self.schema)
        try cluster[0].write { txn in
            try txn.create("Place", ["_id": .string(Self.composed), "name": "composed", "visits": 1])
            try txn.create(
                "Place",
                [
                    "_id": .string(Self.decomposed), "name": "decomposed", "visits": 1,
                    "near": .link(.string(Self.composed)),
                ])
        }
        try cluster[0].write { txn in
            try txn.update("Place", primaryKey: .string(Self.decomposed), ["visits": 2])
        }
        try cluster.syncAll()
        for replica in cluster.replicas {
            let objects = try replica.objects("Place")
            #expect(objects.count == 2)
            let composed = try #require(try replica.object("Place", primaryKey: .string(Self.composed)))
            let decomposed = try #require(try replica.object("Place", primaryKey: .string(Self.decomposed)))
            #expect(composed["name"] == "composed" && composed["visits"] == 1)
            #expect(decomposed["name"] == "decomposed" && decomposed["visits"] == 2)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Queries return both objects: by primary key, through an index and in a scan")
    func queriesReturnBoth() throws {
        let cluster = try Cluster(1, schema: Self.schema)
        let replica = cluster[0]
        try replica.write { txn in
            try txn.create("Place", ["_id": .string(Self.composed), "name": .string(Self.composed), "visits": 1])
            try txn.create("Place", ["_id": .string(Self.decomposed), "name": .string(Self.decomposed), "visits": 1])
        }
        let keys: [Value] = [.string(Self.composed), .string(Self.decomposed)]
        #expect(try replica.objects("Place", where: "_id IN $0", arguments: [.list(keys)]).count == 2)
        #expect(try replica.objects("Place", where: "visits == 1").count == 2)
        #expect(try replica.objects("Place", where: "visits IN {1, 2}").count == 2)
        #expect(try replica.objects("Place", where: "name IN $0", arguments: [.list(keys)]).count == 2)
        #expect(
            try replica.objects("Place", where: "_id == $0", arguments: [keys[1]]).map(\.primaryKey) == [
                .string(Self.decomposed)
            ])
        #expect(try replica.objects("Place", where: "TRUEPREDICATE DISTINCT(name)").count == 2)
    }

    @Test("Two replicas creating the two spellings concurrently end with both objects")
    func concurrentCreatesOfBothSpellings() throws {
        let cluster = try Cluster(3, schema: Self.schema)
        try cluster[0].write { try $0.create("Place", ["_id": .string(Self.composed), "name": "from 0", "visits": 1]) }
        try cluster[1].write {
            try $0.create("Place", ["_id": .string(Self.decomposed), "name": "from 1", "visits": 1])
        }
        // Replica 2 takes both in one batch.
        let batch =
            try cluster[0].changesets(missingFrom: cluster[2].versionVector)
            + cluster[1].changesets(missingFrom: cluster[2].versionVector)
        try cluster[2].integrate(batch)
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(try replica.objects("Place").map(\.primaryKey).count == 2)
            #expect(try replica.object("Place", primaryKey: .string(Self.decomposed))?["name"] == "from 1")
        }
        #expect(try cluster.converged())
    }

    @Test("Writing a string in the other normalization stores the new bytes")
    func rewritingTheOtherSpellingStoresIt() throws {
        let cluster = try Cluster(1, schema: Self.schema)
        let replica = cluster[0]
        try replica.write { try $0.create("Place", ["_id": "p", "name": .string(Self.composed), "visits": 1]) }
        try replica.write { try $0.update("Place", primaryKey: .string("p"), ["name": .string(Self.decomposed)]) }
        let name = try #require(try replica.object("Place", primaryKey: .string("p"))?["name"].stringValue)
        #expect(Array(name.utf8) == Array(Self.decomposed.utf8), "the write was dropped as a write of the same value")
        #expect(try replica.objects("Place", where: "name == $0", arguments: [.string(Self.decomposed)]).count == 1)
    }
}
