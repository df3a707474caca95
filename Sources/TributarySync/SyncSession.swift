import NIOSSL
import Synchronization
public import Tributary
import TributaryModel
public import TributaryProtocol

/// What an app presents to its daemon: a token (a JWT its backend signed, or a shared access token), sent in the
/// WebSocket upgrade's `Authorization` header so that the daemon checks it before the session exists.
///
/// Tokens expire. With ``refreshing(initial:_:)`` the session asks the app for a fresh token whenever the daemon
/// says the one it has expired (at connection or during a session) or refuses it, and reconnects at once; writes
/// made meanwhile are uploaded then.
///
/// ```swift
/// let session = replica.connect(
///     to: endpoint, credentials: .refreshing { try await backend.freshSyncToken() })
/// ```
public struct SyncCredentials: Sendable {
    /// The token presented first; empty for none.
    public var bytes: [UInt8]
    /// Asks the app for a fresh token.
    public var refresh: (@Sendable () async throws -> String)?

    public init(bytes: [UInt8], refresh: (@Sendable () async throws -> String)? = nil) {
        self.bytes = bytes
        self.refresh = refresh
    }

    /// No credentials: for a daemon that takes anyone on loopback.
    public static let none = SyncCredentials(bytes: [])

    /// A bearer token.
    public static func token(_ token: String) -> SyncCredentials { SyncCredentials(bytes: Array(token.utf8)) }

    /// A token the app renews: `fetch` is called for the first one (unless `initial` is given) and whenever the
    /// daemon refuses the current one or says it expired.
    public static func refreshing(
        initial: String? = nil, _ fetch: @escaping @Sendable () async throws -> String
    ) -> SyncCredentials {
        SyncCredentials(bytes: Array((initial ?? "").utf8), refresh: fetch)
    }
}

/// How a ``SyncSession`` behaves.
public struct SyncConfiguration: Sendable {
    /// The schema version of the app's models, which the daemon checks against a breaking schema version its
    /// operator set. 0 (the default): the version the app opened the replica with.
    public var schemaVersion: UInt64 = 0
    /// A name for the daemon's logs ("Notes 2.1 on iPad").
    public var name = ""
    /// The waits between reconnection attempts: 1 second doubling to 5 minutes, with full jitter.
    public var backoff = ReconnectBackoff()
    /// How many bytes of changesets the daemon may send ahead of this app's acknowledgements.
    public var window = SyncProtocol.defaultWindow
    /// Whom a `wss://` daemon's certificate is checked against (the system's roots by default), and the certificate
    /// presented, if any.
    public var tls = SyncTLS()
    /// What the session does when the daemon says the replica must be reset. By default it recovers the unsynced
    /// changes onto the daemon's state, and syncs the new replica (``SyncSession/replica``).
    public var clientReset = ClientReset()
    /// Whether the session uploads: a client reset downloads the daemon's state without.
    package var uploads = true

    public init() {}
}

/// How far a transfer is: changesets transferred and the number known to transfer.
public struct SyncProgress: Sendable, Hashable, CustomStringConvertible {
    public var transferred: UInt64
    public var transferable: UInt64

    public init(transferred: UInt64, transferable: UInt64) {
        self.transferred = transferred
        self.transferable = transferable
    }

    /// Whether everything known has been transferred.
    public var isComplete: Bool { transferred >= transferable }

    public var description: String { "\(transferred)/\(transferable)" }
}

/// A replica's sync with a daemon: it connects, uploads what the app wrote (offline writes included) and downloads
/// what others wrote, and reconnects with backoff whenever the connection drops, resuming where it stopped.
///
/// ```swift
/// let session = replica.connect(to: try SyncEndpoint(parsing: "ws://127.0.0.1:7400"))
/// try await replica.write { try $0.create("Task", ["_id": "t1", "title": "Write the report"]) }
/// try await session.waitForUpload()
/// ```
///
/// Live results and object observers see downloaded changes as they see local ones.
public final class SyncSession: Sendable {
    /// Where a session stands.
    public enum State: Sendable, Hashable, CustomStringConvertible {
        /// Opening a connection to the daemon.
        case connecting
        /// Connected: changes flow both ways.
        case active
        /// Not connected: `error` says why, when known. With a ``SyncError/Action/retry`` error (or none) the
        /// session reconnects by itself after its backoff; otherwise it waits for ``SyncSession/resume()``.
        case disconnected(SyncError?)
        /// Paused by ``SyncSession/pause()``.
        case paused
        /// Closed for good by ``SyncSession/close()``.
        case closed
        /// Resetting the replica (``ClientReset``): downloading the daemon's state, recovering unsynced changes.
        case resetting

