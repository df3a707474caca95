import Foundation
import Logging
import Synchronization
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport
import TributaryTestTags

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// kill -9 over the network, on loopback: processes at either end of a sync session die with SIGKILL mid-transfer,
/// come back on the same directory, and nothing acknowledged is lost, nothing is integrated twice, every replica
/// verifies.
///
/// 1. `tributaryd` (a child process) is killed while an app in this process uploads thousands of one-object
///    transactions, written while connected. Its directory, opened after each kill, holds at least every upload the
///    app saw acknowledged, each once; restarted on the same port, the app's session reconnects by itself and uploads
///    the rest, and the daemon's log then holds each of the app's changesets exactly once.
/// 2. `tributaryd` is killed while it sends a large download (its directory seeded beforehand) to an app whose small
///    window keeps one batch in flight at a time. Restarted, the app converges: the same objects, each changeset
///    integrated once.
/// 3. `tributary-demo sync` (a child process) is killed shortly after it connects, or right after its messages are
///    committed in its replica (a reader in this process sees the commit), a few times on one directory, against a
///    daemon in this process; run once more with `--messages 0`, it uploads every message it committed, and the
///    daemon holds exactly those.
/// 4. A flexible-sync bootstrap is cut short by a kill at either end: `tributaryd` killed while it sends one, or the
///    app (`tributary-crash-child subscribe`) killed while it receives one. The app holds nothing of the set or all
///    of it, never part; once the killed process runs again on its directory, the set completes with exactly the
///    objects it covers.
///
/// The daemon is killed twice per scenario (the second kill at a later point, or right after the reconnection) and the
/// app three times; scenario 4 kills each once. Every child is started by the test and killed when it ends, however it
/// ends. `TRIBUTARY_SEED` replays the workloads and kill points (the timing is real time, so not exactly);
/// `TRIBUTARY_DEEP=1` writes ten times more, kills the daemon six times and the app twelve.
@Suite("kill -9 over the network", .serialized, .tags(.drill))
struct DaemonKillDrillTests {
    static let schema = Fixtures.taskSchema

    /// The app's transactions in scenario 1.
    static let uploads = Deep.count(ci: 2_000, deep: 20_000)
    /// The transactions the daemon holds before the app of scenario 2 connects.
    static let seeded = Deep.count(ci: 3_000, deep: 30_000)
    /// The kills of the daemon in scenarios 1 and 2.
    static let daemonKills = Deep.count(ci: 2, deep: 6)
    /// The kills of the app process in scenario 3, and the messages each of its runs writes.
    static let appKills = Deep.count(ci: 3, deep: 12)
    static let messagesPerRun = 3_000
    /// How long a transfer may take before the test fails instead of hanging: in isolation one takes a second or two,
    /// but a CI run that loads both cores with the rest of the suite once took 166 s to acknowledge a few hundred.
    static let patience: Duration = .seconds(600)

    /// `TRIBUTARY_SEED`, or one drawn from the clock (and printed) per test process.
    static let baseSeed = SplitMix64.seedFromEnvironment(default: UInt64(UInt32(truncatingIfNeeded: time(nil))))

    // MARK: 1. The daemon killed during an upload

