import Synchronization
import Testing
import Tributary
import TributaryMerge
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// The order in which a daemon's session sends a flexible-sync app what it reads of the daemon's state. A
/// compensating write (the daemon's record of an object whose write it refused) holds every changeset committed
/// before it was read; one that reached the app ahead of an export read earlier would have the app apply that
/// export's changesets on top of it a second time (an increment counted twice).
@Suite("Flexible sync send order")
struct FlexibleSendOrderTests {
    /// A connection whose writer keeps every message in order and holds the next `objects` message, as a full socket
    /// would, until released.
    final class HoldingWriter: MessageWriter {
        private struct State {
            var sent: [Message] = []
            var holdNextObjects = false
            var waiting: CheckedContinuation<Void, Never>?
            var holding = false
            var released = false
        }

        private let state = Mutex(State())

        var sent: [Message] { state.withLock { $0.sent } }
        var holding: Bool { state.withLock { $0.holding } }

        func holdNextObjects() { state.withLock { $0.holdNextObjects = true } }

        func release() {
            let waiting = state.withLock { state in
                state.released = true
                state.holding = false
                defer { state.waiting = nil }
                return state.waiting
            }
            waiting?.resume()
        }

        nonisolated(nonsending) func send(_ message: [UInt8]) async throws {
            let decoded = try MessageCodec.decode(message)
            let hold = state.withLock { state in
                state.sent.append(decoded)
                guard case .objects = decoded, state.holdNextObjects else { return false }
                state.holdNextObjects = false
                return true
            }
            guard hold else { return }
            await withCheckedContinuation { continuation in
                let now = state.withLock { state in
                    if state.released { return true }
                    state.waiting = continuation
                    state.holding = true
                    return false
                }
                if now { continuation.resume() }
            }
        }

        func close() async {}
        func abort() {}
    }

