import Foundation
import Synchronization
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Two releases of one app syncing through a daemon while users update: an added optional property, a breaking
/// change the daemon's operator declares, and the workaround of a new type beside the old one.
@Suite("Releases of an app syncing while users update")
struct MixedReleasesSyncTests {
    static let taskV1 = Schema(
        version: 1,
        types: [
            ObjectSchema(name: "Task", properties: [.scalar("_id", .string), .scalar("title", .string, default: "")])
        ]
    )
    /// Release 2 adds an optional property.
    static let taskV2 = Schema(
        version: 2,
        types: [
            ObjectSchema(
                name: "Task",
                properties: [
                    .scalar("_id", .string), .scalar("title", .string, default: ""),
                    .scalar("isHighPriority", .bool, optional: true),
                ])
        ])

    static let chatV1 = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "ChatMessage",
                properties: [
                    .scalar("_id", .string), .scalar("text", .string, default: ""),
                    .scalar("author", .string, optional: true),
                ])
        ])
    /// Release 2 makes `author` required: a breaking change.
    static let chatV2 = Schema(
        version: 2,
        types: [
            ObjectSchema(
                name: "ChatMessage",
                properties: [
                    .scalar("_id", .string), .scalar("text", .string, default: ""), .scalar("author", .string),
                ])
        ])
    /// The migration release 2 ships: a message without an author gets "unknown".
    static let authorRequired = Migration { migration in
        try migration.enumerateObjects("ChatMessage") { old, new in
            if case .string(let author) = old["author"] {
                new?["author"] = .string(author)
            } else {
                new?["author"] = "unknown"
            }
        }
    }

    static func object(_ replica: Replica, _ type: String, _ key: String) throws -> DynamicObject? {
        try replica.object(type, primaryKey: .string(key))
    }

    static func within<T: Sendable>(_ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T
    {
        try await LoopbackSyncTests.within(.seconds(120), what, body)
    }

    @Test("An optional property added by release 2 syncs with release-1 devices, which keep opening their replicas")
    func additiveProperty() async throws {
        let directory = TemporaryDirectory("releases-additive")
        let daemon = ClientResetTests.Daemon(directory.appending("daemon"))
        try await daemon.start()
        defer { Task { await daemon.stop() } }
        let configuration = ClientResetTests.configuration()
        var old = try Replica.open(directory: directory.appending("release-1"), schema: Self.taskV1)
        // A device updated from release 1: its migration raises the merged schema's version to 2.
        try Replica.open(directory: directory.appending("release-2"), schema: Self.taskV1).close()
        let new = try Replica.open(directory: directory.appending("release-2"), schema: Self.taskV2)
        let oldSession = old.connect(to: daemon.endpoint, configuration: configuration)
        let newSession = new.connect(to: daemon.endpoint, configuration: configuration)
        try await old.write { txn in _ = try txn.create("Task", ["_id": "t1", "title": "from release 1"]) }
        try await new.write { txn in
            _ = try txn.create("Task", ["_id": "t2", "title": "from release 2", "isHighPriority": true])
        }
        try await Self.within("both uploads") {
            try await oldSession.waitForUpload()
            try await newSession.waitForUpload()
        }
        try await Self.within("both downloads") {
            try await oldSession.waitForDownload()
            try await newSession.waitForDownload()
        }

        // Release 1 edits release 2's task: the property it does not declare keeps its value.
        try await old.write { txn in try txn.update("Task", primaryKey: .string("t2"), ["title": "edited on 1"]) }
        try await Self.within("release 1's edit") {
            try await oldSession.waitForUpload()
            try await newSession.waitForDownload()
        }
        #expect(try Self.object(new, "Task", "t2")?["title"] == "edited on 1")
        #expect(try Self.object(new, "Task", "t2")?["isHighPriority"] == true)
        #expect(try Self.object(new, "Task", "t1")?["isHighPriority"] == .null)

        // Release 1 restarts: its replica opens at version 1 although release 2 raised the merged schema's version.
        await oldSession.close()
        old.close()
        old = try Replica.open(directory: directory.appending("release-1"), schema: Self.taskV1)
        #expect(old.schema.version == 2)
        #expect(try old.declaredVersions() == DeclaredSchemaVersions(current: 1, first: 1))
        #expect(old.schema[type: "Task"]?[property: "isHighPriority"] != nil)
        let restartedSession = old.connect(to: daemon.endpoint, configuration: configuration)
        try await old.write { txn in _ = try txn.create("Task", ["_id": "t3", "title": "after the restart"]) }
        try await Self.within("release 1's write after its restart") {
            try await restartedSession.waitForUpload()
            try await newSession.waitForDownload()
        }
        #expect(try Self.object(new, "Task", "t3")?["title"] == "after the restart")
        await restartedSession.close()
        old.close()

        // The user updates to release 2: no migration to run, and the values release 2 wrote are there.
        let updated = try Replica.open(directory: directory.appending("release-1"), schema: Self.taskV2)
        #expect(try updated.declaredVersions() == DeclaredSchemaVersions(current: 2, first: 1))
        #expect(try Self.object(updated, "Task", "t2")?["isHighPriority"] == true)
        #expect(try Self.object(updated, "Task", "t2")?["title"] == "edited on 1")
        #expect(try updated.verify().passed)
        updated.close()
        await newSession.close()
        new.close()
    }

    @Test(
        "A breaking release: earlier apps are told to update, and an updated app downloads again under the new schema")
    func breakingRelease() async throws {
        let directory = TemporaryDirectory("releases-breaking")
        let daemon = ClientResetTests.Daemon(directory.appending("daemon"))
        try await daemon.start()
        defer { Task { await daemon.stop() } }
        let configuration = ClientResetTests.configuration()
        let ada = try Replica.open(directory: directory.appending("ada"), schema: Self.chatV1)
        let cy = try Replica.open(directory: directory.appending("cy"), schema: Self.chatV1)
        do {
            let adaSession = ada.connect(to: daemon.endpoint, configuration: configuration)
            let cySession = cy.connect(to: daemon.endpoint, configuration: configuration)
            try await ada.write { txn in
                _ = try txn.create("ChatMessage", ["_id": "m1", "text": "hi", "author": "Ada"])
            }
            try await cy.write { txn in _ = try txn.create("ChatMessage", ["_id": "m2", "text": "anonymous"]) }
            try await Self.within("release 1's messages") {
                try await adaSession.waitForUpload()
                try await cySession.waitForUpload()
                try await adaSession.waitForDownload()
                try await cySession.waitForDownload()
            }
            await adaSession.close()
            await cySession.close()
        }

        // The operator deploys release 2's breaking change.
        await daemon.stop()
        daemon.breakingSchemaVersion.withLock { $0 = 2 }
        try await daemon.start()

        // Cy stays on release 1: told to update, and nothing on the device is lost.
        try await cy.write { txn in _ = try txn.create("ChatMessage", ["_id": "m3", "text": "offline on 1"]) }
        let refused = cy.connect(to: daemon.endpoint, configuration: configuration)
        let error = try #require(try await LoopbackSyncTests.disconnection(refused, code: .schemaVersionTooOld))
        #expect(error.action == .fatal)
        #expect(error.message.contains("declares schema version 1"), "\(error.message)")
        #expect(error.message.contains("update the app"), "\(error.message)")
        #expect(refused.clientResets.isEmpty)
        #expect(try Self.object(cy, "ChatMessage", "m3")?["text"] == "offline on 1")
        await refused.close()
        // The operator sees how many sessions of earlier releases are turned away.
        let metrics = DaemonObservabilityTests.samples(
            try await DaemonObservabilityTests.get("/metrics", daemon.endpoint).body)
        #expect((metrics[#"tributary_sessions_refused_total{code="schemaVersionTooOld"}"#] ?? 0) >= 1)

        // Ada updates to release 2: the migration runs on the device, she writes offline, then syncs. Her replica's
        // history started under version 1, so it is reset and downloads the data again; her changes are recovered.
        ada.close()
        let updated = try Replica.open(
            directory: directory.appending("ada"), schema: Self.chatV2, migration: Self.authorRequired)
        #expect(try updated.declaredVersions() == DeclaredSchemaVersions(current: 2, first: 1))
        try await updated.write { txn in
            _ = try txn.create("ChatMessage", ["_id": "m4", "text": "on release 2", "author": "Ada"])
        }
        let session = updated.connect(to: daemon.endpoint, configuration: configuration)
        let report = try await ClientResetTests.firstReset(session)
        #expect(report.reason.contains("starts at schema version 1"), "\(report.reason)")
        let replica = session.replica
        #expect(try replica.declaredVersions() == DeclaredSchemaVersions(current: 2, first: 2))
        try await Self.within("the recovered upload") { try await session.waitForUpload() }
        #expect(try Self.object(replica, "ChatMessage", "m4")?["author"] == "Ada")
        #expect(try Self.object(replica, "ChatMessage", "m1")?["text"] == "hi")
        #expect(try Self.object(replica, "ChatMessage", "m3") == nil)  // still on Cy's device only

        // A fresh install of release 2 syncs without a reset and sees what Ada wrote.
        let fresh = try Replica.open(directory: directory.appending("fresh"), schema: Self.chatV2)
        let freshSession = fresh.connect(to: daemon.endpoint, configuration: configuration)
        try await Self.within("the fresh install's download") { try await freshSession.waitForDownload() }
        #expect(freshSession.clientResets.isEmpty)
        // The migration Ada's device ran was recovered with her changes: release 1's messages have authors.
        #expect(report.recovered)
        #expect(try Self.object(fresh, "ChatMessage", "m1")?["author"] == "Ada")
        #expect(try Self.object(fresh, "ChatMessage", "m2")?["author"] == "unknown")
        #expect(fresh.schema[type: "ChatMessage"]?[property: "author"]?.isOptional == false)
        #expect(try Self.object(fresh, "ChatMessage", "m4")?["author"] == "Ada")
        #expect(try Self.object(fresh, "ChatMessage", "m1")?["text"] == "hi")
        await freshSession.close()
        await session.close()
        fresh.close()
        replica.close()
        cy.close()
    }

    @Test("The workaround of a new type beside the old one: both releases sync with no breaking version")
    func newTypeBesideTheOld() async throws {
        let directory = TemporaryDirectory("releases-new-type")
        let daemon = ClientResetTests.Daemon(directory.appending("daemon"))
        try await daemon.start()
        defer { Task { await daemon.stop() } }
        let configuration = ClientResetTests.configuration()
        var withV2 = Self.chatV1
        withV2.version = 2
        withV2.upsert(
            ObjectSchema(
                name: "ChatMessageV2",
                properties: [
                    .scalar("_id", .string), .scalar("text", .string, default: ""), .scalar("author", .string),
                ]
            ))
        let old = try Replica.open(directory: directory.appending("release-1"), schema: Self.chatV1)
        let new = try Replica.open(directory: directory.appending("release-2"), schema: withV2)
        let oldSession = old.connect(to: daemon.endpoint, configuration: configuration)
        let newSession = new.connect(to: daemon.endpoint, configuration: configuration)
        try await old.write { txn in _ = try txn.create("ChatMessage", ["_id": "m1", "text": "from 1"]) }
        try await new.write { txn in
            _ = try txn.create("ChatMessageV2", ["_id": "n1", "text": "from 2", "author": "Bo"])
        }
        try await Self.within("both releases' messages") {
            try await oldSession.waitForUpload()
            try await newSession.waitForUpload()
            try await oldSession.waitForDownload()
            try await newSession.waitForDownload()
        }
        #expect(try Self.object(new, "ChatMessage", "m1")?["author"] == .null)
        #expect(try Self.object(new, "ChatMessageV2", "n1")?["author"] == "Bo")
        #expect(try Self.object(old, "ChatMessageV2", "n1")?["author"] == "Bo")  // held, though release 1 declares none
        #expect(oldSession.clientResets.isEmpty && newSession.clientResets.isEmpty)
        await oldSession.close()
        await newSession.close()
        old.close()
        new.close()
    }
}
