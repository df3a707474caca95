import Foundation
import Testing
import TributaryModel
import TributaryStorage
import TributaryTestSupport
import TributaryTestTags
import TributaryViews

@testable import Tributary

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Storage faults by SQLite's I/O-error method: fail the N-th storage call of a write, for N = 1, 2, ... until the
/// write completes, once with a single failure and once with every later call failing too.
///
/// Every pass must see a ``TributaryError`` naming the failed LMDB call, leave the replica exactly as before the
/// transaction (objects, log and in-memory head), keep `verify` passing, and let the next write commit. After
/// `MDB_PANIC` the handle must refuse all use, and a fresh open must work.
@Suite("Storage fault loops", .tags(.drill, .slow))
struct StorageFaultDrillTests {
    typealias Operation = StorageFaultPlan.Operation

    /// lmdb.h: `MDB_READERS_FULL` and `MDB_PANIC`.
    static let mdbReadersFull: Int32 = -30790
    static let mdbPanic: Int32 = -30795

    static let operations: [Operation] = [.transactionBegin, .get, .put, .delete, .cursorGet, .commit]
    static let codes: [(name: String, code: Int32)] = [
        ("ENOSPC", ENOSPC), ("EIO", EIO), ("MDB_READERS_FULL", mdbReadersFull), ("MDB_PANIC", mdbPanic),
    ]

    static func lmdbName(_ operation: Operation) -> String {
        switch operation {
        case .transactionBegin: "mdb_txn_begin"
        case .get: "mdb_get"
        case .put: "mdb_put"
        case .delete: "mdb_del"
        case .cursorGet: "mdb_cursor_get"
        case .commit: "mdb_txn_commit"
        }
    }

    /// ENOSPC is a full disk. An EIO on a disk with room and no file size limit in reach is an input/output error,
    /// not a full disk (the storage layer checks the free space before it names a full disk).
    static func expectedCode(_ rc: Int32) -> TributaryError.Code {
        switch rc {
        case ENOSPC: .diskFull
        default: .storage
        }
    }

    /// A scenario: deterministic, so it leaves the same objects on any replica holding the same objects. It acts on the
    /// replica and returns the replica to check afterwards (a migration opens the directory again).
    struct Scenario: Sendable, CustomTestStringConvertible {
        var name: String
        /// Operations of the workload run before the loop, building the state the scenario starts from.
        var setupOperations: Int
        /// What is done to the replica after the setup operations, before the loop (unfaulted).
        var prepare: (@Sendable (Replica) throws -> Void)? = nil
        /// Whether the scenario appends to the log (a format upgrade does not).
        var writes = true
        /// What makes the closed directory open again after a panic, before `prepare` runs on it again.
        var beforeReopen: (@Sendable (String) throws -> Void)? = nil
        var act: @Sendable (Replica, [String], [String]) throws -> Replica
        var testDescription: String { name }

        /// A scenario that is one write transaction.
        static func write(
            _ name: String, setupOperations: Int,
            _ body: @escaping @Sendable (Transaction, [String], [String]) throws -> Void
        ) -> Scenario {
            Scenario(name: name, setupOperations: setupOperations) { replica, users, messages in
                try replica.write { txn in try body(txn, users, messages) }
                return replica
            }
        }

        /// One small write: create a user, rename another (an index delete and put), append a tag.
        static let oneWrite = write("one write", setupOperations: 60) { txn, users, _ in
            let messages = try txn.count("ChatMessage")  // a scan (cursor reads) whose result is written
            try txn.create("User", ["_id": "fault-new", "name": "Faulty", "tags": ["x"], "age": .int(Int64(messages))])
            try txn.set("Renamed", at: ["name"], of: "User", primaryKey: .string(users[0]))
            try txn.append("t", to: ["tags"], of: "User", primaryKey: .string(users[1]))
        }

        /// A 1,000-operation batch of the crash workload: creates, list edits, sets, increments, deletes.
        static let batch = write("1,000-object batch", setupOperations: 300) { txn, users, messages in
            var workload = ChatWorkload(seed: 4242, prefix: "batch", existingUsers: users, existingMessages: messages)
            try workload.run(999, in: txn, textLength: 60)
            let count = try txn.count("User")  // a scan (cursor reads) whose result is written
            try txn.set(.int(Int64(count)), at: ["age"], of: "User", primaryKey: .string(users[0]))
        }