    /// A daemon's session serving a flexible-sync app (`app`, at `vector`), opened with its `hello`, writing through a
    /// ``HoldingWriter``.
    static func openSession(on daemon: Replica, app: ReplicaID, vector: VersionVector) async -> (
        driver: SessionDriver, writer: HoldingWriter
    ) {
        let writer = HoldingWriter()
        let driver = SessionDriver(
            replica: daemon, machine: SessionStateMachine(accepting: .standard, now: .now), writer: writer,
            integrator: DirectIntegrator(replica: daemon))
        await driver.start()
        #expect(
            await driver.receive(
                MessageCodec.encode(.hello(Hello(replica: app, role: .app, vector: vector, flexible: true)))))
        return (driver, writer)
    }

    static func waitUntil(_ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while try await !condition() {
            guard ContinuousClock.now < deadline else { throw TributaryError(.invalidValue, "timed out: \(what)") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test(
        "A compensating write read while an export waits to be sent reaches the app after that export, then its ack"
    )
    func compensationAfterPendingExport() async throws {
        let directory = TemporaryDirectory("flexible-send-order")
        let daemon = try Replica.open(directory: directory.appending("daemon"), schema: Fixtures.taskSchema)
        try await daemon.write { txn in
            try txn.create("Task", ["_id": .string("k"), "count": .int(1), "title": .string("title 0")])
        }
        // The app holds k, and writes it out of its subscription (count < 10): the daemon will refuse that write.
        let app = try Replica.open(directory: directory.appending("app"), schema: Fixtures.taskSchema)
        _ = try app.integrate(encoded: try daemon.encodedChangesets(missingFrom: VersionVector()))
        try await app.write { txn in try txn.update("Task", primaryKey: .string("k"), ["count": .int(50)]) }
        let upload = try app.encodedChangesets(missingFrom: daemon.versionVector, origins: [app.replicaID])
        #expect(!upload.isEmpty)

        let (driver, writer) = await FlexibleSendOrderTests.openSession(
            on: daemon, app: app.replicaID, vector: app.versionVector)
        #expect(
            await driver.receive(
                MessageCodec.encode(
                    .query(QueryRequest(version: 1, subscriptions: [Subscription(type: "Task", query: "count < 10")])))
            ))
        try await Self.waitUntil("the bootstrap") {
            writer.sent.contains { if case .queryState = $0 { true } else { false } }
        }

        // Another replica's increment of k, with a new object the app's set covers: the export carries the new object
        // (held back on the connection) and then the increment.
        writer.holdNextObjects()
        try await daemon.write { txn in
            try txn.increment(["count"], of: "Task", primaryKey: .string("k"), by: 1)
            try txn.create("Task", ["_id": .string("k2"), "count": .int(2), "title": .string("title 1")])
        }
        let increment = daemon.versionVector[daemon.replicaID]
        try await Self.waitUntil("the export's objects") { writer.holding }

        // The app's refused write arrives meanwhile. It is taken at once (the session goes on reading the app's
        // messages, its keepalive included, while the export waits), and its compensating write waits.
        let handled = Mutex<Bool?>(nil)
        Task {
            let going = await driver.receive(
                MessageCodec.encode(
                    .changesets(
                        ChangesetBatch(number: 1, changesets: upload, progress: app.versionVector, more: false))))
            handled.withLock { $0 = going }
        }
        try await Self.waitUntil("the upload taken") { handled.withLock { $0 } != nil }
        #expect(handled.withLock { $0 } == true)
        #expect(writer.holding, "the export was sent before the upload was taken")
        #expect(!writer.sent.contains { if case .ack = $0 { true } else { false } }, "acknowledged before compensated")
        writer.release()
        try await Self.waitUntil("the acknowledgement") {
            writer.sent.contains { if case .ack = $0 { true } else { false } }
        }
        await driver.close(SyncError(.unavailable, .retry, "done"))

        let sent = writer.sent
        let exportIndex = try #require(
            sent.firstIndex { message in
                guard case .changesets(let batch) = message else { return false }
                return batch.progress[daemon.replicaID] >= increment
            }, "the increment was sent")
        let compensationIndex = try #require(
            sent.firstIndex { message in
                guard case .objects(let states) = message else { return false }
                return states.objects.contains { !$0.refused.isEmpty }
            }, "the compensating write was sent")
        // The compensating record holds the increment (count 2): the app must have applied the increment before it.
        guard case .objects(let compensation) = sent[compensationIndex] else { return }
        let record = try #require(compensation.objects.first { $0.primaryKey == .string("k") }?.record)
        let schema = Fixtures.taskSchema
        let values = try ObjectRecord(decoding: record).values(of: try #require(schema[type: "Task"]), in: schema)
        #expect(values["count"] == .int(2))
        #expect(exportIndex < compensationIndex, "the compensating write overtook the export read before it: \(sent)")
        let ackIndex = try #require(sent.firstIndex { if case .ack = $0 { true } else { false } })
        #expect(compensationIndex < ackIndex, "the acknowledgement came before the compensating write")
    }
}

