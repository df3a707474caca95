import Foundation
import Testing
import TributaryModel
import TributaryStorage
import TributaryTestSupport

@testable import Tributary

/// The pending area: changesets that wait for their predecessors, kept decoded between integrations, and what a peer
/// should not send again.
@Suite("Pending area")
struct PendingAreaTests {
    /// Replica 0's changesets: its schema's, then `writes` updates of one task.
    func history(_ cluster: Cluster, writes: Int) throws -> [Changeset] {
        try cluster[0].write { try $0.create("Task", ["_id": "t", "title": "0"]) }
        for index in 1...writes {
            try cluster[0].write { try $0.update("Task", primaryKey: .string("t"), ["title": .string("\(index)")]) }
        }
        return try cluster[0].changesets(missingFrom: VersionVector())
    }

    @Test("A changeset that waits is integrated once its predecessor arrives, call after call")
    func waitingChangesetsIntegrateAcrossCalls() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        let all = try history(cluster, writes: 30)
        // Every other changeset first: all but the first wait.
        let odd = stride(from: 1, to: all.count, by: 2).map { all[$0] }
        let even = stride(from: 0, to: all.count, by: 2).map { all[$0] }
        #expect(try cluster[1].integrate(odd).waiting == odd.count)
        #expect(try cluster[1].pendingDots() == Set(odd.map(\.dot)))
        // The even ones arrive one call at a time; each unlocks the one after it.
        for (index, changeset) in even.enumerated() {
            let report = try cluster[1].integrate([changeset])
            #expect(report.integrated.count == (index < odd.count ? 2 : 1), "call \(index): \(report)")
        }
        #expect(try cluster[1].pendingDots().isEmpty)
        #expect(try cluster[1].object("Task", primaryKey: .string("t"))?["title"] == "30")
        #expect(try cluster[1].verify().passed)
        try cluster.syncAll()
        #expect(try cluster.converged())
    }

    @Test("A pending change made by another handle is seen: the decoded copy is only used while it is current")
    func anotherHandlesPendingChangeIsSeen() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        let all = try history(cluster, writes: 3)  // schema, create, 3 updates
        let target = cluster[1]
        #expect(try target.integrate([all[4]]).waiting == 1)  // now decoded in memory
        // Another handle (another process) stores the changeset before it in the pending area, as integrate would.
        try target.environment.write { txn in
            let entry = PendingChangeset(changeset: all[3], adopt: false)
            try txn.put(target.pending, key: Replica.pendingKey(all[3].dot), value: entry.stored)
            let generation = try target.pendingGeneration(in: txn) + 1
            try txn.put(target.identity, key: Replica.pendingGenerationKey, value: Replica.identityBytes(generation))
        }
        // The first three arrive: the one the other handle stored must be integrated too, then the last.
        let report = try target.integrate(Array(all.prefix(3)))
        #expect(report.integrated == all.map(\.dot))
        #expect(try target.pendingDots().isEmpty)
        #expect(try target.object("Task", primaryKey: .string("t"))?["title"] == "3")
        #expect(try target.verify().passed)
    }

    @Test("A waiting changeset whose stored row is damaged is not listed as held, and its good copy replaces the row")
    func damagedPendingRowIsReplaced() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        let all = try history(cluster, writes: 4)  // schema, create, 4 updates
        let target = cluster[1]
        #expect(try target.integrate(Array(all.suffix(2))).waiting == 2)
        // The first waiting row is damaged on disk, and the replica reads the area from storage again (as after
        // reopening: the decoded copy is the handle's).
        let damaged = all[4].dot
        try target.environment.write { txn in
            try txn.put(target.pending, key: Replica.pendingKey(damaged), value: [0xFF, 0x00, 0x13])
            let generation = try target.pendingGeneration(in: txn) + 1
            try txn.put(target.identity, key: Replica.pendingGenerationKey, value: Replica.identityBytes(generation))
        }
        // Listed as held, the damaged one would never be sent again, and the one after it would wait for good.
        #expect(try target.pendingDots() == [all[5].dot])
        #expect(try target.pendingDots() == [all[5].dot])  // and again, from the copy the first call decoded
        // Its copy arrives alone: it waits, in place of the damaged row.
        #expect(try target.integrate([all[4]]).waiting == 2)
        #expect(try target.pendingChangesets().map(\.dot).sorted() == [all[4].dot, all[5].dot])
        // Damaged again; this time the rest arrive with its copy, and everything is integrated.
        try target.environment.write { txn in
            try txn.put(target.pending, key: Replica.pendingKey(damaged), value: [0xFF, 0x00, 0x13])
            let generation = try target.pendingGeneration(in: txn) + 1
            try txn.put(target.identity, key: Replica.pendingGenerationKey, value: Replica.identityBytes(generation))
        }
        let missing = try cluster[0].changesets(missingFrom: target.versionVector, excluding: try target.pendingDots())
        #expect(missing.map(\.dot) == all.prefix(5).map(\.dot))
        #expect(try target.integrate(missing).integrated == all.map(\.dot))
        // No row is left behind: the damaged one went with its good copy's integration.
        #expect(try target.environment.read { try $0.count(target.pending) } == 0)
        #expect(try target.pendingChangesets().isEmpty)
        #expect(try target.object("Task", primaryKey: .string("t"))?["title"] == "4")
        #expect(try target.verify().passed)
    }

    @Test("An exporter can leave out what the target holds pending; the rest still completes it")
    func exportExcludingPending() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        let all = try history(cluster, writes: 10)
        #expect(try cluster[1].integrate(Array(all.suffix(5))).waiting == 5)
        let held = try cluster[1].pendingDots()
        let missing = try cluster[0].changesets(missingFrom: cluster[1].versionVector, excluding: held)
        #expect(missing.map(\.dot) == all.prefix(all.count - 5).map(\.dot))
        #expect(try cluster[0].changesets(missingFrom: cluster[1].versionVector, limit: 2, excluding: held).count == 2)
        let report = try cluster[1].integrate(missing)
        #expect(report.integrated.count == all.count)
        #expect(try cluster[1].pendingDots().isEmpty)
        try cluster.syncAll()
        #expect(try cluster.converged())
    }

    @Test("A batch of duplicates, integrated or still waiting, commits nothing")
    func duplicatesCommitNothing() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        let all = try history(cluster, writes: 4)
        let waiting = Array(all.suffix(2))
        _ = try cluster[1].integrate(Array(all.prefix(3)) + waiting)
        #expect(try cluster[1].pendingDots() == Set(waiting.map(\.dot)))
        let transaction = cluster[1].environment.statistics.lastTransactionID
        let report = try cluster[1].integrate(Array(all.prefix(3)) + waiting)
        #expect(report.duplicates == 5)
        #expect(report.integrated.isEmpty)
        // LMDB counts only commits that wrote something.
        #expect(cluster[1].environment.statistics.lastTransactionID == transaction)
        // The missing one arrives: that commits.
        #expect(try cluster[1].integrate([all[3]]).integrated.count == 3)
        #expect(cluster[1].environment.statistics.lastTransactionID == transaction + 1)
    }

    @Test("A changeset whose causal dot another one took (a faulty relay) is dropped, and does not hold up its lane")
    func takenCausalDotDoesNotBlock() throws {
        let cluster = try Cluster(1, schema: MergeSemanticsTests.schema)
        let relay = ReplicaID(rawValue: 77)
        let time = HybridTime(milliseconds: 1_700_000_000_000)
        func upload(_ app: UInt64, _ sequence: UInt64, as relaySequence: UInt64, _ key: String) -> Changeset {
            var context = VersionVector()
            if relaySequence > 1 { context.advance(relay, to: relaySequence - 1) }
            return Changeset(
                origin: ReplicaID(rawValue: app), originSequence: sequence, time: time, context: context,
                schemaVersion: 1,
                instructions: [.create(type: "Task", primaryKey: .string(key), fields: [], defaults: [])],
                relay: Dot(origin: relay, sequence: relaySequence))
        }
        let first = upload(50, 1, as: 1, "a")
        let impostor = upload(51, 1, as: 1, "b")  // claims the relay's first dot too
        let second = upload(50, 2, as: 2, "c")
        let report = try cluster[0].integrate([first, impostor, second])
        #expect(report.integrated == [first.dot, second.dot])
        #expect(report.waiting == 0)
        #expect(try cluster[0].pendingDots().isEmpty)
        #expect(try cluster[0].object("Task", primaryKey: .string("c")) != nil)
        #expect(try cluster[0].object("Task", primaryKey: .string("b")) == nil)
    }
}
