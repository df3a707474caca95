import Foundation
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Flexible sync over loopback: apps hold what their subscription sets cover.
@Suite("Flexible sync")
struct FlexibleSyncTests {
    typealias Loopback = LoopbackSyncTests

    /// The primary keys of the tasks `replica` holds, sorted.
    static func held(_ replica: Replica) throws -> [String] {
        try replica.objects("Task").compactMap { if case .string(let key) = $0.primaryKey { key } else { nil } }
            .sorted()
    }

    /// The primary keys of the daemon's tasks that match `predicate`, sorted.
    static func expected(_ daemon: Replica, _ predicate: (DynamicObject) -> Bool) throws -> [String] {
        try daemon.objects("Task").filter(predicate).compactMap {
            if case .string(let key) = $0.primaryKey { key } else { nil }
        }.sorted()
    }

    /// Every object `app` holds equals the daemon's copy, and the app's views equal a replay of its log.
    static func checkHeldEqualDaemon(_ app: Replica, _ daemon: Replica) throws {
        for object in try app.objects("Task") {
            let original = try daemon.object("Task", primaryKey: object.primaryKey)
            #expect(original?.values == object.values, "\(object.primaryKey) differs from the daemon's copy")
        }
        let report = try app.verify()
        #expect(report.passed, "\(report)")
    }

    static func count(_ object: DynamicObject) -> Int64 {
        if case .int(let count) = object["count"] { return count }
        return 0
    }

    @Test("An app holds what its subscriptions cover: bootstrap, live writes entering and leaving, a changed set")
    func subscriptionsDecideWhatTheAppHolds() async throws {
        let directory = TemporaryDirectory("flexible")
        let (server, endpoint) = try await Loopback.daemon(directory, "daemon")
        let writer = try Loopback.app(directory, "writer")
        let writerSession = writer.connect(to: endpoint, configuration: Loopback.fastBackoff)
        try await writer.write { txn in
            for index in 1...6 {
                try txn.create(
                    "Task",
                    ["_id": .string("t\(index)"), "title": .string("task \(index)"), "count": .int(Int64(index))])
            }
        }
        try await Loopback.within(.seconds(120), "the writer's upload") { try await writerSession.waitForUpload() }

        // Subscribed offline, before the first connection.
        let phone = try Loopback.app(directory, "phone")
        try phone.subscriptions.commit { $0.append("Task", where: "count >= 3", name: "big") }
        #expect(try phone.subscriptions.latest.state == .pending)
        let phoneSession = phone.connect(to: endpoint, configuration: Loopback.fastBackoff)
        let progress = Task { () -> SyncProgress? in
            for await step in phoneSession.bootstrapProgress() where step.transferred > 0 && step.isComplete {
                return step
            }
            return nil
        }
        let synced = try await Loopback.within(.seconds(120), "the first set") {
            try await phone.subscriptions.waitForSync()
        }
        let reported = try await Loopback.within(.seconds(120), "the bootstrap's progress") { await progress.value }
        #expect(reported == SyncProgress(transferred: 4, transferable: 4), "the bootstrap reports its 4 objects")
        #expect(synced.state == .complete)
        #expect(try Self.held(phone) == ["t3", "t4", "t5", "t6"])
        try Self.checkHeldEqualDaemon(phone, server.replica)

        // Writes elsewhere: one object enters the view, one leaves, one is created in it, one changes inside it.
        try await writer.write { txn in
            try txn.update("Task", primaryKey: .string("t1"), ["count": 10])
            try txn.update("Task", primaryKey: .string("t4"), ["count": 0])
            try txn.create("Task", ["_id": "t7", "title": "task 7", "count": 5])
            try txn.update("Task", primaryKey: .string("t5"), ["title": "renamed"])
            try txn.create("Task", ["_id": "t8", "title": "small", "count": 1])
        }
        try await Loopback.within(.seconds(120), "the writer's upload") { try await writerSession.waitForUpload() }
        try await Loopback.within(.seconds(120), "the phone's download") { try await phoneSession.waitForDownload() }
        #expect(try Self.held(phone) == ["t1", "t3", "t5", "t6", "t7"])
        #expect(try phone.object("Task", primaryKey: .string("t5"))?["title"] == "renamed")
        try Self.checkHeldEqualDaemon(phone, server.replica)

        // The phone's own write to a held object reaches the writer, and later writes merge with it.
        try await phone.write { try $0.update("Task", primaryKey: .string("t6"), ["title": "from the phone"]) }
        try await Loopback.within(.seconds(120), "the phone's upload") { try await phoneSession.waitForUpload() }
        try await Loopback.within(.seconds(120), "the writer's download") { try await writerSession.waitForDownload() }
        #expect(try writer.object("Task", primaryKey: .string("t6"))?["title"] == "from the phone")
        try await writer.write { try $0.update("Task", primaryKey: .string("t6"), ["count": 60]) }
        try await Loopback.within(.seconds(120), "the writer's upload") { try await writerSession.waitForUpload() }
        try await Loopback.within(.seconds(120), "the phone's download") { try await phoneSession.waitForDownload() }
        #expect(try phone.object("Task", primaryKey: .string("t6"))?["count"] == 60)
        #expect(try phone.object("Task", primaryKey: .string("t6"))?["title"] == "from the phone")

        // The phone edits a held object out of its view: the daemon refuses that write, tells the phone which object
        // and why, and sends its own state of the object back (a compensating write); the phone's other write in the
        // same transaction is kept.
        try await phone.write { txn in
            try txn.update("Task", primaryKey: .string("t3"), ["count": 0])
            try txn.update("Task", primaryKey: .string("t5"), ["count": 50])
            try txn.create("Task", ["_id": "t9", "count": 0])
        }
        #expect(try phone.object("Task", primaryKey: .string("t3"))?["count"] == 0)
        try await Loopback.within(.seconds(120), "the phone's upload") { try await phoneSession.waitForUpload() }
        try await Loopback.within(.seconds(120), "the phone's download") { try await phoneSession.waitForDownload() }
        #expect(try phone.object("Task", primaryKey: .string("t3"))?["count"] == 3)
        #expect(try phone.object("Task", primaryKey: .string("t9")) == nil, "a create outside the view is undone")
        #expect(try server.replica.object("Task", primaryKey: .string("t9")) == nil)
        #expect(try server.replica.object("Task", primaryKey: .string("t3"))?["count"] == 3)
        #expect(try server.replica.object("Task", primaryKey: .string("t5"))?["count"] == 50)
        let reverted = phoneSession.rejections.map(\.reason)
        #expect(
            reverted.contains { $0.contains("Task[\"t3\"]") && $0.contains("outside of the session's subscriptions") },
            "\(reverted)")
        #expect(try Self.held(phone) == ["t1", "t3", "t5", "t6", "t7"])
        try Self.checkHeldEqualDaemon(phone, server.replica)

