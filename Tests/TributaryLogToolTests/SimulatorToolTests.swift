import Foundation
import Testing

/// `tributary-sim` as a user runs it: the long convergence runs come from this tool.
@Suite("tributary-sim")
struct SimulatorToolTests {
    @Test("--jobs splits the seeds among processes: every seed runs once, and the sum is printed")
    func jobsRunEverySeedOnce() throws {
        let sim = try #require(
            BuiltTool.path("tributary-sim"), "the built tributary-sim was not found next to the test binary")
        let run = try runTool(
            ["--seeds", "5-11", "--operations", "60", "--replicas", "3", "--jobs", "3"], executable: sim)
        #expect(run.status == 0, "\(run)")
        let seeds = run.lines.compactMap { line -> Int? in
            guard line.hasPrefix("seed "), line.contains(": ok ") else { return nil }
            return Int(line.dropFirst(5).prefix { $0.isNumber })
        }
        #expect(seeds.sorted() == Array(5...11), "\(run)")
        #expect(run.lines.last?.hasPrefix("7/7 seeds passed in ") == true, "\(run)")
        #expect(run.lines.last?.hasSuffix("with 3 processes") == true, "\(run)")
    }

    @Test("A bad --jobs is a usage error that names the option")
    func badJobs() throws {
        let sim = try #require(BuiltTool.path("tributary-sim"))
        let run = try runTool(["--seeds", "1-2", "--jobs", "0"], executable: sim)
        #expect(run.status == 64)
        #expect(run.stderr.contains("--jobs must be 1 to 64, got 0."), "\(run)")
    }

    @Test("--app-peer-link runs with --jobs, and is refused where no full replica but the relays is left")
    func appPeerLink() throws {
        let sim = try #require(BuiltTool.path("tributary-sim"))
        let run = try runTool(
            ["--seeds", "1-2", "--operations", "60", "--app-peer-link", "--jobs", "2"], executable: sim)
        #expect(run.status == 0, "\(run)")
        #expect(run.lines.last?.hasPrefix("2/2 seeds passed in ") == true, "\(run)")
        let refused = try runTool(["--seeds", "1", "--replicas", "4", "--app-peer-link"], executable: sim)
        #expect(refused.status == 64)
        #expect(refused.stderr.contains("--app-peer-link needs an app and three full replicas"), "\(refused)")
    }
}
