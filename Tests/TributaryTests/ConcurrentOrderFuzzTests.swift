import Foundation
import Testing
import TributaryMerge
import TributaryModel
import TributaryTestSupport
import TributaryTestTags

@testable import Tributary

/// Order independence: concurrent changesets merged by the merge engine in every order end in one state, in the
/// bounded CI version (`TRIBUTARY_DEEP=1` runs 20,000 sets).
@Suite("Concurrent changesets in every order", .tags(.fuzz, .slow))
struct ConcurrentOrderFuzzTests {
    static var deep: Bool { ProcessInfo.processInfo.environment["TRIBUTARY_DEEP"] == "1" }

    @Test("Concurrent changesets applied in every order give one state")
    func everyOrderGivesOneState() async throws {
        try await offThePool {
            var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 2))
            let sets = Self.deep ? 20_000 : 400
            for set in 0..<sets {
                let cluster = try Cluster(2 + Int(random.next() % 5), schema: MergeSemanticsTests.schema)
                // A common base, then one concurrent write per replica.
                try cluster[0].write { txn in
                    try txn.create("Person", ["_id": "p"])
                    try txn.create(
                        "Task",
                        [
                            "_id": "t", "tags": ["a", "b", "c"],
                            "location": .embedded(EmbeddedObject(type: "Location", fields: ["city": "x"])),
                        ])
                }
                try cluster.syncAll()
                let base = cluster[0].versionVector
                for index in cluster.replicas.indices {
                    cluster.clocks[index].advance(byMilliseconds: random.next() % 20)
                    try cluster[index].write { txn in try Self.randomWrite(txn, &random) }
                }
                var concurrent: [Changeset] = []
                for replica in cluster.replicas {
                    concurrent += try replica.changesets(missingFrom: base, origins: [replica.replicaID])
                }
                let prefix = try cluster[0].changesets(missingFrom: VersionVector()).filter { base.includes($0.dot) }
                var digests = Set<UInt64>()
                for order in permutations(concurrent.count) {
                    var working = WorkingSet(source: EmptyRecordSource(), schema: Schema(types: []))
                    for changeset in prefix { try MergeEngine.apply(changeset, to: &working) }
                    for index in order { try MergeEngine.apply(concurrent[index], to: &working) }
                    let records = working.changes.compactMap { change in
                        change.after.map {
                            (type: change.key.type, primaryKey: change.key.primaryKey, bytes: $0.encoded())
                        }
                    }
                    digests.insert(Replica.recordsDigest(of: records))
                }
                #expect(
                    digests.count == 1,
                    "set \(set): \(concurrent.count) concurrent changesets gave \(digests.count) states")
                if digests.count != 1 { return }
            }
        }
    }

    static func randomWrite(_ txn: Transaction, _ random: inout SplitMix64, key task: PrimaryKey = .string("t")) throws
    {
        for _ in 0..<(1 + Int(random.next() % 3)) {
            let tags = try txn.object("Task", primaryKey: task)?["tags"].listValue?.count ?? 0
            switch random.next() % 12 {
            case 0: _ = try txn.delete("Task", primaryKey: task)
            case 1: try txn.upsert("Task", ["_id": "t", "title": .string("v\(random.next() % 100)")])
            case 2 where tags > 0:
                try txn.removeElement(
                    at: Int(random.next() % UInt64(tags)), from: ["tags"], of: "Task", primaryKey: task)
            case 3 where tags > 1:
                try txn.moveElement(
                    from: Int(random.next() % UInt64(tags)), to: Int(random.next() % UInt64(tags)), in: ["tags"],
                    of: "Task", primaryKey: task)
            case 4 where tags > 0:
                try txn.replaceElement(
                    at: Int(random.next() % UInt64(tags)), with: .string("s\(random.next() % 100)"), in: ["tags"],
                    of: "Task", primaryKey: task)
            case 5: try txn.removeAllElements(in: ["tags"], of: "Task", primaryKey: task)
            case 6: try txn.increment(["count"], of: "Task", primaryKey: task, by: Int64(random.next() % 7))
            case 7: try txn.update("Task", primaryKey: task, ["count": .int(Int64(random.next() % 50))])
            case 8:
                try txn.set(.string("c\(random.next() % 9)"), at: ["location", "city"], of: "Task", primaryKey: task)
            case 9 where try txn.object("Person", primaryKey: .string("p")) != nil:
                try txn.update("Task", primaryKey: task, ["owner": Self.next(&random) ? .link(.string("p")) : .null])
            case 10: _ = try txn.delete("Person", primaryKey: .string("p"))
            default:
                try txn.insert(
                    .string("i\(random.next() % 1000)"), at: Int(random.next() % UInt64(tags + 1)), into: ["tags"],
                    of: "Task", primaryKey: task)
            }
            if try txn.object("Task", primaryKey: task) == nil { return }
        }
    }

    static func next(_ random: inout SplitMix64) -> Bool { random.next() % 2 == 0 }
}

/// Every permutation of 0..<count (count ≤ 6: at most 720).
func permutations(_ count: Int) -> [[Int]] {
    if count <= 1 { return [Array(0..<count)] }
    var result: [[Int]] = []
    for rest in permutations(count - 1) {
        for position in 0...rest.count {
            var order = rest
            order.insert(count - 1, at: position)
            result.append(order)
        }
    }
    return result
}
