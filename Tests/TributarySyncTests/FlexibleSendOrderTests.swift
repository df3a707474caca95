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

        let writer = HoldingWriter()
        let driver = SessionDriver(
            replica: daemon, machine: SessionStateMachine(accepting: .standard, now: .now), writer: writer,
            integrator: DirectIntegrator(replica: daemon))
        await driver.start()
        #expect(
            await driver.receive(
                MessageCodec.encode(
                    .hello(Hello(replica: app.replicaID, role: .app, vector: app.versionVector, flexible: true)))))
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