        /// A remote integration: a batch of all but one of another replica's 101 changesets, in shuffled order. The
        /// one held back leaves the 40 after it waiting in the pending area, so the batch writes the log, the views
        /// and the pending area in one commit.
        static func integration() throws -> Scenario {
            let directory = TemporaryDirectory("storage-fault-remote")
            var configuration = StorageFaultDrillTests.configuration()
            configuration.replicaID = ReplicaID(rawValue: 0xD3D3_0000_0000_0001)
            let remote = try Replica.open(
                directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
            defer { remote.close() }
            var workload = ChatWorkload(seed: 77, prefix: "remote")
            for _ in 0..<100 { try remote.write { txn in try workload.run(6, in: txn, textLength: 40) } }
            // Its schema's changeset, then the 100 writes.
            var changesets = try remote.changesets(missingFrom: VersionVector())
            #expect(changesets.count == 101)
            changesets.remove(at: 60)
            var random = SplitMix64(seed: 5)
            for index in changesets.indices.reversed() {
                changesets.swapAt(index, Int(random.next() % UInt64(index + 1)))
            }
            let batch = changesets
            return Scenario(name: "remote integration of 100 changesets, 40 left pending", setupOperations: 200) {
                replica, _, _ in
                let report = try replica.integrate(batch)
                #expect(report.rejected.isEmpty)
                return replica
            }
        }

        /// A format upgrade: the directory, recorded as a format one below the current, raised by one registered step
        /// that rewrites every type's index entries from its records, and the format recorded, in one transaction.
        static let formatUpgrade = Scenario(
            name: "format upgrade", setupOperations: 300,
            prepare: { replica in
                try replica.environment.write { txn in
                    try txn.put(replica.identity, key: ReplicaFormat.key, value: [ReplicaFormat.current - 1])
                }
            },
            writes: false,
            // A replica of format 0 does not open: no release wrote one, so no step reads it.
            beforeReopen: { directory in try StoredFormat.setFormat(directory, ReplicaFormat.current) },
            act: { replica, _, _ in
                let step = ReplicaFormat.Upgrade(from: ReplicaFormat.current - 1, summary: "index entries rewritten") {
                    replica, txn in
                    let schema = try replica.views.schema(in: txn) ?? Schema(types: [])
                    for type in schema.types {
                        try replica.views.rebuildIndexes(ofType: type.name, schema: schema, in: txn)
                    }
                }
                try replica.upgradeFormat(from: ReplicaFormat.current - 1, steps: [step])
                return replica
            })

        /// A migration: the directory opened again with a later schema version, whose migration rewrites every user.
        static let migration = Scenario(name: "migration", setupOperations: 300) { replica, _, _ in
            var schema = Fixtures.chatSchema
            schema.version += 1
            var user = try #require(schema[type: "User"])
            user.properties.append(.scalar("nickname", .string, optional: true))
            schema.upsert(user)
            let migration = Migration { context in
                try context.enumerateObjects("User") { old, new in
                    new?["nickname"] = .string("~" + (old["name"].stringValue ?? ""))
                    new?["karma"] = .int((old["karma"].intValue ?? 0) + 1)
                }
            }
            return try Replica.open(
                directory: replica.directory, schema: schema, configuration: StorageFaultDrillTests.configuration(),
                migration: migration)
        }
    }

    /// A replica holding the scenario's starting state, and what that state is.
    struct Fixture {
        var replica: Replica
        var users: [String]
        var messages: [String]
    }

    static func configuration() -> Replica.Configuration {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.clock = ManualClock()
        return configuration
    }

