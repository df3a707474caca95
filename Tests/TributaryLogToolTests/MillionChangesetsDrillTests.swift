import Foundation
import Testing
import Tributary
import TributaryModel
import TributaryTestSupport
import TributaryTestTags

#if canImport(Glibc)
    import Glibc
#endif

/// `list`, `export` and `verify` on a log of 1,000,000 changesets run in bounded memory. Deep only
/// (`TRIBUTARY_DEEP=1`): building the log takes minutes in a debug build.
///
/// - `TRIBUTARY_LOG_CHANGESETS`: the log's length (default 1,000,000).
/// - `TRIBUTARY_LOG_MILLION_DIR`: build the replica there and keep it; reuse it when it is already there.
/// - `TRIBUTARY_LOG_TOOL`: the tool to measure (for example a release build).
///
/// Each changeset creates one object, so the replica ends with as many objects as changesets: memory that grew with
/// the log or with the objects would show. Peak memory is reported as the kernel counts it (`/usr/bin/time -v`,
/// which includes the pages of the memory-mapped data file the command read) and split, by sampling
/// `/proc/<pid>/status`, into anonymous memory (the heap: what "bounded" is about) and file-backed pages (the data
/// file's pages in the page cache, which the kernel reclaims at will).
@Suite("tributary-log on a million changesets", .enabled(if: Deep.enabled), .serialized, .tags(.drill, .slow))
struct MillionChangesetsDrillTests {
    static var changesets: Int {
        ProcessInfo.processInfo.environment["TRIBUTARY_LOG_CHANGESETS"].flatMap(Int.init) ?? 1_000_000
    }

    @Test func listExportAndVerifyRunInBoundedMemory() throws {
        let count = Self.changesets
        let kept = ProcessInfo.processInfo.environment["TRIBUTARY_LOG_MILLION_DIR"]
        let temporary = TemporaryDirectory("million")
        let path = kept ?? temporary.appending("replica")
        let start = Date()
        try Self.build(path, changesets: count)
        print("[million] \(path): \(count) changesets ready in \(Int(Date().timeIntervalSince(start))) s")

        for (name, arguments) in [
            ("list", ["list", path]), ("list --json", ["list", path, "--json"]), ("export", ["export", path]),
            ("verify", ["verify", path]),
        ] {
            let measurement = try measure(arguments)
            print("[million] \(name): \(measurement)")
            #expect(measurement.status == 0, "\(name) failed: \(measurement.stderr)")
            let expectedLines = ["list": count + 1, "list --json": count, "export": count, "verify": 1][name]
            #expect(measurement.stdoutLines == expectedLines, "\(name)")
            // Bounded: the heap stays far below what holding the log (or its objects) would take.
            #expect(measurement.peakAnonymousKB < 128 * 1024, "\(name) heap grew to \(measurement.peakAnonymousKB) kB")
        }
    }

    /// Builds (or reuses) a replica of `changesets` changesets: one schema changeset, then changesets from another
    /// replica, each creating one `Event`, integrated 10,000 at a time.
    static func build(_ path: String, changesets: Int) throws {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let schema = Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: "Event",
                    properties: [.scalar("_id", .int), .scalar("kind", .string), .scalar("payload", .string)])
            ])
        let replica = try Replica.open(directory: path, schema: schema, configuration: configuration)
        defer { replica.close() }
        let origin = ReplicaID(rawValue: 0xFEED)
        var next = replica.versionVector[origin] + 1
        let last = UInt64(changesets - 1)  // the schema changeset is the first
        let kinds = ["click", "view", "scroll", "purchase"]
        while next <= last {
            let end = min(last, next + 9_999)
            let batch = (next...end).map { sequence in
                Changeset(
                    origin: origin, originSequence: sequence,
                    time: HybridTime(milliseconds: 1_700_000_000_000 + sequence),
                    context: VersionVector([(origin, sequence - 1)]),
                    author: "loader", schemaVersion: 1,
                    instructions: [
                        .create(
                            type: "Event", primaryKey: .int(Int64(sequence)),
                            fields: [
                                FieldValue("kind", .string(kinds[Int(sequence % 4)])),
                                FieldValue("payload", .string("event \(sequence) of the million")),
                            ], defaults: [])
                    ])
            }
            let report = try replica.integrate(batch)
            try #require(report.integrated.count == batch.count, "\(report)")
            next = end + 1
        }
    }
}

