// tributary-sim: the convergence simulator. Runs seeds; prints the seed of any failure; replays one seed exactly.
import ArgumentParser
import Foundation
import Synchronization
import TributarySimulator

@main
struct TributarySim: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tributary-sim",
        abstract: "Simulate replicas writing concurrently through a faulty network, then check that they converge.",
        discussion: """
            Each seed runs N replicas (each on its own replica directory) that write a seeded random mix of every
            kind of write, while links go down and up, messages are delayed, duplicated and reordered, and replicas
            crash and restart. Then the network heals and the replicas exchange everything. A seed passes when all
            replicas hold byte-identical views, each one's verify passes, partial replicas equal the full ones on every
            object they hold, an oracle merging the same changesets in random causal orders agrees, a reference
            model of the merge rules agrees, and no replica has anything left to send another. With --app-peer-link,
            version vectors are compared without the linked app's entry, which replicas that held its changesets
            first as written count and the others do not. A seed replays exactly: `tributary-sim --seeds 42`.

            Exit status: 0 when every seed passed, 1 when one failed.
            """)

    @Option(help: "Seeds to run: one number, or a range like 1-10000.")
    var seeds = "1-100"

    @Option(help: "Replicas per run (3 to 7).")
    var replicas = 5

    @Option(help: "Write transactions per run.")
    var operations = 10_000

    @Option(
        help:
            "Partial replicas among them (apps that hold every other key and sync through replicas 0 and 1, their relays). Default: 2, or 1 with 3 replicas."
    )
    var partialReplicas: Int?

    @Flag(
        help:
            "The first app also syncs directly with replica 2, a full replica that is not a relay, as a peer (needs three full replicas and an app)."
    )
    var appPeerLink = false

    @Option(help: "Random causal orders the oracle replays per seed.")
    var oracleOrders = 3

    @Option(help: "Directory for replica directories (default: /dev/shm if present, else the temporary directory).")
    var directory: String?

    @Option(
        help:
            "Processes to run seeds in, each on its own share of the range (default 1; use the machine's cores for long runs)."
    )
    var jobs = 1

    func validate() throws {
        guard (3...7).contains(replicas) else { throw ValidationError("--replicas must be 3 to 7, got \(replicas).") }
        guard parsedSeeds != nil else {
            throw ValidationError("--seeds must be a number or a range like 1-10000, got '\(seeds)'.")
        }
        guard jobs >= 1 && jobs <= 64 else { throw ValidationError("--jobs must be 1 to 64, got \(jobs).") }
        if let partialReplicas, !(0...(replicas - 2)).contains(partialReplicas) {
            throw ValidationError(
                "--partial-replicas must be 0 to \(replicas - 2) with \(replicas) replicas: replicas 0 and 1 are full (the relays)."
            )
        }
        if appPeerLink {
            let partial = partialReplicas ?? min(2, replicas - 2)
            guard partial >= 1, replicas - partial >= 3 else {
                throw ValidationError(
                    "--app-peer-link needs an app and three full replicas (the relays 0 and 1, and replica 2); "
                        + "\(replicas) replicas with \(partial) partial have \(replicas - partial) full.")
            }
        }
    }

    var parsedSeeds: ClosedRange<UInt64>? {
        let parts = seeds.split(separator: "-")
        if parts.count == 1, let seed = UInt64(parts[0]) { return seed...seed }
        if parts.count == 2, let low = UInt64(parts[0]), let high = UInt64(parts[1]), low <= high { return low...high }
        return nil
    }

    func run() throws {
        let range = parsedSeeds!
        if jobs > 1 && range.count > 1 { return try runInProcesses(range) }
        let root =
            directory ?? (FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory())
        let scratch = (root as NSString).appendingPathComponent("tributary-sim-\(getpid())")
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        var failed: [UInt64] = []
        let started = Date()
        for seed in range {
            var configuration = SimulationConfiguration(seed: seed, directory: scratch)
            configuration.replicas = replicas
            configuration.operations = operations
            configuration.partialReplicas = partialReplicas
            configuration.oracleOrders = oracleOrders
            configuration.appPeerLink = appPeerLink
            let result: SimulationResult
            do {
                result = try Simulation(configuration).run()
            } catch {
                // An error the simulation did not expect (an integration or a write that threw) fails this seed, by
                // name; the run goes on.
                result = SimulationResult(seed: seed, failures: ["threw: \(error)"])
            }
            let line =
                "seed \(seed): \(result.passed ? "ok" : "FAILED") \(result.operations) ops, \(result.changesets) changesets, "
                + "\(result.deliveries) deliveries, \(result.duplicates) duplicates, \(result.crashes) crashes, "
                + "\(result.adoptedTwice) adopted by both relays, \(result.compactions) compactions, "
                + String(format: "%.2f s", result.seconds)
            print(line)
            if !result.passed {
                failed.append(seed)
                for failure in result.failures.prefix(20) { print("  \(failure)") }
                print(
                    "  replay: tributary-sim --seeds \(seed) --replicas \(replicas) --operations \(operations) "
                        + "--partial-replicas \(configuration.partialCount) --oracle-orders \(oracleOrders)"
                        + (appPeerLink ? " --app-peer-link" : ""))
            }
            fflush(nil)
        }
        let total = range.count
        print(
            "\(total - failed.count)/\(total) seeds passed in \(String(format: "%.1f", Date().timeIntervalSince(started))) s"
                + (failed.isEmpty ? "" : "; failed: \(failed.map(String.init).joined(separator: ", "))"))
        if !failed.isEmpty { throw ExitCode.failure }
    }

    /// Splits the seeds into `jobs` contiguous shares, runs each in a child process of this tool, passes their lines
    /// through as they come, and sums up.
    func runInProcesses(_ range: ClosedRange<UInt64>) throws {
        let started = Date()
        let count = UInt64(min(jobs, range.count))
        let share = UInt64(range.count) / count
        // Per child, the start of a line not ended yet; the failed seeds and the count of passed ones.
        let output = Mutex<(partial: [String], failed: [UInt64], passed: Int)>(
            (Array(repeating: "", count: Int(count)), [], 0))
        var children: [Process] = []
        let readers = DispatchGroup()
        for index in 0..<count {
            let low = range.lowerBound + index * share
            let high = index == count - 1 ? range.upperBound : low + share - 1
            let child = Process()
            child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
            if !FileManager.default.isExecutableFile(atPath: child.executableURL!.path) {
                child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            }
            child.arguments =
                ["--seeds", "\(low)-\(high)", "--replicas", "\(replicas)", "--operations", "\(operations)"]
                + (partialReplicas.map { ["--partial-replicas", "\($0)"] } ?? [])
                + ["--oracle-orders", "\(oracleOrders)"]
                + (appPeerLink ? ["--app-peer-link"] : [])
                + (directory.map { ["--directory", $0] } ?? [])
            let pipe = Pipe()
            child.standardOutput = pipe
            let slot = Int(index)
            // One reader per child, until its output ends, so that no line is lost or cut at the end.
            readers.enter()
            Thread {
                defer { readers.leave() }
                while true {
                    let data = pipe.fileHandleForReading.availableData
                    if data.isEmpty { return }
                    output.withLock { state in
                        state.partial[slot] += String(decoding: data, as: UTF8.self)
                        while let newline = state.partial[slot].firstIndex(of: "\n") {
                            let line = String(state.partial[slot][..<newline])
                            state.partial[slot].removeSubrange(...newline)
                            // A child's own summary line is replaced by the sum below.
                            if line.contains(" seeds passed in ") { continue }
                            if line.hasPrefix("seed "), let seed = UInt64(line.dropFirst(5).prefix { $0.isNumber }) {
                                if line.contains(": FAILED") { state.failed.append(seed) } else { state.passed += 1 }
                            }
                            print(line)
                            fflush(nil)
                        }
                    }
                }
            }.start()
            try child.run()
            children.append(child)
        }
        for child in children { child.waitUntilExit() }
        readers.wait()
        let (_, failed, passed) = output.withLock { $0 }
        let crashed = children.filter {
            $0.terminationReason != .exit || ($0.terminationStatus != 0 && $0.terminationStatus != 1)
        }
        let total = range.count
        print(
            "\(passed)/\(total) seeds passed in \(String(format: "%.1f", Date().timeIntervalSince(started))) s with \(count) processes"
                + (failed.isEmpty ? "" : "; failed: \(failed.sorted().map(String.init).joined(separator: ", "))")
                + (crashed.isEmpty ? "" : "; \(crashed.count) process(es) ended abnormally"))
        if !failed.isEmpty || !crashed.isEmpty || passed != total { throw ExitCode.failure }
    }
}
