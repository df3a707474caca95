import Foundation
import Testing
import TributaryModel
import TributaryTestSupport
import TributaryTestTags

@testable import TributaryProtocol

/// Feeds the message decoder random bytes and mutated valid encodings: it must return a message or throw a
/// ``SyncError`` (a trap would end the test process), what it returns must encode and decode to itself, and it must
/// never hold more than a small multiple of the input's size.
///
/// `TRIBUTARY_FUZZ_COUNT` sets the number of inputs (200,000 by default, over four shards run in parallel);
/// `TRIBUTARY_SEED` (decimal, or hexadecimal with `0x`) picks them. A failure names the seed, the shard and the input.
@Suite("Protocol message decoder fuzzing", .tags(.fuzz))
struct MessageCodecFuzzTests {
    static let shards = 4

    static let count: Int = {
        let environment = ProcessInfo.processInfo.environment
        return environment["TRIBUTARY_FUZZ_COUNT"].flatMap { Int($0) } ?? 200_000
    }()

    static let seed: UInt64 = {
        guard let text = ProcessInfo.processInfo.environment["TRIBUTARY_SEED"] else { return 0x7072_6F74_6F63_6F6C }
        return (text.hasPrefix("0x") ? UInt64(text.dropFirst(2), radix: 16) : UInt64(text)) ?? 0x7072_6F74_6F63_6F6C
    }()

    /// Limits of a few items each, so that mutated inputs cross them often; half the inputs are read under these.
    static let fuzzLimits = smallLimits {
        $0.maximumMessageBytes = 600
        $0.maximumChangesetsPerBatch = 4
        $0.maximumVectorEntries = 4
        $0.maximumDots = 4
        $0.maximumRejections = 3
        $0.maximumCredentialsBytes = 16
        $0.maximumNameBytes = 16
        $0.maximumTextBytes = 24
    }

    @Test(
        "Random and mutated messages give a message or a protocol violation; a message re-encodes to itself, bounded",
        arguments: 0..<shards)
    func fuzzDecoder(shard: Int) throws {
        let count = Self.count / Self.shards + (shard < Self.count % Self.shards ? 1 : 0)
        let replay = "TRIBUTARY_SEED=0x\(String(Self.seed, radix: 16)) swift test --filter MessageCodecFuzzTests"
        var random = SplitMix64(seed: Self.seed ^ (UInt64(shard + 1) &* 0x9E37_79B9_7F4A_7C15))
        let generator = MessageGenerator()

        // The corpus: valid messages of every kind, checked against the spec's encoding.
        var corpus: [Wire] = Samples.oneOfEachKind.map(Wire.encoding) + Samples.edgeValues.map(Wire.encoding)
        for _ in 0..<300 {
            let message = generator.message(&random)
            let wire = Wire.encoding(message)
            guard MessageCodec.encode(message) == wire.bytes, (try? MessageCodec.decode(wire.bytes)) == message else {
                Issue.record("\(message) does not round trip as the spec encodes it (\(replay))")
                return
            }
            corpus.append(wire)
        }

        let mutator = MessageMutator(corpus: corpus)
        var problems = 0
        var decoded = 0
        var refused = 0
        for index in 0..<count {
            let input = mutator.next(&random)
            let limits = random.chance(50) ? Self.fuzzLimits : .standard
            let problem = Self.check(input, limits: limits, decoded: &decoded, refused: &refused)
            if let problem {
                problems += 1
                let which = limits == .standard ? "standard" : "small"
                Issue.record(
                    "\(problem)\ninput \(index) of shard \(shard), \(which) limits: \(hex(input))\nreplay: \(replay)")
                if problems >= 5 { return }
            }
        }
        // The inputs reach past the first bytes: some decode, most are refused.
        if count >= 1_000 {
            #expect(decoded > count / 50, "only \(decoded) of \(count) inputs decoded")
            #expect(refused > count / 5, "only \(refused) of \(count) inputs were refused")
        }
    }

