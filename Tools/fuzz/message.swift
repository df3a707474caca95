// Wire messages of the sync protocol, as a peer or app sends them: each decodes or is refused as a protocol
// violation, never traps; what decodes re-encodes to bytes that decode to the same message.
import Foundation
import TributaryModel
import TributaryProtocol

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: OpaquePointer?, _ argv: OpaquePointer?) -> CInt {
    let vector = VersionVector([(ReplicaID(rawValue: 1), 5), (ReplicaID(rawValue: 9), 2)])
    let dot = Dot(origin: ReplicaID(rawValue: 9), sequence: 2)
    let messages: [Message] = [
        .ping(nonce: 7), .pong(nonce: 1 << 40), .mark(request: 3), .markReply(request: 3),
        .hello(
            Hello(
                replica: ReplicaID(rawValue: 4), role: .app, credentials: [1, 2], name: "phone", vector: vector,
                pending: [dot], flexible: true)),
        .welcome(Welcome(version: 1, replica: ReplicaID(rawValue: 1), vector: vector, pending: [dot], yours: 3)),
        .changesets(ChangesetBatch(number: 1, changesets: [[1, 2, 3], []], progress: vector, more: true)),
        .ack(Acknowledgement(batch: 1, checkpoint: vector, rejected: [.init(dot: dot, reason: "refused")])),
        .error(SyncError(.rateLimited, .retry, "later", retryAfterSeconds: 3)),
        .query(
            QueryRequest(
                version: 2, subscriptions: [Subscription(name: "mine", type: "Task", query: "owner == 'ada'")],
                heldVersion: 1, held: [Subscription(type: "Task", query: "TRUEPREDICATE")], acknowledgedThrough: 7)),
        .objects(
            ObjectStates(
                query: 2, yours: 7,
                objects: [
                    ObjectState(type: "Task", primaryKey: .string("t1"), record: [1, 1, 0]),
                    ObjectState(type: "Task", primaryKey: .int(3), record: nil, refused: [dot]),
                ], total: 2)),
        .queryState(QueryState(version: 2, error: "key \"title\" is not a queryable field")),
    ]
    // And one message of each kind byte, empty after it, for the fuzzer to fill.
    writeSeeds(messages.map(MessageCodec.encode) + (0..<14).map { [UInt8($0)] })
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = input(data, size)
    let message: Message
    do {
        message = try MessageCodec.decode(bytes)
    } catch {
        if error.message.isEmpty { wrong("a violation without a message") }
        return 0
    }
    let encoded = MessageCodec.encode(message)
    guard let again = try? MessageCodec.decode(encoded) else {
        wrong("\(message) re-encodes to bytes that do not decode")
    }
    guard again == message, MessageCodec.encode(again) == encoded else { wrong("\(message) reads back as \(again)") }
    return 0
}
