public import TributaryModel

/// One side of a sync session, as a value: it takes the bytes received and the I/O layer's events, and says what to
/// do (docs/Protocol.md, "Session states"). It does no I/O and reads no clock, so that every reaction to every
/// message in every state is tested without sockets.
///
/// The I/O layer sends the frames this returns as binary WebSocket messages, integrates the batches it is told to,
/// and closes the connection after ``Action/closeSending(_:)`` or ``Action/closed(_:)``.
public struct SessionStateMachine: Sendable {
    /// Which end of the connection this is.
    public enum Side: Sendable, Hashable {
        /// The side that connects and says `hello`: an app, or a daemon dialling a peer.
        case initiator
        /// The side that accepts connections and answers `welcome`: a daemon.
        case acceptor
    }

    /// What the I/O layer does after an event.
    public enum Action: Sendable, Hashable {
        /// Nothing.
        case none
        /// Send this frame.
        case send([UInt8])
        /// Acceptor: decide whether to take this session (credentials, role, schema version), then call
        /// ``SessionStateMachine/accept(_:now:)`` or ``SessionStateMachine/refuse(_:)``.
        case authenticate(Hello)
        /// Initiator: the session is open; the other side said this.
        case established(Welcome)
        /// Integrate these changesets, commit, then call ``SessionStateMachine/acknowledge(_:now:)``.
        case integrate(ChangesetBatch)
        /// The other side integrated and durably committed our batches up to this one: window freed.
        case acknowledged(Acknowledgement)
        /// The other side asks for ``SessionStateMachine/replyToMark(_:now:)`` once everything held now is sent.
        case markRequested(UInt64)
        /// The other side has sent everything it held when our mark arrived.
        case markReplied(UInt64)
        /// Send this error frame, then close the connection: the session ended on this side's account.
        case closeSending(SyncError)
        /// Close the connection: the other side ended the session with this error.
        case closed(SyncError)
        /// Acceptor: the app wants this subscription set held (flexible sync).
        case query(QueryRequest)
        /// Initiator: objects entering or leaving the app's view.
        case objects(ObjectStates)
        /// Initiator: the daemon completed or refused a subscription set.
        case queryState(QueryState)
        /// Initiator: a part of the base state of a compacted daemon, to start this replica from.
        case base(BasePart)
    }

    public let side: Side
    private var state: State
    private var lastSent: ContinuousClock.Instant
    private var lastReceived: ContinuousClock.Instant
    private var pingSent: (nonce: UInt64, at: ContinuousClock.Instant)?
    private var pings: UInt64 = 0
    private let limits: MessageLimits

    /// The latest round trip measured by a ping, or `nil` before the first pong.
    public private(set) var roundTrip: Duration?

    private enum State: Sendable {
        case idle(Hello)
        case awaitingWelcome(Hello)
        case awaitingHello
        case authenticating(Hello)
        case active(Active)
        case closed
    }

    /// An open session's accounting.
    private struct Active: Sendable {
        var version: UInt64
        /// What the other side takes: our unacknowledged bytes towards it.
        var theirWindow: UInt64
        /// What we take: its unacknowledged bytes towards us.
        var ourWindow: UInt64
        var theirMaximumMessage: UInt64
        /// The largest message this side takes: what an acceptor announced, or its limits.
        var ourMaximumMessage: UInt64
        var keepalive: Duration
        var nextBatch: UInt64 = 1
        var sentUnacknowledged: [(batch: UInt64, bytes: Int)] = []
        var sentUnacknowledgedBytes = 0
        var lastReceivedBatch: UInt64 = 0
        var receivedUnacknowledged: [(batch: UInt64, bytes: Int)] = []
        var receivedUnacknowledgedBytes = 0
        var nextMark: UInt64 = 1
        var outstandingMarks: Set<UInt64> = []
        /// Marks the other side asked for and not answered yet.
        var requestedMarks: Set<UInt64> = []
    }

    /// An initiator that will say `hello` when ``start(now:)`` is called.
    public init(initiating hello: Hello, limits: MessageLimits = .standard, now: ContinuousClock.Instant) {
        side = .initiator
        state = .idle(hello)
        self.limits = limits
        lastSent = now
        lastReceived = now
    }

    /// An acceptor waiting for `hello`.
    public init(accepting limits: MessageLimits = .standard, now: ContinuousClock.Instant) {
        side = .acceptor
        state = .awaitingHello
        self.limits = limits
        lastSent = now
        lastReceived = now
    }

    /// Whether the handshake is done and the session not closed.
    public var isActive: Bool {
        if case .active = state { return true }
        return false
    }