    @Test("Random events in random order never trap a session, and a closed session stays closed")
    func fuzzSessions() {
        var random = SplitMix64(seed: Self.seed ^ 0x5E55_1055)
        let replay = "TRIBUTARY_SEED=0x\(String(Self.seed, radix: 16)) swift test --filter MessageCodecFuzzTests"
        let sessions = max(1, Self.count / 100)
        var reachedActive = 0
        var problems: [String] = []
        for session in 0..<sessions where problems.isEmpty {
            let t0 = ContinuousClock.now
            var now = t0
            var hello = Samples.hello
            hello.window = UInt64(random.below(400))
            var machine =
                random.chance(50)
                ? SessionStateMachine(initiating: hello, now: now) : SessionStateMachine(accepting: .standard, now: now)
            // Most sessions start with a handshake, so that most events reach the active state.
            if random.chance(70) {
                var welcome = Samples.welcome
                welcome.window = UInt64(random.below(400))
                welcome.maximumMessageBytes = UInt64(random.below(2_000))
                welcome.keepaliveSeconds = UInt64(random.below(30))
                if machine.side == .initiator {
                    _ = machine.start(now: now)
                    _ = machine.received(MessageCodec.encode(.welcome(welcome)), now: now)
                } else {
                    _ = machine.received(MessageCodec.encode(.hello(hello)), now: now)
                    _ = machine.accept(welcome, now: now)
                }
            }
            var wasActive = machine.isActive
            for event in 0..<40 {
                now += .milliseconds(random.below(15_000))
                let closedBefore = machine.isClosed
                let outcome = SessionEvents.apply(&machine, &random, now: now)
                wasActive = wasActive || machine.isActive
                let state = "session \(session), event \(event) (\(outcome.event))"
                if closedBefore && !outcome.ignored { problems.append("\(state) was not ignored after closing") }
                if closedBefore && !machine.isClosed { problems.append("\(state) reopened a closed session") }
                if machine.unacknowledgedBytes < 0 || machine.sendBudget < 0
                    || machine.sendBudget > SyncProtocol.maximumMessageBytes
                {
                    problems.append(
                        "\(state): \(machine.unacknowledgedBytes) unacknowledged, budget \(machine.sendBudget)")
                }
                if machine.isActive && machine.isClosed { problems.append("\(state): active and closed") }
                if let frame = outcome.frame, (try? MessageCodec.decode(frame)) == nil {
                    problems.append("\(state) produced a frame that does not decode: \(hex(frame))")
                }
                if outcome.closes && !machine.isClosed { problems.append("\(state) closed, but the session is open") }
            }
            if wasActive { reachedActive += 1 }
        }
        for problem in problems { Issue.record("\(problem)\nreplay: \(replay)") }
        if sessions >= 100 { #expect(reachedActive > sessions / 2, "only \(reachedActive) sessions became active") }
    }

    /// What is wrong with the decoder's answer to `input`, or `nil`.
    static func check(_ input: [UInt8], limits: MessageLimits, decoded: inout Int, refused: inout Int) -> String? {
        let message: Message
        do {
            message = try MessageCodec.decode(input, limits: limits)
        } catch {
            refused += 1
            if error.code != .protocolViolation || error.action != .retry {
                return "the decoder threw \(error), not a protocol violation (retry)"
            }
            if error.message.isEmpty || error.message.count > 1_000 {
                return "the error message is empty or over 1,000 characters: \(error.message.prefix(200))"
            }
            return nil
        }
        decoded += 1
        let again = MessageCodec.encode(message)
        // Only a padded varint can make the input longer than the canonical encoding.
        if again.count > input.count {
            return "\(message) re-encodes to \(again.count) bytes, more than its \(input.count)"
        }
        do {
            let decodedAgain = try MessageCodec.decode(again, limits: limits)
            if decodedAgain != message {
                return "\(message) re-encodes to \(hex(again)), which decodes to \(decodedAgain)"
            }
        } catch {
            return "\(message) re-encodes to \(hex(again)), which does not decode: \(error)"
        }
        let payload = payloadBytes(message)
        if payload > 16 * input.count + 1024 {
            return "\(input.count) bytes decoded to a message holding \(payload) bytes"
        }
        return nil
    }
}

/// Random valid messages, mostly small, now and then over the small limits.
private struct MessageGenerator {
    func number(_ random: inout SplitMix64) -> UInt64 {
        switch random.below(6) {
        case 0: [0, 1, 127, 128, 16_383, 16_384, .max, .max - 1, 1 << 63][random.below(9)]
        case 1: random.next()
        default: random.next() >> UInt64(random.below(64))
        }
    }

