public import Foundation
public import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization
public import TributaryModel

/// The shared, durable, commit-ordered history of a tributaryd cluster: one log of changesets per tenant, in
/// PostgreSQL.
///
/// Appending takes the log's head row lock in the appending transaction, so appenders to one log run one at a time,
/// positions are given in commit order, and a reader never sees a gap. A changeset is known by its origin and origin
/// sequence: appending one that is already in the log stores nothing and returns its position, so a retried upload is
/// stored once. Every commit notifies listeners (``appendNotifications()``), as a wake-up only.
///
/// ```swift
/// let log = try await SharedLog.open(.init(host: "127.0.0.1", port: 5432, username: "tributary",
///                                          password: nil, database: "tributary", log: "chat"))
/// let positions = try await log.append([.init(origin: id, originSequence: 1, body: bytes)])
/// let entries = try await log.entries(after: 0, limit: 1_000)
/// await log.close()
/// ```
///
/// The tables are created, and migrated to this build's version, by ``open(_:logger:)`` (docs/design/Cluster.md).
public final class SharedLog: Sendable {
    /// Where the log is and how to reach it.
    public struct Configuration: Sendable, Hashable {
        /// The PostgreSQL servers that may hold the log, in the order they are tried: one, or a primary and its
        /// standbys. The log is read and written on the first that takes writes (not in recovery); when it stops
        /// answering or becomes read-only, the next operation after a failure looks for the one that takes writes
        /// now (a promoted standby). An operator must make sure the old primary does not take writes again (fence
        /// it) once a standby was promoted.
        public var servers: [Server]
        public var username: String
        public var password: String?
        public var database: String
        /// The log's name: one log per tenant (an app or a database).
        public var log: String
        public var tls: TLSMode
        /// How long one operation (an append, a read) may take before it fails with
        /// ``SharedLogError/Code/timedOut``; connecting counts.
        public var timeout: Duration
        /// The most connections the log holds open to one server.
        public var maximumConnections: Int

        /// A configuration with one server.
        public init(
            host: String, port: Int = 5432, username: String, password: String? = nil, database: String,
            log: String, tls: TLSMode = .disable, timeout: Duration = .seconds(10), maximumConnections: Int = 8
        ) {
            self.init(
                servers: [Server(host: host, port: port)], username: username, password: password,
                database: database, log: log, tls: tls, timeout: timeout, maximumConnections: maximumConnections)
        }

        /// A configuration with several servers (a primary and its standbys), tried in this order.
        public init(
            servers: [Server], username: String, password: String? = nil, database: String, log: String,
            tls: TLSMode = .disable, timeout: Duration = .seconds(10), maximumConnections: Int = 8
        ) {
            self.servers = servers
            self.username = username
            self.password = password
            self.database = database
            self.log = log
            self.tls = tls
            self.timeout = timeout
            self.maximumConnections = maximumConnections
        }

        /// A configuration from a connection URL, `postgres://user[:password]@host[:port][,host[:port]...]/database
        /// [?sslmode=...]`, as libpq writes one: several hosts name a primary and its standbys (see ``servers``).
        /// `sslmode` is `disable`, `prefer` or `require` (`disable` when absent); user, password and database may be
        /// percent-encoded.
        ///
        /// - Throws: ``SharedLogError`` with ``SharedLogError/Code/invalidArgument``, naming what is wrong.
        public init(url text: String, log: String) throws(SharedLogError) {
            let parts = try ConnectionURL(text)
            self.init(
                servers: parts.servers, username: parts.user, password: parts.password, database: parts.database,
                log: log, tls: parts.tls)
        }
    }

    /// One PostgreSQL server: where to connect.
    public struct Server: Sendable, Hashable, CustomStringConvertible {
        public var host: String
        public var port: Int

        public init(host: String, port: Int = 5432) {
            self.host = host
            self.port = port
        }

        /// `host:port`, with an IPv6 host in brackets.
        public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    }

