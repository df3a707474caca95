import Foundation
import Testing
import Tributary
import TributaryLog
import TributaryModel
import TributaryStorage
import TributaryTestSupport

// The log's origin index as a replica uses it: copies made by replay, and verify and rebuild on a damaged index.
// The index itself, over a bare log, is tested in TributaryLogTests.

/// `replay(through:into:)` copies a log and indexes the copy as the log indexes what it appends: relay dots and
/// adoptions included, and the first entry of a dot stays its entry. The copy then exports what its source exports.
@Suite("Copies of a log with relay adoptions")
struct ReplayCopyIndexTests {
    @Test func copyExportsWhatItsSourceExports() throws {
        let cluster = try Cluster(3, schema: MergeSemanticsTests.schema)
        for round in 0..<3 {
            for app in 1...2 {
                try cluster[app].write {
                    _ = try $0.upsert("Task", ["_id": .string("t\(app)"), "title": .string("r\(round)")])
                }
                let uploads = try cluster[app].changesets(
                    missingFrom: cluster[0].versionVector, origins: [cluster[app].replicaID])
                try cluster[0].adopt(uploads)
                try cluster[app].integrate(try cluster[0].changesets(missingFrom: cluster[app].versionVector))
            }
            try cluster[0].write { _ = try $0.upsert("Task", ["_id": "relay", "title": .string("r\(round)")]) }
        }
        let source = cluster[0]
        let directory = TemporaryDirectory()
        let copy = try source.replay(through: .max, into: directory.path)
        defer { copy.close() }
        #expect(try copy.changesets(missingFrom: VersionVector()) == source.changesets(missingFrom: VersionVector()))
        for relaySequence in [UInt64(0), 2, 5] {
            let vector = VersionVector([(source.replicaID, relaySequence)])
            #expect(
                try copy.changesets(missingFrom: vector).map(\.dot) == source.changesets(missingFrom: vector).map(\.dot)
            )
        }
        #expect(try copy.recordsDigest() == source.recordsDigest())
        #expect(try copy.verify().passed)
    }
}

/// A key missing from the origin index would make a replay leave its changesets out; verify names the damage, and a
/// rebuild stops instead of building views without them.
@Suite("A damaged origin index")
struct DamagedOriginIndexTests {
    @Test func missingKeyIsReported() throws {
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        var replicaID = ReplicaID(rawValue: 0)
        do {
            let replica = try Replica.open(
                directory: directory.path, schema: MergeSemanticsTests.schema, configuration: configuration)
            for index in 0..<5 { try replica.write { _ = try $0.create("Task", ["_id": .string("a\(index)")]) } }
            replicaID = replica.replicaID
            #expect(try replica.verify().passed)
            replica.close()
        }
        do {
            // The replica's own changesets are one run: its first changeset holds the only key.
            let environment = try Environment.open(path: directory.path)
            let log = try ChangesetLog(environment: environment)
            let deleted = try environment.write { txn in
                try txn.delete(log.origins, key: ChangesetLog.originKey(Dot(origin: replicaID, sequence: 1)))
            }
            #expect(deleted)
        }
        let replica = try Replica.open(
            directory: directory.path, schema: MergeSemanticsTests.schema, configuration: configuration)
        defer { replica.close() }
        let report = try replica.verify()
        #expect(report.firstProblem?.contains("origin index does not find changeset") == true, "\(report)")
        #expect(throws: (any Error).self) { try replica.rebuildViews() }
    }
}
