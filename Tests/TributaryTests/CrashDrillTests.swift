import Foundation
import Synchronization
import Testing
import TributaryLog
import TributaryModel
import TributaryStorage
import TributaryTestSupport
import TributaryTestTags

@testable import Tributary

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A writer killed with SIGKILL at a random moment loses no acknowledged commit, in every
/// durability mode.
///
/// `tributary-crash-child` runs seeded random write transactions (1-500 operations with list edits, one in 20 a
/// 5,000-operation one) and prints `ACK <seq> <digest>` after each commit returns. The test kills it after a random
/// 5-400 ms (from its start, or from `READY`) or right after its K-th ack, then reopens the replica and checks:
/// (a) it opens with no repair; (b) every acknowledged sequence is present with the same digest; (c) at most one
/// unacknowledged sequence is present beyond the last ack, and it is complete (all the instructions the child began
/// it with); (d) `verify` passes (views equal a replay of the log); (e) the checksum chain holds over the whole log;
/// (f) one more write commits. A directory lives through one to three kills, so crashes also land on a replica that
/// recovered from one, with the parent's own writes in between.
///
/// `TRIBUTARY_SEED` replays a run's workloads (kill timing is real time, so not exactly); `TRIBUTARY_DEEP=1` runs
/// 2,001 kills instead of 300.
@Suite("Crash (kill -9)", .serialized, .tags(.drill, .slow))
struct CrashDrillTests {
    enum Mode: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case full, relaxed, none
        var durability: Replica.Durability {
            switch self {
            case .full: .full
            case .relaxed: .relaxed
            case .none: .none
            }
        }
        var testDescription: String { rawValue }
    }

    enum KillPlan: CustomStringConvertible {
        /// SIGKILL this long after the child starts (it may still be opening the replica).
        case afterStart(milliseconds: Int)
        /// SIGKILL this long after the child printed READY.
        case afterReady(milliseconds: Int)
        /// SIGKILL right after the child's K-th ack, plus 0-2 ms.
        case afterAcks(Int, microseconds: Int)
        /// SIGKILL 0-60 ms after the child began its K-th transaction: inside the transaction or its commit.
        case afterBegin(Int, microseconds: Int)

        var description: String {
            switch self {
            case .afterStart(let ms): "\(ms) ms after start"
            case .afterReady(let ms): "\(ms) ms after READY"
            case .afterAcks(let k, let us): "after ack \(k) + \(us) µs"
            case .afterBegin(let k, let us): "\(us) µs into transaction \(k)"
            }
        }
    }

    /// What the child printed.
    struct ChildLog {
        var readySequence: UInt64?
        var begun: [UInt64: Int] = [:]
        var acks: [(sequence: UInt64, digest: String)] = []
        var errors: [String] = []

        init(_ lines: [String]) {
            for line in lines {
                let fields = line.split(separator: " ")
                switch fields.first {
                case "READY": readySequence = fields.count > 1 ? UInt64(fields[1]) : nil
                case "BEGIN":
                    if fields.count == 3, let seq = UInt64(fields[1]), let ops = Int(fields[2]) { begun[seq] = ops }
                case "ACK":
                    if fields.count == 3, let seq = UInt64(fields[1]) { acks.append((seq, String(fields[2]))) }
                case "ERROR": errors.append(line)
                default: break
                }
            }
        }
    }

    /// `TRIBUTARY_SEED`, or one drawn from the clock (and printed) per test process.
    static let baseSeed = SplitMix64.seedFromEnvironment(default: UInt64(UInt32(truncatingIfNeeded: time(nil))))

    /// Kills per durability mode; `TRIBUTARY_CRASH_KILLS` overrides.
    static let killsPerMode =
        ProcessInfo.processInfo.environment["TRIBUTARY_CRASH_KILLS"].flatMap(Int.init) ?? Deep.count(ci: 100, deep: 667)

    @Test("kill -9 loses no acknowledged commit", arguments: Mode.allCases)
    func killedWriterLosesNoAcknowledgedCommit(mode: Mode) async throws {
        try await offThePool {
            let child = try #require(ChildExecutable.path(), "tributary-crash-child is not next to the test binary")
            let baseSeed = Self.baseSeed
            var random = SplitMix64(seed: baseSeed ^ UInt64(mode.rawValue.hashValueStable))
            print("crash [\(mode)] base seed \(baseSeed) (TRIBUTARY_SEED=\(baseSeed) replays the workloads)")
            let started = Date()
            var kills = 0
            var acked = 0
            var inFlightSeen = 0
            var run = 0
            while kills < Self.killsPerMode {
                run += 1
                let directory = TemporaryDirectory("crash-\(mode)")
                var expected: [UInt64: String] = [:]  // every acknowledged sequence in this directory and its digest
                var knownLast: UInt64 = 0
                let generations = 1 + Int(random.next() % 3)
                for generation in 0..<generations where kills < Self.killsPerMode {
                    let seed = random.next() >> 1
                    let plan: KillPlan
                    switch random.next() % 20 {
                    case 0..<2: plan = .afterStart(milliseconds: 5 + Int(random.next() % 396))
                    case 2..<9: plan = .afterReady(milliseconds: 5 + Int(random.next() % 396))
                    case 9..<15: plan = .afterAcks(1 + Int(random.next() % 6), microseconds: Int(random.next() % 2_001))
                    default: plan = .afterBegin(2 + Int(random.next() % 5), microseconds: Int(random.next() % 60_000))
                    }
                    let outcome = try killOnce(
                        child: child, directory: directory, mode: mode, seed: seed, plan: plan, expected: &expected,
                        knownLast: &knownLast)
                    kills += 1
                    acked += outcome.acks
                    if outcome.inFlight { inFlightSeen += 1 }
                    print(
                        "crash [\(mode)] run \(run).\(generation) seed \(seed): killed \(plan); \(outcome.acks) acks, "
                            + "log ended at seq \(knownLast - 1)\(outcome.inFlight ? " (one unacked commit, complete)" : ""); "
                            + "checked, one more written")
                    if outcome.failed { return }
                }
            }
            let seconds = Date().timeIntervalSince(started)
            print(
                "crash [\(mode)] \(kills) kills, \(acked) acknowledged commits checked, \(inFlightSeen) in-flight commits "
                    + "found complete, \(String(format: "%.1f", seconds)) s")
            #expect(kills >= Self.killsPerMode)
        }
    }

    /// The child's `hold-snapshot` mode: a reader killed while it holds a snapshot leaves its reader slot behind,
    /// and the stale-reader check clears it (lmdb.h: stale readers make the file grow).
    ///
    /// The replica stays open here while the child dies: when no process has the directory open, the next open
    /// resets LMDB's whole reader table, so there is no stale slot left to count.
    @Test("a compaction killed at any point leaves the old log or the new base, never a mix; nothing is lost")
    func killedCompaction() async throws {
        try await offThePool {
            let executable = try #require(
                ChildExecutable.path(), "tributary-crash-child is not next to the test binary")
            let directory = TemporaryDirectory("crash-compact")
            var configuration = Replica.Configuration()
            configuration.durability = .none
            var replica = try Replica.open(
                directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
            // A history of many small commits over a few hundred objects, so that a compaction takes a while.
            for batch in 0..<20 {
                try replica.write { txn in
                    for index in 0..<2_000 {
                        try txn.upsert(
                            "User", ["_id": .string("u\(batch)-\(index)"), "name": .string("name \(index)")])
                    }
                }
                for index in 0..<200 {
                    try replica.write { txn in
                        try txn.upsert("User", ["_id": .string("u\(batch)-\(index)"), "name": .string("renamed")])
                    }
                }
            }
            let digest = try ReplicaDigest.objects(replica)
            let head = replica.lastLocalSequence
            replica.close()
            var random = SplitMix64(seed: 41)
            // One compaction run to its end, timed, so that the kills fall anywhere in the next ones.
            var through = head / 10
            let started = ContinuousClock.now
            let calibration = try ChildProcess(
                executable: executable, arguments: ["compact", directory.path, "--through", "\(through)"],
                stderrPath: directory.path + ".stderr")
            _ = try #require(
                calibration.waitForLine(startingWith: "COMPACTED", timeout: 120), "\(calibration.standardError)")
            let microseconds = Int((ContinuousClock.now - started) / .microseconds(1))
            var killed = 0
            var markedByKilled = 0
            for round in 0..<10 {
                through = min(head - 1, through + 1 + UInt64(random.below(Int(head) / 6)))
                // Every other round is killed between the marker's commit and the removal of the dropped entries.
                let afterMarker = round % 2 == 1
                let child = try ChildProcess(
                    executable: executable,
                    arguments: [
                        "compact", directory.path, "--through", "\(through)", "--records-in-memory",
                        "\(1 + random.below(50))", "--pause-after-marker", afterMarker ? "5000" : "0",
                    ],
                    stderrPath: directory.path + ".stderr")
                _ = try #require(child.waitForLine(startingWith: "READY", timeout: 60), "\(child.standardError)")
                if afterMarker {
                    _ = try #require(
                        child.waitForLine(startingWith: "MARKED", timeout: 120), "\(child.standardError)")
                } else {
                    usleep(UInt32(random.below(microseconds * 3 / 2)))
                }
                let wasKilled = child.killAndWait() == .signaled(SIGKILL)
                if wasKilled { killed += 1 }
                // Whatever the moment, the replica opens, verifies and holds the same objects; its marker is either
                // the one before or this round's.
                replica = try Replica.open(directory: directory.path, configuration: configuration)
                let report = try replica.verify()
                #expect(report.passed, "round \(round): \(report)")
                #expect(try ReplicaDigest.objects(replica) == digest, "round \(round)")
                let marked = try replica.logCompaction()?.through ?? 0
                #expect(marked <= through, "round \(round)")
                if wasKilled && marked == through { markedByKilled += 1 }
                #expect(replica.lastLocalSequence == head)
                replica.close()
            }
            #expect(killed > 0, "every compaction finished before its kill: the drill killed none mid-way")
            #expect(markedByKilled > 0, "no kill fell between a compaction's commit and the removal of its entries")
            // A compaction run to its end after the kills finishes what they left, and the replica writes on.
            replica = try Replica.open(directory: directory.path, configuration: configuration)
            defer { replica.close() }
            try replica.compact(through: head - 1)
            #expect(try replica.logFigures().entries == 1)
            #expect(try ReplicaDigest.objects(replica) == digest)
            try replica.write { txn in try txn.upsert("User", ["_id": "u0", "name": "after"]) }
            #expect(try replica.verify().passed)
        }
    }

    @Test("a reader killed while holding a snapshot leaves a slot that the stale-reader check clears")
    func killedReaderSlotIsCleared() async throws {
        try await offThePool {
            let executable = try #require(
                ChildExecutable.path(), "tributary-crash-child is not next to the test binary")
            let directory = TemporaryDirectory("crash-reader")
            var configuration = Replica.Configuration()
            configuration.durability = .none
            let replica = try Replica.open(
                directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
            defer { replica.close() }
            try replica.write { txn in try txn.create("User", ["_id": "u1", "name": "Ada"]) }
            let child = try ChildProcess(
                executable: executable, arguments: ["hold-snapshot", directory.path],
                stderrPath: directory.path + ".stderr")
            defer { try? FileManager.default.removeItem(atPath: directory.path + ".stderr") }
            let ready = try #require(
                child.waitForLine(startingWith: "READY", timeout: 60), "\(child.lines) \(child.standardError)")
            #expect(ready == "READY 1", "the child holds \(ready.dropFirst(6)) reader slots")
            #expect(replica.environment.clearStaleReaders() == 0, "a live reader's slot was cleared")
            #expect(child.killAndWait() == .signaled(SIGKILL))
            #expect(replica.environment.clearStaleReaders() == 1)
            #expect(replica.environment.clearStaleReaders() == 0)
            try replica.write { txn in try txn.create("User", ["_id": "u2", "name": "Alan"]) }
            #expect(try replica.verify().passed)
        }
    }

    struct Outcome {
        var acks = 0
        var inFlight = false
        var failed = false
    }

    /// Starts the child on `directory`, kills it by `plan`, reopens and checks. Updates `expected` with the
    /// acknowledged commits (the child's and the parent's one more write) and `knownLast` with the last sequence.
    func killOnce(
        child executable: String, directory: TemporaryDirectory, mode: Mode, seed: UInt64, plan: KillPlan,
        expected: inout [UInt64: String], knownLast: inout UInt64
    ) throws -> Outcome {
        var outcome = Outcome()
        let child = try ChildProcess(
            executable: executable,
            arguments: ["write", directory.path, "--durability", mode.rawValue, "--seed", "\(seed)"],
            stderrPath: directory.path + ".stderr")
        defer { try? FileManager.default.removeItem(atPath: directory.path + ".stderr") }
        switch plan {
        case .afterStart(let ms):
            usleep(UInt32(ms * 1_000))
        case .afterReady(let ms):
            if child.waitForLine(startingWith: "READY", timeout: 60) == nil {
                Issue.record("the child never became ready: \(child.lines) \(child.standardError)")
            }
            usleep(UInt32(ms * 1_000))
        case .afterAcks(let k, let us):
            let reached = child.wait(timeout: 120) { lines in lines.lazy.filter { $0.hasPrefix("ACK") }.count >= k }
            if !reached {
                Issue.record("the child did not reach \(k) acks: \(child.lines.suffix(5)) \(child.standardError)")
            }
            usleep(UInt32(us))
        case .afterBegin(let k, let us):
            let reached = child.wait(timeout: 120) { lines in lines.lazy.filter { $0.hasPrefix("BEGIN") }.count >= k }
            if !reached {
                Issue.record(
                    "the child did not begin \(k) transactions: \(child.lines.suffix(5)) \(child.standardError)")
            }
            usleep(UInt32(us))
        }
        let exit = child.killAndWait()
        let log = ChildLog(child.lines)
        guard exit == .signaled(SIGKILL), log.errors.isEmpty else {
            let ended = exit.map(\.description) ?? "still running"
            Issue.record(
                "seed \(seed): the child ended by itself (\(ended)) before the kill: \(log.errors) \(child.lines.suffix(3)) \(child.standardError)"
            )
            outcome.failed = true
            return outcome
        }
        outcome.acks = log.acks.count
        for ack in log.acks { expected[ack.sequence] = ack.digest }
        let lastAcked = max(knownLast, log.readySequence ?? 0, log.acks.map(\.sequence).max() ?? 0)

        // (a) It opens with no repair step.
        var configuration = Replica.Configuration()
        configuration.durability = mode.durability
        let replica: Replica
        do {
            replica = try Replica.open(
                directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
        } catch {
            Issue.record("seed \(seed), killed \(plan): reopening failed: \(error)")
            outcome.failed = true
            return outcome
        }
        defer { replica.close() }
        let last = replica.lastLocalSequence

        // (b) Every acknowledged commit is there, byte for byte.
        for (sequence, digest) in expected.sorted(by: { $0.key < $1.key }) {
            do {
                let found = ReplicaDigest.hex(try ReplicaDigest.changeset(replica, at: sequence))
                if found != digest {
                    Issue.record(
                        "seed \(seed), killed \(plan): acknowledged seq \(sequence) has digest \(found), acked \(digest)"
                    )
                    outcome.failed = true
                }
            } catch {
                Issue.record("seed \(seed), killed \(plan): acknowledged seq \(sequence) is unreadable: \(error)")
                outcome.failed = true
            }
        }

        // (c) At most one unacknowledged commit, and a complete one.
        if last == 1 && lastAcked == 0 {
            // Killed while creating the replica: the schema changeset was in flight, and is complete.
            outcome.inFlight = true
            #expect(try replica.changeset(at: 1).instructions.count == Fixtures.chatSchema.types.count + 1)
        } else if last < lastAcked || last > lastAcked + 1 {
            Issue.record(
                "seed \(seed), killed \(plan): the log ends at \(last); the last acknowledged seq is \(lastAcked)")
            outcome.failed = true
        } else if last == lastAcked + 1 {
            outcome.inFlight = true
            let changeset = try replica.changeset(at: last)
            #expect(changeset.origin == replica.replicaID)
            if let operations = log.begun[last] {
                if changeset.instructions.count != operations {
                    Issue.record(
                        "seed \(seed): the in-flight seq \(last) holds \(changeset.instructions.count) instructions; the child began it with \(operations)"
                    )
                    outcome.failed = true
                }
            } else {
                Issue.record("seed \(seed): seq \(last) is in the log but the child never began it")
                outcome.failed = true
            }
        }

        // (d) The views equal a replay of the log.
        let report = try replica.verify()
        if !report.passed {
            Issue.record("seed \(seed), killed \(plan): verify failed: \(report)")
            outcome.failed = true
        }
        #expect(report.changesetsChecked == Int(last))

        // (e) The chain holds over the whole log.
        var entries: UInt64 = 0
        try replica.forEachLogEntry { entry in
            entries += 1
            return entry.localSequence == entries
        }
        #expect(entries == last)

        // (f) One more write commits.
        try replica.write { txn in
            try txn.create("User", ["_id": .string("parent-\(seed)"), "name": "after the crash", "tags": ["a", "b"]])
        }
        #expect(replica.lastLocalSequence == last + 1)
        expected[last + 1] = ReplicaDigest.hex(try ReplicaDigest.changeset(replica, at: last + 1))
        knownLast = last + 1
        return outcome
    }
}

extension String {
    /// A hash of the string that is the same in every process (Swift's `hashValue` is seeded per process).
    fileprivate var hashValueStable: UInt64 { XXHash64.hash(Array(utf8)) }
}