    /// Whether connections to PostgreSQL use TLS.
    public enum TLSMode: String, Sendable, Hashable {
        /// Never.
        case disable
        /// When the server offers it.
        case prefer
        /// Always; a server without TLS is refused. Certificates are checked against the system's trust roots.
        case require
    }

    /// A changeset to append: its identity and its bytes as the replica's log stores them.
    public struct Append: Sendable, Hashable {
        public var origin: ReplicaID
        public var originSequence: UInt64
        public var body: [UInt8]
        /// The writes of the changeset the appending daemon refused, stored with it; `nil` when none were.
        public var refusal: Refusal?

        public init(origin: ReplicaID, originSequence: UInt64, body: [UInt8], refusal: Refusal? = nil) {
            self.origin = origin
            self.originSequence = originSequence
            self.body = body
            self.refusal = refusal
        }
    }

    /// The writes of an app's changeset that the daemon which took the upload refused (a permission rule, or the
    /// session's subscriptions): stored with the changeset, so that every daemon that applies the entry can send the
    /// app the objects' corrections, whichever daemon it syncs with next. A changeset appended again keeps the
    /// refusal of its first append, the judgement its stored body reflects.
    public struct Refusal: Sendable, Hashable {
        /// The app whose session uploaded the changeset.
        public var device: ReplicaID
        /// The objects whose writes were refused, as the daemon encodes them.
        public var objects: [UInt8]

        public init(device: ReplicaID, objects: [UInt8]) {
            self.device = device
            self.objects = objects
        }
    }

    /// A changeset in the log, at its position.
    public struct Entry: Sendable, Hashable {
        /// Its position: 1 for the first, then every next integer, with no gaps.
        public var sequence: UInt64
        public var origin: ReplicaID
        public var originSequence: UInt64
        public var body: [UInt8]
        /// The writes of the changeset the daemon that appended it refused, if any.
        public var refusal: Refusal?
    }

    /// The largest changeset the log takes, as PostgreSQL's `bytea` allows with room to spare.
    public static let maximumBodyBytes = 256 << 20

    /// The configuration the log was opened with.
    public let configuration: Configuration
    /// The log's epoch: made with the log, and changed only when its history is replaced (a restore from a backup).
    /// A position is meaningful only with the epoch it was read under.
    public let epoch: UUID
    /// The epochs the log had before, oldest first: each renewal (``renewEpoch()``,
    /// ``renewEpoch(from:into:)``) retires one.
    public var retiredEpochs: [UUID] { retired.map(\.epoch) }
    /// The epochs the log had before, oldest first, each with how much of it the history that replaced it holds.
    public let retired: [RetiredEpoch]

    /// An epoch a renewal retired.
    public struct RetiredEpoch: Hashable, Sendable {
        /// The retired epoch.
        public var epoch: UUID
        /// How many changesets of the retired epoch's replica id (``SharedLog/replicaID(of:)``) the new history holds:
        /// those of the daemon's replica it started from (``renewEpoch(from:into:)``), 0 when it started from what the
        /// log held (``renewEpoch()``). An app that holds more of them holds changesets the cluster lost: it is reset.
        public var heldThrough: UInt64

        /// An epoch retired with `heldThrough` of its changesets kept.
        public init(epoch: UUID, heldThrough: UInt64) {
            self.epoch = epoch
            self.heldThrough = heldThrough
        }
    }

    /// The replica id every daemon following this log has (docs/design/Cluster.md): the first 8 bytes of the epoch,
    /// so that a log whose history was replaced (a new epoch) makes a new replica, which apps of the old one do not
    /// mistake for it.
    public var replicaID: ReplicaID { Self.replicaID(of: epoch) }

    /// The replica ids of the daemons of ``retiredEpochs``, each with how many of its changesets the current history
    /// holds (``RetiredEpoch/heldThrough``): an app whose version vector counts more of one synced with this cluster
    /// before its history was replaced, holds changesets the cluster lost, and must be reset.
    public var retiredReplicas: [ReplicaID: UInt64] {
        Dictionary(retired.map { (Self.replicaID(of: $0.epoch), $0.heldThrough) }, uniquingKeysWith: min)
    }

