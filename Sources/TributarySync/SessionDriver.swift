import Foundation
package import Tributary
import TributaryLog
import TributaryMerge
package import TributaryModel
package import TributaryProtocol

/// What a session reports as it goes, to whoever runs it (a ``SyncSession``, or the daemon's session table).
package enum SessionEvent: Sendable {
    /// The handshake is done: the other side is `replica`.
    case established(replica: ReplicaID, role: SyncRole)
    /// The other side holds this replica's own changesets up to this sequence, durably.
    case uploaded(through: UInt64)
    /// The other side acknowledged this replica's own changesets up to this sequence (and sent every compensating
    /// write for them before).
    case acknowledged(through: UInt64)
    /// A batch was integrated: how many changesets it held, and whether the other side has more now.
    case downloaded(changesets: Int, more: Bool)
    /// A bootstrap of a subscription set is being received: objects so far, of how many.
    case bootstrapping(received: UInt64, total: UInt64)
    /// Changesets the other side refused (a schema conflict).
    case rejected([Acknowledgement.Rejection])
    /// The daemon took this app's upload without refusing any of it, or the app had nothing to upload when the
    /// session opened: the evidence that a client reset helped.
    case accepted
    /// The session ended; `nil` when it was closed on this side's request or the connection simply dropped.
    case ended(SyncError?)
}

/// Counts what sessions move, for a daemon's metrics. Called from the sessions' actors: cheap and non-blocking.
package protocol SessionMeter: Sendable {
    /// A message of `bytes` arrived.
    func received(bytes: Int)
    /// A message of `bytes` was written to the connection.
    func sent(bytes: Int)
    /// A batch of `changesets` arrived (before integration: some may be held already).
    func received(changesets: Int)
    /// A batch of `changesets` was sent.
    func sent(changesets: Int)
    /// The other side, `replica`, holds at least `vector`: what its `hello` (or `welcome`) said, then each of its
    /// acknowledgements. A daemon's retention counts it.
    func holds(_ vector: VersionVector, replica: ReplicaID)
    /// A session with `replica` opened (`true`, after the handshake) or ended (`false`), whichever side dialled: a
    /// daemon's retention counts a connected replica as seen now.
    func session(with replica: ReplicaID, open: Bool)
}

extension SessionMeter {
    package func holds(_ vector: VersionVector, replica: ReplicaID) {}
    package func session(with replica: ReplicaID, open: Bool) {}
}

/// How far a session is from having nothing left to exchange, as far as this side can tell.
package struct SessionStanding: Sendable, Hashable {
    /// Changesets the other side is known to hold (from its handshake and acknowledgements) that this replica has
    /// not integrated. A lower bound: what the other side received since it last said is not counted.
    package var behind: UInt64
    /// Whether the last batch received said the other side had more to send.
    package var receivingMore: Bool
    /// Whether this side's last look at its log found nothing the other side lacks.
    package var nothingToSend: Bool
    /// When this side last saw the session with nothing to send and nothing known to receive.
    package var lastCaughtUp: ContinuousClock.Instant?

    /// Nothing to send, nothing known to receive.
    package var isCaughtUp: Bool { behind == 0 && !receivingMore && nothingToSend }
}

