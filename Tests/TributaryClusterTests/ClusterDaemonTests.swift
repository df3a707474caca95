import Foundation
import Synchronization
import Testing
import Tributary
import TributaryCluster
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Daemons of one cluster serving apps, with their history in one PostgreSQL: what an app writes through one daemon
/// reaches apps on the others, and an app moves between daemons without a reset.
@Suite(
    "Daemons of a cluster", .serialized,
    .enabled(if: PostgresServer.isAvailable, Comment(rawValue: PostgresServer.unavailable)))
struct ClusterDaemonTests {
    static let schema = LogFollowerTests.schema

    /// A daemon of the cluster of the log `chat` on `server`, listening on a free loopback port.
    struct Daemon {
        var server: SyncServer
        var endpoint: SyncEndpoint
        var log: SharedLog

        var replica: Replica { server.replica }

        func stop() async {
            await server.stop()
            await log.close()
            replica.close()
        }
    }

    static func daemon(
        _ directory: TemporaryDirectory, _ name: String, on postgres: PostgresServer, timeout: Duration = .seconds(120),
        retention: Duration? = nil
    ) async throws -> Daemon {
        try await daemon(directory, name, url: postgres.url, timeout: timeout, retention: retention)
    }

    /// A daemon of the cluster of the log `chat` in the PostgreSQL at `url`; with `retention`, it compacts at start and
    /// then when the test says (its next round is a retention later).
    static func daemon(
        _ directory: TemporaryDirectory, _ name: String, url: String, timeout: Duration, retention: Duration? = nil
    ) async throws -> Daemon {
        var logConfiguration = try SharedLog.Configuration(url: url, log: "chat")
        logConfiguration.timeout = timeout
        let log = try await SharedLog.open(logConfiguration, logger: SharedLogTests.quiet)
        var replicaConfiguration = Replica.Configuration()
        replicaConfiguration.durability = .none
        let replica = try log.openReplica(directory: directory.appending(name), configuration: replicaConfiguration)
        var configuration = SyncServer.Configuration()
        configuration.port = 0
        // The whole suite runs at once on 2 cores: deadlines here are bounds, not what is under test.
        configuration.handshakeDeadline = .seconds(120)
        configuration.clusterPollInterval = .milliseconds(200)
        configuration.retention = retention
        configuration.compactionInterval = retention
        let server = SyncServer(cluster: try LogFollower(log: log, replica: replica), configuration: configuration)
        let port: Int
        do {
            port = try await server.start()
        } catch {
            await server.stop()
            await log.close()
            replica.close()
            throw error
        }
        return Daemon(server: server, endpoint: SyncEndpoint(host: "127.0.0.1", port: port), log: log)
    }

    /// `body`, failing the test after two minutes instead of hanging it.
    static func bounded<T: Sendable>(_ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T
    {
        try await Deadline.within(.seconds(120), what, body)
    }

    static var fastBackoff: SyncConfiguration {
        var configuration = SyncConfiguration()
        configuration.backoff = ReconnectBackoff(initial: .milliseconds(50), maximum: .milliseconds(500))
        return configuration
    }

    static func app(_ directory: TemporaryDirectory, _ name: String) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(directory: directory.appending(name), schema: schema, configuration: configuration)
    }

