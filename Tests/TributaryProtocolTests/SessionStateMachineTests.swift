import Testing
import TributaryModel

@testable import TributaryProtocol

// MARK: - Fixtures

/// The states of docs/Protocol.md's "Session states" table, each reached the way a session reaches it. The two
/// active states have sent batch 1 and mark 1, so that `ack` 1 and `markReply` 1 are allowed.
enum SessionState: String, CaseIterable, Sendable {
    case initiatorIdle, initiatorHelloSent, acceptorAwaitingHello, acceptorAuthenticating
    case initiatorActive, acceptorActive, initiatorClosed, acceptorClosed

    var isClosed: Bool { self == .initiatorClosed || self == .acceptorClosed }
    var isActive: Bool { self == .initiatorActive || self == .acceptorActive }

    func machine(at now: ContinuousClock.Instant) -> SessionStateMachine {
        var machine: SessionStateMachine
        switch self {
        case .initiatorIdle:
            return SessionStateMachine(initiating: Samples.hello, now: now)
        case .initiatorHelloSent:
            machine = SessionState.initiatorIdle.machine(at: now)
            #expect(machine.start(now: now) == MessageCodec.encode(.hello(Samples.hello)))
        case .acceptorAwaitingHello:
            return SessionStateMachine(accepting: .standard, now: now)
        case .acceptorAuthenticating:
            machine = SessionState.acceptorAwaitingHello.machine(at: now)
            #expect(
                machine.received(MessageCodec.encode(.hello(Samples.hello)), now: now) == .authenticate(Samples.hello))
        case .initiatorActive:
            machine = SessionState.initiatorHelloSent.machine(at: now)
            #expect(
                machine.received(MessageCodec.encode(.welcome(Samples.welcome)), now: now)
                    == .established(Samples.welcome))
        case .acceptorActive:
            machine = SessionState.acceptorAuthenticating.machine(at: now)
            #expect(machine.accept(Samples.welcome, now: now) == MessageCodec.encode(.welcome(Samples.welcome)))
        case .initiatorClosed, .acceptorClosed:
            machine = (self == .initiatorClosed ? SessionState.initiatorActive : .acceptorActive).machine(at: now)
            #expect(machine.close(SyncError(.unavailable, .retry, "going away")) != nil)
            return machine
        }
        if isActive {
            #expect(machine.isActive)
            #expect(machine.sendBatch([[1, 2, 3]], progress: Samples.vector, more: false, now: now) != nil)
            #expect(machine.requestMark(now: now)?.request == 1)
        }
        return machine
    }
}

/// A message of each kind, and a malformed frame.
enum Input: String, CaseIterable, Sendable {
    case hello, welcome, changesets, ack, mark, markReply, error, ping, pong, malformed

    static let batch = ChangesetBatch(
        number: 1, changesets: [[0xC0, 0xFF, 0xEE]], progress: Samples.vector, more: false)
    static let acknowledgement = Acknowledgement(batch: 1, checkpoint: Samples.vector)
    static let errorSent = SyncError(.unavailable, .retry, "shutting down", retryAfterSeconds: 5)

    var frame: [UInt8] {
        switch self {
        case .hello: MessageCodec.encode(.hello(Samples.hello))
        case .welcome: MessageCodec.encode(.welcome(Samples.welcome))
        case .changesets: MessageCodec.encode(.changesets(Input.batch))
        case .ack: MessageCodec.encode(.ack(Input.acknowledgement))
        case .mark: MessageCodec.encode(.mark(request: 7))
        case .markReply: MessageCodec.encode(.markReply(request: 1))
        case .error: MessageCodec.encode(.error(Input.errorSent))
        case .ping: MessageCodec.encode(.ping(nonce: 41))
        case .pong: MessageCodec.encode(.pong(nonce: 42))
        // A changesets message claiming 5 changesets, with none there.
        case .malformed: [3, 1, 5]
        }
    }
}

/// What the spec's table says a state does with a message.
enum Reaction: Equatable {
    /// Close, sending a protocol violation that names the message (or, for a malformed frame, says what is wrong).
    case violation(naming: String?)
    /// This action, after which the session is in the handshake, active or closed.
    case action(SessionStateMachine.Action, then: Phase)

    enum Phase { case handshake, active, closed }

    static func of(_ state: SessionState, _ input: Input) -> Reaction {
        if state.isClosed { return .action(.none, then: .closed) }
        if input == .malformed { return .violation(naming: nil) }
        switch (state, input) {
        case (.initiatorIdle, _):
            return .violation(naming: input.rawValue)
        case (_, .error):
            return .action(.closed(Input.errorSent), then: .closed)
        case (.initiatorHelloSent, .welcome):
            return .action(.established(Samples.welcome), then: .active)
        case (.acceptorAwaitingHello, .hello):
            return .action(.authenticate(Samples.hello), then: .handshake)
        case (.initiatorActive, _), (.acceptorActive, _):
            switch input {
            case .changesets: return .action(.integrate(Input.batch), then: .active)
            case .ack: return .action(.acknowledged(Input.acknowledgement), then: .active)
            case .mark: return .action(.markRequested(7), then: .active)
            case .markReply: return .action(.markReplied(1), then: .active)
            case .ping: return .action(.send(MessageCodec.encode(.pong(nonce: 41))), then: .active)
            case .pong: return .action(.none, then: .active)
            default: return .violation(naming: input.rawValue)
            }
        default:
            return .violation(naming: input.rawValue)
        }
    }
}

/// Sessions in the active state, with chosen windows.
enum Active {
    /// A session of `side` that is active: it takes `ourWindow` bytes unacknowledged, the other side
    /// `theirWindow`, and the acceptor's largest message is `maximumMessage`.
    static func session(
        _ side: SessionStateMachine.Side, ourWindow: UInt64 = 64 << 10, theirWindow: UInt64 = 64 << 10,
        maximumMessage: UInt64 = 1 << 20, keepalive: UInt64 = 20, limits: MessageLimits = .standard,
        at now: ContinuousClock.Instant, sourceLocation: SourceLocation = #_sourceLocation
    ) -> SessionStateMachine {
        let window = side == .initiator ? ourWindow : theirWindow
        let hello = Hello(replica: ReplicaID(rawValue: 1), role: .app, vector: Samples.vector, window: window)
        let welcome = Welcome(
            version: 1, replica: ReplicaID(rawValue: 2), vector: Samples.vector,
            window: side == .initiator ? theirWindow : ourWindow, maximumMessageBytes: maximumMessage,
            keepaliveSeconds: keepalive)
        var machine: SessionStateMachine
        switch side {
        case .initiator:
            machine = SessionStateMachine(initiating: hello, limits: limits, now: now)
            _ = machine.start(now: now)
            _ = machine.received(MessageCodec.encode(.welcome(welcome)), now: now)
        case .acceptor:
            machine = SessionStateMachine(accepting: limits, now: now)
            _ = machine.received(MessageCodec.encode(.hello(hello)), now: now)
            _ = machine.accept(welcome, now: now)
        }
        #expect(machine.isActive, sourceLocation: sourceLocation)
        return machine
    }

