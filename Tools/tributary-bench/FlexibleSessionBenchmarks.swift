import Foundation
import NIOCore
import NIOPosix
import NIOWebSocket
import Synchronization
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync

#if canImport(Glibc)
    import Glibc
#endif

/// Many flexible-sync sessions on one daemon: what a commit costs as sessions grow, and what each session and
/// subscription holds in memory. The devices are bare protocol clients in this process (no replica): each says hello
/// as a flexible-sync app, sends one subscription set, and acknowledges what it receives.
struct FlexibleSessionBenchmarks {
    let context: BenchContext

    func run() async throws {
        // Memory first: a benchmark before it leaves freed memory the allocator hands out again, which hides growth.
        if context.wants("flexible_sessions_memory") { try await memory() }
        if context.wants("flexible_commit") { try await commits() }
        if context.wants("flexible_upload_rules") { try await uploadsUnderRules() }
        if context.wants("flexible_bootstrap_rules") { try await bootstrapUnderRules() }
    }

    /// A flexible-sync app's bootstrap of every note from a daemon whose rules give it a read filter (evaluated on
    /// every object), and from one whose rules also hide a field (left out of every record sent), against the same
    /// bootstrap from a daemon without rules holding the same notes, in alternating rounds. Objects per second.
    func bootstrapUnderRules() async throws {
        let objects = min(context.objects, 100_000)
        let filter = #"{"n": {"$gte": 0}}"#
        let rules: [PermissionRules?] = [
            nil,
            try PermissionRules(
                json: Array(#"{"rules": {"Note": [{"name": "reader", "applyWhen": {}, "read": \#(filter)}]}}"#.utf8)),
            try PermissionRules(
                json: Array(
                    #"""
                    [{"collection": "Note", "roles": [{"name": "reader", "apply_when": {},
                      "document_filters": {"read": \#(filter), "write": {}}, "read": false, "write": false,
                      "fields": {"n": {"read": true}}}]}]
                    """#.utf8)),
        ]
        var daemons: [(SyncServer, SyncEndpoint)] = []
        for (index, rules) in rules.enumerated() {
            let daemon = try await daemon("bootstrap-rules-\(index)", rules: rules)
            var written = 0
            while written < objects {
                let range = written..<min(objects, written + 10_000)
                try await daemon.0.replica.write { txn in
                    for index in range {
                        try txn.create(
                            "Note", ["_id": .string("n\(index)"), "text": "a note", "n": .int(Int64(index))])
                    }
                }
                written = range.upperBound
            }
            daemons.append(daemon)
        }
        var seconds = [Double](repeating: 0, count: rules.count)
        for round in 0..<(3 * rules.count) {
            let variant = round % rules.count
            let start = ContinuousClock.now
            let clients = try await connect(
                count: 1, to: daemons[variant].1, firstReplica: 5_000_000 + UInt64(round)
            ) { _ in [Subscription(type: "Note", query: "TRUEPREDICATE")] }
            seconds[variant] += (ContinuousClock.now - start).seconds
            for client in clients { client.close() }
        }
        for (server, _) in daemons { await server.stop() }
        for (variant, name) in [(1, "flexible_bootstrap_rules"), (2, "flexible_bootstrap_hidden_fields")] {
            Measurement(
                name: "\(name)_\(objects)_objects", value: Double(objects * 3) / seconds[variant],
                unit: "objects/s", baseline: "the same bootstrap without rules (objects/s)",
                baselineValue: Double(objects * 3) / seconds[0]
            ).print()
        }
    }

    /// Four flexible-sync apps uploading one small changeset at a time, each waiting for its acknowledgement, to a
    /// daemon enforcing permission rules (a write filter evaluated on every object written), against the same
    /// uploads to a daemon without rules, in alternating rounds of the same run (each round on fresh daemons: the
    /// uploads are the same changesets). The daemons commit without fsync, so that the figure is the work of judging,
    /// not the disk's. Target: at least 0.8.
    func uploadsUnderRules() async throws {
        let clients = 4
        let perClient = max(100, context.commits)
        var uploads: [(ReplicaID, [[UInt8]])] = []
        for index in 0..<clients {
            var configuration = Replica.Configuration()
            configuration.durability = .none
            let app = try Replica.open(
                directory: context.path("rules-app-\(index)"), schema: NetworkBenchmarks.schema,
                configuration: configuration)
            for round in 0..<perClient {
                try await app.write { txn in
                    try txn.create(
                        "Note", ["_id": .string("\(index)-\(round)"), "text": "a small note", "n": .int(Int64(round))])
                }
            }
            uploads.append((app.replicaID, try app.encodedChangesets(missingFrom: VersionVector(), compressed: true)))
            app.close()
        }
        let rules = try PermissionRules(
            json: Array(
                #"{"rules": {"Note": [{"name": "writer", "applyWhen": {}, "read": true, "write": {"n": {"$gte": 0}}}]}}"#
                    .utf8))
        var seconds: [Bool: Double] = [false: 0, true: 0]
        for round in 0..<6 {
            let withRules = round % 2 == 1
            let (server, endpoint) = try await daemon(
                "rules-daemon-\(round)", rules: withRules ? rules : nil)
            let start = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (replica, changesets) in uploads {
                    group.addTask { try await Self.uploadFlexibly(changesets, as: replica, to: endpoint) }
                }
                try await group.waitForAll()
            }
            seconds[withRules]! += (ContinuousClock.now - start).seconds
            await server.stop()
        }
        let total = Double(uploads.map(\.1.count).reduce(0, +) * 3)
        Measurement(
            name: "flexible_upload_rules", value: total / seconds[true]!, unit: "acknowledged changesets/s",
            baseline: "the same uploads to a daemon without rules (changesets/s)",
            baselineValue: total / seconds[false]!
        ).print()
    }

    /// A bare flexible-sync app: hello, one set selecting every note, then its changesets one at a time, each after
    /// the acknowledgement of the one before.
    static func uploadFlexibly(_ changesets: [[UInt8]], as replica: ReplicaID, to endpoint: SyncEndpoint) async throws {
        let channel = try await WebSocketDialer.connect(to: endpoint)
        let writer = WebSocketWriter(channel: channel.channel, masking: true)
        try await channel.executeThenClose { inbound, _ in
            try await writer.send(
                MessageCodec.encode(
                    .hello(Hello(replica: replica, role: .app, vector: VersionVector(), flexible: true))))
            var next = 0
            func sendNext() async throws -> Bool {
                guard next < changesets.count else { return false }
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
                    let all = Subscription(type: "Note", query: "TRUEPREDICATE")
                    try await writer.send(MessageCodec.encode(.query(QueryRequest(version: 1, subscriptions: [all]))))
                case .queryState(let state) where state.version == 1:
                    guard state.error == nil else { throw LMDBFailure(description: "the set was refused: \(state)") }
                    _ = try await sendNext()
                case .ack(let ack) where ack.batch == UInt64(next):
                    guard ack.rejected.isEmpty else { throw LMDBFailure(description: "refused: \(ack.rejected)") }
                    if try await !sendNext() { return }
                case .changesets(let batch):
                    try await writer.send(
                        MessageCodec.encode(.ack(Acknowledgement(batch: batch.number, checkpoint: batch.progress))))
                case .error(let error):
                    throw error
                default:
                    continue
                }
            }
        }
    }

    /// A commit that changes one object, with 100 and with 1,000 sessions of 3 subscriptions each (equality on a
    /// property, as RChat's `conversationID == $0`), of which one session's subscriptions match the object: wall time
    /// and the process's CPU time per commit, each commit waited for until that session's device received it. The
    /// daemon commits without fsync here, so that the figure is the work of the commit and of the sessions, not the
    /// disk's. The target: 1,000 sessions cost at most 1.5 times 100.
    ///
    /// Sessions that a commit does not concern receive it later, as a skeleton (its instructions all omitted), with
    /// the next batch sent to them or in an idle catch-up (every 5 seconds by default; pushed out of the measured
    /// commits here). That work is measured apart, after the commits: every idle device asks for a download mark at
    /// once, and the process's CPU time until all are answered, per idle session, is the catch-up's.
    func commits() async throws {
        let commits = max(100, context.commits)
        var rounds: [Int: Round] = [:]
        for sessions in [100, 1_000] {
            rounds[sessions] = try await round(sessions: sessions, commits: commits)
        }
        let small = rounds[100]!
        let large = rounds[1_000]!
        Measurement(
            name: "flexible_commit_1000_sessions_wall", value: large.wallMilliseconds, unit: "ms per commit",
            baseline: "the same commits with 100 sessions (ms per commit)", baselineValue: small.wallMilliseconds,
            higherIsBetter: false
        ).print()
        Measurement(
            name: "flexible_commit_1000_sessions_cpu", value: large.cpuMilliseconds, unit: "CPU ms per commit",
            baseline: "the same commits with 100 sessions (CPU ms per commit)", baselineValue: small.cpuMilliseconds,
            higherIsBetter: false
        ).print()
        Measurement(
            name: "flexible_idle_catch_up_per_session", value: large.catchUpMicroseconds,
            unit: "CPU µs per idle session for \(commits) commits",
            baseline: "one commit's CPU time with 1,000 sessions (µs)", baselineValue: large.cpuMilliseconds * 1000,
            higherIsBetter: false
        ).print()
    }

    struct Round {
        var wallMilliseconds: Double
        var cpuMilliseconds: Double
        var catchUpMicroseconds: Double
    }

    func round(sessions: Int, commits: Int) async throws -> Round {
        raiseOpenFileLimit(to: 4 * sessions + 256)
        let (server, endpoint) = try await daemon("flexible-commit-\(sessions)", idleCatchUp: .seconds(3600))
        // One object per session, which its first subscription selects.
        try await server.replica.write { txn in
            for index in 0..<sessions {
                try txn.create("Note", ["_id": .string("s\(index)"), "text": .string("owner-\(index)"), "n": .int(0)])
            }
        }
        let clients = try await connect(count: sessions, to: endpoint) { index in
            [
                Subscription(name: "own", type: "Note", query: "text == 'owner-\(index)'"),
                Subscription(name: "numbered", type: "Note", query: "n == \(1_000_000 + index)"),
                Subscription(name: "tagged", type: "Note", query: "text == 'tag-\(index)'"),
            ]
        }
        // Each device received the changeset that made the objects, with its set.
        let receivedBefore = clients.map { $0.changesetsReceived() }
        var received = clients[0].batches.makeAsyncIterator()
        let cpuBefore = processCPUSeconds()
        let start = ContinuousClock.now
        for commit in 1...commits {
            // Session 0's object, which stays in its view; no other session's subscriptions match it before or after.
            try await server.replica.write { txn in
                try txn.update("Note", primaryKey: .string("s0"), ["n": .int(Int64(commit))])
            }
            while clients[0].changesetsReceived() < receivedBefore[0] + commit {
                guard await received.next() != nil else { throw LMDBFailure(description: "session 0 ended") }
            }
        }
        let wall = (ContinuousClock.now - start).seconds
        let cpu = processCPUSeconds() - cpuBefore
        // The other sessions catch up, each with one batch of skeletons, when their device asks for a mark.
        for client in clients.dropFirst() { client.requestMark() }
        let catchUpBefore = processCPUSeconds()
        let deadline = ContinuousClock.now + .seconds(60)
        func isBehind(_ index: Int) -> Bool {
            !clients[index].isMarkReplied() || clients[index].changesetsReceived() < receivedBefore[index] + commits
        }
        while (1..<sessions).contains(where: isBehind), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        let behind = (1..<sessions).filter(isBehind).count
        precondition(behind == 0, "\(behind) idle sessions did not catch up within 60 seconds")
        let catchUp = processCPUSeconds() - catchUpBefore
        for client in clients { client.close() }
        await server.stop()
        return Round(
            wallMilliseconds: wall * 1000 / Double(commits), cpuMilliseconds: cpu * 1000 / Double(commits),
            catchUpMicroseconds: catchUp * 1_000_000 / Double(sessions - 1))
    }

    /// 1,000 flexible-sync sessions with one subscription each, then 1,000 more with ten each: the process's
    /// anonymous memory per session, and per subscription (the difference, over nine). The clients run in this
    /// process too, so the figures count both ends of each connection, as `idle_sessions` does.
    func memory() async throws {
        let count = 1_000
        raiseOpenFileLimit(to: 8 * count + 256)
        let (server, endpoint) = try await daemon("flexible-memory")
        try await server.replica.write { txn in
            try txn.create("Note", ["_id": .string("seed"), "text": .string("seed"), "n": .int(0)])
        }
        var clients: [FlexibleProbe] = []
        let before = anonymousResidentBytes()
        clients += try await connect(count: count, to: endpoint, firstReplica: 2_000_000) { index in
            [Subscription(type: "Note", query: "text == 'owner-\(index)'")]
        }
        try await Task.sleep(for: .milliseconds(500))
        let afterOne = anonymousResidentBytes()
        clients += try await connect(count: count, to: endpoint, firstReplica: 3_000_000) { index in
            (0..<10).map { Subscription(type: "Note", query: "text == 'owner-\(index)-\($0)'") }
        }
        try await Task.sleep(for: .milliseconds(500))
        let afterTen = anonymousResidentBytes()
        for client in clients { client.close() }
        await server.stop()
        let perSession = Double(max(0, afterOne - before)) / Double(count)
        let perSessionOfTen = Double(max(0, afterTen - afterOne)) / Double(count)
        Measurement(
            name: "flexible_sessions_1000_memory_per_session", value: perSession / 1024, unit: "KiB",
            baseline: "the 64 KiB budget per session (KiB)", baselineValue: 64, higherIsBetter: false
        ).print()
        Measurement(
            name: "flexible_sessions_memory_per_subscription", value: max(0, perSessionOfTen - perSession) / 9 / 1024,
            unit: "KiB", baseline: "one session with one subscription (KiB)", baselineValue: perSession / 1024,
            higherIsBetter: false
        ).print()
    }

    // MARK: Helpers

    func daemon(_ name: String, idleCatchUp: Duration = .seconds(5), rules: PermissionRules? = nil) async throws -> (
        SyncServer, SyncEndpoint
    ) {
        var replicaConfiguration = Replica.Configuration()
        replicaConfiguration.durability = .none
        let replica = try Replica.open(
            directory: context.path(name), schema: NetworkBenchmarks.schema, configuration: replicaConfiguration)
        var configuration = SyncServer.Configuration()
        configuration.port = 0
        configuration.connectionsPerAddress = 8192
        configuration.idleCatchUp = idleCatchUp
        configuration.permissionRules = rules
        let server = SyncServer(replica: replica, configuration: configuration)
        let port = try await server.start()
        return (server, SyncEndpoint(host: "127.0.0.1", port: port))
    }

    /// Connects `count` bare clients, each with the set `subscriptions(index)`, and waits until every set is complete.
    func connect(
        count: Int, to endpoint: SyncEndpoint, firstReplica: UInt64 = 1_000_000,
        subscriptions: (Int) -> [Subscription]
    ) async throws -> [FlexibleProbe] {
        var clients: [FlexibleProbe] = []
        for index in 0..<count {
            let channel = try await WebSocketDialer.connect(to: endpoint)
            let client = FlexibleProbe(channel: channel)
            client.start(
                replica: ReplicaID(rawValue: firstReplica + UInt64(index)), subscriptions: subscriptions(index))
            clients.append(client)
        }
        let deadline = ContinuousClock.now + .seconds(120)
        while clients.contains(where: { !$0.isComplete() }) {
            precondition(ContinuousClock.now < deadline, "the sessions' sets did not complete within 120 seconds")
            try await Task.sleep(for: .milliseconds(20))
        }
        return clients
    }

    func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }
}

/// A bare flexible-sync device: hello as a flexible app, one subscription set, an acknowledgement for every batch.
final class FlexibleProbe: Sendable {
    let channel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>
    /// The number of changesets in each batch received (objects-only messages report 0).
    let batches: AsyncStream<Int>
    private let continuation: AsyncStream<Int>.Continuation
    private let state = Mutex((complete: false, changesets: 0, markReplied: false))
    private let writer: WebSocketWriter

    init(channel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>) {
        self.channel = channel
        writer = WebSocketWriter(channel: channel.channel, masking: true)
        (batches, continuation) = AsyncStream<Int>.makeStream()
    }

    func isComplete() -> Bool { state.withLock { $0.complete } }
    func changesetsReceived() -> Int { state.withLock { $0.changesets } }
    func isMarkReplied() -> Bool { state.withLock { $0.markReplied } }

    /// Asks for a download mark: the daemon answers once it sent everything it held when the mark arrived.
    func requestMark() {
        let writer = writer
        Task { try? await writer.send(MessageCodec.encode(.mark(request: 1))) }
    }

    func close() {
        channel.channel.close(promise: nil)
        continuation.finish()
    }

    func start(replica: ReplicaID, subscriptions: [Subscription]) {
        let channel = channel
        let writer = writer
        Task {
            try? await channel.executeThenClose { inbound, _ in
                try await writer.send(
                    MessageCodec.encode(
                        .hello(Hello(replica: replica, role: .app, vector: VersionVector(), flexible: true))))
                for try await frame in inbound where frame.opcode == .binary {
                    var data = frame.unmaskedData
                    switch try MessageCodec.decode(data.readBytes(length: data.readableBytes) ?? []) {
                    case .welcome:
                        try await writer.send(
                            MessageCodec.encode(.query(QueryRequest(version: 1, subscriptions: subscriptions))))
                    case .queryState(let state):
                        self.state.withLock { $0.complete = state.version == 1 && state.error == nil }
                    case .changesets(let batch):
                        self.state.withLock { $0.changesets += batch.changesets.count }
                        try await writer.send(
                            MessageCodec.encode(.ack(Acknowledgement(batch: batch.number, checkpoint: batch.progress))))
                        continuation.yield(batch.changesets.count)
                    case .markReply:
                        self.state.withLock { $0.markReplied = true }
                    case .ping(let nonce):
                        try await writer.send(MessageCodec.encode(.pong(nonce: nonce)))
                    case .error:
                        return
                    default:
                        continue
                    }
                }
            }
            continuation.finish()
        }
    }
}
