import Foundation
import Testing
import TributaryModel
import TributaryProtocol

@testable import TributaryDaemon

/// Which apps a cluster resets after its log was given a new epoch: those that hold changesets the new history lacks.
@Suite("Retired epochs")
struct RetiredEpochTests {
    let app = ReplicaID(rawValue: 7)
    let retired = ReplicaID(rawValue: 500)
    let older = ReplicaID(rawValue: 400)

    func refusal(_ vector: [(ReplicaID, UInt64)], kept: [ReplicaID: UInt64]) -> SyncError? {
        SyncServer.retiredEpochRefusal(
            of: Hello(replica: app, role: .app, vector: VersionVector(vector)), retired: kept, log: "chat")
    }

    @Test("An app holding no more of a retired epoch than the new history kept syncs on; one holding more is reset")
    func resetOnlyPastWhatWasKept() throws {
        // A new history started from a daemon's replica that held 40 changesets of the retired epoch.
        let kept = [retired: UInt64(40), older: 0]
        #expect(refusal([(app, 3)], kept: kept) == nil)
        #expect(refusal([(app, 3), (retired, 39)], kept: kept) == nil)
        #expect(refusal([(app, 3), (retired, 40)], kept: kept) == nil)
        let pastKept: [(ReplicaID, UInt64)] = [(app, 3), (retired, 41)]
        let past = try #require(refusal(pastKept, kept: kept))
        #expect(past.code == .resetRequired)
        #expect(past.action == .reset)
        #expect(past.message.contains("41 changesets of replica \(retired)"), "\(past.message)")
        #expect(past.message.contains("retired epoch"))
        // An epoch renewed from what the log held kept none of its own: any of its changesets means a reset.
        #expect(refusal([(older, 1)], kept: kept)?.code == .resetRequired)
        // No retired epoch: nothing to judge.
        #expect(refusal([(retired, 1_000)], kept: [:]) == nil)
    }
}
