import Testing
import TributaryModel
import TributaryTestSupport

@testable import TributaryProtocol

/// Messages the tests share.
enum Samples {
    static let vector = VersionVector([(ReplicaID(rawValue: 7), 3), (ReplicaID(rawValue: 1 << 60), 300)])

    static let hello = Hello(
        replica: ReplicaID(rawValue: 0xA11C_E000_0000_0042), role: .app, schemaVersion: 3, credentials: [1, 2, 3],
        name: "Notes on iPad", vector: vector, pending: [Dot(origin: ReplicaID(rawValue: 9), sequence: 4)],
        window: 64 << 10)

    static let welcome = Welcome(
        version: 1, replica: ReplicaID(rawValue: 0xDAE0_0000_0000_0005), vector: vector,
        pending: [Dot(origin: ReplicaID(rawValue: 11), sequence: 2)], yours: 17, window: 32 << 10,
        maximumMessageBytes: 1 << 20, keepaliveSeconds: 20)

    /// One message of each kind, with every field set to something other than its default.
    static let oneOfEachKind: [Message] = [
        .hello(hello),
        .welcome(welcome),
        .changesets(ChangesetBatch(number: 3, changesets: [[0xAA], [], [1, 2, 3]], progress: vector, more: true)),
        .ack(
            Acknowledgement(
                batch: 3, checkpoint: vector,
                rejected: [.init(dot: Dot(origin: ReplicaID(rawValue: 7), sequence: 2), reason: "schema conflict")])),
        .mark(request: 1),
        .markReply(request: 130),
        .error(SyncError(.unavailable, .retry, "shutting down", retryAfterSeconds: 5)),
        .ping(nonce: 99),
        .pong(nonce: 1 << 40),
        .query(
            QueryRequest(
                version: 3,
                subscriptions: [
                    Subscription(name: "mine", type: "Task", query: "owner == 'ada'"),
                    Subscription(type: "User", query: "TRUEPREDICATE"),
                ], heldVersion: 2, held: [Subscription(type: "Task", query: "count > 1")], acknowledgedThrough: 41)),
        .objects(
            ObjectStates(
                query: 3, yours: 17,
                objects: [
                    ObjectState(type: "Task", primaryKey: .string("t1"), record: [1, 2, 3]),
                    ObjectState(
                        type: "Task", primaryKey: .int(-4), record: nil,
                        refused: [Dot(origin: ReplicaID(rawValue: 9), sequence: 4)]),
                ], total: 2)),
        .queryState(QueryState(version: 3)),
        .queryState(QueryState(version: 4, error: "key \"title\" is not a queryable field")),
        .base(
            BasePart(
                part: 1, last: false, vector: vector,
                held: VersionVector([(ReplicaID(rawValue: 7), 3), (ReplicaID(rawValue: 9), 12)]), latest: 1 << 50,
                schema: Schema(
                    version: 2, types: [ObjectSchema(name: "Task", properties: [.scalar("_id", .string)])]),
                total: 3, objects: [ObjectState(type: "Task", primaryKey: .string("t1"), record: [1, 2, 3])],
                adoptions: [
                    .init(
                        dot: Dot(origin: ReplicaID(rawValue: 9), sequence: 4),
                        relays: [Dot(origin: ReplicaID(rawValue: 7), sequence: 2)])
                ])),
        .base(
            BasePart(
                part: 2, last: true, vector: vector, held: vector, latest: 5, schema: nil, total: 3,
                objects: [
                    ObjectState(type: "Task", primaryKey: .int(-4), record: [9]),
                    ObjectState(type: "Task", primaryKey: .int(5), record: [8, 7]),
                ], adoptions: [])),
    ]

    static let maximalVector = VersionVector([(ReplicaID(rawValue: 0), .max), (ReplicaID(rawValue: .max), .max)])
    static let maximalDot = Dot(origin: ReplicaID(rawValue: .max), sequence: .max)

    /// Every number at 2^64 - 1 (or 0 where that is the edge).
    static let edgeValues: [Message] = [
        .hello(
            Hello(
                versions: 0...UInt64.max, replica: ReplicaID(rawValue: .max), role: .peer, schemaVersion: .max,
                credentials: [0, 0xFF], name: "", vector: maximalVector, pending: [maximalDot, maximalDot],
                window: .max)),
        .welcome(
            Welcome(
                version: .max, replica: ReplicaID(rawValue: .max), vector: maximalVector, pending: [maximalDot],
                yours: .max, window: .max, maximumMessageBytes: .max, keepaliveSeconds: .max)),
        .welcome(
            Welcome(
                version: 0, replica: ReplicaID(rawValue: 0), vector: VersionVector(), yours: 0, window: 0,
                maximumMessageBytes: 0, keepaliveSeconds: 0)),
        .changesets(ChangesetBatch(number: .max, changesets: [[]], progress: maximalVector, more: false)),
        .ack(Acknowledgement(batch: .max, checkpoint: maximalVector, rejected: [.init(dot: maximalDot, reason: "")])),
        .mark(request: .max),
        .mark(request: 0),
        .markReply(request: .max),
        .error(SyncError(SyncError.Code(rawValue: .max), .reset, "", retryAfterSeconds: .max)),
        .ping(nonce: 0),
        .ping(nonce: .max),
        .pong(nonce: .max),
    ]

