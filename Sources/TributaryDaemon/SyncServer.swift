import Foundation
public import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
public import Prometheus
import Synchronization
public import Tributary
public import TributaryCluster
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
        /// The token this daemon presents to its peers (those that have no peer certificate authority).
        public var peerToken: String?
        /// Serves `wss://` instead of `ws://`: the daemon's certificate, and the authority whose client certificates
        /// identify peer daemons. Default: none (plain WebSocket, fit for loopback or a private network).
        public var tls: TLS?
        /// How this daemon reaches `wss://` peers: the certificate authorities it trusts for their certificates, and
        /// the certificate it presents to them (from their peer certificate authority).
        public var peerTLS = SyncTLS()
        /// The keepalive interval announced to sessions, in seconds.
        public var keepaliveSeconds = SyncProtocol.defaultKeepaliveSeconds
        /// The receive window announced to each session, in bytes: what one session may have in flight towards
        /// the daemon.
        public var window = SyncProtocol.defaultWindow
        /// The backoff of the links to peers.
        public var peerBackoff = ReconnectBackoff()
        /// How long a new connection has to send its HTTP request's head (the WebSocket upgrade, or a plain request)
        /// before it is closed. Default: 10 seconds.
        public var handshakeDeadline: Duration = .seconds(10)
        /// The most connections open at once from one IP address; more are refused with `unavailable` (HTTP 503)
        /// until some close. Default: 256 (apps behind one NAT share an address).
        public var connectionsPerAddress = 256
        /// How many bytes a second each user may upload, over all its sessions (a JWT's `sub`; an app without one
        /// counts as its replica): a batch over the allowance is refused with `rateLimited` and sent again after the
        /// delay the daemon gives, rather than buffered. `nil`: no limit. Default: 8 MiB a second.
        public var uploadBytesPerSecond: Int? = 8 << 20
        /// How many bytes a user may upload at once before ``uploadBytesPerSecond`` applies. A batch larger than
        /// this is taken when the user's allowance is full. Default: 64 MiB.
        public var uploadBurstBytes = 64 << 20
        /// The largest message (and so the largest changeset) a session may send the daemon, announced to each; at
        /// most the protocol's 16 MiB. A larger message ends its connection before it is read. Default: 16 MiB.
        public var maximumMessageBytes = SyncProtocol.maximumMessageBytes
        /// The most bytes of changesets in flight to one session, unacknowledged, whatever receive window it
        /// announces. Default: 16 MiB.
        public var outboundBytesPerSession: UInt64 = 16 << 20
        /// How long a session's socket may take to accept one message before the session is closed (a client that
        /// does not read). Default: 60 seconds.
        public var sendDeadline: Duration = .seconds(60)
        /// The properties flexible-sync subscriptions may query, by type name (the primary key always may). A
        /// subscription that reads any other is refused, with a message naming the field; its set goes to the error
        /// state on the device. `nil` (the default) lets subscriptions query every property.
        public var queryableFields: [String: Set<String>]?
        /// Who may read and write what: App Services permission rules (``PermissionRules``), applied to every app
        /// session with the user its token names (`%%user.id` is the token's `sub`, `%%user.custom_data` its
        /// claims). Apps must then sync by subscriptions; peer daemons are trusted with everything. `nil` (the
        /// default): every app may read and write everything.
        public var permissionRules: PermissionRules?
        /// The schema version of the app release that changed the schema in a way earlier releases must not sync
        /// across (a property made required, say). An app session that declares an earlier version is refused with
        /// `schemaVersionTooOld`, telling the app to update (its replica and unsynced changes stay on the device); an
        /// app of this version or later whose replica's history starts before it is reset, and downloads the data again
        /// under the new schema, its unsynced changes recovered as its client-reset mode says. Peer daemons are not
        /// checked. `nil` (the default): every release syncs.
        public var breakingSchemaVersion: UInt64?
        /// About the most bytes of objects in one message of a flexible-sync bootstrap. Default: 1 MiB.
        public var bootstrapMessageBytes = 1 << 20
        /// A commit wakes only the flexible-sync sessions whose subscriptions it concerns; the others receive it (as a
        /// changeset whose instructions are all omitted, which keeps the device's version vector whole) with the next
        /// batch sent to them, or after at most this long idle. Longer costs less work per commit with many devices
        /// connected; shorter keeps idle devices' progress closer to the daemon's. Default: 5 seconds.
        public var idleCatchUp: Duration = .seconds(5)
        /// When the daemon stops, each session is told to come back after a random 1 to this many seconds.
        /// Default: 5.
        public var reconnectSpreadSeconds: UInt64 = 5
        /// Checks keepalive this often (tests shorten it).
        public var tickInterval: Duration = .seconds(1)
        /// How long the daemon keeps history for a replica that stops syncing (Device Sync's "client max offline
        /// time"): the log entries that every replica synced within this long (or connected now) holds are replaced by
        /// a base state, when that drops a tenth of the log or more. A replica that comes back later lacks them and
        /// is reset (a client reset, its unsynced changes recovered); one that holds nothing yet starts from the base.
        /// `nil` (the default): the daemon keeps its whole history.
        public var retention: Duration?
        /// How often the daemon looks for history to compact, with ``retention``. Default (`nil`): a tenth of the
        /// retention, at least a minute; the first look is at start.
        public var compactionInterval: Duration?
        /// Where the daemon logs sessions opening, ending and being refused, and its peer links connecting and
        /// dropping. Each line about a session carries the metadata `session` (an id unique to the connection in
        /// this process), and `replica` and `role` once the other side said them. Default: nowhere.
        public var logger = Logger(label: "tributaryd", factory: { _ in SwiftLogNoOpLogHandler() })
        /// The registry the daemon records its metrics in and serves at `GET /metrics` (docs/Operating.md lists
        /// them). Default: one of the server's own; `tributaryd` passes the one it bootstrapped swift-metrics with.
        public var metricsRegistry = PrometheusCollectorRegistry()
        /// How long a peer link may go without being caught up (nothing to send, nothing known to receive) before
        /// `GET /ready` reports the daemon not ready. Default: 10 seconds.
        public var readinessBound: Duration = .seconds(10)
        /// In a cluster (``SyncServer/init(cluster:configuration:)``): how far ahead of this machine's clock an
        /// uploaded changeset may be stamped; one further ahead is refused before it reaches the shared log, and the
        /// app retries. A single daemon's replica applies its own `Replica.Configuration.maximumClockSkew` instead.
        /// Default: 10 minutes.
        public var maximumClockSkew: Duration = .seconds(600)
        /// In a cluster: how often the daemon reads the shared log besides when PostgreSQL announces an append
        /// (announcements made while its listening connection reconnects are lost). Default: 1 second.
        public var clusterPollInterval: Duration = .seconds(1)

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
    /// What sessions hand uploads to: the committer, or in a cluster the shared log.
    private let integrator: any BatchIntegrator
    /// In a cluster: what applies the shared log to ``replica``.
    public let cluster: LogFollower?
    private let uploads: UploadAllowances?
    let metrics: DaemonMetrics
    /// What keeps the log bounded, with ``Configuration/retention``.
    let retention: Retention?
    let peerWatch = PeerWatch()
    /// Whether a copy of the replica is being sent (``ReplicaCopy``).
    let replicaCopies = ReplicaCopies()
    private let state = Mutex(State())

    /// How connections are authenticated now; `nil` before the daemon started and once it stopped.
    var authenticator: Authenticator? { state.withLock { $0.authenticator } }

    private struct State {
        var listener: (any Channel)?
        var serving: Task<Void, Never>?
        /// Accepted sessions by connection, and the open ones by the replica on the other side.
        var drivers: [ObjectIdentifier: SessionDriver] = [:]
        var byReplica: [ReplicaID: (driver: SessionDriver, role: SyncRole)] = [:]
        var links: [SyncSession] = []
        var linkWatchers: [Task<Void, Never>] = []
        var compacting: Task<Void, Never>?
        /// In a cluster: the task that follows the shared log.
        var following: Task<Void, Never>?
        var stopping = false
        /// How connections are authenticated now (``reloadAuthentication(accessTokens:tokenPolicy:)`` replaces it).
        var authenticator: Authenticator?
        /// Connections open, by remote IP address.
        var connectionsByAddress: [String: Int] = [:]
        /// Every connection open, sessions or not (one still in its TLS handshake or HTTP request, say).
        var connections: [ObjectIdentifier: any Channel] = [:]
        /// The TLS context new connections are served with (``reloadCertificates()`` replaces it).
        var tlsContext: NIOSSLContext?
        /// The permission rules in force (``reloadPermissionRules(_:)`` replaces them).
        var rules: PermissionRules?
        /// The user of each app session, for choosing its roles again when the rules change.
        var ruleUsers: [ObjectIdentifier: RuleUser] = [:]
    }

    public convenience init(replica: Replica, configuration: Configuration = Configuration()) {
        self.init(replica: replica, cluster: nil, configuration: configuration)
    }

    /// A daemon of a cluster (docs/design/Cluster.md): its replica is the follower's, which has the cluster's replica
    /// id and changes only by applying the shared log. Apps' uploads are appended to the log and acknowledged once
    /// this daemon applied them; sessions send apps what the follower applies, whichever daemon took it. A cluster
    /// daemon has no peer links (``Configuration/peers`` must be empty): its peers share the log.
    public convenience init(cluster follower: LogFollower, configuration: Configuration = Configuration()) {
        self.init(replica: follower.replica, cluster: follower, configuration: configuration)
    }

    private init(replica: Replica, cluster: LogFollower?, configuration: Configuration) {
        self.replica = replica
        self.cluster = cluster
        self.configuration = configuration
        state.withLock { $0.rules = configuration.permissionRules }
        retention = configuration.retention.map { window in
            Retention(
                replica: replica, cluster: cluster, window: window,
                interval: configuration.compactionInterval ?? max(.seconds(60), window / 10),
                logger: configuration.logger)
        }
        metrics = DaemonMetrics(
            registry: configuration.metricsRegistry, peers: configuration.peers, retention: retention,
            cluster: cluster != nil)
        committer = Committer(replica: replica, metrics: metrics)
        integrator =
            cluster.map { ClusterCommitter(follower: $0, maximumClockSkew: configuration.maximumClockSkew) }
            ?? committer
        uploads = configuration.uploadBytesPerSecond.map {
            UploadAllowances(bytesPerSecond: max(1, $0), burst: max(1, configuration.uploadBurstBytes))
        }
    }

    /// The sessions open now (apps and peers that dialled this daemon).
    public var sessions: [SessionInfo] {
        state.withLock { $0.byReplica.map { SessionInfo(replica: $0.key, role: $0.value.role) } }
    }

    /// The links to configured peers.
    public var peerLinks: [SyncSession] { state.withLock { $0.links } }

    /// Runs one round of compaction now, as the daemon does every ``Configuration/compactionInterval``: the
    /// replicas that reported within ``Configuration/retention`` of `now` (seconds since 1970; the wall clock when
    /// `nil`), or are connected, bound it. Returns whether it compacted. Does nothing without a retention.
    @discardableResult
    package func compactHistory(asOf now: UInt64? = nil, minimumFraction: Double = 0.1) async throws -> Bool {
        guard let retention else { return false }
        return try await retention.round(now: now ?? Retention.now(), minimumFraction: minimumFraction) != nil
    }

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
        if let cluster {
            guard configuration.peers.isEmpty else {
                throw SyncServerError(
                    "a daemon of a cluster has no peer links (\(configuration.peers.count) configured): the daemons of a "
                        + "cluster share its log in PostgreSQL")
            }
            // Serve from the log's state: a restarted daemon applies what it missed before apps connect, and refuses
            // a log that went back behind what it applied, or was compacted past it.
            try await cluster.checkPosition()
            // Recorded before the catch-up too: a daemon started on a copy of another's replica holds back compactions
            // of the log from its first moment.
            try await cluster.recordPosition()
            try await cluster.catchUp()
            try await cluster.recordPosition(force: true)
            let logger = configuration.logger
            let following = Task { [interval = configuration.clusterPollInterval] in
                await cluster.run(interval: interval) { error in
                    logger.warning("could not follow the cluster's shared log: \(error)")
                }
                if !Task.isCancelled {
                    logger.error(
                        """
                        stopped following the cluster's shared log (above: why); this daemon serves what it holds \
                        and takes no uploads until it is restarted as the error says
                        """)
                }
            }
            state.withLock { $0.following = following }
        }
        let authenticator = try await Authenticator(
            accessTokens: configuration.accessTokens, policy: configuration.tokenPolicy,
            peersByCertificate: configuration.tls?.peerCertificateAuthority != nil)
        let context = try configuration.tls?.serverContext()
        state.withLock {
            $0.authenticator = authenticator
            $0.tlsContext = context
        }
        let listener = try await bind()
        let port = listener.channel.localAddress?.port ?? configuration.port
        let serving = Task { await serve(listener) }
        var links: [SyncSession] = []
        for peer in configuration.peers {
            var sessionConfiguration = SyncConfiguration()
            sessionConfiguration.backoff = configuration.peerBackoff
            sessionConfiguration.name = "tributaryd \(replica.replicaID)"
            sessionConfiguration.tls = configuration.peerTLS
            links.append(
                SyncSession(
                    replica: replica, endpoint: peer,
                    credentials: configuration.peerToken.map { .token($0) } ?? .none,
                    configuration: sessionConfiguration, role: .peer, integrator: committer, meter: metrics))
        }
        let watchers = zip(configuration.peers, links).map { peer, link in
            Task { [logger = configuration.logger] in await Self.logStates(of: link, to: peer, logger) }
        }
        let compacting = retention.map { retention in
            Task { await retention.run() }
        }
        state.withLock {
            $0.listener = listener.channel
            $0.serving = serving
            $0.links = links
            $0.linkWatchers = watchers
            $0.compacting = compacting
        }
        return port
    }

    /// Replaces the access tokens and token keys new connections are checked with (what SIGHUP reloads). Sessions
    /// already open keep going until their own token expires.
    ///
    /// - Throws: ``SyncServerError`` naming a key that does not load; the daemon then keeps the ones it had.
    public func reloadAuthentication(accessTokens: [String], tokenPolicy: TokenPolicy?) async throws(SyncServerError) {
        let authenticator = try await Authenticator(
            accessTokens: accessTokens, policy: tokenPolicy,
            peersByCertificate: configuration.tls?.peerCertificateAuthority != nil)
        state.withLock { $0.authenticator = authenticator }
    }

    /// Replaces the permission rules (what SIGHUP reloads). Every open app session takes its roles under the new
    /// rules at once: objects its user may no longer read are removed from its device, newly readable ones are sent,
    /// and its next writes are judged under the new roles. `nil` lifts the rules for new sessions; open ones keep
    /// syncing by subscriptions, with every write allowed.
    public func reloadPermissionRules(_ rules: PermissionRules?) async {
        let sessions = state.withLock { state in
            state.rules = rules
            return state.ruleUsers.compactMap { key, user in state.drivers[key].map { ($0, user) } }
        }
        for (driver, user) in sessions {
            await driver.changePermissions(rules?.permissions(for: user))
        }
    }

    /// Reads the TLS certificate, key and peer certificate authority files again (what SIGHUP does, so that a renewed
    /// certificate is served without a restart). New connections use them; open ones keep theirs.
    ///
    /// - Throws: ``SyncServerError`` naming a file that does not load; the daemon then keeps serving the old ones.
    public func reloadCertificates() throws(SyncServerError) {
        guard let tls = configuration.tls else { return }
        let context = try tls.serverContext()
        state.withLock { $0.tlsContext = context }
    }

    /// Stops: closes the listener, ends every session with an `unavailable` error whose retry delay is spread over
    /// 1 to ``Configuration/reconnectSpreadSeconds`` seconds (so that the apps of a stopped daemon do not all come
    /// back in the same second, to it or to another), and closes the links to peers. Every batch acknowledged was
    /// committed before its acknowledgement; one in flight is finished or, unacknowledged, sent again by its app.
    /// Returns when all of them have ended.
    public func stop() async {
        let (listener, serving, drivers, links, watchers, compacting) = state.withLock { state in
            state.stopping = true
            return (
                state.listener, state.serving, Array(state.drivers.values), state.links, state.linkWatchers,
                state.compacting
            )
        }
        compacting?.cancel()
        await compacting?.value
        let following = state.withLock { $0.following }
        following?.cancel()
        await following?.value
        do {
            try retention?.storeReports()
        } catch {
            configuration.logger.error("could not store the sync reports at stop: \(error)")
        }
        try? await listener?.close().get()
        let spread = max(1, configuration.reconnectSpreadSeconds)
        await withDiscardingTaskGroup { group in
            for driver in drivers {
                group.addTask {
                    await driver.close(
                        SyncError(
                            .unavailable, .retry, "the daemon is shutting down",
                            retryAfterSeconds: UInt64.random(in: 1...spread)))
                }
            }
        }
        for link in links { await link.close() }
        for watcher in watchers { watcher.cancel() }
        // What is left: connections that never became sessions (a handshake under way, a plain request).
        for channel in state.withLock({ Array($0.connections.values) }) { channel.close(promise: nil) }
        await serving?.value
    }

    // MARK: Serving

    /// Counts a connection from `address`; true when that takes it over ``Configuration/connectionsPerAddress``.
    private func admit(_ address: String) -> Bool {
        state.withLock { state in
            state.connectionsByAddress[address, default: 0] += 1
            return state.connectionsByAddress[address, default: 0] > configuration.connectionsPerAddress
        }
    }

    private func track(_ channel: any Channel) {
        state.withLock { $0.connections[ObjectIdentifier(channel)] = channel }
    }

    private func release(_ address: String, _ channel: any Channel) {
        state.withLock { state in
            state.connections.removeValue(forKey: ObjectIdentifier(channel))
            let left = state.connectionsByAddress[address, default: 1] - 1
            state.connectionsByAddress[address] = left > 0 ? left : nil
        }
    }

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

    /// The largest message sessions may send: the configuration's, within the protocol's.
    private var messageBytes: Int {
        max(1 << 10, min(configuration.maximumMessageBytes, SyncProtocol.maximumMessageBytes))
    }

    private func bind() async throws -> NIOAsyncChannel<Upgrade, Never> {
        let deadline = configuration.handshakeDeadline
        let frameBytes = messageBytes + 64
        return try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .bind(host: configuration.host, port: configuration.port) { [weak self] channel in
                // The connection's closures hold the server while the connection lives (the listener only weakly).
                let server = self
                return channel.eventLoop.makeCompletedFuture {
                    let check = ConnectionCheck()
                    if let context = server?.state.withLock({ $0.tlsContext }) {
                        try channel.pipeline.syncOperations.addHandler(PlaintextRefusal())
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                    }
                    // A connection that has not finished its HTTP request by the deadline (one that sends nothing,
                    // or trickles its headers) is closed: it holds a socket and sends nothing a session could use.
                    let expiry = channel.eventLoop.scheduleTask(in: TimeAmount(deadline)) {
                        channel.close(promise: nil)
                    }
                    channel.closeFuture.whenComplete { _ in expiry.cancel() }
                    let address = channel.remoteAddress?.ipAddress ?? "unknown"
                    let crowded = server?.admit(address) ?? false
                    server?.track(channel)
                    channel.closeFuture.whenComplete { _ in server?.release(address, channel) }
                    let upgrader = NIOTypedWebSocketServerUpgrader<UpgradeResult>(
                        maxFrameSize: frameBytes,
                        shouldUpgrade: { channel, head in
                            // The request has arrived: the deadline was the client's to meet, and the daemon's own
                            // checks below do not count against it.
                            expiry.cancel()
                            let offered = head.headers[canonicalForm: "Sec-WebSocket-Protocol"].map(String.init)
                            guard head.uri.split(separator: "?").first.map(String.init) == SyncProtocol.path,
                                offered.contains(SyncProtocol.subprotocol)
                            else { return channel.eventLoop.makeSucceededFuture(nil) }
                            // The token is checked before the WebSocket exists: a refused connection gets an HTTP
                            // answer that names the problem, and never a session.
                            let authorization = head.headers["Authorization"].first
                            // With a peer certificate authority, TLS let a client certificate through only if that
                            // authority signed it: the connection is a peer daemon's.
                            let certified =
                                (try? channel.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self))?
                                .peerCertificate != nil
                            let promise = channel.eventLoop.makePromise(of: HTTPHeaders?.self)
                            promise.completeWithTask {
                                if crowded, let limit = server?.configuration.connectionsPerAddress {
                                    check.result = .failure(
                                        SyncError(
                                            .unavailable, .retry,
                                            "too many connections from \(address): this daemon takes \(limit) at "
                                                + "once from one address", retryAfterSeconds: 10))
                                    return nil
                                }
                                guard let authenticator = server?.state.withLock({ $0.authenticator }) else {
                                    check.result = .failure(
                                        SyncError(.unavailable, .retry, "the daemon is stopping", retryAfterSeconds: 1))
                                    return nil
                                }
                                let result =
                                    certified ? .success(.peer) : await authenticator.authenticate(authorization)
                                check.result = result
                                guard case .success = result else { return nil }
                                return HTTPHeaders([("Sec-WebSocket-Protocol", SyncProtocol.subprotocol)])
                            }
                            return promise.futureResult
                        },
                        upgradePipelineHandler: { channel, _ in
                            expiry.cancel()
                            return channel.eventLoop.makeCompletedFuture {
                                try channel.pipeline.syncOperations.addHandler(
                                    NIOWebSocketFrameAggregator(
                                        minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 4096,
                                        maxAccumulatedFrameSize: frameBytes))
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
                            expiry.cancel()
                            return channel.eventLoop.makeCompletedFuture {
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
            await runWebSocketSession(channel, masking: false, sendDeadline: configuration.sendDeadline) { writer in
                await self.makeDriver(writer, identity)
            }
        case .notUpgraded(let channel, let refusal):
            if let refusal {
                configuration.logger.warning(
                    "session refused before its upgrade: \(refusal)",
                    metadata: ["session": "\(SessionIdentifiers.next())", "error": "\(refusal.code)"])
            }
            await answerHTTP(channel, refusal: refusal)
        }
    }

    private func makeDriver(_ writer: any MessageWriter, _ identity: SessionIdentity) async -> SessionDriver {
        var options = SessionDriver.Options()
        options.window = configuration.window
        options.keepaliveSeconds = configuration.keepaliveSeconds
        options.tickInterval = configuration.tickInterval
        options.requiredAuthor = identity.user
        options.tokenExpiry = identity.expires.map { .now + .seconds(max(0, $0.timeIntervalSinceNow)) }
        options.meter = metrics
        options.queryableFields = configuration.queryableFields
        options.objectStatesBytes = max(1, configuration.bootstrapMessageBytes)
        options.idleCatchUp = configuration.idleCatchUp
        let ruleUser = identity.ruleUser
        options.permissions = state.withLock { $0.rules }?.permissions(for: ruleUser)
        if let uploads {
            let user = identity.user
            options.uploadAllowance = { bytes, replica in uploads.take(bytes, user: user ?? "replica \(replica)") }
        }
        var limits = MessageLimits.standard
        limits.maximumWindow = max(1, configuration.outboundBytesPerSession)
        limits.maximumMessageBytes = messageBytes
        let holder = DriverHolder(logger: configuration.logger)
        let driver = SessionDriver(
            replica: replica, machine: SessionStateMachine(accepting: limits, now: .now), writer: writer,
            integrator: integrator,
            authenticate: { [breaking = configuration.breakingSchemaVersion, cluster, replica] hello in
                // In a cluster, an app that synced through a daemon further along the log than this one is not
                // ahead of the cluster: this daemon applies the log before judging the app's position.
                if let cluster, hello.vector[replica.replicaID] > replica.versionVector[replica.replicaID] {
                    _ = try? await cluster.catchUp()
                }
                if let cluster,
                    let refusal = Self.retiredEpochRefusal(
                        of: hello, retired: cluster.log.retiredReplicas, log: cluster.log.configuration.log)
                {
                    return refusal
                }
                if hello.role == .app, let breaking, let refusal = Self.schemaRefusal(of: hello, breaking: breaking) {
                    return refusal
                }
                guard identity.roles.contains(hello.role) else {
                    return SyncError(
                        .roleRefused, .fatal,
                        "replica \(hello.replica) asked for a \(hello.role) session, but its token allows "
                            + identity.roles.map(\.description).sorted().joined(separator: " and ")
                            + " sessions only (peer daemons present "
                            + (self.configuration.tls?.peerCertificateAuthority != nil
                                ? "a certificate from the peer certificate authority)" : "a shared access token)"))
                }
                return nil
            }, options: options,
            onEvent: { [weak self] event in self?.sessionEvent(event, holder: holder) })
        holder.driver = driver
        let stopping = state.withLock { state in
            state.drivers[ObjectIdentifier(driver)] = driver
            state.ruleUsers[ObjectIdentifier(driver)] = ruleUser
            return state.stopping
        }
        if stopping {
            await driver.close(SyncError(.unavailable, .retry, "the daemon is shutting down", retryAfterSeconds: 1))
        }
        return driver
    }

    /// Why a replica that synced with this cluster under a retired epoch of its log must be reset, or `nil` when it
    /// need not: it holds more changesets of a retired epoch's replica id than the current history kept
    /// (`retired`, ``SharedLog/retiredReplicas``), so it holds changesets the log lost, and its version vector counts
    /// dots the daemons no longer give.
    static func retiredEpochRefusal(of hello: Hello, retired: [ReplicaID: UInt64], log name: String) -> SyncError? {
        guard !retired.isEmpty,
            let entry = hello.vector.entries.first(where: { entry in
                retired[entry.replica].map { entry.sequence > $0 } ?? false
            }),
            let kept = retired[entry.replica]
        else { return nil }
        return SyncError(
            .resetRequired, .reset,
            "replica \(hello.replica) synced with this cluster under a retired epoch of its log '\(name)' (it holds "
                + "\(entry.sequence) changesets of replica \(entry.replica), the cluster's history \(kept)): the log "
                + "lost commits (a restore or a failover) and was given a new epoch; the app resets its replica, and "
                + "recovers its unsynced changes onto the cluster's state")
    }

    /// Why an app session must not sync across the breaking schema version `breaking`, or `nil` when it may.
    static func schemaRefusal(of hello: Hello, breaking: UInt64) -> SyncError? {
        if hello.schemaVersion < breaking {
            return SyncError(
                .schemaVersionTooOld, .fatal,
                "this app declares schema version \(hello.schemaVersion), but schema version \(breaking) changed the "
                    + "schema in a way earlier releases cannot sync across: update the app. Its replica and unsynced "
                    + "changes stay on the device; after the update the replica downloads the data again under the new "
                    + "schema and its changes are recovered")
        }
        if hello.firstSchemaVersion != 0, hello.firstSchemaVersion < breaking {
            return SyncError(
                .resetRequired, .reset,
                "this replica's history starts at schema version \(hello.firstSchemaVersion), before the breaking "
                    + "change of version \(breaking): it is reset, and downloads the data again under the new schema")
        }
        return nil
    }

    private func sessionEvent(_ event: SessionEvent, holder: DriverHolder) {
        guard let driver = holder.driver else { return }
        switch event {
        case .established(let other, let role):
            holder.identify(replica: other, role: role)
            holder.logger.info("session opened: \(role) \(other)")
            let (superseded, open) = state.withLock { state in
                let superseded = state.byReplica[other]?.driver
                state.byReplica[other] = (driver, role)
                return (superseded, Self.count(roles: state.byReplica.values.map(\.role)))
            }
            metrics.sessionsOpen(apps: open.apps, peers: open.peers)
            if let superseded, superseded !== driver {
                Task {
                    await superseded.close(
                        SyncError(.superseded, .fatal, "a newer session of replica \(other) replaced this one"))
                }
            }
        case .ended(let error):
            let other = state.withLock { state in state.byReplica.first { $0.value.driver === driver }?.key }
            if let other {
                holder.logger.info(
                    "session ended: \(other)\(error.map { ": \($0)" } ?? "")",
                    metadata: error.map { ["error": "\($0.code)"] })
            } else if let error {
                holder.logger.warning(
                    "session refused or failed before it opened: \(error)", metadata: ["error": "\(error.code)"])
                metrics.sessionRefused(error.code)
            }
            let open = state.withLock { state in
                state.drivers.removeValue(forKey: ObjectIdentifier(driver))
                state.ruleUsers.removeValue(forKey: ObjectIdentifier(driver))
                for (key, value) in state.byReplica where value.driver === driver {
                    state.byReplica.removeValue(forKey: key)
                }
                return Self.count(roles: state.byReplica.values.map(\.role))
            }
            metrics.sessionsOpen(apps: open.apps, peers: open.peers)
        default:
            break
        }
    }
}

/// Lets a session's event handler name its driver, which is made after the handler, and log with the session's
/// metadata.
private final class DriverHolder: Sendable {
    private let value = Mutex<SessionDriver?>(nil)
    private let sessionLogger: Mutex<Logger>

    init(logger: Logger) {
        var logger = logger
        logger[metadataKey: "session"] = "\(SessionIdentifiers.next())"
        sessionLogger = Mutex(logger)
    }

    var driver: SessionDriver? {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }

    /// The daemon's logger with this session's metadata.
    var logger: Logger { sessionLogger.withLock { $0 } }

    /// Adds the other side's replica and role to the session's metadata.
    func identify(replica: ReplicaID, role: SyncRole) {
        sessionLogger.withLock { logger in
            logger[metadataKey: "replica"] = "\(replica)"
            logger[metadataKey: "role"] = "\(role)"
        }
    }
}