    /// The replica id of the daemons of a log of epoch `epoch`.
    public static func replicaID(of epoch: UUID) -> ReplicaID {
        let bytes = withUnsafeBytes(of: epoch.uuid) { Array($0.prefix(8)) }
        let raw = bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return ReplicaID(rawValue: raw == 0 ? 1 : raw)
    }

    /// One client per server of the configuration, in its order; each connects only when used.
    private let clients: [PostgresClient]
    private let runners: [Task<Void, Never>]
    /// The index in ``clients`` of the server that takes writes, as last found.
    private let serving: Atomic<Int>
    /// Whether a search for the server that takes writes is under way: one runs at a time.
    private let searching = Atomic<Bool>(false)
    /// The client of the server that takes writes, as last found.
    var client: PostgresClient { clients[serving.load(ordering: .acquiring)] }
    /// A thread of the log's own for its connections: a daemon's busy event loops do not delay an append.
    private let loop: MultiThreadedEventLoopGroup
    let logger: Logger
    private let closed = Atomic<Bool>(false)

    private init(
        configuration: Configuration, epoch: UUID, retired: [RetiredEpoch], clients: [PostgresClient],
        runners: [Task<Void, Never>], serving: Int, loop: MultiThreadedEventLoopGroup, logger: Logger
    ) {
        self.configuration = configuration
        self.epoch = epoch
        self.retired = retired
        self.clients = clients
        self.runners = runners
        self.serving = Atomic(serving)
        self.loop = loop
        self.logger = logger
    }

    /// Connects, creates or migrates the tables, and creates the log if it does not exist.
    ///
    /// - Throws: ``SharedLogError``: ``SharedLogError/Code/unreachable`` when PostgreSQL cannot be reached,
    ///   ``SharedLogError/Code/rejected`` when it refuses (a password, a missing database, a permission),
    ///   ``SharedLogError/Code/incompatible`` when the tables are of a newer build.
    public static func open(_ configuration: Configuration, logger: Logger = Logger(label: "tributary.cluster"))
        async throws(SharedLogError) -> SharedLog
    {
        guard !configuration.log.isEmpty, configuration.log.utf8.count <= 200 else {
            throw SharedLogError(.invalidArgument, "a log name has 1 to 200 bytes, not \(configuration.log.utf8.count)")
        }
        guard !configuration.servers.isEmpty else {
            throw SharedLogError(.invalidArgument, "the configuration names no PostgreSQL server")
        }
        let tls: PostgresClient.Configuration.TLS
        switch configuration.tls {
        case .disable: tls = .disable
        case .prefer: tls = .prefer(.makeClientConfiguration())
        case .require: tls = .require(.makeClientConfiguration())
        }
        let loop = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let clients = configuration.servers.map { server in
            var options = PostgresClient.Configuration(
                host: server.host, port: server.port, username: configuration.username,
                password: configuration.password, database: configuration.database, tls: tls)
            options.options.connectTimeout = configuration.timeout
            options.options.maximumConnections = configuration.maximumConnections
            options.options.minimumConnections = 0
            return PostgresClient(configuration: options, eventLoopGroup: loop, backgroundLogger: logger)
        }
        let runners = clients.map { client in Task { await client.run() } }
        do {
            let serving =
                clients.count == 1
                ? 0 : try await writableServer(clients, configuration, preferring: 0, logger: logger)
            let client = clients[serving]
            let (epoch, retired) = try await Self.withTimeout(
                configuration.timeout, location(of: configuration.servers[serving])
            ) {
                try await SharedLogSchema.migrate(client, logger: logger)
                return try await SharedLogSchema.createLog(configuration.log, client, logger: logger)
            }
            return SharedLog(
                configuration: configuration, epoch: epoch, retired: retired, clients: clients,
                runners: runners, serving: serving, loop: loop, logger: logger)
        } catch {
            for runner in runners { runner.cancel() }
            for runner in runners { await runner.value }
            try? await loop.shutdownGracefully()
            throw error
        }
    }

