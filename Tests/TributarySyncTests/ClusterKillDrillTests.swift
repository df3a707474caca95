import Foundation
import Testing
import Tributary
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport
import TributaryTestTags

#if canImport(Glibc)
    import Glibc
#endif

/// Three `tributaryd` processes of one cluster on a PostgreSQL of the test's own, twelve apps spread over them
/// writing at random, and one daemon killed with SIGKILL while they upload: its apps move to another daemon, it comes
/// back on its directory, and in the end every app and every daemon holds the same objects, every acknowledged write is
/// in the shared log, and every changeset is there, and in each daemon's log, exactly once.
@Suite(
    "kill -9 in a cluster", .serialized, .tags(.drill),
    .enabled(if: PostgresServer.isAvailable, Comment(rawValue: PostgresServer.unavailable)))
struct ClusterKillDrillTests {
    static let schema = Fixtures.taskSchema
    static let daemons = 3
    static let apps = 12
    /// The transactions each app writes.
    static let writesPerApp = Deep.count(ci: 120, deep: 1_200)

    @Test("A daemon of three killed mid-upload: its apps move to another, nothing acknowledged is lost, nothing twice")
    func daemonKilledMidUpload() async throws {
        let children = DaemonKillDrillTests.Children()
        defer { children.killAll() }
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        var random = SplitMix64(seed: DaemonKillDrillTests.baseSeed ^ 0x636C_7573_7465_72)
        let directory = TemporaryDirectory("cluster-kill")
        let cluster = ["--cluster", postgres.url, "--cluster-log", "drill"]
        var processes: [ChildProcess] = []
        var endpoints: [SyncEndpoint] = []
        for index in 0..<Self.daemons {
            let (process, port) = try await DaemonKillDrillTests.startDaemon(
                directory.appending("daemon\(index)"), arguments: cluster,
                log: directory.appending("daemon\(index)-0.log"), children: children)
            processes.append(process)
            endpoints.append(SyncEndpoint(host: "127.0.0.1", port: port))
        }

        var configuration = Replica.Configuration()
        configuration.durability = .none
        var apps: [Replica] = []
        var sessions: [SyncSession] = []
        var acknowledged: [DaemonKillDrillTests.Gauge] = []
        var followers: [Task<Void, Never>] = []
        for index in 0..<Self.apps {
            let app = try Replica.open(
                directory: directory.appending("app\(index)"), schema: Self.schema, configuration: configuration)
            apps.append(app)
            let session = app.connect(
                to: endpoints[index % Self.daemons], configuration: LoopbackSyncTests.fastBackoff)
            sessions.append(session)
            let gauge = DaemonKillDrillTests.Gauge()
            acknowledged.append(gauge)
            followers.append(gauge.follow(session.uploadProgress()))
        }
        defer { for follower in followers { follower.cancel() } }
        let seeds = (0..<Self.apps).map { _ in random.next() }
        let writers = apps.enumerated().map { index, app in
            Task {
                var random = SplitMix64(seed: seeds[index])
                for write in 0..<Self.writesPerApp {
                    let key = "a\(index)-t\(random.next() % UInt64(Self.writesPerApp / 2))"
                    try await app.write { txn in
                        if try txn.object("Task", primaryKey: .string(key)) == nil {
                            _ = try txn.create("Task", ["_id": .string(key), "title": .string("write \(write)")])
                        } else {
                            try txn.update("Task", primaryKey: .string(key), ["title": .string("write \(write)")])
                        }
                    }
                    if random.next() % 4 == 0 { try await Task.sleep(for: .milliseconds(1)) }
                }
            }
        }

        // SIGKILL a daemon once its apps have some uploads acknowledged (40 between them), while they go on writing.
        let victim = Int(random.next() % UInt64(Self.daemons))
        let victimApps = (0..<Self.apps).filter { $0 % Self.daemons == victim }
        let gauges = acknowledged
        try await LoopbackSyncTests.within(.seconds(180), "the victim's apps' first acknowledgements") {
            while victimApps.reduce(0, { $0 + gauges[$1].value }) < 40 {
                try await Task.sleep(for: .milliseconds(2))
            }
        }
        processes[victim].send(SIGKILL)
        #expect(try await DaemonKillDrillTests.ended(processes[victim], timeout: 30) == .signaled(SIGKILL))

        // Its apps move to the next daemon and go on, without a reset.
        let refuge = (victim + 1) % Self.daemons
        for index in victimApps {
            let session = sessions[index]
            try await LoopbackSyncTests.within(.seconds(120), "closing app \(index)'s session") {
                await session.close()
            }
            sessions[index] = apps[index].connect(to: endpoints[refuge], configuration: LoopbackSyncTests.fastBackoff)
        }
        // Every acknowledgement the killed daemon sent (all it will ever send): PostgreSQL committed each before it
        // was sent.
        let acknowledgedAtKill = victimApps.map { acknowledged[$0].value }
        // The killed daemon comes back on its directory and catches up from the log.
        (processes[victim], _) = try await DaemonKillDrillTests.startDaemon(
            directory.appending("daemon\(victim)"), port: endpoints[victim].port, arguments: cluster,
            log: directory.appending("daemon\(victim)-1.log"), children: children)

        for writer in writers {
            try await LoopbackSyncTests.within(.seconds(300), "the apps' writes") { try await writer.value }
        }
        for (index, session) in sessions.enumerated() {
            try await LoopbackSyncTests.within(.seconds(300), "app \(index)'s upload") {
                try await session.waitForUpload()
            }
        }
        // Every app's own changesets are in the shared log, each once; those acknowledged by the killed daemon too.
        for (position, index) in victimApps.enumerated() {
            let stored = try await Self.storedThrough(postgres, origin: apps[index].replicaID)
            #expect(
                stored >= acknowledgedAtKill[position], "app \(index): acknowledged \(acknowledgedAtKill[position])")
        }
        var total: UInt64 = 0
        for app in apps {
            let own = app.versionVector[app.replicaID]
            total += own
            #expect(try await Self.storedThrough(postgres, origin: app.replicaID) == own)
        }
        let rows = try await postgres.sql("SELECT count(*) FROM tributary_changesets WHERE log = 'drill'")
        #expect(UInt64(rows.trimmingCharacters(in: .whitespacesAndNewlines)) == total, "rows: \(rows)")

