import Foundation
import Synchronization
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Client reset: a daemon restored from a backup (its history went back) or a device restored from one, found at the
/// handshake, and the app's replica reset by each mode.
@Suite("Client reset")
struct ClientResetTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Task",
                properties: [
                    .scalar("_id", .string), .scalar("title", .string, default: ""),
                    .scalar("count", .int, default: 0), Property("tags", .scalar(.string), list: true),
                ])
        ])

    /// A daemon on its own replica, at `port` (0: a free one), that can be stopped and started again on its port.
    final class Daemon: Sendable {
        let directory: String
        let port: Mutex<Int>
        let running = Mutex<(SyncServer, Replica)?>(nil)
        /// The breaking schema version the daemon is started with, if any.
        let breakingSchemaVersion = Mutex<UInt64?>(nil)

        init(_ directory: String) {
            self.directory = directory
            port = Mutex(0)
        }

        var endpoint: SyncEndpoint { SyncEndpoint(host: "127.0.0.1", port: port.withLock { $0 }) }

        func start() async throws {
            let replica = try Replica.open(directory: directory)
            var configuration = SyncServer.Configuration()
            configuration.port = port.withLock { $0 }
            configuration.handshakeDeadline = .seconds(120)
            configuration.reconnectSpreadSeconds = 1
            configuration.breakingSchemaVersion = breakingSchemaVersion.withLock { $0 }
            let server = SyncServer(replica: replica, configuration: configuration)
            let bound = try await server.start()
            port.withLock { $0 = bound }
            running.withLock { $0 = (server, replica) }
        }

        func stop() async {
            guard let (server, replica) = running.withLock({ $0 }) else { return }
            await server.stop()
            replica.close()
            running.withLock { $0 = nil }
        }

        /// The daemon's directory copied to `backup`, the daemon stopped meanwhile.
        func backUp(to backup: String) async throws {
            await stop()
            try FileManager.default.copyItem(atPath: directory, toPath: backup)
            try await start()
        }

        /// The daemon's directory replaced by `backup`, as an operator restoring it does.
        func restore(from backup: String) async throws {
            await stop()
            try FileManager.default.removeItem(atPath: directory)
            try FileManager.default.copyItem(atPath: backup, toPath: directory)
            try await start()
        }
    }

    static func configuration(_ reset: ClientReset = ClientReset()) -> SyncConfiguration {
        var configuration = SyncConfiguration()
        configuration.backoff = ReconnectBackoff(initial: .milliseconds(50), maximum: .milliseconds(500))
        configuration.clientReset = reset
        return configuration
    }

    static func within<T: Sendable>(
        _ what: String, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await LoopbackSyncTests.within(.seconds(180), what, body)
    }

    /// The session's first client reset, once it is done and the new replica synced.
    static func firstReset(_ session: SyncSession) async throws -> ClientResetReport {
        try await within("a client reset") {
            for await state in session.states() {
                if let report = session.clientResets.first, case .active = state { return report }
                if case .disconnected(let error?) = state, error.action != .retry {
                    throw error
                }
            }
            throw SyncError(.unavailable, .fatal, "the session closed before a reset")
        }
    }

    static func titles(_ replica: Replica) throws -> [String: String] {
        var titles: [String: String] = [:]
        for object in try replica.objects("Task") {
            if case .string(let key) = object.primaryKey, case .string(let title) = object["title"] {
                titles[key] = title
            }
        }
        return titles
    }

    /// The world every test starts from: a daemon with tasks t1...t4, backed up, then more writes that the backup
    /// misses (a device's t9, which reached `app`, and `app`'s own t5, acknowledged); then the daemon restored from
    /// the backup, while `app` keeps writing offline.
    struct World {
        let directory: TemporaryDirectory
        let daemon: Daemon
        let app: Replica
        let other: Replica
    }

    static func world(_ name: String, schema: Schema = schema, flexible: Bool = false) async throws -> World {
        let directory = TemporaryDirectory(name)
        let daemon = Daemon(directory.appending("daemon"))
        try await daemon.start()
        let app = try Replica.open(directory: directory.appending("app"), schema: schema)
        if flexible { _ = try app.subscriptions.commit { $0.append("Task", name: "tasks") } }
        let other = try Replica.open(directory: directory.appending("other"), schema: schema)
        let hasTags = schema.types[0].properties.contains { $0.name == "tags" }
        let appSession = app.connect(to: daemon.endpoint, configuration: configuration())
        let otherSession = other.connect(to: daemon.endpoint, configuration: configuration())
        try await app.write { txn in
            for key in ["t1", "t2", "t3", "t4"] {
                _ = try txn.create("Task", ["_id": .string(key), "title": .string("\(key) as synced"), "count": 10])
            }
            if hasTags { try txn.append(contentsOf: ["a", "b"], to: ["tags"], of: "Task", primaryKey: .string("t4")) }
        }
        try await within("the first upload") { try await appSession.waitForUpload() }
        try await within("the first download") { try await otherSession.waitForDownload() }

        let backup = directory.appending("backup")
        try await daemon.backUp(to: backup)
        // After the backup: a write from another device that `app` downloads, and one of `app`'s own.
        try await other.write { txn in _ = try txn.create("Task", ["_id": "t9", "title": "lost with the daemon"]) }
        try await within("the other upload") { try await otherSession.waitForUpload() }
        try await app.write { txn in _ = try txn.create("Task", ["_id": "t5", "title": "acknowledged, then lost"]) }
        try await within("app's upload") { try await appSession.waitForUpload() }
        try await within("app's download") { try await appSession.waitForDownload() }
        #expect(try app.object("Task", primaryKey: .string("t9")) != nil)
        await appSession.close()
        await otherSession.close()
        other.close()

        try await daemon.restore(from: backup)
        return World(directory: directory, daemon: daemon, app: app, other: other)
    }

    @Test(
        "A daemon restored from a backup: the app is reset, and its unsynced changes recovered by the written rules",
        arguments: [false, true])
    func recoverAfterDaemonRestore(flexible: Bool) async throws {
        let world = try await Self.world("reset-recover", flexible: flexible)
        defer { Task { await world.daemon.stop() } }
        // Meanwhile, on the restored daemon: a fresh device deletes t3 and adds to t2's count.
        let third = try Replica.open(directory: world.directory.appending("third"), schema: Self.schema)
        let thirdSession = third.connect(to: world.daemon.endpoint, configuration: Self.configuration())
        try await Self.within("third's download") { try await thirdSession.waitForDownload() }
        try await third.write { txn in
            try txn.delete("Task", primaryKey: .string("t3"))
            try txn.increment(["count"], of: "Task", primaryKey: .string("t2"), by: 3)
        }
        try await Self.within("third's upload") { try await thirdSession.waitForUpload() }

        // Offline on the app: a create, a field write, an increment, a change to an object the daemon deleted, a
        // delete, and a list edit.
        try await world.app.write { txn in
            _ = try txn.create("Task", ["_id": "t6", "title": "created offline"])
            try txn.update("Task", primaryKey: .string("t1"), ["title": "edited offline"])
            try txn.increment(["count"], of: "Task", primaryKey: .string("t2"), by: 2)
            try txn.update("Task", primaryKey: .string("t3"), ["title": "edited, but deleted on the daemon"])
            _ = try txn.delete("Task", primaryKey: .string("t4"))
            try txn.append("c", to: ["tags"], of: "Task", primaryKey: .string("t5"))
        }
        let oldID = world.app.replicaID
        let seen = Mutex<(before: [String: String], after: [String: String])?>(nil)
        let policy = ClientReset(
            mode: .recoverUnsyncedChanges,
            afterReset: { before, after in
                let titles = (try Self.titles(before), try Self.titles(after))
                seen.withLock { $0 = titles }
            })
        let session = world.app.connect(to: world.daemon.endpoint, configuration: Self.configuration(policy))
        let report = try await Self.firstReset(session)
        #expect(report.recovered)
        #expect(report.previousReplicaID == oldID)
        #expect(report.reason.contains("history went back"), "\(report.reason)")
        #expect(report.objectsDeletedOnDaemon == 1)
        #expect(world.app.isClosed)
        let replica = session.replica
        #expect(replica.replicaID != oldID)
        #expect(replica.directory == world.app.directory)
        try await Self.within("the recovered upload") { try await session.waitForUpload() }

        let titles = try Self.titles(replica)
        #expect(titles["t1"] == "edited offline")  // local field writes win
        #expect(titles["t5"] == "acknowledged, then lost")  // acknowledged by the daemon before its restore
        #expect(titles["t6"] == "created offline")  // created locally: kept
        #expect(titles["t3"] == nil)  // deleted on the daemon: beats the local change
        #expect(titles["t4"] == nil)  // deleted locally: applies
        #expect(titles["t9"] == nil)  // lost with the daemon's history
        #expect(try replica.object("Task", primaryKey: .string("t2"))?["count"] == 15)  // 10 + 3 on the daemon + 2 here
        #expect(try replica.object("Task", primaryKey: .string("t5"))?["tags"] == .list([.string("c")]))
        let callback = try #require(seen.withLock { $0 })
        #expect(callback.before["t9"] == "lost with the daemon")
        #expect(callback.before["t3"] == "edited, but deleted on the daemon")
        #expect(callback.after == titles)

        // What the app recovered reached the daemon: another device sees it.
        try await Self.within("third's second download") { try await thirdSession.waitForDownload() }
        #expect(try Self.titles(third) == titles)
        #expect(try third.object("Task", primaryKey: .string("t2"))?["count"] == 15)
        #expect(
            !FileManager.default.fileExists(
                atPath: (replica.directory as NSString).appendingPathComponent("client-reset-attempts")))
        await session.close()
        await thirdSession.close()
        replica.close()
        third.close()
    }

    @Test("Discarding unsynced changes: the replica becomes the daemon's state")
    func discardAfterDaemonRestore() async throws {
        let world = try await Self.world("reset-discard")
        defer { Task { await world.daemon.stop() } }
        try await world.app.write { txn in
            _ = try txn.create("Task", ["_id": "t6", "title": "created offline"])
            try txn.update("Task", primaryKey: .string("t1"), ["title": "edited offline"])
        }
        let session = world.app.connect(
            to: world.daemon.endpoint, configuration: Self.configuration(ClientReset(mode: .discardUnsyncedChanges)))
        let report = try await Self.firstReset(session)
        #expect(!report.recovered)
        #expect(report.unsyncedChangesets >= 2)
        let replica = session.replica
        #expect(
            try Self.titles(replica) == [
                "t1": "t1 as synced", "t2": "t2 as synced", "t3": "t3 as synced", "t4": "t4 as synced",
            ])
        #expect(try replica.object("Task", primaryKey: .string("t4"))?["tags"] == .list([.string("a"), .string("b")]))
        await session.close()
        replica.close()
    }

    @Test("Manual mode: the session stops with the daemon's reason; reset(_:) keeps the old replica for the app")
    func manualReset() async throws {
        let world = try await Self.world("reset-manual")
        defer { Task { await world.daemon.stop() } }
        try await world.app.write { txn in _ = try txn.create("Task", ["_id": "t6", "title": "created offline"]) }
        let session = world.app.connect(
            to: world.daemon.endpoint, configuration: Self.configuration(ClientReset(mode: .manual)))
        let error = try #require(try await LoopbackSyncTests.disconnection(session, code: .resetRequired))
        #expect(error.action == .reset)
        #expect(error.message.contains("restored from a backup"), "\(error.message)")
        #expect(session.clientResets.isEmpty)
        #expect(!world.app.isClosed)  // nothing happens until the app asks
        await #expect(throws: SyncError.self) { try await session.reset(.manual) }  // says nothing of the changes
        #expect(!world.app.isClosed)

        let report = try await Self.within("a manual reset") { try await session.reset(.recoverUnsyncedChanges) }
        let backup = try #require(report.backupDirectory)
        let old = try Replica.open(directory: backup)
        #expect(try Self.titles(old)["t9"] == "lost with the daemon")
        old.close()
        try await Self.within("the upload after the reset") { try await session.waitForUpload() }
        #expect(try Self.titles(session.replica)["t6"] == "created offline")
        #expect(try Self.titles(session.replica)["t9"] == nil)
        await session.close()
        session.replica.close()
        try? FileManager.default.removeItem(atPath: backup)
    }

    @Test("A device restored from a backup is reset: its next changesets would reuse ids the daemon holds")
    func deviceRestoredFromBackup() async throws {
        let directory = TemporaryDirectory("reset-device")
        let daemon = Daemon(directory.appending("daemon"))
        try await daemon.start()
        defer { Task { await daemon.stop() } }
        let path = directory.appending("app")
        var app = try Replica.open(directory: path, schema: Self.schema)
        let first = app.connect(to: daemon.endpoint, configuration: Self.configuration())
        try await app.write { txn in _ = try txn.create("Task", ["_id": "t1", "title": "before the backup"]) }
        try await Self.within("upload") { try await first.waitForUpload() }
        await first.close()
        app.close()
        try FileManager.default.copyItem(atPath: path, toPath: directory.appending("device-backup"))
        app = try Replica.open(directory: path, schema: Self.schema)
        let second = app.connect(to: daemon.endpoint, configuration: Self.configuration())
        try await app.write { txn in _ = try txn.create("Task", ["_id": "t2", "title": "after the backup"]) }
        try await Self.within("upload") { try await second.waitForUpload() }
        await second.close()
        app.close()

        // The device restored: it lost t2's changeset, which the daemon holds, and writes another under its id.
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.copyItem(atPath: directory.appending("device-backup"), toPath: path)
        app = try Replica.open(directory: path, schema: Self.schema)
        try await app.write { txn in _ = try txn.create("Task", ["_id": "t3", "title": "after the restore"]) }
        let restored = app.connect(to: daemon.endpoint, configuration: Self.configuration())
        let report = try await Self.firstReset(restored)
        #expect(report.reason.contains("own history went back"), "\(report.reason)")
        try await Self.within("upload after the reset") { try await restored.waitForUpload() }
        #expect(
            try Self.titles(restored.replica) == [
                "t1": "before the backup", "t2": "after the backup", "t3": "after the restore",
            ])
        await restored.close()
        restored.replica.close()
    }

    @Test("Resets that do not help are not repeated for ever: the third in a row stops the session")
    func noResetLoop() async throws {
        let world = try await Self.world("reset-loop")
        defer { Task { await world.daemon.stop() } }
        // Two resets in a row already failed to let this replica sync.
        try "2\n".write(
            toFile: (world.app.directory as NSString).appendingPathComponent("client-reset-attempts"), atomically: true,
            encoding: .utf8)
        let session = world.app.connect(to: world.daemon.endpoint, configuration: Self.configuration())
        let error = try #require(try await LoopbackSyncTests.disconnection(session, code: .resetRequired))
        #expect(error.action == .reset)
        #expect(error.message.contains("2 resets in a row"), "\(error.message)")
        #expect(session.clientResets.isEmpty)
        #expect(!world.app.isClosed)
        #expect(try Self.titles(world.app)["t9"] == "lost with the daemon")  // the replica is left as it was
        // The app may still reset on request.
        let report = try await Self.within("a reset on request") { try await session.reset(.discardUnsyncedChanges) }
        #expect(report.backupDirectory != nil)
        try await Self.within("download after the reset") { try await session.waitForDownload() }
        #expect(try Self.titles(session.replica)["t9"] == nil)
        await session.close()
        session.replica.close()
    }

    @Test(
        "A reset killed (kill -9) before or after it replaces the replica: the replica is whole, nothing unsynced lost",
        arguments: ["BEFORE", "AFTER"])
    func killedDuringReset(_ point: String) async throws {
        let child = try #require(
            ChildExecutable.path(), "tributary-crash-child is not next to the test binary (swift build)")
        let world = try await Self.world("reset-kill-\(point.lowercased())", schema: Fixtures.taskSchema)
        defer { Task { await world.daemon.stop() } }
        try await world.app.write { txn in _ = try txn.create("Task", ["_id": "t6", "title": "created offline"]) }
        let oldID = world.app.replicaID
        let directory = world.app.directory
        world.app.close()

        let process = try ChildProcess(
            executable: child,
            arguments: ["reset", directory, "--port", "\(world.daemon.endpoint.port)", "--pause-ms", "5000"],
            stderrPath: world.directory.appending("child.log"))
        defer { if process.waitForExit(timeout: 0) == nil { _ = process.killAndWait() } }
        let reached = Mutex(false)
        try await offThePool {
            let line = process.waitForLine(startingWith: point, timeout: 120)
            if line != nil { process.send(SIGKILL) }
            reached.withLock { $0 = line != nil }
        }
        #expect(reached.withLock { $0 }, "\(process.lines) \(process.standardError)")
        #expect(process.waitForExit(timeout: 30) == .signaled(SIGKILL), "\(process.lines)")

        // Killed before the swap: the old replica, whole; after it: the new one, with the recovery in its log.
        let replica = try Replica.open(directory: directory, schema: Fixtures.taskSchema)
        #expect(try replica.verify().passed)
        #expect((replica.replicaID == oldID) == (point == "BEFORE"))
        let session = replica.connect(to: world.daemon.endpoint, configuration: Self.configuration())
        if point == "BEFORE" {
            _ = try await Self.firstReset(session)
        }
        try await Self.within("the sync after the kill") {
            try await session.waitForUpload()
            try await session.waitForDownload()
        }
        #expect(session.clientResets.count == (point == "BEFORE" ? 1 : 0))
        let titles = try Self.titles(session.replica)
        #expect(titles["t6"] == "created offline")
        #expect(titles["t5"] == "acknowledged, then lost")
        #expect(titles["t9"] == nil)
        #expect(titles.count == 6)
        await session.close()
        session.replica.close()
    }

    @Test("An upload the daemon refuses resets the app; a refusal no reset can cure stops after two resets")
    func refusedUpload() async throws {
        let directory = TemporaryDirectory("reset-refused")
        let daemon = Daemon(directory.appending("daemon"))
        try await daemon.start()
        defer { Task { await daemon.stop() } }
        func schema(key: String) -> Schema {
            Schema(
                version: 1,
                types: [
                    ObjectSchema(
                        name: "Task", primaryKey: key,
                        properties: [.scalar(key, .string), .scalar("priority", .string)])
                ])
        }
        let first = try Replica.open(directory: directory.appending("first"), schema: schema(key: "_id"))
        let firstSession = first.connect(to: daemon.endpoint, configuration: Self.configuration())
        try await first.write { txn in _ = try txn.create("Task", ["_id": "t1", "priority": "low"]) }
        try await Self.within("the first app's upload") { try await firstSession.waitForUpload() }
        await firstSession.close()
        first.close()

        // A release that declares another primary key: the daemon refuses its declaration, and so every reset's.
        let app = try Replica.open(directory: directory.appending("app"), schema: schema(key: "id"))
        try await app.write { txn in _ = try txn.create("Task", ["id": "t2", "priority": "high"]) }
        let session = app.connect(to: daemon.endpoint, configuration: Self.configuration())
        let error = try #require(try await LoopbackSyncTests.disconnection(session, code: .resetRequired))
        #expect(error.message.contains("2 resets in a row"), "\(error.message)")
        #expect(error.message.contains("refused this replica's changeset"), "\(error.message)")
        #expect(session.clientResets.count == 2)
        for report in session.clientResets {
            #expect(report.reason.contains("refused this replica's changeset"), "\(report.reason)")
            #expect(report.recovered)
        }
        // What the app wrote is still there, recovered into each new replica.
        #expect(try session.replica.object("Task", primaryKey: .string("t2"))?["priority"] == "high")
        await session.close()
        session.replica.close()
    }
}