    /// The index of the server that takes writes (answers, and is not in recovery): `preferring` when it does, else
    /// the first in the configuration's order. All are asked at once, each within the configuration's timeout.
    ///
    /// - Throws: ``SharedLogError/Code/unreachable`` naming what each server answered, when none takes writes.
    private static func writableServer(
        _ clients: [PostgresClient], _ configuration: Configuration, preferring: Int, logger: Logger
    ) async throws(SharedLogError) -> Int {
        let answers = await withTaskGroup(of: (Int, Result<Bool, SharedLogError>).self) { group in
            for (index, client) in clients.enumerated() {
                let location = location(of: configuration.servers[index])
                group.addTask {
                    do throws(SharedLogError) {
                        let recovering = try await withTimeout(configuration.timeout, location) {
                            var recovering = true
                            let rows = try await client.query("SELECT pg_is_in_recovery()", logger: logger)
                            for try await value in rows.decode(Bool.self) { recovering = value }
                            return recovering
                        }
                        return (index, .success(recovering))
                    } catch {
                        return (index, .failure(error))
                    }
                }
            }
            var answers = [Result<Bool, SharedLogError>?](repeating: nil, count: clients.count)
            for await (index, answer) in group { answers[index] = answer }
            return answers
        }
        if case .success(false) = answers[preferring] { return preferring }
        for (index, answer) in answers.enumerated() {
            if case .success(false) = answer { return index }
        }
        let outcomes = zip(configuration.servers, answers).map { server, answer in
            switch answer {
            case .success: "\(server) is a standby (in recovery)"
            case .failure(let error): "\(server): \(error.message)"
            case nil: "\(server) did not answer"
            }
        }
        throw SharedLogError(
            .unreachable,
            "none of the PostgreSQL servers takes writes (\(outcomes.joined(separator: "; "))): promote a standby, "
                + "or check that the primary runs")
    }

    /// After an operation failed for want of a server (unreachable, timed out, read-only): looks for the server that
    /// takes writes now, and uses it from the next operation on. One search runs at a time; a failure that finds one
    /// under way leaves it to finish.
    private func followWritableServer() async {
        guard clients.count > 1, !searching.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let current = serving.load(ordering: .acquiring)
        if let found = try? await Self.writableServer(clients, configuration, preferring: current, logger: logger),
            found != current
        {
            serving.store(found, ordering: .releasing)
            logger.notice(
                """
                the shared log '\(configuration.log)' is now read and written on PostgreSQL at \
                \(configuration.servers[found]): \(configuration.servers[current]) does not take writes
                """)
        }
        searching.store(false, ordering: .releasing)
    }

    /// Closes the log's connections. Operations after it fail with ``SharedLogError/Code/closed``.
    public func close() async {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for runner in runners { runner.cancel() }
        for runner in runners { await runner.value }
        try? await loop.shutdownGracefully()
    }

    /// How errors name the server the log uses now.
    var location: String { Self.location(of: configuration.servers[serving.load(ordering: .relaxed)]) }

    private static func location(of server: Server) -> String { "PostgreSQL at \(server)" }

    // MARK: Appending

