import ArgumentParser
import Foundation
import Synchronization
import Tributary
import TributaryModel

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The argument every subcommand takes first: the replica directory.
struct ReplicaOptions: ParsableArguments {
    @Argument(help: "Path to the replica directory.", completion: .directory)
    var replica: String

    /// Opens the replica read-only, with the schema it stores. Works while another process writes to it.
    func open() throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.readOnly = true
        return try Replica.open(directory: replica, configuration: configuration)
    }
}

/// The output format flag of the subcommands that print tables.
struct OutputOptions: ParsableArguments {
    @Flag(help: "Print JSON with stable keys (JSON lines for streams) instead of a table.")
    var json = false
}

/// The exit statuses, as every subcommand's help lists them (sysexits.h numbers for the failures).
enum ExitStatus {
    /// `verify` found damage or a difference; `diff` found differences.
    static let differences: Int32 = 1
    /// Bad usage: an unknown option, a bad number, primary key, type or query.
    static let usage: Int32 = 64
    /// Damaged data: a log entry fails its checksum or chain, or cannot be decoded.
    static let damaged: Int32 = 65
    /// No replica here (missing, not a replica, or a newer format), or no such log entry.
    static let noInput: Int32 = 66
    /// Any other failure.
    static let software: Int32 = 70
    /// `replay --out` or `backup` could not create the new replica.
    static let cannotCreate: Int32 = 73
    /// Storage could not be read.
    static let io: Int32 = 74

    /// The exit status section of every subcommand's help.
    static let help = """
        Exit status:
          0   success
          1   verify found damage or a difference; diff found differences
          64  bad usage: an unknown option, a bad number, primary key, type or query
          65  a damaged log entry (checksum, chain or decoding)
          66  no replica here, a newer or development replica format, or no such log entry
          70  any other failure
          73  replay or backup could not create its output
          74  storage could not be read
        """
}

/// A failure the tool reports in one line, with its exit status.
struct ToolFailure: Error, CustomStringConvertible {
    var message: String
    var status: Int32

    init(_ message: String, status: Int32) {
        self.message = message
        self.status = status
    }

    var description: String { message }
}

extension ParsableCommand {
    /// Runs `body`, turning every failure into one line on stderr (`Error: …`) and its exit status.
    func reportingFailures(_ body: () throws -> Void) throws {
        do {
            try body()
            flushStandardOutput()
        } catch let exit as ExitCode {
            flushStandardOutput()
            throw exit
        } catch let error as ValidationError {
            throw error
        } catch {
            flushStandardOutput()
            ProgressLine.clearLine()
            let (message, status) = Self.describe(error)
            writeStandardError("Error: \(oneLine(message))\n")
            throw ExitCode(status)
        }
    }

    static func describe(_ error: any Error) -> (String, Int32) {
        switch error {
        case let failure as ToolFailure:
            return (failure.message, failure.status)
        case let error as TributaryError:
            let status: Int32
            switch error.code {
            case .notAReplica, .newerFormat, .developmentFormat: status = ExitStatus.noInput
            case .corrupted: status = ExitStatus.damaged
            case .unknownType, .unknownProperty, .invalidQuery, .wrongType, .invalidValue: status = ExitStatus.usage
            case .diskFull, .mapFull, .storage, .closed: status = ExitStatus.io
            default: status = ExitStatus.software
            }
            return (error.message, status)
        default:
            return (String(describing: error), ExitStatus.software)
        }
    }
}

/// `text` with line breaks replaced, so that a failure is always one line.
/// (A line holding only a caret, pointing into the line above, is dropped.)
func oneLine(_ text: String) -> String {
    text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
        .filter { !$0.isEmpty && !$0.allSatisfy { $0 == "^" || $0 == "~" } }.joined(separator: "; ")
}

/// Writes to stderr at once.
func writeStandardError(_ text: String) {
    var bytes = Array(text.utf8)
    writeAll(STDERR_FILENO, &bytes)
}

/// Lines for stdout, written in blocks of 64 KiB (and when a command ends): a million-line listing makes a few
/// thousand system calls, not a million.
private let standardOutput = Mutex<[UInt8]>([])

/// Writes one line to stdout.
func emit(_ line: String) {
    standardOutput.withLock { buffer in
        buffer.append(contentsOf: line.utf8)
        buffer.append(0x0A)
        if buffer.count >= 1 << 16 {
            writeAll(STDOUT_FILENO, &buffer)
            buffer.removeAll(keepingCapacity: true)
        }
    }
}

func flushStandardOutput() {
    standardOutput.withLock { buffer in
        writeAll(STDOUT_FILENO, &buffer)
        buffer.removeAll(keepingCapacity: true)
    }
}

private func writeAll(_ descriptor: Int32, _ bytes: inout [UInt8]) {
    bytes.withUnsafeBytes { buffer in
        guard let base = buffer.baseAddress else { return }
        var offset = 0
        while offset < buffer.count {
            let written = write(descriptor, base + offset, buffer.count - offset)
            if written < 0 && errno == EINTR { continue }
            if written <= 0 { return }  // a closed pipe: nothing more can be written
            offset += written
        }
    }
}

// MARK: Arguments

