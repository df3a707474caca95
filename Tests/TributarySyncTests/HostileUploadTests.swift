import Foundation
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Uploads built to hurt a daemon: zstd bombs inside a batch, and batches recorded from an app and sent again (by the
/// app's replica, by another one, and by another user).
@Suite("A daemon facing hostile uploads")
struct HostileUploadTests {
    /// The most a received changeset may decompress to: the log's limit.
    static let changesetLimit = 256 << 20

    /// zstd frames written byte by byte (RFC 8878), so that a frame can claim or hold any size: a few kilobytes of
    /// RLE blocks expand to gigabytes.
    enum ZstdBomb {
        static let magic: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD]

        /// One frame of RLE blocks holding `content` zero bytes, declaring `declared` bytes of content (`nil`: no
        /// content size), with a window of 2^`windowLog` bytes.
        static func frame(content: Int, declared: UInt64?, windowLog: Int = 17) -> [UInt8] {
            // Frame header descriptor: an 8-byte content size or none; not single-segment, so a window descriptor
            // follows (exponent windowLog - 10, mantissa 0).
            var bytes = magic + [declared == nil ? 0x00 : 0xC0, UInt8((windowLog - 10) << 3)]
            if let declared { bytes += (0..<8).map { UInt8(truncatingIfNeeded: declared >> UInt64(8 * $0)) } }
            let blockSize = min(1 << 17, 1 << windowLog)
            var left = content
            repeat {
                let size = min(left, blockSize)
                left -= size
                // Block header: last-block bit, type 1 (RLE), the regenerated size; then the byte repeated.
                let header = UInt32(size) << 3 | 1 << 1 | (left == 0 ? 1 : 0)
                bytes += [UInt8(header & 0xFF), UInt8(header >> 8 & 0xFF), UInt8(header >> 16 & 0xFF), 0]
            } while left > 0
            return bytes
        }

        /// A skippable frame of `length` zero bytes.
        static func skippable(length: Int) -> [UInt8] {
            [0x50, 0x2A, 0x4D, 0x18] + (0..<4).map { UInt8(truncatingIfNeeded: length >> (8 * $0)) }
                + [UInt8](repeating: 0, count: length)
        }
    }

    /// The bombs, each with words its refusal must hold.
    static let bombs: [(name: String, bytes: [UInt8], words: [String])] = [
        (
            "1 GiB declared and held in 32 KiB", ZstdBomb.frame(content: 1 << 30, declared: 1 << 30),
            ["declares 1073741824 bytes", "over the limit of \(changesetLimit) bytes"]
        ),
        (
            "2^62 bytes declared, 1 KiB held", ZstdBomb.frame(content: 1024, declared: 1 << 62),
            ["declares 4611686018427387904 bytes", "over the limit of \(changesetLimit) bytes"]
        ),
        (
            "256 MiB held, no content size", ZstdBomb.frame(content: 256 << 20, declared: nil),
            ["does not declare its content size"]
        ),
        (
            "content size patched smaller: 1 KiB declared, 256 MiB held",
            ZstdBomb.frame(content: 256 << 20, declared: 1024), ["declaring 1024 bytes could not be decoded"]
        ),
        (
            "content size patched larger: 255 MiB declared, 1 KiB held",
            ZstdBomb.frame(content: 1024, declared: 255 << 20), ["declaring \(255 << 20) bytes could not be decoded"]
        ),
        (
            "two frames", ZstdBomb.frame(content: 1024, declared: 1024) + ZstdBomb.frame(content: 1024, declared: 1024),
            ["expected exactly one frame"]
        ),
        (
            "trailing bytes", ZstdBomb.frame(content: 1024, declared: 1024) + [1, 2, 3],
            ["3 bytes follow", "expected exactly one frame"]
        ),
        ("a skippable frame", ZstdBomb.skippable(length: 64), ["not a Tributary changeset"]),
        (
            "window log 31", ZstdBomb.frame(content: 1024, declared: 1024, windowLog: 31),
            ["window, over the limit of \(1 << 27) bytes"]
        ),
    ]

    @Test("zstd bombs in an upload batch are refused naming the limit, without the daemon's memory growing")
    func zstdBombs() async throws {
        let children = DaemonKillDrillTests.Children()
        defer { children.killAll() }
        let directory = TemporaryDirectory("bombs")
        let (daemon, port) = try await DaemonKillDrillTests.startDaemon(
            directory.appending("daemon"), log: directory.appending("daemon.log"), children: children)
        let endpoint = SyncEndpoint(host: "127.0.0.1", port: port)

        var figures: [String] = []
        for bomb in Self.bombs {
            let frame = MessageCodec.encode(
                .changesets(
                    ChangesetBatch(
                        number: 1, changesets: [bomb.bytes], progress: VersionVector(), more: false)))
            let before = try #require(ProcessMemory.field("VmRSS", of: daemon.pid))
            #expect(ProcessMemory.resetPeak(of: daemon.pid), "the daemon's peak resident size could not be reset")
            let started = ContinuousClock.now
            let error = try await HostileClientTests.errorAfter([frame], to: endpoint)
            let elapsed = ContinuousClock.now - started
            let peak = try #require(ProcessMemory.field("VmHWM", of: daemon.pid))
            #expect(error?.code == .badChangeset, "\(bomb.name): \(String(describing: error))")
            #expect(error?.action == .fatal)
            for word in bomb.words {
                #expect(error?.message.contains(word) == true, "\(bomb.name): \(String(describing: error))")
            }
            // A bomb costs what its frame takes, not what it claims: 32 MiB leaves room for the session's own.
            #expect(
                peak - before < 32 << 20,
                "\(bomb.name): the daemon's resident size peaked \(ProcessMemory.mebibytes(peak - before)) higher")
            figures.append(
                "\(bomb.name) (\(bomb.bytes.count) B): \(elapsed), peak +\(ProcessMemory.mebibytes(peak - before))")
        }

        // The daemon serves on.
        let app = try LoopbackSyncTests.app(directory, "app")
        let session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        try await app.write { try $0.create("Task", ["_id": "after", "title": "after the bombs"]) }
        try await LoopbackSyncTests.within(.seconds(120), "upload") { try await session.waitForUpload() }
        await session.close()
        #expect(daemon.waitForExit(timeout: 0) == nil, "the daemon ended: \(daemon.standardError)")
        let rss = ProcessMemory.field("RssAnon", of: daemon.pid) ?? 0
        print("zstd bombs: RssAnon \(ProcessMemory.mebibytes(rss)) after; " + figures.joined(separator: "; "))
        daemon.send(SIGTERM)
        #expect(try await DaemonKillDrillTests.ended(daemon, timeout: 30) == .exited(0), "\(daemon.standardError)")
        let server = try DaemonKillDrillTests.openReadOnly(directory.appending("daemon"))
        defer { server.close() }
        #expect(try server.object("Task", primaryKey: .string("after"))?["title"] == "after the bombs")
    }

    /// The log's length and digest and the views' digest: what a replayed upload must leave as it was.
    static func fingerprint(_ replica: Replica) throws -> [UInt64] {
        [try replica.inspection.summary().lastLocalSequence, try ReplicaDigest.log(replica), try replica.viewDigest()]
    }

    static func batch(_ number: UInt64, _ changesets: [[UInt8]], _ progress: VersionVector) -> Message {
        .changesets(ChangesetBatch(number: number, changesets: changesets, progress: progress, more: false))
    }

    @Test("An app's upload sent again, on a new connection, on the same one and shuffled, is integrated once")
    func replayedUpload() async throws {
        let directory = TemporaryDirectory("replay")
        let (server, endpoint) = try await LoopbackSyncTests.daemon(directory, "daemon")
        let app = try LoopbackSyncTests.app(directory, "app")
        for index in 0..<20 {
            try await app.write { try $0.create("Task", ["_id": .string("t\(index)"), "count": .int(Int64(index))]) }
        }
        // The batch the app's session uploads: its own changesets, as its log stores them.
        let recorded = try app.export(missingFrom: VersionVector(), origins: [app.replicaID])
        #expect(!recorded.more && recorded.changesets.count == 21)
        let session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        try await LoopbackSyncTests.within(.seconds(120), "upload") { try await session.waitForUpload() }
        await session.close()
        let before = try Self.fingerprint(server.replica)
        #expect(before[0] == 21)

        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 5))
        var shuffled = recorded.changesets
        shuffled.shuffle(using: &random)
        let shuffledBatch = shuffled
        let replica = app.replicaID
        // As the app, and as another replica that sends the app's changesets: batches 1-3 on one connection.
        for sender in [replica, ReplicaID(rawValue: 0x5E_5E)] {
            let answers = try await LoopbackSyncTests.within(.seconds(120), "the replayed batches") {
                try await RawSyncClient.with(endpoint) { client in
                    let held = sender == replica ? recorded.progress : VersionVector()
                    guard
                        case .success(let welcome) = try await client.handshake(
                            RawSyncClient.hello(sender, vector: held))
                    else {
                        return [String]()
                    }
                    var answers = ["yours \(welcome.yours)"]
                    for (number, changesets) in [recorded.changesets, recorded.changesets, shuffledBatch].enumerated() {
                        try await client.send(Self.batch(UInt64(number + 1), changesets, recorded.progress))
                        switch try await client.acknowledgement(of: UInt64(number + 1)) {
                        case .success(let ack): answers.append("ack \(ack.batch), \(ack.rejected.count) rejected")
                        case .failure(let error): answers.append("error \(error)")
                        case nil: answers.append("closed")
                        }
                    }
                    return answers
                }
            }
            let yours = sender == replica ? 21 : 0
            #expect(
                answers == ["yours \(yours)", "ack 1, 0 rejected", "ack 2, 0 rejected", "ack 3, 0 rejected"],
                "replayed by \(sender)")
            #expect(try Self.fingerprint(server.replica) == before, "replayed by \(sender)")
        }
        #expect(try await server.replica.read { try $0.count("Task") } == 20)
        #expect(try server.replica.verify().passed)
        await server.stop()
    }

    @Test("An app's upload replayed under another user's token is refused as forbidden, and changes nothing")
    func replayedUnderAnotherUser() async throws {
        let directory = TemporaryDirectory("replay")
        let (server, endpoint) = try await TokenAuthenticationTests.daemon(directory)
        let alice = try TokenAuthenticationTests.app(directory, "alice", author: "alice")
        for index in 0..<5 { try await alice.write { try $0.create("Task", ["_id": .string("a\(index)")]) } }
        let recorded = try alice.export(missingFrom: VersionVector(), origins: [alice.replicaID])
        let aliceToken = try await TokenAuthenticationTests.hs256(TokenAuthenticationTests.claims("alice"))
        let session = alice.connect(
            to: endpoint, credentials: .token(aliceToken), configuration: LoopbackSyncTests.fastBackoff)
        try await LoopbackSyncTests.within(.seconds(120), "upload") { try await session.waitForUpload() }
        await session.close()
        let before = try Self.fingerprint(server.replica)

        let frame = MessageCodec.encode(Self.batch(1, recorded.changesets, recorded.progress))
        let bobToken = try await TokenAuthenticationTests.hs256(TokenAuthenticationTests.claims("bob"))
        for sender in [alice.replicaID, ReplicaID(rawValue: 0xB0B)] {
            let error = try await HostileClientTests.errorAfter(
                [frame], to: endpoint, replica: sender,
                vector: sender == alice.replicaID ? recorded.progress : VersionVector(),
                authorization: "Bearer \(bobToken)")
            #expect(error?.code == .forbidden, "sent as \(sender): \(String(describing: error))")
            #expect(error?.message.contains("author \"alice\"") == true, "\(String(describing: error))")
            #expect(error?.message.contains("user is \"bob\"") == true, "\(String(describing: error))")
            #expect(try Self.fingerprint(server.replica) == before)
        }

        // Replayed under alice's own token: acknowledged, integrated once.
        let answer = try await LoopbackSyncTests.within(.seconds(120), "alice's replay") {
            try await RawSyncClient.with(endpoint, authorization: "Bearer \(aliceToken)") { client in
                guard
                    case .success = try await client.handshake(
                        RawSyncClient.hello(alice.replicaID, vector: recorded.progress))
                else {
                    return "no welcome"
                }
                try await client.send(frame)
                switch try await client.acknowledgement(of: 1) {
                case .success(let ack): return "ack \(ack.batch), \(ack.rejected.count) rejected"
                case .failure(let error): return "error \(error)"
                case nil: return "closed"
                }
            }
        }
        #expect(answer == "ack 1, 0 rejected")
        #expect(try Self.fingerprint(server.replica) == before)
        await server.stop()
    }
}
