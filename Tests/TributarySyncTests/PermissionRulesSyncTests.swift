import Foundation
import NIOCore
import NIOWebSocket
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// A daemon enforcing the RChat permission rules over loopback: what each user's app receives is what the user may
/// read, and a write the user may not make is undone on its app and reaches no other replica.
@Suite("Permission rules over sync")
struct PermissionRulesSyncTests {
    typealias Tokens = TokenAuthenticationTests

    static func app(_ directory: TemporaryDirectory, _ user: String) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.author = user
        return try Replica.open(
            directory: directory.appending(user), schema: RChatFlexibleSyncTests.schema, configuration: configuration)
    }

    static func keys(_ replica: Replica, _ type: String) throws -> [String] {
        try replica.objects(type).compactMap { if case .string(let id) = $0.primaryKey { id } else { nil } }.sorted()
    }

    static func connect(_ replica: Replica, _ user: String, to endpoint: SyncEndpoint) async throws -> SyncSession {
        let token = try await Tokens.hs256(Tokens.claims(user))
        return replica.connect(to: endpoint, credentials: .token(token), configuration: LoopbackSyncTests.fastBackoff)
    }

    /// Uploads what the user's app wrote, and downloads what the daemon holds for it.
    static func sync(_ session: SyncSession, _ user: String) async throws {
        try await LoopbackSyncTests.within(.seconds(120), "\(user)'s sync") {
            try await session.waitForUpload()
            try await session.waitForDownload()
        }
    }

    /// Uploads what `app` wrote since `since` as its session would, over a connection of its own to `endpoint`, and
    /// returns the reasons of the acknowledgement's rejections; the app itself receives nothing of the reply (its
    /// connection dropped before the daemon's corrections and acknowledgement reached it).
    static func uploadLosingTheReply(
        _ app: Replica, _ user: String, since: VersionVector, to endpoint: SyncEndpoint
    ) async throws -> String {
        let recorded = try app.export(missingFrom: since, origins: [app.replicaID])
        #expect(!recorded.changesets.isEmpty)
        guard let query = try app.flexibleSyncQuery() else {
            Issue.record("the app has no subscription set")
            return ""
        }
        let token = try await Tokens.hs256(Tokens.claims(user))
        return try await LoopbackSyncTests.within(.seconds(120), "\(user)'s upload") {
            try await RawSyncClient.with(endpoint, authorization: "Bearer \(token)") { client in
                var hello = RawSyncClient.hello(app.replicaID, vector: app.versionVector)
                hello.flexible = true
                guard case .success = try await client.handshake(hello) else { return "no welcome" }
                try await client.send(
                    .query(
                        QueryRequest(
                            version: query.heldVersion, subscriptions: query.held, heldVersion: query.heldVersion,
                            held: query.held)))
                try await client.send(HostileUploadTests.batch(1, recorded.changesets, recorded.progress))
                switch try await client.acknowledgement(of: 1) {
                case .success(let ack): return ack.rejected.map(\.reason).joined(separator: "; ")
                case .failure(let error): return "error \(error)"
                case nil: return "closed"
                }
            }
        }
    }

    @Test("A refused write is undone when the app reconnects, though the connection dropped before the correction")
    func correctionAfterADroppedConnection() async throws {
        let directory = TemporaryDirectory("permissions-dropped")
        let rules = try PermissionRules(json: Array(RChat.rules.utf8))
        let (server, endpoint) = try await Tokens.daemon(directory) { $0.permissionRules = rules }
        let alice = try Self.app(directory, "alice")
        try alice.subscriptions.commit { subs in
            subs.append("User", where: "TRUEPREDICATE", name: "users")
            subs.append("ChatMessage", where: "conversationID == 'c1'", name: "conversation")
        }
        let first = try await Self.connect(alice, "alice", to: endpoint)
        try await LoopbackSyncTests.within(.seconds(120), "alice's set") { try await alice.subscriptions.waitForSync() }
        await first.close()
        let before = alice.versionVector
        try await alice.write { txn in
            try txn.create(
                "ChatMessage", RChatFlexibleSyncTests.message("m1", conversation: "c1", author: "alice", text: "hi"))
            try txn.create(
                "ChatMessage", RChatFlexibleSyncTests.message("m2", conversation: "c1", author: "bob", text: "as bob"))
        }
        let reply = try await Self.uploadLosingTheReply(alice, "alice", since: before, to: endpoint)
        #expect(reply.contains("ChatMessage[\"m2\"]"), "the daemon refused the write: \(reply)")
        // Kept until the app says it received the correction: the reply was lost, so it is not forgotten.
        #expect(try server.replica.refusals(of: alice.replicaID, after: 0).map(\.primaryKey) == [.string("m2")])

        let again = try await Self.connect(alice, "alice", to: endpoint)
        try await Self.sync(again, "alice")
        try await LoopbackSyncTests.within(.seconds(120), "the correction at alice") {
            while try Self.keys(alice, "ChatMessage") != ["m1"] { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(try alice.verify().passed)
        #expect(try Self.keys(server.replica, "ChatMessage") == ["m1"])
        await again.close()
        await server.stop()
    }

    @Test("The RChat rules: each app holds what its user may read; writes the user may not make are undone")
    func rchatRules() async throws {
        let directory = TemporaryDirectory("permissions")
        let rules = try PermissionRules(json: Array(RChat.rules.utf8))
        let (server, endpoint) = try await Tokens.daemon(directory) { $0.permissionRules = rules }
        let alice = try Self.app(directory, "alice")
        let bob = try Self.app(directory, "bob")
        var opened: [String: SyncSession] = [:]
        for (replica, user) in [(alice, "alice"), (bob, "bob")] {
            // Every user, every chatster and the conversation: the rules decide which users arrive.
            try replica.subscriptions.commit { subs in
                subs.append("User", where: "TRUEPREDICATE", name: "users")
                subs.append("Chatster", where: "TRUEPREDICATE", name: "chatsters")
                subs.append("ChatMessage", where: "conversationID == 'c1'", name: "conversation")
            }
            opened[user] = try await Self.connect(replica, user, to: endpoint)
            try await LoopbackSyncTests.within(.seconds(120), "\(user)'s set") {
                try await replica.subscriptions.waitForSync()
            }
            try await replica.write { txn in
                try txn.create("User", ["_id": .string(user), "userName": .string(user), "presence": "on-line"])
            }
        }
        let sessions = opened
        for user in ["alice", "bob"] { try await Self.sync(sessions[user]!, user) }
        // A trigger's work: the daemon keeps the Chatster objects (no app may write them).
        try await server.replica.write { txn in
            for user in ["alice", "bob"] {
                try txn.create(
                    "Chatster", ["_id": .string(user), "userName": .string(user), "presence": "on-line"])
            }
        }
        for (replica, user) in [(alice, "alice"), (bob, "bob")] {
            try await Self.sync(sessions[user]!, user)
            #expect(try Self.keys(replica, "User") == [user], "\(user) reads its own User object only")
            #expect(try Self.keys(replica, "Chatster") == ["alice", "bob"])
        }
        #expect(try Self.keys(server.replica, "User") == ["alice", "bob"])

        // Alice writes a message of her own (allowed), one in Bob's name, a User object for someone else, and
        // changes a Chatster: only the first stands.
        try await alice.write { txn in
            try txn.create(
                "ChatMessage", RChatFlexibleSyncTests.message("m1", conversation: "c1", author: "alice", text: "hi"))
            try txn.create(
                "ChatMessage", RChatFlexibleSyncTests.message("m2", conversation: "c1", author: "bob", text: "as bob"))
        }
        try await alice.write { txn in
            try txn.create("User", ["_id": "mallory", "userName": "mallory", "presence": "on-line"])
        }
        try await alice.write { txn in
            try txn.update("Chatster", primaryKey: .string("bob"), ["presence": "off-line"])
        }
        try await Self.sync(sessions["alice"]!, "alice")
        #expect(try Self.keys(alice, "ChatMessage") == ["m1"], "the message in Bob's name is undone")
        #expect(try Self.keys(alice, "User") == ["alice"], "the User object for someone else is undone")
        #expect(try alice.object("Chatster", primaryKey: .string("bob"))?["presence"] == "on-line")
        let reasons = sessions["alice"]!.rejections.map(\.reason)
        #expect(reasons.contains { $0.contains("ChatMessage[\"m2\"]") && $0.contains("role \"anyone\"") }, "\(reasons)")
        #expect(reasons.contains { $0.contains("User[\"mallory\"]") }, "\(reasons)")
        #expect(reasons.contains { $0.contains("Chatster[\"bob\"]") }, "\(reasons)")
        // Nothing denied reached the daemon's views.
        #expect(try Self.keys(server.replica, "ChatMessage") == ["m1"])
        #expect(try Self.keys(server.replica, "User") == ["alice", "bob"])
        #expect(try server.replica.object("Chatster", primaryKey: .string("bob"))?["presence"] == "on-line")

        // Bob receives Alice's message, and may not change it.
        try await LoopbackSyncTests.within(.seconds(120), "alice's message at bob") {
            while try Self.keys(bob, "ChatMessage") != ["m1"] { try await Task.sleep(for: .milliseconds(20)) }
        }
        try await bob.write { try $0.update("ChatMessage", primaryKey: .string("m1"), ["text": "edited by bob"]) }
        try await Self.sync(sessions["bob"]!, "bob")
        #expect(try bob.object("ChatMessage", primaryKey: .string("m1"))?["text"] == "hi")
        #expect(try server.replica.object("ChatMessage", primaryKey: .string("m1"))?["text"] == "hi")
        #expect(sessions["bob"]!.rejections.contains { $0.reason.contains("may not write this object") })
        for replica in [alice, bob, server.replica] { #expect(try replica.verify().passed) }

        // An app that does not sync by subscriptions is refused: the rules could not limit what it receives.
        let full = try Self.app(directory, "carol")
        let fullSession = try await Self.connect(full, "carol", to: endpoint)
        let ended = try await LoopbackSyncTests.within(.seconds(120), "carol's refusal") { () -> SyncError? in
            for await state in fullSession.states() {
                if case .disconnected(let error?) = state { return error }
            }
            return nil
        }
        #expect(ended?.code == .forbidden, "\(String(describing: ended))")
        #expect(ended?.message.contains("flexible sync") == true)
        for session in sessions.values { await session.close() }
        await fullSession.close()
        await server.stop()
    }

    @Test("A rule change revokes and grants read access while sessions are connected")
    func ruleChangeWhileConnected() async throws {
        let directory = TemporaryDirectory("permissions-change")
        func rules(_ read: String) throws -> PermissionRules {
            try PermissionRules(
                json: Array(
                    #"{"rules": {"Task": [{"name": "r", "applyWhen": {}, "read": \#(read), "write": false}]}}"#.utf8))
        }
        let (server, endpoint) = try await Tokens.daemon(directory) {
            $0.permissionRules = try? rules(#"{"title": "%%user.id"}"#)
        }
        // The tasks, written on the daemon (the apps may write none).
        let writer = try Replica.open(directory: directory.appending("seed"), schema: LoopbackSyncTests.schema)
        try await writer.write { txn in
            for (index, title) in ["alice", "alice", "bob", "bob", "carol"].enumerated() {
                try txn.create(
                    "Task", ["_id": .string("t\(index)"), "title": .string(title), "count": .int(Int64(index))])
            }
        }
        try server.replica.integrate(encoded: try writer.encodedChangesets(missingFrom: server.replica.versionVector))
        writer.close()

        var configuration = Replica.Configuration()
        configuration.author = "alice"
        let alice = try Replica.open(
            directory: directory.appending("alice"), schema: LoopbackSyncTests.schema, configuration: configuration)
        try alice.subscriptions.commit { $0.append("Task", where: "TRUEPREDICATE", name: "all") }
        let session = try await Self.connect(alice, "alice", to: endpoint)
        try await LoopbackSyncTests.within(.seconds(120), "alice's set") { try await alice.subscriptions.waitForSync() }
        #expect(try Self.keys(alice, "Task") == ["t0", "t1"])

        // Now every task with a count of 3 or more is readable, and alice's own no longer are.
        await server.reloadPermissionRules(try rules(#"{"count": {"$gte": 3}}"#))
        try await LoopbackSyncTests.within(.seconds(120), "the new rules at alice") {
            while try Self.keys(alice, "Task") != ["t3", "t4"] { try await Task.sleep(for: .milliseconds(20)) }
        }
        try FlexibleSyncTests.checkHeldEqualDaemon(alice, server.replica)
        // Without rules, the subscription alone decides.
        await server.reloadPermissionRules(nil)
        try await LoopbackSyncTests.within(.seconds(120), "no rules at alice") {
            while try Self.keys(alice, "Task").count != 5 { try await Task.sleep(for: .milliseconds(20)) }
        }
        #expect(try server.replica.objects("Task").count == 5, "nothing was deleted anywhere but on the app")
        await session.close()
        await server.stop()
    }

    @Test("Replayed uploads change nothing (S5): every changeset sent again twice, shuffled; another author's refused")
    func replayedUploads() async throws {
        let directory = TemporaryDirectory("permissions-replay")
        let rules = try PermissionRules(json: Array(RChat.rules.utf8))
        let (server, endpoint) = try await Tokens.daemon(directory) { $0.permissionRules = rules }
        let alice = try Self.app(directory, "alice")
        try alice.subscriptions.commit { subs in
            subs.append("User", where: "TRUEPREDICATE", name: "users")
            subs.append("ChatMessage", where: "TRUEPREDICATE", name: "messages")
        }
        let session = try await Self.connect(alice, "alice", to: endpoint)
        for index in 0..<12 {
            try await alice.write { txn in
                // Every third message in Bob's name: denied.
                let author = index % 3 == 2 ? "bob" : "alice"
                try txn.create(
                    "ChatMessage",
                    RChatFlexibleSyncTests.message("m\(index)", conversation: "c1", author: author, text: "\(index)"))
            }
        }
        try await Self.sync(session, "alice")
        await session.close()
        #expect(try Self.keys(server.replica, "ChatMessage").count == 8)
        let length = server.replica.lastLocalSequence
        let digest = try server.replica.viewDigest(includeVersionVector: false)

        // Alice's own changesets, each twice, shuffled, from a client holding her token.
        var changesets = try alice.changesets(missingFrom: VersionVector()).filter { $0.origin == alice.replicaID }
            .map { ChangesetCodec.encode($0) }
        #expect(changesets.count >= 12)
        changesets += changesets
        var random = SplitMix64(seed: 5)
        changesets.shuffle(using: &random)
        let token = try await Tokens.hs256(Tokens.claims("alice"))
        let answers = try await Self.upload(
            changesets, as: alice.replicaID,
            holding: VersionVector([(alice.replicaID, alice.versionVector[alice.replicaID])]),
            token: token, to: endpoint)
        #expect(answers.error == nil, "\(String(describing: answers.error))")
        #expect(answers.acknowledged == changesets.count)
        #expect(server.replica.lastLocalSequence == length, "nothing new in the log")
        #expect(try server.replica.viewDigest(includeVersionVector: false) == digest, "the views unchanged")

        // A changeset naming another author, under Alice's token: refused, and nothing of it kept.
        var configuration = Replica.Configuration()
        configuration.author = "bob"
        let forger = try Replica.open(
            directory: directory.appending("forger"), schema: RChatFlexibleSyncTests.schema,
            configuration: configuration)
        try await forger.write { txn in
            try txn.create(
                "ChatMessage", RChatFlexibleSyncTests.message("forged", conversation: "c1", author: "bob", text: "x"))
        }
        let forged = try forger.encodedChangesets(missingFrom: VersionVector())
        let refused = try await Self.upload(forged, as: forger.replicaID, token: token, to: endpoint)
        #expect(refused.error?.code == .forbidden, "\(String(describing: refused.error))")
        #expect(try server.replica.object("ChatMessage", primaryKey: .string("forged")) == nil)
        #expect(server.replica.lastLocalSequence == length)
        forger.close()
        await server.stop()
    }

    @Test("tributaryd refuses rules it cannot enforce when it starts, naming the element at fault")
    func tributarydRefusesBadRules() throws {
        let directory = TemporaryDirectory("permissions-tributaryd")
        let executable = try #require(
            ChildExecutable.path("tributaryd"), "tributaryd is not next to the test binary (swift build)")
        let secret = directory.appending("secret.txt")
        try Data(String(repeating: "k", count: 48).utf8).write(to: URL(fileURLWithPath: secret))
        let bad = directory.appending("bad.json")
        try Data(#"{"rules": {"Note": [{"name": "r", "applyWhen": {}, "read": {"t": {"$where": "1"}}}]}}"#.utf8)
            .write(to: URL(fileURLWithPath: bad))
        let good = directory.appending("rchat.json")
        try Data(RChat.rules.utf8).write(to: URL(fileURLWithPath: good))
        let cases: [([String], String)] = [
            (["--rules", bad, "--token-key", "HS256:\(secret)"], #"rules.Note[0].read.t["$where"]: operator $where"#),
            (["--rules", good], "permission rules need token keys"),
            (
                ["--rules", directory.appending("missing.json"), "--token-key", "HS256:\(secret)"],
                "cannot read the permission rules"
            ),
        ]
        for (index, (arguments, expected)) in cases.enumerated() {
            let child = try ChildProcess(
                executable: executable,
                arguments: [directory.appending("daemon-\(index)"), "--listen", "127.0.0.1:0"] + arguments,
                stderrPath: directory.appending("daemon-\(index).log"))
            let exit = child.waitForExit(timeout: 60)
            #expect(exit != nil && exit != .exited(0), "\(arguments): \(String(describing: exit))")
            if exit == nil { child.killAndWait() }
            #expect(child.standardError.contains(expected), "\(arguments): \(child.standardError)")
        }
    }

    /// Uploads `changesets` as the flexible-sync app `replica`, one per batch, each after the acknowledgement of the
    /// one before: how many were acknowledged, and the error the daemon ended the session with, if any.
    static func upload(
        _ changesets: [[UInt8]], as replica: ReplicaID, holding vector: VersionVector = VersionVector(), token: String,
        to endpoint: SyncEndpoint
    ) async throws -> (acknowledged: Int, error: SyncError?) {
        let channel = try await WebSocketDialer.connect(
            to: endpoint, authorization: "Bearer \(token)", timeout: .seconds(120))
        let writer = WebSocketWriter(channel: channel.channel, masking: true)
        return try await LoopbackSyncTests.within(.seconds(120), "the upload") {
            try await channel.executeThenClose { inbound, _ in
                try await writer.send(
                    MessageCodec.encode(
                        .hello(Hello(replica: replica, role: .app, vector: vector, flexible: true))))
                var acknowledged = 0
                var started = false
                func send() async throws {
                    let batch = ChangesetBatch(
                        number: UInt64(acknowledged + 1), changesets: [changesets[acknowledged]],
                        progress: VersionVector(), more: false)
                    try await writer.send(MessageCodec.encode(.changesets(batch)))
                }
                for try await frame in inbound where frame.opcode == .binary {
                    var data = frame.unmaskedData
                    switch try MessageCodec.decode(data.readBytes(length: data.readableBytes) ?? []) {
                    case .welcome:
                        let query = QueryRequest(
                            version: 1, subscriptions: [Subscription(type: "ChatMessage", query: "TRUEPREDICATE")])
                        try await writer.send(MessageCodec.encode(.query(query)))
                    case .queryState(let state) where state.version == 1 && !started:
                        started = true
                        if changesets.isEmpty { return (0, nil) }
                        try await send()
                    case .ack(let ack) where ack.batch == UInt64(acknowledged + 1):
                        acknowledged += 1
                        if acknowledged == changesets.count { return (acknowledged, nil) }
                        try await send()
                    case .changesets(let batch):
                        try await writer.send(
                            MessageCodec.encode(.ack(Acknowledgement(batch: batch.number, checkpoint: batch.progress))))
                    case .error(let error):
                        return (acknowledged, error)
                    default:
                        continue
                    }
                }
                return (acknowledged, nil)
            }
        }
    }
}