/// Runs one session of the sync protocol on a replica, over a connection: the handshake, the changesets each side
/// lacks (in batches that respect the other side's window), acknowledgements after durable commits, marks and
/// keepalive. The protocol's rules are the ``SessionStateMachine``'s; this actor does what it says.
///
/// The transport reads messages and hands each to ``receive(_:)``, in order, one at a time: a batch is integrated
/// before the next message is read, so the connection's own flow control holds back a sender that outpaces the
/// disk.
package actor SessionDriver {
    /// How the other side is authenticated: `nil` accepts the session; an error refuses it.
    package typealias Authenticator = @Sendable (Hello) async -> SyncError?

    package struct Options: Sendable {
        /// The receive window this side announces.
        package var window: UInt64 = SyncProtocol.defaultWindow
        /// The keepalive interval an acceptor announces.
        package var keepaliveSeconds: UInt64 = SyncProtocol.defaultKeepaliveSeconds
        /// The most changesets per batch sent.
        package var batchChangesets = 1_000
        /// About the most bytes per batch sent.
        package var batchBytes = 1 << 20
        /// How often keepalive (and the token's expiry) is checked.
        package var tickInterval: Duration = .seconds(1)
        /// For an acceptor serving a flexible-sync app: how long commits that concern none of its subscriptions (which
        /// do not wake the session) may wait before the session sends them, as skeletons that advance the device's
        /// progress.
        package var idleCatchUp: Duration = .seconds(5)
        /// For an acceptor: the app's roles under the daemon's permission rules, or `nil` when there are none. With
        /// them, what the app holds is limited to what it may read, every write it uploads is checked against its
        /// role, and an app that does not sync by subscriptions is refused. Peers are not subject to them.
        package var permissions: SessionPermissions?
        /// For an acceptor: the author every changeset received must name (the user an app's token names).
        package var requiredAuthor: String?
        /// For an acceptor: when the other side's token expires; the session then ends with
        /// ``SyncError/Code/tokenExpired``.
        package var tokenExpiry: ContinuousClock.Instant?
        /// For an acceptor: takes a batch of `bytes` uploaded by the app `replica` from its user's allowance, or says
        /// how long until the allowance covers it (the batch is then refused with ``SyncError/Code/rateLimited``).
        /// Applies to apps' uploads only.
        package var uploadAllowance: (@Sendable (_ bytes: Int, _ replica: ReplicaID) -> Duration?)?
        /// Counts the traffic, when set.
        package var meter: (any SessionMeter)?
        /// For an acceptor: the properties flexible-sync subscriptions may query, by type (the primary key always);
        /// `nil` lets them query every property.
        package var queryableFields: [String: Set<String>]?
        /// About the most bytes of object states per `objects` message sent.
        package var objectStatesBytes = 1 << 20
        /// For an app's initiator: whether its `hello` said it syncs by subscriptions.
        package var flexible = false
        /// For a flexible-sync initiator: its own sequence through which an earlier session of this process received
        /// every acknowledgement (0: unknown).
        package var acknowledgedThrough: UInt64 = 0
        /// Whether an initiator sends its changesets; a client reset downloads the daemon's state into a new replica
        /// without uploading that replica's declaration, which the daemon may refuse as it refused the old one's.
        package var uploads = true
        package init() {}
    }

    private let replica: Replica
    private var machine: SessionStateMachine
    private let writer: any MessageWriter
    private let integrator: any BatchIntegrator
    private let authenticate: Authenticator?
    private let options: Options
    private let onEvent: @Sendable (SessionEvent) -> Void

    /// What the other side holds, as far as this side knows: its vector, what it acknowledged, what it sent, and
    /// what this side sent it (the progress of the last batch).
    private var theirs = VersionVector()
    /// The changesets waiting in the other side's pending area when the session opened.
    private var theirPending: Set<Dot> = []
    /// For an app's upload: only its own changesets.
    private var exportOrigins: Set<ReplicaID>?
    /// Whether batches received are adopted (an app's upload at its daemon).
    private var adoptIncoming = false
    /// Batches sent and not acknowledged, with this replica's own sequence each ends at.
    private var sentOwnSequence: [(batch: UInt64, ownSequence: UInt64)] = []
    /// Marks the other side asked for, with this replica's vector when each arrived.
    private var marksToReply: [(request: UInt64, held: VersionVector)] = []
    private var markWaiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]
    private var wake: AsyncStream<Void>.Continuation?
    private var tasks: [Task<Void, Never>] = []
    /// Wakes the pump after each commit on the replica, while the session is open.
    private var commitHandler: UInt64?
    private var ended = false
    /// Whether the last batch received said the other side had more.
    private var receivingMore = false
    /// Whether the pump's last look at the log found nothing to send.
    private var nothingToSend = false
    /// When the session was last seen with nothing to send and nothing known to receive.
    private var lastCaughtUp: ContinuousClock.Instant?
    /// Whether a write failed: the connection is closing, and the session ends once the transport has handed over
    /// what it read before the close (see ``write(_:)``).
    private var writeFailed = false
    /// The role this side said in `hello`, for an initiator.
    private let helloRole: SyncRole?
    /// The size of the message being handled.
    private var receivedBytes = 0
    /// For an acceptor: the replica on the other side, once its `hello` is accepted.
    private var otherReplica: ReplicaID?
    /// For an acceptor serving a flexible-sync app: what the app holds. Nothing is sent until its first `query`.
    private var flexibleView: FlexibleSessionView?
    /// For an acceptor: whether the flexible-sync app's first `query` arrived.
    private var flexibleReady = false
    /// For an acceptor serving a flexible-sync app: when the session last caught up on commits that did not wake it.
    private var lastCatchUp = ContinuousClock.now
    /// For an acceptor: the newest set the app sent and the daemon took, which judges the uploads that follow it.
    private var judgingSubscriptions: [Subscription] = []
    /// For an acceptor serving an app under permission rules: its roles.
    private var permissions: SessionPermissions?
    /// For an acceptor: the rules changed; what the app holds is decided again under its new roles.
    private var permissionsChanged = false
    /// For an acceptor: the subscription set the app asked for, to bootstrap before anything else is sent.
    private var wantedQuery: QueryRequest?
    /// For an acceptor: the sets the app asked for that a newer one replaced before they were bootstrapped. The app
    /// may hold objects they cover (those it wrote under them): the next bootstrap removes those the new set does not
    /// cover.
    private var skippedSubscriptions: [Subscription] = []
    /// For an acceptor: the app's own sequence after which its refused writes' compensations are sent again, once
    /// its first set is in place.
    private var resendRefusalsAfter: UInt64?
    /// For an app's initiator: whether the session opened as a flexible-sync session.
    private var flexibleSession = false
    /// For a flexible-sync initiator: the newest set version sent to the daemon.
    private var sentQueryVersion: UInt64 = 0
    /// For an initiator: how far the other side holds this replica's own changesets, durably.
    private var uploadedThrough: UInt64 = 0
    /// For a flexible-sync initiator: a new set waits until what was written before it is uploaded.
    private var queryWaitsForUpload = false
    /// For a flexible-sync initiator: while a new set waits, the upload stops at the last changeset written before it.
    private var uploadCap: UInt64?
    /// For a flexible-sync initiator: the object states of a bootstrap being received (its set version, and each
    /// message's states), and those that arrived meanwhile, applied in order when it completes.
    private var staged: (version: UInt64, groups: [(objects: [ReceivedObjectState], yours: UInt64)])?

    /// For an acceptor serving a flexible-sync app: what an upload leaves for the pump to send, in order: the
    /// compensating writes of the writes it refused (read when they are sent), and the acknowledgements that must not
    /// reach the app before them (see ``flushOutbox()``).
    private var outbox: [Outgoing] = []

    private enum Outgoing {
        case compensate([(type: String, primaryKey: PrimaryKey, refused: [Dot])])
        case frame([UInt8])
    }

    /// The other side, from the handshake until the session ends: the meter hears of it opening and closing, and of
    /// what it holds.
    private var meteredSide: ReplicaID?
    /// For an acceptor: a base state to send before anything else (with its records, or without them for a
    /// flexible-sync app).
    private var pendingBase: Bool?
    /// For an initiator: whether a batch of changesets arrived, or a base was taken (a base comes first, once).
    private var receivedChangesets = false
    private var tookBase = false
    /// For an initiator receiving a base state: the parts kept so far, their records, and the schema part 1 carried.
    private var receivedBaseParts: UInt64 = 0
    private var receivedBaseRecords: UInt64 = 0
    private var baseSchema: Schema?
    private var baseHeld = VersionVector()

    package init(
        replica: Replica, machine: SessionStateMachine, role: SyncRole? = nil, writer: any MessageWriter,
        integrator: any BatchIntegrator, authenticate: Authenticator? = nil, options: Options = Options(),
        onEvent: @escaping @Sendable (SessionEvent) -> Void = { _ in }
    ) {
        self.replica = replica
        self.machine = machine
        self.writer = writer
        self.integrator = integrator
        self.authenticate = authenticate
        self.options = options
        self.onEvent = onEvent
        self.helloRole = role
    }

    /// Starts the session: an initiator says `hello`; both start the keepalive.
    package func start() async {
        let ticks = options.tickInterval
        tasks.append(
            Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: ticks)
                    guard let self, await self.tick() else { return }
                }
            })
        if let frame = machine.start(now: .now) { await write(frame) }
    }

    /// Handles one message received. Returns `false` once the session has ended: the transport stops reading and
    /// closes.
    package func receive(_ frame: [UInt8]) async -> Bool {
        guard !ended else { return false }
        options.meter?.received(bytes: frame.count)
        receivedBytes = frame.count
        return await perform(machine.received(frame, now: .now))
    }

    /// The connection closed or failed under the session.
    package func connectionClosed(_ error: SyncError? = nil) async {
        await end(error, closeConnection: false)
    }

    /// Ends the session on this side's account, telling the other side why.
    package func close(_ error: SyncError) async {
        guard !ended else { return }
        if let frame = machine.close(error) { await write(frame) }
        await end(nil, closeConnection: true)
    }

    /// Sends a mark and waits for the other side's reply: once it returns, every changeset the other side held
    /// when the mark arrived has been integrated here.
    package func mark() async throws {
        guard let (request, frame) = machine.requestMark(now: .now) else {
            throw SyncError(.unavailable, .retry, "the session is not open")
        }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            markWaiters[request] = continuation
            Task { await self.write(frame) }
        }
    }

    /// How far the session is from having nothing left to exchange.
    package func standing() -> SessionStanding {
        let held = replica.versionVector
        var behind: UInt64 = 0
        for entry in theirs.entries where entry.sequence > held[entry.replica] {
            behind &+= entry.sequence - held[entry.replica]
        }
        var standing = SessionStanding(
            behind: behind, receivingMore: receivingMore, nothingToSend: nothingToSend, lastCaughtUp: lastCaughtUp)
        if !ended && standing.isCaughtUp {
            lastCaughtUp = .now
            standing.lastCaughtUp = lastCaughtUp
        }
        return standing
    }

    // MARK: Reactions

    private func perform(_ action: SessionStateMachine.Action) async -> Bool {
        switch action {
        case .none:
            return true
        case .send(let frame):
            await write(frame)
            return true
        case .authenticate(let hello):
            return await authenticateAndWelcome(hello)
        case .established(let welcome):
            theirs = welcome.vector
            theirPending = Set(welcome.pending)
            if case .app = helloRole {
                // The daemon's vector does not count an app: `yours` says how far it holds this app's own.
                theirs.advance(replica.replicaID, to: welcome.yours)
                uploadedThrough = welcome.yours
                exportOrigins = [replica.replicaID]
                onEvent(.uploaded(through: welcome.yours))
            }
            onEvent(.established(replica: welcome.replica, role: helloRole ?? .peer))
            options.meter?.holds(welcome.vector, replica: welcome.replica)
            options.meter?.session(with: welcome.replica, open: true)
            meteredSide = welcome.replica
            if case .app = helloRole, welcome.yours >= replica.versionVector[replica.replicaID] {
                onEvent(.accepted)
            }
            if case .app = helloRole {
                // What the hello said, not what the replica is now: a first set committed meanwhile needs a session
                // that opens as a flexible one.
                flexibleSession = options.flexible
                if flexibleSession { await openQuery() }
                watchSubscriptions()
                if !flexibleSession, (try? replica.flexibleSyncQuery()) ?? nil != nil {
                    _ = await sendQueryIfOpen()
                    return false
                }
            }
            startPump()
            return true
        case .integrate(let batch):
            receivedChangesets = true
            options.meter?.received(changesets: batch.changesets.count)
            if adoptIncoming, let otherReplica, let wait = options.uploadAllowance?(receivedBytes, otherReplica) {
                let seconds = UInt64(max(1, wait.components.seconds + (wait.components.attoseconds > 0 ? 1 : 0)))
                await fail(
                    SyncError(
                        .rateLimited, .retry,
                        "batch \(batch.number) (\(receivedBytes) bytes) is over this user's upload allowance: it was "
                            + "not taken; send it again in \(seconds) s", retryAfterSeconds: seconds))
                return false
            }
            receivingMore = batch.more
            var report: IntegrationReport
            var incoming = batch.changesets
            var compensated: [(dot: Dot, reason: String)] = []
            var compensate: [(type: String, primaryKey: PrimaryKey, refused: [Dot])] = []
            do {
                if flexibleView != nil {
                    (incoming, compensated, compensate) = try replica.judgeUpload(
                        incoming, under: readable(judgingSubscriptions), judging: flexibleReady,
                        permissions: permissions)
                }
                // The refusals are stored with the reduced changesets, for a connection that drops (or a daemon that
                // stops) before the compensating writes are sent.
                let refusals = otherReplica.map { RefusalRecord.records(of: $0, compensate) } ?? []
                report = try await integrator.integrate(
                    incoming, adopt: adoptIncoming, author: options.requiredAuthor, refusals: refusals)
            } catch let error as TributaryError where error.code == .permissionDenied {
                await fail(SyncError(.forbidden, .fatal, "batch \(batch.number): \(error.message)"))
                return false
            } catch let error as TributaryError {
                let failure =
                    error.code == .invalidChangeset || error.code == .transactionTooLarge
                    ? SyncError(.badChangeset, .fatal, "batch \(batch.number): \(error.message)")
                    : SyncError(
                        .storage, .retry, "batch \(batch.number) could not be stored: \(error.message)",
                        retryAfterSeconds: 5)
                await fail(failure)
                return false
            } catch {
                await fail(
                    SyncError(
                        .storage, .retry, "batch \(batch.number) could not be stored: \(error)", retryAfterSeconds: 5))
                return false
            }
            for dot in report.received { theirs.advance(dot.origin, to: dot.sequence) }
            if flexibleView != nil, let device = otherReplica, !report.received.isEmpty {
                // The corrections sent are those of the refusals stored with these changesets, the judgement the
                // replica kept: this session's (stored in the upload's commit) or, in a cluster, that of another
                // daemon that took the changeset first (the app uploaded it again).
                do {
                    compensate = try replica.refusals(of: device, changesets: report.received)
                } catch {
                    await fail(
                        SyncError(
                            .storage, .retry, "could not read the writes refused: \(error)", retryAfterSeconds: 5))
                    return false
                }
            }
            // Compensating writes go before the acknowledgement: a device that has the acknowledgement has the
            // daemon's state of every object whose write was refused (and one that lost both uploads again).
            if !compensate.isEmpty, flexibleView != nil, otherReplica != nil {
                outbox.append(.compensate(compensate))
            }
            report.rejected += compensated.map { IntegrationReport.Rejection(dot: $0.dot, reason: $0.reason) }
            let rejected = report.rejected.prefix(MessageLimits.standard.maximumRejections).map {
                Acknowledgement.Rejection(dot: $0.dot, reason: String($0.reason.utf8.prefix(4000)) ?? "refused")
            }
            let ack = Acknowledgement(batch: batch.number, checkpoint: replica.versionVector, rejected: Array(rejected))
            if let frame = machine.acknowledge(ack, now: .now) {
                if outbox.isEmpty {
                    await write(frame)
                } else {
                    // After the compensating writes the pump sends.
                    outbox.append(.frame(frame))
                }
            }
            if !outbox.isEmpty { wake?.yield() }
            onEvent(.downloaded(changesets: batch.changesets.count, more: batch.more))
            return true
        case .acknowledged(let ack):
            theirs.formUnion(ack.checkpoint)
            if let meteredSide { options.meter?.holds(ack.checkpoint, replica: meteredSide) }
            var through: UInt64?
            while let first = sentOwnSequence.first, first.batch <= ack.batch {
                through = first.ownSequence
                sentOwnSequence.removeFirst()
            }
            if let through {
                uploadedThrough = max(uploadedThrough, through)
                onEvent(.uploaded(through: through))
                onEvent(.acknowledged(through: through))
            }
            if !ack.rejected.isEmpty { onEvent(.rejected(ack.rejected)) }
            if case .app = helloRole, ack.rejected.isEmpty, through != nil { onEvent(.accepted) }
            if case .app = helloRole, !flexibleSession, let refused = ack.rejected.first {
                // This replica applied the changeset when it wrote it, and the daemon never will: the two can no
                // longer agree (a flexible-sync app's refused writes are undone by the daemon instead).
                await fail(
                    SyncError(
                        .resetRequired, .reset,
                        "the daemon refused this replica's changeset \(refused.dot) (\(refused.reason)); the replica "
                            + "holds it, so its state can no longer match the daemon's: it must be reset (its other "
                            + "unsynced changes can be recovered)"))
                return false
            }
            if queryWaitsForUpload { await sendQuery() }
            wake?.yield()
            return true
        case .markRequested(let request):
            marksToReply.append((request, replica.versionVector))
            wake?.yield()
            return true
        case .markReplied(let request):
            markWaiters.removeValue(forKey: request)?.resume()
            return true
        case .query(let query):
            return await takeQuery(query)
        case .objects(let states):
            return await receiveObjects(states)
        case .queryState(let state):
            return await receiveQueryState(state)
        case .base(let part):
            return await receiveBase(part)
        case .closeSending(let error):
            await write(MessageCodec.encode(.error(error)))
            await end(error, closeConnection: true)
            return false
        case .closed(let error):
            await end(error, closeConnection: true)
            return false
        }
    }

    private func authenticateAndWelcome(_ hello: Hello) async -> Bool {
        var refusal = await authenticate?(hello)
        if refusal == nil, options.permissions != nil, hello.role == .app, !hello.flexible {
            refusal = SyncError(
                .forbidden, .fatal,
                "this daemon enforces permission rules: apps sync by subscriptions (flexible sync); commit a "
                    + "subscription set before connecting")
        }
        if let refusal {
            if let frame = machine.refuse(refusal) { await write(frame) }
            await end(refusal, closeConnection: true)
            return false
        }
        let welcome: Welcome
        var startsFromBase = false
        do {
            let replica = replica
            if let divergence = try await offload({ try Self.divergence(of: hello, from: replica) }) {
                await fail(divergence)
                return false
            }
            switch try await offload({ try Self.compactionVerdict(of: hello, from: replica) }) {
            case .none: break
            case .startFromBase: startsFromBase = true
            case .reset(let error):
                await fail(error)
                return false
            }
            // Reported before `welcome`: a compaction that commits from now on counts this replica.
            options.meter?.holds(hello.vector, replica: hello.replica)
            welcome = try await offload {
                Welcome(
                    version: 0, replica: replica.replicaID, vector: replica.versionVector,
                    pending: Array(try replica.pendingDots()).sorted().prefix(MessageLimits.standard.maximumDots).map {
                        $0
                    },
                    yours: try replica.heldSequence(of: hello.replica))
            }
        } catch {
            await fail(
                SyncError(.storage, .retry, "the daemon could not read its replica: \(error)", retryAfterSeconds: 5))
            return false
        }
        var announced = welcome
        announced.window = options.window
        announced.keepaliveSeconds = options.keepaliveSeconds
        guard let frame = machine.accept(announced, now: .now) else { return false }
        await write(frame)
        theirs = hello.vector
        theirPending = Set(hello.pending)
        adoptIncoming = hello.role == .app
        otherReplica = hello.replica
        if hello.flexible && hello.role == .app { flexibleView = FlexibleSessionView() }
        if hello.role == .app { permissions = options.permissions }
        onEvent(.established(replica: hello.replica, role: hello.role))
        options.meter?.session(with: hello.replica, open: true)
        meteredSide = hello.replica
        // The pump sends it first, while this actor goes on taking the other side's messages.
        if startsFromBase { pendingBase = !(hello.flexible && hello.role == .app) }
        startPump()
        return true
    }

    // MARK: Base state

    /// What a compacted daemon does with a replica that says `hello`.
    enum CompactionVerdict {
        /// Nothing: the log was not compacted, or the replica holds what the base holds.
        case none
        /// The replica holds nothing of other replicas, and the base none of its own changesets: it starts from the
        /// base.
        case startFromBase
        /// The replica lacks changesets that only the base holds, and holds others: it must be reset.
        case reset(SyncError)
    }

    static func compactionVerdict(of hello: Hello, from replica: Replica) throws -> CompactionVerdict {
        guard let compaction = try replica.logCompaction(), !hello.vector.includes(compaction.vector) else {
            return .none
        }
        // An app that holds nothing of others, none of whose changesets the base holds; or a replica that holds
        // nothing at all (a new peer daemon). A daemon's own-only vector is no such evidence: it counts the app
        // changesets it adopted under its own id.
        let ownOnly = hello.vector.entries.allSatisfy { $0.replica == hello.replica }
        if hello.vector.entries.isEmpty || (hello.role == .app && ownOnly && compaction.held[hello.replica] == 0) {
            return .startFromBase
        }
        let when = Date(timeIntervalSince1970: TimeInterval(compaction.time)).formatted(.iso8601)
        let remedy =
            hello.role == .app
            ? "the app must reset its replica (a client reset: its unsynced changes can be recovered onto the daemon's "
                + "state)"
            : "rebuild that daemon from this one (docs/Operating.md, \"Backups and restores\")"
        return .reset(
            SyncError(
                .resetRequired, .reset,
                "replica \(hello.replica) lacks changesets that this daemon no longer holds one by one: it compacted "
                    + "its history at \(when) (the replica was offline longer than the daemon keeps history for, or "
                    + "synced elsewhere and was never seen here); \(remedy)"))
    }

    /// Acceptor: sends the base state in parts of about ``Options/objectStatesBytes``, read one at a time from one
    /// snapshot; the changesets after it follow.
    private func sendBase(withRecords: Bool) async -> Bool {
        do {
            let replica = replica
            guard let reader = try await offload({ try replica.baseReader() }) else { return true }
            if !withRecords { reader.skipRecords() }
            let bytes = max(1, options.objectStatesBytes)
            var number: UInt64 = 0
            var next = try await offload { try reader.next(maximumBytes: bytes) }
            repeat {
                let part = next ?? (records: [], adoptions: [])
                let following = next == nil ? nil : try await offload { try reader.next(maximumBytes: bytes) }
                number += 1
                let message = BasePart(
                    part: number, last: following == nil, vector: reader.compaction.vector,
                    held: number == 1 ? reader.compaction.held : VersionVector(),
                    latest: reader.compaction.latest.rawValue,
                    schema: number == 1 ? reader.schema : nil, total: withRecords ? UInt64(reader.recordCount) : 0,
                    objects: part.records.map {
                        ObjectState(type: $0.key.type, primaryKey: $0.key.primaryKey, record: $0.record)
                    },
                    adoptions: part.adoptions.map { BasePart.Adoption(dot: $0.dot, relays: $0.relays) })
                guard let frame = machine.send(flexible: .base(message), now: .now) else { return false }
                await write(frame)
                if writeFailed || ended { return false }
                next = following
            } while next != nil
            theirs.formUnion(reader.compaction.vector)
            return true
        } catch {
            await fail(
                SyncError(.storage, .retry, "the daemon could not read its base state: \(error)", retryAfterSeconds: 5))
            return false
        }
    }

    /// Initiator: keeps each part of a base state in the replica as it arrives; makes the base the replica's when the
    /// last one has.
    private func receiveBase(_ part: BasePart) async -> Bool {
        guard !receivedChangesets && !tookBase else {
            await fail(.violation("a base state arrived after changesets, or a second one in one session"))
            return false
        }
        guard part.part == receivedBaseParts + 1 else {
            await fail(.violation("base part \(part.part) arrived after part \(receivedBaseParts)"))
            return false
        }
        if part.part == 1 {
            guard let schema = part.schema else {
                await fail(.violation("base part 1 carries no schema"))
                return false
            }
            baseSchema = schema
            baseHeld = part.held
            receivedBaseRecords = 0
        }
        receivedBaseParts = part.part
        receivedBaseRecords += UInt64(part.objects.count)
        onEvent(.bootstrapping(received: receivedBaseRecords, total: max(part.total, receivedBaseRecords)))
        let records = part.objects.compactMap { object in
            object.record.map { (key: RecordKey(type: object.type, primaryKey: object.primaryKey), record: $0) }
        }
        let adoptions = part.adoptions.map { (dot: $0.dot, relays: $0.relays) }
        do {
            let replica = replica
            try await offload {
                try replica.stageBasePart(records: records, adoptions: adoptions, first: part.part == 1)
            }
            if part.last, let schema = baseSchema {
                let held = baseHeld
                receivedBaseParts = 0
                baseSchema = nil
                baseHeld = VersionVector()
                tookBase = true
                try await offload {
                    try replica.finishBase(
                        schema: schema, vector: part.vector, held: held,
                        latest: HybridTime(rawValue: part.latest))
                }
            }
            return true
        } catch let error as TributaryError where error.code == .invalidChangeset {
            await fail(SyncError(.badChangeset, .fatal, error.message))
            return false
        } catch let error as TributaryError where error.code == .invalidValue {
            // This replica cannot start from the base (it holds what the base holds, or others' changesets): only a
            // reset brings it to the daemon's state.
            await fail(SyncError(.resetRequired, .reset, error.message))
            return false
        } catch {
            await fail(
                SyncError(
                    .storage, .retry, "could not start the replica from the daemon's base state: \(error)",
                    retryAfterSeconds: 5))
            return false
        }
    }

    /// Whether the initiator's history and this replica's can no longer be merged, and why: it has seen changesets
    /// of this replica that this replica no longer holds, or holds others under their dots (this replica was restored
    /// from a backup, or replaced), or this replica holds changesets of the initiator's that the initiator lost (it was
    /// restored from a backup, and would give their dots to new changesets). Lag is no divergence: an app that synced
    /// with another daemon of a mesh may be ahead of this one on that daemon's changesets.
    static func divergence(of hello: Hello, from replica: Replica) throws -> SyncError? {
        let ours = replica.versionVector
        let own = hello.vector[replica.replicaID]
        let held = ours[replica.replicaID]
        let remedy =
            hello.role == .app
            ? "the app must reset its replica (a client reset: its unsynced changes can be recovered onto the "
                + "daemon's state)"
            : "restore one of the two daemons from the other (docs/Operating.md, \"Backups and restores\")"
        if own > held {
            return SyncError(
                .resetRequired, .reset,
                "replica \(hello.replica) has seen this daemon's changesets through \(own), but the daemon holds them "
                    + "only through \(held): the daemon's history went back (restored from a backup, or its directory "
                    + "replaced); \(remedy)")
        }
        for anchor in hello.anchors {
            guard let fingerprint = try replica.changesetFingerprint(at: anchor.dot) else { continue }
            if fingerprint != anchor.fingerprint {
                let whose =
                    anchor.dot.origin == hello.replica
                    ? "the replica's own history went back and went on differently (restored from a backup)"
                    : "the daemon's history went back and went on differently (restored from a backup)"
                return SyncError(
                    .resetRequired, .reset,
                    "replica \(hello.replica) holds another changeset under \(anchor.dot) than this daemon does: "
                        + "\(whose); \(remedy)")
            }
        }
        let theirs = try replica.heldSequence(of: hello.replica)
        if theirs > hello.vector[hello.replica] {
            return SyncError(
                .resetRequired, .reset,
                "this daemon holds changesets of replica \(hello.replica) through \(theirs), but the replica has only "
                    + "\(hello.vector[hello.replica]) of its own: its history went back (restored from a backup), and "
                    + "its next changesets would reuse the ids of ones the daemon holds; "
                    + (hello.role == .app ? "the app must reset its replica" : "restore it from a peer"))
        }
        return nil
    }

    private func fail(_ error: SyncError) async {
        if let frame = machine.close(error) { await write(frame) }
        await end(error, closeConnection: true)
    }

    private func end(_ error: SyncError?, closeConnection: Bool) async {
        guard !ended else { return }
        ended = true
        if let other = meteredSide {
            meteredSide = nil
            options.meter?.session(with: other, open: false)
        }
        _ = machine.close(SyncError(.unavailable, .retry, "closed"))
        for task in tasks { task.cancel() }
        tasks.removeAll()
        if let commitHandler { replica.removeCommitHandler(commitHandler) }
        commitHandler = nil
        if let flexibleView { replica.endFlexibleSession(flexibleView) }
        wake?.finish()
        let waiters = markWaiters
        markWaiters.removeAll()
        for waiter in waiters.values {
            waiter.resume(throwing: error ?? SyncError(.unavailable, .retry, "the connection closed"))
        }
        if closeConnection { await writer.close() }
        onEvent(.ended(error))
    }

    /// Writes `frame` after every frame this session wrote before it. The writer's `send` runs off this actor, so
    /// two writes awaited at once (the pump's batch, and the error the receiving side ends the session with) could
    /// otherwise reach the connection in either order: a batch could follow the session's `error`.
    /// Writes `frame`. The writer hands it to the connection on this actor, before it waits for the socket, so
    /// frames reach the connection in the order this session wrote them (a batch never follows the session's
    /// `error`), however their writes are interleaved.
    private func write(_ frame: [UInt8]) async {
        let sent: Bool
        do {
            try await writer.send(frame)
            sent = true
        } catch {
            sent = false
        }
        if sent {
            options.meter?.sent(bytes: frame.count)
        } else {
            // The connection is closed or closing. Not ended here: the other side's last messages may still be
            // waiting to be read (its `error` saying why it closed, and when to come back); the transport hands
            // them over and then reports the close (``connectionClosed(_:)``), which ends the session.
            if !writeFailed {
                writeFailed = true
                writer.abort()
            }
        }
    }

    private func tick() async -> Bool {
        guard !ended else { return false }
        if let expiry = options.tokenExpiry, ContinuousClock.now >= expiry {
            await fail(
                SyncError(
                    .tokenExpired, .retry,
                    "the session's token expired: the app presents a fresh one (SyncCredentials.refreshing) and the "
                        + "session resumes"))
            return false
        }
        if let flexibleView, flexibleReady, ContinuousClock.now - lastCatchUp >= options.idleCatchUp {
            lastCatchUp = .now
            if replica.isBehind(flexibleView) { wake?.yield() }
        }
        return await perform(machine.tick(now: .now))
    }

    // MARK: Sending what the other side lacks

    private func startPump() {
        let (wakes, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        wake = continuation
        continuation.yield()
        if flexibleView != nil {
            // Woken by the commits that concern its subscriptions, not by every commit.
            flexibleView = replica.registerFlexibleSession(wake: { continuation.yield() })
            flexibleView?.setPermissions(permissions)
        } else {
            commitHandler = replica.onCommit({ _ in continuation.yield() }, onClose: { continuation.finish() })
        }
        tasks.append(
            Task { [weak self] in
                for await _ in wakes {
                    guard let self, await self.pump() else { return }
                }
            })
    }

    /// Acceptor serving a flexible-sync app: sends what uploads left in ``outbox``, in order; each compensating write
    /// is read now. What is sent to the app is read from the daemon's state and the session's view of the device,
    /// which the read updates; only the pump reads and sends it, one step at a time, so the app receives it in the
    /// order it was read. A compensating record read by the receive path while an export waited to be sent in full
    /// would already hold that export's changesets, and reach the app before them: the app would apply them on top
    /// of it again (an increment counted twice).
    private func flushOutbox() async -> Bool {
        // Each item leaves the outbox once sent: an acknowledgement the receive path makes meanwhile queues behind it.
        while let item = outbox.first {
            switch item {
            case .frame(let frame):
                await write(frame)
            case .compensate(let keys):
                guard await sendCompensation(for: keys) else { return false }
            }
            if ended || writeFailed { return false }
            outbox.removeFirst()
        }
        return true
    }

    /// Sends batches while the other side's window takes them; replies to marks once what they asked for is sent.
    private func pump() async -> Bool {
        while !ended && !writeFailed {
            if let withRecords = pendingBase {
                pendingBase = nil
                guard await sendBase(withRecords: withRecords) else { return false }
                continue
            }
            if !outbox.isEmpty {
                guard await flushOutbox() else { return false }
                continue
            }
            if flexibleView != nil {
                // A flexible-sync app: nothing until its subscriptions arrive; a new set is bootstrapped first.
                guard flexibleReady else { return true }
                if let wanted = wantedQuery {
                    wantedQuery = nil
                    permissionsChanged = false
                    guard await bootstrap(wanted) else { return false }
                    if let after = resendRefusalsAfter {
                        resendRefusalsAfter = nil
                        guard await resendRefusals(after: after) else { return false }
                    }
                    continue
                }
                if permissionsChanged {
                    permissionsChanged = false
                    guard await decideAgain() else { return false }
                    continue
                }
            }
            let budget = machine.sendBudget
            guard budget > 64 else { return true }
            let export: ChangesetExport
            do {
                // Aimed at the window; a single changeset larger than it still goes when nothing is in flight.
                let maximumBytes = max(1, min(options.batchBytes, budget - 64, machine.windowLeft - 64))
                if var view = flexibleView, let device = otherReplica {
                    let flexible = try replica.flexibleExport(
                        missingFrom: theirs, excluding: theirPending, view: &view, device: device,
                        limit: options.batchChangesets, maximumBytes: maximumBytes)
                    flexibleView = view
                    if !flexible.objects.isEmpty {
                        await sendObjects(flexible.objects, query: 0, yours: flexible.yours)
                    }
                    export = flexible.changesets
                } else {
                    var limit = options.uploads ? options.batchChangesets : 0
                    if let uploadCap {
                        // Own changesets are numbered without gaps: at most this many are left before the cap.
                        let left = uploadCap > theirs[replica.replicaID] ? uploadCap - theirs[replica.replicaID] : 0
                        limit = Int(min(UInt64(limit), left))
                    }
                    export =
                        limit == 0
                        ? ChangesetExport(changesets: [], bytes: 0, progress: theirs, more: false)
                        : try replica.export(
                            missingFrom: theirs, excluding: theirPending, origins: exportOrigins, limit: limit,
                            maximumBytes: maximumBytes)
                }
            } catch let error as TributaryError where error.code == .historyCompacted {
                await fail(SyncError(.resetRequired, .reset, error.message))
                return false
            } catch {
                await fail(
                    SyncError(.storage, .retry, "could not read the log to send: \(error)", retryAfterSeconds: 5))
                return false
            }
            nothingToSend = export.changesets.isEmpty
            if export.changesets.isEmpty {
                _ = standing()
                await replyToMarks(all: true)
                return true
            }
            guard
                let frame = machine.sendBatch(
                    export.changesets, progress: export.progress, more: export.more, now: .now)
            else { return true }
            if exportOrigins != nil {
                sentOwnSequence.append((machine.lastBatchSent, export.progress[replica.replicaID]))
            }
            theirs = export.progress
            options.meter?.sent(changesets: export.changesets.count)
            await write(frame)
            await replyToMarks(all: false)
        }
        return false
    }

    // MARK: Flexible sync

    /// Initiator, as the session opens: the set the device holds, so that the daemon judges the first uploads by it
    /// (the changesets written before the newest set was committed), then the newest set when those are uploaded.
    private func openQuery() async {
        guard let query = try? replica.flexibleSyncQuery() else { return }
        let held = QueryRequest(
            version: query.heldVersion, subscriptions: query.held, heldVersion: query.heldVersion, held: query.held,
            acknowledgedThrough: options.acknowledgedThrough)
        guard let frame = machine.send(flexible: .query(held), now: .now) else { return }
        sentQueryVersion = query.heldVersion
        await write(frame)
        await sendQuery()
    }

    /// Initiator: sends the newest subscription set, with the one the device holds, once every changeset written
    /// before it was committed is uploaded: the daemon judges those by the set they were written under. Until then
    /// the upload stops at that point (``uploadCap``).
    private func sendQuery() async {
        queryWaitsForUpload = false
        guard let query = try? replica.flexibleSyncQuery(after: sentQueryVersion), query.version > sentQueryVersion
        else {
            uploadCap = nil
            return
        }
        // The cap holds while the set is written: nothing written after it may reach the daemon before it.
        uploadCap = query.snapshot
        // A session that does not upload (a client reset's download) sends the set at once.
        if uploadedThrough < query.snapshot && options.uploads {
            queryWaitsForUpload = true
            return
        }
        let request = QueryRequest(
            version: query.version, subscriptions: query.subscriptions, heldVersion: query.heldVersion,
            held: query.held)
        guard let frame = machine.send(flexible: .query(request), now: .now) else { return }
        sentQueryVersion = query.version
        await write(frame)
        wake?.yield()
        // The next pending set, if one was committed after this one.
        await sendQuery()
    }

    /// Initiator: sends each new subscription set while the session is open.
    private func watchSubscriptions() {
        let changes = replica.subscriptions.changes()
        tasks.append(
            Task { [weak self] in
                for await _ in changes {
                    guard let self, await self.sendQueryIfOpen() else { return }
                }
            })
    }

    private func sendQueryIfOpen() async -> Bool {
        guard !ended else { return false }
        if !flexibleSession {
            // The replica committed its first set during a session that syncs everything: the next session says
            // it syncs by subscriptions, at once.
            await close(
                SyncError(
                    .unavailable, .retry, "the replica now syncs by subscriptions; reconnecting", retryAfterSeconds: 0))
            return false
        }
        await sendQuery()
        return true
    }

    /// Acceptor: an app's new subscription set. A set the daemon cannot serve is refused (the session goes on);
    /// otherwise it is bootstrapped before anything else is sent.
    private func takeQuery(_ query: QueryRequest) async -> Bool {
        guard flexibleView != nil else {
            let error =
                adoptIncoming
                ? "this session did not open as a flexible-sync session; reconnect to sync by subscriptions"
                : "a peer replicates everything: it cannot subscribe"
            if let frame = machine.send(
                flexible: .queryState(QueryState(version: query.version, error: error)), now: .now)
            {
                await write(frame)
            }
            return true
        }
        if !flexibleReady { resendRefusalsAfter = query.acknowledgedThrough }
        do {
            try replica.checkSubscriptions(query.subscriptions, queryable: options.queryableFields)
        } catch {
            let message = (error as? TributaryError)?.message ?? "\(error)"
            let state = QueryState(version: query.version, error: String(message.utf8.prefix(4000)) ?? "refused")
            if let frame = machine.send(flexible: .queryState(state), now: .now) { await write(frame) }
            // The first set decides what the app holds: with it refused, the session serves the held one.
            if !flexibleReady {
                flexibleReady = true
                judgingSubscriptions = query.held
                wantedQuery = QueryRequest(
                    version: query.heldVersion, subscriptions: query.held, heldVersion: query.heldVersion,
                    held: query.held)
                wake?.yield()
            }
            return true
        }
        flexibleReady = true
        judgingSubscriptions = query.subscriptions
        if let replaced = wantedQuery { skippedSubscriptions += replaced.subscriptions }
        wantedQuery = query
        wake?.yield()
        return true
    }

    /// Acceptor serving an app: the daemon's permission rules changed, and `permissions` are the app's roles under
    /// them. The objects it may no longer read are removed from it, those it now may are sent, and its writes are
    /// judged under the new roles from now on.
    package func changePermissions(_ permissions: SessionPermissions?) async {
        guard !ended, adoptIncoming, permissions != self.permissions else { return }
        if flexibleView == nil, permissions != nil {
            // The app receives everything: the rules could not limit it.
            await close(
                SyncError(
                    .forbidden, .fatal,
                    "this daemon now enforces permission rules: apps sync by subscriptions (flexible sync); commit "
                        + "a subscription set before connecting again"))
            return
        }
        self.permissions = permissions
        flexibleView?.setPermissions(permissions)
        permissionsChanged = true
        wake?.yield()
    }

    /// Acceptor: what the app holds, decided again under its roles (the rules changed): the objects entering or
    /// leaving its view are sent as object states to apply at once.
    private func decideAgain() async -> Bool {
        guard var view = flexibleView, let device = otherReplica else { return true }
        let objects: (objects: [ReceivedObjectState], yours: UInt64)
        do {
            objects = try replica.flexibleBootstrap(
                holding: view.subscriptions, wanting: readable(judgingSubscriptions), view: &view, device: device)
        } catch {
            await fail(
                SyncError(.storage, .retry, "could not read the objects to send: \(error)", retryAfterSeconds: 5))
            return false
        }
        flexibleView = view
        if !objects.objects.isEmpty { await sendObjects(objects.objects, query: 0, yours: objects.yours) }
        return !ended
    }

    /// Acceptor: `subscriptions` limited to what the app may read under the permission rules (when there are any).
    private func readable(_ subscriptions: [Subscription]) -> [Subscription] {
        permissions?.readable(subscriptions) ?? subscriptions
    }

    /// Acceptor: sends what entering `query.subscriptions` from `query.held` adds and removes, then completes it.
    private func bootstrap(_ query: QueryRequest) async -> Bool {
        guard var view = flexibleView, let device = otherReplica else { return true }
        let bootstrap: (objects: [ReceivedObjectState], yours: UInt64)
        do {
            bootstrap = try replica.flexibleBootstrap(
                holding: view.bootstrapped ? view.subscriptions : readable(query.held),
                wanting: readable(query.subscriptions), skipped: skippedSubscriptions, view: &view, device: device)
        } catch {
            await fail(
                SyncError(.storage, .retry, "could not read the objects to send: \(error)", retryAfterSeconds: 5))
            return false
        }
        flexibleView = view
        skippedSubscriptions = []
        if query.version == 0 { return true }
        await sendObjects(bootstrap.objects, query: query.version, yours: bootstrap.yours)
        if let frame = machine.send(flexible: .queryState(QueryState(version: query.version)), now: .now) {
            await write(frame)
        }
        return !ended
    }

    /// Acceptor: compensating writes the app may not have received (its connection dropped after the refused upload
    /// was committed), sent again.
    private func resendRefusals(after acknowledged: UInt64) async -> Bool {
        guard let device = otherReplica else { return true }
        let refused: [(type: String, primaryKey: PrimaryKey, refused: [Dot])]
        do {
            refused = try replica.refusals(of: device, after: acknowledged)
        } catch {
            await fail(
                SyncError(.storage, .retry, "could not read the writes refused: \(error)", retryAfterSeconds: 5))
            return false
        }
        guard !refused.isEmpty else { return true }
        return await sendCompensation(for: refused)
    }

    /// Acceptor: the daemon's state of each object whose write by the app it refused (a compensating write), read
    /// now and sent. Only the pump calls it (see ``flushOutbox()``).
    private func sendCompensation(for keys: [(type: String, primaryKey: PrimaryKey, refused: [Dot])]) async -> Bool {
        guard var view = flexibleView, let device = otherReplica else { return true }
        do {
            let states = try replica.compensation(
                for: keys, under: readable(judgingSubscriptions), view: &view, device: device)
            flexibleView = view
            await sendObjects(states.objects, query: 0, yours: states.yours)
            return !ended
        } catch {
            await fail(
                SyncError(.storage, .retry, "could not read the objects to send: \(error)", retryAfterSeconds: 5))
            return false
        }
    }

    /// Acceptor: object states in messages of about ``Options/objectStatesBytes`` each (for a bootstrap, at least
    /// one, so that the app learns the set's `yours`).
    private func sendObjects(_ objects: [ReceivedObjectState], query: UInt64, yours: UInt64) async {
        var chunks: [[ObjectState]] = [[]]
        var bytes = 0
        for object in objects {
            // Only a bootstrap is split: a steady-state message is applied whole, so it cannot interleave with another.
            if query != 0 && bytes >= options.objectStatesBytes {
                chunks.append([])
                bytes = 0
            }
            chunks[chunks.count - 1].append(
                ObjectState(
                    type: object.type, primaryKey: object.primaryKey, record: object.record, refused: object.refused))
            bytes += object.type.utf8.count + (object.record?.count ?? 0) + 24
        }
        for chunk in chunks where !chunk.isEmpty || query != 0 {
            let message = Message.objects(
                ObjectStates(query: query, yours: yours, objects: chunk, total: query != 0 ? UInt64(objects.count) : 0))
            guard let frame = machine.send(flexible: message, now: .now) else { return }
            await write(frame)
        }
    }

    /// Initiator: object states to apply now, or to keep until their bootstrap completes. States that arrive while a
    /// bootstrap is received (a compensating write) are applied at once and again after the bootstrap, in the order
    /// they came: an older state never replaces a newer one.
    private func receiveObjects(_ states: ObjectStates) async -> Bool {
        let objects = states.objects.map {
            ReceivedObjectState(type: $0.type, primaryKey: $0.primaryKey, record: $0.record, refused: $0.refused)
        }
        if states.query != 0 {
            if staged?.version != states.query { staged = (states.query, []) }
            staged?.groups.append((objects, states.yours))
            let received = staged?.groups.reduce(0) { $0 + UInt64($1.objects.count) } ?? 0
            onEvent(.bootstrapping(received: received, total: max(states.total, received)))
            return true
        }
        // Applied now (a bootstrap that never completes must not lose it), and again after the bootstrap.
        if staged != nil { staged?.groups.append((objects, states.yours)) }
        return await applyObjects([(objects, states.yours)], completing: nil)
    }

    /// Initiator: a subscription set completed (its bootstrap is applied in one commit) or was refused.
    private func receiveQueryState(_ state: QueryState) async -> Bool {
        var groups = staged?.groups ?? []
        let bootstrapped = staged?.version == state.version
        if bootstrapped { staged = nil }
        if let error = state.error {
            do {
                try replica.refuseSubscriptionSet(version: state.version, message: error)
            } catch {
                await fail(
                    SyncError(
                        .storage, .retry, "could not store a refused subscription set: \(error)", retryAfterSeconds: 5))
                return false
            }
            // States that arrived meanwhile still apply.
            if bootstrapped, !groups.isEmpty { return await applyObjects(groups, completing: nil) }
            return true
        }
        if !bootstrapped { groups = [] }
        return await applyObjects(groups, completing: state.version)
    }

    private func applyObjects(
        _ groups: [(objects: [ReceivedObjectState], yours: UInt64)], completing: UInt64?
    ) async -> Bool {
        do {
            let replica = replica
            try await offload { try replica.applyObjectStates(groups, completing: completing) }
            return true
        } catch let error as TributaryError where error.code == .invalidChangeset {
            await fail(SyncError(.badChangeset, .fatal, error.message))
            return false
        } catch {
            await fail(
                SyncError(.storage, .retry, "could not store the objects received: \(error)", retryAfterSeconds: 5))
            return false
        }
    }

    private func replyToMarks(all: Bool) async {
        // Taken out before the first write: a mark requested while a reply is written (this actor takes messages
        // while it awaits) is appended meanwhile, and must not be lost when the rest is put back.
        let marks = marksToReply
        marksToReply = []
        var remaining: [(request: UInt64, held: VersionVector)] = []
        for mark in marks {
            if all || theirs.includes(mark.held) {
                if let frame = machine.replyToMark(mark.request, now: .now) { await write(frame) }
            } else {
                remaining.append(mark)
            }
        }
        marksToReply = remaining + marksToReply
    }
}
