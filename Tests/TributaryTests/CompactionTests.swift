import Foundation
import Testing
import TributaryLog
import TributaryModel
import TributaryStorage
import TributaryTestSupport

@testable import Tributary

/// A relay's log compacted into a base state: what it keeps serving, what it refuses, and replicas that start from
/// its base.
@Suite("Log compaction")
struct CompactionTests {
    let task = PrimaryKey.string("t")

    /// Whether every replica shows the same objects (relays and apps store different merge metadata, so their
    /// records differ byte for byte).
    static func sameObjects(_ replicas: [Replica]) throws -> Bool {
        let shown = try replicas.map { replica in
            try ["Task", "Person"].flatMap { type in try replica.objects(type).map(\.description).sorted() }
        }
        return shown.allSatisfy { $0 == shown[0] }
    }

    /// Replica 0 is the relay; the others are apps that sync with it only.
    func sync(_ cluster: Cluster, app: Int) throws {
        try RelayTests.upload(cluster, app: app, to: 0)
        try cluster[app].integrate(try cluster[0].changesets(missingFrom: cluster[app].versionVector))
    }

    /// Apps 1 and 2 write creates, field writes, counters, list edits and deletes, syncing through the relay.
    func writeHistory(_ cluster: Cluster, rounds: Int) throws {
        for round in 0..<rounds {
            for app in [1, 2] {
                try cluster[app].write { txn in
                    let key = PrimaryKey.string("t\(round % 5)")
                    if try txn.object("Task", primaryKey: key) == nil {
                        try txn.create("Task", ["_id": .string("t\(round % 5)"), "title": .string("round \(round)")])
                    }
                    try txn.update("Task", primaryKey: key, ["notes": .string("app \(app) round \(round)")])
                    try txn.increment(["count"], of: "Task", primaryKey: key, by: Int64(app))
                    try txn.append(.string("tag \(round)"), to: ["tags"], of: "Task", primaryKey: key)
                    if round % 7 == 6 { _ = try txn.delete("Task", primaryKey: .string("t\((round + 1) % 5)")) }
                }
                try sync(cluster, app: app)
                cluster.advanceClocks(byMilliseconds: 3)
            }
        }
        for app in [1, 2, 1] { try sync(cluster, app: app) }
    }