    /// Appends changesets in one transaction, in the order given, and returns the position of each: a new one for a
    /// changeset not yet in the log, its existing one for a changeset that is (the same origin and origin sequence).
    ///
    /// When this returns, PostgreSQL has committed the changesets (and, with synchronous replication, its standby
    /// has them): a daemon may acknowledge the upload.
    ///
    /// - Throws: ``SharedLogError``. After ``SharedLogError/Code/timedOut`` or ``SharedLogError/Code/unreachable``
    ///   the append may or may not have committed; appending the same changesets again is safe.
    public func append(_ changesets: [Append]) async throws(SharedLogError) -> [UInt64] {
        guard !changesets.isEmpty else { return [] }
        for changeset in changesets where changeset.body.count > Self.maximumBodyBytes {
            throw SharedLogError(
                .invalidArgument,
                "changeset \(changeset.origin):\(changeset.originSequence) has \(changeset.body.count) bytes, "
                    + "more than the shared log's \(Self.maximumBodyBytes)")
        }
        let name = configuration.log
        let client = client
        let logger = logger
        let origins = changesets.map { Int64(bitPattern: $0.origin.rawValue) }
        let sequences = changesets.map { Int64(bitPattern: $0.originSequence) }
        let bodies = changesets.map { ByteBuffer(bytes: $0.body) }
        // No refusal: device 0 and no bytes (PostgreSQL's arrays of parameters hold no nulls here).
        let refusedBy = changesets.map { Int64(bitPattern: $0.refusal?.device.rawValue ?? 0) }
        let refused = changesets.map { ByteBuffer(bytes: $0.refusal?.objects ?? []) }
        let epoch = epoch
        return try await operation {
            // One statement, one transaction (tributary_append, in SharedLogSchema): it takes the log's head row
            // lock, so appenders to this log wait for each other and positions follow commit order; it stores each
            // changeset not yet in the log, raises the head and announces it.
            var positions: [Int64]?
            let rows = try await client.query(
                """
                SELECT tributary_append(\(name), \(epoch), \(origins)::bigint[], \(sequences)::bigint[], \
                \(bodies)::bytea[], \(refusedBy)::bigint[], \(refused)::bytea[])
                """, logger: logger)
            for try await value in rows.decode([Int64].self) { positions = value }
            guard let positions, positions.count == changesets.count, positions.allSatisfy({ $0 > 0 }) else {
                throw SharedLogError(
                    .incompatible,
                    "appending \(changesets.count) changesets to the log '\(name)' returned the positions "
                        + "\(positions.map { "\($0)" } ?? "none"): the log's tables are damaged")
            }
            // The append returned: it is on the standby (with synchronous replication). Followers may now apply it.
            // The mark need not wait for the standby itself: a mark lost in a failover only holds followers back
            // until the next append raises it past it.
            let highest = positions.max() ?? 0
            // One statement, one implicit transaction: the setting applies to its own commit.
            try await client.query(
                """
                WITH local AS (SELECT set_config('synchronous_commit', 'local', true)),
                marked AS (
                    UPDATE tributary_logs SET durable_head = greatest(durable_head, \(highest))
                    WHERE log = \(name) RETURNING durable_head)
                SELECT pg_notify('tributary_appended', \(name) || ':' || durable_head) FROM marked, local
                """, logger: logger)
            return positions.map { UInt64($0) }
        }
    }

    // MARK: Reading

    /// The log's head: the position of its last changeset, 0 when it has none.
    public func head() async throws(SharedLogError) -> UInt64 {
        let name = configuration.log
        let client = client
        let logger = logger
        return try await operation {
            var head: Int64 = 0
            let rows = try await client.query("SELECT head FROM tributary_logs WHERE log = \(name)", logger: logger)
            for try await value in rows.decode(Int64.self) { head = value }
            return UInt64(head)
        }
    }