    static func makeFixture(_ directory: TemporaryDirectory, _ scenario: Scenario) throws -> Fixture {
        // A fixed id, as the remote's: the loop counts a scenario's storage calls on one fixture and fails them on
        // another, so both must merge the same way (with random ids, which replica's definition of the schema is
        // later, and so whether an integration stores the schema again, would change from fixture to fixture).
        var configuration = configuration()
        configuration.replicaID = ReplicaID(rawValue: 0xF1F1_0000_0000_0001)
        let replica = try Replica.open(
            directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
        var workload = ChatWorkload(seed: 99, prefix: "setup")
        try replica.write { txn in try workload.run(scenario.setupOperations, in: txn, textLength: 60) }
        try scenario.prepare?(replica)
        return Fixture(replica: replica, users: workload.users, messages: workload.messages)
    }

    struct State: Equatable, CustomStringConvertible {
        var objects: UInt64
        var log: UInt64
        var last: UInt64
        var pending: Int
        var format: UInt8
        var description: String {
            "objects \(ReplicaDigest.hex(objects)), log \(ReplicaDigest.hex(log)) through seq \(last), \(pending) pending, "
                + "format \(format)"
        }
    }

    static func state(_ replica: Replica) throws -> State {
        State(
            objects: try ReplicaDigest.objects(replica), log: try ReplicaDigest.log(replica),
            last: replica.lastLocalSequence,
            pending: try replica.pendingChangesets().count, format: try format(replica))
    }

    /// The replica format its identity records.
    static func format(_ replica: Replica) throws -> UInt8 {
        try replica.environment.read { txn in try replica.storedFormat(in: txn) }
    }

    /// What a scenario leaves: its objects, the last local sequence and the number of changesets pending.
    struct Outcome {
        var objects: UInt64
        var last: UInt64
        var pending: Int
        var format: UInt8
    }

    /// The figures of one loop, for the report.
    struct Figures {
        var calls = 0
        var passes = 0
        var failedPasses = 0
        var panics = 0
    }

    /// The failure points to try when the scenario makes `calls` calls of the operation: all of them up to `limit`,
    /// else the first 12, the last 6, and an even spread of the rest.
    static func failurePoints(calls: Int, limit: Int, random: inout SplitMix64) -> [Int] {
        if calls <= limit { return Array(1...(calls + 1)) }
        var points = Set(1...12)
        points.formUnion((calls - 5)...(calls + 1))
        let spread = max(limit - 18, 1)
        let width = calls - 18
        for i in 0..<spread {
            // One point in each of `spread` equal slices of the middle, at a random place in its slice.
            let low = 13 + width * i / spread
            let high = 13 + width * (i + 1) / spread
            points.insert(low + Int(random.next() % UInt64(max(high - low, 1))))
        }
        return points.sorted()
    }

    /// Runs one fault loop: the scenario on a fresh replica, failing call N of `operation` with `code` for each failure
    /// point, until the scenario completes. Returns the loop's figures.
    func loop(
        _ scenario: Scenario, operation: Operation, code: (name: String, code: Int32), persistent: Bool, limit: Int,
        expectedAfter: Outcome, random: inout SplitMix64
    ) throws -> Figures {
        let directory = TemporaryDirectory("storage-fault")
        var fixture: Fixture? = try Self.makeFixture(directory, scenario)
        let users = fixture!.users
        let messages = fixture!.messages
        let before = try Self.state(fixture!.replica)
        let label =
            "\(scenario.name), \(Self.lmdbName(operation)) failing with \(code.name) \(persistent ? "from call N on" : "at call N")"

        // Count the calls the scenario makes, with a plan that never fires, on a copy of the starting state.
        var figures = Figures()
        do {
            let probe = TemporaryDirectory("storage-fault-probe")
            let copy = try Self.makeFixture(probe, scenario)
            copy.replica.environment.injectFaults(
                StorageFaultPlan(operations: [operation], failAt: Int.max, resultCode: code.code))
            _ = try scenario.act(copy.replica, users, messages)
            figures.calls = copy.replica.environment._faultCounts.calls
            copy.replica.close()
        }

        for n in Self.failurePoints(calls: figures.calls, limit: limit, random: &random) {
            figures.passes += 1
            var panicked = false
            do {
                let replica = fixture!.replica
                replica.environment.injectFaults(
                    StorageFaultPlan(operations: [operation], failAt: n, resultCode: code.code, persistent: persistent))
                var thrown: (any Error)?
                var completed: Replica?
                do {
                    completed = try scenario.act(replica, users, messages)
                } catch {
                    thrown = error
                }
                let counts = replica.environment._faultCounts
                replica.environment.injectFaults(nil)

                guard let thrown else {
                    // The write completed: no injected failure may have been swallowed, and the state is the one after.
                    let replica = completed ?? replica
                    if counts.failures > 0 {
                        Issue.record("\(label), N = \(n): the write succeeded although \(counts.failures) calls failed")
                    }
                    #expect(n > figures.calls, "\(label): the write completed at N = \(n) of \(figures.calls) calls")
                    #expect(
                        try ReplicaDigest.objects(replica) == expectedAfter.objects, "\(label): the state after differs"
                    )
                    #expect(replica.lastLocalSequence == expectedAfter.last)
                    #expect(try replica.pendingChangesets().count == expectedAfter.pending)
                    #expect(try Self.format(replica) == expectedAfter.format)
                    let report = try replica.verify()
                    #expect(report.passed, "\(label): \(report)")
                    replica.close()
                    return figures
                }
                figures.failedPasses += 1

                // A typed error that names the call and the replica.
                #expect(counts.failures >= 1, "\(label), N = \(n): an error was thrown but no call failed: \(thrown)")
                if let error = thrown as? TributaryError {
                    #expect(
                        error.code == Self.expectedCode(code.code),
                        "\(label), N = \(n): \(error.code): \(error.message)")
                    #expect(error.message.contains(Self.lmdbName(operation)), "\(label), N = \(n): \(error.message)")
                    #expect(error.message.contains(directory.path), "\(label), N = \(n): no path in: \(error.message)")
                } else {
                    Issue.record("\(label), N = \(n): \(type(of: thrown)) is not a TributaryError: \(thrown)")
                }

                if code.code == Self.mdbPanic {
                    panicked = true
                    figures.panics += 1
                    // The handle refuses all use.
                    for attempt in ["read", "write"] {
                        do {
                            if attempt == "read" {
                                _ = try replica.objects("User")
                            } else {
                                try replica.write { txn in try txn.create("User", ["_id": "after-panic", "name": "X"]) }
                            }
                            Issue.record("\(label), N = \(n): a \(attempt) on the poisoned handle succeeded")
                        } catch let refusal as TributaryError {
                            #expect(refusal.message.contains("close it and open"), "\(label): \(refusal.message)")
                        }
                    }
                    replica.close()
                }
            }
            if panicked {
                // A fresh open, once the poisoned replica is closed and released, works.
                fixture = nil
                try scenario.beforeReopen?(directory.path)
                fixture = Fixture(
                    replica: try Replica.open(
                        directory: directory.path, schema: Fixtures.chatSchema, configuration: Self.configuration()),
                    users: users, messages: messages)
                try scenario.prepare?(fixture!.replica)
            }

            // The state before, on disk and in memory, and views that equal the log.
            let current = fixture!.replica
            let after = try Self.state(current)
            if after != before {
                Issue.record(
                    "\(label), N = \(n): the failed write changed the replica: before \(before), after \(after)")
                current.close()
                return figures
            }
            let report = try current.verify()
            #expect(report.passed, "\(label), N = \(n): \(report)")
        }
        Issue.record("\(label): the write never completed (\(figures.calls) calls)")
        return figures
    }