/// Sets an app commits faster than its daemon bootstraps them: the daemon bootstraps the newest only, and must still
/// remove what the app may hold under the sets it skipped (the objects the app wrote under them).
@Suite("Flexible sync sets taken together")
struct FlexibleSupersededSetsTests {
    @Test("Objects of a set skipped for a newer one leave the app; those the newer set covers are sent")
    func skippedSetStillEvicts() async throws {
        let directory = TemporaryDirectory("flexible-superseded")
        let daemon = try Replica.open(directory: directory.appending("daemon"), schema: Fixtures.taskSchema)
        // x: what the app wrote under the skipped set (count 1), which the newest set does not cover. z: what the
        // skipped set and the newest both cover, and the app never received.
        try await daemon.write { txn in
            try txn.create("Task", ["_id": .string("x"), "count": .int(1), "title": .string("title 0")])
            try txn.create("Task", ["_id": .string("z"), "count": .int(7), "title": .string("title 0")])
        }
        let app = ReplicaID(rawValue: 0xA11)
        let (driver, writer) = await FlexibleSendOrderTests.openSession(
            on: daemon, app: app, vector: daemon.versionVector)
        let held = [Subscription(type: "Task", query: "count == 5")]
        // The held set's bootstrap waits on the connection while the app's next two sets arrive.
        writer.holdNextObjects()
        #expect(
            await driver.receive(
                MessageCodec.encode(.query(QueryRequest(version: 1, subscriptions: held, heldVersion: 1, held: held)))))
        try await FlexibleSendOrderTests.waitUntil("the first bootstrap") { writer.holding }
        let skipped = [Subscription(type: "Task", query: "count == 1 OR count == 7")]
        let newest = [Subscription(type: "Task", query: "count == 7")]
        #expect(
            await driver.receive(
                MessageCodec.encode(
                    .query(QueryRequest(version: 2, subscriptions: skipped, heldVersion: 1, held: held)))))
        #expect(
            await driver.receive(
                MessageCodec.encode(.query(QueryRequest(version: 3, subscriptions: newest, heldVersion: 1, held: held)))
            )
        )
        writer.release()
        try await FlexibleSendOrderTests.waitUntil("the newest set completed") {
            writer.sent.contains { if case .queryState(let state) = $0 { state.version == 3 } else { false } }
        }
        await driver.close(SyncError(.unavailable, .retry, "done"))

        var states: [PrimaryKey: [UInt8]?] = [:]
        for case .objects(let message) in writer.sent {
            for object in message.objects { states[object.primaryKey] = object.record }
        }
        let x = try #require(
            states[.string("x")], "x, which the app may hold under the skipped set, was not removed: \(writer.sent)")
        #expect(x == nil, "x was sent instead of removed")
        let z = try #require(states[.string("z")], "z, which the newest set covers, was not sent")
        #expect(z != nil, "z was removed instead of sent")
    }

    /// The daemon's bootstrap of a new set reads an object before the app's own write that moves it into the set is
    /// committed: the app drops its copy, write and all. The daemon's adopted copy of that write comes back to the app
    /// like any changeset it lacks, judged against its view: the object, removed from the app and now in the view, is
    /// sent whole.
    @Test("An object a bootstrap removed just before the app's own write to it lands is sent back when it matches")
    func removedThenWrittenIsSentBack() async throws {
        let directory = TemporaryDirectory("flexible-removed-written")
        let daemon = try Replica.open(directory: directory.appending("daemon"), schema: Fixtures.taskSchema)
        try await daemon.write { txn in
            try txn.create("Task", ["_id": .string("x"), "count": .int(1), "title": .string("title 0")])
        }
        // The app holds x under its set (count == 1), commits a set of count == 2, then moves x into it.
        let app = try Replica.open(directory: directory.appending("app"), schema: Fixtures.taskSchema)
        _ = try app.integrate(encoded: try daemon.encodedChangesets(missingFrom: VersionVector()))
        let vectorBefore = app.versionVector
        try await app.write { txn in try txn.update("Task", primaryKey: .string("x"), ["count": .int(2)]) }
        let upload = try app.encodedChangesets(missingFrom: daemon.versionVector, origins: [app.replicaID])
        #expect(!upload.isEmpty)

        let (driver, writer) = await FlexibleSendOrderTests.openSession(
            on: daemon, app: app.replicaID, vector: vectorBefore)
        let held = [Subscription(type: "Task", query: "count == 1")]
        #expect(
            await driver.receive(
                MessageCodec.encode(.query(QueryRequest(version: 1, subscriptions: held, heldVersion: 1, held: held)))))
        try await FlexibleSendOrderTests.waitUntil("the first bootstrap") {
            writer.sent.contains { if case .queryState(let state) = $0 { state.version == 1 } else { false } }
        }
        // The new set's bootstrap reads x before the app's write to it (count 1: it leaves), and waits on the
        // connection while the write arrives and is committed.
        writer.holdNextObjects()
        let wanted = [Subscription(type: "Task", query: "count == 2")]
        #expect(
            await driver.receive(
                MessageCodec.encode(
                    .query(QueryRequest(version: 2, subscriptions: wanted, heldVersion: 1, held: held)))))
        try await FlexibleSendOrderTests.waitUntil("the second bootstrap") { writer.holding }
        #expect(
            await driver.receive(
                MessageCodec.encode(
                    .changesets(
                        ChangesetBatch(number: 1, changesets: upload, progress: app.versionVector, more: false)))))
        writer.release()
        try await FlexibleSendOrderTests.waitUntil("the acknowledgement and the new set completed") {
            writer.sent.contains { if case .ack = $0 { true } else { false } }
                && writer.sent.contains { if case .queryState(let state) = $0 { state.version == 2 } else { false } }
        }
        // What the pump sends after the set's completion (the export that brings x back) goes out at once.
        try await Task.sleep(for: .milliseconds(200))
        await driver.close(SyncError(.unavailable, .retry, "done"))

        // In the order the app applies them: x removed by the bootstrap, then x's state (with the app's write).
        let sent = writer.sent
        let completed = try #require(
            sent.firstIndex { if case .queryState(let state) = $0 { state.version == 2 } else { false } })
        var removedByBootstrap = false
        var last: [UInt8]?? = nil
        for (index, message) in sent.enumerated() {
            guard case .objects(let states) = message else { continue }
            for object in states.objects where object.primaryKey == .string("x") {
                if index < completed, states.query == 2, object.record == nil { removedByBootstrap = true }
                last = .some(object.record)
            }
        }
        #expect(removedByBootstrap, "the bootstrap read x after the app's write: the race did not happen")
        let state = try #require(last, "x was never sent")
        let record = try #require(state, "x was left removed from the app")
        let schema = Fixtures.taskSchema
        let values = try ObjectRecord(decoding: record).values(of: try #require(schema[type: "Task"]), in: schema)
        #expect(values["count"] == .int(2))
    }

    /// After a set with no subscriptions, the app holds nothing, whatever set it last completed: an object that came
    /// to match that older set while the session held the empty one is sent when a new set covers it.
    @Test("After an empty set, a new set's objects are sent even where the app's last completed set covers them")
    func afterAnEmptySetNothingIsAssumedHeld() async throws {
        let directory = TemporaryDirectory("flexible-after-empty")
        let daemon = try Replica.open(directory: directory.appending("daemon"), schema: Fixtures.taskSchema)
        let app = ReplicaID(rawValue: 0xA12)
        let (driver, writer) = await FlexibleSendOrderTests.openSession(
            on: daemon, app: app, vector: daemon.versionVector)
        func completed(_ version: UInt64) -> Bool {
            writer.sent.contains { if case .queryState(let state) = $0 { state.version == version } else { false } }
        }
        let held = [Subscription(type: "Task", query: "count == 5")]
        #expect(
            await driver.receive(
                MessageCodec.encode(.query(QueryRequest(version: 1, subscriptions: held, heldVersion: 1, held: held)))))
        try await FlexibleSendOrderTests.waitUntil("the held set") { completed(1) }
        #expect(
            await driver.receive(
                MessageCodec.encode(.query(QueryRequest(version: 2, subscriptions: [], heldVersion: 1, held: held)))))
        try await FlexibleSendOrderTests.waitUntil("the empty set") { completed(2) }
        // y comes to match the older set while the session holds the empty one: the app receives the changeset that
        // made it, with nothing of y in it (a download mark makes the session send it now).
        try await daemon.write { txn in
            try txn.create("Task", ["_id": .string("y"), "count": .int(5), "title": .string("title 0")])
        }
        #expect(await driver.receive(MessageCodec.encode(.mark(request: 1))))
        try await FlexibleSendOrderTests.waitUntil("the mark's reply") {
            writer.sent.contains { if case .markReply(1) = $0 { true } else { false } }
        }
        #expect(
            !writer.sent.contains { message in
                if case .objects(let states) = message {
                    states.objects.contains { $0.primaryKey == .string("y") }
                } else {
                    false
                }
            }, "y was sent while the app's set was empty")
        // The app has not applied the empty set's completion yet: it still names the older set as the one it holds.
        #expect(
            await driver.receive(
                MessageCodec.encode(.query(QueryRequest(version: 3, subscriptions: held, heldVersion: 1, held: held)))))
        try await FlexibleSendOrderTests.waitUntil("the new set") { completed(3) }
        await driver.close(SyncError(.unavailable, .retry, "done"))

        let sent = writer.sent.compactMap { message -> ObjectStates? in
            if case .objects(let states) = message { states } else { nil }
        }
        let y = sent.flatMap(\.objects).last { $0.primaryKey == .string("y") }
        #expect(y?.record != nil, "y, which the new set covers and the app never received, was not sent: \(sent)")
    }
}