    /// Whether the session ended.
    public var isClosed: Bool {
        if case .closed = state { return true }
        return false
    }

    /// The protocol version the session speaks, once active.
    public var version: UInt64? {
        if case .active(let active) = state { return active.version }
        return nil
    }

    /// The number of the last `changesets` message sent, or 0.
    public var lastBatchSent: UInt64 {
        if case .active(let active) = state { return active.nextBatch - 1 }
        return 0
    }

    /// Bytes of `changesets` messages sent and not acknowledged yet.
    public var unacknowledgedBytes: Int {
        if case .active(let active) = state { return active.sentUnacknowledgedBytes }
        return 0
    }

    /// What the other side's window still takes, in bytes: the size to aim a batch at. (``sendBudget`` also lets one
    /// larger message go when nothing is unacknowledged.)
    public var windowLeft: Int {
        guard case .active(let active) = state else { return 0 }
        return max(0, Int(clamping: active.theirWindow) - active.sentUnacknowledgedBytes)
    }

    /// The size of the next `changesets` message the other side's window takes now: 0 when it is full, and up to the
    /// other side's largest message when nothing is unacknowledged (so that a large changeset cannot stall a
    /// session).
    public var sendBudget: Int {
        guard case .active(let active) = state else { return 0 }
        let maximum = Int(clamping: min(active.theirMaximumMessage, UInt64(limits.maximumMessageBytes)))
        if active.sentUnacknowledgedBytes == 0 { return maximum }
        let left = Int(clamping: active.theirWindow) - active.sentUnacknowledgedBytes
        return max(0, min(left, maximum))
    }

    // MARK: Events from the I/O layer

    /// Initiator: the `hello` frame to send first.
    public mutating func start(now: ContinuousClock.Instant) -> [UInt8]? {
        guard case .idle(let hello) = state else { return nil }
        state = .awaitingWelcome(hello)
        lastReceived = now
        return sent(.hello(hello), now: now)
    }

    /// Acceptor: takes the session `hello` asked for. The welcome's version is set to the highest both sides speak.
    /// Returns the `welcome` frame, or `nil` when not authenticating.
    public mutating func accept(_ welcome: Welcome, now: ContinuousClock.Instant) -> [UInt8]? {
        guard case .authenticating(let hello) = state,
            let version = SyncProtocol.negotiate(hello.versions)
        else { return nil }
        var welcome = welcome
        welcome.version = version
        welcome.maximumMessageBytes = min(welcome.maximumMessageBytes, UInt64(limits.maximumMessageBytes))
        state = .active(
            Active(
                version: version, theirWindow: min(hello.window, limits.maximumWindow), ourWindow: welcome.window,
                // `hello` announces no maximum: the acceptor's is the session's, both ways.
                theirMaximumMessage: welcome.maximumMessageBytes,
                ourMaximumMessage: min(welcome.maximumMessageBytes, UInt64(limits.maximumMessageBytes)),
                keepalive: SyncProtocol.keepalive(welcome.keepaliveSeconds)))
        return sent(.welcome(welcome), now: now)
    }

    /// Acceptor: refuses the session `hello` asked for. Returns the `error` frame to send before closing, or `nil`
    /// when not authenticating.
    public mutating func refuse(_ error: SyncError) -> [UInt8]? {
        guard case .authenticating = state else { return nil }
        state = .closed
        return MessageCodec.encode(.error(error))
    }

    /// Ends the session on this side's account (the daemon shuts down, storage failed). Returns the `error` frame to
    /// send before closing, or `nil` when the session had ended already.
    public mutating func close(_ error: SyncError) -> [UInt8]? {
        if case .closed = state { return nil }
        if case .idle = state {
            state = .closed
            return nil
        }
        state = .closed
        return MessageCodec.encode(.error(error))
    }

    /// Frames a batch of changesets, or returns `nil` when the session is not active or the batch does not fit in
    /// the other side's window now (see ``sendBudget``).
    public mutating func sendBatch(
        _ changesets: [[UInt8]], progress: VersionVector, more: Bool, now: ContinuousClock.Instant
    ) -> [UInt8]? {
        guard case .active(var active) = state else { return nil }
        let batch = ChangesetBatch(number: active.nextBatch, changesets: changesets, progress: progress, more: more)
        let frame = MessageCodec.encode(.changesets(batch))
        guard frame.count <= sendBudget else { return nil }
        active.nextBatch += 1
        active.sentUnacknowledged.append((batch.number, frame.count))
        active.sentUnacknowledgedBytes += frame.count
        state = .active(active)
        lastSent = now
        return frame
    }

