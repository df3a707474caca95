import Foundation
import NIOCore
import NIOWebSocket
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// A daemon facing clients that break the protocol: each gets an error that names the problem, and the daemon's
/// replica keeps what it held.
@Suite("A daemon facing hostile clients")
struct HostileClientTests {
    /// Sends `hello` (from `replica`, presenting `authorization`), then `frames` (and a text message when `text`),
    /// and returns the first `error` the daemon sends back.
    static func errorAfter(
        _ frames: [[UInt8]], to endpoint: SyncEndpoint, text: Bool = false,
        replica: ReplicaID = ReplicaID(rawValue: 0xBAD), vector: VersionVector = VersionVector(),
        authorization: String? = nil
    ) async throws -> SyncError? {
        try await LoopbackSyncTests.within(.seconds(120), "the daemon's answer") {
            try await RawSyncClient.with(endpoint, authorization: authorization) { client in
                switch try await client.handshake(RawSyncClient.hello(replica, vector: vector)) {
                case .failure(let error): return error
                case nil: return nil
                case .success: break
                }
                for bytes in frames { try await client.send(bytes) }
                if text { try await client.sendText("hello?") }
                return try await client.nextError()
            }
        }
    }

    @Test("Garbage, a changeset that does not decode, a batch out of order, a text message: each refused by name")
    func refusals() async throws {
        let directory = TemporaryDirectory("hostile")
        let (server, endpoint) = try await LoopbackSyncTests.daemon(directory, "daemon")
        let app = try LoopbackSyncTests.app(directory, "app")
        let honest = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        try await app.write { try $0.create("Task", ["_id": "kept"]) }
        try await LoopbackSyncTests.within(.seconds(120), "upload") { try await honest.waitForUpload() }
        await honest.close()
        let before = try server.replica.viewDigest()

        let garbage = try await Self.errorAfter([[0xFF, 1, 2]], to: endpoint)
        #expect(garbage?.code == .protocolViolation)
        #expect(garbage?.message.contains("unknown message kind 255") == true)

        let undecodable = try await Self.errorAfter(
            [
                MessageCodec.encode(
                    .changesets(
                        ChangesetBatch(number: 1, changesets: [[1, 2, 3]], progress: VersionVector(), more: false)))
            ], to: endpoint)
        #expect(undecodable?.code == .badChangeset)
        #expect(undecodable?.action == .fatal)

        let outOfOrder = try await Self.errorAfter(
            [
                MessageCodec.encode(
                    .changesets(ChangesetBatch(number: 2, changesets: [], progress: VersionVector(), more: false)))
            ], to: endpoint)
        #expect(outOfOrder?.code == .protocolViolation)
        #expect(outOfOrder?.message.contains("batch 2") == true)

        let text = try await Self.errorAfter([], to: endpoint, text: true)
        #expect(text?.code == .protocolViolation)
        #expect(text?.message.contains("text message") == true)

        #expect(try server.replica.viewDigest() == before)
        #expect(try server.replica.verify().passed)
        await server.stop()
    }

    @Test("Valid messages out of order: each refused as a protocol violation that names the message")
    func outOfOrderMessages() async throws {
        let directory = TemporaryDirectory("hostile")
        let (server, endpoint) = try await LoopbackSyncTests.daemon(directory, "daemon")
        let replica = ReplicaID(rawValue: 0x0BAD_0BAD)
        let batch = MessageCodec.encode(
            .changesets(ChangesetBatch(number: 1, changesets: [], progress: VersionVector(), more: false)))
        let welcome = MessageCodec.encode(.welcome(Welcome(version: 1, replica: replica, vector: VersionVector())))

        // Before hello: the first message of a session must be hello.
        for (first, name) in [
            (batch, "changesets"), (welcome, "welcome"), (MessageCodec.encode(.ping(nonce: 1)), "ping"),
        ] {
            let error = try await LoopbackSyncTests.within(.seconds(120), "the answer to \(name) before hello") {
                try await RawSyncClient.with(endpoint) { client in
                    try await client.send(first)
                    return try await client.nextError()
                }
            }
            #expect(error?.code == .protocolViolation, "\(name) before hello: \(String(describing: error))")
            #expect(error?.action == .retry)
            #expect(
                error?.message.contains("\(name) is not allowed before hello") == true, "\(String(describing: error))")
        }

        // In an open session: a second hello, a welcome from the client, an ack of a batch never sent, a reply to a
        // mark never made.
        let cases: [(Message, String)] = [
            (.hello(RawSyncClient.hello(replica)), "hello is not allowed in an open session"),
            (.welcome(Welcome(version: 1, replica: replica, vector: VersionVector())), "welcome is not allowed"),
            (.ack(Acknowledgement(batch: 99, checkpoint: VersionVector())), "ack for batch 99"),
            (.markReply(request: 3), "markReply for request 3, which was not made"),
        ]
        for (message, words) in cases {
            let error = try await Self.errorAfter([MessageCodec.encode(message)], to: endpoint, replica: replica)
            #expect(error?.code == .protocolViolation, "\(message.name): \(String(describing: error))")
            #expect(error?.message.contains(words) == true, "\(String(describing: error)) does not say \(words)")
        }

