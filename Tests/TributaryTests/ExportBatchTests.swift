import Testing
import TributaryLog
import TributaryModel
import TributaryStorage
import TributaryTestSupport

@testable import Tributary

/// `export(missingFrom:)`: what a sync session sends, batch after batch, each from the progress of the one before.
@Suite("Exporting in batches")
struct ExportBatchTests {
    @Test("Batches in log order, each from the last one's progress, bring a replica to the same state")
    func batchesConverge() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        // A replica that holds nothing yet, not even a schema of its own.
        let directory = TemporaryDirectory("export")
        let fresh = try Replica.open(directory: directory.path)
        for round in 0..<7 {
            for writer in 0..<2 {
                try cluster[writer].write {
                    try $0.upsert("Task", ["_id": .string("t\(round % 3)"), "title": .string("\(writer)-\(round)")])
                }
            }
            try cluster.send(from: 1, to: 0)
        }
        let source = cluster[0]
        let log = try source.encodedChangesets(missingFrom: VersionVector(), compressed: true)
        var vector = VersionVector()
        var batches: [[[UInt8]]] = []
        while true {
            let export = try source.export(missingFrom: vector, limit: 3)
            if export.changesets.isEmpty {
                #expect(!export.more)
                break
            }
            #expect(export.changesets.count <= 3)
            #expect(export.bytes == export.changesets.reduce(0) { $0 + $1.count })
            batches.append(export.changesets)
            #expect(export.more == (batches.joined().count < log.count))
            vector = export.progress
            try fresh.integrate(encoded: export.changesets)
            #expect(fresh.versionVector == vector)
        }
        // Every changeset once, in the source's log order.
        #expect(Array(batches.joined()) == log)
        #expect(vector == source.versionVector)
        #expect(try fresh.viewDigest() == source.viewDigest())
    }

    @Test("A byte bound stops a batch after the changeset that reaches it, never before the first")
    func byteBound() throws {
        let cluster = try Cluster(1, schema: MergeSemanticsTests.schema)
        for index in 0..<5 {
            try cluster[0].write { try $0.create("Task", ["_id": .string("t\(index)"), "title": "a title"]) }
        }
        let one = try cluster[0].export(missingFrom: VersionVector(), maximumBytes: 1)
        #expect(one.changesets.count == 1)
        #expect(one.more)
        let all = try cluster[0].export(missingFrom: VersionVector(), maximumBytes: 1 << 20)
        #expect(all.changesets.count == 6)  // the schema, then five creates
        #expect(!all.more)
    }

    @Test("Changesets the other side holds pending are skipped, and the batch goes on past them")
    func excludedAreSkipped() throws {
        let cluster = try Cluster(1, schema: MergeSemanticsTests.schema)
        for index in 0..<10 {
            try cluster[0].write { try $0.create("Task", ["_id": .string("t\(index)")]) }
        }
        let id = cluster[0].replicaID
        // The other side waits on changesets 1...6 already; a batch of 2 brings 7 and 8.
        let pending = Set((1...6).map { Dot(origin: id, sequence: UInt64($0)) })
        let export = try cluster[0].export(missingFrom: VersionVector(), excluding: pending, limit: 2)
        #expect(export.changesets.count == 2)
        #expect(export.progress[id] == 8)
        #expect(export.more)
    }

    @Test("A batch reads as much of a long run of one origin's changesets as it takes, not the whole run")
    func longRunReadInPart() throws {
        let cluster = try Cluster(1, schema: MergeSemanticsTests.schema)
        for index in 0..<200 {
            try cluster[0].write { try $0.create("Task", ["_id": .string("t\(index)")]) }
        }
        let replica = cluster[0]
        let read = try replica.environment.read { txn in
            try replica.log.originEntries(from: replica.replicaID, after: 10, limit: 5, in: txn)
        }
        #expect(read.map(\.dot.sequence) == [11, 12, 13, 14, 15])
        let all = try replica.environment.read { txn in
            try replica.log.originEntries(from: replica.replicaID, after: 10, in: txn)
        }
        #expect(all.count == 191)
    }
}