    /// Changesets whose `changesets` message, numbered `number` with an empty progress vector and `more` false, is
    /// exactly `size` bytes (at least 6).
    static func changesets(framing size: Int, number: UInt64) -> [[UInt8]] {
        for extra in 0..<3 {
            for length in stride(from: max(0, size - 6), through: 0, by: -1) {
                let changesets = [[UInt8](repeating: 0x42, count: length)] + Array(repeating: [UInt8](), count: extra)
                let batch = ChangesetBatch(
                    number: number, changesets: changesets, progress: VersionVector(), more: false)
                let count = MessageCodec.encode(.changesets(batch)).count
                if count == size { return changesets }
                if count < size { break }
            }
        }
        Issue.record("no changesets message of \(size) bytes")
        return []
    }

    /// A `changesets` frame of exactly `size` bytes.
    static func frame(number: UInt64, size: Int) -> [UInt8] {
        let batch = ChangesetBatch(
            number: number, changesets: changesets(framing: size, number: number), progress: VersionVector(),
            more: false)
        let frame = MessageCodec.encode(.changesets(batch))
        #expect(frame.count == size)
        return frame
    }

    /// Sends a batch of exactly `size` bytes, returning its frame (nil when refused).
    static func send(
        _ machine: inout SessionStateMachine, size: Int, number: UInt64, at now: ContinuousClock.Instant
    ) -> [UInt8]? {
        machine.sendBatch(
            changesets(framing: size, number: number), progress: VersionVector(), more: false, now: now)
    }
}

/// Expects `action` to close the session sending a protocol violation, and returns the error.
@discardableResult
func expectViolation(
    _ action: SessionStateMachine.Action, naming words: String..., sourceLocation: SourceLocation = #_sourceLocation
) -> SyncError? {
    guard case .closeSending(let error) = action else {
        Issue.record("\(action) is not a protocol violation", sourceLocation: sourceLocation)
        return nil
    }
    #expect(error.code == .protocolViolation, "\(error)", sourceLocation: sourceLocation)
    #expect(error.action == .retry && error.retryAfterSeconds == 5, "\(error)", sourceLocation: sourceLocation)
    for word in words {
        #expect(error.message.contains(word), "\(error.message) does not name \(word)", sourceLocation: sourceLocation)
    }
    return error
}

