package import NIOCore
import NIOHTTP1
import NIOPosix
package import NIOSSL
package import NIOWebSocket
import Synchronization
public import TributaryProtocol

/// A daemon's address: `ws://HOST:PORT`, or `wss://HOST:PORT` over TLS (the path defaults to the protocol's,
/// `/sync`).
public struct SyncEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var path: String
    /// Whether the daemon is reached over TLS (`wss://`); ``SyncConfiguration/tls`` says whom to trust.
    public var secure: Bool

    public init(host: String, port: Int, path: String = SyncProtocol.path, secure: Bool = false) {
        self.host = host
        self.port = port
        self.path = path
        self.secure = secure
    }

    /// Parses `ws://HOST:PORT[/PATH]` or `wss://HOST:PORT[/PATH]`.
    ///
    /// - Throws: ``SyncError`` with ``SyncError/Code/protocolViolation`` naming what is wrong with the address.
    public init(parsing url: String) throws(SyncError) {
        let secure = url.hasPrefix("wss://")
        guard url.hasPrefix("ws://") || secure else {
            throw SyncError(
                .protocolViolation, .fatal,
                "\(url) is not a daemon address: write ws://HOST:PORT, or wss://HOST:PORT for TLS, for example "
                    + "ws://127.0.0.1:7400")
        }
        var rest = Substring(url.dropFirst(secure ? 6 : 5))
        var path = SyncProtocol.path
        if let slash = rest.firstIndex(of: "/") {
            path = String(rest[slash...])
            rest = rest[..<slash]
        }
        let host: Substring
        let portText: Substring
        if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
            host = rest[rest.index(after: rest.startIndex)..<close]
            portText = rest[close...].dropFirst().drop { $0 == ":" }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            throw SyncError(
                .protocolViolation, .fatal, "\(url) names no port: write \(secure ? "wss" : "ws")://HOST:PORT")
        }
        guard !host.isEmpty, let port = Int(portText), (1...65535).contains(port) else {
            throw SyncError(.protocolViolation, .fatal, "\(url) does not name a host and a port from 1 to 65535")
        }
        self.init(host: String(host), port: port, path: path.isEmpty ? SyncProtocol.path : path, secure: secure)
    }

    public var description: String {
        "\(secure ? "wss" : "ws")://\(host.contains(":") ? "[\(host)]" : host):\(port)\(path)"
    }
}

/// The largest WebSocket frame either side accepts: the largest message, and room for the frame's header.
package let maximumFrameBytes = SyncProtocol.maximumMessageBytes + 64

/// Writes protocol messages as binary WebSocket messages, each flushed to the socket before `send` returns (so that
/// an `error` message reaches the other side before the connection closes).
package struct WebSocketWriter: MessageWriter {
    let channel: any Channel
    /// Clients mask their frames (RFC 6455, 5.3); servers do not.
    let masking: Bool
    /// How long the socket may take to accept one message before the connection is closed (the other side does
    /// not read); `nil`: no limit.
    let sendDeadline: Duration?

    package init(channel: any Channel, masking: Bool, sendDeadline: Duration? = nil) {
        self.channel = channel
        self.masking = masking
        self.sendDeadline = sendDeadline
    }

    package nonisolated(nonsending) func send(_ message: [UInt8]) async throws {
        let frame = WebSocketFrame(
            fin: true, opcode: .binary, maskKey: masking ? .random() : nil, data: ByteBuffer(bytes: message))
        let written = channel.eventLoop.makePromise(of: Void.self)
        channel.writeAndFlush(frame, promise: written)
        if let sendDeadline {
            let channel = channel
            let stalled = channel.eventLoop.scheduleTask(in: TimeAmount(sendDeadline)) { channel.close(promise: nil) }
            written.futureResult.whenComplete { _ in stalled.cancel() }
        }
        try await written.futureResult.get()
    }

    package func abort() { channel.close(promise: nil) }

    package func close() async {
        var data = ByteBuffer()
        data.write(webSocketErrorCode: .normalClosure)
        let frame = WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: masking ? .random() : nil, data: data)
        try? await channel.writeAndFlush(frame).get()
        // Half-close first: the other side reads everything sent, then the end of the stream, and closes. Closing
        // outright while its last messages sit unread here would make the kernel answer with a reset, which can
        // discard the `error` just sent before the other side reads it. One that does not close is closed after a
        // short linger.
        let channel = channel
        let linger = channel.eventLoop.scheduleTask(in: .seconds(2)) { channel.close(promise: nil) }
        channel.closeFuture.whenComplete { _ in linger.cancel() }
        channel.close(mode: .output, promise: nil)
        try? await channel.closeFuture.get()
    }
}

