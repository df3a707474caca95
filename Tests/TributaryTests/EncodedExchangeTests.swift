import Foundation
import Testing
@testable import Tributary
import TributaryModel
import TributaryTestSupport

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
        let before = cluster[1].versionVector
        #expect {
            try cluster[1].integrate(encoded: bytes)
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .invalidChangeset else { return false }
            return error.message.contains("changeset 2 of \(bytes.count)")
        }
        #expect(cluster[1].versionVector == before)
        #expect(try cluster[1].pendingDots().isEmpty)
        bytes.removeAll()
        #expect(try cluster[1].integrate(encoded: []).integrated.isEmpty)
    }
}