func decoded(_ frame: [UInt8]?, sourceLocation: SourceLocation = #_sourceLocation) -> Message? {
    guard let frame else {
        Issue.record("no frame", sourceLocation: sourceLocation)
        return nil
    }
    do {
        return try MessageCodec.decode(frame)
    } catch {
        Issue.record("the frame does not decode: \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

// MARK: - The states table

@Suite("Session states: every message in every state")
struct SessionStateTableTests {
    @Test(
        "Each state reacts to each message as docs/Protocol.md's table says",
        arguments: SessionState.allCases, Input.allCases)
    func reaction(state: SessionState, input: Input) {
        let t0 = ContinuousClock.now
        var machine = state.machine(at: t0)
        let action = machine.received(input.frame, now: t0 + .seconds(1))
        do {
            switch Reaction.of(state, input) {
            case .violation(let name):
                if let name {
                    expectViolation(action, naming: name)
                } else {
                    expectViolation(action)
                }
                #expect(machine.isClosed)
                #expect(!machine.isActive)
                #expect(machine.received(Input.ping.frame, now: t0 + .seconds(2)) == .none)
            case .action(let expected, let phase):
                #expect(action == expected)
                switch phase {
                case .handshake:
                    #expect(!machine.isActive)
                    #expect(!machine.isClosed)
                case .active:
                    #expect(machine.isActive)
                    #expect(machine.version == 1)
                case .closed:
                    #expect(machine.isClosed)
                    #expect(!machine.isActive)
                }
            }
        }
    }

    @Test("Before welcome, a session sends nothing but hello: no batches, acks, marks or pings")
    func nothingButHelloBeforeWelcome() {
        let t0 = ContinuousClock.now
        for state in [SessionState.initiatorIdle, .initiatorHelloSent, .acceptorAwaitingHello, .acceptorAuthenticating]
        {
            var machine = state.machine(at: t0)
            #expect(machine.sendBatch([[1]], progress: Samples.vector, more: false, now: t0) == nil)
            #expect(machine.requestMark(now: t0) == nil)
            #expect(machine.replyToMark(1, now: t0) == nil)
            #expect(machine.acknowledge(Acknowledgement(batch: 1, checkpoint: Samples.vector), now: t0) == nil)
            #expect(machine.tick(now: t0 + .seconds(60)) == .none)
            #expect(machine.unacknowledgedBytes == 0)
            #expect(machine.sendBudget == 0)
            #expect(machine.version == nil)
            #expect(!machine.isActive)
            #expect(!machine.isClosed)
        }
        var helloSent = SessionState.initiatorHelloSent.machine(at: t0)
        #expect(helloSent.start(now: t0) == nil)
        var awaitingHello = SessionState.acceptorAwaitingHello.machine(at: t0)
        #expect(awaitingHello.accept(Samples.welcome, now: t0) == nil)
        #expect(!awaitingHello.isActive)
    }

    @Test("start says hello once; the acceptor's accept answers welcome and opens the session")
    func handshake() throws {
        let t0 = ContinuousClock.now
        var initiator = SessionStateMachine(initiating: Samples.hello, now: t0)
        #expect(initiator.side == .initiator)
        let started = initiator.start(now: t0)
        let hello = try #require(started)
        #expect(try MessageCodec.decode(hello) == .hello(Samples.hello))
        #expect(initiator.start(now: t0) == nil)
        var acceptor = SessionStateMachine(accepting: .standard, now: t0)
        #expect(acceptor.side == .acceptor)
        #expect(acceptor.received(hello, now: t0) == .authenticate(Samples.hello))
        let accepted = acceptor.accept(Samples.welcome, now: t0)
        let welcome = try #require(accepted)
        #expect(acceptor.isActive)
        #expect(acceptor.version == 1)
        #expect(acceptor.accept(Samples.welcome, now: t0) == nil)
        #expect(initiator.received(welcome, now: t0) == .established(Samples.welcome))
        #expect(initiator.isActive)
        #expect(initiator.version == 1)
    }
}

// MARK: - Versions, refusals and closing

@Suite("Session versions, refusals and closing")
struct SessionLifecycleTests {
    @Test(
        "A hello offering no version this build speaks is refused with unsupportedVersion",
        arguments: [0...0, 2...5, 2...UInt64.max] as [ClosedRange<UInt64>])
    func unsupportedVersion(versions: ClosedRange<UInt64>) {
        let t0 = ContinuousClock.now
        var acceptor = SessionStateMachine(accepting: .standard, now: t0)
        var hello = Samples.hello
        hello.versions = versions
        let action = acceptor.received(MessageCodec.encode(.hello(hello)), now: t0)
        guard case .closeSending(let error) = action else {
            Issue.record("\(action) is not a refusal")
            return
        }
        #expect(error.code == .unsupportedVersion)
        #expect(error.action == .fatal)
        #expect(error.message.contains("\(versions)"))
        #expect(acceptor.isClosed)
    }

    @Test(
        "A hello offering a range that holds version 1 gets welcome with version 1, whatever welcome said",
        arguments: [0...3, 1...1, 0...UInt64.max, 1...9] as [ClosedRange<UInt64>])
    func negotiatedVersion(versions: ClosedRange<UInt64>) throws {
        let t0 = ContinuousClock.now
        var acceptor = SessionStateMachine(accepting: .standard, now: t0)
        var hello = Samples.hello
        hello.versions = versions
        #expect(acceptor.received(MessageCodec.encode(.hello(hello)), now: t0) == .authenticate(hello))
        var welcome = Samples.welcome
        welcome.version = 77
        guard case .welcome(let sent) = decoded(acceptor.accept(welcome, now: t0)) else {
            Issue.record("accept sent no welcome")
            return
        }
        #expect(sent.version == 1)
        #expect(acceptor.version == 1)
        #expect(SyncProtocol.negotiate(versions) == 1)
    }

    @Test("A welcome choosing a version hello did not offer is a violation", arguments: [0, 2, UInt64.max])
    func welcomeVersionNotOffered(version: UInt64) {
        let t0 = ContinuousClock.now
        var initiator = SessionState.initiatorHelloSent.machine(at: t0)
        var welcome = Samples.welcome
        welcome.version = version
        expectViolation(
            initiator.received(MessageCodec.encode(.welcome(welcome)), now: t0), naming: "version \(version)")
        #expect(initiator.isClosed)
    }

    @Test("A welcome choosing a version inside hello's range opens the session at that version")
    func welcomeVersionOffered() {
        let t0 = ContinuousClock.now
        var hello = Samples.hello
        hello.versions = 1...3
        var initiator = SessionStateMachine(initiating: hello, now: t0)
        _ = initiator.start(now: t0)
        var welcome = Samples.welcome
        welcome.version = 1
        #expect(initiator.received(MessageCodec.encode(.welcome(welcome)), now: t0) == .established(welcome))
        #expect(initiator.version == 1)
    }

    static let errors = [
        SyncError(.unauthorized, .fatal, "the token expired"),
        SyncError(.roleRefused, .fatal, "peer 0000000000000002 is not configured"),
        SyncError(.unavailable, .retry, "shutting down", retryAfterSeconds: 30),
        SyncError(.resetRequired, .reset, "the log was compacted past 0000000000000001:17"),
        SyncError(SyncError.Code(rawValue: 999), .retry, "from the future", retryAfterSeconds: .max),
    ]

    @Test(
        "refuse closes an authenticating session and returns an error frame of the given error",
        arguments: SessionLifecycleTests.errors)
    func refuse(error: SyncError) {
        let t0 = ContinuousClock.now
        var acceptor = SessionState.acceptorAuthenticating.machine(at: t0)
        let frame = acceptor.refuse(error)
        #expect(decoded(frame) == .error(error))
        #expect(acceptor.isClosed)
        #expect(acceptor.accept(Samples.welcome, now: t0) == nil)
    }

    @Test(
        "close returns an error frame of the given error once the hello is out, then nothing",
        arguments: [
            SessionState.initiatorHelloSent, .acceptorAwaitingHello, .acceptorAuthenticating, .initiatorActive,
            .acceptorActive,
        ])
    func close(state: SessionState) {
        let t0 = ContinuousClock.now
        for error in Self.errors {
            var machine = state.machine(at: t0)
            #expect(decoded(machine.close(error)) == .error(error))
            #expect(machine.isClosed)
            #expect(machine.close(error) == nil)
        }
    }

    @Test("close before hello is sent closes without a frame")
    func closeBeforeHello() {
        var machine = SessionState.initiatorIdle.machine(at: .now)
        #expect(machine.close(SyncError(.unavailable, .retry, "offline")) == nil)
        #expect(machine.isClosed)
        #expect(machine.start(now: .now) == nil)
    }

    enum Closing: String, CaseIterable, Sendable {
        case closedHere, refused, errorReceived, violationReceived, timedOut
    }

    @Test("After the session closed, every event is ignored", arguments: SessionLifecycleTests.Closing.allCases)
    func everythingIgnoredAfterClosing(closing: Closing) {
        let t0 = ContinuousClock.now
        var machine = SessionState.acceptorActive.machine(at: t0)
        switch closing {
        case .closedHere:
            #expect(machine.close(SyncError(.storage, .retry, "disk full")) != nil)
        case .refused:
            machine = SessionState.acceptorAuthenticating.machine(at: t0)
            _ = machine.refuse(SyncError(.unauthorized, .fatal, "no"))
        case .errorReceived:
            #expect(machine.received(Input.error.frame, now: t0) == .closed(Input.errorSent))
        case .violationReceived:
            expectViolation(machine.received(Input.welcome.frame, now: t0))
        case .timedOut:
            guard case .closeSending(let error) = machine.tick(now: t0 + .seconds(61)) else {
                Issue.record("no timeout")
                return
            }
            #expect(error.code == .timeout)
        }
        #expect(machine.isClosed)
        let later = t0 + .seconds(1000)
        for input in Input.allCases {
            #expect(machine.received(input.frame, now: later) == .none)
        }
        #expect(machine.received([], now: later) == .none)
        #expect(machine.tick(now: later) == .none)
        #expect(machine.tick(now: later + .seconds(1000)) == .none)
        #expect(machine.sendBatch([[1]], progress: Samples.vector, more: false, now: later) == nil)
        #expect(machine.acknowledge(Acknowledgement(batch: 1, checkpoint: Samples.vector), now: later) == nil)
        #expect(machine.requestMark(now: later) == nil)
        #expect(machine.replyToMark(7, now: later) == nil)
        #expect(machine.accept(Samples.welcome, now: later) == nil)
        #expect(machine.start(now: later) == nil)
        #expect(machine.close(SyncError(.storage, .retry, "again")) == nil)
        #expect(machine.isClosed)
        #expect(!machine.isActive)
        #expect(machine.version == nil)
        #expect(machine.unacknowledgedBytes == 0)
        #expect(machine.sendBudget == 0)
    }
}

// MARK: - The active state

@Suite("Session active state: batches, acks, windows, marks, pings")
struct SessionActiveStateTests {
    static let sides: [SessionStateMachine.Side] = [.initiator, .acceptor]

    @Test("Batches received must be numbered 1, 2, 3, ...", arguments: SessionActiveStateTests.sides)
    func receivedBatchesAreConsecutive(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, at: t0)
        for number: UInt64 in 1...3 {
            let batch = ChangesetBatch(
                number: number, changesets: [[UInt8(number)]], progress: Samples.vector, more: true)
            #expect(machine.received(MessageCodec.encode(.changesets(batch)), now: t0) == .integrate(batch))
        }
        for sequence: [UInt64] in [[0], [2], [1, 1], [1, 3], [1, 2, 2], [1, 2, 1], [.max]] {
            var machine = Active.session(side, at: t0)
            for (index, number) in sequence.enumerated() {
                let action = machine.received(Active.frame(number: number, size: 20), now: t0)
                if index < sequence.count - 1 {
                    guard case .integrate = action else {
                        Issue.record("\(sequence): batch \(number) gave \(action)")
                        break
                    }
                } else {
                    expectViolation(action, naming: "batch \(number)")
                    #expect(machine.isClosed)
                }
            }
        }
    }

    @Test(
        "Batches sent are numbered 1, 2, 3, ..., a refused one taking no number",
        arguments: SessionActiveStateTests.sides)
    func sentBatchesAreConsecutive(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, theirWindow: 100, maximumMessage: 1000, at: t0)
        var numbers: [UInt64] = []
        for size in [40, 40, 40, 20] {
            guard let frame = Active.send(&machine, size: size, number: UInt64(numbers.count + 1), at: t0) else {
                #expect(size == 40 && numbers.count == 2)  // the third 40 does not fit in 100
                continue
            }
            guard case .changesets(let batch) = decoded(frame) else { continue }
            numbers.append(batch.number)
        }
        #expect(numbers == [1, 2, 3])
        #expect(machine.lastBatchSent == 3)
        #expect(SessionState.initiatorHelloSent.machine(at: t0).lastBatchSent == 0)
    }

    @Test(
        "An ack below the oldest unacknowledged batch or above the last sent is a violation",
        arguments: SessionActiveStateTests.sides)
    func ackOutsideTheUnacknowledged(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        func sentThree() -> SessionStateMachine {
            var machine = Active.session(side, at: t0)
            for number: UInt64 in 1...3 { _ = Active.send(&machine, size: 20, number: number, at: t0) }
            #expect(machine.unacknowledgedBytes == 60)
            return machine
        }
        func ack(_ batch: UInt64) -> [UInt8] {
            MessageCodec.encode(.ack(Acknowledgement(batch: batch, checkpoint: Samples.vector)))
        }
        for acks: [UInt64] in [[0], [4], [.max], [2, 1], [2, 2], [3, 3], [1, 2, 3, 3], [3, 4]] {
            var machine = sentThree()
            for (index, batch) in acks.enumerated() {
                let action = machine.received(ack(batch), now: t0)
                if index < acks.count - 1 {
                    #expect(action == .acknowledged(Acknowledgement(batch: batch, checkpoint: Samples.vector)))
                } else {
                    expectViolation(action, naming: "ack for batch \(batch)")
                }
            }
        }
        var nothingSent = Active.session(side, at: t0)
        expectViolation(nothingSent.received(ack(0), now: t0), naming: "ack for batch 0", "none")
        nothingSent = Active.session(side, at: t0)
        expectViolation(nothingSent.received(ack(1), now: t0), naming: "ack for batch 1", "none")
    }

    @Test("A cumulative ack frees the window of every batch up to it", arguments: SessionActiveStateTests.sides)
    func cumulativeAckFreesTheWindow(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, theirWindow: 100, maximumMessage: 1000, at: t0)
        #expect(machine.unacknowledgedBytes == 0)
        #expect(machine.sendBudget == 1000)
        #expect(Active.send(&machine, size: 30, number: 1, at: t0) != nil)
        #expect(machine.unacknowledgedBytes == 30)
        #expect(machine.sendBudget == 70)
        #expect(Active.send(&machine, size: 71, number: 2, at: t0) == nil)
        #expect(machine.unacknowledgedBytes == 30)
        #expect(Active.send(&machine, size: 30, number: 2, at: t0) != nil)
        #expect(machine.sendBudget == 40)
        #expect(Active.send(&machine, size: 40, number: 3, at: t0) != nil)
        #expect(machine.unacknowledgedBytes == 100)
        #expect(machine.sendBudget == 0)
        #expect(Active.send(&machine, size: 6, number: 4, at: t0) == nil)

        let ack2 = Acknowledgement(batch: 2, checkpoint: Samples.vector)
        #expect(machine.received(MessageCodec.encode(.ack(ack2)), now: t0) == .acknowledged(ack2))
        #expect(machine.unacknowledgedBytes == 40)
        #expect(machine.sendBudget == 60)
        let ack3 = Acknowledgement(batch: 3, checkpoint: Samples.vector)
        #expect(machine.received(MessageCodec.encode(.ack(ack3)), now: t0) == .acknowledged(ack3))
        #expect(machine.unacknowledgedBytes == 0)
        #expect(machine.sendBudget == 1000)
    }

    @Test(
        "With nothing unacknowledged one message larger than the window goes, up to the largest message",
        arguments: SessionActiveStateTests.sides)
    func oneMessageOverTheWindow(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, theirWindow: 100, maximumMessage: 1000, at: t0)
        #expect(Active.send(&machine, size: 1001, number: 1, at: t0) == nil)
        #expect(machine.unacknowledgedBytes == 0)
        #expect(Active.send(&machine, size: 1000, number: 1, at: t0) != nil)
        #expect(machine.unacknowledgedBytes == 1000)
        #expect(machine.sendBudget == 0)
        #expect(Active.send(&machine, size: 6, number: 2, at: t0) == nil)
        let ack = Acknowledgement(batch: 1, checkpoint: Samples.vector)
        #expect(machine.received(MessageCodec.encode(.ack(ack)), now: t0) == .acknowledged(ack))
        #expect(machine.sendBudget == 1000)
        guard case .changesets(let batch) = decoded(Active.send(&machine, size: 1000, number: 2, at: t0)) else {
            return
        }
        #expect(batch.number == 2)

        // A window of 0: one message at a time.
        var zero = Active.session(side, theirWindow: 0, maximumMessage: 1000, at: t0)
        #expect(Active.send(&zero, size: 10, number: 1, at: t0) != nil)
        #expect(Active.send(&zero, size: 6, number: 2, at: t0) == nil)

        // This side's own limit caps the message as well as the other side's.
        let small = smallLimits { $0.maximumMessageBytes = 500 }
        var limited = Active.session(side, theirWindow: 100, maximumMessage: 1000, limits: small, at: t0)
        #expect(limited.sendBudget == 500)
        #expect(Active.send(&limited, size: 501, number: 1, at: t0) == nil)
        #expect(Active.send(&limited, size: 500, number: 1, at: t0) != nil)
    }

    @Test(
        "A sender exceeding this side's window is a violation; up to it is not",
        arguments: SessionActiveStateTests.sides)
    func receivedOverTheWindow(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, ourWindow: 100, at: t0)
        guard case .integrate = machine.received(Active.frame(number: 1, size: 60), now: t0),
            case .integrate = machine.received(Active.frame(number: 2, size: 40), now: t0)
        else {
            Issue.record("100 bytes in a window of 100 were refused")
            return
        }
        expectViolation(machine.received(Active.frame(number: 3, size: 6), now: t0), naming: "window")

        machine = Active.session(side, ourWindow: 100, at: t0)
        _ = machine.received(Active.frame(number: 1, size: 60), now: t0)
        expectViolation(machine.received(Active.frame(number: 2, size: 41), now: t0), naming: "batch 2", "window")
        #expect(machine.isClosed)

        // Acknowledging frees the window; with nothing unacknowledged, one message may be larger than it.
        machine = Active.session(side, ourWindow: 100, at: t0)
        _ = machine.received(Active.frame(number: 1, size: 60), now: t0)
        _ = machine.received(Active.frame(number: 2, size: 40), now: t0)
        #expect(machine.acknowledge(Acknowledgement(batch: 1, checkpoint: Samples.vector), now: t0) != nil)
        guard case .integrate = machine.received(Active.frame(number: 3, size: 60), now: t0) else {
            Issue.record("the window freed by the ack of batch 1 was not")
            return
        }
        expectViolation(machine.received(Active.frame(number: 4, size: 6), now: t0), naming: "window")

        machine = Active.session(side, ourWindow: 100, at: t0)
        guard case .integrate = machine.received(Active.frame(number: 1, size: 5000), now: t0) else {
            Issue.record("a first message over the window was refused")
            return
        }
        expectViolation(machine.received(Active.frame(number: 2, size: 6), now: t0), naming: "window")
        machine = Active.session(side, ourWindow: 100, at: t0)
        _ = machine.received(Active.frame(number: 1, size: 5000), now: t0)
        #expect(machine.acknowledge(Acknowledgement(batch: 1, checkpoint: Samples.vector), now: t0) != nil)
        guard case .integrate = machine.received(Active.frame(number: 2, size: 5000), now: t0) else {
            Issue.record("a message over the window was refused with nothing unacknowledged")
            return
        }
    }

    @Test("An acceptor refuses a changesets message over the largest message its welcome announced")
    func receivedOverTheAnnouncedMaximumMessage() {
        let t0 = ContinuousClock.now
        var acceptor = Active.session(.acceptor, ourWindow: 100, maximumMessage: 1000, at: t0)
        guard case .integrate = acceptor.received(Active.frame(number: 1, size: 1000), now: t0) else {
            Issue.record("a message of the announced maximum was refused")
            return
        }
        #expect(acceptor.acknowledge(Acknowledgement(batch: 1, checkpoint: Samples.vector), now: t0) != nil)
        expectViolation(acceptor.received(Active.frame(number: 2, size: 1001), now: t0))
    }

    @Test(
        "acknowledge returns the ack frame for a batch received and not acknowledged, nil otherwise",
        arguments: SessionActiveStateTests.sides)
    func acknowledge(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, at: t0)
        let ack = { (batch: UInt64) in Acknowledgement(batch: batch, checkpoint: Samples.vector) }
        #expect(machine.acknowledge(ack(0), now: t0) == nil)
        #expect(machine.acknowledge(ack(1), now: t0) == nil)
        for number: UInt64 in 1...3 { _ = machine.received(Active.frame(number: number, size: 20), now: t0) }
        #expect(machine.acknowledge(ack(4), now: t0) == nil)
        let rejected = Acknowledgement(
            batch: 2, checkpoint: Samples.vector,
            rejected: [.init(dot: Dot(origin: ReplicaID(rawValue: 3), sequence: 9), reason: "schema conflict")])
        #expect(decoded(machine.acknowledge(rejected, now: t0)) == .ack(rejected))
        #expect(machine.acknowledge(ack(1), now: t0) == nil)
        #expect(machine.acknowledge(ack(2), now: t0) == nil)
        #expect(decoded(machine.acknowledge(ack(3), now: t0)) == .ack(ack(3)))
        #expect(machine.acknowledge(ack(3), now: t0) == nil)
        #expect(machine.isActive)
    }

    @Test(
        "A markReply for a request made gives markReplied once; for any other it is a violation",
        arguments: SessionActiveStateTests.sides)
    func markReplies(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, at: t0)
        guard let first = machine.requestMark(now: t0), let second = machine.requestMark(now: t0) else {
            Issue.record("no mark")
            return
        }
        #expect(first.request == 1)
        #expect(second.request == 2)
        #expect(decoded(first.frame) == .mark(request: 1))
        #expect(decoded(second.frame) == .mark(request: 2))
        #expect(machine.received(MessageCodec.encode(.markReply(request: 2)), now: t0) == .markReplied(2))
        #expect(machine.received(MessageCodec.encode(.markReply(request: 1)), now: t0) == .markReplied(1))
        expectViolation(machine.received(MessageCodec.encode(.markReply(request: 1)), now: t0), naming: "request 1")

        for request: UInt64 in [0, 3, .max] {
            var machine = Active.session(side, at: t0)
            _ = machine.requestMark(now: t0)
            _ = machine.requestMark(now: t0)
            expectViolation(
                machine.received(MessageCodec.encode(.markReply(request: request)), now: t0),
                naming: "request \(request)")
        }
    }

    @Test(
        "A mark received is passed on, and replyToMark answers it with the same request",
        arguments: SessionActiveStateTests.sides)
    func markRequested(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, at: t0)
        for request: UInt64 in [1, 0, .max, 1] {
            #expect(machine.received(MessageCodec.encode(.mark(request: request)), now: t0) == .markRequested(request))
            #expect(decoded(machine.replyToMark(request, now: t0)) == .markReply(request: request))
        }
        #expect(machine.isActive)
    }

    @Test(
        "replyToMark answers only a mark the other side asked for, once",
        arguments: SessionActiveStateTests.sides)
    func replyOnlyToRequestedMarks(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, at: t0)
        #expect(machine.replyToMark(3, now: t0) == nil)
        #expect(machine.received(MessageCodec.encode(.mark(request: 3)), now: t0) == .markRequested(3))
        #expect(machine.replyToMark(4, now: t0) == nil)
        #expect(decoded(machine.replyToMark(3, now: t0)) == .markReply(request: 3))
        #expect(machine.replyToMark(3, now: t0) == nil)
        #expect(machine.isActive)
    }

    @Test("A ping gets a pong with the same nonce", arguments: SessionActiveStateTests.sides, [0, 41, UInt64.max])
    func pingGetsPong(side: SessionStateMachine.Side, nonce: UInt64) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, at: t0)
        guard case .send(let frame) = machine.received(MessageCodec.encode(.ping(nonce: nonce)), now: t0) else {
            Issue.record("no pong")
            return
        }
        #expect(decoded(frame) == .pong(nonce: nonce))
        #expect(machine.isActive)
    }

    @Test(
        "A pong answering our ping sets roundTrip; any other pong changes nothing",
        arguments: SessionActiveStateTests.sides)
    func roundTrip(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, keepalive: 10, at: t0)
        #expect(machine.roundTrip == nil)
        #expect(machine.received(MessageCodec.encode(.pong(nonce: 1)), now: t0) == .none)
        #expect(machine.roundTrip == nil)
        let pingedAt = t0 + .seconds(10)
        guard case .send(let frame) = machine.tick(now: pingedAt), case .ping(let nonce) = decoded(frame) else {
            Issue.record("no ping after the keepalive interval")
            return
        }
        #expect(machine.received(MessageCodec.encode(.pong(nonce: nonce &+ 1)), now: pingedAt) == .none)
        #expect(machine.roundTrip == nil)
        #expect(machine.received(MessageCodec.encode(.pong(nonce: nonce)), now: pingedAt + .milliseconds(250)) == .none)
        #expect(machine.roundTrip == .milliseconds(250))
        #expect(machine.isActive)

        // The next ping has another nonce, and its pong measures again.
        let next = pingedAt + .seconds(10)
        guard case .send(let again) = machine.tick(now: next), case .ping(let second) = decoded(again) else {
            Issue.record("no second ping")
            return
        }
        #expect(second != nonce)
        _ = machine.received(MessageCodec.encode(.pong(nonce: second)), now: next + .milliseconds(40))
        #expect(machine.roundTrip == .milliseconds(40))
    }

    @Test("tick pings after a keepalive interval without sending", arguments: SessionActiveStateTests.sides)
    func keepalivePing(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, keepalive: 10, at: t0)
        #expect(machine.tick(now: t0 + .milliseconds(9_999)) == .none)
        guard case .send(let first) = machine.tick(now: t0 + .seconds(10)), case .ping(let nonce) = decoded(first)
        else {
            Issue.record("no ping after 10 s")
            return
        }
        #expect(machine.tick(now: t0 + .seconds(15)) == .none)
        guard case .send(let second) = machine.tick(now: t0 + .seconds(20)), case .ping(let next) = decoded(second)
        else {
            Issue.record("no ping 10 s after the first")
            return
        }
        #expect(next != nonce)

        // Anything sent puts the ping off: a batch, an ack, a mark, a mark reply, a pong.
        let sends: [(inout SessionStateMachine, ContinuousClock.Instant) -> Void] = [
            { _ = $0.sendBatch([[1]], progress: Samples.vector, more: false, now: $1) },
            { machine, now in
                _ = machine.received(Active.frame(number: 1, size: 10), now: now)
                _ = machine.acknowledge(Acknowledgement(batch: 1, checkpoint: Samples.vector), now: now)
            },
            { _ = $0.requestMark(now: $1) },
            { machine, now in
                _ = machine.received(MessageCodec.encode(.mark(request: 5)), now: now)
                _ = machine.replyToMark(5, now: now)
            },
            { _ = $0.received(MessageCodec.encode(.ping(nonce: 3)), now: $1) },
        ]
        for send in sends {
            var machine = Active.session(side, keepalive: 10, at: t0)
            send(&machine, t0 + .seconds(8))
            #expect(machine.tick(now: t0 + .seconds(12)) == .none)
            #expect(machine.tick(now: t0 + .milliseconds(17_999)) == .none)
            guard case .send(let frame) = machine.tick(now: t0 + .seconds(18)), case .ping = decoded(frame) else {
                Issue.record("no ping 10 s after the last send")
                continue
            }
        }
    }

    @Test(
        "tick closes with timeout (retry) after three intervals without receiving",
        arguments: SessionActiveStateTests.sides)
    func keepaliveTimeout(side: SessionStateMachine.Side) {
        let t0 = ContinuousClock.now
        var machine = Active.session(side, keepalive: 10, at: t0)
        for seconds in [10, 20, 30] {
            guard case .send = machine.tick(now: t0 + .seconds(seconds)) else {
                Issue.record("no ping at \(seconds) s")
                return
            }
        }
        #expect(machine.isActive)
        guard case .closeSending(let error) = machine.tick(now: t0 + .milliseconds(30_001)) else {
            Issue.record("no timeout after 30 s without receiving")
            return
        }
        #expect(error.code == .timeout)
        #expect(error.action == .retry)
        #expect(machine.isClosed)

        // Anything received puts the timeout off.
        machine = Active.session(side, keepalive: 10, at: t0)
        _ = machine.received(MessageCodec.encode(.pong(nonce: 99)), now: t0 + .seconds(25))
        _ = machine.tick(now: t0 + .seconds(40))
        _ = machine.tick(now: t0 + .seconds(50))
        #expect(machine.tick(now: t0 + .seconds(55)) == .none)
        #expect(machine.isActive)
        guard case .closeSending(let late) = machine.tick(now: t0 + .milliseconds(55_001)) else {
            Issue.record("no timeout 30 s after the last message received")
            return
        }
        #expect(late.code == .timeout)
        #expect(late.action == .retry)
    }

    @Test(
        "A handshake that does not finish in 90 s is closed with timeout",
        arguments: [SessionState.initiatorHelloSent, .acceptorAwaitingHello, .acceptorAuthenticating])
    func handshakeTimeout(state: SessionState) {
        let t0 = ContinuousClock.now
        var machine = state.machine(at: t0)
        #expect(machine.tick(now: t0 + .seconds(89)) == .none)
        #expect(machine.tick(now: t0 + .seconds(90)) == .none)
        #expect(!machine.isClosed)
        guard case .closeSending(let error) = machine.tick(now: t0 + .milliseconds(90_001)) else {
            Issue.record("the handshake did not time out")
            return
        }
        #expect(error.code == .timeout)
        #expect(error.action == .retry)
        #expect(machine.isClosed)

        // Authenticating counts from the hello.
        var acceptor = SessionStateMachine(accepting: .standard, now: t0)
        _ = acceptor.received(Input.hello.frame, now: t0 + .seconds(60))
        #expect(acceptor.tick(now: t0 + .seconds(149)) == .none)
        guard case .closeSending(let late) = acceptor.tick(now: t0 + .seconds(151)) else {
            Issue.record("authentication did not time out 90 s after hello")
            return
        }
        #expect(late.code == .timeout)
    }

    @Test("An initiator that has not said hello does not time out")
    func idleDoesNotTimeOut() {
        let t0 = ContinuousClock.now
        var machine = SessionState.initiatorIdle.machine(at: t0)
        #expect(machine.tick(now: t0 + .seconds(10_000)) == .none)
        #expect(!machine.isClosed)
    }

    @Test("A welcome with every number at its largest opens a session that does not trap")
    func extremeWelcome() {
        let t0 = ContinuousClock.now
        var initiator = SessionState.initiatorHelloSent.machine(at: t0)
        let welcome = Welcome(
            version: 1, replica: ReplicaID(rawValue: .max), vector: Samples.maximalVector, yours: .max, window: .max,
            maximumMessageBytes: .max, keepaliveSeconds: .max)
        #expect(initiator.received(MessageCodec.encode(.welcome(welcome)), now: t0) == .established(welcome))
        #expect(initiator.sendBudget == SyncProtocol.maximumMessageBytes)
        #expect(initiator.sendBatch([[1]], progress: Samples.vector, more: false, now: t0) != nil)
        // The keepalive is held to a day: no ping before it, one at it.
        #expect(initiator.tick(now: t0 + .seconds(86_399)) == .none)
        #expect(initiator.isActive)
        guard case .send(let frame) = initiator.tick(now: t0 + .seconds(86_400)), case .ping = decoded(frame) else {
            Issue.record("no ping after a day without sending")
            return
        }
    }
}