    @Test("tributaryd killed during an upload: restarted, it holds every acknowledged changeset, and all of them once")
    func daemonKilledDuringUpload() async throws {
        let children = Children()
        defer { children.killAll() }
        let started = ContinuousClock.now
        var random = SplitMix64(seed: Self.baseSeed ^ 0x75_706C_6F61_64)
        let directory = TemporaryDirectory("kill-upload")
        let daemonDirectory = directory.appending("daemon")
        var (daemon, port) = try await Self.startDaemon(
            daemonDirectory, log: directory.appending("daemon-0.log"), children: children)
        let endpoint = SyncEndpoint(host: "127.0.0.1", port: port)

        // The app's own durability does not matter here (the app is not killed): no disk sync per transaction.
        var replicaConfiguration = Replica.Configuration()
        replicaConfiguration.durability = .none
        let app = try Replica.open(
            directory: directory.appending("app"), schema: Self.schema, configuration: replicaConfiguration)
        defer { app.close() }
        let session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        defer { Task { await session.close() } }
        let acknowledged = Gauge()
        let follower = acknowledged.follow(session.uploadProgress())
        defer { follower.cancel() }

        let total = Self.uploads
        let written = Gauge()
        let writer = Task {
            for index in 0..<total {
                try await app.write { txn in
                    try txn.create("Task", ["_id": .string("t\(index)"), "title": .string("task \(index)")])
                }
                written.raise(to: UInt64(index + 1))
            }
        }
        defer { writer.cancel() }

        // SIGKILL once the daemon has acknowledged some of the uploads, while the rest are under way (and the app may
        // still be writing); again after each restart, at a later point. The first kill always lands mid-upload
        // (batches hold at most 1,000 changesets); a later one is skipped if the upload ended first.
        let kills = (0..<Self.daemonKills).map { kill in
            UInt64(total / 10) + random.next() % UInt64(kill == 0 ? total / 3 : total * 2 / 3)
        }.sorted()
        var killed = 0
        for (round, killAt) in kills.enumerated() {
            try await LoopbackSyncTests.within(Self.patience, "\(killAt) acknowledged uploads") {
                while acknowledged.value < killAt { try await Task.sleep(for: .milliseconds(2)) }
            }
            let own = app.versionVector[app.replicaID]
            guard round == 0 || acknowledged.value < own || written.value < UInt64(total) else {
                print("daemon kill [upload] kill \(round) skipped: the upload had ended")
                break
            }
            daemon.send(SIGKILL)
            killed += 1
            let (acknowledgedAtKill, writtenAtKill) = (acknowledged.value, written.value)
            #expect(try await Self.ended(daemon, timeout: 30) == .signaled(SIGKILL))
            try await Self.waitForState(session, "the session to notice the kill") { $0 != .active }
            #expect(acknowledgedAtKill < own || writtenAtKill < UInt64(total), "the upload had ended before the kill")
            // Every acknowledgement the dead daemon sent has reached the session by now.
            let acknowledgedBeforeRestart = await Self.current(session.uploadProgress()).transferred

            // What the killed daemon left on disk holds every acknowledged upload, each once.
            do {
                let left = try Self.openReadOnly(daemonDirectory)
                defer { left.close() }
                let held = try left.heldSequence(of: app.replicaID)
                #expect(
                    held >= acknowledgedBeforeRestart,
                    "\(acknowledgedBeforeRestart) of the app's changesets acknowledged, \(held) held after kill -9")
                try Self.expectDaemonLog(left, app: app.replicaID, held: held)
                let report = try left.verify()
                #expect(report.passed, "the killed daemon's replica: \(report)")
                print(
                    "daemon kill [upload] seed \(Self.baseSeed) kill \(round): after \(acknowledgedAtKill) "
                        + "acknowledged, \(writtenAtKill) of \(total) written; \(acknowledgedBeforeRestart) "
                        + "acknowledged in all, \(held) held on disk")
            }

            // Back on the same directory and port: the session reconnects by itself and uploads the rest.
            (daemon, _) = try await Self.startDaemon(
                daemonDirectory, port: port, log: directory.appending("daemon-\(round + 1).log"), children: children)
            try await Self.waitForState(session, "the session to reconnect") { $0 == .active }
        }
        try await LoopbackSyncTests.within(Self.patience, "the app's writes") { try await writer.value }
        try await LoopbackSyncTests.within(Self.patience, "the upload after the restart") {
            try await session.waitForUpload()
        }
        try await LoopbackSyncTests.within(Self.patience, "the download after the restart") {
            try await session.waitForDownload()
        }
        await session.close()
        daemon.send(SIGTERM)
        #expect(try await Self.ended(daemon, timeout: 30) == .exited(0), "\(daemon.standardError)")

