import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import Synchronization
public import Tributary
public import TributaryModel
public import TributaryProtocol
public import TributarySync

/// A daemon's sync service on one replica: it accepts sessions from apps (whose uploads it adopts) and from peer
/// daemons, dials the peers it is configured with, and sends every session what it lacks as changes arrive.
public final class SyncServer: Sendable {
    /// How the daemon serves.
    public struct Configuration: Sendable {
        /// The address to listen on. Default: 127.0.0.1 (loopback only).
        public var host = "127.0.0.1"
        /// The port to listen on; 0 picks a free one (``SyncServer/start()`` returns it). Default: 7400.
        public var port = 7400
        /// Peer daemons to replicate with: the daemon dials each and keeps the link up.
        public var peers: [SyncEndpoint] = []
        /// Shared tokens apps and peers may present (a session with one has no user). With neither these nor
        /// ``tokenPolicy``, every session is accepted (fit only for loopback).
        public var accessTokens: [String] = []
        /// How the JWTs apps present are checked: a session with one is its `sub`'s, and may upload only changesets
        /// that user wrote.
        public var tokenPolicy: TokenPolicy?
        /// The token this daemon presents to its peers.
        public var peerToken: String?
        /// The keepalive interval announced to sessions, in seconds.
        public var keepaliveSeconds = SyncProtocol.defaultKeepaliveSeconds
        /// The receive window announced to each session, in bytes: what one session may have in flight towards
        /// the daemon.
        public var window = SyncProtocol.defaultWindow
        /// The backoff of the links to peers.
        public var peerBackoff = ReconnectBackoff()
        /// Checks keepalive this often (tests shorten it).
        public var tickInterval: Duration = .seconds(1)
        /// Where the daemon reports sessions opening and ending; `nil`: nowhere.
        public var log: (@Sendable (String) -> Void)?

        public init() {}
    }

    /// One session the daemon is serving, as ``SyncServer/sessions`` lists it.
    public struct SessionInfo: Sendable, Hashable {
        public var replica: ReplicaID
        public var role: SyncRole
    }

    public let replica: Replica
    public let configuration: Configuration
    private let committer: Committer
    private let state = Mutex(State())

    private struct State {
        var listener: (any Channel)?
        var serving: Task<Void, Never>?
        /// Accepted sessions by connection, and the open ones by the replica on the other side.
        var drivers: [ObjectIdentifier: SessionDriver] = [:]
        var byReplica: [ReplicaID: (driver: SessionDriver, role: SyncRole)] = [:]
        var links: [SyncSession] = []
        var stopping = false
    }

    public init(replica: Replica, configuration: Configuration = Configuration()) {
        self.replica = replica
        self.configuration = configuration
        committer = Committer(replica: replica)
    }

    /// The sessions open now (apps and peers that dialled this daemon).
    public var sessions: [SessionInfo] {
        state.withLock { $0.byReplica.map { SessionInfo(replica: $0.key, role: $0.value.role) } }
    }

    /// The links to configured peers.
    public var peerLinks: [SyncSession] { state.withLock { $0.links } }

    /// Group commits so far, and the batches they held.
    public func commitStatistics() async -> (commits: Int, batches: Int) {
        (await committer.commits, await committer.batches)
    }

    /// Binds the listening socket, starts serving in the background and dials the peers.
    ///
    /// - Returns: the port listened on.
    /// - Throws: ``SyncServerError`` when a token key does not load; the socket's error when the address cannot be
    ///   bound (in use, not local, not permitted).
    @discardableResult
    public func start() async throws -> Int {
        let authenticator = try await Authenticator(
            accessTokens: configuration.accessTokens, policy: configuration.tokenPolicy)
        let listener = try await bind(authenticator)
        let port = listener.channel.localAddress?.port ?? configuration.port
        let serving = Task { await serve(listener) }
        var links: [SyncSession] = []
        for peer in configuration.peers {
            var sessionConfiguration = SyncConfiguration()
            sessionConfiguration.backoff = configuration.peerBackoff
            sessionConfiguration.name = "tributaryd \(replica.replicaID)"
            links.append(
                SyncSession(
                    replica: replica, endpoint: peer,
                    credentials: configuration.peerToken.map { .token($0) } ?? .none,
                    configuration: sessionConfiguration, role: .peer, integrator: committer))
        }
        state.withLock {
            $0.listener = listener.channel
            $0.serving = serving
            $0.links = links
        }
        return port
    }

