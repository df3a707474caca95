import Foundation
import Testing
import TributaryLog
import TributaryModel
import TributaryStorage
import TributaryTestSupport

@testable import Tributary

/// A new history started from a replica's whole state: what a cluster whose compacted log lost commits starts its new
/// epoch from.
@Suite("A new history from a replica")
struct NewHistoryTests {
    @Test("A replica started from another's whole state holds its records and vector, under a new id, and syncs on")
    func startsFromTheWholeState() throws {
        let cluster = try Cluster(4, schema: MergeSemanticsTests.schema)
        let history = CompactionTests()
        // App 3 syncs once, early, then stays away.
        try cluster[3].write { try $0.create("Person", ["_id": "p3", "name": "early"]) }
        try history.sync(cluster, app: 3)
        try history.writeHistory(cluster, rounds: 8)
        let relay = cluster[0]
        // The source's own log was compacted already, as a cluster daemon's with a retention is.
        try relay.compact(through: relay.lastLocalSequence - 4)
        try history.writeHistory(cluster, rounds: 5)
        let entries = try relay.environment.read { try relay.log.count(in: $0) }
        let marker = try relay.logCompaction()

        let directory = cluster.directory.appending("new-history")
        var configuration = Replica.Configuration()
        configuration.clock = ManualClock(milliseconds: 1_699_999_999_000)  // behind every stamp in the base
        let fresh = try Replica.startingNewHistory(
            from: relay, directory: directory, replicaID: ReplicaID(rawValue: 50), configuration: configuration,
            recordsInMemory: 3)
        defer { fresh.close() }
        #expect(fresh.replicaID == ReplicaID(rawValue: 50))
        #expect(fresh.versionVector == relay.versionVector)
        #expect(try fresh.recordsDigest() == relay.recordsDigest())
        #expect(try CompactionTests.sameObjects([relay, fresh]))
        #expect(try fresh.environment.read { try fresh.log.count(in: $0) } == 0)
        #expect(try fresh.verify().passed)
        // The source is only read.
        #expect(try relay.environment.read { try relay.log.count(in: $0) } == entries)
        #expect(try relay.logCompaction() == marker)

        // An app that holds everything the source held has nothing to take; one that synced before the source's
        // compaction lacks what only the base holds.
        #expect(try fresh.changesets(missingFrom: cluster[1].versionVector).isEmpty)
        #expect {
            _ = try fresh.changesets(missingFrom: cluster[3].versionVector)
        } throws: { error in
            (error as? TributaryError)?.code == .historyCompacted
        }

        // The app goes on with the new replica: its upload is adopted under the new id and comes back to the other.
        try cluster[1].write { try $0.update("Task", primaryKey: .string("t1"), ["title": "after the new history"]) }
        let uploads = try cluster[1].changesets(missingFrom: fresh.versionVector, origins: [cluster[1].replicaID])
        #expect(uploads.count == 1)
        try fresh.adopt(uploads)
        try fresh.adopt(uploads)  // a retried upload is taken once
        #expect(fresh.versionVector[ReplicaID(rawValue: 50)] == 1)
        try cluster[2].integrate(try fresh.changesets(missingFrom: cluster[2].versionVector))
        #expect(try cluster[2].object("Task", primaryKey: .string("t1"))?["title"] == "after the new history")
        // Its writes are stamped after every value the base holds.
        try fresh.write { try $0.update("Task", primaryKey: .string("t2"), ["title": "written by the new replica"]) }
        try cluster[2].integrate(try fresh.changesets(missingFrom: cluster[2].versionVector))
        #expect(try cluster[2].object("Task", primaryKey: .string("t2"))?["title"] == "written by the new replica")
        #expect(try fresh.verify().passed)

        // A directory that holds something is refused, and left as it was.
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        let digest = try fresh.recordsDigest()
        #expect {
            _ = try Replica.startingNewHistory(from: relay, directory: directory, replicaID: ReplicaID(rawValue: 51))
        } throws: { error in
            (error as? TributaryError)?.code == .invalidValue
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).sorted() == files)
        #expect(try fresh.recordsDigest() == digest)
    }

    @Test("A replica that holds nothing starts no history")
    func emptySourceIsRefused() throws {
        let directory = TemporaryDirectory("new-history")
        let empty = try Replica.open(directory: directory.appending("empty"))
        defer { empty.close() }
        #expect {
            _ = try Replica.startingNewHistory(
                from: empty, directory: directory.appending("none"), replicaID: ReplicaID(rawValue: 9))
        } throws: { error in
            (error as? TributaryError)?.code == .invalidValue
        }
    }
}