/// Runs a session over an upgraded WebSocket connection: reads its messages one at a time into `driver` until the
/// session ends or the connection closes.
package func runWebSocketSession(
    _ channel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, masking: Bool, sendDeadline: Duration? = nil,
    driver makeDriver: @Sendable (any MessageWriter) async -> SessionDriver
) async {
    let writer = WebSocketWriter(channel: channel.channel, masking: masking, sendDeadline: sendDeadline)
    let driver = await makeDriver(writer)
    await driver.start()
    do {
        try await channel.executeThenClose { inbound, _ in
            // Once the session has ended, what still arrives is read and dropped until the writer's close completes:
            // leaving here would close the connection at once, and a reset could discard the session's last
            // message (its `error`) before the other side reads it.
            var open = true
            for try await frame in inbound {
                guard open else { continue }
                switch frame.opcode {
                case .binary:
                    var data = frame.unmaskedData
                    open = await driver.receive(data.readBytes(length: data.readableBytes) ?? [])
                case .text:
                    await driver.close(.violation("a text message: the protocol sends binary messages only"))
                    open = false
                case .ping:
                    let pong = WebSocketFrame(
                        fin: true, opcode: .pong, maskKey: masking ? .random() : nil, data: frame.unmaskedData)
                    try await channel.channel.writeAndFlush(pong).get()
                case .connectionClose:
                    break
                default:
                    continue
                }
                if frame.opcode == .connectionClose { break }
            }
        }
    } catch {}
    await driver.connectionClosed()
}