    @Test(
        "A compacted relay verifies, rebuilds its views from the base, and keeps syncing with apps that hold the base")
    func compactedRelayKeepsSyncing() throws {
        let cluster = try Cluster(3, schema: MergeSemanticsTests.schema)
        try writeHistory(cluster, rounds: 20)
        let relay = cluster[0]
        let head = relay.lastLocalSequence
        #expect(try Self.sameObjects(cluster.replicas))

        let outcome = try #require(try relay.compact(through: head - 3, recordsInMemory: 4))
        #expect(outcome.compaction.through == head - 3)
        #expect(outcome.droppedEntries == Int(head) - 3)
        #expect(outcome.baseRecords > 0)
        #expect(try relay.environment.read { try relay.log.count(in: $0) } == 3)
        // Compaction keeps the replica's format: the marker says the log starts after a base.
        #expect(try relay.summary().formatVersion == ReplicaFormat.current)
        let report = try relay.verify()
        #expect(report.passed, "\(report)")
        #expect(try relay.verify(recordsInMemory: 2).passed)
        // The state before the cut is gone, and a replay of the entries alone cannot rebuild the replica.
        #expect {
            _ = try relay.objects(asOf: 2)
        } throws: { error in
            (error as? TributaryError)?.code == .historyCompacted
        }
        #expect {
            try relay.replay(through: head, into: cluster.directory.appending("copy"))
        } throws: { error in
            (error as? TributaryError)?.message.contains("replaced by a base state") == true
        }
        try relay.rebuildViews(recordsInMemory: 3)
        #expect(try Self.sameObjects(cluster.replicas))

        // The apps hold the base: they go on writing and syncing, including changes to objects only the base holds.
        try writeHistory(cluster, rounds: 6)
        #expect(try Self.sameObjects(cluster.replicas))
        #expect(try relay.verify().passed)

        // A second compaction starts from the first one's base.
        let second = try #require(try relay.compact(through: relay.lastLocalSequence - 1))
        #expect(second.compaction.generation == 2)
        #expect(try relay.verify().passed)
        try writeHistory(cluster, rounds: 2)
        #expect(try Self.sameObjects(cluster.replicas))
        #expect(try relay.verify().passed)
        // Nothing new to drop: no compaction.
        #expect(try relay.compact(through: second.compaction.through) == nil)
    }

    @Test("A changeset the base holds is not taken again when an app uploads it a second time")
    func reuploadOfCompactedChangesetIsDropped() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        try cluster[1].write { try $0.create("Task", ["_id": "t"]) }
        try cluster[1].write { try $0.increment(["count"], of: "Task", primaryKey: task, by: 5) }
        let uploads = try cluster[1].changesets(missingFrom: cluster[0].versionVector, origins: [cluster[1].replicaID])
        try cluster[0].adopt(uploads)
        try cluster[0].write { try $0.update("Task", primaryKey: task, ["title": "relay"]) }
        try cluster[0].compact(through: cluster[0].lastLocalSequence - 1)
        // The app never heard the acknowledgement: it uploads the same changesets again.
        try cluster[0].adopt(uploads)
        #expect(try cluster[0].object("Task", primaryKey: task)?["count"] == 5)
        #expect(try cluster[0].heldSequence(of: cluster[1].replicaID) == cluster[1].versionVector[cluster[1].replicaID])
        #expect(try cluster[0].verify().passed)
    }

    @Test("A replica that lacks what only the base holds is refused; an empty one starts from the base")
    func behindReplicaRefusedFreshOneInstallsBase() throws {
        let cluster = try Cluster(4, schema: MergeSemanticsTests.schema)
        // App 3 syncs once, early, then stays away.
        try cluster[3].write { try $0.create("Person", ["_id": "p3", "name": "early"]) }
        try sync(cluster, app: 3)
        try writeHistory(cluster, rounds: 10)
        let relay = cluster[0]
        try relay.compact(through: relay.lastLocalSequence - 1)

        #expect {
            _ = try relay.changesets(missingFrom: cluster[3].versionVector)
        } throws: { error in
            (error as? TributaryError)?.code == .historyCompacted
        }
        #expect(throws: TributaryError.self) { try relay.export(missingFrom: VersionVector()) }

        // A new replica starts from the base, then takes the entries after it.
        let base = try #require(try relay.baseState())
        var configuration = Replica.Configuration()
        configuration.replicaID = ReplicaID(rawValue: 99)
        configuration.clock = ManualClock(milliseconds: 1_699_999_999_000)  // behind every stamp in the base
        let fresh = try Replica.open(
            directory: cluster.directory.appending("fresh"), schema: MergeSemanticsTests.schema,
            configuration: configuration)
        try fresh.installBase(base)
        try fresh.integrate(try relay.changesets(missingFrom: fresh.versionVector))
        #expect(try Self.sameObjects([relay, fresh]))
        #expect(try fresh.verify().passed)
        try fresh.rebuildViews()
        #expect(try Self.sameObjects([relay, fresh]))

        // Its own writes are stamped after what the base holds (its clock is behind), so they win, and reach
        // the others through the relay.
        try fresh.write { try $0.update("Task", primaryKey: .string("t1"), ["title": "from the fresh replica"]) }
        try relay.adopt(try fresh.changesets(missingFrom: relay.versionVector, origins: [fresh.replicaID]))
        try sync(cluster, app: 1)
        #expect(try cluster[1].object("Task", primaryKey: .string("t1"))?["title"] == "from the fresh replica")

        // A replica that holds anything cannot take a base.
        #expect {
            try cluster[1].installBase(base)
        } throws: { error in
            (error as? TributaryError)?.code == .invalidValue
        }
    }

    @Test("A base read and kept in parts; a transfer cut off midway leaves nothing read, and the next starts over")
    func baseInParts() throws {
        let cluster = try Cluster(3, schema: MergeSemanticsTests.schema)
        try writeHistory(cluster, rounds: 12)
        let relay = cluster[0]
        try relay.compact(through: relay.lastLocalSequence - 1)
        var configuration = Replica.Configuration()
        configuration.replicaID = ReplicaID(rawValue: 77)
        let fresh = try Replica.open(directory: cluster.directory.appending("parts"), configuration: configuration)
        defer { fresh.close() }

        func transfer(stoppingAfter parts: Int?) throws -> Int {
            let reader = try #require(try relay.baseReader())
            var number = 0
            while let part = try reader.next(maximumBytes: 200) {
                try fresh.stageBasePart(records: part.records, adoptions: part.adoptions, first: number == 0)
                number += 1
                if number == parts { return number }
            }
            try fresh.finishBase(
                schema: reader.schema, vector: reader.compaction.vector, held: reader.compaction.held,
                latest: reader.compaction.latest)
            return number
        }
        // Cut off after two parts: the replica reads as it was, holding nothing of the base.
        #expect(try transfer(stoppingAfter: 2) == 2)
        #expect(try fresh.logCompaction() == nil)
        #expect(fresh.schema.types.isEmpty)
        #expect(try fresh.verify().passed)
        // Started over: many parts, and the replica equals the relay once it takes the rest.
        #expect(try transfer(stoppingAfter: nil) > 3)
        try fresh.integrate(try relay.changesets(missingFrom: fresh.versionVector))
        #expect(try Self.sameObjects([relay, fresh]))
        #expect(try fresh.verify().passed)
        #expect(try fresh.inspection.recordsDigest() == relay.inspection.recordsDigest())
    }

    @Test("A replica with a base, or holding what a base holds, cannot take one: nothing of it is touched")
    func refusedBases() throws {
        let cluster = try Cluster(3, schema: MergeSemanticsTests.schema)
        // Replica 1 is an app that uploads its changesets to two relays, 0 and 2, before it hears of either.
        try cluster[1].write { try $0.create("Task", ["_id": "t"]) }
        try cluster[1].write { try $0.increment(["count"], of: "Task", primaryKey: task, by: 3) }
        let uploads = try cluster[1].changesets(missingFrom: VersionVector(), origins: [cluster[1].replicaID])
        try cluster[0].adopt(uploads)
        try cluster[2].adopt(uploads)
        try cluster[0].write { try $0.update("Task", primaryKey: task, ["title": "relay"]) }
        try cluster[0].compact(through: cluster[0].lastLocalSequence - 1)
        let base = try #require(try cluster[0].baseState())

        // Relay 2's vector counts only itself (it adopted the app's changesets), but it holds what the base holds.
        let relayBefore = try cluster[2].viewDigest()
        #expect {
            try cluster[2].installBase(base)
        } throws: { error in
            (error as? TributaryError)?.code == .invalidValue
                && (error as? TributaryError)?.message.contains("which the base state holds too") == true
        }
        #expect(try cluster[2].viewDigest() == relayBefore)
        #expect(try cluster[2].logCompaction() == nil)
        #expect(try cluster[2].object("Task", primaryKey: task)?["count"] == 3)

        // A replica that starts from a base keeps it when another base arrives (a repeated first part included).
        var configuration = Replica.Configuration()
        configuration.replicaID = ReplicaID(rawValue: 55)
        let fresh = try Replica.open(directory: cluster.directory.appending("fresh"), configuration: configuration)
        defer { fresh.close() }
        try fresh.installBase(base)
        let installed = try fresh.viewDigest()
        #expect {
            try fresh.stageBasePart(records: base.records, adoptions: base.adoptions, first: true)
        } throws: { error in
            (error as? TributaryError)?.code == .invalidValue
        }
        #expect(try fresh.viewDigest() == installed)
        #expect(try fresh.verify().passed)
        // And the relay, compacted, refuses one too: its own base stays.
        #expect(throws: TributaryError.self) {
            try cluster[0].stageBasePart(records: base.records, adoptions: base.adoptions, first: true)
        }
        #expect(try cluster[0].verify().passed)
    }

    @Test("Reports cover the time since the daemon kept them without a gap")
    func reportsCoverage() throws {
        let cluster = try Cluster(1, schema: MergeSemanticsTests.schema)
        let replica = cluster[0]
        #expect(try replica.syncReportsCoverage(now: 1_000, gap: 100) == 1_000)
        #expect(try replica.syncReportsCoverage(now: 1_090, gap: 100) == 1_000)
        #expect(try replica.syncReportsCoverage(now: 1_180, gap: 100) == 1_000)
        // Rounds more than the gap apart: the daemon was not listening, and coverage starts again.
        #expect(try replica.syncReportsCoverage(now: 1_400, gap: 100) == 1_400)
        #expect(try replica.syncReportsCoverage(now: 1_450, gap: 100) == 1_400)
    }

    @Test("The compaction marker round-trips and a damaged one is named")
    func markerEncoding() throws {
        let marker = LogCompaction(
            through: 41, chain: 0xdead_beef, vector: VersionVector([(ReplicaID(rawValue: 7), 12)]),
            held: VersionVector([(ReplicaID(rawValue: 7), 12), (ReplicaID(rawValue: 9), 3)]),
            latest: HybridTime(rawValue: 123_456), time: 1_800_000_000, generation: 3)
        #expect(try LogCompaction(decoding: marker.encoded()) == marker)
        #expect {
            _ = try LogCompaction(decoding: Array(marker.encoded().dropLast(3)))
        } throws: { error in
            (error as? LogError)?.message.contains("compaction marker is damaged") == true
        }
    }
}