    /// Waits, for at most two minutes, until `condition` holds; fails naming `what` if it never does.
    static func eventually(_ what: String, _ condition: () throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while try !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("\(what) did not happen within 120 seconds")
                throw CancellationError()
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    static func title(_ replica: Replica, _ key: String) throws -> Value? {
        try replica.object("Task", primaryKey: .string(key))?["title"]
    }

    @Test(
        "Apps on two daemons sync through the shared log; the daemons end with equal replicas, each upload stored once")
    func appsOnTwoDaemonsConverge() async throws {
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        let directory = TemporaryDirectory("cluster-daemons")
        let first = try await Self.daemon(directory, "daemon1", on: postgres)
        let second = try await Self.daemon(directory, "daemon2", on: postgres)
        #expect(first.replica.replicaID == second.replica.replicaID)
        #expect(first.replica.replicaID == first.log.replicaID)
        let a = try Self.app(directory, "a")
        let b = try Self.app(directory, "b")
        let sessionA = a.connect(to: first.endpoint, configuration: Self.fastBackoff)
        let sessionB = b.connect(to: second.endpoint, configuration: Self.fastBackoff)

        for index in 0..<5 {
            try await a.write { txn in
                _ = try txn.create("Task", ["_id": .string("t\(index)"), "title": "from a", "count": 0])
            }
        }
        try await Self.bounded("sessionA's upload") { try await sessionA.waitForUpload() }
        // Acknowledged: PostgreSQL holds the changesets, and the daemon that took them applied them.
        #expect(try Self.title(first.replica, "t4") == "from a")
        try await Self.eventually("a's writes reaching b through the other daemon") {
            try (0..<5).allSatisfy { try Self.title(b, "t\($0)") == "from a" }
        }

        try await b.write { txn in
            try txn.update("Task", primaryKey: .string("t1"), ["title": "from b"])
            try txn.increment(["count"], of: "Task", primaryKey: .string("t2"), by: 3)
        }
        try await Self.bounded("sessionB's upload") { try await sessionB.waitForUpload() }
        try await Self.eventually("b's write reaching a") {
            try Self.title(a, "t1") == "from b"
                && a.object("Task", primaryKey: .string("t2"))?["count"] == .int(3)
        }

        // Both daemons applied the whole log: the same replica, byte for byte.
        let head = try await first.log.head()
        try await Self.bounded("both daemons applying the log") {
            try await first.server.cluster?.waitUntilApplied(head)
            try await second.server.cluster?.waitUntilApplied(head)
        }
        // Every changeset of the two apps (their schema declarations, a's five creates, b's write), each stored once.
        #expect(head == a.versionVector[a.replicaID] + b.versionVector[b.replicaID])
        #expect(head == 8)
        #expect(first.replica.versionVector == second.replica.versionVector)
        #expect(try first.replica.inspection.recordsDigest() == second.replica.inspection.recordsDigest())
        #expect(try a.inspection.recordsDigest() == first.replica.inspection.recordsDigest())
        #expect(try first.replica.verify().passed)
        // Operators see each daemon's position in the log and its lag.
        let metrics = String(decoding: await second.server.metricsExposition(), as: UTF8.self)
        #expect(metrics.contains("tributary_cluster_applied_position 8"), "\(metrics)")
        #expect(metrics.contains("tributary_cluster_lag_entries 0"), "\(metrics)")

        await sessionA.close()
        await sessionB.close()
        await first.stop()
        await second.stop()
        a.close()
        b.close()
    }

    @Test("An app given the cluster's daemons moves to the next when its daemon stops, without a reset or a lost write")
    func appGivenSeveralDaemonsMovesByItself() async throws {
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        let directory = TemporaryDirectory("cluster-endpoints")
        let first = try await Self.daemon(directory, "daemon1", on: postgres)
        let second = try await Self.daemon(directory, "daemon2", on: postgres)
        let a = try Self.app(directory, "a")
        let session = a.connect(toAnyOf: [first.endpoint, second.endpoint], configuration: Self.fastBackoff)
        try await a.write { txn in _ = try txn.create("Task", ["_id": "one", "title": "through 1", "count": 0]) }
        try await Self.bounded("the upload to daemon 1") { try await session.waitForUpload() }
        #expect(session.endpoint == first.endpoint)
        #expect(first.server.sessions.count == 1)

        await first.stop()
        try await a.write { txn in _ = try txn.create("Task", ["_id": "two", "title": "after 1 stopped", "count": 0]) }
        try await Self.bounded("the upload after the move") { try await session.waitForUpload() }
        #expect(session.endpoint == second.endpoint)
        #expect(try Self.title(second.replica, "one") == "through 1")
        #expect(try Self.title(second.replica, "two") == "after 1 stopped")
        #expect(session.clientResets.isEmpty)

        // An empty list stops the session at once, saying why.
        let none = a.connect(toAnyOf: [])
        guard case .disconnected(let error?) = none.state else {
            Issue.record("a session without addresses is \(none.state)")
            return
        }
        #expect(error.message.contains("no daemon address"), "\(error.message)")
        await none.close()
        await session.close()
        await second.stop()
        a.close()
    }

    @Test("An app moves to another daemon of the cluster and goes on syncing, without a reset")
    func appMovesBetweenDaemons() async throws {
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        let directory = TemporaryDirectory("cluster-move")
        let first = try await Self.daemon(directory, "daemon1", on: postgres)
        let second = try await Self.daemon(directory, "daemon2", on: postgres)
        let a = try Self.app(directory, "a")
        let b = try Self.app(directory, "b")
        let sessionB = b.connect(to: first.endpoint, configuration: Self.fastBackoff)

        let onFirst = a.connect(to: first.endpoint, configuration: Self.fastBackoff)
        try await a.write { txn in _ = try txn.create("Task", ["_id": "before", "title": "on daemon 1", "count": 0]) }
        try await Self.bounded("a's upload to daemon 1") { try await onFirst.waitForUpload() }
        try await Self.bounded("a's download from daemon 1") { try await onFirst.waitForDownload() }
        await onFirst.close()

        // The app's position counts the cluster's changesets through daemon 1; daemon 2 takes it as its own.
        let sessionA = a.connect(to: second.endpoint, configuration: Self.fastBackoff)
        try await a.write { txn in _ = try txn.create("Task", ["_id": "after", "title": "on daemon 2", "count": 0]) }
        try await Self.bounded("sessionA's upload") { try await sessionA.waitForUpload() }
        try await Self.eventually("a's write through daemon 2 reaching b on daemon 1") {
            try Self.title(b, "after") == "on daemon 2" && Self.title(b, "before") == "on daemon 1"
        }
        // b writes through daemon 1; a hears of it through daemon 2.
        try await b.write { txn in try txn.update("Task", primaryKey: .string("before"), ["title": "edited by b"]) }
        try await Self.bounded("sessionB's upload") { try await sessionB.waitForUpload() }
        try await Self.eventually("b's write reaching a on daemon 2") { try Self.title(a, "before") == "edited by b" }
        #expect(try a.inspection.recordsDigest() == b.inspection.recordsDigest())

        await sessionA.close()
        await sessionB.close()
        await first.stop()
        await second.stop()
        a.close()
        b.close()
    }

    @Test(
        "While PostgreSQL is down, a daemon keeps serving what it holds and answers uploads with retry later; once it is back, the upload is stored, once"
    )
    func postgresUnreachable() async throws {
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        let directory = TemporaryDirectory("cluster-unreachable")
        // A short timeout, so that an upload meets PostgreSQL's absence within seconds (but not so short that opening
        // the log on a busy machine meets it).
        let daemon = try await Self.daemon(directory, "daemon", on: postgres, timeout: .seconds(30))
        let a = try Self.app(directory, "a")
        let sessionA = a.connect(to: daemon.endpoint, configuration: Self.fastBackoff)
        try await a.write { txn in _ = try txn.create("Task", ["_id": "before", "title": "stored", "count": 0]) }
        try await Self.bounded("sessionA's upload") { try await sessionA.waitForUpload() }

        postgres.kill()
        let states = Task { () -> SyncError? in
            for await state in sessionA.states() {
                if case .disconnected(let error?) = state, error.code == .storage { return error }
            }
            return nil
        }
        try await a.write { txn in _ = try txn.create("Task", ["_id": "during", "title": "waiting", "count": 0]) }
        let refusal = try #require(try await Self.bounded("the upload's refusal") { await states.value })
        #expect(refusal.action == .retry)
        #expect(refusal.message.contains("retry later"), "\(refusal.message)")
        #expect(try Self.title(daemon.replica, "during") == nil)

        // Reads go on: a new app downloads what the daemon holds.
        let c = try Self.app(directory, "c")
        let sessionC = c.connect(to: daemon.endpoint, configuration: Self.fastBackoff)
        try await Self.bounded("sessionC's download") { try await sessionC.waitForDownload() }
        #expect(try Self.title(c, "before") == "stored")

        try await postgres.startServer()
        try await Self.bounded("sessionA's upload") { try await sessionA.waitForUpload() }
        #expect(try Self.title(daemon.replica, "during") == "waiting")
        try await Self.eventually("the write made while PostgreSQL was down reaching c") {
            try Self.title(c, "during") == "waiting"
        }
        #expect(try await daemon.log.head() == a.versionVector[a.replicaID] + c.versionVector[c.replicaID])

        await sessionA.close()
        await sessionC.close()
        await daemon.stop()
        a.close()
        c.close()
    }

    @Test(
        "A primary with a synchronous standby killed mid-upload: the standby promoted, the daemon goes on (through an address that moves, or to the next server its URL names), every acknowledged upload is there",
        .serialized, arguments: [false, true]
    )
    func failoverToSynchronousStandby(namingBothServers: Bool) async throws {
        let primary = try await PostgresServer.start()
        defer { primary.stop() }
        let standby = try await primary.startStandby()
        defer { standby.stop() }
        try await primary.requireSynchronousStandby()
        // The daemon reaches PostgreSQL through one address, as through a virtual IP or a proxy an operator moves; or
        // its URL names both servers, the standby first, and it finds the one that takes writes.
        let address = try await LoopbackForwarder.start(to: primary.port)
        let url =
            namingBothServers
            ? "postgres://tributary@127.0.0.1:\(standby.port),127.0.0.1:\(primary.port)/postgres"
            : "postgres://tributary@127.0.0.1:\(address.port)/postgres"
        let directory = TemporaryDirectory("cluster-failover")
        let daemon = try await Self.daemon(directory, "daemon", url: url, timeout: .seconds(5))
        let a = try Self.app(directory, "a")
        let session = a.connect(to: daemon.endpoint, configuration: Self.fastBackoff)
        let acknowledged = Acknowledged()
        let following = Task {
            for await progress in session.uploadProgress() { acknowledged.raise(progress.transferred) }
        }
        defer { following.cancel() }
        let total = 300
        let writer = Task {
            for index in 0..<total {
                try await a.write { txn in _ = try txn.create("Task", ["_id": .string("t\(index)"), "count": 0]) }
                if index % 8 == 0 { try await Task.sleep(for: .milliseconds(1)) }
            }
        }

        try await Self.eventually("some uploads acknowledged") { acknowledged.value >= 40 }
        primary.kill()
        let acknowledgedAtKill = acknowledged.value
        try await standby.promote()
        if !namingBothServers { address.retarget(to: standby.port) }

        try await Self.bounded("the writes") { try await writer.value }
        try await Self.bounded("session's upload") { try await session.waitForUpload() }
        let own = a.versionVector[a.replicaID]
        func stored(_ condition: String) async throws -> UInt64 {
            let text = try await standby.sql(
                "SELECT count(*) FROM tributary_changesets WHERE log = 'chat' AND origin = "
                    + "\(Int64(bitPattern: a.replicaID.rawValue)) \(condition)")
            return UInt64(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        }
        // Every changeset acknowledged before the primary died is on the promoted standby, and then all of them.
        #expect(try await stored("AND origin_sequence <= \(acknowledgedAtKill)") == acknowledgedAtKill)
        #expect(try await stored("") == own)
        #expect(try daemon.replica.heldSequence(of: a.replicaID) == own)
        #expect(try await daemon.replica.read { try $0.count("Task") } == total)
        print("failover: the primary killed after \(acknowledgedAtKill) of \(own) changesets were acknowledged")

        await session.close()
        await daemon.stop()
        await address.close()
        a.close()
    }

    /// The highest upload progress seen.
    final class Acknowledged: Sendable {
        private let highest = Mutex<UInt64>(0)
        var value: UInt64 { highest.withLock { $0 } }
        func raise(_ value: UInt64) { highest.withLock { $0 = max($0, value) } }
    }

    @Test(
        "A log that went back behind what a daemon applied (commits lost) is refused: no upload is acknowledged, and the daemon does not start on it again"
    )
    func logThatWentBack() async throws {
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        let directory = TemporaryDirectory("cluster-went-back")
        let daemon = try await Self.daemon(directory, "daemon", on: postgres)
        let a = try Self.app(directory, "a")
        let session = a.connect(to: daemon.endpoint, configuration: Self.fastBackoff)
        for index in 0..<3 {
            try await a.write { txn in _ = try txn.create("Task", ["_id": .string("t\(index)"), "count": 0]) }
        }
        try await Self.bounded("session's upload") { try await session.waitForUpload() }
        let applied = try await daemon.log.head()
        #expect(applied == 4)
        // PostgreSQL restored to a point before the last two appends, as an asynchronous failover would leave it.
        try await postgres.sql("DELETE FROM tributary_changesets WHERE log = 'chat' AND seq > 2")
        try await postgres.sql("UPDATE tributary_logs SET head = 2 WHERE log = 'chat'")

        let refusal = Mutex<SyncError?>(nil)
        let watching = Task {
            for await state in session.states() {
                if case .disconnected(let error?) = state, error.code == .storage {
                    refusal.withLock { $0 = error }
                    return
                }
            }
        }
        defer { watching.cancel() }
        try await a.write { txn in _ = try txn.create("Task", ["_id": "after", "count": 0]) }
        try await Self.eventually("the upload refused") { refusal.withLock { $0 != nil } }
        let message = refusal.withLock { $0?.message } ?? ""
        #expect(message.contains("went back"), "\(message)")
        #expect(try daemon.replica.heldSequence(of: a.replicaID) == 4)
        await session.close()
        await daemon.server.stop()
        await daemon.log.close()

        // Started again on its directory, the daemon refuses the log; and again once other daemons have appended past
        // its position: the log holds other changesets where it applied its own.
        let log = try await SharedLogTests.open(postgres)
        for expected in ["its head is 3", "at position 4, where this replica applied"] {
            let restarted = SyncServer(cluster: try LogFollower(log: log, replica: daemon.replica))
            let startError = await #expect(throws: SharedLogError.self) { try await restarted.start() }
            #expect(startError?.message.contains("went back") == true, "\(String(describing: startError))")
            #expect(startError?.message.contains(expected) == true, "\(String(describing: startError))")
            _ = try await log.append([SharedLogTests.changeset(77, 1), SharedLogTests.changeset(77, 2)])
        }
        await log.close()
        daemon.replica.close()
        a.close()
    }
}
