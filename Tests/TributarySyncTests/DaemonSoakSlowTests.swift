import Foundation
import Synchronization
import Testing
import Tributary
import TributaryModel
import TributarySync
import TributaryTestSupport
import TributaryTestTags

#if canImport(Glibc)
    import Glibc
#endif

/// `tributaryd` (a child process) under a steady load: several apps in this process write, upload, read and reconnect
/// without pause for 60 seconds (10 minutes with `TRIBUTARY_DEEP=1`), while the daemon's `RssAnon` is read from
/// `/proc/PID/status` every second.
///
/// The daemon's anonymous memory must stay under 256 MiB and must not grow in the second half of the run: the
/// least-squares slope of those samples stays under 16 MiB a minute in the suite (30 samples; on a busy 2-core machine
/// a few MiB of allocator noise over 30 seconds alone tilts such a fit by several MiB a minute) and under 1 MiB a minute
/// in the deep run (300 samples after five minutes of warm-up). Every app's writes reach the daemon, a fresh app
/// downloads all of them, and the daemon's replica verifies after it stops.
@Suite("tributaryd under a steady load", .serialized, .tags(.slow))
struct DaemonSoakSlowTests {
    static let duration: Duration = Deep.enabled ? .seconds(600) : .seconds(60)
    static let apps = 4
    /// Each app closes its session and opens a new one this often.
    static let reconnectEvery: Duration = .seconds(10)
    /// The most `RssAnon` the daemon may reach.
    static let bound = 256 << 20
    /// The steepest slope of `RssAnon` allowed over the second half, in MiB per minute.
    static let slopeLimit: Double = Deep.enabled ? 1 : 16

    /// One app's share of the load.
    struct AppLoad: Sendable {
        var created = 0
        var transactions = 0
        var reconnects = 0
    }

    @Test("tributaryd serving apps that write, read and reconnect for a minute: memory bounded, not growing")
    func soak() async throws {
        let children = DaemonKillDrillTests.Children()
        defer { children.killAll() }
        let directory = TemporaryDirectory("soak")
        let (daemon, port) = try await DaemonKillDrillTests.startDaemon(
            directory.appending("daemon"), log: directory.appending("daemon.log"), children: children)
        let endpoint = SyncEndpoint(host: "127.0.0.1", port: port)

        // Sampled on a thread of its own: a task of the pool may wake late when the pool is busy.
        let samples = Mutex<[(seconds: Double, bytes: Int)]>([])
        let sampling = Mutex(true)
        let started = ContinuousClock.now
        let sampler = Thread {
            while sampling.withLock({ $0 }) {
                if let bytes = ProcessMemory.field("RssAnon", of: daemon.pid) {
                    let elapsed = ContinuousClock.now - started
                    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                    samples.withLock { $0.append((seconds, bytes)) }
                }
                usleep(1_000_000)
            }
        }
        sampler.start()
        defer { sampling.withLock { $0 = false } }

        let deadline = started + Self.duration
        let loads = try await withThrowingTaskGroup(of: AppLoad.self) { group in
            for index in 0..<Self.apps {
                group.addTask {
                    try await Self.run(app: index, directory: directory, endpoint: endpoint, until: deadline)
                }
            }
            var loads: [AppLoad] = []
            for try await load in group { loads.append(load) }
            return loads
        }
        let loadEnded = ContinuousClock.now
        sampling.withLock { $0 = false }
        let figures = samples.withLock { $0 }

        // A fresh app downloads every object the apps created.
        let created = loads.reduce(0) { $0 + $1.created }
        let fresh = try LoopbackSyncTests.app(directory, "fresh")
        let session = fresh.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        try await LoopbackSyncTests.within(.seconds(300), "the fresh app's download") {
            try await session.waitForDownload()
        }
        #expect(try await fresh.read { try $0.count("Task") } == created)
        await session.close()
        #expect(daemon.waitForExit(timeout: 0) == nil, "the daemon ended: \(daemon.standardError)")
        daemon.send(SIGTERM)
        #expect(try await DaemonKillDrillTests.ended(daemon, timeout: 60) == .exited(0), "\(daemon.standardError)")
        let server = try DaemonKillDrillTests.openReadOnly(directory.appending("daemon"))
        defer { server.close() }
        #expect(try server.verify().passed)

        // The figures.
        let transactions = loads.reduce(0) { $0 + $1.transactions }
        let reconnects = loads.reduce(0) { $0 + $1.reconnects }
        let seconds = Self.seconds(loadEnded - started)
        let half = Self.seconds(Self.duration) / 2
        let secondHalf = figures.filter { $0.seconds >= half }
        let slope = Self.slope(secondHalf) * 60 / 1_048_576
        let peak = figures.map(\.bytes).max() ?? 0
        let summary =
            "soak: \(Self.apps) apps, \(transactions) changesets in \(String(format: "%.0f", seconds)) s "
            + "(\(String(format: "%.0f", Double(transactions) / seconds))/s), \(reconnects) reconnections; daemon "
            + "RssAnon start \(ProcessMemory.mebibytes(figures.first?.bytes ?? 0)), peak "
            + "\(ProcessMemory.mebibytes(peak)), end \(ProcessMemory.mebibytes(figures.last?.bytes ?? 0)), slope over "
            + "the second half \(String(format: "%.2f", slope)) MiB/min (\(secondHalf.count) samples)"
        print(summary)
        #expect(figures.count >= Int(half), "only \(figures.count) samples of RssAnon")
        #expect(secondHalf.count >= 10, "\(summary)")
        #expect(peak <= Self.bound, "\(summary)")
        #expect(slope < Self.slopeLimit, "\(summary)")
        #expect(transactions > 0 && reconnects >= Self.apps, "\(summary)")
    }