    /// The changesets after position `sequence`, in order, at most `limit` of them.
    ///
    /// - Throws: ``SharedLogError``: ``SharedLogError/Code/compacted`` when a compaction dropped entries after
    ///   `sequence`; ``SharedLogError/Code/incompatible`` when the log's epoch is no longer the one it was opened
    ///   under (it was renewed: positions read before mean nothing now).
    public func entries(after sequence: UInt64, limit: Int) async throws(SharedLogError) -> [Entry] {
        guard limit > 0, sequence <= UInt64(Int64.max) else {
            throw SharedLogError(.invalidArgument, "entries(after: \(sequence), limit: \(limit)) is out of range")
        }
        let name = configuration.log
        let client = client
        let logger = logger
        let (epoch, compacted, entries) = try await operation {
            // The log's row comes with the entries, in one statement: its epoch and compaction say whether the
            // entries continue what the reader read before.
            let rows = try await client.query(
                """
                SELECT l.epoch, l.compacted_through, c.seq, c.origin, c.origin_sequence, c.body, c.refused_by,
                    c.refused
                FROM tributary_logs l LEFT JOIN LATERAL (
                    SELECT seq, origin, origin_sequence, body, refused_by, refused FROM tributary_changesets
                    WHERE log = l.log AND seq > \(Int64(sequence)) AND seq <= l.durable_head
                    ORDER BY seq LIMIT \(Int64(limit))) c ON true
                WHERE l.log = \(name)
                """, logger: logger)
            var epoch: UUID?
            var compacted: Int64 = 0
            var entries: [Entry] = []
            for try await (logEpoch, compactedThrough, position, origin, originSequence, body, refusedBy, refused)
                in rows.decode((UUID, Int64, Int64?, Int64?, Int64?, ByteBuffer?, Int64?, ByteBuffer?).self)
            {
                epoch = logEpoch
                compacted = compactedThrough
                guard let position, let origin, let originSequence, let body else { continue }
                var refusal: Refusal?
                if let refusedBy, refusedBy != 0, let refused, refused.readableBytes > 0 {
                    refusal = Refusal(
                        device: ReplicaID(rawValue: UInt64(bitPattern: refusedBy)), objects: Array(buffer: refused))
                }
                entries.append(
                    Entry(
                        sequence: UInt64(position), origin: ReplicaID(rawValue: UInt64(bitPattern: origin)),
                        originSequence: UInt64(bitPattern: originSequence), body: Array(buffer: body),
                        refusal: refusal))
            }
            return (epoch, UInt64(max(0, compacted)), entries)
        }
        guard let epoch else {
            throw SharedLogError(.incompatible, "the shared log '\(name)' is gone from \(location)")
        }
        guard epoch == self.epoch else {
            throw SharedLogError(
                .incompatible,
                "the shared log '\(name)' was given a new epoch (\(epoch), was \(self.epoch)): its history was "
                    + "replaced after a restore or a failover that lost commits. Daemons start again on empty "
                    + "directories, and apps that synced before are reset")
        }
        if sequence < compacted {
            throw SharedLogError(
                .compacted,
                "the shared log '\(name)' was compacted through position \(compacted): the entries after \(sequence) "
                    + "are gone from it. Start this daemon from a copy of another daemon's replica "
                    + "(docs/Operating.md, \"Adding a daemon\")")
        }
        return entries
    }

    /// 0 once listening (so that a reader may read without missing a later append), then the heads announced by
    /// every append to this log, from any process, as they commit; a wake-up only: a
    /// follower reads ``entries(after:limit:)`` when one arrives and also on a timer, since announcements made while
    /// the listening connection reconnects are lost. The sequence ends when the task iterating it is cancelled, and
    /// throws when the connection breaks.
    public func appendNotifications() -> AsyncThrowingStream<UInt64, any Error> {
        let (stream, continuation) = AsyncThrowingStream<UInt64, any Error>.makeStream()
        let client = client
        let prefix = configuration.log + ":"
        let task = Task {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: SharedLogSchema.channel) { notifications in
                        continuation.yield(0)  // listening: a reader may now read without missing a later append
                        for try await notification in notifications where notification.payload.hasPrefix(prefix) {
                            if let head = UInt64(notification.payload.dropFirst(prefix.count)) {
                                continuation.yield(head)
                            }
                        }
                    }
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: Self.classify(error, location: "PostgreSQL"))
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    // MARK: Errors and timeouts

