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
    /// Sends `hello`, then `frames`, and returns the first `error` the daemon sends back.
    static func errorAfter(_ frames: [[UInt8]], to endpoint: SyncEndpoint, text: Bool = false) async throws
        -> SyncError?
    {
        let channel = try await WebSocketDialer.connect(to: endpoint)
        let writer = WebSocketWriter(channel: channel.channel, masking: true)
        return try await LoopbackSyncTests.within(.seconds(120), "the daemon's answer") {
            try await channel.executeThenClose { inbound, _ in
                try await writer.send(
                    MessageCodec.encode(
                        .hello(Hello(replica: ReplicaID(rawValue: 0xBAD), role: .app, vector: VersionVector()))))
                var sentRest = false
                for try await frame in inbound where frame.opcode == .binary {
                    var data = frame.unmaskedData
                    let message = try MessageCodec.decode(data.readBytes(length: data.readableBytes) ?? [])
                    if case .error(let error) = message { return error }
                    if case .welcome = message, !sentRest {
                        sentRest = true
                        for bytes in frames { try await writer.send(bytes) }
                        if text {
                            let frame = WebSocketFrame(
                                fin: true, opcode: .text, maskKey: .random(), data: ByteBuffer(string: "hello?"))
                            try await channel.channel.writeAndFlush(frame).get()
                        }
                    }
                }
                return nil
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
}