        let own = app.versionVector[app.replicaID]
        let server = try Self.openReadOnly(daemonDirectory)
        defer { server.close() }
        #expect(try Self.objects(server, "Task") == total)
        #expect(try server.heldSequence(of: app.replicaID) == own)
        try Self.expectSameLogs(app: app, daemon: server, appID: app.replicaID)
        print(
            "daemon kill [upload]: \(killed) kills; \(own) changesets uploaded, each logged once at the daemon; "
                + "\(Self.seconds(since: started))")
    }

    // MARK: 2. The daemon killed during a download

    @Test("tributaryd killed while it sends a large download: restarted, the app converges, nothing applied twice")
    func daemonKilledDuringDownload() async throws {
        let children = Children()
        defer { children.killAll() }
        let started = ContinuousClock.now
        var random = SplitMix64(seed: Self.baseSeed ^ 0x64_6F77_6E6C_6F61_64)
        let directory = TemporaryDirectory("kill-download")
        let daemonDirectory = directory.appending("daemon")

        // The daemon's replica, written before it starts: one object per changeset, titles that barely compress.
        let total = Self.seeded
        var titles = random
        let daemonID = Mutex(ReplicaID(rawValue: 0))
        try await offThePool {
            var configuration = Replica.Configuration()
            configuration.durability = .none
            let seed = try Replica.open(directory: daemonDirectory, schema: Self.schema, configuration: configuration)
            defer { seed.close() }
            for index in 0..<total {
                let title = Self.text(&titles, length: 300)
                try seed.write { txn in try txn.create("Task", ["_id": .string("s\(index)"), "title": .string(title)]) }
            }
            daemonID.withLock { $0 = seed.replicaID }
        }
        random = titles
        let daemonReplica = daemonID.withLock { $0 }
        let seededIn = Self.seconds(since: started)

        var (daemon, port) = try await Self.startDaemon(
            daemonDirectory, log: directory.appending("daemon-0.log"), children: children)
        let app = try Replica.open(directory: directory.appending("app"), schema: Self.schema)
        defer { app.close() }
        // A small window: the daemon has one batch (at most 1,000 changesets or 1 MiB) in flight at a time, and
        // sends the next once the app acknowledged it.
        var configuration = LoopbackSyncTests.fastBackoff
        configuration.window = 32 << 10
        let session = app.connect(to: SyncEndpoint(host: "127.0.0.1", port: port), configuration: configuration)
        defer { Task { await session.close() } }

        // SIGKILL once the app holds some of the daemon's changesets (its vector counts them); again after each
        // restart, further on. The first kill always lands mid-download; a later one is skipped if it ended first.
        let kills = (0..<Self.daemonKills).map { kill in
            UInt64(total / 10) + random.next() % UInt64(kill == 0 ? total / 3 : total * 2 / 3)
        }.sorted()
        var killed: [String] = []
        for (round, killAt) in kills.enumerated() {
            try await LoopbackSyncTests.within(Self.patience, "\(killAt) changesets downloaded") {
                while app.versionVector[daemonReplica] < killAt { try await Task.sleep(for: .milliseconds(2)) }
            }
            guard round == 0 || app.versionVector[daemonReplica] <= UInt64(total) else {
                print("daemon kill [download] kill \(round) skipped: the download had ended")
                break
            }
            daemon.send(SIGKILL)
            #expect(try await Self.ended(daemon, timeout: 30) == .signaled(SIGKILL))
            try await Self.waitForState(session, "the session to notice the kill") { $0 != .active }
            let objectsAtKill = try Self.objects(app, "Task")
            killed.append("\(objectsAtKill)")
            #expect(objectsAtKill < total, "the download had ended before the kill")
            let midway = try app.verify()
            #expect(midway.passed, "the app after the kill: \(midway)")
            let contents = try LogContents(app)
            #expect(contents.integratedTwice.isEmpty && contents.loggedTwice(ownedBy: app.replicaID).isEmpty)

            (daemon, _) = try await Self.startDaemon(
                daemonDirectory, port: port, log: directory.appending("daemon-\(round + 1).log"), children: children)
            try await Self.waitForState(session, "the session to reconnect") { $0 == .active }
        }
        try await LoopbackSyncTests.within(Self.patience, "the download after the restart") {
            try await session.waitForDownload()
        }
        try await LoopbackSyncTests.within(Self.patience, "the app's upload") { try await session.waitForUpload() }
        await session.close()
        daemon.send(SIGTERM)
        #expect(try await Self.ended(daemon, timeout: 30) == .exited(0), "\(daemon.standardError)")

        let server = try Self.openReadOnly(daemonDirectory)
        defer { server.close() }
        #expect(try Self.objects(app, "Task") == total)
        #expect(try Self.objects(server, "Task") == total)
        try Self.expectSameLogs(app: app, daemon: server, appID: app.replicaID)
        print(
            "daemon kill [download] seed \(Self.baseSeed): \(total) changesets seeded in \(seededIn); killed with "
                + "\(killed.joined(separator: ", ")) objects downloaded; converged, each changeset once; "
                + "\(Self.seconds(since: started))")
    }

    @Test("tributaryd killed during a flexible-sync bootstrap: nothing of it applied, the set completes after restart")
    func daemonKilledDuringBootstrap() async throws {
        let children = Children()
        defer { children.killAll() }
        let directory = TemporaryDirectory("kill-bootstrap")
        let daemonDirectory = directory.appending("daemon")
        let total = Self.seeded
        let file = try await Self.seedBootstrap(
            daemonDirectory, total, configuration: directory.appending("tributaryd.json"))
        var (daemon, port) = try await Self.startDaemon(
            daemonDirectory, arguments: ["--config", file], log: directory.appending("daemon-0.log"),
            children: children)
        let app = try Replica.open(directory: directory.appending("app"), schema: Self.schema)
        defer { app.close() }
        try app.subscriptions.commit { $0.append("Task", where: "count != 1", name: "most") }
        let session = app.connect(
            to: SyncEndpoint(host: "127.0.0.1", port: port), configuration: LoopbackSyncTests.fastBackoff)
        defer { Task { await session.close() } }

        let partial = try await LoopbackSyncTests.within(Self.patience, "a partial bootstrap") { () -> SyncProgress? in
            for await step in session.bootstrapProgress() where step.transferred > 0 && !step.isComplete {
                return step
            }
            return nil
        }
        daemon.send(SIGKILL)
        #expect(try await Self.ended(daemon, timeout: 30) == .signaled(SIGKILL))
        try await Self.waitForState(session, "the session to notice the kill") { $0 != .active }
        // Never half applied: nothing of the set and the set pending, or (when the whole bootstrap was on its way before
        // the kill landed, on a busy machine) all of it and the set complete.
        let expected = Self.bootstrapped(total).count
        let held = try Self.objects(app, "Task")
        let state = try app.subscriptions.latest.state
        #expect(
            (held == 0 && state == .pending) || (held == expected && state == .complete),
            "killed at \(String(describing: partial)): \(held) objects held, the set \(state)")
        #expect(try app.verify().passed)

        (daemon, _) = try await Self.startDaemon(
            daemonDirectory, port: port, arguments: ["--config", file], log: directory.appending("daemon-1.log"),
            children: children)
        try await LoopbackSyncTests.within(Self.patience, "the set after the restart") {
            try await app.subscriptions.waitForSync()
        }
        #expect(try Self.objects(app, "Task") == expected)
        #expect(try app.verify().passed)
        await session.close()
        daemon.send(SIGTERM)
        #expect(try await Self.ended(daemon, timeout: 30) == .exited(0), "\(daemon.standardError)")
    }

    /// Writes `total` tasks `s0`, `s1`... into a daemon's replica in `directory`, in one transaction, their counts
    /// 0, 1, 2, 0...: the set `count != 1` covers two thirds of them. Writes the daemon's configuration file to
    /// `configuration`, with small bootstrap messages so that a kill lands between two of them, and returns its path.
    static func seedBootstrap(_ directory: String, _ total: Int, configuration file: String) async throws -> String {
        try await offThePool {
            var configuration = Replica.Configuration()
            configuration.durability = .none
            let seed = try Replica.open(directory: directory, schema: Self.schema, configuration: configuration)
            defer { seed.close() }
            try seed.write { txn in
                for index in 0..<total {
                    try txn.create("Task", ["_id": .string("s\(index)"), "count": .int(Int64(index % 3))])
                }
            }
        }
        try Data(#"{"bootstrapMessageBytes": 1024}"#.utf8).write(to: URL(fileURLWithPath: file))
        return file
    }

    /// The tasks of ``seedBootstrap(_:_:configuration:)`` that the set `count != 1` covers.
    static func bootstrapped(_ total: Int) -> Set<String> {
        Set((0..<total).filter { $0 % 3 != 1 }.map { "s\($0)" })
    }

    // MARK: 3. The app killed during an upload

    /// When scenario 3 kills the app.
    enum AppKill: CustomStringConvertible {
        /// This long after the daemon opened the app's session.
        case afterConnect(milliseconds: Int)
        /// This long after the app's new messages are committed in its replica (seen by a reader in this process).
        case afterLocalCommit(milliseconds: Int)

        var description: String {
            switch self {
            case .afterConnect(let ms): "\(ms) ms after connecting"
            case .afterLocalCommit(let ms): "\(ms) ms after its local commit"
            }
        }
    }

    @Test("tributary-demo killed during an upload: run again, it uploads every message it committed, once")
    func appKilledDuringUpload() async throws {
        let demo = try #require(
            ChildExecutable.path("tributary-demo"), "tributary-demo is not next to the test binary (swift build)")
        let children = Children()
        defer { children.killAll() }
        let started = ContinuousClock.now
        var random = SplitMix64(seed: Self.baseSeed ^ 0x61_7070)
        let directory = TemporaryDirectory("kill-app")
        let appDirectory = directory.appending("app")
        // The daemon is in this process: it counts the app sessions it opened (a killed app's session may linger
        // until the daemon notices the connection is gone; the next run does not wait for that).
        let appSessions = Gauge()
        var configuration = SyncServer.Configuration()
        configuration.port = 0
        configuration.logger =
            LogCapture { line in
                if line.message.hasPrefix("session opened: app ") { appSessions.increment() }
            }.logger
        let server = SyncServer(
            replica: try Replica.open(directory: directory.appending("daemon")), configuration: configuration)
        let port = try await server.start()

        var plans: [AppKill] = [.afterConnect(milliseconds: 250), .afterLocalCommit(milliseconds: 0)]
        while plans.count < Self.appKills {
            let delay = Int(random.next() % 1_500)
            plans.append(
                random.next() % 2 == 0
                    ? .afterLocalCommit(milliseconds: delay % 60) : .afterConnect(milliseconds: delay))
        }
        plans = Array(plans.prefix(Self.appKills))

        let failure: (any Error)?
        do {
            let arguments = ["sync", appDirectory, "--daemon", "ws://127.0.0.1:\(port)", "--author", "x"]
            var committed = 0
            for (round, plan) in plans.enumerated() {
                let sessionsBefore = appSessions.value
                let child = try children.start(
                    demo, arguments + ["--messages", "\(Self.messagesPerRun)", "--timeout", "60"],
                    stderr: directory.appending("app-\(round).log"))
                let killed = try await Self.killApp(
                    child, plan, sessionsOpened: appSessions, before: sessionsBefore, appDirectory: appDirectory,
                    committed: committed)
                let exit = try await Self.ended(child, timeout: 60)
                let local = try Self.openReadOnly(appDirectory)
                let localCount = try Self.objects(local, "ChatMessage")
                local.close()
                let daemonCount = try Self.objects(server.replica, "ChatMessage")
                #expect(
                    localCount == committed || localCount == committed + Self.messagesPerRun,
                    "the app's transaction is neither absent nor whole: \(localCount) messages after \(committed)")
                #expect(daemonCount <= localCount, "the daemon holds messages the app never committed")
                print(
                    "daemon kill [app] round \(round): \(killed ? "killed \(plan)" : "it ended before the kill"), "
                        + "\(exit.map(\.description) ?? "still running"); \(localCount) messages committed, "
                        + "\(daemonCount) at the daemon")
                committed = localCount
            }

            // Once more, writing nothing: it uploads what the killed runs committed.
            let last = try children.start(
                demo, arguments + ["--messages", "0", "--timeout", "60"], stderr: directory.appending("app-last.log"))
            let exit = try await Self.ended(last, timeout: 150)
            #expect(exit == .exited(0), "\(last.lines) \(last.standardError)")
            #expect(last.lines.contains("Uploaded: the daemon holds them durably"), "\(last.lines)")
            #expect(last.lines.contains { $0.hasPrefix("Verify: verified") }, "\(last.lines)")

            let app = try Self.openReadOnly(appDirectory)
            defer { app.close() }
            let messages = try Self.objects(app, "ChatMessage")
            #expect(messages == committed)
            #expect(try Self.objects(server.replica, "ChatMessage") == messages)
            #expect(try server.replica.heldSequence(of: app.replicaID) == app.versionVector[app.replicaID])
            try Self.expectSameLogs(app: app, daemon: server.replica, appID: app.replicaID)
            print(
                "daemon kill [app]: \(messages) messages committed in \(plans.count) killed runs, all at the daemon, "
                    + "each changeset once; \(Self.seconds(since: started))")
            failure = nil
        } catch {
            failure = error
        }
        await server.stop()
        server.replica.close()
        if let failure { throw failure }
    }

    /// Kills `child` by `plan`: once the daemon has opened more than `before` app sessions, or once the app's
    /// replica holds more than `committed` messages. Returns `false` when the child ended by itself first.
    static func killApp(
        _ child: ChildProcess, _ plan: AppKill, sessionsOpened: Gauge, before: UInt64, appDirectory: String,
        committed: Int
    ) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(180)
        func running() -> Bool { child.waitForExit(timeout: 0) == nil }
        switch plan {
        case .afterConnect(let milliseconds):
            while sessionsOpened.value <= before {
                guard running() else { return false }
                guard ContinuousClock.now < deadline else { throw DrillFailure("the app did not connect in 180 s") }
                try await Task.sleep(for: .milliseconds(2))
            }
            try await Task.sleep(for: .milliseconds(milliseconds))
        case .afterLocalCommit(let milliseconds):
            // A reader of the app's replica, in this process, sees the commit; the directory may not exist yet.
            var reader: Replica?
            defer { reader?.close() }
            while true {
                if reader == nil { reader = try? openReadOnly(appDirectory) }
                if let reader, try Self.objects(reader, "ChatMessage") > committed { break }
                guard running() else { return false }
                guard ContinuousClock.now < deadline else { throw DrillFailure("the app did not commit in 180 s") }
                try await Task.sleep(for: .milliseconds(1))
            }
            if milliseconds > 0 { try await Task.sleep(for: .milliseconds(milliseconds)) }
        }
        guard running() else { return false }
        child.send(SIGKILL)
        return true
    }

    @Test("An app killed during a flexible-sync bootstrap: nothing of it applied, run again, the set completes")
    func appKilledDuringBootstrap() async throws {
        let child = try #require(
            ChildExecutable.path(), "tributary-crash-child is not next to the test binary (swift build)")
        let children = Children()
        defer { children.killAll() }
        let started = ContinuousClock.now
        let directory = TemporaryDirectory("kill-app-bootstrap")
        let daemonDirectory = directory.appending("daemon")
        let appDirectory = directory.appending("app")
        let total = Self.seeded
        let expected = Self.bootstrapped(total)
        let file = try await Self.seedBootstrap(
            daemonDirectory, total, configuration: directory.appending("tributaryd.json"))
        let (daemon, port) = try await Self.startDaemon(
            daemonDirectory, arguments: ["--config", file], log: directory.appending("daemon.log"), children: children)
        let arguments = ["subscribe", appDirectory, "--port", "\(port)", "--where", "count != 1"]
        let patience = Double(Self.patience.components.seconds)

        // SIGKILL as soon as the app prints a step of its bootstrap with some objects received, and not all.
        let first = try children.start(child, arguments, stderr: directory.appending("app-0.log"))
        let partial = Mutex<String?>(nil)
        try await offThePool {
            first.wait(timeout: patience) { lines in
                let step = lines.last { line in
                    let fields = line.split(separator: " ")
                    guard fields.count == 3, fields[0] == "PROGRESS", let received = Int(fields[1]),
                        let sent = Int(fields[2])
                    else { return false }
                    return received > 0 && received < sent
                }
                partial.withLock { $0 = step }
                return step != nil
            }
            if partial.withLock({ $0 }) != nil, first.waitForExit(timeout: 0) == nil { first.send(SIGKILL) }
        }
        let killedAt = try #require(
            partial.withLock { $0 }, "no partial bootstrap step: \(first.lines) \(first.standardError)")
        let exit = try await Self.ended(first, timeout: 30)
        // A kill that lands late on a busy machine finds the app done: it printed COMPLETE and exited.
        let late = exit == .exited(0) && first.lines.contains("COMPLETE \(expected.count)")
        #expect(
            exit == .signaled(SIGKILL) || late, "\(String(describing: exit)): \(first.lines) \(first.standardError)")

        // Never half applied: nothing of the set and the set pending, or all of it and the set complete.
        do {
            let app = try Self.openReadOnly(appDirectory)
            defer { app.close() }
            let held = try Self.objects(app, "Task")
            let set = try app.subscriptions.latest
            #expect(set.version == 1)
            #expect(
                (held == 0 && set.state == .pending) || (held == expected.count && set.state == .complete),
                "killed at \(killedAt): \(held) objects held, the set \(set.state)")
            let report = try app.verify()
            #expect(report.passed, "the killed app's replica: \(report)")
            print(
                "app kill [bootstrap] seed \(Self.baseSeed): \(late ? "the kill landed late" : "killed") at "
                    + "\(killedAt); \(held) of \(expected.count) objects held, the set \(set.state)")
        }

        // Run again on the same directory: it sends the same set, and the bootstrap starts over and completes.
        let second = try children.start(child, arguments, stderr: directory.appending("app-1.log"))
        let secondExit = try await Self.ended(second, timeout: patience)
        #expect(secondExit == .exited(0), "\(second.lines) \(second.standardError)")
        #expect(second.lines.contains("COMPLETE \(expected.count)"), "\(second.lines) \(second.standardError)")

        let app = try Self.openReadOnly(appDirectory)
        defer { app.close() }
        let held = try await app.read { reader in
            try reader.objects("Task").map { task -> String in
                guard case .string(let id) = task["_id"] else { return "\(task["_id"])" }
                return id
            }
        }
        #expect(held.count == expected.count && Set(held) == expected, "\(held.count) objects held")
        let set = try app.subscriptions.latest
        #expect(set.version == 1 && set.state == .complete, "the set \(set.version): \(set.state)")
        #expect(try app.subscriptions.active.version == 1)
        let report = try app.verify()
        #expect(report.passed, "the app's replica: \(report)")
        daemon.send(SIGTERM)
        #expect(try await Self.ended(daemon, timeout: 30) == .exited(0), "\(daemon.standardError)")
        print(
            "app kill [bootstrap]: run again, the set completed with \(expected.count) of \(total) objects; "
                + "\(Self.seconds(since: started))")
    }

    // MARK: Checks

    /// What a log holds, changeset by changeset.
    struct LogContents {
        /// Entries per causal dot (a relay's dot for a relay's copy of an app's changeset, the origin's otherwise):
        /// each changeset integrated once is there once.
        var byCausalDot: [Dot: Int] = [:]
        /// Entries per origin dot. An app's log holds its own changeset twice: as it wrote it, and the record of the
        /// daemon's adoption of it (downloaded from the daemon; logged, not applied again). Every other changeset is
        /// there once, and at a daemon, every changeset is there once.
        var byOriginDot: [Dot: Int] = [:]

        init(_ replica: Replica) throws {
            var byCausalDot: [Dot: Int] = [:]
            var byOriginDot: [Dot: Int] = [:]
            try replica.inspection.forEachChangeset { _, changeset in
                byCausalDot[changeset.causalDot, default: 0] += 1
                byOriginDot[changeset.dot, default: 0] += 1
                return true
            }
            self.byCausalDot = byCausalDot
            self.byOriginDot = byOriginDot
        }

        /// Changesets integrated more than once.
        var integratedTwice: [Dot] { byCausalDot.filter { $0.value > 1 }.keys.sorted() }

        /// Origin dots logged more than once, except an app's own ones logged twice (as written, and adopted).
        func loggedTwice(ownedBy app: ReplicaID?) -> [Dot] {
            byOriginDot.filter { $0.value > (app == $0.key.origin ? 2 : 1) }.keys.sorted()
        }

        /// The origin sequences of `origin`'s changesets in the log.
        func sequences(of origin: ReplicaID) -> Set<UInt64> {
            Set(byOriginDot.keys.filter { $0.origin == origin }.map(\.sequence))
        }
    }

    /// Checks a daemon's log: every changeset once (adopted app changesets included), and `app`'s changesets 1
    /// through `held`, no more.
    static func expectDaemonLog(
        _ daemon: Replica, app: ReplicaID, held: UInt64, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let contents = try LogContents(daemon)
        #expect(
            contents.integratedTwice.isEmpty && contents.loggedTwice(ownedBy: nil).isEmpty,
            "logged twice at the daemon: \(contents.integratedTwice) \(contents.loggedTwice(ownedBy: nil))",
            sourceLocation: sourceLocation)
        let sequences = contents.sequences(of: app)
        let expected: Set<UInt64> = held == 0 ? [] : Set(1...held)
        #expect(
            sequences == expected,
            "the daemon holds \(sequences.count) of the app's changesets (\(sequences.min() ?? 0)-\(sequences.max() ?? 0)), not 1-\(held)",
            sourceLocation: sourceLocation)
    }

    /// The daemon's log and the app's hold the same changesets, each integrated once; the daemon holds the app's
    /// changesets 1 through its last; both have the same objects and verify.
    static func expectSameLogs(
        app: Replica, daemon: Replica, appID: ReplicaID, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        try expectDaemonLog(daemon, app: appID, held: app.versionVector[appID], sourceLocation: sourceLocation)
        let daemonContents = try LogContents(daemon)
        let appContents = try LogContents(app)
        #expect(
            appContents.integratedTwice.isEmpty && appContents.loggedTwice(ownedBy: appID).isEmpty,
            "logged twice at the app: \(appContents.integratedTwice) \(appContents.loggedTwice(ownedBy: appID))",
            sourceLocation: sourceLocation)
        let onlyAtDaemon = Set(daemonContents.byOriginDot.keys).subtracting(appContents.byOriginDot.keys)
        let onlyAtApp = Set(appContents.byOriginDot.keys).subtracting(daemonContents.byOriginDot.keys)
        #expect(
            onlyAtDaemon.isEmpty && onlyAtApp.isEmpty,
            "only at the daemon: \(onlyAtDaemon.count), only at the app: \(onlyAtApp.count)",
            sourceLocation: sourceLocation)
        #expect(
            try app.viewDigest(includeVersionVector: false) == daemon.viewDigest(includeVersionVector: false),
            "the app's objects differ from the daemon's", sourceLocation: sourceLocation)
        for (name, replica) in [("app", app), ("daemon", daemon)] {
            let report = try replica.verify()
            #expect(report.passed, "the \(name)'s replica: \(report)", sourceLocation: sourceLocation)
        }
    }

    // MARK: Processes and sessions

    /// Starts `tributaryd DIRECTORY --listen 127.0.0.1:PORT ARGUMENTS` (port 0: a free one, which the daemon logs),
    /// with `environment` added to this process's, and waits for the line it logs once it listens. A start that
    /// fails (the port not free yet just after a kill) is tried again, for up to 180 s. Returns the child and its
    /// port.
    static func startDaemon(
        _ directory: String, port: Int = 0, arguments: [String] = [], environment: [String: String] = [:],
        log: String, children: Children
    ) async throws -> (ChildProcess, Int) {
        let executable = try #require(
            ChildExecutable.path("tributaryd"), "tributaryd is not next to the test binary (swift build)")
        // Checked once more after the deadline: a test process busy with other suites may wake this task late, and
        // the daemon may have started meanwhile.
        let deadline = ContinuousClock.now + .seconds(180)
        var failures: [String] = []
        while true {
            let child = try children.start(
                executable, [directory, "--listen", "127.0.0.1:\(port)"] + arguments, stderr: log,
                environment: environment)
            while true {
                if let listening = servingPort(child.standardError), port == 0 || listening == port {
                    return (child, listening)
                }
                if child.waitForExit(timeout: 0) != nil {
                    failures.append(child.standardError)
                    break
                }
                if ContinuousClock.now >= deadline {
                    failures.append("still running, its log: \(child.standardError)")
                    break
                }
                try await Task.sleep(for: .milliseconds(5))
            }
            if ContinuousClock.now >= deadline { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw DrillFailure("tributaryd did not start on port \(port) in 180 s: \(failures.suffix(2))")
    }

    /// The port in tributaryd's "serving replica R in DIR on ws://HOST:PORT" line.
    static func servingPort(_ log: String) -> Int? {
        guard let line = log.split(separator: "\n").first(where: { $0.contains(" serving replica ") }),
            let on = line.range(of: " on ws://", options: .backwards)
        else { return nil }
        let address = line[on.upperBound...].prefix { $0 != ";" && $0 != " " }
        guard let colon = address.lastIndex(of: ":") else { return nil }
        return Int(address[address.index(after: colon)...])
    }

    /// Waits for `child` to end, polling, without holding a thread of the pool; `nil` if it runs on.
    static func ended(_ child: ChildProcess, timeout: Double) async throws -> ChildExit? {
        let deadline = ContinuousClock.now + .seconds(timeout)
        while ContinuousClock.now < deadline {
            if let exit = child.waitForExit(timeout: 0) { return exit }
            try await Task.sleep(for: .milliseconds(5))
        }
        return child.waitForExit(timeout: 0)
    }

    /// Waits until the session's state satisfies `predicate`, as long as a transfer may take: on a machine busy with
    /// the rest of the suite, the test process can be slow to run the session's tasks (in one CI run, more than 30 s).
    static func waitForState(
        _ session: SyncSession, _ what: String, timeout: Duration = patience,
        _ predicate: @escaping @Sendable (SyncSession.State) -> Bool
    ) async throws {
        try await LoopbackSyncTests.within(timeout, what) {
            for await state in session.states() where predicate(state) { return }
            throw DrillFailure("the session's states ended while waiting for \(what)")
        }
    }

    /// The value a progress stream starts with: the progress now.
    static func current(_ progress: AsyncStream<SyncProgress>) async -> SyncProgress {
        for await value in progress { return value }
        return SyncProgress(transferred: 0, transferable: 0)
    }

    /// The live objects of `type` in `replica`: none while its schema lacks the type (a daemon holds an app's schema
    /// only once the app uploaded its first changeset, which a kill soon after connecting can precede).
    static func objects(_ replica: Replica, _ type: String) throws -> Int {
        try replica.read { snapshot in snapshot.schema[type: type] == nil ? 0 : try snapshot.count(type) }
    }

    static func openReadOnly(_ directory: String) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.readOnly = true
        return try Replica.open(directory: directory, configuration: configuration)
    }

    static func text(_ random: inout SplitMix64, length: Int) -> String {
        let letters = Array("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        return String((0..<length).map { _ in letters[Int(random.next() % UInt64(letters.count))] })
    }

    static func seconds(since start: ContinuousClock.Instant) -> String {
        let elapsed = ContinuousClock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return String(format: "%.1f s", seconds)
    }

    // MARK: Helper types

    /// The child processes a test started: each still running is killed (SIGKILL) and waited for when the test ends,
    /// however it ends.
    final class Children: Sendable {
        private let all = Mutex<[ChildProcess]>([])

        func start(
            _ executable: String, _ arguments: [String], stderr: String, environment: [String: String] = [:]
        ) throws -> ChildProcess {
            let child = try ChildProcess(
                executable: executable, arguments: arguments, stderrPath: stderr, environment: environment)
            all.withLock { $0.append(child) }
            return child
        }

        func killAll() {
            for child in all.withLock({ $0 }) where child.waitForExit(timeout: 0) == nil {
                child.killAndWait()
            }
        }
    }

    /// The highest value seen: of a progress stream's `transferred`, or of a counter.
    final class Gauge: Sendable {
        private let highest = Mutex<UInt64>(0)

        var value: UInt64 { highest.withLock { $0 } }

        func raise(to value: UInt64) { highest.withLock { $0 = max($0, value) } }

        func increment() { highest.withLock { $0 += 1 } }

        /// Follows `progress` on a task of its own, until the task is cancelled or the stream ends.
        func follow(_ progress: AsyncStream<SyncProgress>) -> Task<Void, Never> {
            Task { [self] in
                for await value in progress { raise(to: value.transferred) }
            }
        }
    }

    struct DrillFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