/// A local sequence number given on the command line.
func parseLocalSequence(_ text: String, name: String) throws -> UInt64 {
    guard let value = UInt64(text) else {
        throw ValidationError("\(name) must be a local sequence number (0, 1, 2, ...), got '\(text)'.")
    }
    return value
}

/// Parses a primary key given on the command line as the schema says the type's key is: an int (digits, an optional
/// minus sign), an ObjectID (24 hex digits), a UUID, or a string (taken as is).
func parsePrimaryKey(_ text: String, type: String, schema: Schema) throws -> PrimaryKey {
    guard let objectType = schema[type: type] else {
        // The type may have been removed from the schema since: guess from the text.
        if text.allSatisfy(\.isNumber), let int = Int64(text) { return .int(int) }
        if let id = ObjectID(hex: text) { return .objectId(id) }
        if let uuid = UUID(uuidString: text) { return .uuid(uuid) }
        return .string(text)
    }
    guard let property = objectType.primaryKeyProperty, case .scalar(let scalar) = property.kind else {
        throw ToolFailure("type '\(type)' has no primary key (it is embedded)", status: ExitStatus.usage)
    }
    switch scalar {
    case .int:
        guard let int = Int64(text) else {
            throw ToolFailure(
                "the primary key of \(type) is an int; '\(text)' is not a 64-bit integer", status: ExitStatus.usage)
        }
        return .int(int)
    case .objectId:
        guard let id = ObjectID(hex: text) else {
            throw ToolFailure(
                "the primary key of \(type) is an ObjectID; '\(text)' is not 24 hexadecimal digits",
                status: ExitStatus.usage)
        }
        return .objectId(id)
    case .uuid:
        guard let uuid = UUID(uuidString: text) else {
            throw ToolFailure("the primary key of \(type) is a UUID; '\(text)' is not a UUID", status: ExitStatus.usage)
        }
        return .uuid(uuid)
    default:
        return .string(text)
    }
}

/// Fails unless `type` is a top-level type of `schema`, naming the types it has.
func requireType(_ type: String, in schema: Schema) throws -> ObjectSchema {
    guard let objectType = schema[type: type], !objectType.isEmbedded else {
        let known = schema.types.filter { !$0.isEmbedded }.map(\.name).joined(separator: ", ")
        let reason = schema[type: type] == nil ? "the schema has no type '\(type)'" : "'\(type)' is an embedded type"
        throw ToolFailure("\(reason) (top-level types: \(known.isEmpty ? "none" : known))", status: ExitStatus.usage)
    }
    return objectType
}

// MARK: Progress

/// Progress on stderr, only when stderr is a terminal (and, for commands that stream rows, stdout is not the same
/// terminal): a line rewritten at most a few times a second, cleared when the command ends.
final class ProgressLine {
    private let enabled: Bool
    private let label: String
    private var lastDraw = 0.0
    private nonisolated(unsafe) static var drawn = false

    init(_ label: String, streamsRows: Bool) {
        self.label = label
        enabled = isatty(STDERR_FILENO) == 1 && !(streamsRows && isatty(STDOUT_FILENO) == 1)
    }

    func update(_ done: Int, of total: Int) {
        guard enabled else { return }
        let now = Date.timeIntervalSinceReferenceDate
        guard now - lastDraw >= 0.2 else { return }
        lastDraw = now
        let total = max(total, done)
        let percent = total == 0 ? 100 : done * 100 / total
        writeStandardError("\r\u{1B}[K\(label) \(done)/\(total) (\(percent)%)")
        Self.drawn = true
    }

    func finish() { Self.clearLine() }

    static func clearLine() {
        guard drawn else { return }
        writeStandardError("\r\u{1B}[K")
        drawn = false
    }
}

// MARK: Resident memory

/// Keeps the pages of the memory-mapped storage files (`data.mdb`) out of the resident set while a command streams
/// through a large replica.
///
/// LMDB reads through a read-only shared mapping of the data file, so every page a scan touches stays resident in
/// this process until the kernel needs the memory: a scan of a 400 MB log shows as 400 MB of RSS although none of it
/// is heap. `MADV_DONTNEED` on a shared file mapping only unmaps the pages from this process; they stay in the page
/// cache, and a later access maps them again with the same contents, so no data is lost or changed. Linux only (the
/// mappings are found in /proc/self/maps); elsewhere it does nothing.
final class MappedPageTrimmer {
    private var calls = 0
    private let every: Int

    /// Trims on every `every`-th call of ``tick()``.
    init(every: Int) { self.every = max(1, every) }

    func tick() {
        calls += 1
        if calls % every == 0 { Self.trim() }
    }

    static func trim() {
        #if os(Linux)
            guard let maps = try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8) else { return }
            for line in maps.split(separator: "\n") where line.hasSuffix("/data.mdb") {
                // "start-end perms offset device inode path"
                guard let range = line.split(separator: " ").first else { continue }
                let bounds = range.split(separator: "-").compactMap { UInt(String($0), radix: 16) }
                guard bounds.count == 2, bounds[1] > bounds[0],
                    let start = UnsafeMutableRawPointer(bitPattern: bounds[0])
                else { continue }
                _ = madvise(start, Int(bounds[1] - bounds[0]), MADV_DONTNEED)
            }
        #endif
    }
}
