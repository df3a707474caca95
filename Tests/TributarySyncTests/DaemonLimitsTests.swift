import Foundation
import Testing
import Tributary
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

@testable import TributaryDaemon

/// The daemon's limits on what one user or session may cost it: an upload rate per user (answered with "retry
/// after", never buffered), a cap on the bytes in flight to one session whatever window it announces, and a deadline
/// for a socket that stops taking what the daemon sends.
@Suite("Daemon limits")
struct DaemonLimitsTests {
    /// `count` characters that zstd cannot shrink (the log stores changesets compressed, and sends them as stored).
    static func incompressible(_ count: Int, seed: UInt64) -> String {
        var random = SplitMix64(seed: seed)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        return String(decoding: (0..<count).map { _ in alphabet[Int(random.next() % 64)] }, as: UTF8.self)
    }

    @Test(
        "A user's allowance refills at its rate, takes a batch whole or not at all, and goes into debt for a large one")
    func allowanceArithmetic() {
        let allowances = UploadAllowances(bytesPerSecond: 1_000, burst: 4_000)
        let start = ContinuousClock.now
        #expect(allowances.take(3_000, user: "ann", now: start) == nil)
        // 1,000 left: 2,500 more needs 1.5 s of refill, and nothing is taken meanwhile.
        #expect(allowances.take(2_500, user: "ann", now: start) == .milliseconds(1_500))
        #expect(allowances.take(2_500, user: "ann", now: start + .milliseconds(1_500)) == nil)
        // Other users have their own.
        #expect(allowances.take(4_000, user: "bob", now: start) == nil)
        // A batch over the burst is taken from a full allowance, leaving a debt the rate repays.
        #expect(allowances.take(10_000, user: "cy", now: start) == nil)
        #expect(allowances.take(1, user: "cy", now: start + .seconds(5)) == .milliseconds(1_001))
        #expect(allowances.take(1, user: "cy", now: start + .seconds(7)) == nil)
    }

    @Test("An app uploading over its user's rate is told to retry after a delay, and its writes arrive in full")
    func uploadsOverTheRateAreRetriedLater() async throws {
        let directory = TemporaryDirectory("rate")
        let (server, endpoint) = try await LoopbackSyncTests.daemon(directory, "daemon") {
            $0.uploadBytesPerSecond = 64 << 10
            $0.uploadBurstBytes = 64 << 10
        }
        let app = try LoopbackSyncTests.app(directory, "app")
        // 1.5 MiB written before connecting goes in two batches sent back to back (a batch holds about 1 MiB): the
        // first is taken from the full allowance, leaving it about 1 MiB in debt (15 seconds), so the second, which
        // arrives right after, is refused however slowly this machine runs.
        for index in 0..<24 {
            try await app.write {
                try $0.create(
                    "Task",
                    [
                        "_id": .string("big\(index)"),
                        "title": .string(Self.incompressible(64 << 10, seed: UInt64(index))),
                    ])
            }
        }
        let session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        let refusal = try #require(try await LoopbackSyncTests.disconnection(session, code: .rateLimited))
        #expect(refusal.action == .retry)
        #expect((1...20).contains(refusal.retryAfterSeconds), "\(refusal)")
        #expect(refusal.message.contains("upload allowance"))
        try await LoopbackSyncTests.within(.seconds(120), "the upload after the delay") {
            try await session.waitForUpload()
        }
        for index in 0..<24 {
            #expect(try server.replica.object("Task", primaryKey: .string("big\(index)")) != nil, "big\(index)")
        }
        await session.close()
        app.close()
        await server.stop()
    }

    @Test("A session announcing a huge window gets no more than the daemon's cap in flight")
    func windowIsCapped() {
        var limits = MessageLimits.standard
        limits.maximumWindow = 1 << 20
        var machine = SessionStateMachine(accepting: limits, now: .now)
        let hello = Hello(replica: ReplicaID(rawValue: 7), role: .app, vector: VersionVector(), window: .max)
        _ = machine.received(MessageCodec.encode(.hello(hello)), now: .now)
        _ = machine.accept(Welcome(version: 1, replica: ReplicaID(rawValue: 1), vector: VersionVector()), now: .now)
        #expect(machine.windowLeft == 1 << 20)
    }

