import Foundation
import Synchronization
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport
import TributaryTestTags

/// A live daemon fed mutated protocol frames: real messages (a hello, batches of valid changesets, acks, marks, pings,
/// a welcome and an error a client should never send) changed by bit flips, bytes set, inserted and deleted,
/// truncation, splices, two messages in one, lengths and counts replaced by huge or malformed ones, the kind byte
/// changed; and the same messages unchanged, out of order. Most follow a correct handshake; some open a connection
/// instead of its hello.
///
/// Each frame is followed by a ping. The daemon must answer each with an `error` that names the problem and then close
/// the connection, or handle it and answer the ping (the session goes on); only a frame that is itself an `error`
/// may end the session without an answer. Meanwhile an honest app writes and uploads through the same daemon, and
/// after the storm its upload completes and the daemon holds exactly what it wrote.
///
/// 2,000 frames in the suite, 10,000 with `TRIBUTARY_DEEP=1`; `TRIBUTARY_SEED` picks them, and a failure names it.
@Suite("Mutated protocol frames against a live daemon", .tags(.fuzz))
struct HostileFrameFuzzTests {
    static let frames = Deep.count(ci: 2_000, deep: 10_000)
    /// Hostile connections at once, each from a replica of its own.
    static let workers = 2
    /// The most frames one connection carries (a frame the daemon handles leaves the session open for the next).
    static let framesPerConnection = 40
    static let seed = SplitMix64.seedFromEnvironment(default: 0x4633_686F_7374)
    static var replay: String { "TRIBUTARY_SEED=\(seed) swift test --filter HostileFrameFuzzTests" }

    /// The error codes a hostile frame may be refused with. A hello (mutated or not) that declares fewer of its
    /// replica's changesets than the daemon took from earlier frames is one of a replica restored from a backup:
    /// `resetRequired`.
    static let refusals: Set<SyncError.Code> = [.protocolViolation, .badChangeset, .unsupportedVersion, .resetRequired]

    /// What the daemon did with the frames of one worker.
    struct Tally: Sendable {
        var frames = 0
        var refused: [UInt64: Int] = [:]
        var handled = 0
        var closedAfterClientError = 0
        var problems: [String] = []

        mutating func add(_ other: Tally) {
            frames += other.frames
            refused.merge(other.refused, uniquingKeysWith: +)
            handled += other.handled
            closedAfterClientError += other.closedAfterClientError
            problems += other.problems
        }
    }

