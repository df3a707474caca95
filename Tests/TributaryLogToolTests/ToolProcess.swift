import Foundation
import Testing
import Tributary
import TributaryModel
import TributaryTestSupport

// Running the built `tributary-log` as a subprocess, and the replicas the tests run it on.

/// Where the built tools are: `swift test` puts every product of the package next to the test binary, so the
/// directory of `CommandLine.arguments[0]` holds them on Linux (on macOS the binary sits inside
/// `X.xctest/Contents/MacOS/`, three levels further down). `TRIBUTARY_LOG_TOOL` overrides the tool's path.
enum BuiltTool {
    static func path(_ name: String) -> String? {
        if name == "tributary-log", let explicit = ProcessInfo.processInfo.environment["TRIBUTARY_LOG_TOOL"] {
            return explicit
        }
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var candidates = [binary.deletingLastPathComponent()]
        candidates.append(
            binary.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent())
        candidates.append(Bundle.main.bundleURL.deletingLastPathComponent())
        for directory in candidates {
            let candidate = directory.appendingPathComponent(name).path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    static let log = path("tributary-log")
}

/// What one run of the tool printed, and how it ended.
struct ToolRun: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String

    var lines: [String] { stdout.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init) }

    var description: String { "exit status \(status)\n--- stdout\n\(stdout)--- stderr\n\(stderr)" }
}

/// Runs `tributary-log` with `arguments` and waits for it. Output goes through files, so a long output never
/// blocks the child on a full pipe. `COLUMNS` is fixed so that help text wraps the same everywhere.
func runTool(_ arguments: [String], executable: String? = BuiltTool.log) throws -> ToolRun {
    let executable = try #require(executable, "the built tributary-log was not found next to the test binary")
    let scratch = TemporaryDirectory("tool-run")
    let outPath = scratch.appending("stdout")
    let errPath = scratch.appending("stderr")
    _ = FileManager.default.createFile(atPath: outPath, contents: nil)
    _ = FileManager.default.createFile(atPath: errPath, contents: nil)
    let out = try FileHandle(forWritingTo: URL(fileURLWithPath: outPath))
    let err = try FileHandle(forWritingTo: URL(fileURLWithPath: errPath))
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    var environment = ProcessInfo.processInfo.environment
    environment["COLUMNS"] = "100"
    process.environment = environment
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    process.waitUntilExit()
    try out.close()
    try err.close()
    return ToolRun(
        status: process.terminationStatus,
        stdout: try String(contentsOfFile: outPath, encoding: .utf8),
        stderr: try String(contentsOfFile: errPath, encoding: .utf8))
}

// MARK: Fixtures

/// A small chat replica with a known history, built with a manual clock and fixed replica ids so that every output
/// is the same on every run:
///
///     1  a1:1  schema (add type ×4, set schema version 1)                       alice
///     2  a1:2  create User u1 (Ada, 36, [math]), create User u2 (Alan)           alice
///     3  a1:3  set u1.age = 37, append "poetry" to u1.tags, add 5 to u1.karma    alice
///     4  a1:4  create ChatMessage m1 (text with a line break, sender -> u2)      alice
///     5  b2:1  schema, from replica b2                                           bob
///     6  b2:2  create User u3 (Grace, address in Arlington)                      bob
///     7  a1:5  erase m1, set u1.address = {city: London}                         alice
final class ChatFixture: Sendable {
    static let replicaA = ReplicaID(rawValue: 0xA1)
    static let replicaB = ReplicaID(rawValue: 0xB2)

    let directory = TemporaryDirectory("tributary-log")
    var path: String { directory.appending("chat") }
    /// The storage file's used size, as the tool reports it.
    let storageUsedBytes: Int
    /// The log entries' headers, read back with the library: the tests take stored sizes from here, so that a change
    /// to the changeset encoding or the compression level does not change what they check.
    let entries: [LogEntrySummary]
    let summary: ReplicaSummary

    /// The BYTES column of `list` for entry `localSequence`: the stored size, right-aligned in 9.
    func bytesColumn(_ localSequence: Int) -> String {
        let text = String(entries[localSequence - 1].storedBytes)
        return String(repeating: " ", count: max(0, 9 - text.count)) + text
    }

    /// The size keys of an entry's JSON object.
    func sizesJSON(_ localSequence: Int) -> String {
        let entry = entries[localSequence - 1]
        return #""storedBytes":\#(entry.storedBytes),"uncompressedBytes":\#(entry.uncompressedBytes),"#
            + #""compressed":\#(entry.isCompressed)"#
    }

    /// The `stored` line of `show`.
    func storedDescription(_ localSequence: Int) -> String {
        let entry = entries[localSequence - 1]
        return "\(entry.storedBytes) bytes (changeset \(entry.uncompressedBytes) bytes, "
            + (entry.isCompressed ? "compressed)" : "not compressed)")
    }

    /// The compression ratio as `info --json` writes it: rounded to hundredths.
    var ratioJSON: String {
        let ratio = (summary.log.compressionRatio * 100).rounded() / 100
        return ratio == ratio.rounded() ? String(format: "%.1f", ratio) : "\(ratio)"
    }