        public var description: String {
            switch self {
            case .connecting: "connecting"
            case .active: "active"
            case .disconnected(let error?): "disconnected: \(error)"
            case .disconnected(nil): "disconnected"
            case .paused: "paused"
            case .closed: "closed"
            case .resetting: "resetting"
            }
        }
    }

    /// The replica this session syncs: the one it was made with, until a client reset puts a new one in its place
    /// (the old one is then closed, and ``ClientReset/afterReset`` is called with the new one).
    public var replica: Replica { shared.replica }
    /// The daemons it may sync with, in the order it tries them: one, or several of a cluster.
    public let endpoints: [SyncEndpoint]
    /// The daemon it syncs with now, or tries next.
    public var endpoint: SyncEndpoint { endpoints[shared.endpointIndex % endpoints.count] }
    private let shared: Shared
    private let credentials: SyncCredentials
    private let configuration: SyncConfiguration
    private let loop: Mutex<Task<Void, Never>?> = Mutex(nil)

    /// A session as `role`: an app's (which uploads its own changesets and downloads everything), or a daemon's
    /// link to a peer (which sends and receives every changeset, with `integrator` committing what it receives).
    package convenience init(
        replica: Replica, endpoint: SyncEndpoint, credentials: SyncCredentials, configuration: SyncConfiguration,
        role: SyncRole = .app, integrator: (any BatchIntegrator)? = nil, meter: (any SessionMeter)? = nil
    ) {
        self.init(
            replica: replica, endpoints: [endpoint], credentials: credentials, configuration: configuration, role: role,
            integrator: integrator, meter: meter)
    }

    /// A session with the first of `endpoints` that answers: after a connection fails or breaks, the next one is
    /// tried. An empty list stops the session at once, saying so.
    package init(
        replica: Replica, endpoints: [SyncEndpoint], credentials: SyncCredentials, configuration: SyncConfiguration,
        role: SyncRole = .app, integrator: (any BatchIntegrator)? = nil, meter: (any SessionMeter)? = nil
    ) {
        let shared = Shared(replica: replica)
        self.shared = shared
        self.credentials = credentials
        self.configuration = configuration
        guard !endpoints.isEmpty else {
            // Placeholder, never dialled: `endpoint` needs an element.
            self.endpoints = [SyncEndpoint(host: "127.0.0.1", port: 0)]
            shared.stop(SyncError(.unavailable, .fatal, "the session was given no daemon address to connect to"))
            return
        }
        self.endpoints = endpoints
        loop.withLock {
            $0 = Task {
                await Self.run(
                    endpoints: endpoints, credentials: credentials, configuration: configuration,
                    role: role, integrator: integrator, meter: meter, shared: shared)
            }
        }
    }

    /// The session's state now.
    public var state: State { shared.state }

    /// The session's state, now and at each change.
    public func states() -> AsyncStream<State> { shared.states.subscribe() }

    /// This replica's own changesets the daemon holds durably, against those it wrote: now and at each change.
    public func uploadProgress() -> AsyncStream<SyncProgress> { shared.uploads.subscribe() }

    /// Changesets downloaded in the current connection, against those known to be missing: now and at each batch.
    public func downloadProgress() -> AsyncStream<SyncProgress> { shared.downloads.subscribe() }

    /// Flexible sync: the objects of a subscription set's bootstrap received so far, against how many it sends: now
    /// and at each message. The objects are applied, in one transaction, when the last one is in.
    public func bootstrapProgress() -> AsyncStream<SyncProgress> { shared.bootstraps.subscribe() }

    /// Changesets the daemon refused (a schema conflict), with the reason: as they are reported.
    public var rejections: [Acknowledgement.Rejection] { shared.rejections }

    /// The client resets this session made, oldest first.
    public var clientResets: [ClientResetReport] { shared.resets }

