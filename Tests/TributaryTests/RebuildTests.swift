import Foundation
import Testing
import Tributary
import TributaryModel
import TributaryTestSupport

/// A rebuild of the views keeps a bounded number of records in memory: it writes them into the views it rebuilds as
/// it goes and loads them back when a later changeset changes them, and builds the indexes at the end from the final
/// schema. Whatever that bound, the rebuilt views must be the ones the replica had, byte for byte.
@Suite("Rebuilding the views with bounded memory")
struct RebuildTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Task",
                properties: [
                    .scalar("_id", .int), .scalar("title", .string, indexed: true), .scalar("n", .int),
                    Property("tags", .scalar(.string), list: true),
                ])
        ])

    @Test("Rebuilt views equal the live ones, for any number of records kept in memory")
    func rebuildWithSmallMemory() throws {
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(directory: directory.path, schema: Self.schema, configuration: configuration)
        defer { replica.close() }
        var generator = SplitMix64(seed: 42)
        // One large changeset first, so that a small bound spills in the middle of a changeset.
        try replica.write { txn in
            for index in 0..<300 {
                try txn.create("Task", ["_id": .int(Int64(index)), "title": .string("t\(index % 17)"), "n": .int(0)])
            }
        }
        for step in 0..<120 {
            // Halfway, an indexed property with a default: objects written before it get index entries too.
            if step == 60 {
                try replica.write { try $0.addProperty(.scalar("rank", .int, indexed: true, default: 5), to: "Task") }
            }
            try replica.write { txn in
                for _ in 0..<(1 + generator.next() % 6) {
                    let key = PrimaryKey.int(Int64(generator.next() % 320))
                    let exists = try txn.object("Task", primaryKey: key) != nil
                    switch generator.next() % 5 {
                    case 0 where exists: _ = try txn.delete("Task", primaryKey: key)
                    case 1 where exists:
                        try txn.update("Task", primaryKey: key, ["tags": .list([.string("a\(step)"), .string("b")])])
                    case 2 where exists && step > 60:
                        try txn.update("Task", primaryKey: key, ["rank": .int(Int64(step))])
                    case _ where exists:
                        try txn.update("Task", primaryKey: key, ["title": .string("u\(step)"), "n": .int(Int64(step))])
                    default:
                        try txn.upsert("Task", ["_id": key.value, "title": .string("new\(step)"), "n": .int(1)])
                    }
                }
            }
        }
        let digest = try replica.viewDigest()
        let titled = try replica.read { try $0.objects("Task", where: "title == 't3'").count }
        let ranked = try replica.read { try $0.objects("Task", where: "rank == 5").count }
        #expect(titled > 0 && ranked > 0)
        for recordsInMemory in [1, 2, 7, 64, 10_000] {
            try replica.rebuildViews(recordsInMemory: recordsInMemory)
            #expect(try replica.viewDigest() == digest, "rebuilt keeping \(recordsInMemory) records in memory")
            #expect(try replica.verify().passed)
            #expect(try replica.read { try $0.objects("Task", where: "title == 't3'").count } == titled)
            #expect(try replica.read { try $0.objects("Task", where: "rank == 5").count } == ranked)
        }
        try replica.rebuildViews()
        #expect(try replica.viewDigest() == digest)
    }
}
