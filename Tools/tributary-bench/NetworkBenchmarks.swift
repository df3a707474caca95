import Foundation
import NIOCore
import NIOPosix
import NIOWebSocket
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync

#if canImport(Glibc)
    import Glibc
#endif

/// Sync over loopback: a daemon in this process, apps connecting to it over real sockets, against raw LMDB and a
/// plain socket measured in the same run.
struct NetworkBenchmarks {
    let context: BenchContext

    func run() async throws {
        if context.wants("daemon_upload") { try await uploads() }
        if context.wants("write_to_live_results") { try await liveLatency() }
        if context.wants("first_sync") { try await firstSync() }
        if context.wants("flexible_bootstrap") { try await flexibleBootstrap() }
        if context.wants("peer_catch_up") { try await peerCatchUp() }
        if context.wants("idle_sessions") { try await idleSessions() }
    }

    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Note",
                properties: [
                    .scalar("_id", .string), .scalar("text", .string, default: ""), .scalar("n", .int, default: 0),
                ])
        ])

    func daemon(_ name: String, peers: [SyncEndpoint] = []) async throws -> (SyncServer, SyncEndpoint) {
        let replica = try Replica.open(directory: context.path(name))
        var configuration = SyncServer.Configuration()
        configuration.port = 0
        configuration.peers = peers
        configuration.peerBackoff = ReconnectBackoff(initial: .milliseconds(20), maximum: .milliseconds(200))
        // Every client of these benchmarks connects from 127.0.0.1: the idle-sessions one opens 1,000.
        configuration.connectionsPerAddress = 4096
        let server = SyncServer(replica: replica, configuration: configuration)
        let port = try await server.start()
        return (server, SyncEndpoint(host: "127.0.0.1", port: port))
    }

    func app(_ name: String, durability: Replica.Durability = .none) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = durability
        return try Replica.open(directory: context.path(name), schema: Self.schema, configuration: configuration)
    }

    /// Eight apps, each uploading one small changeset at a time and waiting until the daemon acknowledged it as
    /// durable before sending the next: acknowledged changesets per second, against raw LMDB committing each of those
    /// changesets in a durable transaction of its own. The daemon's group commit is what lets it beat one fsync per
    /// changeset. The apps are bare protocol clients sending changesets written beforehand (on their own replicas),
    /// so that the figure is the daemon's, not that of eight apps integrating each other's writes on the same two
    /// cores. The run alternates five times between a round of uploads and the baseline on that round's changesets,
    /// so that both sides see the same disk (a virtual machine's fsync latency drifts by a factor of two or more
    /// within a minute).
    func uploads() async throws {
        let clients = 8
        let roundsOfUploads = 5
        let perClient = max(50, context.commits)
        let (server, endpoint) = try await daemon("upload-daemon")
        let uploads = try await preparedUploads("upload-app", clients: clients, perClient: perClient)
        func bounds(_ changesets: [[UInt8]]) -> [Int] { Self.bounds(changesets, rounds: roundsOfUploads) }
        let rounds = RoundGate(clients: clients)
        let raw = try RawLMDB(path: context.path("upload-raw"))
        let rssBefore = anonymousResidentBytes()
        let peak = PeakSampler()
        let sampler = Task {
            while !Task.isCancelled {
                peak.sample()
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        var seconds = 0.0
        var baselineSeconds = 0.0
        var rawKey = 0
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, (replica, changesets)) in uploads.enumerated() {
                group.addTask {
                    try await Self.upload(
                        changesets, in: bounds(changesets), as: replica, to: endpoint,
                        waiting: rounds.startStreams[index], finished: rounds.finished)
                }
            }
            var finished = rounds.finishedStream.makeAsyncIterator()
            for round in 0..<roundsOfUploads {
                let start = ContinuousClock.now
                for start in rounds.starts { start.yield() }
                for _ in 0..<clients { _ = await finished.next() }
                seconds += (ContinuousClock.now - start).seconds
                // Baseline: the same changesets, each in a durable LMDB commit of its own.
                baselineSeconds += try time {
                    for (_, changesets) in uploads {
                        let bounds = bounds(changesets)
                        for bytes in changesets[bounds[round]..<bounds[round + 1]] {
                            var txn: OpaquePointer?
                            try check(mdb_txn_begin_shim(raw, &txn), "mdb_txn_begin")
                            try raw.put(txn, Array("c\(rawKey)".utf8), bytes)
                            try check(mdb_txn_commit_shim(txn), "mdb_txn_commit")
                            rawKey += 1
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        sampler.cancel()
        let acknowledged = Double(uploads.reduce(0) { $0 + $1.1.count })
        let held = try await server.replica.read { try $0.count("Note") }
        precondition(held == clients * perClient, "the daemon holds \(held) notes, not \(clients * perClient)")
        let (commits, batches) = await server.commitStatistics()
        Measurement(
            name: "daemon_upload_8_clients_acknowledged_durable", value: acknowledged / seconds, unit: "changesets/s",
            baseline: "raw LMDB, each changeset in a durable commit of its own (changesets/s)",
            baselineValue: acknowledged / baselineSeconds
        ).print()
        Measurement(
            name: "daemon_upload_8_clients_group_commit", value: Double(batches) / Double(max(commits, 1)),
            unit: "batches per commit", baseline: "one batch per commit", baselineValue: 1
        ).print()
        Measurement(
            name: "daemon_upload_8_clients_rss_anon_growth", value: Double(max(0, peak.peak - rssBefore)) / 1_048_576,
            unit: "MiB", baseline: "the window of 8 sessions (MiB)",
            baselineValue: Double(clients) * Double(SyncProtocol.defaultWindow) / 1_048_576, higherIsBetter: false
        ).print()
        await server.stop()
    }

    /// The changesets of `clients` apps that each created `perClient` notes, one per changeset, as they upload them
    /// (compressed), with each app's id.
    func preparedUploads(_ prefix: String, clients: Int, perClient: Int) async throws -> [(ReplicaID, [[UInt8]])] {
        var uploads: [(ReplicaID, [[UInt8]])] = []
        for index in 0..<clients {
            let replica = try app("\(prefix)-\(index)")
            for round in 0..<perClient {
                try await replica.write { txn in
                    try txn.create(
                        "Note", ["_id": .string("\(index)-\(round)"), "text": "a small note", "n": .int(Int64(round))])
                }
            }
            uploads.append(
                (replica.replicaID, try replica.encodedChangesets(missingFrom: VersionVector(), compressed: true)))
            replica.close()
        }
        return uploads
    }

    /// Round r of a client: its changesets from bounds[r] up to bounds[r + 1] (an app's log also holds the changeset
    /// that created its schema).
    static func bounds(_ changesets: [[UInt8]], rounds: Int) -> [Int] {
        (0...rounds).map { $0 * changesets.count / rounds }
    }

    /// Starts the upload benchmark's rounds, and hears each client finish one.
    struct RoundGate {
        let starts: [AsyncStream<Void>.Continuation]
        let startStreams: [AsyncStream<Void>]
        let finished: AsyncStream<Void>.Continuation
        let finishedStream: AsyncStream<Void>

        init(clients: Int) {
            let pairs = (0..<clients).map { _ in AsyncStream<Void>.makeStream() }
            starts = pairs.map(\.continuation)
            startStreams = pairs.map(\.stream)
            (finishedStream, finished) = AsyncStream<Void>.makeStream()
        }
    }

    /// A bare app client: says hello, then, at each start of a round, sends that round's `changesets` (those from
    /// `bounds[r]` up to `bounds[r + 1]`) one per batch, each after the previous one was acknowledged, and reports the
    /// round finished. It reads and drops what the daemon sends it (and never acknowledges it, so the daemon's window
    /// holds that to one window).
    static func upload(
        _ changesets: [[UInt8]], in bounds: [Int], as replica: ReplicaID, to endpoint: SyncEndpoint,
        waiting starts: AsyncStream<Void>, finished: AsyncStream<Void>.Continuation
    ) async throws {
        do {
            try await uploadRounds(
                changesets, in: bounds, as: replica, to: endpoint, waiting: starts, finished: finished)
        } catch {
            // The rounds wait for every client: one that cannot go on must end the run, not hang it.
            fatalError("the upload of client \(replica) to \(endpoint) failed: \(error)")
        }
    }

    private static func uploadRounds(
        _ changesets: [[UInt8]], in bounds: [Int], as replica: ReplicaID, to endpoint: SyncEndpoint,
        waiting starts: AsyncStream<Void>, finished: AsyncStream<Void>.Continuation
    ) async throws {
        let channel = try await WebSocketDialer.connect(to: endpoint)
        let writer = WebSocketWriter(channel: channel.channel, masking: true)
        var starts = starts.makeAsyncIterator()
        try await channel.executeThenClose { inbound, _ in
            try await writer.send(
                MessageCodec.encode(.hello(Hello(replica: replica, role: .app, vector: VersionVector()))))
            var next = 0
            /// Sends the next changeset, once its round started; false once every one was acknowledged.
            func sendNext() async throws -> Bool {
                if bounds.contains(next) {
                    if next > 0 { finished.yield() }
                    if next == changesets.count { return false }
                    _ = await starts.next()
                }
                let batch = ChangesetBatch(
                    number: UInt64(next + 1), changesets: [changesets[next]], progress: VersionVector(), more: false)
                try await writer.send(MessageCodec.encode(.changesets(batch)))
                next += 1
                return true
            }
            for try await frame in inbound where frame.opcode == .binary {
                var data = frame.unmaskedData
                switch try MessageCodec.decode(data.readBytes(length: data.readableBytes) ?? []) {
                case .welcome:
                    _ = try await sendNext()
                case .ack(let ack) where ack.batch == UInt64(next):
                    if try await !sendNext() { return }
                case .error(let error):
                    throw error
                default:
                    continue
                }
            }
        }
    }

    /// A write on one app to the change in another app's live results, through the daemon: median and 99th
    /// percentile, against the latency of one durable raw LMDB commit (the daemon commits the write durably before
    /// it forwards it: that is the floor).
    func liveLatency() async throws {
        let samples = 200
        let (server, endpoint) = try await daemon("latency-daemon")
        let latencies = try await appToAppLatencies(
            "latency", writingTo: endpoint, readingFrom: endpoint, samples: samples)
        let baseline = try durableCommitMilliseconds(samples: samples)
        Measurement(
            name: "write_to_live_results_through_daemon_median", value: latencies[samples / 2], unit: "ms",
            baseline: "one durable raw LMDB commit, median (ms)", baselineValue: baseline.median,
            higherIsBetter: false
        ).print()
        Measurement(
            name: "write_to_live_results_through_daemon_p99", value: latencies[samples * 99 / 100], unit: "ms",
            baseline: "one durable raw LMDB commit, p99 (ms)", baselineValue: baseline.p99, higherIsBetter: false
        ).print()
        await server.stop()
    }

    /// Milliseconds from a write on one app (connected to `writing`) to the change in another app's live results
    /// (connected to `reading`), `samples` times, sorted.
    func appToAppLatencies(
        _ prefix: String, writingTo writing: SyncEndpoint, readingFrom reading: SyncEndpoint, samples: Int
    ) async throws -> [Double] {
        let writer = try app("\(prefix)-a")
        let reader = try app("\(prefix)-b")
        let writerSession = writer.connect(to: writing)
        let readerSession = reader.connect(to: reading)
        try await writerSession.waitForUpload()
        try await readerSession.waitForDownload()
        let (counts, counted) = AsyncStream<Int>.makeStream()
        let observer = Task {
            for try await change in reader.observe("Note") { counted.yield(change.results.count) }
        }
        var seen = counts.makeAsyncIterator()
        while let count = await seen.next(), count < 0 {}  // the initial results
        var latencies: [Double] = []
        for index in 0..<samples {
            let start = ContinuousClock.now
            try await writer.write { try $0.create("Note", ["_id": .string("l\(index)")]) }
            while let count = await seen.next(), count < index + 1 {}
            latencies.append((ContinuousClock.now - start).seconds * 1000)
        }
        observer.cancel()
        await writerSession.close()
        await readerSession.close()
        writer.close()
        reader.close()
        return latencies.sorted()
    }

    /// A fresh app's first sync from a daemon holding 100,000 objects: objects per second, against the same bytes
    /// sent over a plain loopback socket.
    func firstSync() async throws {
        let objects = context.objects
        let (server, endpoint) = try await daemon("first-sync-daemon")
        let seed = try await seeded("first-sync-seed", objects: objects)
        let seeding = seed.connect(to: endpoint)
        try await seeding.waitForUpload()
        await seeding.close()
        let bytes = try server.replica.encodedChangesets(missingFrom: VersionVector(), compressed: true)
            .reduce(0) { $0 + $1.count }

        let fresh = try app("first-sync-fresh")
        let start = ContinuousClock.now
        let session = fresh.connect(to: endpoint)
        try await session.waitForDownload()
        let seconds = (ContinuousClock.now - start).seconds
        let count = try await fresh.read { try $0.count("Note") }
        precondition(count == objects, "the first sync brought \(count) objects, not \(objects)")
        await session.close()
        await server.stop()
        let socketSeconds = try await plainTransferSeconds(bytes: bytes)
        Measurement(
            name: "first_sync_\(objects)_objects", value: Double(objects) / seconds, unit: "objects/s",
            baseline: "the same \(bytes) bytes over a plain loopback socket (objects/s)",
            baselineValue: Double(objects) / socketSeconds
        ).print()
    }

    /// An app replica holding `objects` notes, written 1,000 per transaction.
    func seeded(_ name: String, objects: Int) async throws -> Replica {
        let seed = try app(name)
        var written = 0
        while written < objects {
            let range = written..<min(objects, written + 1_000)
            try await seed.write { txn in
                for index in range {
                    try txn.create(
                        "Note",
                        ["_id": .string("n\(index)"), "text": .string("note \(index)"), "n": .int(Int64(index))])
                }
            }
            written += 1_000
        }
        return seed
    }

    /// A flexible-sync app subscribing to every object a daemon holds: objects per second from the commit of the set
    /// to its completion (the daemon reads each record, sends it whole, the app applies the bootstrap in one
    /// transaction), against a full replica exporting the changesets that made the same objects and another
    /// integrating them, in this process.
    func flexibleBootstrap() async throws {
        let objects = context.objects
        let (server, endpoint) = try await daemon("bootstrap-daemon")
        let seed = try await seeded("bootstrap-seed", objects: objects)
        let seeding = seed.connect(to: endpoint)
        try await seeding.waitForUpload()
        await seeding.close()

        let phone = try app("bootstrap-phone")
        let session = phone.connect(to: endpoint)
        try await phone.subscriptions.update { $0.append("Note", where: "n >= 0", name: "all") }
        let start = ContinuousClock.now
        try await phone.subscriptions.update { $0.append("Note", where: "TRUEPREDICATE", name: "every") }
        let seconds = (ContinuousClock.now - start).seconds
        let held = try await phone.read { try $0.count("Note") }
        precondition(held == objects, "the bootstrap brought \(held) objects, not \(objects)")
        await session.close()
        await server.stop()

        // The baseline: the same objects' changesets exported from one full replica and integrated into another.
        let target = try app("bootstrap-baseline")
        let baselineStart = ContinuousClock.now
        var progress = VersionVector()
        while true {
            let export = try seed.export(missingFrom: progress, limit: 1_000, maximumBytes: 1 << 20)
            if export.changesets.isEmpty { break }
            try target.integrate(encoded: export.changesets)
            progress = export.progress
        }
        let baselineSeconds = (ContinuousClock.now - baselineStart).seconds
        Measurement(
            name: "flexible_bootstrap_\(objects)_objects", value: Double(objects) / seconds, unit: "objects/s",
            baseline: "export and integrate of the same objects' changesets between full replicas (objects/s)",
            baselineValue: Double(objects) / baselineSeconds
        ).print()
    }

    /// A peer daemon catching up a log it lacks entirely: changesets per second, against `encodedChangesets` plus
    /// `integrate(encoded:)` in this process, in batches of the same size.
    func peerCatchUp() async throws {
        let count = min(context.exportChangesets, 1_000_000)
        let source = try Replica.open(directory: context.path("catch-up-source"))
        let origin = ReplicaID(rawValue: 77)
        try SyncBenchmarks.integrateGenerated(
            count: count, origin: origin, property: "n", schemaVersion: 0,
            first: [.addType(ObjectSchema(name: "Item", properties: [.scalar("_id", .int), .scalar("n", .int)]))],
            into: source)
        source.close()

        // Baseline: export and integrate in this process, 1,000 at a time.
        let direct = try Replica.open(directory: context.path("catch-up-direct"))
        let reopened = try Replica.open(directory: context.path("catch-up-source"))
        let baselineSeconds = try time {
            var vector = VersionVector()
            while true {
                let export = try reopened.export(missingFrom: vector, limit: 1_000, maximumBytes: 1 << 20)
                if export.changesets.isEmpty { break }
                try direct.integrate(encoded: export.changesets)
                vector = export.progress
            }
        }
        precondition(direct.versionVector == reopened.versionVector)
        reopened.close()

        let (server, endpoint) = try await daemon("catch-up-source")
        let start = ContinuousClock.now
        let (follower, _) = try await daemon("catch-up-follower", peers: [endpoint])
        while follower.replica.versionVector != server.replica.versionVector {
            try await Task.sleep(for: .milliseconds(10))
            if ContinuousClock.now - start > .seconds(600) {
                throw LMDBFailure(description: "catch-up took over 600 s")
            }
        }
        let seconds = (ContinuousClock.now - start).seconds
        await follower.stop()
        await server.stop()
        Measurement(
            name: "peer_catch_up_\(count)_changesets", value: Double(count) / seconds, unit: "changesets/s",
            baseline: "export plus integrate(encoded:) in one process, 1,000 at a time (changesets/s)",
            baselineValue: Double(count) / baselineSeconds
        ).print()
    }

    /// 1,000 idle sessions on one daemon: the process's anonymous memory per session. The clients run in this
    /// process too (bare protocol clients, no replica), so the figure counts both ends of each connection.
    func idleSessions() async throws {
        let count = 1_000
        raiseOpenFileLimit(to: 4 * count + 256)
        let (server, endpoint) = try await daemon("idle-daemon")
        var channels: [NIOAsyncChannel<WebSocketFrame, WebSocketFrame>] = []
        let before = anonymousResidentBytes()
        for index in 0..<count {
            let channel = try await WebSocketDialer.connect(to: endpoint)
            let hello = Hello(
                replica: ReplicaID(rawValue: 1_000_000 + UInt64(index)), role: .app,
                vector: VersionVector())
            try await WebSocketWriter(channel: channel.channel, masking: true).send(MessageCodec.encode(.hello(hello)))
            channels.append(channel)
        }
        while server.sessions.count < count {
            try await Task.sleep(for: .milliseconds(20))
        }
        try await Task.sleep(for: .milliseconds(500))
        let after = anonymousResidentBytes()
        let perSession = Double(max(0, after - before)) / Double(count)
        for channel in channels { try? await channel.channel.close() }
        await server.stop()
        Measurement(
            name: "idle_sessions_1000_memory_per_session", value: perSession / 1024, unit: "KiB",
            baseline: "the 64 KiB budget per session (KiB)", baselineValue: 64, higherIsBetter: false
        ).print()
    }

    // MARK: Baselines and helpers

    func durableCommitMilliseconds(samples: Int) throws -> (median: Double, p99: Double) {
        let raw = try RawLMDB(path: context.path("latency-raw"))
        var times: [Double] = []
        for index in 0..<samples {
            let start = ContinuousClock.now
            var txn: OpaquePointer?
            try check(mdb_txn_begin_shim(raw, &txn), "mdb_txn_begin")
            try raw.put(txn, Array("k\(index)".utf8), Array(repeating: 1, count: 100))
            try check(mdb_txn_commit_shim(txn), "mdb_txn_commit")
            times.append((ContinuousClock.now - start).seconds * 1000)
        }
        times.sort()
        return (times[samples / 2], times[samples * 99 / 100])
    }

    func plainTransferSeconds(bytes: Int) async throws -> Double {
        let pair = try PlainSocketPair()
        defer { pair.close() }
        let chunk = [UInt8](repeating: 7, count: 64 << 10)
        let reader = Thread {
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            var received = 0
            while received < bytes {
                let n = read(pair.server, &buffer, buffer.count)
                if n <= 0 { break }
                received += n
            }
        }
        let start = ContinuousClock.now
        reader.start()
        var sent = 0
        while sent < bytes {
            let n = chunk.withUnsafeBytes { write(pair.client, $0.baseAddress, min($0.count, bytes - sent)) }
            if n <= 0 { break }
            sent += n
        }
        while reader.isExecuting || !reader.isFinished { try await Task.sleep(for: .microseconds(200)) }
        return (ContinuousClock.now - start).seconds
    }
}

/// Two ends of a TCP connection on loopback, as plain file descriptors.
struct PlainSocketPair {
    let client: Int32
    let server: Int32
    private let listener: Int32

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &address) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                guard bind(listener, raw, length) == 0, listen(listener, 1) == 0,
                    getsockname(listener, raw, &length) == 0
                else { throw LMDBFailure(description: "cannot listen on loopback") }
            }
        }
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, length) }
        }
        guard connected == 0 else { throw LMDBFailure(description: "cannot connect on loopback") }
        let server = accept(listener, nil, nil)
        setsockopt(server, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        self.listener = listener
        self.client = client
        self.server = server
    }

    func close() {
        _ = Glibc.close(client)
        _ = Glibc.close(server)
        _ = Glibc.close(listener)
    }
}

final class PeakSampler: @unchecked Sendable {
    private let lock = NSLock()
    private var highest = 0
    var peak: Int {
        lock.lock()
        defer { lock.unlock() }
        return highest
    }
    func sample() {
        let now = anonymousResidentBytes()
        lock.lock()
        highest = max(highest, now)
        lock.unlock()
    }
}

/// The process's anonymous resident memory (RssAnon), in bytes.
func anonymousResidentBytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("RssAnon:") {
        let parts = line.split(separator: " ", omittingEmptySubsequences: true)
        if parts.count >= 2, let kib = Int(parts[1]) { return kib * 1024 }
    }
    return 0
}

func raiseOpenFileLimit(to wanted: Int) {
    var limit = rlimit()
    guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
    limit.rlim_cur = min(max(limit.rlim_cur, rlim_t(wanted)), limit.rlim_max)
    setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