    /// Every vector, list of dots, list of changesets, byte string and string empty.
    static let empties: [Message] = [
        .hello(Hello(versions: 1...1, replica: ReplicaID(rawValue: 1), role: .app, vector: VersionVector())),
        .welcome(Welcome(version: 1, replica: ReplicaID(rawValue: 2), vector: VersionVector())),
        .changesets(ChangesetBatch(number: 1, changesets: [], progress: VersionVector(), more: false)),
        .changesets(ChangesetBatch(number: 1, changesets: [[], [], []], progress: VersionVector(), more: true)),
        .ack(Acknowledgement(batch: 0, checkpoint: VersionVector())),
        .error(SyncError(.timeout, .retry, "")),
    ]
}

/// What decoding `bytes` throws, or `nil` when it decodes.
func decodingError(_ bytes: [UInt8], limits: MessageLimits = .standard) -> SyncError? {
    do {
        _ = try MessageCodec.decode(bytes, limits: limits)
        return nil
    } catch {
        return error
    }
}

/// Expects decoding `bytes` to throw a protocol violation (action retry, after 5 s) whose message holds each of
/// `words`.
@discardableResult
func expectViolation(
    _ bytes: [UInt8], limits: MessageLimits = .standard, naming words: String...,
    sourceLocation: SourceLocation = #_sourceLocation
) -> SyncError? {
    guard let error = decodingError(bytes, limits: limits) else {
        Issue.record("\(hex(bytes)) decoded; expected a protocol violation", sourceLocation: sourceLocation)
        return nil
    }
    #expect(error.code == .protocolViolation, "\(error)", sourceLocation: sourceLocation)
    #expect(error.action == .retry && error.retryAfterSeconds == 5, "\(error)", sourceLocation: sourceLocation)
    for word in words {
        #expect(error.message.contains(word), "\(error.message) does not name \(word)", sourceLocation: sourceLocation)
    }
    return error
}

/// Limits of a few items and bytes each, so that inputs over them stay small.
func smallLimits(_ configure: (inout MessageLimits) -> Void) -> MessageLimits {
    var limits = MessageLimits()
    configure(&limits)
    return limits
}

func hex(_ bytes: some Collection<UInt8>) -> String {
    bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }
        .joined(separator: " ")
}

/// How much memory a decoded message holds, counted the same way for every message: its bytes and strings, 16 bytes
/// per vector entry, dot, changeset and rejection.
func payloadBytes(_ message: Message) -> Int {
    switch message {
    case .hello(let hello):
        return hello.credentials.count + hello.name.utf8.count + 16 * hello.vector.entries.count
            + 16 * hello.pending.count + 24 * hello.anchors.count
    case .welcome(let welcome):
        return 16 * welcome.vector.entries.count + 16 * welcome.pending.count
    case .changesets(let batch):
        return batch.changesets.reduce(0) { $0 + 16 + $1.count } + 16 * batch.progress.entries.count
    case .ack(let ack):
        return 16 * ack.checkpoint.entries.count + ack.rejected.reduce(0) { $0 + 16 + $1.reason.utf8.count }
    case .error(let error):
        return error.message.utf8.count
    case .mark, .markReply, .ping, .pong:
        return 0
    case .query(let query):
        return (query.subscriptions + query.held).reduce(0) {
            $0 + 16 + $1.type.utf8.count + $1.query.utf8.count + ($1.name?.utf8.count ?? 0)
        }
    case .objects(let states):
        return states.objects.reduce(0) { $0 + 16 + $1.type.utf8.count + ($1.record?.count ?? 0) + 16 }
    case .queryState(let state):
        return state.error?.utf8.count ?? 0
    case .base(let base):
        return base.objects.reduce(0) { $0 + 16 + $1.type.utf8.count + ($1.record?.count ?? 0) }
            + base.adoptions.reduce(0) { $0 + 16 + 16 * $1.relays.count }
            + 16 * (base.vector.entries.count + base.held.entries.count) + (base.schema.map { _ in 64 } ?? 0)
    }
}
