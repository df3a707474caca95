import ArgumentParser
import Foundation
import Tributary

struct Verify: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check every log entry, then rebuild the views from the log and compare them.",
        discussion: """
            Checks each log entry's checksum and its chain to the entry before, replays the log into fresh views in \
            a scratch directory (removed afterwards) and compares them, record by record and index entry by index \
            entry, with the replica's views, all on one snapshot: it runs alongside a writer. Memory stays bounded \
            however long the log is; --in-memory replays in memory instead (faster on small replicas, memory grows \
            with the number of objects).

            Prints `verified: ...` and exits 0, or `FAILED: <the first problem> (...)` and exits 1, the problem \
            naming the damaged entry ("checksum mismatch in log entry 812 ...") or the differing object. Progress \
            shows on stderr when it is a terminal. With --json: {"passed", "changesetsChecked", "objectsCompared", \
            "indexEntriesCompared", "firstProblem"}.

            \(ExitStatus.help)
            """)

    @OptionGroup var replica: ReplicaOptions

    @Option(
        help: "Rebuild in this directory (default: a new one in the temporary directory; must be empty).",
        completion: .directory)
    var scratch: String?

    @Flag(help: "Replay in memory instead of a scratch directory.")
    var inMemory = false

    @OptionGroup var output: OutputOptions

    func run() throws {
        var passed = true
        try reportingFailures {
            var checked = 0
            var objects = 0
            var indexEntries = 0
            var problem: String?
            do {
                let report = try verify()
                (checked, objects, indexEntries, problem) =
                    (report.changesetsChecked, report.objectsCompared, report.indexEntriesCompared, report.firstProblem)
            } catch let error as TributaryError where error.code == .corrupted {
                // Damage found while opening (the last entry is read then): a failed verification, not a crash.
                problem = error.message
            }
            passed = problem == nil
            if output.json {
                emit(
                    JSON.object([
                        ("passed", .bool(passed)), ("changesetsChecked", .int(Int64(checked))),
                        ("objectsCompared", .int(Int64(objects))), ("indexEntriesCompared", .int(Int64(indexEntries))),
                        ("firstProblem", problem.map(JSON.string) ?? .null),
                    ]).rendered)
            } else {
                let figures = "\(checked) changesets, \(objects) objects, \(indexEntries) index entries"
                emit(
                    oneLine(
                        problem.map { "FAILED: \($0) (\(figures))" }
                            ?? "verified: \(figures); the views equal a replay of the log"))
            }
        }
        if !passed { throw ExitCode(ExitStatus.differences) }
    }

    private func verify() throws -> VerificationReport {
        let opened = try replica.open()
        defer { opened.close() }
        let progress = ProgressLine("verifying", streamsRows: false)
        defer { progress.finish() }
        // Called after every 1,024 changesets replayed and 4,096 records compared.
        let trimmer = MappedPageTrimmer(every: 16)
        if inMemory {
            return try opened.verify(recordsInMemory: .max) { progress.update($0, of: $1) }
        }
        let directory: String
        var created = false
        if let scratch {
            directory = scratch
        } else {
            directory = (NSTemporaryDirectory() as NSString).appendingPathComponent(
                "tributary-log-verify-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8))")
            created = true
        }
        defer {
            if created {
                try? FileManager.default.removeItem(atPath: directory)
            } else {
                for name in ["data.mdb", "lock.mdb"] {
                    try? FileManager.default.removeItem(atPath: (directory as NSString).appendingPathComponent(name))
                }
            }
        }
        return try opened.inspection.verify(rebuildingIn: directory) {
            progress.update($0, of: $1)
            trimmer.tick()
        }
    }
}
