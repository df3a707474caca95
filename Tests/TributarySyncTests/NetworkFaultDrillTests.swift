import Foundation
import Synchronization
import Testing
import Tributary
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

/// Real daemons under a nemesis: three `tributaryd` child processes peered with each other, six apps in this process
/// (two per daemon), and a ``FaultProxy`` on every link (each pair of daemons, each app and its daemon).
///
/// While the apps write (each transaction creates an element with an id of its own and increments one of four
/// counters), a seeded schedule cuts connections, holds their bytes for up to 2 s, partitions links or whole daemons
/// (refused or blackholed), corrupts byte streams (a chunk sent twice, whole or its tail; two chunks swapped, or a
/// chunk's halves), kills daemons with SIGKILL and restarts them on the same directory, pauses them with SIGSTOP and
/// SIGCONT, and restarts one with its clock 30 minutes off (libfaketime). Then everything heals, and within 30 s
/// every replica holds the same objects (the daemons the same version vector): every element written, once, as
/// written (set-full), and every counter the sum of the increments written; nothing waits in a pending area; every
/// replica verifies and every daemon stops cleanly.
///
/// A daemon 30 minutes ahead changes nothing (daemons stamp no changesets of their own). A daemon 30 minutes behind
/// holds every changeset the others stamped, and every upload of its own apps, in its pending area: each is stamped
/// more than `maximumClockSkew` (10 minutes) ahead of its clock (docs/MergeSemantics.md, rule 9), and none of it
/// reaches the other replicas until its clock catches up. The drill checks that they wait, then sets its clock right
/// as part of healing.
///
/// `TRIBUTARY_SEED` replays the schedule (its timing is real time, so not exactly the run); `TRIBUTARY_DEEP=1` runs
/// longer fault phases, several seeds each.
@Suite("Network faults between real daemons", .serialized, .tags(.drill))
struct NetworkFaultDrillTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Element",
                properties: [
                    .scalar("_id", .string), .scalar("writer", .int, default: 0),
                    .scalar("check", .string, default: ""),
                ]),
            ObjectSchema(name: "Counter", properties: [.scalar("_id", .string), .scalar("total", .int, default: 0)]),
        ])

    static let daemonCount = 3
    static let appsPerDaemon = 2
    static let counterCount = 4
    /// How long the faults last, per run.
    static let faultPhase: Duration = .seconds(Deep.count(ci: 20, deep: 120))
    /// Runs per test, each with its own seed.
    static let runs = Deep.count(ci: 1, deep: 3)
    /// How soon after healing every replica must hold the same objects: 30 seconds in the deep run. In the suite the
    /// drill shares 2 cores with every other suite, and a starved run took 275 s, so there the time is printed and
    /// bounded only by the patience of each step.
    static let convergenceBound: Duration = Deep.enabled ? .seconds(30) : .seconds(900)
    /// How long the test waits for anything before it fails instead of hanging (generous: the rest of the suite
    /// loads both cores while it runs).
    static let patience: Duration = .seconds(600)

    /// `TRIBUTARY_SEED`, or one drawn from the clock (and printed) per test process.
    static let baseSeed = SplitMix64.seedFromEnvironment(default: UInt64(UInt32(truncatingIfNeeded: time(nil))))

    @Test(
        "tributaryd mesh under cuts, delays, partitions, corruption, kill -9, SIGSTOP and a clock 30 min ahead: heals and converges",
        .enabled(if: FakeTime.library != nil, "libfaketime is not installed (apt-get install faketime)"))
    func converges() async throws {
        for run in 0..<Self.runs {
            let seed = Self.baseSeed &+ UInt64(run)
            try await Self.drill(seed: seed, clockOffsetMinutes: 30)
        }
    }

    @Test(
        "tributaryd mesh under the same faults with a daemon 30 min behind: what reaches it waits until its clock is right, then all converge",
        .enabled(if: FakeTime.library != nil, "libfaketime is not installed (apt-get install faketime)"))
    func clockBehind() async throws {
        for run in 0..<Self.runs {
            let seed = Self.baseSeed &+ UInt64(run)
            try await Self.drill(seed: seed, clockOffsetMinutes: -30)
        }
    }

    // MARK: The drill

    static func drill(seed: UInt64, clockOffsetMinutes: Int) async throws {
        let children = DaemonKillDrillTests.Children()
        defer {
            children.killAll()
            FakeTime.removeLeftovers()
        }
        var proxies: [FaultProxy] = []
        defer { for proxy in proxies { proxy.stop() } }
        let started = ContinuousClock.now
        var random = SplitMix64(seed: seed)
        let directory = TemporaryDirectory("network-faults")
        var figures = Figures()
        let label =
            "network faults [TRIBUTARY_SEED=\(seed), clock \(clockOffsetMinutes > 0 ? "+" : "")\(clockOffsetMinutes) min]"

        // Daemons: each dials the earlier ones, each link through a proxy of its own.
        var daemons: [Daemon] = []
        for index in 0..<Self.daemonCount {
            var peers: [String] = []
            for earlier in 0..<index {
                let proxy = try FaultProxy(
                    "daemon \(index) to daemon \(earlier)", upstreamPort: daemons[earlier].port, seed: random.next())
                proxies.append(proxy)
                peers += ["--peer", "ws://127.0.0.1:\(proxy.port)"]
            }
            // A keepalive of 3 s: a session whose stream a corruption left waiting for the rest of a frame that
            // never comes ends after 9 s of silence, not the default 90.
            var daemon = Daemon(
                index: index, directory: directory.appending("daemon\(index)"), port: 0,
                arguments: peers + ["--keepalive-seconds", "3"])
            try await daemon.start(children: children, logs: directory)
            daemons.append(daemon)
        }
        // Apps: each through a proxy of its own to its daemon.
        var apps: [App] = []
        for index in 0..<(Self.daemonCount * Self.appsPerDaemon) {
            let daemon = index / Self.appsPerDaemon
            let proxy = try FaultProxy(
                "app \(index) to daemon \(daemon)", upstreamPort: daemons[daemon].port, seed: random.next())
            proxies.append(proxy)
            var configuration = Replica.Configuration()
            configuration.durability = .none
            let replica = try Replica.open(
                directory: directory.appending("app\(index)"), schema: Self.schema, configuration: configuration)
            var sync = SyncConfiguration()
            sync.backoff = ReconnectBackoff(initial: .milliseconds(50), maximum: .seconds(1))
            sync.name = "app \(index)"
            let session = replica.connect(
                to: SyncEndpoint(host: "127.0.0.1", port: proxy.port), configuration: sync)
            apps.append(App(index: index, daemon: daemon, replica: replica, session: session))
        }
        defer {
            for app in apps { app.replica.close() }
        }
        let closeSessions = { @Sendable [apps] in for app in apps { await app.session.close() } }
        // Why the apps' connections ended, by error code: what the faults looked like from the apps.
        let disconnections = Tally()
        let observers = apps.map { app in
            Task {
                for await state in app.session.states() {
                    if case .disconnected(let error) = state {
                        disconnections.add(error.map { "\($0.code)" } ?? "closed")
                    }
                }
            }
        }
        defer { for observer in observers { observer.cancel() } }

        // The counters, created by one app and known to all before the faults begin.
        try await apps[0].replica.write { txn in
            for counter in 0..<Self.counterCount { try txn.create("Counter", ["_id": .string("c\(counter)")]) }
        }
        let ready = apps
        try await LoopbackSyncTests.within(Self.patience, "the counters reaching every app") {
            try await ready[0].session.waitForUpload()
            for app in ready {
                while try await app.replica.read({ try $0.count("Counter") }) < Self.counterCount {
                    try await app.session.waitForDownload()
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
        }
        let setUp = DaemonKillDrillTests.seconds(since: started)

        // The writers: one task per app until told to stop; each transaction is recorded once its commit returned.
        let ledger = Ledger()
        let writers = apps.map { app in
            let seed = random.next()
            return Task {
                var random = SplitMix64(seed: seed)
                var next = 0
                while ledger.isOpen {
                    let id = "a\(app.index)-\(next)"
                    let counter = "c\(random.next() % UInt64(Self.counterCount))"
                    let amount = Int64(1 + random.next() % 5)
                    try await app.replica.write { txn in
                        try txn.create(
                            "Element",
                            ["_id": .string(id), "writer": .int(Int64(app.index)), "check": .string(Self.check(id))])
                        try txn.increment(["total"], of: "Counter", primaryKey: .string(counter), by: amount)
                    }
                    ledger.record(element: id, counter: counter, amount: amount)
                    next += 1
                    try await Task.sleep(for: .milliseconds(10 + Int(random.next() % 40)))
                }
            }
        }
        defer { for writer in writers { writer.cancel() } }

        // The nemesis.
        var nemesis = Nemesis(random: SplitMix64(seed: random.next()), clockOffsetMinutes: clockOffsetMinutes)
        let faultsEnd = ContinuousClock.now + Self.faultPhase
        var skewedAt: ContinuousClock.Instant?
        do {
            while ContinuousClock.now < faultsEnd {
                try await Task.sleep(for: .milliseconds(200 + Int(nemesis.random.next() % 800)))
                try await nemesis.recover(
                    due: .now, daemons: &daemons, proxies: proxies, children: children, logs: directory)
                // Halfway, once: a daemon restarted with its clock off, for the rest of the run.
                if skewedAt == nil && ContinuousClock.now >= faultsEnd - Self.faultPhase / 2 {
                    try await nemesis.skewClock(daemons: &daemons, children: children, logs: directory)
                    skewedAt = .now
                    continue
                }
                try await nemesis.strike(daemons: &daemons, proxies: proxies, children: children, logs: directory)
            }
        } catch {
            // Nothing may keep a session dialling: the daemons go (paused ones too), then the proxies.
            ledger.close()
            children.killAll()
            for proxy in proxies { proxy.stop() }
            await closeSessions()
            throw error
        }

        // Heal: every partition ends, every daemon runs, the writers stop.
        try await nemesis.recover(
            due: .now + .seconds(3600), daemons: &daemons, proxies: proxies, children: children, logs: directory)
        for proxy in proxies { proxy.heal() }
        if clockOffsetMinutes < 0, let skewed = nemesis.skewed {
            // Rule 9 (docs/MergeSemantics.md): a changeset stamped more than 10 minutes ahead of a replica's clock
            // waits in its pending area. Everything stamped by the others, and the uploads of its own apps, wait at
            // the daemon whose clock is behind, and go nowhere from there. Its clock set right, it integrates them.
            let behind = daemons[skewed].directory
            try await LoopbackSyncTests.within(Self.patience, "changesets waiting at the daemon behind") {
                while try Self.withReplica(behind, { try $0.pendingDots().isEmpty }) {
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            figures.waitingBehind = try Self.withReplica(behind) { try $0.pendingDots().count }
            daemons[skewed].child?.send(SIGKILL)
            _ = try await DaemonKillDrillTests.ended(try #require(daemons[skewed].child), timeout: 30)
            daemons[skewed].environment = [:]
            try await daemons[skewed].start(children: children, logs: directory)
        }
        ledger.close()
        for writer in writers { try await writer.value }
        let healed = ContinuousClock.now
        figures.acknowledgedAtHeal = try await Self.acknowledged(apps)
        let written = ledger.snapshot()

        // Convergence: every app's upload acknowledged, the daemons in step, every app holding what they hold.
        let stalled = apps
        var converged = false
        do {
            try await LoopbackSyncTests.within(Self.patience, "the apps' uploads after healing") {
                for app in stalled { try await app.session.waitForUpload() }
            }
            let daemonDirectories = daemons.map(\.directory)
            try await LoopbackSyncTests.within(Self.patience, "the daemons converging") {
                while true {
                    if try Self.daemonsInStep(daemonDirectories) { return }
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
            try await LoopbackSyncTests.within(Self.patience, "the apps' downloads") {
                for app in stalled { try await app.session.waitForDownload() }
            }
            let expected = try Self.withReplica(daemonDirectories[0]) { try $0.viewDigest(includeVersionVector: false) }
            try await LoopbackSyncTests.within(Self.patience, "the apps converging") {
                for app in stalled {
                    while try app.replica.viewDigest(includeVersionVector: false) != expected {
                        try await app.session.waitForDownload()
                        try await Task.sleep(for: .milliseconds(50))
                    }
                }
            }
            converged = true
        } catch {
            print("\(label): did not converge: \(error)")
        }
        let convergedIn = ContinuousClock.now - healed
        if !converged {
            for app in apps {
                let held = app.replica.versionVector[app.replica.replicaID]
                print("  app \(app.index) (daemon \(app.daemon)): session \(app.session.state), wrote \(held)")
            }
            for daemon in daemons {
                let summary = try? Self.withReplica(daemon.directory) { replica in
                    "vector \(replica.versionVector), \(try replica.pendingDots().count) pending, "
                        + "\(try replica.read { try $0.count("Element") }) elements"
                }
                print("  daemon \(daemon.index) (\(daemon.state)): \(summary ?? "unreadable")")
                for line in daemon.log.split(separator: "\n").filter({ $0.contains("error") || $0.contains("ended") })
                    .suffix(12)
                {
                    print("    \(line)")
                }
            }
        }
        #expect(converged, "\(label): the replicas did not converge after healing")
        #expect(
            !converged || convergedIn <= Self.convergenceBound,
            "\(label): converged \(convergedIn) after healing, over \(Self.convergenceBound)")
        if !converged {
            children.killAll()
            for proxy in proxies { proxy.stop() }
        }
        try await LoopbackSyncTests.within(.seconds(60), "closing the apps' sessions") { await closeSessions() }

        // Every daemon stops cleanly.
        for daemon in daemons where converged {
            guard let child = daemon.child else { continue }
            child.send(SIGTERM)
            let exit = try await DaemonKillDrillTests.ended(child, timeout: 60)
            #expect(exit == .exited(0), "\(label): daemon \(daemon.index) ended with \(String(describing: exit))")
        }

        // Set-full, counters, logs and verification on every replica.
        for daemon in daemons {
            try Self.withReplica(daemon.directory) { replica in
                try Self.check(replica, "daemon \(daemon.index)", written, app: nil, label: label)
                figures.pendingAtDaemons += try replica.pendingDots().count
            }
        }
        for app in apps {
            try Self.check(app.replica, "app \(app.index)", written, app: app.replica.replicaID, label: label)
        }
        #expect(figures.pendingAtDaemons == 0, "\(label): changesets still wait at the daemons")
        // libfaketime did shift the daemon's clock: the time on the line it logged once it listened was off.
        if let skewed = nemesis.skewed {
            #expect(
                nemesis.offsetSeen.map { abs($0 - Double(clockOffsetMinutes * 60)) < 120 } == true,
                "\(label): daemon \(skewed) logged a time \(String(describing: nemesis.offsetSeen)) s off")
        }

        figures.proxies = proxies.map(\.counts)
        let sessionEnds = Self.sessionEnds(in: directory.path)
        print(
            "\(label): set up in \(setUp); \(Self.faultPhase) of faults: \(nemesis.summary); proxies "
                + "\(figures.proxySummary); \(written.elements.count) changesets written by \(apps.count) apps, "
                + "\(figures.acknowledgedAtHeal) acknowledged by healing, "
                + (clockOffsetMinutes < 0
                    ? "\(figures.waitingBehind) waiting at the daemon behind until its clock was set right, " : "")
                + "\(figures.pendingAtDaemons) pending at "
                + "the daemons after; converged \(convergedIn) after healing; "
                + "\(DaemonKillDrillTests.seconds(since: started)) in all; app disconnections: "
                + "\(disconnections.summary); sessions ended at the daemons: \(sessionEnds.summary)")
    }

    // MARK: Checks

    /// The value an element's `check` holds: derived from its id, so that a damaged value is seen.
    static func check(_ id: String) -> String { String(XXHash64.hash(Array(id.utf8)), radix: 36) }

    /// Set-full and counters: `replica` holds every element written, once, with the value written, and nothing else;
    /// each counter is the sum of its increments; each changeset is integrated once; the replica verifies.
    static func check(
        _ replica: Replica, _ name: String, _ written: Ledger.Snapshot, app: ReplicaID?, label: String
    ) throws {
        let (elements, counters) = try replica.read { snapshot in
            (try snapshot.objects("Element"), try snapshot.objects("Counter"))
        }
        var held: [String: Int] = [:]
        var damaged: [String] = []
        for element in elements {
            guard let id = element.primaryKey.value.stringValue else { continue }
            held[id, default: 0] += 1
            if element["check"].stringValue != Self.check(id) { damaged.append(id) }
        }
        let lost = written.elements.subtracting(held.keys)
        let unknown = Set(held.keys).subtracting(written.elements)
        let twice = held.filter { $0.value > 1 }.keys
        let problems =
            "\(name) misses \(lost.count) elements (\(lost.sorted().prefix(5))), holds \(unknown.count) never written "
            + "(\(unknown.sorted().prefix(5))), \(twice.count) twice, \(damaged.count) damaged"
        #expect(lost.isEmpty && unknown.isEmpty && twice.isEmpty && damaged.isEmpty, "\(label): \(problems)")
        var totals: [String: Int64] = [:]
        for counter in counters {
            guard let id = counter.primaryKey.value.stringValue else { continue }
            totals[id] = counter["total"].intValue
        }
        let expected = (0..<Self.counterCount).reduce(into: [String: Int64]()) {
            $0["c\($1)"] = written.counters["c\($1)", default: 0]
        }
        #expect(totals == expected, "\(label): \(name)'s counters \(totals), the increments sum to \(expected)")
        let contents = try DaemonKillDrillTests.LogContents(replica)
        #expect(
            contents.integratedTwice.isEmpty && contents.loggedTwice(ownedBy: app).isEmpty,
            "\(label): \(name) logged twice: \(contents.integratedTwice) \(contents.loggedTwice(ownedBy: app))")
        let report = try replica.verify()
        #expect(report.passed, "\(label): \(name): \(report)")
    }

    /// Whether the daemons' replicas (read from their directories) have the same version vector and objects.
    static func daemonsInStep(_ directories: [String]) throws -> Bool {
        var vectors: Set<VersionVector> = []
        var digests: Set<UInt64> = []
        for directory in directories {
            try withReplica(directory) { replica in
                vectors.insert(replica.versionVector)
                digests.insert(try replica.viewDigest(includeVersionVector: false))
            }
        }
        return vectors.count == 1 && digests.count == 1
    }

    /// Runs `body` on the replica in `directory`, opened read-only (beside the daemon that may hold it) for the call.
    static func withReplica<T>(_ directory: String, _ body: (Replica) throws -> T) throws -> T {
        let replica = try DaemonKillDrillTests.openReadOnly(directory)
        defer { replica.close() }
        return try body(replica)
    }

    /// The errors sessions ended with at the daemons (apps' and peers' sessions, and peer links), by code, from the
    /// logs of every daemon run in `directory`.
    static func sessionEnds(in directory: String) -> Tally {
        let tally = Tally()
        let logs = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for name in logs where name.hasPrefix("daemon") && name.hasSuffix(".log") {
            let text = (try? String(contentsOfFile: "\(directory)/\(name)", encoding: .utf8)) ?? ""
            for line in text.split(separator: "\n")
            where line.contains("session ended") || line.contains("disconnected") || line.contains("before it opened") {
                guard let range = line.range(of: "error=") else { continue }
                tally.add(String(line[range.upperBound...].prefix { $0 != " " }))
            }
        }
        return tally
    }

    /// The apps' changesets their daemons have acknowledged, in all.
    static func acknowledged(_ apps: [App]) async throws -> UInt64 {
        var total: UInt64 = 0
        for app in apps { total += await DaemonKillDrillTests.current(app.session.uploadProgress()).transferred }
        return total
    }

    // MARK: Helper types

    struct App: Sendable {
        var index: Int
        var daemon: Int
        var replica: Replica
        var session: SyncSession
    }

    /// A `tributaryd` child process and how to start it again.
    struct Daemon {
        enum State: String { case running, paused, killed }

        var index: Int
        var directory: String
        var port: Int
        var arguments: [String]
        var child: ChildProcess?
        var state = State.killed
        var starts = 0
        /// libfaketime's variables when the daemon runs with its clock off.
        var environment: [String: String] = [:]
        /// How far the daemon's clock was off, from the time on the line it logs once it listens.
        var clockOffsetSeen: Double?

        mutating func start(children: DaemonKillDrillTests.Children, logs: TemporaryDirectory) async throws {
            let log = logs.appending("daemon\(index)-\(starts).log")
            starts += 1
            let before = Date()
            let (child, listening) = try await DaemonKillDrillTests.startDaemon(
                directory, port: port, arguments: arguments, environment: environment, log: log, children: children)
            let after = Date()
            (self.child, port, state) = (child, listening, .running)
            if !environment.isEmpty { FakeTime.started(child.pid) }
            if let logged = Self.loggedTime(child.standardError) {
                let offset =
                    logged < before.addingTimeInterval(-1)
                    ? logged.timeIntervalSince(before) : max(0, logged.timeIntervalSince(after))
                clockOffsetSeen = environment.isEmpty ? nil : offset
            }
        }

        var log: String { child?.standardError ?? "" }

        /// The time at the start of the "serving replica" line (swift-log's `StreamLogHandler`: ISO 8601, seconds).
        static func loggedTime(_ log: String) -> Date? {
            guard let line = log.split(separator: "\n").first(where: { $0.contains(" serving replica ") }),
                let stamp = line.split(separator: " ").first
            else { return nil }
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.dateFormat = "yyyy-MM-dd'T'HH:mm:ssZ"
            return formatter.date(from: String(stamp))
        }
    }

    /// The elements and increments the apps committed, and whether they write on.
    final class Ledger: Sendable {
        struct Snapshot {
            var elements: Set<String> = []
            var counters: [String: Int64] = [:]
        }
        private let state = Mutex(Snapshot())
        private let open = Mutex(true)

        var isOpen: Bool { open.withLock { $0 } }

        func close() { open.withLock { $0 = false } }

        func record(element: String, counter: String, amount: Int64) {
            state.withLock { state in
                state.elements.insert(element)
                state.counters[counter, default: 0] += amount
            }
        }

        func snapshot() -> Snapshot { state.withLock { $0 } }
    }

    /// Occurrences by name.
    final class Tally: Sendable {
        private let counts = Mutex<[String: Int]>([:])

        func add(_ name: String) { counts.withLock { $0[name, default: 0] += 1 } }

        var summary: String {
            let counts = counts.withLock { $0 }
            return counts.isEmpty
                ? "none" : counts.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
        }
    }

    struct Figures {
        var acknowledgedAtHeal: UInt64 = 0
        var pendingAtDaemons = 0
        /// Changesets waiting at the daemon whose clock was behind, before its clock was set right.
        var waitingBehind = 0
        var proxies: [FaultProxy.Counts] = []

        var proxySummary: String {
            let accepted = proxies.reduce(0) { $0 + $1.accepted }
            let refused = proxies.reduce(0) { $0 + $1.refused }
            let corrupted = proxies.reduce(0) { $0 + $1.corrupted }
            let bytes = proxies.reduce(0) { $0 + $1.bytes }
            return "\(accepted) connections, \(refused) refused, \(corrupted) chunks corrupted, \(bytes >> 10) KiB"
        }
    }

    /// The fault schedule: what to break next, and what to repair when.
    struct Nemesis {
        var random: SplitMix64
        let clockOffsetMinutes: Int
        /// Faults by kind.
        var counts: [String: Int] = [:]
        /// The daemon restarted with its clock off, and how far off the time it logged then was, in seconds.
        var skewed: Int?
        var offsetSeen: Double?
        /// Repairs due: a partition to heal, a daemon to continue or restart.
        var repairs: [(due: ContinuousClock.Instant, repair: Repair)] = []

        enum Repair {
            case heal([Int])
            case resume(Int)
            case restart(Int)
        }

        var summary: String {
            counts.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
        }

        mutating func count(_ kind: String) { counts[kind, default: 0] += 1 }

        mutating func pick(_ bound: Int) -> Int { Int(random.next() % UInt64(bound)) }

        /// Proxies that carry daemon `daemon`'s traffic (its peer links and its apps').
        func proxies(of daemon: Int, _ proxies: [FaultProxy]) -> [Int] {
            proxies.indices.filter {
                proxies[$0].name.hasSuffix("daemon \(daemon)") || proxies[$0].name.hasPrefix("daemon \(daemon) ")
            }
        }

        /// Repairs whose time has come.
        mutating func recover(
            due now: ContinuousClock.Instant, daemons: inout [Daemon], proxies: [FaultProxy],
            children: DaemonKillDrillTests.Children, logs: TemporaryDirectory
        ) async throws {
            let ready = repairs.filter { $0.due <= now }
            repairs.removeAll { $0.due <= now }
            for (_, repair) in ready {
                switch repair {
                case .heal(let indices):
                    for index in indices { proxies[index].heal() }
                case .resume(let daemon):
                    daemons[daemon].child?.send(SIGCONT)
                    daemons[daemon].state = .running
                case .restart(let daemon):
                    try await daemons[daemon].start(children: children, logs: logs)
                }
            }
        }

        /// One fault, chosen at random among the daemons that run and the proxies.
        mutating func strike(
            daemons: inout [Daemon], proxies: [FaultProxy], children: DaemonKillDrillTests.Children,
            logs: TemporaryDirectory
        ) async throws {
            let running = daemons.indices.filter { daemons[$0].state == .running }
            let roll = pick(100)
            switch roll {
            case 0..<22:
                proxies[pick(proxies.count)].cut()
                count("cuts")
            case 22..<40:
                proxies[pick(proxies.count)].delay(.milliseconds(pick(2_001)))
                count("delays")
            case 40..<54:
                // A single link, or every link of one daemon; refused or blackholed for 1-4 s.
                let indices = pick(2) == 0 ? [pick(proxies.count)] : self.proxies(of: pick(daemons.count), proxies)
                let mode = FaultProxy.Partition.allCases[pick(2)]
                for index in indices { proxies[index].partition(mode) }
                repairs.append((.now + .milliseconds(1_000 + pick(3_000)), .heal(indices)))
                count("partitions (\(mode.rawValue))")
            case 54..<72:
                let corruption = FaultProxy.Corruption.allCases[pick(2)]
                if proxies[pick(proxies.count)].corrupt(corruption) { count("corruptions (\(corruption.rawValue))") }
            case 72..<86 where !running.isEmpty:
                let daemon = running[pick(running.count)]
                daemons[daemon].child?.send(SIGKILL)
                _ = try await DaemonKillDrillTests.ended(try #require(daemons[daemon].child), timeout: 30)
                daemons[daemon].state = .killed
                repairs.append((.now + .milliseconds(pick(2_000)), .restart(daemon)))
                count("kill -9")
            case 86..<100 where !running.isEmpty:
                let daemon = running[pick(running.count)]
                daemons[daemon].child?.send(SIGSTOP)
                daemons[daemon].state = .paused
                repairs.append((.now + .milliseconds(1_000 + pick(4_000)), .resume(daemon)))
                count("SIGSTOP")
            default:
                break
            }
        }

        /// Restarts a running daemon (after SIGKILL) with its clock `clockOffsetMinutes` off.
        mutating func skewClock(
            daemons: inout [Daemon], children: DaemonKillDrillTests.Children, logs: TemporaryDirectory
        ) async throws {
            let running = daemons.indices.filter { daemons[$0].state == .running }
            guard !running.isEmpty, let library = FakeTime.library else { return }
            let daemon = running[pick(running.count)]
            daemons[daemon].child?.send(SIGKILL)
            _ = try await DaemonKillDrillTests.ended(try #require(daemons[daemon].child), timeout: 30)
            daemons[daemon].environment = FakeTime.environment(library: library, offsetMinutes: clockOffsetMinutes)
            try await daemons[daemon].start(children: children, logs: logs)
            skewed = daemon
            offsetSeen = daemons[daemon].clockOffsetSeen
            count("clock \(clockOffsetMinutes > 0 ? "+" : "")\(clockOffsetMinutes) min restarts")
        }
    }
}

/// libfaketime (Debian's `faketime` package): preloaded into a child, it shifts the wall clock the child reads
/// (`Date`, `clock_gettime(CLOCK_REALTIME)`); monotonic clocks are left alone, so the child's timers run true.
///
/// Preloaded straight into a Swift executable, libfaketime 0.9.10 leaves the Swift runtime with no command-line
/// arguments (`CommandLine.arguments` is empty; a C program, or a Swift one started through `faketime` or a shell,
/// gets them). It sets `FAKETIME_SHARED` in the environment as the process starts, which is the likely cause: with
/// that variable already set (a placeholder), the arguments arrive. Its shared memory (two small files in /dev/shm,
/// named after the process, which `FAKETIME_DISABLE_SHM` does not prevent) stays behind when a child is killed with
/// SIGKILL: ``removeLeftovers()`` removes it.
enum FakeTime {
    static let library: String? = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1",
    ].first { FileManager.default.fileExists(atPath: $0) }

    /// The children started with libfaketime.
    private static let children = Mutex<[Int32]>([])

    static func started(_ pid: Int32) { children.withLock { $0.append(pid) } }

    /// Removes what libfaketime leaves in /dev/shm for each child started with it that has ended (a child killed
    /// with SIGKILL does not remove its own).
    static func removeLeftovers() {
        for pid in children.withLock({ $0 }) where kill(pid, 0) != 0 {
            for name in ["faketime_shm_\(pid)", "sem.faketime_sem_\(pid)"] {
                try? FileManager.default.removeItem(atPath: "/dev/shm/\(name)")
            }
        }
        children.withLock { $0.removeAll() }
    }

    /// The variables that run a child with its wall clock `offsetMinutes` off.
    static func environment(library: String, offsetMinutes: Int) -> [String: String] {
        [
            "LD_PRELOAD": library, "FAKETIME": "\(offsetMinutes >= 0 ? "+" : "")\(offsetMinutes)m",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_DISABLE_SHM": "1", "FAKETIME_SHARED": "none none",
        ]
    }
}
