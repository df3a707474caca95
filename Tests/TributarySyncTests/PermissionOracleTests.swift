import Foundation
import Testing
import Tributary
import TributaryDaemon
import TributaryMerge
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Authorization against an oracle (S4): three users under chat rules make random writes, about a third of them
/// outside their rights. An evaluator written here, independent of the daemon's, predicts each outcome; the test
/// checks the daemon decided the same, that every denied write was undone on its app, reached no other replica (no
/// view, no log), that no app ever holds an object its user may not read, and that none was ever sent one.
@Suite("Permission rules against an oracle")
struct PermissionOracleTests {
    /// Steps per user (`TRIBUTARY_S4_STEPS`; a deep run uses 2,000) and the seed (`TRIBUTARY_SEED`).
    static let steps =
        Int(ProcessInfo.processInfo.environment["TRIBUTARY_S4_STEPS"] ?? "") ?? Deep.count(ci: 40, deep: 2_000)
    /// Every how many steps the holdings of the daemon and the apps are compared with the oracle's
    /// (`TRIBUTARY_S4_CHECK_EVERY`, default every step; the last step always). Each verdict is checked at its step.
    static let checkEvery = max(1, Int(ProcessInfo.processInfo.environment["TRIBUTARY_S4_CHECK_EVERY"] ?? "") ?? 1)

