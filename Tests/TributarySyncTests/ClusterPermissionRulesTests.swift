import Foundation
import Testing
import Tributary
import TributaryCluster
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Permission rules in a cluster: each daemon judges the uploads it takes, before they reach the shared log, so a
/// write the rules deny reaches no daemon, and what one daemon's app may write reaches the others'.
@Suite(
    "Permission rules in a cluster", .serialized,
    .enabled(if: PostgresServer.isAvailable, Comment(rawValue: PostgresServer.unavailable)))
struct ClusterPermissionRulesTests {
    typealias Rules = PermissionRulesSyncTests

    /// A daemon of the cluster of `log`, checking tokens and enforcing `rules`.
    static func daemon(
        _ directory: TemporaryDirectory, _ name: String, log url: String, rules: PermissionRules
    ) async throws -> (SyncServer, SyncEndpoint, SharedLog) {
        var logConfiguration = try SharedLog.Configuration(url: url, log: "rchat")
        // The whole suite runs at once on 2 cores: PostgreSQL may take longer than the default to answer.
        logConfiguration.timeout = .seconds(120)
        let log = try await SharedLog.open(logConfiguration)
        var replicaConfiguration = Replica.Configuration()
        replicaConfiguration.durability = .none
        let replica = try log.openReplica(directory: directory.appending(name), configuration: replicaConfiguration)
        var configuration = SyncServer.Configuration()
        configuration.port = 0
        configuration.handshakeDeadline = .seconds(120)
        configuration.tokenPolicy = TokenAuthenticationTests.policy
        configuration.tickInterval = .milliseconds(100)
        configuration.permissionRules = rules
        configuration.clusterPollInterval = .milliseconds(200)
        let server = SyncServer(cluster: try LogFollower(log: log, replica: replica), configuration: configuration)
        let port = try await server.start()
        return (server, SyncEndpoint(host: "127.0.0.1", port: port), log)
    }

    @Test("The RChat rules on two daemons: a denied write is undone and reaches no daemon; an allowed one reaches both")
    func rchatRulesAcrossDaemons() async throws {
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        let directory = TemporaryDirectory("cluster-permissions")
        let rules = try PermissionRules(json: Array(RChat.rules.utf8))
        let first = try await Self.daemon(directory, "daemon1", log: postgres.url, rules: rules)
        let second = try await Self.daemon(directory, "daemon2", log: postgres.url, rules: rules)
        let alice = try Rules.app(directory, "alice")
        let bob = try Rules.app(directory, "bob")
        var opened: [String: SyncSession] = [:]
        for (replica, user, endpoint) in [(alice, "alice", first.1), (bob, "bob", second.1)] {
            try replica.subscriptions.commit { subs in
                subs.append("User", where: "TRUEPREDICATE", name: "users")
                subs.append("ChatMessage", where: "conversationID == 'c1'", name: "conversation")
            }
            opened[user] = try await Rules.connect(replica, user, to: endpoint)
            try await LoopbackSyncTests.within(.seconds(120), "\(user)'s set") {
                try await replica.subscriptions.waitForSync()
            }
        }
        let sessions = opened

        // Alice, on daemon 1, writes a message of her own and one in Bob's name: only the first stands.
        try await alice.write { txn in
            try txn.create(
                "ChatMessage", RChatFlexibleSyncTests.message("m1", conversation: "c1", author: "alice", text: "hi"))
            try txn.create(
                "ChatMessage", RChatFlexibleSyncTests.message("m2", conversation: "c1", author: "bob", text: "as bob"))
        }
        try await Rules.sync(sessions["alice"]!, "alice")
        #expect(try Rules.keys(alice, "ChatMessage") == ["m1"], "the message in Bob's name is undone")
        #expect(sessions["alice"]!.rejections.contains { $0.reason.contains("ChatMessage[\"m2\"]") })

        // Bob, on daemon 2, receives Alice's message and may not change it.
        try await LoopbackSyncTests.within(.seconds(120), "alice's message at bob") {
            while try Rules.keys(bob, "ChatMessage") != ["m1"] { try await Task.sleep(for: .milliseconds(20)) }
        }
        try await bob.write { try $0.update("ChatMessage", primaryKey: .string("m1"), ["text": "edited by bob"]) }
        try await Rules.sync(sessions["bob"]!, "bob")
        #expect(try bob.object("ChatMessage", primaryKey: .string("m1"))?["text"] == "hi")
        #expect(sessions["bob"]!.rejections.contains { $0.reason.contains("may not write this object") })

        // Neither denied write reached the log, so no daemon holds it.
        let head = try await first.2.head()
        for (server, _, _) in [first, second] {
            try await LoopbackSyncTests.within(.seconds(120), "the daemon applying the log") {
                try await server.cluster?.waitUntilApplied(head)
            }
            #expect(try Rules.keys(server.replica, "ChatMessage") == ["m1"])
            #expect(try server.replica.object("ChatMessage", primaryKey: .string("m1"))?["text"] == "hi")
            #expect(try server.replica.verify().passed)
        }
        #expect(try first.0.replica.inspection.recordsDigest() == second.0.replica.inspection.recordsDigest())
        for session in sessions.values { await session.close() }
        for (server, _, log) in [first, second] {
            await server.stop()
            await log.close()
        }
    }

