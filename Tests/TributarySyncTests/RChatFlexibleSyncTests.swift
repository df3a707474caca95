import Foundation
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// The RChat flow on flexible sync: each user's app subscribes by name to its own User object and to the messages of
/// the conversation on screen, sees messages arrive live, and drops the conversation when it leaves it.
@Suite("RChat on flexible sync")
struct RChatFlexibleSyncTests {
    static let schema: Schema = {
        // The article's schemas (App Services JSON), as the apps declare them.
        (try? Schema(json: RChat.schemas, version: 1)) ?? Schema(types: [])
    }()

    static func app(_ directory: TemporaryDirectory, _ name: String) throws -> Replica {
        try Replica.open(directory: directory.appending(name), schema: schema)
    }

    static func message(_ id: String, conversation: String, author: String, text: String) -> [String: Value] {
        [
            "_id": .string(id), "authorID": .string(author), "author": .string(author),
            "conversationID": .string(conversation), "text": .string(text), "timestamp": .date(Date()),
        ]
    }

    static func messageIDs(_ replica: Replica) throws -> [String] {
        try replica.objects("ChatMessage").compactMap { if case .string(let id) = $0.primaryKey { id } else { nil } }
            .sorted()
    }

    /// Subscribes as RChat's views do: the signed-in user's own User object, and the open conversation's messages.
    static func openConversation(_ replica: Replica, user: String, conversation: String) async throws {
        try await LoopbackSyncTests.within(.seconds(120), "\(user)'s subscriptions") {
            try await replica.subscriptions.update { subs in
                subs.append("User", where: "_id == '\(user)'", name: "user_id")
                subs.append("ChatMessage", where: "conversationID == '\(conversation)'", name: "conversation")
            }
        }
    }

    @Test("Two users' apps: named subscriptions, live messages, a conversation dropped, sign-out")
    func rchatFlow() async throws {
        #expect(Self.schema[type: "ChatMessage"] != nil)
        let directory = TemporaryDirectory("rchat")
        let (server, endpoint) = try await LoopbackSyncTests.daemon(directory, "daemon") {
            $0.queryableFields = ["ChatMessage": ["conversationID", "authorID"], "User": []]
        }
        let alice = try Self.app(directory, "alice")
        let bob = try Self.app(directory, "bob")
        let aliceSession = alice.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        let bobSession = bob.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)

        // Each user creates their User object under a subscription to it.
        for (replica, user) in [(alice, "alice"), (bob, "bob")] {
            try await LoopbackSyncTests.within(.seconds(120), "\(user)'s own subscription") {
                try await replica.subscriptions.update { $0.append("User", where: "_id == '\(user)'", name: "user_id") }
            }
            try await replica.write {
                try $0.create("User", ["_id": .string(user), "userName": .string(user), "presence": "on-line"])
            }
        }
        // Bob posts in two conversations before Alice opens one.
        try await Self.openConversation(bob, user: "bob", conversation: "c1")
        try await bob.subscriptions.update { subs in
            subs.append("ChatMessage", where: "conversationID == 'c2'", name: "other")
        }
        try await bob.write { txn in
            try txn.create("ChatMessage", Self.message("m1", conversation: "c1", author: "bob", text: "hello"))
            try txn.create("ChatMessage", Self.message("m2", conversation: "c2", author: "bob", text: "elsewhere"))
        }
        try await LoopbackSyncTests.within(.seconds(120), "bob's upload") { try await bobSession.waitForUpload() }

        try await Self.openConversation(alice, user: "alice", conversation: "c1")
        #expect(try Self.messageIDs(alice) == ["m1"], "only the open conversation's messages")
        #expect(try alice.objects("User").map(\.primaryKey) == [.string("alice")], "only her own User object")

        // A message arrives live: a live query on the conversation sees it without a refresh by hand.
        let seen = Task { () -> [PrimaryKey] in
            for try await change in alice.observe("ChatMessage", where: "conversationID == 'c1'") {
                let keys = change.results.map(\.primaryKey)
                if keys.contains(.string("m3")) { return keys }
            }
            return []
        }
        try await bob.write {
            try $0.create("ChatMessage", Self.message("m3", conversation: "c1", author: "bob", text: "are you there?"))
        }
        let keys = try await LoopbackSyncTests.within(.seconds(120), "the live message") { try await seen.value }
        #expect(Set(keys) == [.string("m1"), .string("m3")])

        // Alice answers; Bob's app has it.
        try await alice.write {
            try $0.create("ChatMessage", Self.message("m4", conversation: "c1", author: "alice", text: "yes"))
        }
        try await LoopbackSyncTests.within(.seconds(120), "alice's upload") { try await aliceSession.waitForUpload() }
        try await LoopbackSyncTests.within(.seconds(120), "bob's download") { try await bobSession.waitForDownload() }
        #expect(try Self.messageIDs(bob) == ["m1", "m2", "m3", "m4"])

        // Alice leaves the conversation: its messages leave her device, and only hers.
        try await LoopbackSyncTests.within(.seconds(120), "dropping the conversation") {
            try await alice.subscriptions.update { $0.remove(named: "conversation") }
        }
        #expect(try Self.messageIDs(alice) == [])
        #expect(try Self.messageIDs(bob) == ["m1", "m2", "m3", "m4"])
        #expect(try server.replica.objects("ChatMessage").count == 4)

        // A subscription on a field the daemon does not make queryable is refused, naming it.
        await #expect {
            try await LoopbackSyncTests.within(.seconds(120), "a refused subscription") {
                try await alice.subscriptions.update {
                    $0.append("ChatMessage", where: "text == 'hello'", name: "search")
                }
            }
        } throws: { error in
            (error as? TributaryError)?.message.contains("key \"text\" is not a queryable field") == true
        }
        try alice.subscriptions.commit { $0.remove(named: "search") }

        // Signing out removes every subscription: the device holds nothing synced any more.
        try await LoopbackSyncTests.within(.seconds(120), "signing out") {
            try await alice.subscriptions.update { $0.removeAll() }
        }
        #expect(try alice.objects("User").isEmpty && Self.messageIDs(alice).isEmpty)
        #expect(try alice.verify().passed && bob.verify().passed)

        await aliceSession.close()
        await bobSession.close()
        await server.stop()
    }
}
