import Foundation
import Testing
import Tributary
import TributaryDaemon
import TributaryMerge
import TributaryModel
import TributarySync
import TributaryTestSupport

/// Field-level permission rules over sync: a field a user may not read never reaches its app (not in a record, not in
/// an instruction), and a field it may not write keeps its value through the user's writes.
@Suite("Field-level permissions over sync")
struct FieldPermissionsSyncTests {
    typealias Tokens = TokenAuthenticationTests

    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Profile",
                properties: [
                    .scalar("_id", .string), .scalar("ownerID", .string, default: ""),
                    .scalar("name", .string, default: ""), .scalar("email", .string, default: ""),
                    .scalar("bio", .string, default: ""), Property("tags", .scalar(.string), list: true),
                ])
        ])

    /// Everyone reads every profile, but not its email; a user writes the bio, the tags and the owner of its own
    /// profiles, never the name (`emailRead` makes the email readable too).
    static func rules(emailRead: Bool) throws -> PermissionRules {
        try PermissionRules(
            json: Array(
                #"""
                [{"collection": "Profile", "roles": [
                  {"name": "member", "apply_when": {},
                   "document_filters": {"read": {}, "write": {"ownerID": "%%user.id"}},
                   "read": false, "write": false, "insert": true, "delete": true,
                   "fields": {"ownerID": {"write": true}, "name": {"read": true}, "bio": {"write": true},
                              "tags": {"write": true}, "email": {"read": \#(emailRead)}},
                   "additional_fields": {}}]}]
                """#.utf8))
    }

    static func profile(_ id: String, owner: String, name: String, email: String, tags: [String] = [])
        -> [String: Value]
    {
        [
            "_id": .string(id), "ownerID": .string(owner), "name": .string(name), "email": .string(email),
            "tags": .list(tags.map { .string($0) }),
        ]
    }

    /// Writes on a replica of the daemon's side, integrated into the daemon as a peer's changesets would be.
    static func write(
        _ server: SyncServer, on writer: Replica, _ body: @escaping @Sendable (Transaction) throws -> Void
    ) async throws {
        try await writer.write { txn in try body(txn) }
        try server.replica.integrate(encoded: try writer.encodedChangesets(missingFrom: server.replica.versionVector))
    }

    /// Every email the app ever received: in a record the daemon sent, or in an instruction of its log.
    static func emailsReceived(_ app: Replica) throws -> [String] {
        var found: [String] = []
        for (key, record) in try app.receivedObjectStates() {
            if case .register(let register)? = record?.fields["email"] { found.append("\(key): \(register.value)") }
        }
        for changeset in try app.changesets(missingFrom: VersionVector()) where changeset.origin != app.replicaID {
            for instruction in changeset.instructions where "\(instruction)".contains("@") {
                found.append("\(instruction)")
            }
        }
        return found
    }

    @Test("A hidden field never reaches the app; a protected one keeps its value; a rule change sends it")
    func hiddenAndProtectedFields() async throws {
        let directory = TemporaryDirectory("field-permissions")
        let (server, endpoint) = try await Tokens.daemon(directory) {
            $0.permissionRules = try? Self.rules(emailRead: false)
        }
        let writer = try Replica.open(directory: directory.appending("writer"), schema: Self.schema)
        try await Self.write(server, on: writer) { txn in
            try txn.create("Profile", Self.profile("p1", owner: "alice", name: "Ann", email: "ann@example.com"))
            try txn.create("Profile", Self.profile("p2", owner: "bob", name: "Bob", email: "bob@example.com"))
        }
        var configuration = Replica.Configuration()
        configuration.author = "alice"
        let alice = try Replica.open(
            directory: directory.appending("alice"), schema: Self.schema, configuration: configuration)
        try alice.subscriptions.commit { $0.append("Profile", where: "TRUEPREDICATE", name: "profiles") }
        let session = try await PermissionRulesSyncTests.connect(alice, "alice", to: endpoint)
        try await LoopbackSyncTests.within(.seconds(120), "alice's set") { try await alice.subscriptions.waitForSync() }
        #expect(try PermissionRulesSyncTests.keys(alice, "Profile") == ["p1", "p2"])
        #expect(try alice.object("Profile", primaryKey: .string("p1"))?["name"] == "Ann")
        #expect(try alice.object("Profile", primaryKey: .string("p1"))?["email"] == "", "the email reads its default")

        // Changes on the daemon's side: the name arrives, the email does not.
        try await Self.write(server, on: writer) { txn in
            try txn.update("Profile", primaryKey: .string("p1"), ["name": "Ann B.", "email": "ann@work.example.com"])
        }
        try await LoopbackSyncTests.within(.seconds(120), "the new name at alice") {
            while try alice.object("Profile", primaryKey: .string("p1"))?["name"] != "Ann B." {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(try alice.object("Profile", primaryKey: .string("p1"))?["email"] == "")

        // A create on an object alice holds, from a writer that had not seen it, gives the email: the object is sent
        // whole again instead, without it, and its list's elements keep the ids the daemon gave them.
        let other = try Replica.open(directory: directory.appending("other"), schema: Self.schema)
        try await Self.write(server, on: other) { txn in
            try txn.create(
                "Profile",
                Self.profile("p1", owner: "alice", name: "Ann B.", email: "ann@home.example.com", tags: ["x"]))
        }
        try await LoopbackSyncTests.within(.seconds(120), "the merged create at alice") {
            while try alice.object("Profile", primaryKey: .string("p1"))?["tags"] != .list(["x"]) {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        try await alice.write { try $0.insert("y", at: 1, into: ["tags"], of: "Profile", primaryKey: .string("p1")) }
        try await PermissionRulesSyncTests.sync(session, "alice")
        #expect(try server.replica.object("Profile", primaryKey: .string("p1"))?["tags"] == .list(["x", "y"]))

        // Alice's writes: her bio (allowed), her name (protected), Bob's bio (not her object), a profile of her own
        // (allowed: the name keeps its default) and one that sets a name (denied).
        try await alice.write { try $0.update("Profile", primaryKey: .string("p1"), ["bio": "hello"]) }
        try await alice.write { try $0.update("Profile", primaryKey: .string("p1"), ["name": "Queen Ann"]) }
        try await alice.write { try $0.update("Profile", primaryKey: .string("p2"), ["bio": "hacked"]) }
        try await alice.write { try $0.create("Profile", ["_id": "p3", "ownerID": "alice", "bio": "second"]) }
        try await alice.write { try $0.create("Profile", ["_id": "p4", "ownerID": "alice", "name": "Fake"]) }
        try await PermissionRulesSyncTests.sync(session, "alice")
        let reasons = session.rejections.map(\.reason)
        #expect(reasons.count == 3, "\(reasons)")
        #expect(reasons.contains { $0.contains(#"Profile["p1"]"#) && $0.contains("may not write Profile.name") })
        #expect(reasons.contains { $0.contains(#"Profile["p2"]"#) && $0.contains("may not write this object") })
        #expect(reasons.contains { $0.contains(#"Profile["p4"]"#) && $0.contains("may not write Profile.name") })
        for replica in [alice, server.replica] {
            #expect(try replica.object("Profile", primaryKey: .string("p1"))?["bio"] == "hello")
            #expect(
                try replica.object("Profile", primaryKey: .string("p1"))?["name"] == "Ann B.",
                "the protected name is back")
            #expect(try replica.object("Profile", primaryKey: .string("p2"))?["bio"] == "")
            #expect(try replica.object("Profile", primaryKey: .string("p3"))?["bio"] == "second")
            #expect(try replica.object("Profile", primaryKey: .string("p4")) == nil)
        }
        #expect(try server.replica.object("Profile", primaryKey: .string("p1"))?["email"] == "ann@home.example.com")
        let received = try Self.emailsReceived(alice)
        #expect(received.isEmpty, "\(received)")
        // Apart from the email, alice's copies are the daemon's.
        for object in try alice.objects("Profile") {
            var values = try #require(try server.replica.object("Profile", primaryKey: object.primaryKey)).values
            values["email"] = ""
            #expect(object.values == values, "\(object.primaryKey)")
        }

        // The emails become readable: every profile alice holds is sent again, with it.
        await server.reloadPermissionRules(try Self.rules(emailRead: true))
        try await LoopbackSyncTests.within(.seconds(120), "the emails at alice") {
            while try alice.object("Profile", primaryKey: .string("p2"))?["email"] != "bob@example.com" {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(try alice.object("Profile", primaryKey: .string("p1"))?["email"] == "ann@home.example.com")
        try await Self.write(server, on: writer) { txn in
            try txn.update("Profile", primaryKey: .string("p2"), ["email": "bob@new.example.com"])
        }
        try await LoopbackSyncTests.within(.seconds(120), "bob's new email at alice") {
            while try alice.object("Profile", primaryKey: .string("p2"))?["email"] != "bob@new.example.com" {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        // And hidden again: gone from the app.
        await server.reloadPermissionRules(try Self.rules(emailRead: false))
        try await LoopbackSyncTests.within(.seconds(120), "the emails gone from alice") {
            while try alice.objects("Profile").contains(where: { $0["email"] != "" }) {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        for replica in [alice, server.replica] { #expect(try replica.verify().passed) }
        await session.close()
        await server.stop()
        writer.close()
        other.close()
    }
}