    @Test("Mutated and out-of-order frames: each refused by name or handled; an honest app syncs throughout")
    func mutatedFrames() async throws {
        let directory = TemporaryDirectory("hostile-frames")
        let (server, endpoint) = try await LoopbackSyncTests.daemon(directory, "daemon")

        // Each worker's messages come from a replica of its own: valid changesets that it wrote.
        var corpora: [(ReplicaID, [Wire])] = []
        for worker in 0..<Self.workers {
            let hostile = try LoopbackSyncTests.app(directory, "hostile\(worker)")
            for index in 0..<4 {
                try await hostile.write {
                    try $0.create("Task", ["_id": .string("hostile\(worker)-\(index)"), "title": "mutant"])
                }
            }
            let export = try hostile.export(missingFrom: VersionVector(), origins: [hostile.replicaID])
            corpora.append((hostile.replicaID, Self.corpus(hostile.replicaID, export)))
            hostile.close()
        }

        // The honest app writes and waits for each upload while the storm runs.
        let app = try LoopbackSyncTests.app(directory, "honest")
        let session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        let stormOver = Mutex(false)
        let honest = Task { () throws -> (written: Int, latencies: [Duration]) in
            var latencies: [Duration] = []
            var written = 0
            while !stormOver.withLock({ $0 }) {
                try await app.write {
                    try $0.create("Task", ["_id": .string("honest\(written)"), "title": .string("honest \(written)")])
                }
                written += 1
                let start = ContinuousClock.now
                try await LoopbackSyncTests.within(.seconds(120), "an upload during the storm") {
                    try await session.waitForUpload()
                }
                latencies.append(.now - start)
                try await Task.sleep(for: .milliseconds(20))
            }
            return (written, latencies)
        }

        let started = ContinuousClock.now
        var tally = Tally()
        do {
            let perWorker = Self.frames / Self.workers
            tally = try await withThrowingTaskGroup(of: Tally.self) { group in
                for (worker, (replica, corpus)) in corpora.enumerated() {
                    let count = perWorker + (worker < Self.frames % Self.workers ? 1 : 0)
                    group.addTask {
                        try await Self.storm(
                            worker: worker, frames: count, endpoint: endpoint, replica: replica, corpus: corpus,
                            daemon: server.replica)
                    }
                }
                var total = Tally()
                for try await each in group { total.add(each) }
                return total
            }
        } catch {
            stormOver.withLock { $0 = true }
            _ = try? await honest.value
            throw error
        }
        let elapsed = ContinuousClock.now - started
        stormOver.withLock { $0 = true }
        let (written, latencies) = try await honest.value

        for problem in tally.problems { Issue.record("\(problem)\nseed \(Self.seed); replay: \(Self.replay)") }
        #expect(tally.frames == Self.frames)
        // The frames reach past the decoder: most are refused, some are handled (a valid batch, ping, mark...).
        #expect(tally.refused.values.reduce(0, +) > Self.frames / 2, "seed \(Self.seed): \(tally)")
        #expect(tally.handled >= Self.frames / 100, "seed \(Self.seed): \(tally)")

        // After the storm the honest app's upload completes, and the daemon holds what it wrote.
        try await app.write { try $0.create("Task", ["_id": "after", "title": "after the storm"]) }
        try await LoopbackSyncTests.within(.seconds(120), "the honest upload after the storm") {
            try await session.waitForUpload()
        }
        for index in 0..<written {
            let title = try server.replica.object("Task", primaryKey: .string("honest\(index)"))?["title"]
            #expect(title == .string("honest \(index)"), "honest\(index) at the daemon: \(String(describing: title))")
        }
        #expect(try server.replica.object("Task", primaryKey: .string("after"))?["title"] == "after the storm")
        try await LoopbackSyncTests.within(.seconds(120), "the honest download") { try await session.waitForDownload() }
        #expect(try await app.read { try $0.count("Task") } == server.replica.read { try $0.count("Task") })
        #expect(try server.replica.verify().passed)
        await session.close()
        await server.stop()

        let sorted = latencies.sorted()
        let p99 = sorted.isEmpty ? .zero : sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
        let codes = tally.refused.sorted { $0.key < $1.key }.map { "\(SyncError.Code(rawValue: $0.key)): \($0.value)" }
        print(
            "hostile frames: \(tally.frames) frames in \(elapsed) (\(Self.workers) connections at once), seed "
                + "\(Self.seed); refused \(codes.joined(separator: ", ")); handled \(tally.handled); closed after a "
                + "client error \(tally.closedAfterClientError); honest app: \(written) uploads during the storm, "
                + "p99 \(p99), max \(sorted.last ?? .zero)")
    }

    /// The messages a worker mutates: its hello (as an app and as a peer), batches of its valid changesets, an ack,
    /// a mark and its reply, a ping and a pong, and a welcome and an error, which a client should not send.
    static func corpus(_ replica: ReplicaID, _ export: ChangesetExport) -> [Wire] {
        let changesets = export.changesets
        let messages: [Message] = [
            .hello(RawSyncClient.hello(replica)),
            .hello(RawSyncClient.hello(replica, role: .peer)),
            .changesets(ChangesetBatch(number: 1, changesets: changesets, progress: export.progress, more: false)),
            .changesets(
                ChangesetBatch(
                    number: 1, changesets: Array(changesets.prefix(2)), progress: export.progress, more: true)),
            .changesets(
                ChangesetBatch(
                    number: 2, changesets: Array(changesets.suffix(2)), progress: export.progress, more: false)),
            .ack(Acknowledgement(batch: 1, checkpoint: export.progress)),
            .mark(request: 1),
            .markReply(request: 1),
            .ping(nonce: 5),
            .pong(nonce: 5),
            .welcome(Welcome(version: 1, replica: replica, vector: export.progress)),
            .error(SyncError(.unavailable, .retry, "going away")),
        ]
        return messages.map(Wire.encoding)
    }

