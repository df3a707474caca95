import NIOCore
import NIOWebSocket
import TributaryModel
import TributaryProtocol
import TributarySync

/// A client that speaks the sync protocol by hand over one WebSocket connection to a daemon: it sends whatever bytes
/// a test gives it, valid or not and in any order, and reads the daemon's messages one at a time.
struct RawSyncClient {
    private var inbound: NIOAsyncChannelInboundStream<WebSocketFrame>.AsyncIterator
    let channel: any Channel
    private let writer: WebSocketWriter

    /// A hello from an app replica that holds nothing.
    /// A hello as `replica`, holding `vector`: a replica that replays changesets of its own the daemon took must
    /// count them, or the daemon takes it for a replica restored from a backup.
    static func hello(_ replica: ReplicaID, role: SyncRole = .app, vector: VersionVector = VersionVector()) -> Hello {
        Hello(replica: replica, role: role, vector: vector)
    }

    /// Connects to `endpoint` (presenting `authorization` in the upgrade request), runs `body` with the client, and
    /// closes the connection.
    static func with<T>(
        _ endpoint: SyncEndpoint, authorization: String? = nil, isolation: isolated (any Actor)? = #isolation,
        _ body: (inout RawSyncClient) async throws -> sending T
    ) async throws -> sending T {
        let channel = try await WebSocketDialer.connect(to: endpoint, authorization: authorization)
        return try await channel.executeThenClose { inbound, _ in
            var client = RawSyncClient(
                inbound: inbound.makeAsyncIterator(), channel: channel.channel,
                writer: WebSocketWriter(channel: channel.channel, masking: true))
            return try await body(&client)
        }
    }

    /// Sends `bytes` as one binary message.
    func send(_ bytes: [UInt8]) async throws { try await writer.send(bytes) }

    func send(_ message: Message) async throws { try await send(MessageCodec.encode(message)) }

    /// Sends `text` as a text message, which the protocol never sends.
    func sendText(_ text: String) async throws {
        let frame = WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: ByteBuffer(string: text))
        try await channel.writeAndFlush(frame).get()
    }

    /// The next message the daemon sends, or `nil` once the connection closed (or was reset). Throws when the
    /// daemon sends a message that does not decode.
    mutating func next() async throws -> Message? {
        while true {
            let frame: WebSocketFrame?
            do {
                frame = try await inbound.next()
            } catch {
                return nil
            }
            guard let frame, frame.opcode != .connectionClose else { return nil }
            guard frame.opcode == .binary else { continue }
            var data = frame.unmaskedData
            return try MessageCodec.decode(data.readBytes(length: data.readableBytes) ?? [])
        }
    }

    /// Says `hello` and returns the daemon's answer: its `welcome` (as `.success`), or the error it refused the
    /// session with; `nil` if it closed the connection without either.
    mutating func handshake(_ hello: Hello) async throws -> Result<Welcome, SyncError>? {
        try await send(.hello(hello))
        while let message = try await next() {
            switch message {
            case .welcome(let welcome): return .success(welcome)
            case .error(let error): return .failure(error)
            default: continue
            }
        }
        return nil
    }

    /// The first `error` the daemon sends, skipping its other messages; `nil` if it closed the connection first.
    mutating func nextError() async throws -> SyncError? {
        while let message = try await next() {
            if case .error(let error) = message { return error }
        }
        return nil
    }

    /// The daemon's `ack` for `batch` (skipping its other messages), or the error it ends the session with.
    mutating func acknowledgement(of batch: UInt64) async throws -> Result<Acknowledgement, SyncError>? {
        while let message = try await next() {
            switch message {
            case .ack(let ack) where ack.batch == batch: return .success(ack)
            case .error(let error): return .failure(error)
            default: continue
            }
        }
        return nil
    }
}