    /// Resets the replica now, as ``ClientReset/Mode`` `mode` says: what an app does after the session stopped with
    /// ``SyncError/Code/resetRequired`` under ``ClientReset/Mode/manual``. The old replica is kept at the report's
    /// ``ClientResetReport/backupDirectory`` (delete it when done with it); the session then syncs the new replica.
    ///
    /// - Throws: ``SyncError`` when the session was not stopped for a reset, `mode` is ``ClientReset/Mode/manual``
    ///   (which says nothing of what to do with the unsynced changes), or the reset failed (the old replica is then
    ///   left in place).
    @discardableResult
    public func reset(_ mode: ClientReset.Mode = .recoverUnsyncedChanges) async throws -> ClientResetReport {
        guard let error = shared.stoppedError, error.action == .reset else {
            throw SyncError(
                .resetRequired, .fatal,
                "the session was not stopped for a client reset: reset only after the daemon asked for one")
        }
        guard mode != .manual else {
            throw SyncError(
                .resetRequired, .fatal,
                "reset(.manual) says nothing of the unsynced changes: pass .recoverUnsyncedChanges, "
                    + ".discardUnsyncedChanges or .recoverOrDiscardUnsyncedChanges")
        }
        var policy = configuration.clientReset
        policy.mode = mode
        let old = shared.replica
        let (fresh, report): (Replica, ClientResetReport)
        do {
            (fresh, report) = try await ClientResetter.reset(
                old, reason: error.message, mode: policy.mode, policy: policy, endpoint: endpoint,
                credentials: credentials, configuration: configuration, keepBackup: true)
        } catch {
            Self.reopen(old, after: error, shared)
            throw error.error
        }
        shared.replace(with: fresh, report: report)
        shared.setPaused(false)
        return report
    }

    /// Waits until the daemon holds, durably, every changeset this replica wrote before the call: across
    /// reconnections, if the connection drops meanwhile.
    ///
    /// - Throws: ``SyncError`` when the session stops for good first (closed, or an error that is not retried).
    public func waitForUpload() async throws {
        let target = replica.versionVector[replica.replicaID]
        try await shared.waitForUpload(through: target)
    }

    /// Waits until this replica has integrated every changeset the daemon held when the call was made (once it is
    /// connected): a mark, echoed by the daemon after it has sent everything it holds.
    ///
    /// - Throws: ``SyncError`` when the session stops for good first.
    public func waitForDownload() async throws {
        while true {
            let driver = try await shared.activeDriver()
            do {
                try await driver.mark()
                return
            } catch {
                // The connection dropped before the reply: ask the next one.
                try shared.checkNotStopped()
            }
        }
    }

    /// How far the open connection is from having nothing left to exchange; `nil` while there is none.
    package func standing() async -> SessionStanding? {
        guard case .active = state, let driver = shared.driver else { return nil }
        return await driver.standing()
    }

    /// Stops syncing until ``resume()``: the connection is closed, and writes stay local.
    public func pause() async {
        shared.setPaused(true)
        if let driver = shared.driver {
            await driver.close(SyncError(.unavailable, .retry, "the app paused sync"))
        }
    }

    /// Syncs again after ``pause()``, or after an error that stopped the session.
    public func resume() { shared.setPaused(false) }

    /// Closes the session for good.
    public func close() async {
        shared.setClosed()
        if let driver = shared.driver {
            await driver.close(SyncError(.unavailable, .retry, "the app closed the sync session"))
        }
        let task = loop.withLock { $0 }
        await task?.value
    }

    // MARK: The connection loop