    /// Sends `frames` frames over as many connections as they take, and tallies what the daemon did with each.
    static func storm(
        worker: Int, frames: Int, endpoint: SyncEndpoint, replica: ReplicaID, corpus: [Wire], daemon: Replica
    ) async throws -> Tally {
        var random = SplitMix64(seed: seed ^ (UInt64(worker + 1) &* 0x9E37_79B9_7F4A_7C15))
        var tally = Tally()
        while tally.frames < frames && tally.problems.count < 5 {
            let state = random
            let (budget, offset) = (min(framesPerConnection, frames - tally.frames), tally.frames)
            let (next, connection) = try await LoopbackSyncTests.within(
                .seconds(120), "worker \(worker)'s connection from frame \(offset)"
            ) {
                var random = state
                let connection = try await Self.connection(
                    worker: worker, budget: budget, offset: offset, endpoint: endpoint, replica: replica,
                    mutator: MessageMutator(corpus: corpus), daemon: daemon, random: &random)
                return (random, connection)
            }
            random = next
            tally.add(connection)
        }
        return tally
    }

    /// One connection: a handshake (or, now and then, a frame instead of hello), then frames until the daemon ends the
    /// session or `budget` frames were sent.
    static func connection(
        worker: Int, budget: Int, offset: Int, endpoint: SyncEndpoint, replica: ReplicaID, mutator: MessageMutator,
        daemon: Replica, random: inout SplitMix64
    ) async throws -> Tally {
        let beforeHello = random.chance(15)
        let generated = (0..<budget).map { _ in
            random.chance(10) ? mutator.corpus[random.below(mutator.corpus.count)].bytes : mutator.next(&random)
        }
        let texts = (0..<budget).map { _ in random.chance(1) }
        let probe = random.next() | 1 << 63
        // An honest hello declares the worker's changesets the daemon took from earlier frames: one that claims
        // fewer is a replica whose history went back, refused with resetRequired.
        let held = try daemon.heldSequence(of: replica)
        var hello = RawSyncClient.hello(replica)
        if held > 0 { hello.vector = VersionVector([(replica, held)]) }
        return try await RawSyncClient.with(endpoint) { client in
            var tally = Tally()
            if !beforeHello {
                guard case .success = try await client.handshake(hello) else {
                    tally.problems.append("worker \(worker): the daemon refused an honest hello at frame \(offset)")
                    return tally
                }
            }
            for (index, frame) in generated.enumerated() {
                let name =
                    "worker \(worker), frame \(offset + index)\(index == 0 && beforeHello ? " (before hello)" : "")"
                tally.frames += 1
                // A send that fails finds the connection closed: what the daemon said before is read below.
                if texts[index] {
                    try? await client.sendText("not a protocol message")
                } else {
                    try? await client.send(frame)
                }
                try? await client.send(.ping(nonce: probe))
                var answered = false
                while let message = try await client.next() {
                    if case .pong(probe) = message {
                        answered = true
                        break
                    }
                    guard case .error(let error) = message else { continue }
                    tally.refused[error.code.rawValue, default: 0] += 1
                    // A violation may be damage in transit (retry, after a delay); a history gone back needs a client
                    // reset; anything else needs a person.
                    let action: SyncError.Action =
                        switch error.code {
                        case .protocolViolation: .retry
                        case .resetRequired: .reset
                        default: .fatal
                        }
                    if !refusals.contains(error.code) || error.action != action || error.message.isEmpty
                        || error.message.utf8.count > 4096
                    {
                        tally.problems.append("\(name): refused with \(error) for \(hex(frame))")
                    }
                    if let after = try await client.next() {
                        tally.problems.append("\(name): the daemon sent \(after.name) after its error \(error)")
                    }
                    return tally
                }
                if answered {
                    tally.handled += 1
                    continue
                }
                // Closed without an answer: only an error message from the client ends a session so.
                if !texts[index], case .error = try? MessageCodec.decode(frame) {
                    tally.closedAfterClientError += 1
                } else {
                    tally.problems.append(
                        "\(name): the daemon closed the connection without an error for \(texts[index] ? "a text message" : hex(frame))"
                    )
                }
                return tally
            }
            return tally
        }
    }

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.prefix(256).map { String(format: "%02x", $0) }.joined(separator: " ") + (bytes.count > 256 ? " ..." : "")
    }
}