    /// Acknowledges every batch received up to `acknowledgement.batch`, once integrated and durably committed.
    /// Returns the `ack` frame, or `nil` when that batch was not received or was acknowledged already.
    public mutating func acknowledge(_ acknowledgement: Acknowledgement, now: ContinuousClock.Instant) -> [UInt8]? {
        guard case .active(var active) = state, acknowledgement.batch <= active.lastReceivedBatch,
            let first = active.receivedUnacknowledged.first, acknowledgement.batch >= first.batch
        else { return nil }
        while let oldest = active.receivedUnacknowledged.first, oldest.batch <= acknowledgement.batch {
            active.receivedUnacknowledgedBytes -= oldest.bytes
            active.receivedUnacknowledged.removeFirst()
        }
        state = .active(active)
        return sent(.ack(acknowledgement), now: now)
    }

    /// Asks the other side to reply once it has sent everything it holds now. Returns the request's number and the
    /// `mark` frame, or `nil` when the session is not active.
    public mutating func requestMark(now: ContinuousClock.Instant) -> (request: UInt64, frame: [UInt8])? {
        guard case .active(var active) = state else { return nil }
        let request = active.nextMark
        active.nextMark += 1
        active.outstandingMarks.insert(request)
        state = .active(active)
        return (request, sent(.mark(request: request), now: now))
    }

    /// Replies to the other side's mark: everything held when it arrived has been sent.
    /// Returns `nil` when the session is not active or the other side did not ask for this mark (or was answered).
    public mutating func replyToMark(_ request: UInt64, now: ContinuousClock.Instant) -> [UInt8]? {
        guard case .active(var active) = state, active.requestedMarks.remove(request) != nil else { return nil }
        state = .active(active)
        return sent(.markReply(request: request), now: now)
    }

    /// Encodes a flexible-sync message for this side to send: ``Message/query(_:)`` from an initiator,
    /// ``Message/objects(_:)`` or ``Message/queryState(_:)`` from an acceptor; or, from an acceptor, a part of a base
    /// state (``Message/base(_:)``). Returns `nil` when the session is not
    /// active or the message is not this side's to send.
    public mutating func send(flexible message: Message, now: ContinuousClock.Instant) -> [UInt8]? {
        guard case .active = state else { return nil }
        switch (side, message) {
        case (.initiator, .query), (.acceptor, .objects), (.acceptor, .queryState), (.acceptor, .base):
            return sent(message, now: now)
        default:
            return nil
        }
    }

    /// Keepalive, called now and then (every second or so): sends `ping` after a keepalive interval without sending,
    /// and ends the session after three without receiving (or a handshake that does not finish in that time).
    public mutating func tick(now: ContinuousClock.Instant) -> Action {
        switch state {
        case .closed, .idle:
            return .none
        case .awaitingWelcome, .awaitingHello, .authenticating:
            let limit = Duration.seconds(3 * SyncProtocol.defaultKeepaliveSeconds)
            if now - lastReceived > limit { return closeSending(.timeout("the handshake did not finish in \(limit)")) }
            return .none
        case .active(let active):
            if now - lastReceived > active.keepalive * 3 {
                return closeSending(.timeout("nothing was received for \(active.keepalive * 3)"))
            }
            if now - lastSent >= active.keepalive {
                pings += 1
                pingSent = (pings, now)
                return .send(sent(.ping(nonce: pings), now: now))
            }
            return .none
        }
    }

