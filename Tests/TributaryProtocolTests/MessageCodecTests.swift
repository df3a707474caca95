import Testing
import TributaryModel

@testable import TributaryProtocol

@Suite("Protocol message codec")
struct MessageCodecTests {
    @Test("Every kind of message decodes to what was encoded")
    func roundTrip() throws {
        let vector = VersionVector([(ReplicaID(rawValue: 7), 3), (ReplicaID(rawValue: 1 << 60), 12)])
        let messages: [Message] = [
            .hello(
                Hello(
                    replica: ReplicaID(rawValue: 42), role: .app, schemaVersion: 3, credentials: [1, 2, 3],
                    name: "Notes on iPad", vector: vector, pending: [Dot(origin: ReplicaID(rawValue: 9), sequence: 4)])),
            .welcome(Welcome(version: 1, replica: ReplicaID(rawValue: 5), vector: vector, yours: 17)),
            .changesets(ChangesetBatch(number: 3, changesets: [[0xAA], [], [1, 2, 3]], progress: vector, more: true)),
            .ack(
                Acknowledgement(
                    batch: 3, checkpoint: vector,
                    rejected: [.init(dot: Dot(origin: ReplicaID(rawValue: 7), sequence: 2), reason: "schema conflict")])
            ),
            .mark(request: 1), .markReply(request: 1),
            .error(SyncError(.unavailable, .retry, "shutting down", retryAfterSeconds: 5)),
            .ping(nonce: 99), .pong(nonce: 99),
        ]
        for message in messages {
            #expect(try MessageCodec.decode(MessageCodec.encode(message)) == message)
        }
    }
}