    /// Stops: closes the listener, ends every session with an `unavailable` error (clients retry after a second)
    /// and closes the links to peers. Returns when all of them have ended.
    public func stop() async {
        let (listener, serving, drivers, links) = state.withLock { state in
            state.stopping = true
            return (state.listener, state.serving, Array(state.drivers.values), state.links)
        }
        try? await listener?.close().get()
        for driver in drivers {
            await driver.close(SyncError(.unavailable, .retry, "the daemon is shutting down", retryAfterSeconds: 1))
        }
        for link in links { await link.close() }
        await serving?.value
    }

    // MARK: Serving

    private typealias Upgrade = EventLoopFuture<UpgradeResult>

    private enum UpgradeResult: Sendable {
        case websocket(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, SessionIdentity)
        /// A plain HTTP request, or an upgrade refused (with why).
        case notUpgraded(NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, SyncError?)
    }

    /// What the upgrade check learnt about one connection, for the handler that runs after it.
    private final class ConnectionCheck: Sendable {
        private let value = Mutex<Result<SessionIdentity, SyncError>?>(nil)
        var result: Result<SessionIdentity, SyncError>? {
            get { value.withLock { $0 } }
            set { value.withLock { $0 = newValue } }
        }
    }

    private func bind(_ authenticator: Authenticator) async throws -> NIOAsyncChannel<Upgrade, Never> {
        try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .bind(host: configuration.host, port: configuration.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let check = ConnectionCheck()
                    let upgrader = NIOTypedWebSocketServerUpgrader<UpgradeResult>(
                        maxFrameSize: maximumFrameBytes,
                        shouldUpgrade: { channel, head in
                            let offered = head.headers[canonicalForm: "Sec-WebSocket-Protocol"].map(String.init)
                            guard head.uri.split(separator: "?").first.map(String.init) == SyncProtocol.path,
                                offered.contains(SyncProtocol.subprotocol)
                            else { return channel.eventLoop.makeSucceededFuture(nil) }
                            // The token is checked before the WebSocket exists: a refused connection gets an HTTP
                            // answer that names the problem, and never a session.
                            let authorization = head.headers["Authorization"].first
                            let promise = channel.eventLoop.makePromise(of: HTTPHeaders?.self)
                            promise.completeWithTask {
                                let result = await authenticator.authenticate(authorization)
                                check.result = result
                                guard case .success = result else { return nil }
                                return HTTPHeaders([("Sec-WebSocket-Protocol", SyncProtocol.subprotocol)])
                            }
                            return promise.futureResult
                        },
                        upgradePipelineHandler: { channel, _ in
                            channel.eventLoop.makeCompletedFuture {
                                try channel.pipeline.syncOperations.addHandler(
                                    NIOWebSocketFrameAggregator(
                                        minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 4096,
                                        maxAccumulatedFrameSize: maximumFrameBytes))
                                guard case .success(let identity) = check.result else {
                                    throw SyncServerError("a WebSocket upgrade without an authenticated identity")
                                }
                                return UpgradeResult.websocket(
                                    try NIOAsyncChannel(wrappingChannelSynchronously: channel), identity)
                            }
                        })
                    let configuration = NIOTypedHTTPServerUpgradeConfiguration<UpgradeResult>(
                        upgraders: [upgrader],
                        notUpgradingCompletionHandler: { channel in
                            channel.eventLoop.makeCompletedFuture {
                                var refusal: SyncError?
                                if case .failure(let error) = check.result { refusal = error }
                                return UpgradeResult.notUpgraded(
                                    try NIOAsyncChannel(wrappingChannelSynchronously: channel), refusal)
                            }
                        })
                    return try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(
                        configuration: .init(upgradeConfiguration: configuration))
                }
            }
    }

    private func serve(_ listener: NIOAsyncChannel<Upgrade, Never>) async {
        await withDiscardingTaskGroup { group in
            try? await listener.executeThenClose { inbound in
                for try await upgrade in inbound {
                    group.addTask { await self.handle(upgrade) }
                }
            }
        }
    }

    private func handle(_ upgrade: Upgrade) async {
        guard let result = try? await upgrade.get() else { return }
        switch result {
        case .websocket(let channel, let identity):
            await runWebSocketSession(channel, masking: false) { writer in await self.makeDriver(writer, identity) }
        case .notUpgraded(let channel, let refusal):
            if let refusal { configuration.log?("connection refused before its upgrade: \(refusal)") }
            await answerPlainHTTP(channel, refusal: refusal)
        }
    }

    private func makeDriver(_ writer: any MessageWriter, _ identity: SessionIdentity) async -> SessionDriver {
        var options = SessionDriver.Options()
        options.window = configuration.window
        options.keepaliveSeconds = configuration.keepaliveSeconds
        options.tickInterval = configuration.tickInterval
        options.requiredAuthor = identity.user
        options.tokenExpiry = identity.expires.map { .now + .seconds(max(0, $0.timeIntervalSinceNow)) }
        let holder = DriverHolder()
        let driver = SessionDriver(
            replica: replica, machine: SessionStateMachine(accepting: .standard, now: .now), writer: writer,
            integrator: committer,
            authenticate: { hello in
                guard identity.roles.contains(hello.role) else {
                    return SyncError(
                        .roleRefused, .fatal,
                        "replica \(hello.replica) asked for a \(hello.role) session, but its token allows "
                            + identity.roles.map(\.description).sorted().joined(separator: " and ")
                            + " sessions only (peer daemons present a shared access token)")
                }
                return nil
            }, options: options,
            onEvent: { [weak self] event in self?.sessionEvent(event, holder: holder) })
        holder.driver = driver
        let stopping = state.withLock { state in
            state.drivers[ObjectIdentifier(driver)] = driver
            return state.stopping
        }
        if stopping {
            await driver.close(SyncError(.unavailable, .retry, "the daemon is shutting down", retryAfterSeconds: 1))
        }
        return driver
    }

    private func sessionEvent(_ event: SessionEvent, holder: DriverHolder) {
        guard let driver = holder.driver else { return }
        switch event {
        case .established(let other, let role):
            configuration.log?("session opened: \(role) \(other)")
            let superseded = state.withLock { state in
                defer { state.byReplica[other] = (driver, role) }
                return state.byReplica[other]?.driver
            }
            if let superseded, superseded !== driver {
                Task {
                    await superseded.close(
                        SyncError(.superseded, .fatal, "a newer session of replica \(other) replaced this one"))
                }
            }
        case .ended(let error):
            let other = state.withLock { state in state.byReplica.first { $0.value.driver === driver }?.key }
            if let other {
                configuration.log?("session ended: \(other)" + (error.map { ": \($0)" } ?? ""))
            } else if let error {
                configuration.log?("session refused or failed before it opened: \(error)")
            }
            state.withLock { state in
                state.drivers.removeValue(forKey: ObjectIdentifier(driver))
                for (key, value) in state.byReplica where value.driver === driver {
                    state.byReplica.removeValue(forKey: key)
                }
            }
        default:
            break
        }
    }

    /// A plain HTTP request (not a WebSocket upgrade to the sync path): answered with 426 and a line that says where
    /// sessions are served. A refused upgrade: answered with 401 (503 for `unavailable`), the protocol's error in
    /// headers and its message as the body.
    private func answerPlainHTTP(
        _ channel: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, refusal: SyncError?
    ) async {
        try? await channel.executeThenClose { inbound, outbound in
            for try await part in inbound {
                guard case .end = part else { continue }
                var headers = HTTPHeaders()
                let status: HTTPResponseStatus
                let text: String
                if let refusal {
                    status = refusal.code == .unavailable ? .serviceUnavailable : .unauthorized
                    text = refusal.message + "\n"
                    headers.add(name: SyncProtocol.errorCodeHeader, value: "\(refusal.code.rawValue)")
                    headers.add(name: SyncProtocol.errorActionHeader, value: refusal.action.description)
                    headers.add(name: "Retry-After", value: "\(refusal.retryAfterSeconds)")
                } else {
                    status = .upgradeRequired
                    text =
                        "Tributary daemon: open a WebSocket to \(SyncProtocol.path) with the subprotocol "
                        + "\(SyncProtocol.subprotocol)\n"
                }
                let body = ByteBuffer(string: text)
                headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
                headers.add(name: "Content-Length", value: "\(body.readableBytes)")
                headers.add(name: "Connection", value: "close")
                try await outbound.write(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers)))
                try await outbound.write(.body(.byteBuffer(body)))
                try await outbound.write(.end(nil))
                return
            }
        }
    }
}

/// Lets a session's event handler name its driver, which is made after the handler.
private final class DriverHolder: Sendable {
    private let value = Mutex<SessionDriver?>(nil)
    var driver: SessionDriver? {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}