    @Test("A client that never reads is closed after the send deadline; an honest app syncs meanwhile")
    func clientThatNeverReadsIsClosed() async throws {
        let directory = TemporaryDirectory("never-reads")
        let (server, endpoint) = try await LoopbackSyncTests.daemon(directory, "daemon") {
            $0.sendDeadline = .seconds(2)
            $0.outboundBytesPerSession = 64 << 20
        }
        // 12 MiB the daemon will try to send: more than loopback's socket buffers hold.
        let seeder = try LoopbackSyncTests.app(directory, "seeder")
        let seeding = seeder.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        for index in 0..<12 {
            try await seeder.write {
                try $0.create(
                    "Task",
                    [
                        "_id": .string("s\(index)"),
                        "title": .string(Self.incompressible(1 << 20, seed: 100 + UInt64(index))),
                    ])
            }
        }
        try await LoopbackSyncTests.within(.seconds(120), "seeding") { try await seeding.waitForUpload() }
        await seeding.close()
        seeder.close()

        // Upgrades, says hello with an unbounded window, then reads nothing: a plain socket with a small receive
        // buffer, so that what the daemon sends piles up at the daemon.
        let socket = try HostileClientTests.connectedSocket(to: endpoint, receiveBuffer: 4096)
        defer { Glibc.close(socket) }
        let hello = MessageCodec.encode(
            .hello(Hello(replica: ReplicaID(rawValue: 0x5107), role: .app, vector: VersionVector(), window: .max)))
        let request =
            "GET /sync HTTP/1.1\r\nHost: 127.0.0.1:\(endpoint.port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            + "Sec-WebSocket-Protocol: \(SyncProtocol.subprotocol)\r\nContent-Length: 0\r\n\r\n"
        // One binary frame, masked with a zero key (as a client must mask, and zero leaves the bytes as they are).
        #expect(hello.count < 126)
        let frame: [UInt8] = [0x82, 0x80 | UInt8(hello.count), 0, 0, 0, 0] + hello
        let bytes = Array(request.utf8) + frame
        #expect(bytes.withUnsafeBytes { Glibc.write(socket, $0.baseAddress, $0.count) } == bytes.count)
        try await LoopbackSyncTests.within(.seconds(120), "the session that never reads opening") {
            while !server.sessions.contains(where: { $0.replica == ReplicaID(rawValue: 0x5107) }) {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let opened = ContinuousClock.now

        // Meanwhile two honest apps sync through the same daemon.
        let alice = try LoopbackSyncTests.app(directory, "alice")
        let bob = try LoopbackSyncTests.app(directory, "bob")
        let aliceSession = alice.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        let bobSession = bob.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        try await LoopbackSyncTests.within(.seconds(120), "bob's download of the seed") {
            while try bob.object("Task", primaryKey: .string("s11")) == nil {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let written = ContinuousClock.now
        try await alice.write { try $0.create("Task", ["_id": "hello bob"]) }
        try await LoopbackSyncTests.within(.seconds(120), "alice's write at bob") {
            while try bob.object("Task", primaryKey: .string("hello bob")) == nil {
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        let synced = ContinuousClock.now - written
        print("never-reads: an honest write reached another app in \(synced)")

        // The client cannot see the close behind the bytes it does not read: the daemon's session table can.
        try await LoopbackSyncTests.within(.seconds(120), "the daemon closing the reader that never reads") {
            while server.sessions.contains(where: { $0.replica == ReplicaID(rawValue: 0x5107) }) {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let closedAfter = ContinuousClock.now - opened
        print("never-reads: the daemon closed the connection that never reads after \(closedAfter)")
        // `opened` is read when the poll above sees the session, up to a poll's interval after the daemon's clock
        // for it may have started.
        #expect(closedAfter >= .seconds(2) - .milliseconds(50))

        await aliceSession.close()
        await bobSession.close()
        alice.close()
        bob.close()
        await server.stop()
    }
}