    func operation<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result)
        async throws(SharedLogError) -> Result
    {
        guard !closed.load(ordering: .acquiring) else {
            throw SharedLogError(.closed, "the shared log '\(configuration.log)' was closed")
        }
        do {
            return try await Self.withTimeout(configuration.timeout, location, body)
        } catch {
            if [.unreachable, .timedOut].contains(error.code) { await followWritableServer() }
            throw error
        }
    }

    private struct TimedOut: Error {}

    /// Resumes a continuation once, whichever of the operation, its timer or a cancellation comes first.
    private final class FirstOutcome<Value: Sendable>: Sendable {
        private let state: Mutex<CheckedContinuation<Value, any Error>?>

        init(_ continuation: CheckedContinuation<Value, any Error>) { state = Mutex(continuation) }

        /// Resumes with `outcome` unless something did before; whether this call did.
        @discardableResult
        func resume(_ outcome: Swift.Result<Value, any Error>) -> Bool {
            guard
                let continuation = state.withLock({ state in
                    defer { state = nil }
                    return state
                })
            else {
                return false
            }
            continuation.resume(with: outcome)
            return true
        }
    }

    /// Runs `body`, failing with ``SharedLogError/Code/timedOut`` after `timeout`. The wait really ends then: a
    /// query PostgreSQL does not answer (a commit waiting for a synchronous standby that is gone) cannot be
    /// cancelled, so it is left to finish on its own instead of being waited for, as a task group would.
    private static func withTimeout<Result: Sendable>(
        _ timeout: Duration, _ location: String, _ body: @escaping @Sendable () async throws -> Result
    ) async throws(SharedLogError) -> Result {
        let tasks = Mutex<[Task<Void, Never>]>([])
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Result, any Error>) in
                    let outcome = FirstOutcome(continuation)
                    let work = Task {
                        do {
                            outcome.resume(.success(try await body()))
                        } catch {
                            outcome.resume(.failure(error))
                        }
                    }
                    let timer = Task {
                        do {
                            try await Task.sleep(for: timeout)
                        } catch {
                            // Cancelled: the caller was.
                            if outcome.resume(.failure(CancellationError())) { work.cancel() }
                            return
                        }
                        if outcome.resume(.failure(TimedOut())) { work.cancel() }
                    }
                    tasks.withLock { $0 = [work, timer] }
                }
            } onCancel: {
                for task in tasks.withLock({ $0 }) { task.cancel() }
            }
        } catch is TimedOut {
            throw SharedLogError(
                .timedOut, "\(location) did not answer within \(timeout); check that it runs and is reachable")
        } catch {
            throw classify(error, location: location)
        }
    }

    static func classify(_ error: any Error, location: String) -> SharedLogError {
        if let error = error as? SharedLogError { return error }
        if let transaction = error as? PostgresTransactionError {
            // What failed first says why: the statements, or BEGIN, or COMMIT (after which the outcome is unknown).
            if let cause = transaction.closureError ?? transaction.beginError ?? transaction.commitError
                ?? transaction.rollbackError
            {
                return classify(cause, location: location)
            }
        }
        if error is CancellationError {
            return SharedLogError(
                .cancelled, "the operation on \(location) was cancelled; an append may or may not have committed")
        }
        guard let error = error as? PSQLError else {
            return SharedLogError(.unreachable, "\(location) failed: \(error)")
        }
        if let info = error.serverInfo {
            let state = info[.sqlState] ?? "?"
            let message = info[.message] ?? "no message"
            if state == "25006" {  // read_only_sql_transaction: a standby, or a primary demoted to one
                return SharedLogError(
                    .unreachable,
                    "\(location) is read-only (a standby) and cannot take the log's writes: promote it, or name the "
                        + "primary in the configuration; retry later")
            }
            if state == SharedLogSchema.retiredEpochState {
                return SharedLogError(
                    .incompatible,
                    "\(message): the log was given a new epoch after it lost commits. This daemon's replica follows "
                        + "the retired one: start it again on an empty directory (or, when the new epoch started from "
                        + "a daemon's replica, on a copy of that replica)")
            }
            let detail = info[.detail].map { " (\($0))" } ?? ""
            return SharedLogError(.rejected, "\(location) refused: \(message)\(detail) [SQLSTATE \(state)]")
        }
        switch error.code {
        case .connectionError, .serverClosedConnection, .uncleanShutdown, .poolClosed, .clientClosedConnection:
            let cause = error.underlying.map { ": \($0)" } ?? ""
            return SharedLogError(
                .unreachable, "\(location) is unreachable\(cause); check that it runs and that the address is right")
        case .sslUnsupported:
            return SharedLogError(.rejected, "\(location) does not offer TLS, and the configuration requires it")
        case .authMechanismRequiresPassword:
            return SharedLogError(.rejected, "\(location) asks for a password, and the configuration gives none")
        default:
            return SharedLogError(.rejected, "\(location) failed: \(String(reflecting: error))")
        }
    }
}
