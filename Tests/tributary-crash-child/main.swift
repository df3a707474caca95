// The child process of the storage-fault suites (crash, disk full, map growth, corruption), and the app the network
// kill drill kills mid-bootstrap. The parent starts it with `Foundation.Process`, reads its standard output line by
// line, and may kill it at any moment.
//
//   tributary-crash-child write DIR [--durability full|relaxed|none] [--seed N] [--prefix P] [--big-every N]
//       [--big N] [--max-ops N] [--text N] [--max-txns N] [--file-size-limit BYTES] [--after-error N]
//       [--initial-size BYTES] [--maximum-size BYTES]
//     Opens (or creates) the replica in DIR with the chat schema and runs seeded random write transactions until
//     killed (or --max-txns). Prints `READY <lastLocalSequence> <replicaID>` once open, `BEGIN <seq> <operations>`
//     before each transaction and `ACK <seq> <digest>` after each commit returns, where digest is the XXH64 (hex)
//     of the canonical encoding of the changeset the transaction committed (ReplicaDigest.changeset): every
//     object the transaction wrote, as the log holds it. Each operation emits exactly one instruction.
//     With --file-size-limit, sets RLIMIT_FSIZE (soft) after opening and ignores SIGXFSZ; on the first failed
//     write prints `ERROR <code> <message>`, then raises the limit again ("space was freed") and, with
//     --after-error N, runs N more transactions on the same open replica before `DONE`.
//   tributary-crash-child hold-snapshot DIR
//     Opens the replica's storage, holds a snapshot open, prints `READY <readersUsed>` and sleeps until killed.
//   tributary-crash-child grow-map DIR BYTES
//     Writes BYTES of ballast into a separate database of the replica's environment (so the replica's log and views
//     are untouched), growing the map past what a parent opened it with, removes it again, and prints
//     `GREW <mapSize> <usedBytes>`.
//   tributary-crash-child inspect DIR
//     Opens the replica read-only and prints `OPENED <lastLocalSequence>`, `VERIFY passed` or
//     `VERIFY failed <problem>`, then `STATE <objectsDigest> <logDigest> <replicaID> <lastLocalSequence>`; or
//     `ERROR <code> <message>` for the first error thrown.
//   tributary-crash-child subscribe DIR --port N [--where QUERY]
//     Opens (or creates) the replica in DIR with the task schema (Fixtures.taskSchema), commits the subscription set
//     `Task` where QUERY (default TRUEPREDICATE) unless a set is committed already, and syncs with the daemon on
//     127.0.0.1:N. Prints `READY <setVersion> <setState> <tasks>` once open, `PROGRESS <received> <total>` at each
//     step of the flexible-sync bootstrap (objects received so far, against how many it sends), and
//     `COMPLETE <tasks>` once the set is complete; then closes the session and the replica and exits 0. On an error
//     (the daemon refused the set), prints `ERROR <code> <message>` and exits 2.
//   tributary-crash-child reset DIR --port N [--pause-ms N]
//     Opens the replica in DIR with the task schema and syncs it with the daemon on 127.0.0.1:N, recovering
//     unsynced changes in a client reset. Prints `BEFORE` when the reset has downloaded the daemon's state (before it
//     replaces the replica) and `AFTER` once the new replica is in place, pausing --pause-ms after each (a window
//     for a kill); then `RESET <unsyncedChangesets>` once the new replica syncs, and `SYNCED <tasks>` once its upload
//     is acknowledged, and exits 0. On an error, prints `ERROR <code> <message>` and exits 2.
//   tributary-crash-child compact DIR --through N [--records-in-memory N] [--pause-after-marker MS]
//     Opens the replica in DIR (full durability) and compacts its log through entry N, keeping at most the given
//     number of records in memory while it builds the base. Prints `READY` once open, `MARKED` after the commit that
//     stores the compaction's marker (then pauses MS milliseconds, a window for a kill before the dropped entries are
//     removed), then `COMPACTED <through> <droppedEntries>` (or `NOTHING`) when the compaction returns, and exits 0.
import Foundation
import Tributary
import TributaryLog
import TributaryModel
import TributaryProtocol
import TributaryStorage
import TributarySync
import TributaryTestSupport

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

func emit(_ line: String) {
    print(line.replacingOccurrences(of: "\n", with: " "))
    fflush(nil)
}

func fail(_ text: String) -> Never {
    FileHandle.standardError.write(Data("tributary-crash-child: \(text)\n".utf8))
    exit(64)
}

func describe(_ error: any Error) -> String {
    if let error = error as? TributaryError { return "ERROR \(error.code) \(error.message)" }
    if let error = error as? StorageError { return "ERROR storage.\(error.code) \(error.message)" }
    return "ERROR other \(error)"
}

var arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count >= 2 else {
    fail("usage: tributary-crash-child write|hold-snapshot|grow-map|inspect|subscribe DIR ...")
}
let mode = arguments.removeFirst()
let directory = arguments.removeFirst()

var options: [String: String] = [:]
var positional: [String] = []
var index = 0
while index < arguments.count {
    let argument = arguments[index]
    if argument.hasPrefix("--") {
        guard index + 1 < arguments.count else { fail("option \(argument) needs a value") }
        options[String(argument.dropFirst(2))] = arguments[index + 1]
        index += 2
    } else {
        positional.append(argument)
        index += 1
    }
}

@MainActor func intOption(_ name: String, _ fallback: Int) -> Int {
    guard let text = options[name] else { return fallback }
    guard let value = Int(text) else { fail("--\(name) needs an integer, got \(text)") }
    return value
}

func setFileSizeLimit(_ bytes: rlim_t) {
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit)
    limit.rlim_cur = bytes
    if setrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) != 0 { fail("setrlimit failed: errno \(errno)") }
}

switch mode {
case "write":
    var configuration = Replica.Configuration()
    switch options["durability"] ?? "full" {
    case "full": configuration.durability = .full
    case "relaxed": configuration.durability = .relaxed
    case "none": configuration.durability = .none
    case let other: fail("unknown durability \(other)")
    }
    if options["initial-size"] != nil { configuration.initialSizeBytes = intOption("initial-size", 0) }
    if options["maximum-size"] != nil { configuration.maximumSizeBytes = intOption("maximum-size", 0) }
    let seed = UInt64(options["seed"] ?? "1") ?? 1
    let prefix = options["prefix"] ?? "g\(ReplicaDigest.hex(seed).suffix(6))"
    let bigEvery = intOption("big-every", 20)
    let big = intOption("big", 5_000)
    let maximumOperations = intOption("max-ops", 500)
    let textLength = intOption("text", 120)
    let maximumTransactions = intOption("max-txns", Int.max)
    let fileSizeLimit = intOption("file-size-limit", 0)
    let afterError = intOption("after-error", 0)

    let replica: Replica
    do {
        replica = try Replica.open(directory: directory, schema: Fixtures.chatSchema, configuration: configuration)
    } catch {
        emit(describe(error))
        exit(2)
    }
    var workload: ChatWorkload
    do {
        workload = try ChatWorkload(seed: seed, prefix: prefix, replica: replica)
    } catch {
        emit(describe(error))
        exit(2)
    }
    emit("READY \(replica.lastLocalSequence) \(replica.replicaID)")
    if fileSizeLimit > 0 {
        signal(SIGXFSZ, SIG_IGN)
        setFileSizeLimit(rlim_t(fileSizeLimit))
    }
    var committed = 0
    var remainingAfterError: Int? = nil
    while committed < maximumTransactions {
        if let remaining = remainingAfterError, remaining == 0 { break }
        var operations = workload.nextTransactionSize(bigEvery: bigEvery, big: big)
        if operations != big { operations = 1 + (operations - 1) % max(maximumOperations, 1) }
        emit("BEGIN \(replica.lastLocalSequence + 1) \(operations)")
        do {
            try replica.write { txn in try workload.run(operations, in: txn, textLength: textLength) }
            let sequence = replica.lastLocalSequence
            let digest = try ReplicaDigest.changeset(replica, at: sequence)
            emit("ACK \(sequence) \(ReplicaDigest.hex(digest))")
            committed += 1
            if let remaining = remainingAfterError { remainingAfterError = remaining - 1 }
        } catch {
            emit(describe(error))
            guard fileSizeLimit > 0, remainingAfterError == nil, afterError > 0 else { exit(3) }
            // "Free space": lift the limit, then keep writing on the same open replica. The failed transaction's
            // keys are not in the replica; learn the state again.
            setFileSizeLimit(rlim_t.max)
            remainingAfterError = afterError
            do {
                workload = try ChatWorkload(seed: seed &+ 1, prefix: prefix + "r", replica: replica)
            } catch {
                emit(describe(error))
                exit(3)
            }
        }
    }
    emit("DONE \(replica.lastLocalSequence)")
    exit(0)

case "compact":
    do {
        let replica = try Replica.open(directory: directory)
        emit("READY")
        let pause = intOption("pause-after-marker", 0)
        let outcome = try replica.compact(
            through: UInt64(intOption("through", 0)), recordsInMemory: intOption("records-in-memory", 64),
            afterMarking: {
                emit("MARKED")
                if pause > 0 { usleep(UInt32(pause * 1_000)) }
            })
        emit(outcome.map { "COMPACTED \($0.compaction.through) \($0.droppedEntries)" } ?? "NOTHING")
        replica.close()
        exit(0)
    } catch {
        emit(describe(error))
        exit(2)
    }

case "hold-snapshot":
    do {
        let environment = try Environment.open(path: directory)
        let snapshot = try environment.snapshot()
        emit("READY \(environment.statistics.readersUsed)")
        while true {
            sleep(1)
            withExtendedLifetime(snapshot) {}
        }
    } catch {
        emit(describe(error))
        exit(2)
    }

case "grow-map":
    guard let bytes = positional.first.flatMap(Int.init) else { fail("grow-map needs a byte count") }
    do {
        var configuration = Environment.Configuration()
        configuration.initialMapSize = 1 << 20
        let environment = try Environment.open(path: directory, configuration: configuration)
        let ballast = try environment.openDatabases(["ballast"])[0]
        var random = SplitMix64(seed: 7)
        let chunk = 64 << 10
        var written = 0
        var key = 0
        while written < bytes {
            // One transaction per 1 MiB, so the map grows in steps while the ballast is written.
            try environment.write { txn in
                for _ in 0..<16 {
                    key += 1
                    let value = (0..<(chunk / 8)).flatMap { _ in withUnsafeBytes(of: random.next()) { Array($0) } }
                    try txn.put(ballast, key: Array("b\(key)".utf8), value: value)
                }
            }
            written += 16 * chunk
        }
        try environment.write { txn in try txn.removeAll(ballast) }
        let statistics = environment.statistics
        emit("GREW \(statistics.mapSize) \(statistics.usedBytes)")
        exit(0)
    } catch {
        emit(describe(error))
        exit(2)
    }

case "inspect":
    var configuration = Replica.Configuration()
    configuration.readOnly = true
    do {
        let replica = try Replica.open(directory: directory, configuration: configuration)
        emit("OPENED \(replica.lastLocalSequence)")
        let report = try replica.verify()
        emit(report.passed ? "VERIFY passed" : "VERIFY failed \(report.firstProblem ?? "")")
        let objects = try ReplicaDigest.objects(replica)
        let log = try ReplicaDigest.log(replica)
        emit(
            "STATE \(ReplicaDigest.hex(objects)) \(ReplicaDigest.hex(log)) \(replica.replicaID) \(replica.lastLocalSequence)"
        )
        exit(0)
    } catch {
        emit(describe(error))
        exit(2)
    }

case "subscribe":
    guard let port = options["port"].flatMap(Int.init) else { fail("subscribe needs --port N") }
    let query = options["where"] ?? "TRUEPREDICATE"
    do {
        let replica = try Replica.open(directory: directory, schema: Fixtures.taskSchema)
        if try replica.subscriptions.latest.version == 0 {
            try replica.subscriptions.commit { $0.append("Task", where: query, name: "tasks") }
        }
        let set = try replica.subscriptions.latest
        emit("READY \(set.version) \(set.state) \(try replica.read { try $0.count("Task") })")
        var configuration = SyncConfiguration()
        configuration.backoff = ReconnectBackoff(initial: .milliseconds(50), maximum: .milliseconds(500))
        let session = replica.connect(to: SyncEndpoint(host: "127.0.0.1", port: port), configuration: configuration)
        let progress = session.bootstrapProgress()
        let follower = Task {
            for await step in progress { emit("PROGRESS \(step.transferred) \(step.transferable)") }
        }
        try await replica.subscriptions.waitForSync()
        emit("COMPLETE \(try replica.read { try $0.count("Task") })")
        follower.cancel()
        await session.close()
        replica.close()
        exit(0)
    } catch {
        emit(describe(error))
        exit(2)
    }

case "reset":
    guard let port = options["port"].flatMap(Int.init) else { fail("reset needs --port N") }
    let pause = options["pause-ms"].flatMap(Int.init) ?? 0
    do {
        let replica = try Replica.open(directory: directory, schema: Fixtures.taskSchema)
        var configuration = SyncConfiguration()
        configuration.backoff = ReconnectBackoff(initial: .milliseconds(50), maximum: .milliseconds(500))
        configuration.clientReset = ClientReset(
            mode: .recoverUnsyncedChanges,
            beforeReset: { _ in
                emit("BEFORE")
                usleep(UInt32(pause * 1000))
            },
            afterReset: { _, _ in
                emit("AFTER")
                usleep(UInt32(pause * 1000))
            })
        let session = replica.connect(to: SyncEndpoint(host: "127.0.0.1", port: port), configuration: configuration)
        for await state in session.states() {
            if case .active = state, let report = session.clientResets.first {
                emit("RESET \(report.unsyncedChangesets)")
                break
            }
            if case .disconnected(let error?) = state, error.action != .retry { throw error }
        }
        try await session.waitForUpload()
        emit("SYNCED \(try session.replica.read { try $0.count("Task") })")
        await session.close()
        session.replica.close()
        exit(0)
    } catch let error as SyncError {
        emit("ERROR \(error.code) \(error.message)")
        exit(2)
    } catch {
        emit(describe(error))
        exit(2)
    }

default:
    fail("unknown mode \(mode)")
}