    init() throws {
        let clock = ManualClock()
        func configuration(_ id: ReplicaID, author: String) -> Replica.Configuration {
            var configuration = Replica.Configuration()
            configuration.durability = .none
            configuration.clock = clock
            configuration.replicaID = id
            configuration.author = author
            return configuration
        }
        let a = try Replica.open(
            directory: directory.appending("chat"), schema: Fixtures.chatSchema,
            configuration: configuration(Self.replicaA, author: "alice"))
        clock.advance(byMilliseconds: 1_000)
        _ = try a.write { txn in
            try txn.create("User", ["_id": "u1", "name": "Ada", "age": 36, "tags": ["math"]])
            try txn.create("User", ["_id": "u2", "name": "Alan"])
        }
        clock.advance(byMilliseconds: 1_000)
        _ = try a.write { txn in
            try txn.set(37, at: ["age"], of: "User", primaryKey: .string("u1"))
            try txn.append("poetry", to: ["tags"], of: "User", primaryKey: .string("u1"))
            try txn.increment(["karma"], of: "User", primaryKey: .string("u1"), by: 5)
        }
        clock.advance(byMilliseconds: 1_000)
        _ = try a.write { txn in
            try txn.create(
                "ChatMessage",
                [
                    "_id": "m1", "author": "u1", "text": "Hello\nworld", "conversationID": "c1",
                    "timestamp": .date(Date(timeIntervalSince1970: 1_700_000_100)), "sender": .link(.string("u2")),
                ])
        }
        let b = try Replica.open(
            directory: directory.appending("other"), schema: Fixtures.chatSchema,
            configuration: configuration(Self.replicaB, author: "bob"))
        clock.advance(byMilliseconds: 1_000)
        _ = try b.write { txn in
            try txn.create(
                "User",
                [
                    "_id": "u3", "name": "Grace",
                    "address": .embedded(EmbeddedObject(type: "Address", fields: ["city": "Arlington"])),
                ])
        }
        try a.integrate(try b.changesets(missingFrom: a.versionVector))
        clock.advance(byMilliseconds: 1_000)
        _ = try a.write { txn in
            _ = try txn.delete("ChatMessage", primaryKey: .string("m1"))
            try txn.set(
                .embedded(EmbeddedObject(type: "Address", fields: ["city": "London"])), at: ["address"], of: "User",
                primaryKey: .string("u1"))
        }
        storageUsedBytes = a.storageStatistics.usedBytes
        a.close()
        b.close()

        var readOnly = Replica.Configuration()
        readOnly.readOnly = true
        let reader = try Replica.open(directory: directory.appending("chat"), configuration: readOnly)
        defer { reader.close() }
        entries = try (1...7).map { try #require(try reader.logEntry(at: $0)) }
        summary = try reader.summary()
    }
}

/// A replica whose types have int, ObjectID and UUID primary keys.
final class KeyedFixture: Sendable {
    static let objectID = "65a1b2c3d4e5f60718293a4b"
    static let uuid = "E621E1F8-C36C-495A-93FC-0C247A3E6E5F"
    static let schema = Schema(
        version: 2,
        types: [
            ObjectSchema(name: "Counter", properties: [.scalar("_id", .int), .scalar("value", .int, default: 0)]),
            ObjectSchema(name: "Document", properties: [.scalar("_id", .objectId), .scalar("title", .string)]),
            ObjectSchema(
                name: "Token", properties: [.scalar("_id", .uuid), .scalar("data", .data), .scalar("score", .double)]),
        ])

    let directory = TemporaryDirectory("tributary-log-keys")
    var path: String { directory.appending("keyed") }

    init() throws {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.clock = ManualClock()
        configuration.replicaID = ReplicaID(rawValue: 0xC3)
        let replica = try Replica.open(directory: path, schema: Self.schema, configuration: configuration)
        defer { replica.close() }
        let id = try #require(ObjectID(hex: Self.objectID))
        let uuid = try #require(UUID(uuidString: Self.uuid))
        _ = try replica.write { txn in
            try txn.create("Counter", ["_id": 42, "value": 1])
            try txn.create("Counter", ["_id": 7])
            try txn.create("Document", ["_id": .objectId(id), "title": "Notes"])
            try txn.create("Token", ["_id": .uuid(uuid), "data": .data(Data([0xDE, 0xAD, 0xBE, 0xEF])), "score": 0.5])
        }
        _ = try replica.write { txn in
            try txn.increment(["value"], of: "Counter", primaryKey: .int(42), by: -3)
            try txn.set("Notes, revised", at: ["title"], of: "Document", primaryKey: .objectId(id))
        }
    }
}

/// `106,496`: a byte count as the tool prints it.
func thousands(_ value: Int) -> String {
    let digits = Array(String(value))
    var result = ""
    for (index, digit) in digits.enumerated() {
        if index > 0 && (digits.count - index) % 3 == 0 { result += "," }
        result.append(digit)
    }
    return result
}