    /// A user reads and writes its own User object; reads every Chatster and writes none; reads the messages it
    /// wrote and the public ones, and writes (creates, changes, deletes) the ones it wrote.
    static let rules = #"""
        {"rules": {
           "User": [{"name": "self", "applyWhen": {}, "read": {"_id": "%%user.id"}, "write": {"_id": "%%user.id"}}],
           "Chatster": [{"name": "anyone", "applyWhen": {}, "read": true, "write": false}],
           "ChatMessage": [{"name": "member", "applyWhen": {},
                            "read": {"$or": [{"authorID": "%%user.id"}, {"conversationID": "public"}]},
                            "write": {"authorID": "%%user.id"}}]}}
        """#

    /// The oracle's view of one message.
    struct Message: Equatable {
        var author: String
        var conversation: String
        var text: String
    }

    /// The oracle: the rules, evaluated here.
    static func mayRead(_ message: Message, _ user: String) -> Bool {
        message.author == user || message.conversation == "public"
    }

    static func mayWrite(_ message: Message, _ user: String) -> Bool { message.author == user }

    static let users = ["alice", "bob", "carol"]

    @Test("Three users, random writes, a third outside their rights: the daemon decides as the oracle does")
    func oracle() async throws {
        let directory = TemporaryDirectory("permission-oracle")
        let rules = try PermissionRules(json: Array(Self.rules.utf8))
        let (server, endpoint) = try await TokenAuthenticationTests.daemon(directory) { $0.permissionRules = rules }
        var apps: [String: Replica] = [:]
        var sessions: [String: SyncSession] = [:]
        for user in Self.users {
            let app = try PermissionRulesSyncTests.app(directory, user)
            try app.subscriptions.commit { subs in
                subs.append("User", where: "TRUEPREDICATE", name: "users")
                subs.append("Chatster", where: "TRUEPREDICATE", name: "chatsters")
                subs.append("ChatMessage", where: "TRUEPREDICATE", name: "messages")
            }
            sessions[user] = try await PermissionRulesSyncTests.connect(app, user, to: endpoint)
            try await app.write { txn in
                try txn.create("User", ["_id": .string(user), "userName": .string(user), "presence": "on-line"])
            }
            apps[user] = app
        }
        let appsList = apps
        let sessionsList = sessions
        func syncAll() async throws {
            for user in Self.users {
                try await PermissionRulesSyncTests.sync(sessionsList[user]!, user)
            }
        }
        try await syncAll()
        try await server.replica.write { txn in
            for user in Self.users {
                try txn.create("Chatster", ["_id": .string(user), "userName": .string(user), "presence": "on-line"])
            }
        }
        try await syncAll()

        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 34))
        var messages: [String: Message] = [:]
        // Every message that ever stood, deleted ones included: no write may change who may read a message.
        var stood: [String: Message] = [:]
        var denied = 0
        var allowed = 0
        for step in 0..<(Self.steps * Self.users.count) {
            let next = step + 1
            let user = Self.users[Int(random.next() % 3)]
            let app = appsList[user]!
            let session = sessionsList[user]!
            let rejectionsBefore = session.rejections.count
            // The text marks a write the oracle denies, so that the logs can be searched for it afterwards.
            let held = messages.filter { Self.mayRead($0.value, user) }.keys.sorted()
            let choice = random.next() % 10
            let legal: Bool
            let touched: String
            if choice < 3 || held.isEmpty {
                // A new message, in the user's own name or (illegal) another's.
                let own = random.next() % 3 != 0
                let author = own ? user : Self.users.filter { $0 != user }[Int(random.next() % 2)]
                let conversation = random.next() % 2 == 0 ? "public" : "c\(random.next() % 3)"
                legal = own
                let id = "m\(next)"
                touched = id
                let text = legal ? "message \(next)" : "denied \(next)"
                try await app.write { txn in
                    try txn.create(
                        "ChatMessage",
                        RChatFlexibleSyncTests.message(id, conversation: conversation, author: author, text: text))
                }
                if legal {
                    messages[touched] = Message(author: author, conversation: conversation, text: text)
                    stood[touched] = messages[touched]
                }
            } else if choice < 6 {
                // A changed text: allowed on the user's own messages only.
                let id = held[Int(random.next() % UInt64(held.count))]
                touched = id
                legal = Self.mayWrite(messages[id]!, user)
                let text = legal ? "edited \(next)" : "denied \(next)"
                try await app.write { try $0.update("ChatMessage", primaryKey: .string(id), ["text": .string(text)]) }
                if legal { messages[touched]!.text = text }
            } else if choice < 7 {
                // A message handed to another author: never allowed (the role may not write it afterwards).
                let id = held[Int(random.next() % UInt64(held.count))]
                touched = id
                legal = false
                let other = Self.users.filter { $0 != user }[Int(random.next() % 2)]
                try await app.write { txn in
                    try txn.update(
                        "ChatMessage", primaryKey: .string(id),
                        ["authorID": .string(other), "text": .string("denied \(next)")])
                }
            } else if choice < 8 {
                // A deletion: allowed on the user's own messages only.
                let id = held[Int(random.next() % UInt64(held.count))]
                touched = id
                legal = Self.mayWrite(messages[id]!, user)
                _ = try await app.write { try $0.delete("ChatMessage", primaryKey: .string(id)) }
                if legal { messages[touched] = nil }
            } else if choice < 9 {
                // A Chatster changed: no one may.
                let id = Self.users[Int(random.next() % 3)]
                touched = id
                legal = false
                try await app.write { txn in
                    try txn.update("Chatster", primaryKey: .string(id), ["presence": .string("denied \(next)")])
                }
            } else {
                // A User object: the user's own (allowed), or one for someone else (denied).
                let own = random.next() % 2 == 0
                legal = own
                let id = own ? user : "stranger\(next)"
                touched = id
                try await app.write { txn in
                    if own {
                        try txn.update("User", primaryKey: .string(user), ["presence": .string("step \(next)")])
                    } else {
                        try txn.create(
                            "User", ["_id": .string(id), "userName": .string("denied \(next)"), "presence": "on-line"])
                    }
                }
            }
            if legal { allowed += 1 } else { denied += 1 }
            // The writer's upload first: the others' downloads then include it.
            try await PermissionRulesSyncTests.sync(session, user)
            try await syncAll()

            // The daemon decided as the oracle did.
            let rejections = session.rejections.dropFirst(rejectionsBefore)
            let verdict = legal ? "allowed" : "denied"
            #expect(
                rejections.count == (legal ? 0 : 1),
                "step \(step): \(user)'s write to \(touched) (\(verdict) by the oracle): \(rejections.map(\.reason))")
            if !legal {
                #expect(rejections.first?.reason.contains("\"\(touched)\"") == true, "\(rejections.map(\.reason))")
            }
            // The daemon holds what the oracle holds; every app exactly what its user may read, equal to the daemon's.
            guard next % Self.checkEvery == 0 || next == Self.steps * Self.users.count else { continue }
            let daemonMessages = try Self.messages(server.replica)
            #expect(daemonMessages == messages, "step \(step): the daemon's messages differ from the oracle's")
            for other in Self.users {
                let held = try Self.messages(appsList[other]!)
                let readable = messages.filter { Self.mayRead($0.value, other) }
                #expect(held == readable, "step \(step): \(other) holds other messages than it may read")
                #expect(
                    try appsList[other]!.objects("User").map(\.primaryKey) == [.string(other)],
                    "step \(step): \(other) holds another user's User object")
            }
        }
        #expect(denied > 0 && allowed > 0)

        // No denied write left a trace outside its own app: in no view and no log of the daemon or another app.
        for (name, replica) in [("the daemon", server.replica)] + Self.users.map({ ($0, appsList[$0]!) }) {
            for changeset in try replica.changesets(missingFrom: VersionVector()) {
                guard changeset.origin != replica.replicaID else { continue }
                for instruction in changeset.instructions where "\(instruction)".contains("denied ") {
                    Issue.record("\(name)'s log holds a denied write from elsewhere: \(instruction)")
                }
            }
            for type in ["User", "Chatster", "ChatMessage"] {
                for object in try replica.objects(type) where "\(object.values)".contains("denied ") {
                    Issue.record("\(name) holds a denied write: \(object)")
                }
            }
            #expect(try replica.verify().passed)
        }
        // Every download (each object state and each changeset the daemon sent, as the apps keep them) carried only
        // objects its user may read.
        for user in Self.users {
            let app = appsList[user]!
            var sent: [(type: String, id: PrimaryKey, what: String)] = []
            for (key, record) in try app.receivedObjectStates() where record != nil {
                sent.append((key.type, key.primaryKey, "an object state"))
            }
            for changeset in try app.changesets(missingFrom: VersionVector()) where changeset.origin != app.replicaID {
                for instruction in changeset.instructions {
                    if let object = instruction.object {
                        sent.append((object.type, object.primaryKey, "\(instruction)"))
                    }
                }
            }
            #expect(!sent.isEmpty)
            for (type, id, what) in sent {
                let readable: Bool
                switch (type, id) {
                case ("ChatMessage", .string(let id)): readable = stood[id].map { Self.mayRead($0, user) } ?? false
                case ("User", _): readable = id == .string(user)
                case ("Chatster", _): readable = true
                default: readable = false
                }
                #expect(readable, "\(user) was sent \(type)[\(id)], which it may not read: \(what)")
            }
        }
        for session in sessionsList.values { await session.close() }
        await server.stop()
    }

    /// The messages a replica holds, as the oracle sees them.
    static func messages(_ replica: Replica) throws -> [String: Message] {
        var result: [String: Message] = [:]
        for object in try replica.objects("ChatMessage") {
            guard case .string(let id) = object.primaryKey, case .string(let author) = object["authorID"],
                case .string(let conversation) = object["conversationID"], case .string(let text) = object["text"]
            else { continue }
            result[id] = Message(author: author, conversation: conversation, text: text)
        }
        return result
    }
}
