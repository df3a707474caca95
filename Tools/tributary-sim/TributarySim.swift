// tributary-sim: the convergence simulator. Runs seeds; prints the seed of any failure; replays one seed exactly.
import ArgumentParser
import Foundation
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
            object they hold, an oracle merging the same changesets in random causal orders agrees, and a reference
            model of the merge rules agrees. A seed replays exactly: `tributary-sim --seeds 42`.

            Exit status: 0 when every seed passed, 1 when one failed.
            """)

    @Option(help: "Seeds to run: one number, or a range like 1-10000.")
    var seeds = "1-100"

    @Option(help: "Replicas per run (3 to 7).")
    var replicas = 5

    @Option(help: "Write transactions per run.")
    var operations = 10_000

    @Option(help: "Partial replicas among them (they hold every other key and sync through replica 0).")
    var partialReplicas = 1

    @Option(help: "Random causal orders the oracle replays per seed.")
    var oracleOrders = 3

    @Option(help: "Directory for replica directories (default: /dev/shm if present, else the temporary directory).")
    var directory: String?

    func validate() throws {
        guard (3...7).contains(replicas) else { throw ValidationError("--replicas must be 3 to 7, got \(replicas).") }
        guard parsedSeeds != nil else { throw ValidationError("--seeds must be a number or a range like 1-10000, got '\(seeds)'.") }
        guard partialReplicas >= 0 && partialReplicas < replicas - 1 else {
            throw ValidationError("--partial-replicas must leave at least two full replicas.")
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
        let root = directory ?? (FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory())
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
            let result = try Simulation(configuration).run()
            let line = "seed \(seed): \(result.passed ? "ok" : "FAILED") \(result.operations) ops, \(result.changesets) changesets, "
                + "\(result.deliveries) deliveries, \(result.duplicates) duplicates, \(result.crashes) crashes, "
                + String(format: "%.2f s", result.seconds)
            print(line)
            if !result.passed {
                failed.append(seed)
                for failure in result.failures.prefix(20) { print("  \(failure)") }
                print("  replay: tributary-sim --seeds \(seed) --replicas \(replicas) --operations \(operations) --partial-replicas \(partialReplicas)")
            }
            fflush(nil)
        }
        let total = range.count
        print("\(total - failed.count)/\(total) seeds passed in \(String(format: "%.1f", Date().timeIntervalSince(started))) s"
            + (failed.isEmpty ? "" : "; failed: \(failed.map(String.init).joined(separator: ", "))"))
        if !failed.isEmpty { throw ExitCode.failure }
    }
}
