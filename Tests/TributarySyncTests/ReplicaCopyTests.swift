import Foundation
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributarySync
import TributaryTestSupport

/// A copy of a daemon's replica fetched over the network (`GET /replica`, `tributaryd --copy-from`): only for a
/// caller with one of the daemon's access tokens, consistent, checked, and written only into an empty directory.
@Suite("Copies of a daemon's replica over the network")
struct ReplicaCopyTests {
    typealias Tokens = TokenAuthenticationTests

    @Test(
        "An access token fetches a copy that opens as the daemon's replica; no token, a user's token or a full directory are refused"
    )
    func copies() async throws {
        let directory = TemporaryDirectory("replica-copy")
        let (server, endpoint) = try await Tokens.daemon(directory) { $0.accessTokens = ["peer-secret"] }
        let alice = try Tokens.app(directory, "alice", author: "alice")
        let aliceToken = try await Tokens.hs256(Tokens.claims("alice"))
        let session = alice.connect(
            to: endpoint, credentials: .token(aliceToken), configuration: LoopbackSyncTests.fastBackoff)
        try await alice.write { txn in
            for index in 0..<50 { try txn.create("Task", ["_id": .string("t\(index)"), "count": .int(Int64(index))]) }
        }
        try await LoopbackSyncTests.within(.seconds(120), "alice's upload") { try await session.waitForUpload() }

        // Refused: no token, a user's token (a copy holds every user's data), a token the daemon does not know.
        for (authorization, expected) in [
            (nil, ["401", "requires a token"]), ("Bearer \(aliceToken)", ["403", "access tokens"]),
            ("Bearer guess", ["401", "one of the daemon's access tokens"]),
        ] as [(String?, [String])] {
            let target = directory.appending("refused")
            let error = await #expect(throws: ReplicaCopyError.self) {
                _ = try await ReplicaCopy.fetch(from: endpoint, authorization: authorization, into: target)
            }
            for part in expected {
                #expect(error?.message.contains(part) == true, "\(String(describing: error))")
            }
            #expect(!FileManager.default.fileExists(atPath: target), "a refused copy left \(target)")
            #expect(!FileManager.default.fileExists(atPath: target + ".copying"))
        }

        // With an access token: the replica at one commit, which opens as the daemon's.
        let copy = directory.appending("copy")
        let fetched = try await ReplicaCopy.fetch(from: endpoint, authorization: "Bearer peer-secret", into: copy)
        #expect(fetched.bytes > 0)
        #expect(fetched.replica == "\(server.replica.replicaID)")
        #expect(!FileManager.default.fileExists(atPath: copy + ".copying"))
        let opened = try Replica.open(directory: copy)
        #expect(opened.replicaID == server.replica.replicaID)
        #expect(opened.versionVector == server.replica.versionVector)
        #expect(try opened.inspection.recordsDigest() == server.replica.inspection.recordsDigest())
        #expect(try opened.objects("Task").count == 50)
        #expect(try opened.verify().passed)
        opened.close()

        // A directory that holds anything is left alone.
        let error = await #expect(throws: ReplicaCopyError.self) {
            _ = try await ReplicaCopy.fetch(from: endpoint, authorization: "Bearer peer-secret", into: copy)
        }
        #expect(error?.message.contains("not empty") == true, "\(String(describing: error))")
        #expect(try Replica.open(directory: copy).objects("Task").count == 50)

        // Nothing listening: the error names the address.
        await server.stop()
        let gone = await #expect(throws: ReplicaCopyError.self) {
            _ = try await ReplicaCopy.fetch(
                from: endpoint, authorization: "Bearer peer-secret", into: directory.appending("gone"))
        }
        #expect(gone?.message.contains("\(endpoint)") == true, "\(String(describing: gone))")
        await session.close()
    }
}
