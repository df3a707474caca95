import Foundation
import Testing
import TributaryModel
import TributaryStorage
import TributaryTestSupport
import TributaryViews

@testable import Tributary

/// A query sorted by one indexed property walks that index in the SORT's order and stops at the LIMIT: it must give
/// exactly what sorting every match gives (ties in primary key order, nulls first, negative numbers and -0.0), which
/// the same data without indexes answers.
@Suite("Sorting through an index")
struct IndexOrderTests {
    static func schema(indexed: Bool) -> Schema {
        Schema(types: [
            ObjectSchema(
                name: "Event",
                properties: [
                    .scalar("_id", .int), .scalar("score", .int, indexed: indexed),
                    .scalar("at", .date, optional: true, indexed: indexed),
                    .scalar("ratio", .double, optional: true, indexed: indexed), .scalar("tag", .string),
                ])
        ])
    }

    func open(_ directory: TemporaryDirectory, indexed: Bool) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(
            directory: directory.path + (indexed ? "/indexed" : "/plain"), schema: Self.schema(indexed: indexed),
            configuration: configuration)
    }

    /// The same random events in both replicas: few distinct values (many ties), nulls, negative numbers, -0.0, some
    /// events deleted and some changed after they were created.
    func fill(_ replicas: [Replica], seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        func pick(_ count: UInt64) -> Int64 { Int64(random.next() % count) }
        var writes: [(Int64, [String: Value])] = []
        for id in 0..<300 {
            let score = pick(21) - 10
            let at: Value = pick(5) == 0 ? .null : .date(Date(timeIntervalSince1970: Double(pick(40) - 20) * 1.5))
            let ratio: Value =
                switch pick(6) {
                case 0: .null
                case 1: .double(-0.0)
                case 2: .double(0.0)
                default: .double(Double(pick(9) - 4) / 4)
                }
            let tag = ["a", "b", "c"][Int(pick(3))]
            writes.append(
                (
                    Int64(id),
                    ["_id": .int(Int64(id)), "score": .int(score), "at": at, "ratio": ratio, "tag": .string(tag)]
                ))
        }
        let deleted = Set((0..<40).map { _ in pick(300) })
        let changed = (0..<40).map { _ in (pick(300), pick(21) - 10) }
        for replica in replicas {
            try replica.write { txn in
                for (_, values) in writes { try txn.create("Event", values) }
            }
            try replica.write { txn in
                for id in deleted { try txn.delete("Event", primaryKey: .int(id)) }
                for (id, score) in changed where !deleted.contains(id) {
                    try txn.update("Event", primaryKey: .int(id), ["score": .int(score)])
                }
            }
        }
    }

    /// Predicates, SORTs and LIMITs (`nil`: none).
    static let queries: [(predicate: String, sort: String, limit: Int?)] = [
        ("TRUEPREDICATE", "score DESC", 7), ("TRUEPREDICATE", "score ASC", 7), ("TRUEPREDICATE", "score DESC", nil),
        ("tag == 'a'", "score ASC", 12), ("tag == 'b'", "score DESC", 12), ("score > 2", "score DESC", 5),
        ("score >= -3 AND score < 4", "score ASC", nil), ("TRUEPREDICATE", "at ASC", 10),
        ("TRUEPREDICATE", "at DESC", 10), ("tag != 'c'", "at DESC", nil), ("TRUEPREDICATE", "ratio ASC", 30),
        ("TRUEPREDICATE", "ratio DESC", 30), ("ratio > -1", "ratio DESC", 8), ("TRUEPREDICATE", "score DESC", 0),
        ("TRUEPREDICATE", "score DESC", 1000), ("tag == 'c'", "_id DESC", 9), ("TRUEPREDICATE", "tag ASC", 20),
    ]

    /// Each query's result through the index, and through a scan that keeps the best matches of a LIMIT, against
    /// every match sorted and then cut to the LIMIT.
    @Test(arguments: [UInt64(1), 2, 3])
    func sortedThroughTheIndexAsWithout(seed: UInt64) throws {
        let directory = try TemporaryDirectory()
        let indexed = try open(directory, indexed: true)
        let plain = try open(directory, indexed: false)
        try fill([indexed, plain], seed: seed)
        for (predicate, sort, limit) in Self.queries {
            let query = "\(predicate) SORT(\(sort))" + (limit.map { " LIMIT(\($0))" } ?? "")
            let sorted = try plain.objects("Event", where: "\(predicate) SORT(\(sort))")
            let expected = Array(sorted.prefix(limit ?? .max))
            for replica in [indexed, plain] {
                let found = try replica.objects("Event", where: query)
                #expect(found.map(\.primaryKey) == expected.map(\.primaryKey), "\(query)")
                #expect(found == expected, "\(query)")
            }
            let plan = try indexed.read { try $0.explain("Event", where: query) }
            if ["score", "at", "ratio"].contains(where: sort.hasPrefix), case .indexOrder = plan {
            } else if ["score", "at", "ratio"].contains(where: sort.hasPrefix) {
                Issue.record("\(query) is planned as \(plan)")
            }
        }
    }

    @Test func otherShapesOfQueryAreNotWalkedInOrder() throws {
        let directory = try TemporaryDirectory()
        let indexed = try open(directory, indexed: true)
        try fill([indexed], seed: 4)
        try indexed.read { snapshot in
            // Two sort keys, DISTINCT, a LIMIT before the SORT, an equality an index answers, a range on another
            // property, an unindexed sort key.
            for query in [
                "TRUEPREDICATE SORT(score DESC, at ASC)", "TRUEPREDICATE SORT(score DESC) DISTINCT(tag)",
                "TRUEPREDICATE LIMIT(5) SORT(score DESC)", "score == 3 SORT(score DESC)",
                "at > $0 SORT(score DESC)", "TRUEPREDICATE SORT(tag ASC)",
            ] {
                let plan = try snapshot.explain(
                    "Event", where: query, arguments: [.date(Date(timeIntervalSince1970: 0))])
                if case .indexOrder = plan { Issue.record("\(query) is walked in index order") }
            }
        }
    }

    @Test func anIndexThatDisagreesWithTheRecordsTakesTheGeneralPath() throws {
        let directory = try TemporaryDirectory()
        let indexed = try open(directory, indexed: true)
        let plain = try open(directory, indexed: false)
        try fill([indexed, plain], seed: 6)
        let query = "TRUEPREDICATE SORT(score DESC) LIMIT(10)"
        let lowest = try #require(try plain.objects("Event", where: "TRUEPREDICATE SORT(score ASC) LIMIT(1)").first)
        // A damaged index: an entry that gives the object with the lowest score the highest.
        var key = ViewStore.indexPrefix(type: "Event", property: "score")
        #expect(KeyEncoding.appendIndexValue(.int(1_000), budget: 64, to: &key))
        KeyEncoding.append(lowest.primaryKey, to: &key)
        try indexed.environment.write { txn in try txn.put(indexed.views.indexes, key: key, value: []) }
        let found = try indexed.objects("Event", where: query)
        #expect(found == (try plain.objects("Event", where: query)))
        #expect(!found.contains { $0.primaryKey == lowest.primaryKey })
    }

    @Test func aNaNInTheIndexTakesTheGeneralPath() throws {
        let directory = try TemporaryDirectory()
        let indexed = try open(directory, indexed: true)
        let plain = try open(directory, indexed: false)
        try fill([indexed, plain], seed: 5)
        let query = "TRUEPREDICATE SORT(ratio ASC) LIMIT(100)"
        #expect(try indexed.read { try $0.explain("Event", where: query) } != .fullScan)
        for replica in [indexed, plain] {
            try replica.write { txn in
                for (id, ratio) in [(1000, Double.nan), (1001, -Double.nan)] {
                    try txn.create("Event", ["_id": .int(Int64(id)), "score": 0, "ratio": .double(ratio), "tag": "n"])
                }
            }
        }
        // SORT puts NaN before every number; the index keeps NaNs at the ends of its numbers.
        #expect(try indexed.read { try $0.explain("Event", where: query) } == .fullScan)
        let found = try indexed.objects("Event", where: query)
        #expect(found.map(\.primaryKey) == (try plain.objects("Event", where: query)).map(\.primaryKey))
        #expect(found.contains { $0.primaryKey == .int(1000) } && found.contains { $0.primaryKey == .int(1001) })
    }
}
