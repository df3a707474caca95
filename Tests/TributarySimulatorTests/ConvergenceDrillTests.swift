import Foundation
import Testing
import TributaryModel
import TributarySimulator
import TributaryTestSupport
import TributaryTestTags

/// Convergence under faults: simulator seeds match the oracle and the reference model, and every replica's views
/// equal a replay of its log, in their bounded CI versions. The long versions: `tributary-sim --seeds 1-10000`.
@Suite("Convergence under faults: simulator seeds", .tags(.drill, .slow))
struct ConvergenceDrillTests {
    static var deep: Bool { ProcessInfo.processInfo.environment["TRIBUTARY_DEEP"] == "1" }

    @Test("300 simulator seeds converge, verify, and match the oracle and the reference model")
    func simulatorSeedsConverge() async throws {
        try await Self.runSeeds(count: Self.deep ? 2000 : 300) { configuration in
            configuration.replicas = 3 + Int(configuration.seed % 3)  // apps: one with 3 replicas, two with 4 or 5
        }
    }

    @Test("With an app that also syncs directly with a peer: 60 simulator seeds of 5 replicas converge")
    func simulatorSeedsConvergeWithAppPeerLink() async throws {
        try await Self.runSeeds(count: Self.deep ? 400 : 60) { configuration in
            configuration.replicas = 5
            configuration.appPeerLink = true
        }
    }

    /// Runs `count` seeds from the environment's first seed (1 by default), each configured by `configure`, and
    /// records every failure with its replay command.
    static func runSeeds(count: UInt64, _ configure: @escaping @Sendable (inout SimulationConfiguration) -> Void)
        async throws
    {
        try await offThePool {
            let directory = TemporaryDirectory("sim")
            let first = SplitMix64.seedFromEnvironment(default: 1)
            var failures: [String] = []
            for seed in first..<(first + count) {
                var configuration = SimulationConfiguration(seed: seed, directory: directory.path)
                configuration.operations = Self.deep ? 3000 : 120
                configuration.oracleOrders = 2
                configure(&configuration)
                let replay =
                    "swift run tributary-sim --seeds \(seed) --replicas \(configuration.replicas) "
                    + "--operations \(configuration.operations) --oracle-orders \(configuration.oracleOrders)"
                    + (configuration.appPeerLink ? " --app-peer-link" : "")
                do {
                    let result = try Simulation(configuration).run()
                    if !result.passed {
                        failures.append(
                            "seed \(seed): \(result.failures.prefix(3).joined(separator: "; ")) (replay: \(replay))")
                    }
                } catch {
                    failures.append("seed \(seed) threw: \(error) (replay: \(replay))")
                }
            }
            #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
        }
    }
}
