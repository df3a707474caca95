import Foundation
import Testing
import Tributary
import TributaryModel
import TributaryTestSupport

// What the tool does with directories that are not replicas, replicas of a newer format, damaged log entries, and a
// replica another process is writing to.

@Suite("tributary-log on what is not a healthy replica")
struct NotAReplicaTests {
    @Test func missingEmptyFileAndGarbageDirectoriesExit66WithOneLine() throws {
        let directory = TemporaryDirectory("not-a-replica")
        let missing = directory.appending("missing")
        let empty = directory.appending("empty")
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let file = directory.appending("file")
        _ = FileManager.default.createFile(atPath: file, contents: Data("not a replica".utf8))
        let garbage = directory.appending("garbage")
        try FileManager.default.createDirectory(atPath: garbage, withIntermediateDirectories: true)
        var random = SplitMix64(seed: 6)
        let noise = (0..<65_536).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        _ = FileManager.default.createFile(atPath: garbage + "/data.mdb", contents: Data(noise))

        let expectations = [
            (missing, "Error: \(missing) does not exist or holds no replica"),
            (empty, "Error: \(empty) does not exist or holds no replica"),
            (
                file,
                "Error: \(file) is not a Tributary replica, or it is damaged: \(file) is not a directory; a replica is a "
                    + "directory holding data.mdb"
            ),
            (garbage, "Error: \(garbage) is not a Tributary replica, or it is damaged: "),
        ]
        for (path, message) in expectations {
            for subcommand in [["info"], ["list"], ["verify"], ["show", "1"], ["export"], ["objects", "User"]] {
                let run = try runTool([subcommand[0], path] + subcommand.dropFirst())
                #expect(run.status == 66, "\(subcommand) \(path): \(run)")
                #expect(run.stdout.isEmpty, "\(subcommand) \(path): \(run)")
                #expect(run.stderr.hasPrefix(message), "\(subcommand) \(path): \(run)")
                #expect(run.stderr.filter { $0 == "\n" }.count == 1, "one line: \(run)")
            }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: empty).isEmpty, "the tool creates nothing")
    }

    @Test func aNewerFormatExits66NamingBothFormats() throws {
        let fixture = try ChatFixture()
        // The identity record is the key "replicaFormat" followed by its one-byte value in an LMDB leaf node.
        let key = Array("replicaFormat".utf8)
        let patched = try patchDataFile(fixture.path, find: key + [Replica.formatVersion]) { bytes, offset in
            bytes[offset + key.count] = ReplicaFormat.newest + 1
        }
        #expect(patched > 0)
        for subcommand in [["info"], ["list"], ["verify"]] {
            let run = try runTool(subcommand + [fixture.path])
            #expect(run.status == 66, "\(run)")
            #expect(
                run.stderr
                    == "Error: \(fixture.path) was written in replica format \(ReplicaFormat.newest + 1) by a newer release "
                    + "of Tributary; this build reads formats up to \(ReplicaFormat.newest). Upgrade Tributary to open it\n"
            )
        }
    }
}

@Suite("tributary-log on a damaged log entry")
struct DamagedEntryTests {
    static let damage =
        "checksum mismatch in log entry 3 (origin 00000000000000a1, seq 3): the entry is damaged on disk"

    @Test func verifyAndShowNameTheEntry() throws {
        let fixture = try ChatFixture()
        #expect(try corrupt(entry: 3, in: fixture.path) > 0)

        let verify = try runTool(["verify", fixture.path])
        #expect(verify.status == 1, "\(verify)")
        #expect(verify.stdout == "FAILED: \(Self.damage) (2 changesets, 0 objects, 0 index entries)\n")
        #expect(verify.stderr.isEmpty)
        let inMemory = try runTool(["verify", fixture.path, "--in-memory", "--json"])
        #expect(inMemory.status == 1)
        #expect(
            inMemory.stdout
                == #"{"passed":false,"changesetsChecked":2,"objectsCompared":0,"indexEntriesCompared":0,"firstProblem":""#
                + Self.damage + "\"}\n")

        let show = try runTool(["show", fixture.path, "3"])
        #expect(show.status == 65, "\(show)")
        #expect(show.stdout.isEmpty)
        #expect(show.stderr == "Error: \(Self.damage)\n")