    func size(_ random: inout SplitMix64, typical: Int) -> Int {
        random.chance(5) ? random.below(typical * 8 + 1) : random.below(typical + 1)
    }

    func id(_ random: inout SplitMix64) -> ReplicaID {
        ReplicaID(rawValue: random.chance(20) ? UInt64(random.below(4)) : random.next())
    }

    func vector(_ random: inout SplitMix64) -> VersionVector {
        VersionVector((0..<size(&random, typical: 4)).map { _ in (id(&random), max(1, number(&random))) })
    }

    func dots(_ random: inout SplitMix64) -> [Dot] {
        (0..<size(&random, typical: 4)).map { _ in Dot(origin: id(&random), sequence: max(1, number(&random))) }
    }

    func bytes(_ random: inout SplitMix64, typical: Int) -> [UInt8] {
        (0..<size(&random, typical: typical)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    func string(_ random: inout SplitMix64, typical: Int) -> String {
        let pieces = ["a", "Z", " ", "\u{E9}", "\u{20AC}", "\u{1F4D3}", "\u{0}", "e\u{301}"]
        return (0..<size(&random, typical: typical / 2)).map { _ in pieces[random.below(pieces.count)] }.joined()
    }

    func message(_ random: inout SplitMix64) -> Message {
        switch random.below(9) {
        case 0:
            let low = number(&random)
            let high = random.chance(50) ? low : max(low, number(&random))
            return .hello(
                Hello(
                    versions: low...high, replica: id(&random), role: random.chance(50) ? .app : .peer,
                    schemaVersion: number(&random), credentials: bytes(&random, typical: 16),
                    name: string(&random, typical: 16), vector: vector(&random), pending: dots(&random),
                    window: number(&random), flexible: random.chance(50),
                    anchors: dots(&random).map { HistoryAnchor(dot: $0, fingerprint: $0.origin.rawValue &* 31) }))
        case 1:
            return .welcome(
                Welcome(
                    version: number(&random), replica: id(&random), vector: vector(&random), pending: dots(&random),
                    yours: number(&random), window: number(&random), maximumMessageBytes: number(&random),
                    keepaliveSeconds: number(&random)))
        case 2:
            return .changesets(
                ChangesetBatch(
                    number: number(&random),
                    changesets: (0..<size(&random, typical: 4)).map { _ in bytes(&random, typical: 40) },
                    progress: vector(&random), more: random.chance(50)))
        case 3:
            return .ack(
                Acknowledgement(
                    batch: number(&random), checkpoint: vector(&random),
                    rejected: dots(&random).map { .init(dot: $0, reason: string(&random, typical: 24)) }))
        case 4:
            return .mark(request: number(&random))
        case 5:
            return .markReply(request: number(&random))
        case 6:
            let code = random.chance(80) ? UInt64(1 + random.below(10)) : number(&random)
            let action = [SyncError.Action.retry, .reset, .fatal][random.below(3)]
            return .error(
                SyncError(
                    SyncError.Code(rawValue: code), action, string(&random, typical: 24),
                    retryAfterSeconds: number(&random)))
        case 7:
            return .ping(nonce: number(&random))
        default:
            return .pong(nonce: number(&random))
        }
    }
}

/// One random event for a session: a message received (valid, of a likely kind, or mutated), a tick, or a call.
private enum SessionEvents {
    struct Outcome {
        var event: String
        /// Nothing was done: the action was `.none`, or the call returned `nil`.
        var ignored: Bool
        /// A frame to send, to check that it decodes.
        var frame: [UInt8]?
        /// The session ended.
        var closes = false
    }

    static func frame(_ random: inout SplitMix64) -> [UInt8] {
        let small = { (random: inout SplitMix64) in UInt64(random.below(5)) }
        let message: Message
        switch random.below(10) {
        case 0:
            var hello = Samples.hello
            hello.versions = random.chance(80) ? 1...1 : UInt64(random.below(3))...UInt64(2 + random.below(3))
            hello.window = UInt64(random.below(400))
            message = .hello(hello)
        case 1:
            var welcome = Samples.welcome
            welcome.version = random.chance(80) ? 1 : small(&random)
            welcome.window = UInt64(random.below(400))
            welcome.maximumMessageBytes = UInt64(random.below(2_000))
            welcome.keepaliveSeconds = small(&random)
            message = .welcome(welcome)
        case 2, 3:
            let changesets = (0..<random.below(4)).map { _ in [UInt8](repeating: 7, count: random.below(150)) }
            message = .changesets(
                ChangesetBatch(number: small(&random), changesets: changesets, progress: Samples.vector, more: true))
        case 4: message = .ack(Acknowledgement(batch: small(&random), checkpoint: Samples.vector))
        case 5: message = .mark(request: small(&random))
        case 6: message = .markReply(request: small(&random))
        case 7: message = .ping(nonce: small(&random))
        case 8: message = .pong(nonce: small(&random))
        default: message = .error(SyncError(.unavailable, .retry, "bye"))
        }
        var bytes = MessageCodec.encode(message)
        if random.chance(10), !bytes.isEmpty { bytes[random.below(bytes.count)] ^= 1 << UInt8(random.below(8)) }
        return bytes
    }

    static func apply(
        _ machine: inout SessionStateMachine, _ random: inout SplitMix64, now: ContinuousClock.Instant
    ) -> Outcome {
        switch random.below(12) {
        case 0...4:
            return outcome("received", machine.received(frame(&random), now: now))
        case 5:
            return outcome("tick", machine.tick(now: now))
        case 6:
            let changesets = (0..<1 + random.below(3)).map { _ in [UInt8](repeating: 1, count: random.below(200)) }
            let frame = machine.sendBatch(changesets, progress: Samples.vector, more: false, now: now)
            return Outcome(event: "sendBatch", ignored: frame == nil, frame: frame)
        case 7:
            let ack = Acknowledgement(batch: UInt64(random.below(5)), checkpoint: Samples.vector)
            let frame = machine.acknowledge(ack, now: now)
            return Outcome(event: "acknowledge", ignored: frame == nil, frame: frame)
        case 8:
            let frame = machine.requestMark(now: now)?.frame
            return Outcome(event: "requestMark", ignored: frame == nil, frame: frame)
        case 9:
            let frame = machine.replyToMark(UInt64(random.below(3)), now: now)
            return Outcome(event: "replyToMark", ignored: frame == nil, frame: frame)
        case 10:
            let frame = machine.side == .initiator ? machine.start(now: now) : machine.accept(Samples.welcome, now: now)
            return Outcome(event: "start or accept", ignored: frame == nil, frame: frame)
        default:
            guard random.chance(20) else { return Outcome(event: "nothing", ignored: true) }
            let frame = machine.close(SyncError(.storage, .retry, "disk"))
            return Outcome(event: "close", ignored: frame == nil, frame: frame, closes: true)
        }
    }

    static func outcome(_ event: String, _ action: SessionStateMachine.Action) -> Outcome {
        switch action {
        case .none: Outcome(event: event, ignored: true)
        case .send(let frame): Outcome(event: "\(event): send", ignored: false, frame: frame)
        case .closeSending(let error): Outcome(event: "\(event): \(error)", ignored: false, closes: true)
        case .closed(let error): Outcome(event: "\(event): closed by \(error)", ignored: false, closes: true)
        default: Outcome(event: "\(event): \(action)", ignored: false)
        }
    }
}