        // A changed set: what it no longer covers leaves the phone (only the phone), what it adds arrives.
        let changed = try await Loopback.within(.seconds(120), "the changed set") {
            try await phone.subscriptions.update { subs in
                subs.remove(named: "big")
                subs.append("Task", where: "count < 2", name: "small")
            }
        }
        #expect(changed.state == .complete)
        #expect(changed.version == 2)
        let small = try Self.expected(server.replica) { Self.count($0) < 2 }
        #expect(small == ["t4", "t8"])
        #expect(try Self.held(phone) == small)
        try Self.checkHeldEqualDaemon(phone, server.replica)
        #expect(try server.replica.objects("Task").count == 8, "an eviction deleted nothing on the daemon")
        try await Loopback.within(.seconds(120), "the writer's download") { try await writerSession.waitForDownload() }
        #expect(try writer.objects("Task").count == 8, "an eviction deleted nothing on other apps")

        // A copy rebuilt from the phone's log (tributary-log replay) holds what the phone holds: the objects the
        // daemon sent whole are carried with the log.
        let copy = try phone.replay(through: phone.lastLocalSequence, into: directory.appending("phone-copy"))
        defer { copy.close() }
        #expect(try copy.objects("Task").map(\.values) == (try phone.objects("Task").map(\.values)))
        #expect(try copy.verify().passed)