        // The entry after it is intact: show reads one entry and checks its own checksum.
        let next = try runTool(["show", fixture.path, "4"])
        #expect(next.status == 0, "\(next)")
    }

    @Test func streamsStopAtTheDamagedEntry() throws {
        let fixture = try ChatFixture()
        #expect(try corrupt(entry: 3, in: fixture.path) > 0)

        let list = try runTool(["list", fixture.path])
        #expect(list.status == 65, "\(list)")
        #expect(list.lines.map { $0.prefix(8).trimmingCharacters(in: .whitespaces) } == ["SEQ", "1", "2"])
        #expect(list.stderr == "Error: \(Self.damage)\n")

        let export = try runTool(["export", fixture.path])
        #expect(export.status == 65)
        #expect(export.lines.count == 2)

        for arguments in [["info"], ["history", "User", "u1"], ["diff", "2", "4"], ["replay", "--to", "3"]] {
            let run = try runTool([arguments[0], fixture.path] + arguments.dropFirst())
            #expect(run.status == 65, "\(arguments): \(run)")
            #expect(run.stderr == "Error: \(Self.damage)\n", "\(arguments)")
        }

        // What does not read the damaged entry still works.
        #expect(try runTool(["diff", fixture.path, "1", "2"]).status == 1)
        #expect(try runTool(["objects", fixture.path, "User"]).status == 0)
    }

    @Test func damageToTheLastEntryFailsVerifyInsteadOfOpening() throws {
        let fixture = try ChatFixture()
        #expect(try corrupt(entry: 7, in: fixture.path) > 0)
        let damage = "checksum mismatch in log entry 7 (origin 00000000000000a1, seq 5): the entry is damaged on disk"
        let verify = try runTool(["verify", fixture.path])
        #expect(verify.status == 1, "\(verify)")
        #expect(
            verify.stdout
                == "FAILED: opening replica \(fixture.path): \(damage) (0 changesets, 0 objects, 0 index entries)\n")
        let list = try runTool(["list", fixture.path])
        #expect(list.status == 65, "\(list)")
        #expect(list.stderr == "Error: opening replica \(fixture.path): \(damage)\n")
    }

    @Test func viewsThatDifferFromTheLogFailVerify() throws {
        let fixture = try ChatFixture()
        // Rename Ada to Adb in the index on User.name only (its keys are "User\0name\0", a tag, the value, the key):
        // the log and the records still say Ada.
        let prefix = Array("User".utf8) + [0] + Array("name".utf8) + [0]
        let patched = try patchDataFile(fixture.path, find: prefix) { bytes, offset in
            let window = offset + prefix.count..<min(bytes.count - 2, offset + prefix.count + 8)
            if let at = window.first(where: { bytes[$0...].starts(with: Array("Ada".utf8)) }) {
                bytes[at + 2] = UInt8(ascii: "b")
            }
        }
        #expect(patched > 0)
        let verify = try runTool(["verify", fixture.path])
        #expect(verify.status == 1, "\(verify)")
        #expect(
            verify.stdout
                == "FAILED: the index lacks an entry the log produces (User.name, 19 bytes) "
                + "(7 changesets, 4 objects, 0 index entries)\n")
        let inMemory = try runTool(["verify", fixture.path, "--in-memory"])
        #expect(inMemory.status == 1, "\(inMemory)")
        #expect(inMemory.stdout.hasPrefix("FAILED: the index "), "\(inMemory)")
    }

    /// Flips the last payload byte of every copy of log entry `localSequence` in the replica's data file (LMDB may
    /// keep older copies in free pages). The entry is found by its header, rebuilt from the public summary: format,
    /// flags, local sequence, origin, origin sequence, time, instruction count, uncompressed length (LogEntry.swift).
    func corrupt(entry localSequence: UInt64, in path: String) throws -> Int {
        let replica = try Replica.open(directory: path)
        let summary = try #require(try replica.logEntry(at: localSequence))
        replica.close()
        var header: [UInt8] = [1, summary.isCompressed ? 1 : 0]
        func append<T: FixedWidthInteger>(_ value: T) { withUnsafeBytes(of: value.littleEndian) { header += $0 } }
        append(summary.localSequence)
        append(summary.origin.rawValue)
        append(summary.originSequence)
        append(summary.time.rawValue)
        append(UInt32(summary.instructionCount))
        append(UInt32(summary.uncompressedBytes))
        return try patchDataFile(path, find: header) { bytes, offset in
            bytes[offset + summary.storedBytes - 1] ^= 0xFF
        }
    }
}

/// Applies `patch` at every offset of `data.mdb` where `pattern` starts; returns how many there were.
func patchDataFile(_ directory: String, find pattern: [UInt8], _ patch: (inout [UInt8], Int) -> Void) throws -> Int {
    let path = directory + "/data.mdb"
    var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
    var found = 0
    var offset = 0
    while offset + pattern.count <= bytes.count {
        if bytes[offset] == pattern[0] && Array(bytes[offset..<offset + pattern.count]) == pattern {
            patch(&bytes, offset)
            found += 1
        }
        offset += 1
    }
    try Data(bytes).write(to: URL(fileURLWithPath: path))
    return found
}