    /// One app until `deadline`: each transaction creates an object and increments another of its own; every 20 it
    /// waits for the upload and reads back what it holds; every ``reconnectEvery`` it opens a new session.
    static func run(
        app index: Int, directory: TemporaryDirectory, endpoint: SyncEndpoint, until deadline: ContinuousClock.Instant
    ) async throws -> AppLoad {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let app = try Replica.open(
            directory: directory.appending("app\(index)"), schema: LoopbackSyncTests.schema,
            configuration: configuration)
        defer { app.close() }
        var session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        var load = AppLoad()
        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 0x50AC) ^ UInt64(index))
        var connectedAt = ContinuousClock.now
        // Each app reconnects at least once, also one that started late on a busy machine and ends its run early.
        while ContinuousClock.now < deadline || load.reconnects == 0 {
            let key = "app\(index)-\(load.created)"
            let earlier = load.created > 0 ? "app\(index)-\(random.below(load.created))" : nil
            try await app.write { txn in
                try txn.create("Task", ["_id": .string(key), "title": .string("written by app \(index)")])
                if let earlier { try txn.increment(["count"], of: "Task", primaryKey: .string(earlier), by: 1) }
            }
            load.created += 1
            load.transactions += 1
            if load.transactions % 20 == 0 {
                let current = session
                try await LoopbackSyncTests.within(.seconds(120), "app \(index)'s upload") {
                    try await current.waitForUpload()
                }
                let own = try await app.read {
                    try $0.objects("Task").filter { $0.primaryKey.value.stringValue?.hasPrefix("app\(index)-") == true }
                        .count
                }
                #expect(own == load.created)
            }
            if ContinuousClock.now - connectedAt >= reconnectEvery || ContinuousClock.now >= deadline {
                await session.close()
                session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
                connectedAt = .now
                load.reconnects += 1
            }
        }
        let current = session
        try await LoopbackSyncTests.within(.seconds(300), "app \(index)'s last upload") {
            try await current.waitForUpload()
        }
        await session.close()
        return load
    }

    /// The least-squares slope of `samples`, in bytes per second.
    static func slope(_ samples: [(seconds: Double, bytes: Int)]) -> Double {
        guard samples.count >= 2 else { return 0 }
        let n = Double(samples.count)
        let meanX = samples.reduce(0) { $0 + $1.seconds } / n
        let meanY = samples.reduce(0) { $0 + Double($1.bytes) } / n
        var covariance = 0.0
        var variance = 0.0
        for sample in samples {
            covariance += (sample.seconds - meanX) * (Double(sample.bytes) - meanY)
            variance += (sample.seconds - meanX) * (sample.seconds - meanX)
        }
        return variance > 0 ? covariance / variance : 0
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