    /// What a scenario leaves, computed on an unfaulted replica.
    static func expectedAfter(_ scenario: Scenario) throws -> Outcome {
        let directory = TemporaryDirectory("storage-fault-control")
        let fixture = try makeFixture(directory, scenario)
        let (users, messages) = (fixture.users, fixture.messages)
        let before = fixture.replica.lastLocalSequence
        let formatBefore = try format(fixture.replica)
        let replica = try scenario.act(fixture.replica, users, messages)
        defer { replica.close() }
        let outcome = Outcome(
            objects: try ReplicaDigest.objects(replica), last: replica.lastLocalSequence,
            pending: try replica.pendingChangesets().count, format: try format(replica))
        if scenario.writes {
            #expect(outcome.last > before, "\(scenario.name): the scenario wrote nothing")
        } else {
            #expect(formatBefore < Replica.formatVersion && outcome.format == Replica.formatVersion)
        }
        return outcome
    }

    @Test("one write: every failing call leaves the replica as it was", arguments: [false, true])
    func oneWrite(persistent: Bool) async throws {
        try await offThePool {
            try run(.oneWrite, persistent: persistent, limit: Int.max)
        }
    }

    @Test("1,000-object batch: every failing call leaves the replica as it was", arguments: [false, true])
    func batch(persistent: Bool) async throws {
        try await offThePool {
            try run(.batch, persistent: persistent, limit: Deep.count(ci: 14, deep: 400))
        }
    }