        // Everyone converges: each app on every object, each daemon on the whole log.
        let replicas = apps
        try await LoopbackSyncTests.within(.seconds(300), "the apps to converge") {
            let apps = replicas
            while true {
                let digests = try apps.map { try $0.inspection.recordsDigest() }
                let counts = try apps.map { try $0.read { try $0.count("Task") } }
                if Set(digests).count == 1, counts.allSatisfy({ $0 == counts[0] }),
                    try apps.allSatisfy({ app in
                        try apps.allSatisfy { try app.heldSequence(of: $0.replicaID) == $0.versionVector[$0.replicaID] }
                    })
                {
                    return
                }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        for session in sessions { await session.close() }
        for process in processes {
            process.send(SIGTERM)
            #expect(
                try await DaemonKillDrillTests.ended(process, timeout: 30) == .exited(0), "\(process.standardError)")
        }
        let digest = try apps[0].inspection.recordsDigest()
        for index in 0..<Self.daemons {
            let daemon = try DaemonKillDrillTests.openReadOnly(directory.appending("daemon\(index)"))
            defer { daemon.close() }
            #expect(try daemon.inspection.recordsDigest() == digest, "daemon \(index)")
            // Each app changeset adopted once: the daemon's log holds exactly the shared log's entries.
            #expect(daemon.lastLocalSequence == total, "daemon \(index)")
            for app in apps {
                #expect(try daemon.heldSequence(of: app.replicaID) == app.versionVector[app.replicaID])
            }
            let report = try daemon.verify()
            #expect(report.passed, "daemon \(index): \(report)")
        }
        print(
            "cluster kill: daemon \(victim) killed with \(acknowledgedAtKill) of its apps' changesets acknowledged; "
                + "\(total) changesets in all, each stored once and applied once by each of \(Self.daemons) daemons")
        for app in apps { app.close() }
    }

    /// The highest origin sequence of `origin` the shared log holds.
    static func storedThrough(_ postgres: PostgresServer, origin: ReplicaID) async throws -> UInt64 {
        let text = try await postgres.sql(
            "SELECT coalesce(max(origin_sequence), 0) FROM tributary_changesets WHERE log = 'drill' AND origin = "
                + "\(Int64(bitPattern: origin.rawValue))")
        return UInt64(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    }
}