// MARK: - Two machines back to back

@Suite("Session state machines wired back to back")
struct SessionBackToBackTests {
    /// One side: its machine, what it has to send, and what it received.
    struct Side {
        var machine: SessionStateMachine
        var outbox: [[UInt8]]
        var sentAll: [[UInt8]]
        var integrated: [[UInt8]] = []
        var lastIntegrated: UInt64 = 0
        var lastAcknowledgedHere: UInt64 = 0
        var highestAckReceived: UInt64 = 0
        var marksToAnswer: [UInt64] = []
        var marksReplied: [UInt64] = []
        var batchesSent = 0
        var refusedSends = 0
        var pingsAnswered = 0
        var pongs = 0

        init(_ machine: SessionStateMachine, outbox: [[UInt8]]) {
            self.machine = machine
            self.outbox = outbox
            sentAll = outbox
        }
    }

    @Test("A handshake, then batches both ways under small windows, acks, marks and pings, then close")
    func exchange() throws {
        var random = SplitMix64(seed: 0x5E55_1011)
        let t0 = ContinuousClock.now
        var now = t0
        let changesets = { (count: Int, random: inout SplitMix64) -> [[UInt8]] in
            (0..<count).map { index in
                [UInt8](repeating: UInt8(truncatingIfNeeded: index), count: 1 + random.below(150))
            }
        }
        let hello = Hello(
            replica: ReplicaID(rawValue: 0xA), role: .app, name: "back to back", vector: VersionVector(), window: 300)
        let welcome = Welcome(
            version: 1, replica: ReplicaID(rawValue: 0xD), vector: VersionVector(), window: 200,
            maximumMessageBytes: 4096, keepaliveSeconds: 5)

        // The handshake.
        var initiatorMachine = SessionStateMachine(initiating: hello, now: now)
        var acceptorMachine = SessionStateMachine(accepting: .standard, now: now)
        let started = initiatorMachine.start(now: now)
        let helloFrame = try #require(started)
        #expect(acceptorMachine.received(helloFrame, now: now) == .authenticate(hello))
        let accepted = acceptorMachine.accept(welcome, now: now)
        let welcomeFrame = try #require(accepted)
        #expect(initiatorMachine.received(welcomeFrame, now: now) == .established(welcome))
        var initiator = Side(initiatorMachine, outbox: changesets(40, &random))
        var acceptor = Side(acceptorMachine, outbox: changesets(30, &random))

        // Each asks the other for a mark at once: its reply must come after everything the other held.
        var toAcceptor: [[UInt8]] = []
        var toInitiator: [[UInt8]] = []
        let initiatorMark = initiator.machine.requestMark(now: now)
        toAcceptor.append(try #require(initiatorMark?.frame))
        let acceptorMark = acceptor.machine.requestMark(now: now)
        toInitiator.append(try #require(acceptorMark?.frame))

        var rounds = 0
        while rounds < 500 {
            rounds += 1
            Self.send(&initiator, to: &toAcceptor, random: &random, now: now)
            Self.send(&acceptor, to: &toInitiator, random: &random, now: now)
            now += .milliseconds(100)
            let inFlightToAcceptor = toAcceptor
            let inFlightToInitiator = toInitiator
            toAcceptor = []
            toInitiator = []
            for frame in inFlightToAcceptor {
                Self.receive(frame, at: &acceptor, from: initiator, replies: &toInitiator, now: now)
            }
            for frame in inFlightToInitiator {
                Self.receive(frame, at: &initiator, from: acceptor, replies: &toAcceptor, now: now)
            }
            // Commit, then acknowledge cumulatively whatever was integrated this round.
            Self.acknowledge(&initiator, to: &toAcceptor, now: now)
            Self.acknowledge(&acceptor, to: &toInitiator, now: now)
            // Every fifth round the link is quiet for longer than the keepalive interval.
            if rounds % 5 == 0 { now += .seconds(6) }
            Self.tick(&initiator, to: &toAcceptor, now: now)
            Self.tick(&acceptor, to: &toInitiator, now: now)
            if initiator.machine.isClosed || acceptor.machine.isClosed { break }
            let done =
                initiator.outbox.isEmpty && acceptor.outbox.isEmpty && toAcceptor.isEmpty && toInitiator.isEmpty
                && initiator.machine.unacknowledgedBytes == 0 && acceptor.machine.unacknowledgedBytes == 0
                && rounds > 20
            if done { break }
        }

        #expect(initiator.machine.isActive)
        #expect(acceptor.machine.isActive)
        #expect(initiator.integrated == acceptor.sentAll)
        #expect(acceptor.integrated == initiator.sentAll)
        #expect(initiator.highestAckReceived == UInt64(initiator.batchesSent))
        #expect(acceptor.highestAckReceived == UInt64(acceptor.batchesSent))
        #expect(initiator.machine.unacknowledgedBytes == 0)
        #expect(acceptor.machine.unacknowledgedBytes == 0)
        #expect(initiator.marksReplied == [1])
        #expect(acceptor.marksReplied == [1])
        // The windows (200 and 300 bytes for 40 and 30 changesets of up to 150) held the senders back.
        #expect(initiator.refusedSends > 0)
        #expect(acceptor.refusedSends > 0)
        #expect(initiator.pingsAnswered > 0 && acceptor.pingsAnswered > 0)
        #expect(initiator.pongs > 0 && acceptor.pongs > 0)
        #expect((initiator.machine.roundTrip ?? .zero) > .zero)
        #expect((acceptor.machine.roundTrip ?? .zero) > .zero)

        // The initiator ends the session; the acceptor reads why.
        let goodbye = SyncError(.superseded, .fatal, "a newer session of this replica")
        let closing = initiator.machine.close(goodbye)
        let frame = try #require(closing)
        #expect(acceptor.machine.received(frame, now: now) == .closed(goodbye))
        #expect(initiator.machine.isClosed)
        #expect(acceptor.machine.isClosed)
    }

    /// Sends batches of one to three changesets while the window takes them, and answers marks once everything
    /// held is sent.
    static func send(
        _ side: inout Side, to queue: inout [[UInt8]], random: inout SplitMix64, now: ContinuousClock.Instant
    ) {
        while !side.outbox.isEmpty {
            let count = min(side.outbox.count, 1 + random.below(3))
            let batch = Array(side.outbox.prefix(count))
            var progress = VersionVector()
            progress.advance(ReplicaID(rawValue: 1), to: UInt64(side.sentAll.count - side.outbox.count + count))
            guard
                let frame = side.machine.sendBatch(
                    batch, progress: progress, more: side.outbox.count > count, now: now)
            else {
                side.refusedSends += 1
                break
            }
            side.outbox.removeFirst(count)
            side.batchesSent += 1
            queue.append(frame)
        }
        if side.outbox.isEmpty {
            for request in side.marksToAnswer {
                if let frame = side.machine.replyToMark(request, now: now) { queue.append(frame) }
            }
            side.marksToAnswer = []
        }
    }

    static func receive(
        _ frame: [UInt8], at side: inout Side, from other: Side, replies: inout [[UInt8]], now: ContinuousClock.Instant
    ) {
        let action = side.machine.received(frame, now: now)
        switch action {
        case .integrate(let batch):
            #expect(batch.number == side.lastIntegrated + 1)
            side.integrated += batch.changesets
            side.lastIntegrated = batch.number
        case .acknowledged(let ack):
            #expect(ack.batch > side.highestAckReceived)
            side.highestAckReceived = ack.batch
        case .markRequested(let request):
            side.marksToAnswer.append(request)
        case .markReplied(let request):
            // Batches are processed in order: everything the other side held at the mark is here.
            #expect(side.integrated == other.sentAll)
            side.marksReplied.append(request)
        case .send(let reply):
            #expect(decoded(reply).map { if case .pong = $0 { true } else { false } } == true)
            side.pingsAnswered += 1
            replies.append(reply)
        case .none:
            if case .pong = decoded(frame) { side.pongs += 1 } else { Issue.record("\(hex(frame)) was ignored") }
        case .authenticate, .established, .closeSending, .closed, .query, .objects, .queryState, .base:
            Issue.record("unexpected \(action)")
        }
    }

    static func acknowledge(_ side: inout Side, to queue: inout [[UInt8]], now: ContinuousClock.Instant) {
        guard side.lastIntegrated > side.lastAcknowledgedHere else { return }
        var checkpoint = VersionVector()
        checkpoint.advance(ReplicaID(rawValue: 1), to: UInt64(side.integrated.count))
        let ack = Acknowledgement(batch: side.lastIntegrated, checkpoint: checkpoint)
        guard let frame = side.machine.acknowledge(ack, now: now) else {
            Issue.record("acknowledge(\(side.lastIntegrated)) gave no frame")
            return
        }
        side.lastAcknowledgedHere = side.lastIntegrated
        queue.append(frame)
    }

    static func tick(_ side: inout Side, to queue: inout [[UInt8]], now: ContinuousClock.Instant) {
        switch side.machine.tick(now: now) {
        case .none:
            break
        case .send(let frame):
            #expect(decoded(frame).map { if case .ping = $0 { true } else { false } } == true)
            queue.append(frame)
        case let other:
            Issue.record("tick gave \(other)")
        }
    }
}

@Suite("Session state machine: keepalive bounds")
struct SessionKeepaliveBoundsTests {
    @Test("A welcome announcing keepalive 0 pings every second")
    func zeroKeepalive() {
        let t0 = ContinuousClock.now
        var machine = SessionState.initiatorHelloSent.machine(at: t0)
        let welcome = Welcome(version: 1, replica: ReplicaID(rawValue: 9), vector: Samples.vector, keepaliveSeconds: 0)
        #expect(machine.received(MessageCodec.encode(.welcome(welcome)), now: t0) == .established(welcome))
        #expect(machine.tick(now: t0 + .milliseconds(999)) == .none)
        guard case .send = machine.tick(now: t0 + .seconds(1)) else {
            Issue.record("no ping after a second")
            return
        }
    }
}
