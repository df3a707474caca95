import Foundation
import Synchronization
import Testing
import Tributary
import TributaryCluster
import TributaryDaemon
import TributaryLog
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// What keeps a cluster's history right and bounded over years: a new epoch after the database lost commits,
/// compaction under a retention shared by every daemon, and new daemons started from another's replica.
@Suite(
    "Upkeep of a cluster", .serialized,
    .enabled(if: PostgresServer.isAvailable, Comment(rawValue: PostgresServer.unavailable)))
struct ClusterUpkeepTests {
    typealias Cluster = ClusterDaemonTests

    static func seconds() -> UInt64 { UInt64(Date().timeIntervalSince1970) }

    static func create(_ app: Replica, _ key: String, count: Int64 = 0) async throws {
        try await app.write { txn in
            _ = try txn.create("Task", ["_id": .string(key), "title": .string(key), "count": .int(count)])
        }
    }

    /// The session's first client reset, once the session is active again after it.
    static func firstReset(_ session: SyncSession) async throws -> ClientResetReport {
        try await Cluster.bounded("a client reset") {
            for await state in session.states() {
                if let report = session.clientResets.first, case .active = state { return report }
                if case .disconnected(let error?) = state, error.action != .retry { throw error }
            }
            throw SyncError(.unavailable, .fatal, "the session closed before a reset")
        }
    }

    /// Runs `daemon`'s retention rounds at `time` until the log's report of `app` says it holds all it does: a daemon
    /// hears what an app holds from its acknowledgements, which trail its downloads.
    static func roundsUntilReported(
        _ app: Replica, by daemon: Cluster.Daemon, log: SharedLog, asOf time: UInt64
    ) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while try await log.syncReports(since: 0)[app.replicaID]?.vector.includes(app.versionVector) != true {
            guard ContinuousClock.now < deadline else {
                Issue.record("the report of \(app.replicaID) never reached the log")
                throw CancellationError()
            }
            _ = try await daemon.server.compactHistory(asOf: time, minimumFraction: 0)
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test(
        "After the log lost commits, a renewed epoch starts a new history: daemons start on empty directories, and an app that synced before is reset and writes again what the log lost"
    )
    func renewedEpoch() async throws {
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        let directory = TemporaryDirectory("cluster-renewed-epoch")
        let daemon = try await Cluster.daemon(directory, "daemon", on: postgres)
        let a = try Cluster.app(directory, "a")
        let first = a.connect(to: daemon.endpoint, configuration: Cluster.fastBackoff)
        for key in ["t0", "t1", "t2"] { try await Self.create(a, key) }
        try await Cluster.bounded("a's upload") { try await first.waitForUpload() }
        await first.close()
        await daemon.stop()
        // The database restored to a point before the last two appends: t1 and t2 are lost from the log.
        try await postgres.sql("DELETE FROM tributary_changesets WHERE log = 'chat' AND seq > 2")
        try await postgres.sql("UPDATE tributary_logs SET head = 2 WHERE log = 'chat'")

        let log = try await SharedLogTests.open(postgres)
        let retired = log.epoch
        let epoch = try await log.renewEpoch()
        #expect(epoch != retired)
        // A second renewal through the same (now stale) handle is refused: one renewal per loss.
        let twice = await #expect(throws: SharedLogError.self) { try await log.renewEpoch() }
        #expect(twice?.code == .incompatible)
        // An append judged under the retired epoch is refused by the database itself.
        let stale = await #expect(throws: SharedLogError.self) {
            try await log.append([SharedLogTests.changeset(88, 1)])
        }
        #expect(stale?.message.contains("new epoch") == true, "\(String(describing: stale))")
        await log.close()

        let reopened = try await SharedLogTests.open(postgres)
        #expect(reopened.epoch == epoch)
        #expect(reopened.retiredEpochs == [retired])
        // The old directory holds the retired epoch's replica: refused, with what to do.
        let refused = #expect(throws: SharedLogError.self) {
            try reopened.openReplica(directory: directory.appending("daemon"))
        }
        #expect(refused?.message.contains("empty directory") == true, "\(String(describing: refused))")
        await reopened.close()