    /// What to do with a message received.
    public mutating func received(_ frame: [UInt8], now: ContinuousClock.Instant) -> Action {
        if case .closed = state { return .none }
        lastReceived = now
        let message: Message
        do {
            message = try MessageCodec.decode(frame, limits: limits)
        } catch {
            return closeSending(error)
        }
        if case .idle = state {
            return closeSending(.violation("\(message.name) arrived before hello was sent"))
        }
        if case .error(let error) = message {
            state = .closed
            return .closed(error)
        }
        if case .active(let active) = state, UInt64(frame.count) > active.ourMaximumMessage {
            return closeSending(
                .violation(
                    "a \(message.name) message of \(frame.count) bytes is over the largest announced, "
                        + "\(active.ourMaximumMessage)"))
        }
        switch (state, message) {
        case (.closed, _):
            return .none
        case (.awaitingWelcome, .welcome(let welcome)):
            guard case .awaitingWelcome(let hello) = state, hello.versions.contains(welcome.version) else {
                return closeSending(.violation("welcome chose version \(welcome.version), which hello did not offer"))
            }
            state = .active(
                Active(
                    version: welcome.version, theirWindow: min(welcome.window, limits.maximumWindow),
                    ourWindow: hello.window,
                    theirMaximumMessage: welcome.maximumMessageBytes,
                    ourMaximumMessage: UInt64(limits.maximumMessageBytes),
                    keepalive: SyncProtocol.keepalive(welcome.keepaliveSeconds)))
            return .established(welcome)
        case (.awaitingHello, .hello(let hello)):
            guard SyncProtocol.negotiate(hello.versions) != nil else {
                return closeSending(
                    SyncError(
                        .unsupportedVersion, .fatal,
                        "this daemon speaks protocol versions \(SyncProtocol.versions), the client "
                            + "\(hello.versions); upgrade the older side"))
            }
            state = .authenticating(hello)
            return .authenticate(hello)
        case (.active(var active), .changesets(let batch)):
            guard batch.number == active.lastReceivedBatch + 1 else {
                return closeSending(
                    .violation("changesets batch \(batch.number) arrived after batch \(active.lastReceivedBatch)"))
            }
            if active.receivedUnacknowledgedBytes > 0
                && UInt64(active.receivedUnacknowledgedBytes + frame.count) > active.ourWindow
            {
                return closeSending(
                    .violation(
                        "changesets batch \(batch.number) exceeds the window: \(active.receivedUnacknowledgedBytes) "
                            + "bytes unacknowledged, \(frame.count) more, window \(active.ourWindow)"))
            }
            active.lastReceivedBatch = batch.number
            active.receivedUnacknowledged.append((batch.number, frame.count))
            active.receivedUnacknowledgedBytes += frame.count
            state = .active(active)
            return .integrate(batch)
        case (.active(var active), .ack(let ack)):
            guard let oldest = active.sentUnacknowledged.first, ack.batch >= oldest.batch,
                ack.batch < active.nextBatch
            else {
                return closeSending(
                    .violation(
                        "ack for batch \(ack.batch), but the unacknowledged batches are "
                            + (active.sentUnacknowledged.isEmpty
                                ? "none"
                                : "\(active.sentUnacknowledged.first!.batch)...\(active.nextBatch - 1)")))
            }
            while let first = active.sentUnacknowledged.first, first.batch <= ack.batch {
                active.sentUnacknowledgedBytes -= first.bytes
                active.sentUnacknowledged.removeFirst()
            }
            state = .active(active)
            return .acknowledged(ack)
        case (.active(var active), .mark(let request)):
            active.requestedMarks.insert(request)
            state = .active(active)
            return .markRequested(request)
        case (.active(var active), .markReply(let request)):
            guard active.outstandingMarks.remove(request) != nil else {
                return closeSending(.violation("markReply for request \(request), which was not made"))
            }
            state = .active(active)
            return .markReplied(request)
        case (.active, .ping(let nonce)):
            return .send(sent(.pong(nonce: nonce), now: now))
        case (.active, .query(let query)) where side == .acceptor:
            return .query(query)
        case (.active, .objects(let states)) where side == .initiator:
            return .objects(states)
        case (.active, .queryState(let state)) where side == .initiator:
            return .queryState(state)
        case (.active, .base(let base)) where side == .initiator:
            return .base(base)
        case (.active, .pong(let nonce)):
            if let pingSent, pingSent.nonce == nonce {
                roundTrip = now - pingSent.at
                self.pingSent = nil
            }
            return .none
        default:
            return closeSending(.violation("\(message.name) is not allowed \(stateDescription)"))
        }
    }

    // MARK: Helpers

    private mutating func sent(_ message: Message, now: ContinuousClock.Instant) -> [UInt8] {
        lastSent = now
        return MessageCodec.encode(message)
    }

    private mutating func closeSending(_ error: SyncError) -> Action {
        state = .closed
        return .closeSending(error)
    }

    private var stateDescription: String {
        switch state {
        case .idle: "before hello is sent"
        case .awaitingWelcome: "while waiting for welcome"
        case .awaitingHello: "before hello"
        case .authenticating: "while the daemon checks hello"
        case .active: "in an open session"
        case .closed: "after the session ended"
        }
    }
}

extension SyncProtocol {
    /// The keepalive interval a session uses for an announced number of seconds: between 1 second and a day.
    public static func keepalive(_ seconds: UInt64) -> Duration { .seconds(min(max(seconds, 1), 86_400)) }

    /// The highest version in `offered` this build speaks, or `nil`.
    public static func negotiate(_ offered: ClosedRange<UInt64>) -> UInt64? {
        let common = offered.clamped(to: versions)
        return offered.overlaps(versions) ? common.upperBound : nil
    }
}

extension SyncError {
    static func timeout(_ message: String) -> SyncError {
        SyncError(.timeout, .retry, message)
    }
}
