// tributary-bench: measures Tributary against baselines run in the same process on the same data, and prints one
// JSON object per line: {"name", "value", "unit", "baseline", "baseline_value", "ratio"}.
import ArgumentParser
import Foundation

@main
struct TributaryBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tributary-bench",
        abstract: "Measure Tributary against raw LMDB and raw zstd baselines, in the same run.",
        discussion: """
            Build in release mode: swift run -c release tributary-bench
            Each line is a JSON object; "ratio" is Tributary's figure divided by the baseline's, oriented so that
            higher is better (for sizes, baseline / Tributary).
            """)

    @Option(help: "Objects in the bulk insert (and in the store the reads and replay use).")
    var objects = 100_000

    @Option(help: "Durable single-object commits to time (each side).")
    var commits = 300

    @Option(help: "Primary-key reads to time (each side).")
    var reads = 200_000

    @Option(help: "Changesets in the export benchmark's log.")
    var exportChangesets = 1_000_000

    @Option(help: "Changesets in the compaction benchmark's log.")
    var compactionChangesets = 1_000_000

    @Option(help: "Elements in the long list fill (the short one has a tenth as many).")
    var listElements = 20_000

    @Option(help: "Only run benchmarks whose name contains this text.")
    var only: String?

    @Option(help: "Directory for the scratch replicas (default: a temporary directory).")
    var directory: String?

    func run() async throws {
        let root =
            directory ?? (NSTemporaryDirectory() as NSString).appendingPathComponent("tributary-bench-\(getpid())")
        try? FileManager.default.removeItem(atPath: root)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let context = BenchContext(
            root: root, objects: objects, commits: commits, reads: reads, exportChangesets: exportChangesets,
            compactionChangesets: compactionChangesets, listElements: listElements, only: only)
        try StorageBenchmarks(context: context).run()
        try SyncBenchmarks(context: context).run()
        try QueryBenchmarks(context: context).run()
        try ListBenchmarks(context: context).run()
        try CompactionBenchmarks(context: context).run()
        try await NetworkBenchmarks(context: context).run()
        try await FlexibleSessionBenchmarks(context: context).run()
        try await ClusterBenchmarks(context: context).run()
    }
}

struct BenchContext {
    let root: String
    let objects: Int
    let commits: Int
    let reads: Int
    let exportChangesets: Int
    let compactionChangesets: Int
    let listElements: Int
    let only: String?

    /// Whether to run the benchmarks of `group` (a prefix of their measurements' names): `--only` names part of the
    /// group, or the group and part of a measurement's name.
    func wants(_ group: String) -> Bool { only.map { group.contains($0) || $0.hasPrefix(group) } ?? true }

    func path(_ name: String) -> String { (root as NSString).appendingPathComponent(name) }
}

/// One line of the report.
struct Measurement: Encodable {
    var name: String
    var value: Double
    var unit: String
    var baseline: String
    // A key of the JSON report, as its readers know it.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var baseline_value: Double
    var ratio: Double

    init(
        name: String, value: Double, unit: String, baseline: String, baselineValue: Double, higherIsBetter: Bool = true
    ) {
        self.name = name
        self.value = (value * 1000).rounded() / 1000
        self.unit = unit
        self.baseline = baseline
        self.baseline_value = (baselineValue * 1000).rounded() / 1000
        let ratio = higherIsBetter ? value / baselineValue : baselineValue / value
        self.ratio = (ratio * 1000).rounded() / 1000
    }

    func print() {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        if let data = try? encoder.encode(self), let line = String(data: data, encoding: .utf8) {
            Swift.print(line)
            fflush(nil)
        }
    }
}

/// Seconds taken by `body`.
func time(_ body: () throws -> Void) rethrows -> Double {
    let start = DispatchTime.now().uptimeNanoseconds
    try body()
    return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
}