        // The daemon serves on.
        let app = try LoopbackSyncTests.app(directory, "app")
        let session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        try await app.write { try $0.create("Task", ["_id": "after", "title": "kept"]) }
        try await LoopbackSyncTests.within(.seconds(120), "upload") { try await session.waitForUpload() }
        #expect(try server.replica.object("Task", primaryKey: .string("after"))?["title"] == "kept")
        await session.close()
        await server.stop()
    }

    /// A plain TCP socket connected to the daemon at `endpoint` (on 127.0.0.1), with a receive buffer of
    /// `receiveBuffer` bytes when given (set before connecting, so that the window it announces is that small).
    static func connectedSocket(to endpoint: SyncEndpoint, receiveBuffer: Int32? = nil) throws -> Int32 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw SyncError(.unavailable, .fatal, "no socket: errno \(errno)") }
        if var size = receiveBuffer {
            _ = setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(endpoint.port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            Glibc.close(socket)
            throw SyncError(.unavailable, .fatal, "cannot connect to \(endpoint): errno \(errno)")
        }
        return socket
    }

    /// Connects to the daemon over plain TCP, sends `bytes`, and waits (at most `limit`) for the daemon to close the
    /// connection: returns how long that took, or `nil` if it stayed open.
    static func closedAfter(sending bytes: [UInt8], to endpoint: SyncEndpoint, limit: Duration) throws -> Duration? {
        let socket = try connectedSocket(to: endpoint)
        defer { Glibc.close(socket) }
        let start = ContinuousClock.now
        if !bytes.isEmpty { _ = bytes.withUnsafeBytes { Glibc.write(socket, $0.baseAddress, $0.count) } }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now - start < limit {
            var poll = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            guard Glibc.poll(&poll, 1, 100) > 0 else { continue }
            // The daemon may answer (a 400) before it closes; the close is what ends the wait.
            let count = Glibc.read(socket, &buffer, buffer.count)
            if count <= 0 { return ContinuousClock.now - start }
        }
        return nil
    }

    @Test("A connection that sends nothing, half a request, or garbage instead of HTTP is closed; the daemon serves on")
    func stalledAndGarbageConnectionsClosed() async throws {
        let directory = TemporaryDirectory("hostile")
        let (server, endpoint) = try await LoopbackSyncTests.daemon(directory, "daemon") {
            $0.handshakeDeadline = .milliseconds(500)
        }
        let silent = try Self.closedAfter(sending: [], to: endpoint, limit: .seconds(30))
        #expect(silent != nil, "a silent connection stayed open")
        #expect((silent ?? .zero) >= .milliseconds(400), "closed before the deadline: \(String(describing: silent))")
        let half = Array("GET /sync HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n".utf8)
        #expect(try Self.closedAfter(sending: half, to: endpoint, limit: .seconds(30)) != nil)
        var random = SplitMix64(seed: 3)
        let garbage = (0..<2048).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        #expect(try Self.closedAfter(sending: garbage, to: endpoint, limit: .seconds(30)) != nil)
        // An honest app still syncs.
        let app = try LoopbackSyncTests.app(directory, "app")
        let session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        try await app.write { try $0.create("Task", ["_id": "after"]) }
        try await LoopbackSyncTests.within(.seconds(120), "upload") { try await session.waitForUpload() }
        #expect(try await server.replica.read { try $0.count("Task") } == 1)
        await session.close()
        await server.stop()
    }

    @Test("Connections over the per-address cap are refused as unavailable, and taken again once others close")
    func perAddressCap() async throws {
        let directory = TemporaryDirectory("hostile")
        let (server, endpoint) = try await LoopbackSyncTests.daemon(directory, "daemon") {
            $0.connectionsPerAddress = 2
        }
        let first = try await WebSocketDialer.connect(to: endpoint)
        let second = try await WebSocketDialer.connect(to: endpoint)
        do {
            let third = try await WebSocketDialer.connect(to: endpoint)
            try? await third.channel.close()
            Issue.record("a third connection from one address was upgraded")
        } catch let error as SyncError {
            #expect(error.code == .unavailable)
            #expect(error.message.contains("too many connections from 127.0.0.1"))
            #expect(error.retryAfterSeconds == 10)
        }
        try await first.channel.close()
        // The close reaches the daemon's count shortly after.
        let accepted = try await LoopbackSyncTests.within(.seconds(60), "a connection after one closed") {
            while true {
                if let channel = try? await WebSocketDialer.connect(to: endpoint) { return channel }
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        try await accepted.channel.close()
        try await second.channel.close()
        await server.stop()
    }

    @Test("A message over the 16 MiB limit ends its connection before the daemon reads it; the daemon serves on")
    func oversizedMessageClosesTheConnection() async throws {
        let directory = TemporaryDirectory("hostile")
        let (server, endpoint) = try await LoopbackSyncTests.daemon(directory, "daemon")
        let channel = try await WebSocketDialer.connect(to: endpoint)
        let closed = try await LoopbackSyncTests.within(.seconds(120), "the daemon closing the connection") {
            try await channel.executeThenClose { inbound, _ in
                let oversized = WebSocketFrame(
                    fin: true, opcode: .binary, maskKey: .random(),
                    data: ByteBuffer(repeating: 7, count: SyncProtocol.maximumMessageBytes + 65))
                try? await channel.channel.writeAndFlush(oversized).get()
                var binaryMessages = 0
                do {
                    for try await frame in inbound where frame.opcode == .binary { binaryMessages += 1 }
                } catch {
                    // A reset connection ends the stream with an error: closed, too.
                }
                return binaryMessages == 0
            }
        }
        #expect(closed, "the daemon answered an oversized message instead of closing")
        #expect(server.sessions.isEmpty)
        let app = try LoopbackSyncTests.app(directory, "app")
        let session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        try await app.write { try $0.create("Task", ["_id": "after"]) }
        try await LoopbackSyncTests.within(.seconds(120), "upload") { try await session.waitForUpload() }
        await session.close()
        await server.stop()
    }
}
