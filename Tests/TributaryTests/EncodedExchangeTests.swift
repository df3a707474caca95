import Foundation
import Testing
import TributaryCompression
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// Changesets exchanged as bytes, as a sync layer sends them: `encodedChangesets(missingFrom:)` reads them from the log
/// without decoding, `integrate(encoded:)` decodes each once and logs the bytes it received.
@Suite("Encoded exchange")
struct EncodedExchangeTests {
    func writeHistory(_ replica: Replica, writes: Int) throws {
        try replica.write { try $0.create("Task", ["_id": "t", "title": "0", "tags": ["a"]]) }
        for index in 1...writes {
            try replica.write { txn in
                try txn.update("Task", primaryKey: .string("t"), ["title": .string("\(index)")])
                try txn.insert(.string("\(index)"), at: 0, into: ["tags"], of: "Task", primaryKey: .string("t"))
            }
        }
    }

    @Test("The bytes exported are the encodings of the changesets exported, in the same order, with the same filters")
    func exportMatchesDecodedExport() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        try writeHistory(cluster[0], writes: 12)
        try cluster[1].write { try $0.create("Task", ["_id": "u"]) }
        _ = try cluster.send(from: 1, to: 0)
        let since = VersionVector()
        let decoded = try cluster[0].changesets(missingFrom: since)
        let encoded = try cluster[0].encodedChangesets(missingFrom: since)
        #expect(encoded == decoded.map(ChangesetCodec.encode))
        #expect(Set(decoded.map(\.origin)).count == 2)
        // Limit, origins and exclusions select the same changesets.
        let skipped = Set(decoded.prefix(3).map(\.dot))
        let origins: Set<ReplicaID> = [cluster[1].replicaID]
        #expect(
            try cluster[0].encodedChangesets(missingFrom: since, limit: 4, excluding: skipped)
                == cluster[0].changesets(missingFrom: since, limit: 4, excluding: skipped).map(ChangesetCodec.encode))
        #expect(
            try cluster[0].encodedChangesets(missingFrom: since, origins: origins)
                == cluster[0].changesets(missingFrom: since, origins: origins).map(ChangesetCodec.encode))
    }

    @Test("Integrating bytes, out of order and across calls, ends where integrating the changesets does")
    func encodedIntegrationConverges() throws {
        let cluster = try Cluster(3, schema: MergeSemanticsTests.schema)
        try writeHistory(cluster[0], writes: 20)
        let bytes = try cluster[0].encodedChangesets(missingFrom: cluster[1].versionVector)
        // Replica 1 gets the bytes, later ones first: they wait in the pending area, then complete.
        let half = bytes.count / 2
        let first = try cluster[1].integrate(encoded: Array(bytes[half...]))
        #expect(first.integrated.isEmpty && first.waiting == bytes.count - half)
        let second = try cluster[1].integrate(encoded: Array(bytes[..<half]))
        #expect(second.integrated.count == bytes.count && second.waiting == 0)
        // Integrating them again changes nothing.
        #expect(try cluster[1].integrate(encoded: bytes).duplicates == bytes.count)
        // Replica 2 gets the decoded changesets.
        _ = try cluster.send(from: 0, to: 2)
        #expect(try cluster[1].recordsDigest() == cluster[2].recordsDigest())
        #expect(try cluster[1].recordsDigest() == cluster[0].recordsDigest())
        #expect(try cluster[1].object("Task", primaryKey: .string("t"))?["title"] == "20")
        #expect(try cluster[1].verify().passed)
        // What replica 1 logged reads back as what replica 0 sent.
        let relayed = try cluster[1].encodedChangesets(missingFrom: VersionVector(), origins: [cluster[0].replicaID])
        #expect(relayed == bytes)
        try cluster.syncAll()
        #expect(try cluster.converged())
    }

    @Test("Bytes that do not decode are refused, naming which; nothing of the batch is integrated")
    func undecodableBytesAreRefused() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        try writeHistory(cluster[0], writes: 3)
        var bytes = try cluster[0].encodedChangesets(missingFrom: cluster[1].versionVector)
        bytes[2][bytes[2].count / 2] ^= 0x5A
        try expectRefused(bytes, naming: 2, by: cluster[1])
        bytes.removeAll()
        #expect(try cluster[1].integrate(encoded: []).integrated.isEmpty)
    }

    /// Checks that `replica` refuses `bytes` with an error naming element `index`, and integrates none of them.
    func expectRefused(_ bytes: [[UInt8]], naming index: Int, by replica: Replica) throws {
        let before = replica.versionVector
        #expect {
            try replica.integrate(encoded: bytes)
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .invalidChangeset else { return false }
            return error.message.contains("changeset \(index) of \(bytes.count)")
        }
        #expect(replica.versionVector == before)
        #expect(try replica.pendingDots().isEmpty)
    }

    /// A history whose changesets come in both stored forms: small ones the log keeps as encoded, and batches of
    /// creates it keeps as zstd frames.
    func writeMixedHistory(_ replica: Replica) throws {
        try writeHistory(replica, writes: 4)
        try replica.write { try $0.update("Task", primaryKey: .string("t"), ["done": true]) }
        for batch in 0..<3 {
            try replica.write { txn in
                for index in 0..<40 {
                    try txn.create(
                        "Task",
                        ["_id": .string("b\(batch)-\(index)"), "title": .string("batch \(batch) task \(index)")])
                }
            }
        }
    }

    @Test("Compressed export sends what the log stores; integrating it stores the same bytes and converges")
    func compressedExchange() throws {
        let cluster = try Cluster(3, schema: MergeSemanticsTests.schema)
        try writeMixedHistory(cluster[0])
        let since = VersionVector()
        let plain = try cluster[0].encodedChangesets(missingFrom: since)
        let stored = try cluster[0].encodedChangesets(missingFrom: since, compressed: true)
        #expect(stored.count == plain.count)
        let frames = stored.filter(ZstdCodec.startsFrame)
        #expect(frames.count >= 3, "the batches of creates are stored compressed")
        #expect(frames.count < stored.count, "small changesets are stored as encoded")
        #expect(stored.reduce(0) { $0 + $1.count } < plain.reduce(0) { $0 + $1.count } / 2)
        // Each frame holds the plain encoding; each element that is not a frame is that encoding.
        let codec = ZstdCodec()
        for (packed, encoded) in zip(stored, plain) {
            let unpacked =
                ZstdCodec.startsFrame(packed) ? try codec.decompress(packed, maximumOutputBytes: 1 << 20) : packed
            #expect(unpacked == encoded)
        }
        // Replica 1 integrates the stored form, later ones first (they wait, then complete); replica 2 the plain one.
        let half = stored.count / 2
        #expect(try cluster[1].integrate(encoded: Array(stored[half...])).waiting == stored.count - half)
        #expect(try cluster[1].integrate(encoded: Array(stored[..<half])).integrated.count == stored.count)
        #expect(try cluster[2].integrate(encoded: plain).integrated.count == plain.count)
        #expect(try cluster[1].recordsDigest() == cluster[0].recordsDigest())
        #expect(try cluster[2].recordsDigest() == cluster[0].recordsDigest())
        #expect(try cluster[1].verify().passed)
        // Both receivers log what replica 0 logged, byte for byte, whichever form they received.
        for receiver in [cluster[1], cluster[2]] {
            #expect(
                try receiver.encodedChangesets(missingFrom: since, origins: [cluster[0].replicaID], compressed: true)
                    == stored)
        }
    }

    @Test("A frame is stored as it came, not compressed again")
    func frameStoredAsItCame() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        try writeMixedHistory(cluster[0])
        // Frames made by another compression level than the receiver's: only storing them as they came keeps them.
        let plain = try cluster[0].encodedChangesets(missingFrom: cluster[1].versionVector)
        let stored = try cluster[0].encodedChangesets(missingFrom: cluster[1].versionVector, compressed: true)
        let other = ZstdCodec(level: 19)
        let sent = try zip(plain, stored).map { encoded, packed in
            ZstdCodec.startsFrame(packed) ? try other.compress(encoded) : packed
        }
        #expect(sent != stored, "level 19 makes other frames than the log's level")
        #expect(try cluster[1].integrate(encoded: sent).integrated.count == sent.count)
        #expect(
            try cluster[1].encodedChangesets(
                missingFrom: VersionVector(), origins: [cluster[0].replicaID], compressed: true) == sent)
        #expect(try cluster[1].recordsDigest() == cluster[0].recordsDigest())
        #expect(try cluster[1].verify().passed)
    }

    @Test("A damaged zstd frame is refused, naming which changeset; nothing of the batch is integrated")
    func damagedFrameIsRefused() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        try writeMixedHistory(cluster[0])
        var bytes = try cluster[0].encodedChangesets(missingFrom: cluster[1].versionVector, compressed: true)
        let damaged = try #require(bytes.indices.last { ZstdCodec.startsFrame(bytes[$0]) })
        bytes[damaged][bytes[damaged].count / 2] ^= 0x5A
        try expectRefused(bytes, naming: damaged, by: cluster[1])
        // A frame cut short is refused too.
        bytes = try cluster[0].encodedChangesets(missingFrom: cluster[1].versionVector, compressed: true)
        bytes[damaged].removeLast(3)
        try expectRefused(bytes, naming: damaged, by: cluster[1])
    }
}