    private static func run(
        endpoints: [SyncEndpoint], credentials: SyncCredentials, configuration: SyncConfiguration,
        role: SyncRole, integrator: (any BatchIntegrator)?, meter: (any SessionMeter)?, shared: Shared
    ) async {
        var backoff = configuration.backoff
        // One TLS context for the session's connections: settings that do not load stop the session, naming the file.
        var tls: NIOSSLContext?
        var token = String(decoding: credentials.bytes, as: UTF8.self)
        /// Whether the token was fetched for this attempt (a refusal then is not answered with another fetch).
        var fresh = false
        while !shared.isClosed {
            if shared.isHeld {
                await shared.waitUntilReleased()
                continue
            }
            let endpoint = endpoints[shared.endpointIndex % endpoints.count]
            if endpoint.secure && tls == nil {
                do {
                    tls = try configuration.tls.clientContext()
                } catch {
                    shared.stop(error)
                    continue
                }
            }
            shared.set(.connecting)
            // The replica is the one a client reset put in place, if one did.
            let replica = shared.replica
            let integrator = integrator ?? DirectIntegrator(replica: replica)
            var ended: SyncError?
            var refreshFailed = false
            if token.isEmpty, let refresh = credentials.refresh {
                do {
                    token = try await refresh()
                    fresh = true
                } catch {
                    refreshFailed = true
                    ended = SyncError(
                        .unauthorized, .retry, "the app could not provide a sync token: \(error)", retryAfterSeconds: 1)
                }
            }
            if ended == nil {
                do {
                    let channel = try await WebSocketDialer.connect(
                        to: endpoint, authorization: token.isEmpty ? nil : "Bearer \(token)", tls: tls)
                    await runWebSocketSession(channel, masking: true) { writer in
                        let pending = ((try? replica.pendingDots()) ?? []).sorted()
                        let versions = replica.schemaVersions(configuration)
                        let hello = Hello(
                            replica: replica.replicaID, role: role, schemaVersion: versions.declared,
                            name: String(configuration.name.utf8.prefix(256)) ?? "", vector: replica.versionVector,
                            pending: Array(pending.prefix(MessageLimits.standard.maximumDots)),
                            window: configuration.window,
                            flexible: role == .app && ((try? replica.flexibleSyncQuery()) ?? nil) != nil,
                            anchors: ((try? replica.historyAnchors()) ?? []).prefix(MessageLimits.standard.maximumDots)
                                .map { HistoryAnchor(dot: $0.dot, fingerprint: $0.fingerprint) },
                            firstSchemaVersion: versions.first)
                        var options = SessionDriver.Options()
                        options.window = configuration.window
                        options.meter = meter
                        options.acknowledgedThrough = shared.acknowledgedThrough
                        options.flexible = hello.flexible
                        options.uploads = configuration.uploads
                        let driver = SessionDriver(
                            replica: replica, machine: SessionStateMachine(initiating: hello, now: .now), role: role,
                            writer: writer, integrator: integrator, options: options,
                            onEvent: { shared.handle($0) })
                        shared.driver = driver
                        if shared.isClosed || shared.isHeld {
                            // Closed or paused while this connection opened: close() and pause() found no driver to
                            // end, so the session ends it itself (else it would live on, pinging, unwanted).
                            let reason = shared.isClosed ? "the app closed the sync session" : "the app paused sync"
                            Task { await driver.close(SyncError(.unavailable, .retry, reason)) }
                        }
                        return driver
                    }
                    ended = shared.takeEndError()
                    if shared.wasEstablished {
                        backoff.reset()
                        fresh = false
                    }
                } catch let error as SyncError {
                    ended = error
                } catch {
                    ended = SyncError(.unavailable, .retry, "cannot connect to \(endpoint): \(error)")
                }
            }
            shared.driver = nil
            if shared.isClosed { break }
            if shared.isHeld { continue }
            if let refused = ended, refused.code == .tokenExpired || refused.code == .unauthorized {
                if credentials.refresh != nil && !fresh && !refreshFailed {
                    // Ask the app for a fresh token and reconnect at once: the handshake resumes the upload.
                    token = ""
                    continue
                }
                if refused.code == .tokenExpired {
                    ended = SyncError(
                        .tokenExpired, .fatal,
                        refused.message + " (this session cannot renew its token: connect with "
                            + "SyncCredentials.refreshing)")
                }
            }
            if let ended, ended.action == .reset, role == .app, configuration.clientReset.mode != .manual {
                // The daemon cannot sync this replica any more: reset it, and sync the new one.
                shared.set(.resetting)
                do {
                    let (fresh, report) = try await resetAutomatically(
                        replica, reason: ended.message, endpoint: endpoint, credentials: credentials,
                        configuration: configuration)
                    shared.replace(with: fresh, report: report)
                    backoff.reset()
                } catch let failure as ResetFailure {
                    reopen(replica, after: failure, shared)
                    shared.stop(failure.error)
                } catch {
                    shared.stop(
                        error as? SyncError ?? SyncError(.resetRequired, .reset, "the client reset failed: \(error)"))
                }
                continue
            }
            if let ended, ended.action != .retry {
                shared.stop(ended)
                continue
            }
            shared.set(.disconnected(ended))
            if endpoints.count > 1 {
                // Another daemon of the cluster may serve now: the next one is tried, after the same wait.
                shared.endpointIndex = (shared.endpointIndex + 1) % endpoints.count
            }
            var wait = backoff.next(random: Double.random(in: 0...1))
            if let ended { wait = max(wait, .seconds(min(ended.retryAfterSeconds, 86_400))) }
            await shared.sleep(for: wait)
        }
        shared.set(.closed)
    }
}

