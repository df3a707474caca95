import Foundation
import Testing
import Tributary
import TributaryModel
import TributaryTestSupport

/// A commit appends the records whose keys sort after every stored one (LMDB's append mode, which refuses a key that
/// does not) and puts the others. Whatever order keys arrive in (above the last one, below it, between, after the
/// last was deleted, across types), every write must succeed (LMDB refuses an append out of order, and the write would
/// throw) and store what was written.
@Suite("Appending records past the last stored key")
struct ViewAppendTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(name: "A", properties: [.scalar("_id", .int), .scalar("n", .int)]),
            ObjectSchema(name: "B", properties: [.scalar("_id", .string), .scalar("n", .int)]),
        ])

    @Test("Keys above, below and between the stored ones, with deletes of the last, in 150 random writes")
    func interleavedKeys() throws {
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(directory: directory.path, schema: Self.schema, configuration: configuration)
        defer { replica.close() }
        var generator = SplitMix64(seed: 2026)
        var model: [String: [PrimaryKey: Int64]] = ["A": [:], "B": [:]]
        for step in 0..<150 {
            try replica.write { txn in
                for _ in 0..<(1 + generator.next() % 8) {
                    let type = generator.next() % 3 == 0 ? "B" : "A"
                    let stored = model[type]!
                    let highest = stored.keys.max()
                    let key: PrimaryKey
                    switch generator.next() % 4 {
                    case 0:  // above every key of the type
                        var above: Int64 = 0
                        if case .int(let value)? = highest { above = value }
                        key =
                            type == "A"
                            ? .int(above + 1 + Int64(generator.next() % 3))
                            : .string("z\(step)-\(generator.next() % 100)")
                    case 1 where highest != nil:  // the highest key itself: deleted
                        _ = try txn.delete(type, primaryKey: highest!)
                        model[type]![highest!] = nil
                        continue
                    default:  // anywhere, negative keys included
                        key =
                            type == "A"
                            ? .int(Int64(generator.next() % 200) - 100) : .string("k\(generator.next() % 90)")
                    }
                    let n = Int64(step)
                    _ = try txn.upsert(type, ["_id": key.value, "n": .int(n)])
                    model[type]![key] = n
                }
            }
            if step % 25 == 24 {
                try replica.read { snapshot in
                    for (type, objects) in model {
                        let stored = try snapshot.objects(type)
                        #expect(stored.count == objects.count)
                        for object in stored {
                            let key = PrimaryKey(object["_id"])
                            #expect(
                                key.flatMap { objects[$0] }.map(Value.int) == object["n"], "\(type) \(object["_id"])")
                        }
                    }
                }
            }
        }
        let report = try replica.verify()
        #expect(report.passed, "\(report)")
        let digest = try replica.viewDigest()
        try replica.rebuildViews()
        #expect(try replica.viewDigest() == digest)
    }
}