/// Holds the channel a dial opened, for closing it when the upgrade fails.
private final class ChannelBox: Sendable {
    private let value = Mutex<(any Channel)?>(nil)
    var channel: (any Channel)? {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}

/// Opens WebSocket connections to daemons.
package enum WebSocketDialer {
    /// Connects to `endpoint` and upgrades to a WebSocket with the protocol's subprotocol, presenting
    /// `authorization` (an `Authorization` header's value) when given. A `wss://` endpoint is reached over TLS with
    /// `tls` (a context from ``SyncTLS/clientContext()``; one with the system's roots when `nil`).
    ///
    /// - Throws: the connection's error, or ``SyncError`` when the daemon declines the upgrade: the error the daemon
    ///   answered with (a refused token, say), one that says no daemon answered, or a TLS failure.
    package static func connect(
        to endpoint: SyncEndpoint, authorization: String? = nil, tls: NIOSSLContext? = nil,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, timeout: Duration = .seconds(10),
        upgradeTimeout: Duration = .seconds(120)
    ) async throws -> NIOAsyncChannel<WebSocketFrame, WebSocketFrame> {
        let context = endpoint.secure ? try tls ?? SyncTLS().clientContext() : nil
        // SNI and the certificate check take a host name; an IP address is checked against the connected address.
        let serverName = (try? SocketAddress(ipAddress: endpoint.host, port: 0)) == nil ? endpoint.host : nil
        let recorder = TLSFailureRecorder()
        let opened = ChannelBox()
        enum Upgrade: Sendable {
            case upgraded(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
            case declined(NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>)
        }
        let upgrade: EventLoopFuture<Upgrade> = try await ClientBootstrap(group: group)
            .connectTimeout(.nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connect(host: endpoint.host, port: endpoint.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    opened.channel = channel
                    if let context {
                        try channel.pipeline.syncOperations.addHandler(
                            try NIOSSLClientHandler(context: context, serverHostname: serverName))
                        try channel.pipeline.syncOperations.addHandler(recorder)
                    }
                    let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(
                        maxFrameSize: maximumFrameBytes,
                        upgradePipelineHandler: { channel, _ in
                            channel.eventLoop.makeCompletedFuture {
                                try channel.pipeline.syncOperations.addHandler(
                                    NIOWebSocketFrameAggregator(
                                        minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 4096,
                                        maxAccumulatedFrameSize: maximumFrameBytes))
                                return Upgrade.upgraded(
                                    try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(
                                        wrappingChannelSynchronously: channel))
                            }
                        })
                    var headers = HTTPHeaders()
                    headers.add(name: "Host", value: "\(endpoint.host):\(endpoint.port)")
                    headers.add(name: "Sec-WebSocket-Protocol", value: SyncProtocol.subprotocol)
                    headers.add(name: "Content-Length", value: "0")
                    if let authorization { headers.add(name: "Authorization", value: authorization) }
                    let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: endpoint.path, headers: headers)
                    let configuration = NIOTypedHTTPClientUpgradeConfiguration<Upgrade>(
                        upgradeRequestHead: head, upgraders: [upgrader],
                        notUpgradingCompletionHandler: { channel in
                            channel.eventLoop.makeCompletedFuture {
                                Upgrade.declined(try NIOAsyncChannel(wrappingChannelSynchronously: channel))
                            }
                        })
                    let upgraded = try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
                        configuration: .init(upgradeConfiguration: configuration))
                    // A daemon that accepts the connection but never answers (stopped with SIGSTOP, say) does not
                    // hold the dial forever. The bound is generous: a daemon busy with a burst of connections, or a
                    // starved machine, can take many seconds to answer an upgrade it will still accept.
                    let expiry = channel.eventLoop.scheduleTask(in: TimeAmount(upgradeTimeout)) {
                        channel.close(promise: nil)
                    }
                    upgraded.whenComplete { _ in expiry.cancel() }
                    return upgraded
                }
            }
        let result: Upgrade
        do {
            result = try await upgrade.get()
        } catch {
            // The connection may still be open (a failed upgrade leaves it so): it is of no use now.
            opened.channel?.close(promise: nil)
            if let failure = recorder.error {
                let text = "\(failure)"
                let reason =
                    if let extra = failure as? NIOSSLExtraError, extra == .failedToValidateHostname {
                        "the daemon's certificate is not for \(endpoint.host)"
                    } else if text.contains("CERTIFICATE_VERIFY_FAILED") {
                        "the daemon's certificate is not trusted or has expired (is its authority in "
                            + "SyncConfiguration.tls?)"
                    } else {
                        "the daemon refused this side's certificate, or the port does not speak TLS"
                    }
                throw SyncError(
                    .tls, .retry, "the TLS handshake with \(endpoint) failed: \(reason) (\(text))",
                    retryAfterSeconds: 60)
            }
            throw SyncError(
                .unavailable, .retry,
                "\(endpoint) closed the connection before the session opened (\(error)); the daemon may be stopping "
                    + "or overloaded", retryAfterSeconds: 1)
        }
        switch result {
        case .upgraded(let channel):
            return channel
        case .declined(let channel):
            throw await refusal(from: channel, endpoint: endpoint)
        }
    }

    /// The error a daemon answered an upgrade with (its headers and plain-text body), or one that says no daemon
    /// answered.
    private static func refusal(
        from channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>, endpoint: SyncEndpoint
    ) async -> SyncError {
        let notADaemon = SyncError(
            .protocolViolation, .retry,
            "\(endpoint) did not accept a sync session (is a Tributary daemon listening there?)", retryAfterSeconds: 30)
        var head: HTTPResponseHead?
        var body = ByteBuffer()
        try? await channel.executeThenClose { inbound, _ in
            for try await part in inbound {
                switch part {
                case .head(let response): head = response
                case .body(var bytes):
                    // A message is at most 4 KiB; the rest of an oversized body is not kept.
                    if body.readableBytes < 8192 { body.writeBuffer(&bytes) }
                case .end: return
                }
            }
        }
        guard let head, let codeText = head.headers[SyncProtocol.errorCodeHeader].first,
            let code = UInt64(codeText)
        else { return notADaemon }
        let action: SyncError.Action =
            switch head.headers[SyncProtocol.errorActionHeader].first {
            case "retry": .retry
            case "reset": .reset
            default: .fatal
            }
        let retryAfter = head.headers["Retry-After"].first.flatMap { UInt64($0) } ?? 0
        let text = String(decoding: body.readableBytesView.prefix(4096), as: UTF8.self)
        let message = text.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed()
        return SyncError(
            SyncError.Code(rawValue: code), action,
            "\(endpoint) refused the session (HTTP \(head.status.code)): \(String(message))",
            retryAfterSeconds: retryAfter)
    }
}