        await phoneSession.close()
        await writerSession.close()
        await server.stop()
    }

    @Test("A write to a type no subscription covers fails on the device, naming the type")
    func writesNeedASubscription() async throws {
        let directory = TemporaryDirectory("flexible-guard")
        let phone = try Loopback.app(directory, "phone")
        try phone.subscriptions.commit { $0.append("Task", where: "count > 0") }
        try await phone.write { try $0.create("Task", ["_id": "t1", "count": 1]) }
        try phone.subscriptions.commit { $0.removeAll() }
        await #expect {
            try await phone.write { try $0.create("Task", ["_id": "t2", "count": 1]) }
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .noSubscription else { return false }
            return error.message.contains("Cannot write to class Task")
        }
        #expect(try phone.object("Task", primaryKey: .string("t2")) == nil)
        // Subscribing to a type the schema does not have fails at once.
        #expect(throws: TributaryError.self) {
            try phone.subscriptions.commit { $0.append("Nothing", where: "TRUEPREDICATE") }
        }
        // So does a query flexible sync cannot serve.
        #expect {
            try phone.subscriptions.commit { $0.append("Task", where: "count > 0 SORT(count ASC)") }
        } throws: { error in
            (error as? TributaryError)?.message.contains("SORT, DISTINCT or LIMIT") == true
        }
        #expect(try phone.subscriptions.latest.version == 2)
    }

    @Test("A query on a field the daemon does not make queryable is refused; the set goes to the error state")
    func queryableFields() async throws {
        let directory = TemporaryDirectory("flexible-queryable")
        let (server, endpoint) = try await Loopback.daemon(directory, "daemon") {
            $0.queryableFields = ["Task": ["count"]]
        }
        let phone = try Loopback.app(directory, "phone")
        let session = phone.connect(to: endpoint, configuration: Loopback.fastBackoff)
        try phone.subscriptions.commit { $0.append("Task", where: "count > 1", name: "fine") }
        try await Loopback.within(.seconds(120), "the first set") { try await phone.subscriptions.waitForSync() }
        let refusal = try await Loopback.within(.seconds(120), "the refused set") { () -> TributaryError? in
            do {
                try await phone.subscriptions.update { $0.append("Task", where: "title == 'a'", name: "by title") }
                return nil
            } catch let error as TributaryError {
                return error
            }
        }
        #expect(
            refusal?.message.contains("key \"title\" is not a queryable field") == true,
            "\(String(describing: refusal))")
        guard case .error(let message) = try phone.subscriptions.latest.state else {
            Issue.record("the refused set is \(try phone.subscriptions.latest.state)")
            return
        }
        #expect(message.contains("title"))
        #expect(try phone.subscriptions.active.version == 1, "the device keeps the last complete set")
        await session.close()
        await server.stop()
    }

    @Test(
        "Subscription changes made offline, with writes before and after them, sync on reconnect and survive a restart")
    func offlineChanges() async throws {
        let directory = TemporaryDirectory("flexible-offline")
        let (server, endpoint) = try await Loopback.daemon(directory, "daemon")
        let writer = try Loopback.app(directory, "writer")
        let writerSession = writer.connect(to: endpoint, configuration: Loopback.fastBackoff)
        try await writer.write { txn in
            for index in 1...4 { try txn.create("Task", ["_id": .string("w\(index)"), "count": .int(Int64(index))]) }
        }
        try await Loopback.within(.seconds(120), "the writer's upload") { try await writerSession.waitForUpload() }

        var phone: Replica? = try Loopback.app(directory, "phone")
        try phone!.subscriptions.commit { $0.append("Task", where: "count == 1", name: "one") }
        try await phone!.write { try $0.create("Task", ["_id": "p1", "count": 1]) }
        try phone!.subscriptions.commit { $0.append("Task", where: "count == 3", name: "three") }
        try await phone!.write { try $0.create("Task", ["_id": "p3", "count": 3]) }
        phone!.close()
        phone = nil

        let reopened = try Loopback.app(directory, "phone")
        #expect(try reopened.subscriptions.latest.version == 2)
        #expect(try reopened.subscriptions.latest.count == 2)
        let session = reopened.connect(to: endpoint, configuration: Loopback.fastBackoff)
        try await Loopback.within(.seconds(120), "the offline set") { try await reopened.subscriptions.waitForSync() }
        try await Loopback.within(.seconds(120), "the phone's upload") { try await session.waitForUpload() }
        try await Loopback.within(.seconds(120), "the phone's download") { try await session.waitForDownload() }
        let holding = try Self.held(reopened)
        #expect(holding == ["p1", "p3", "w1", "w3"], "\(holding); refused: \(session.rejections.map(\.reason))")
        try Self.checkHeldEqualDaemon(reopened, server.replica)
        try await Loopback.within(.seconds(120), "the writer's download") { try await writerSession.waitForDownload() }
        #expect(try writer.object("Task", primaryKey: .string("p3"))?["count"] == 3)
        await session.close()
        await writerSession.close()
        await server.stop()
    }

    @Test("A bootstrap cut off midway leaves nothing of it applied; the next session completes it")
    func interruptedBootstrap() async throws {
        let directory = TemporaryDirectory("flexible-interrupted")
        let (server, endpoint) = try await Loopback.daemon(directory, "daemon") {
            // Many small messages, so that the cut falls between two of them.
            $0.bootstrapMessageBytes = 2_000
        }
        let writer = try Loopback.app(directory, "writer")
        let writerSession = writer.connect(to: endpoint, configuration: Loopback.fastBackoff)
        try await writer.write { txn in
            for index in 0..<3_000 {
                try txn.create("Task", ["_id": .string("t\(index)"), "count": .int(Int64(index % 2)), "title": "bulk"])
            }
        }
        try await Loopback.within(.seconds(120), "the writer's upload") { try await writerSession.waitForUpload() }

        let phone = try Loopback.app(directory, "phone")
        try phone.subscriptions.commit { $0.append("Task", where: "count == 0", name: "even") }
        let session = phone.connect(to: endpoint, configuration: Loopback.fastBackoff)
        try await Loopback.within(.seconds(120), "the first set") { try await phone.subscriptions.waitForSync() }
        #expect(try phone.objects("Task").count == 1_500)

        // The next set's bootstrap is cut once part of it has arrived.
        let cut = Task { () -> SyncProgress? in
            for await step in session.bootstrapProgress() where step.transferred > 0 && !step.isComplete {
                await session.pause()
                return step
            }
            return nil
        }
        try phone.subscriptions.commit { $0.append("Task", where: "count == 1", name: "odd") }
        let partial = try await Loopback.within(.seconds(120), "a partial bootstrap") { await cut.value }
        #expect(partial.map { $0.transferred < $0.transferable } == true, "\(String(describing: partial))")
        // Nothing of the cut bootstrap is applied, and the set is still pending; or, when the rest of the bootstrap
        // was read before the pause took effect (a loaded machine), all of it and the set complete. Never part.
        let held = try phone.objects("Task").count
        let state = try phone.subscriptions.latest.state
        #expect(
            (held == 1_500 && state == .pending) || (held == 3_000 && state == .complete),
            "cut at \(String(describing: partial)): \(held) objects held, the set \(state)")
        #expect(try phone.verify().passed)

        session.resume()
        try await Loopback.within(.seconds(120), "the resumed set") { try await phone.subscriptions.waitForSync() }
        #expect(try phone.objects("Task").count == 3_000)
        #expect(try phone.verify().passed)
        await session.close()
        await writerSession.close()
        await server.stop()
    }

    @Test(
        "Writes no subscription of an app selects do not wake its session: they reach it as skeletons, at its next download or once idle"
    )
    func unconcernedWritesWaitForTheNextDownload() async throws {
        let directory = TemporaryDirectory("flexible-idle")
        for idleCatchUp in [Duration.seconds(3600), .milliseconds(200)] {
            let (server, endpoint) = try await Loopback.daemon(directory, "daemon-\(idleCatchUp)") {
                $0.idleCatchUp = idleCatchUp
                $0.tickInterval = .milliseconds(50)
            }
            let writer = try Loopback.app(directory, "writer-\(idleCatchUp)")
            let writerSession = writer.connect(to: endpoint, configuration: Loopback.fastBackoff)
            try await writer.write { try $0.create("Task", ["_id": "first", "count": 1]) }
            try await Loopback.within(.seconds(120), "the writer's upload") { try await writerSession.waitForUpload() }
            let phone = try Loopback.app(directory, "phone-\(idleCatchUp)")
            try phone.subscriptions.commit { $0.append("Task", where: "count >= 100", name: "big") }
            let session = phone.connect(to: endpoint, configuration: Loopback.fastBackoff)
            try await Loopback.within(.seconds(120), "the set") { try await phone.subscriptions.waitForSync() }
            try await Loopback.within(.seconds(120), "the first download") { try await session.waitForDownload() }

            // Five writes outside the phone's view.
            for index in 0..<5 {
                try await writer.write { try $0.create("Task", ["_id": .string("small\(index)"), "count": 1]) }
            }
            try await Loopback.within(.seconds(120), "the writer's upload") { try await writerSession.waitForUpload() }
            let daemonVector = server.replica.versionVector
            if idleCatchUp > .seconds(60) {
                try await Task.sleep(for: .milliseconds(300))
                #expect(!phone.versionVector.includes(daemonVector), "nothing woke the phone's session")
                try await Loopback.within(.seconds(120), "a download") { try await session.waitForDownload() }
            } else {
                try await Loopback.within(.seconds(120), "the idle catch-up") {
                    while !phone.versionVector.includes(daemonVector) { try await Task.sleep(for: .milliseconds(20)) }
                }
            }
            #expect(phone.versionVector.includes(daemonVector))
            #expect(try Self.held(phone).isEmpty)

            // A write in the view arrives without asking.
            try await writer.write { try $0.update("Task", primaryKey: .string("small3"), ["count": 150]) }
            try await Loopback.within(.seconds(120), "the object entering the view") {
                while try Self.held(phone) != ["small3"] { try await Task.sleep(for: .milliseconds(20)) }
            }
            try Self.checkHeldEqualDaemon(phone, server.replica)
            await session.close()
            await writerSession.close()
            await server.stop()
        }
    }
}