extension SyncSession {
    /// After a reset that failed once it had closed the old replica: the old replica, opened again, is the one the
    /// session syncs (it is whole: the reset replaces it only in its last, atomic step).
    fileprivate static func reopen(_ old: Replica, after failure: ResetFailure, _ shared: Shared) {
        guard failure.oldClosed,
            let reopened = try? Replica.open(
                directory: old.directory, schema: old.schemaOpenedWith, configuration: old.configuration)
        else { return }
        shared.restore(reopened)
    }

    /// A reset by the session's ``ClientReset`` policy; a third one in a row (the daemon took no upload after the
    /// last two) is refused: resetting again would not help, and would loop.
    private static func resetAutomatically(
        _ replica: Replica, reason: String, endpoint: SyncEndpoint, credentials: SyncCredentials,
        configuration: SyncConfiguration
    ) async throws -> (Replica, ClientResetReport) {
        let attempts = ClientResetter.attempts(in: replica.directory)
        guard attempts < 2 else {
            throw SyncError(
                .resetRequired, .reset,
                "the daemon asked for a client reset again after \(attempts) resets in a row that did not let this "
                    + "replica sync; the session stops instead of resetting for ever (the daemon's reason: \(reason)). "
                    + "Call session.reset(_:) to try once more, or restore the daemon")
        }
        try? ClientResetter.recordAttempt(in: replica.directory)
        return try await ClientResetter.reset(
            replica, reason: reason, mode: configuration.clientReset.mode, policy: configuration.clientReset,
            endpoint: endpoint, credentials: credentials, configuration: configuration, keepBackup: false)
    }
}

extension Replica {
    /// Starts syncing this replica with the daemon at `endpoint`, in the background, until the session is closed.
    ///
    /// - Parameters:
    ///   - endpoint: the daemon's address (`SyncEndpoint(parsing: "ws://HOST:PORT")`).
    ///   - credentials: what the daemon checks.
    ///   - configuration: the backoff, the window, the name the daemon logs.
    public func connect(
        to endpoint: SyncEndpoint, credentials: SyncCredentials = .none, configuration: SyncConfiguration = .init()
    ) -> SyncSession {
        SyncSession(replica: self, endpoint: endpoint, credentials: credentials, configuration: configuration)
    }

    /// Starts syncing this replica with the daemons of a cluster at `endpoints`, in the background, until the session
    /// is closed: it connects to the first, and when a connection fails or breaks (the daemon stopped, its machine
    /// went away) to the next, in turn. Any daemon of a cluster serves the replica from where it left off, so a move
    /// needs no reset. An empty list stops the session at once.
    ///
    /// - Parameters:
    ///   - endpoints: the daemons' addresses, in the order to try them.
    ///   - credentials: what the daemons check.
    ///   - configuration: the backoff (between attempts, whichever daemon is next), the window, the name logged.
    public func connect(
        toAnyOf endpoints: [SyncEndpoint], credentials: SyncCredentials = .none,
        configuration: SyncConfiguration = .init()
    ) -> SyncSession {
        SyncSession(replica: self, endpoints: endpoints, credentials: credentials, configuration: configuration)
    }
}

/// A value many readers follow: each new reader gets the current value first, then every change.
final class Broadcast<Value: Sendable>: Sendable {
    private let state: Mutex<(value: Value, readers: [UInt64: AsyncStream<Value>.Continuation], next: UInt64)>

    init(_ value: Value) { state = Mutex((value, [:], 0)) }

    var value: Value { state.withLock { $0.value } }

    func send(_ value: Value) {
        let readers = state.withLock { state in
            state.value = value
            return Array(state.readers.values)
        }
        for reader in readers { reader.yield(value) }
    }

    func subscribe() -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream<Value>.makeStream(bufferingPolicy: .bufferingNewest(16))
        let (current, id) = state.withLock { state in
            state.next += 1
            state.readers[state.next] = continuation
            return (state.value, state.next)
        }
        continuation.yield(current)
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.readers.removeValue(forKey: id) }
        }
        return stream
    }

    func finish() {
        let readers = state.withLock { state in
            defer { state.readers.removeAll() }
            return Array(state.readers.values)
        }
        for reader in readers { reader.finish() }
    }
}

extension Replica {
    /// The schema versions a session's `hello` states: the app's (the configuration's, or else the one the app opened
    /// the replica with) and the one the replica's history starts at (0 when unknown).
    func schemaVersions(_ configuration: SyncConfiguration) -> (declared: UInt64, first: UInt64) {
        let declared = (try? declaredVersions()) ?? nil
        return (
            configuration.schemaVersion != 0 ? configuration.schemaVersion : declared?.current ?? 0,
            declared?.first ?? 0
        )
    }
}