        let fresh = try await Cluster.daemon(directory, "fresh", on: postgres)
        #expect(fresh.replica.replicaID == SharedLog.replicaID(of: epoch))
        #expect(try Cluster.title(fresh.replica, "t0") == .string("t0"))
        #expect(try Cluster.title(fresh.replica, "t1") == nil)
        let oldID = a.replicaID
        let session = a.connect(to: fresh.endpoint, configuration: Cluster.fastBackoff)
        let report = try await Self.firstReset(session)
        #expect(report.previousReplicaID == oldID)
        #expect(report.reason.contains("retired epoch"), "\(report.reason)")
        #expect(report.recovered)
        let replica = session.replica
        try await Cluster.bounded("the recovered upload") { try await session.waitForUpload() }
        // What the log lost, the app wrote again; the daemon holds all of it.
        for key in ["t0", "t1", "t2"] {
            #expect(try Cluster.title(replica, key) == .string(key))
            #expect(try Cluster.title(fresh.replica, key) == .string(key))
        }
        // A second app, new to the cluster, syncs without a reset.
        let b = try Cluster.app(directory, "b")
        let sessionB = b.connect(to: fresh.endpoint, configuration: Cluster.fastBackoff)
        try await Cluster.bounded("b's download") { try await sessionB.waitForDownload() }
        #expect(try Cluster.title(b, "t2") == .string("t2"))
        #expect(sessionB.clientResets.isEmpty)
        await session.close()
        await sessionB.close()
        await fresh.stop()
        replica.close()
        b.close()
    }

    @Test(
        "After a compacted log lost commits, a new epoch starts from the replica of the daemon that applied the most: what it held and what the log held are kept, and its app syncs on without a reset"
    )
    func renewedEpochFromAReplica() async throws {
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        let directory = TemporaryDirectory("cluster-renewed-from-replica")
        let daemon = try await Cluster.daemon(directory, "daemon", on: postgres, retention: .seconds(3_600))
        let a = try Cluster.app(directory, "a")
        let session = a.connect(to: daemon.endpoint, configuration: Cluster.fastBackoff)
        for index in 0..<4 { try await Self.create(a, "a\(index)") }
        try await Cluster.bounded("a's upload") { try await session.waitForUpload() }
        try await Cluster.bounded("a's download") { try await session.waitForDownload() }
        // The log is compacted through everything the daemon applied.
        let log = try await SharedLogTests.open(postgres)
        let start = Self.seconds()
        try await Self.roundsUntilReported(a, by: daemon, log: log, asOf: start)
        _ = try await daemon.server.compactHistory(asOf: start, minimumFraction: 0)
        let compacted = try await log.compactedThrough()
        #expect(compacted > 0)
        // Two more writes, acknowledged and applied by the daemon.
        for index in 4..<6 { try await Self.create(a, "a\(index)") }
        try await Cluster.bounded("a's second upload") { try await session.waitForUpload() }
        try await Cluster.bounded("a's second download") { try await session.waitForDownload() }
        await session.close()
        let applied = daemon.replica.versionVector
        await daemon.stop()

        // An asynchronous failover lost the last two appends; a daemon that noticed nothing then appended b's write.
        let head = try await log.head()
        #expect(head >= compacted + 2)
        try await postgres.sql("DELETE FROM tributary_changesets WHERE log = 'chat' AND seq > \(head - 2)")
        try await postgres.sql(
            "UPDATE tributary_logs SET head = \(head - 2), durable_head = \(head - 2) WHERE log = 'chat'")
        let b = try Cluster.app(directory, "b")
        try await Self.create(b, "b0")
        let uploadsOfB = try LogFollowerTests.uploads(of: b)
        _ = try await log.append(uploadsOfB)
        // The log alone no longer builds a history.
        let alone = await #expect(throws: SharedLogError.self) { try await log.renewEpoch() }
        #expect(alone?.code == .compacted)
        #expect(alone?.message.contains("--from-replica") == true, "\(String(describing: alone))")

        // The daemon's replica, read only, starts the new epoch.
        var readOnly = Replica.Configuration()
        readOnly.readOnly = true
        let source = try Replica.open(directory: directory.appending("daemon"), configuration: readOnly)
        let retiredID = log.replicaID
        let renewed = try await log.renewEpoch(from: source, into: directory.appending("renewed"))
        source.close()
        #expect(renewed.carried == uploadsOfB.count)
        #expect(renewed.heldThrough == applied[retiredID])
        #expect(renewed.replica.versionVector == applied)
        renewed.replica.close()
        await log.close()
        let reopened = try await SharedLogTests.open(postgres)
        #expect(reopened.epoch == renewed.epoch)
        #expect(reopened.retiredReplicas[retiredID] == applied[retiredID])
        #expect(try await reopened.compactedThrough() == renewed.position)
        #expect(try await reopened.head() == renewed.position + UInt64(uploadsOfB.count))
        // A daemon of the retired epoch is refused its old directory.
        let old = #expect(throws: SharedLogError.self) {
            try reopened.openReplica(directory: directory.appending("daemon"))
        }
        #expect(old?.message.contains("copy of another daemon's replica") == true, "\(String(describing: old))")
        await reopened.close()

        // Every daemon starts from a copy of the new epoch's replica: what the log lost and what only the log held.
        let fresh = try await Cluster.daemon(directory, "renewed", on: postgres)
        #expect(fresh.replica.replicaID == SharedLog.replicaID(of: renewed.epoch))
        try await Cluster.eventually("the new epoch's daemon applying b's write the log kept") {
            try Cluster.title(fresh.replica, "b0") == .string("b0")
        }
        for index in 0..<6 { #expect(try Cluster.title(fresh.replica, "a\(index)") == .string("a\(index)")) }
        // a held no more than the daemon did: it syncs on, without a reset, and its writes reach the new epoch.
        let back = a.connect(to: fresh.endpoint, configuration: Cluster.fastBackoff)
        try await Cluster.eventually("a receiving b's write") { try Cluster.title(a, "b0") == .string("b0") }
        try await Self.create(a, "a6")
        try await Cluster.bounded("a's upload to the new epoch") { try await back.waitForUpload() }
        #expect(try Cluster.title(fresh.replica, "a6") == .string("a6"))
        #expect(back.clientResets.isEmpty)
        #expect(try fresh.replica.verify().passed)
        await back.close()
        await fresh.stop()
        a.close()
        b.close()
    }

    @Test(
        "With a retention, each daemon compacts its replica through what devices reported to any daemon, one daemon drops the log entries every daemon applied, and a new daemon starts from a copy of another's replica, fetched from it"
    )
    func compaction() async throws {
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        let directory = TemporaryDirectory("cluster-compaction")
        let window = Duration.seconds(3_600)
        let d1 = try await Cluster.daemon(directory, "d1", on: postgres, retention: window)
        let d2 = try await Cluster.daemon(directory, "d2", on: postgres, retention: window)
        let a = try Cluster.app(directory, "a")
        let b = try Cluster.app(directory, "b")
        let sessionA = a.connect(to: d1.endpoint, configuration: Cluster.fastBackoff)
        let sessionB = b.connect(to: d2.endpoint, configuration: Cluster.fastBackoff)
        for index in 0..<10 { try await Self.create(a, "a\(index)") }
        for index in 0..<10 { try await Self.create(b, "b\(index)") }
        try await Cluster.bounded("a's upload") { try await sessionA.waitForUpload() }
        try await Cluster.bounded("b's upload") { try await sessionB.waitForUpload() }
        try await Cluster.eventually("a and b hold each other's writes") {
            try Cluster.title(a, "b9") == .string("b9") && Cluster.title(b, "a9") == .string("a9")
        }
        try await Cluster.eventually("both daemons applied the whole log") {
            d1.replica.versionVector == d2.replica.versionVector
        }
        try await Cluster.bounded("a's download") { try await sessionA.waitForDownload() }

        // A round on each daemon: each shares what its apps hold, and one of them drops the log's entries, which
        // both daemons applied.
        let start = Self.seconds()
        let log = try await SharedLogTests.open(postgres)
        // d1 hears what a holds from a's acknowledgements, which trail its downloads: rounds until a's report in the
        // log says a holds everything it does.
        try await Self.roundsUntilReported(a, by: d1, log: log, asOf: start)
        _ = try await d2.server.compactHistory(asOf: start, minimumFraction: 0)
        let head = try await log.head()
        #expect(try await log.compactedThrough() == head)
        #expect(try await log.followers().count >= 2)
        let gone = await #expect(throws: SharedLogError.self) { try await log.entries(after: 0, limit: 10) }
        #expect(gone?.code == .compacted)

        // a goes away holding what it holds now; b writes on.
        await sessionA.close()
        for index in 0..<10 { try await Self.create(b, "c\(index)") }
        try await Cluster.bounded("b's second upload") { try await sessionB.waitForUpload() }
        try await Cluster.eventually("d2 applied b's writes") { try Cluster.title(d2.replica, "c9") == .string("c9") }

        try await Cluster.bounded("b's download") { try await sessionB.waitForDownload() }
        try await Self.roundsUntilReported(b, by: d2, log: log, asOf: start)

        // A retention later, d2 compacts its replica: through what a (which never connected to d2) holds, not
        // through what b holds.
        #expect(try await d2.server.compactHistory(asOf: start + 3_600, minimumFraction: 0))
        let compaction = try #require(try d2.replica.logCompaction())
        let kept = d2.replica.lastLocalSequence - compaction.through
        #expect(kept >= 10, "d2 kept \(kept) entries; a lacks b's last 10 changesets")
        #expect(compaction.through >= 20, "d2 compacted through \(compaction.through)")

        // a comes back, to d2: no reset, and it receives what it missed.
        let back = a.connect(to: d2.endpoint, configuration: Cluster.fastBackoff)
        try await Cluster.eventually("a receiving b's later writes through d2") {
            try Cluster.title(a, "c9") == .string("c9")
        }
        #expect(back.clientResets.isEmpty)

        // A new daemon on an empty directory cannot build its replica from the compacted log: refused, with what to do.
        let empty = await #expect(throws: SharedLogError.self) {
            _ = try await Cluster.daemon(directory, "d3", on: postgres)
        }
        #expect(empty?.code == .compacted)
        #expect(empty?.message.contains("copy of another daemon's replica") == true, "\(String(describing: empty))")

        // From a copy of d2's replica, fetched from d2 while it runs (tributaryd --copy-from), it starts and follows
        // the log from the copy's position.
        let fetched = try await Cluster.bounded("the copy of d2's replica") {
            try await ReplicaCopy.fetch(from: d2.endpoint, authorization: nil, into: directory.appending("d3copy"))
        }
        #expect(fetched.replica == "\(d2.replica.replicaID)")
        let d3 = try await Cluster.daemon(directory, "d3copy", on: postgres)
        try await Self.create(b, "after-copy")
        try await Cluster.bounded("b's third upload") { try await sessionB.waitForUpload() }
        try await Cluster.eventually("the copied daemon applying what was appended after the copy") {
            try Cluster.title(d3.replica, "after-copy") == .string("after-copy")
        }
        try await Cluster.eventually("three daemons at one position") {
            d3.replica.versionVector == d2.replica.versionVector && d1.replica.versionVector == d2.replica.versionVector
        }
        #expect(try d3.replica.inspection.recordsDigest() == d1.replica.inspection.recordsDigest())

        // A compacted log cannot be given a new epoch: the start of its history is gone from it.
        let renewal = await #expect(throws: SharedLogError.self) { try await log.renewEpoch() }
        #expect(renewal?.code == .compacted, "\(String(describing: renewal))")
        #expect(try await SharedLogTests.open(postgres).epoch == log.epoch)

        await back.close()
        await sessionB.close()
        await log.close()
        for daemon in [d1, d2, d3] { await daemon.stop() }
        a.close()
        b.close()
    }
}