@Suite("tributary-log alongside a writer")
struct ConcurrentWriterTests {
    /// `tributary-demo` writes a few hundred commits (each flushed to disk) while the tool lists and verifies the
    /// same directory: every listing is a gapless prefix of the log, and every verification passes on its snapshot.
    @Test func listsAndVerifiesWhileAnotherProcessWrites() throws {
        let demo = try #require(BuiltTool.path("tributary-demo"), "tributary-demo is built with the package")
        let directory = TemporaryDirectory("concurrent")
        let path = directory.appending("demo")
        let messages = 10_000
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: demo)
        writer.arguments = ["--directory", path, "--messages", String(messages), "--fresh"]
        writer.standardOutput = FileHandle.nullDevice
        writer.standardError = FileHandle.nullDevice
        try writer.run()
        defer { if writer.isRunning { writer.terminate() } }

        // Wait until the writer has created the replica.
        let deadline = Date().addingTimeInterval(60)
        while try runTool(["info", path]).status != 0 {
            try #require(Date() < deadline, "the writer did not create a replica")
            usleep(20_000)
        }
        var concurrentRuns = 0
        var lengths: [Int] = []
        while writer.isRunning && concurrentRuns < 20 {
            let list = try runTool(["list", path, "--json"])
            #expect(list.status == 0, "\(list)")
            let sequences = list.lines.compactMap { line in
                (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["localSequence"] as? Int
            }
            #expect(sequences == (0..<sequences.count).map { $0 + 1 }, "a gapless prefix of the log")
            lengths.append(sequences.count)
            let verify = try runTool(["verify", path])
            #expect(verify.status == 0, "\(verify)")
            #expect(verify.stdout.hasPrefix("verified: "), "\(verify)")
            if writer.isRunning { concurrentRuns += 1 }
        }
        writer.waitUntilExit()
        #expect(writer.terminationStatus == 0)
        #expect(concurrentRuns >= 1, "the writer finished before the tool ran alongside it")
        #expect(lengths == lengths.sorted(), "the log only grows")

        // Schema, users, then the messages 25 per transaction.
        let expected = 2 + (messages + 24) / 25
        let final = try runTool(["list", path, "--json"])
        #expect(final.lines.count == expected)
        #expect(try runTool(["verify", path]).status == 0)
    }
}

@Suite("Two processes writing one replica")
struct TwoWritersTests {
    /// `tributary-demo` writes messages while this process writes users to the same directory. LMDB serializes the
    /// writers; each replica handle notices the other's commits at its next write, so no log entry is overwritten.
    @Test func neitherProcessLosesTheOthersCommits() throws {
        let demo = try #require(BuiltTool.path("tributary-demo"), "tributary-demo is built with the package")
        let directory = TemporaryDirectory("two-writers")
        let path = directory.appending("demo")
        // Create the replica with the demo's schema first, so both processes open the same one.
        let first = Process()
        first.executableURL = URL(fileURLWithPath: demo)
        first.arguments = ["--directory", path, "--messages", "25"]
        first.standardOutput = FileHandle.nullDevice
        try first.run()
        first.waitUntilExit()
        try #require(first.terminationStatus == 0)

        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: demo)
        writer.arguments = ["--directory", path, "--messages", "2000"]
        writer.standardOutput = FileHandle.nullDevice
        writer.standardError = FileHandle.nullDevice
        try writer.run()
        defer { if writer.isRunning { writer.terminate() } }

        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(directory: path, configuration: configuration)
        var written = 0
        while writer.isRunning || written < 50 {
            try replica.write { txn in
                try txn.upsert("User", ["_id": .string("extra\(written)"), "displayName": .string("Extra \(written)")])
            }
            written += 1
            if written > 5000 { break }
        }
        writer.waitUntilExit()
        #expect(writer.terminationStatus == 0)
        replica.close()

        let reopened = try Replica.open(directory: path, configuration: configuration)
        #expect(try reopened.read { try $0.count("ChatMessage") } == 2025)
        #expect(try reopened.read { try $0.count("User") } == 5 + written)
        #expect(try reopened.verify().passed)
        let sequences = try reopened.changesets(missingFrom: VersionVector()).count
        #expect(sequences == reopened.versionVector.total.asInt)
    }
}

extension UInt64 {
    var asInt: Int { Int(clamping: self) }
}