    /// The refused write's correction follows the app: the daemon that refused it stores the refusal with the changeset
    /// in the shared log, so another daemon sends the correction when the app syncs with it next.
    @Test("A write refused by one daemon is undone by another when the connection dropped before the correction")
    func refusalReachesAnotherDaemon() async throws {
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        let directory = TemporaryDirectory("cluster-refusals")
        let rules = try PermissionRules(json: Array(RChat.rules.utf8))
        let first = try await Self.daemon(directory, "daemon1", log: postgres.url, rules: rules)
        let second = try await Self.daemon(directory, "daemon2", log: postgres.url, rules: rules)
        let alice = try Rules.app(directory, "alice")
        try alice.subscriptions.commit { subs in
            subs.append("User", where: "TRUEPREDICATE", name: "users")
            subs.append("ChatMessage", where: "conversationID == 'c1'", name: "conversation")
        }
        let session = try await Rules.connect(alice, "alice", to: first.1)
        try await LoopbackSyncTests.within(.seconds(120), "alice's set") { try await alice.subscriptions.waitForSync() }
        await session.close()

        // Offline, Alice writes a message of her own and one in Bob's name.
        let before = alice.versionVector
        try await alice.write { txn in
            try txn.create(
                "ChatMessage", RChatFlexibleSyncTests.message("m1", conversation: "c1", author: "alice", text: "hi"))
            try txn.create(
                "ChatMessage", RChatFlexibleSyncTests.message("m2", conversation: "c1", author: "bob", text: "as bob"))
        }
        #expect(try Rules.keys(alice, "ChatMessage") == ["m1", "m2"])

        // Her upload reaches daemon 1, which refuses the message in Bob's name and acknowledges the rest; the
        // connection then drops, and neither the correction nor the acknowledgement reaches her app.
        let acknowledged = try await Rules.uploadLosingTheReply(alice, "alice", since: before, to: first.1)
        #expect(acknowledged.contains("ChatMessage[\"m2\"]"), "the daemon refused the write: \(acknowledged)")
        let head = try await first.2.head()
        try await LoopbackSyncTests.within(.seconds(120), "daemon 2 applying the log") {
            try await second.0.cluster?.waitUntilApplied(head)
        }
        #expect(try Rules.keys(second.0.replica, "ChatMessage") == ["m1"])

        // Her app syncs next with daemon 2, which never judged the upload: it sends the correction all the same.
        let moved = try await Rules.connect(alice, "alice", to: second.1)
        try await Rules.sync(moved, "alice")
        try await LoopbackSyncTests.within(.seconds(120), "the correction at alice") {
            while try Rules.keys(alice, "ChatMessage") != ["m1"] { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(try alice.object("ChatMessage", primaryKey: .string("m1"))?["text"] == "hi")
        #expect(try alice.verify().passed)
        // Both daemons keep the refusal (the one that judged the upload, in the commit that applied it) until the app
        // says, in a later session, that it received the correction.
        for (server, _, _) in [first, second] {
            let kept = try server.replica.refusals(of: alice.replicaID, after: 0)
            #expect(kept.map(\.type) == ["ChatMessage"] && kept.map(\.primaryKey) == [.string("m2")], "\(kept)")
        }

        await moved.close()
        for (server, _, log) in [first, second] {
            await server.stop()
            await log.close()
        }
    }
}