struct Measurement: CustomStringConvertible {
    var status: Int32
    var seconds: Double
    /// Peak resident set (kB), as `/usr/bin/time -v` reports it.
    var maximumResidentKB: Int
    /// Peak anonymous resident memory (kB), sampled.
    var peakAnonymousKB: Int
    /// Peak file-backed resident memory (kB), sampled.
    var peakFileKB: Int
    var stdoutLines: Int
    var stderr: String

    var description: String {
        "exit \(status), \(String(format: "%.1f", seconds)) s, peak RSS \(maximumResidentKB / 1024) MiB "
            + "(sampled: anonymous \(peakAnonymousKB / 1024) MiB, file-backed \(peakFileKB / 1024) MiB), "
            + "\(stdoutLines) lines"
    }
}

/// Runs the tool under `/usr/bin/time -v` (when there), counting its output lines and sampling its memory.
func measure(_ arguments: [String]) throws -> Measurement {
    let tool = try #require(BuiltTool.log)
    let scratch = TemporaryDirectory("measure")
    let timePath = scratch.appending("time")
    let errPath = scratch.appending("stderr")
    _ = FileManager.default.createFile(atPath: errPath, contents: nil)
    let useTime = FileManager.default.isExecutableFile(atPath: "/usr/bin/time")
    let process = Process()
    if useTime {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/time")
        process.arguments = ["-v", "-o", timePath, tool] + arguments
    } else {
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
    }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errPath))
    let started = Date()
    try process.run()

    // Count lines on a thread of its own, so the child never blocks on a full pipe.
    let lines = LineCounter()
    let reader = Thread {
        let handle = pipe.fileHandleForReading
        while true {
            let data = handle.availableData
            if data.isEmpty { break }
            lines.add(data.reduce(0) { $1 == 0x0A ? $0 + 1 : $0 })
        }
        lines.finish()
    }
    reader.start()

    var peakAnonymous = 0
    var peakFile = 0
    while process.isRunning {
        // /usr/bin/time's child is the tool.
        let pid = useTime ? childPID(of: process.processIdentifier) : process.processIdentifier
        if let pid, let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) {
            for line in status.split(separator: "\n") {
                let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard parts.count >= 2, let value = Int(parts[1]) else { continue }
                if parts[0] == "RssAnon:" { peakAnonymous = max(peakAnonymous, value) }
                if parts[0] == "RssFile:" { peakFile = max(peakFile, value) }
            }
        }
        usleep(20_000)
    }
    process.waitUntilExit()
    lines.wait()
    let seconds = Date().timeIntervalSince(started)
    var maximum = 0
    var status = process.terminationStatus
    if useTime, let report = try? String(contentsOfFile: timePath, encoding: .utf8) {
        for line in report.split(separator: "\n") {
            let text = line.trimmingCharacters(in: .whitespaces)
            if text.hasPrefix("Maximum resident set size (kbytes):") {
                maximum = Int(text.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
            }
            if text.hasPrefix("Exit status:") {
                status = Int32(text.split(separator: ":").last?.trimmingCharacters(in: .whitespaces) ?? "") ?? status
            }
        }
    }
    return Measurement(
        status: status, seconds: seconds, maximumResidentKB: maximum, peakAnonymousKB: peakAnonymous,
        peakFileKB: peakFile, stdoutLines: lines.count,
        stderr: (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "")
}

/// The first child of `pid`, from `/proc/<pid>/task/<pid>/children`.
private func childPID(of pid: Int32) -> Int32? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8) else {
        return nil
    }
    return text.split(separator: " ").first.flatMap { Int32($0) }
}

/// A line count filled by a reader thread.
private final class LineCounter: @unchecked Sendable {
    // Guarded by `condition`.
    private var total = 0
    private var done = false
    private let condition = NSCondition()

    func add(_ lines: Int) {
        condition.lock()
        total += lines
        condition.unlock()
    }

    func finish() {
        condition.lock()
        done = true
        condition.broadcast()
        condition.unlock()
    }

    func wait() {
        condition.lock()
        while !done { condition.wait() }
        condition.unlock()
    }

    var count: Int {
        condition.lock()
        defer { condition.unlock() }
        return total
    }
}