    @Test("remote integration: every failing call leaves the replica as it was", arguments: [false, true])
    func integration(persistent: Bool) async throws {
        try await offThePool {
            try run(try Scenario.integration(), persistent: persistent, limit: Deep.count(ci: 14, deep: 400))
        }
    }

    @Test("format upgrade: every failing call leaves the replica as it was", arguments: [false, true])
    func formatUpgrade(persistent: Bool) async throws {
        try await offThePool {
            try run(.formatUpgrade, persistent: persistent, limit: Deep.count(ci: 14, deep: 400))
        }
    }

    @Test("migration: every failing call leaves the replica as it was", arguments: [false, true])
    func migration(persistent: Bool) async throws {
        try await offThePool {
            try run(.migration, persistent: persistent, limit: Deep.count(ci: 14, deep: 400))
        }
    }

    func run(_ scenario: Scenario, persistent: Bool, limit: Int) throws {
        let started = Date()
        let expected = try Self.expectedAfter(scenario)
        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 3))
        var total = Figures()
        for operation in Self.operations {
            for code in Self.codes {
                let figures = try loop(
                    scenario, operation: operation, code: code, persistent: persistent, limit: limit,
                    expectedAfter: expected, random: &random)
                print(
                    "storage faults: \(scenario.name) \(persistent ? "persistent" : "once") \(Self.lmdbName(operation)) \(code.name): "
                        + "\(figures.calls) calls, \(figures.passes) passes, \(figures.failedPasses) failed cleanly")
                total.passes += figures.passes
                total.failedPasses += figures.failedPasses
                total.panics += figures.panics
            }
        }
        print(
            "storage faults: \(scenario.name) \(persistent ? "persistent" : "once"): \(total.passes) passes, \(total.failedPasses) "
                + "clean failures, \(total.panics) panics reopened, \(String(format: "%.1f", Date().timeIntervalSince(started))) s"
        )
        #expect(total.failedPasses > 0)
    }

    /// `MDB_MAP_FULL` is not an error the caller sees while the map can grow: the environment aborts, grows the map
    /// and runs the write again. Failing call N with it must end with the state after the write and a larger map;
    /// failing every call from N on must end, once the map reaches its maximum, with `.mapFull` naming both sizes and
    /// the state before.
    @Test("MDB_MAP_FULL at call N grows the map and completes the write", arguments: [Operation.put, .commit])
    func mapFullGrowsAndRetries(operation: Operation) async throws {
        try await offThePool {
            let mapFull: Int32 = -30792
            let scenario = Scenario.batch
            let expected = try Self.expectedAfter(scenario)
            var random = SplitMix64(seed: 11)
            var calls = 0
            var points: [Int] = []
            var checked = 0
            /// The scenario's starting state in a replica whose map starts at 4 MiB and may grow to 64 MiB.
            func smallMapFixture(_ directory: TemporaryDirectory) throws -> (Replica, [String], [String]) {
                var configuration = Self.configuration()
                configuration.initialSizeBytes = 4 << 20
                configuration.maximumSizeBytes = 64 << 20
                let replica = try Replica.open(
                    directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
                var workload = ChatWorkload(seed: 99, prefix: "setup")
                try replica.write { txn in try workload.run(scenario.setupOperations, in: txn, textLength: 60) }
                return (replica, workload.users, workload.messages)
            }
            repeat {
                let directory = TemporaryDirectory("storage-fault-mapfull")
                let (replica, users, messages) = try smallMapFixture(directory)
                let mapBefore = replica.storageStatistics.mapSize
                if points.isEmpty {
                    replica.environment.injectFaults(
                        StorageFaultPlan(operations: [operation], failAt: Int.max, resultCode: mapFull))
                    _ = try scenario.act(replica, users, messages)
                    calls = replica.environment._faultCounts.calls
                    points = Self.failurePoints(calls: calls, limit: Deep.count(ci: 10, deep: 200), random: &random)
                        .filter { $0 <= calls }
                    continue
                }
                let n = points.removeFirst()
                replica.environment.injectFaults(
                    StorageFaultPlan(operations: [operation], failAt: n, resultCode: mapFull))
                _ = try scenario.act(replica, users, messages)
                let counts = replica.environment._faultCounts
                replica.environment.injectFaults(nil)
                #expect(counts.failures == 1)
                #expect(replica.storageStatistics.mapSize > mapBefore, "N = \(n): the map did not grow")
                #expect(
                    try ReplicaDigest.objects(replica) == expected.objects,
                    "N = \(n): the state after the retried write differs")
                let report = try replica.verify()
                #expect(report.passed, "N = \(n): \(report)")
                checked += 1
            } while !points.isEmpty
            print(
                "storage faults: MDB_MAP_FULL once at \(Self.lmdbName(operation)) call N: \(checked) points of \(calls) calls, each grown and completed"
            )

            // Persistent: the map grows to its maximum, then the caller gets .mapFull naming both sizes.
            let directory = TemporaryDirectory("storage-fault-mapfull-persistent")
            let (replica, users, messages) = try smallMapFixture(directory)
            let before = try Self.state(replica)
            replica.environment.injectFaults(
                StorageFaultPlan(operations: [operation], failAt: 1, resultCode: mapFull, persistent: true))
            do {
                _ = try scenario.act(replica, users, messages)
                Issue.record("a write whose every \(Self.lmdbName(operation)) fails with MDB_MAP_FULL succeeded")
            } catch let error as TributaryError {
                #expect(error.code == .mapFull, "\(error.code): \(error.message)")
                #expect(error.message.contains("\(64 << 20)"), "the maximum is not named: \(error.message)")
                #expect(error.message.contains(directory.path), "the path is not named: \(error.message)")
            }
            replica.environment.injectFaults(nil)
            #expect(replica.storageStatistics.mapSize == 64 << 20)
            #expect(try Self.state(replica) == before)
            #expect(try replica.verify().passed)
            _ = try scenario.act(replica, users, messages)
            #expect(try ReplicaDigest.objects(replica) == expected.objects)
        }
    }

    /// After `MDB_PANIC`, opening the directory again must not hand back the poisoned handle, even when the caller did
    /// not close the old replica (and still holds it).
    @Test("reopening after MDB_PANIC without close() gives a working replica")
    func reopenAfterPanicWithoutClose() throws {
        let directory = TemporaryDirectory("storage-fault-panic-reopen")
        let poisoned = try Replica.open(
            directory: directory.path, schema: Fixtures.chatSchema, configuration: Self.configuration())
        try poisoned.write { txn in try txn.create("User", ["_id": "u1", "name": "Ada"]) }
        poisoned.environment.injectFaults(StorageFaultPlan(operations: [.commit], failAt: 1, resultCode: Self.mdbPanic))
        #expect(throws: TributaryError.self) {
            try poisoned.write { txn in try txn.create("User", ["_id": "u2", "name": "Alan"]) }
        }
        poisoned.environment.injectFaults(nil)
        #expect(throws: TributaryError.self) { try poisoned.objects("User") }

        let reopened = try Replica.open(
            directory: directory.path, schema: Fixtures.chatSchema, configuration: Self.configuration())
        #expect(try reopened.objects("User").map(\.primaryKey) == [.string("u1")])
        try reopened.write { txn in try txn.create("User", ["_id": "u2", "name": "Alan"]) }
        #expect(try reopened.verify().passed)
        // The old handle still refuses use.
        #expect(throws: TributaryError.self) { try poisoned.objects("User") }
        withExtendedLifetime(poisoned) {}
    }
}
