import Foundation
import Synchronization
public import Tributary
import TributaryModel

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

// Helpers for the storage-fault suites (crash, storage faults, disk full, map growth, corruption): the seeded write
// workload the crash child runs, digests of a replica's state and log, and a child-process runner that reads the
// child's lines as they come.

/// Whether the long versions of the reliability suites run (`TRIBUTARY_DEEP=1`).
public enum Deep {
    public static var enabled: Bool { ProcessInfo.processInfo.environment["TRIBUTARY_DEEP"] == "1" }

    /// `deep` when `TRIBUTARY_DEEP=1`, else `ci`.
    public static func count(ci: Int, deep: Int) -> Int { enabled ? deep : ci }
}

// MARK: The workload

/// A seeded random write workload over ``Fixtures/chatSchema``: users with tag lists, friends and addresses; chat
/// messages with attachments; list inserts, moves, replacements, removals and clears; field sets, increments and
/// deletes.
///
/// Every operation emits exactly one instruction, so a transaction of `n` operations becomes a changeset of `n`
/// instructions (the crash test uses that to check that an in-flight transaction is complete). Values come from the
/// seed only (no clock, no `Dictionary` order), so a seed replays the same values against the same state.
public struct ChatWorkload {
    package private(set) var random: SplitMix64
    /// Prefix of the primary keys this workload creates, unique per generation.
    public let prefix: String
    private var counter = 0
    /// Users known to exist. Users are never deleted.
    public private(set) var users: [String]
    /// Messages known to exist.
    public private(set) var messages: [String]

    public init(seed: UInt64, prefix: String, existingUsers: [String] = [], existingMessages: [String] = []) {
        random = SplitMix64(seed: seed)
        self.prefix = prefix
        users = existingUsers
        messages = existingMessages
    }

    /// Learns the users and messages a replica holds.
    public init(seed: UInt64, prefix: String, replica: Replica) throws {
        let (users, messages) = try replica.read { snapshot in
            (
                try snapshot.objects("User").compactMap(\.primaryKey.value.stringValue),
                try snapshot.objects("ChatMessage").compactMap(\.primaryKey.value.stringValue)
            )
        }
        self.init(seed: seed, prefix: prefix, existingUsers: users, existingMessages: messages)
    }

    /// The number of operations of the next transaction: 1-500, and one time in `bigEvery` `big`.
    public mutating func nextTransactionSize(bigEvery: Int = 20, big: Int = 5_000) -> Int {
        if bigEvery > 0 && random.next() % UInt64(bigEvery) == 0 { return big }
        return 1 + Int(random.next() % 500)
    }

    mutating func int(_ bound: Int) -> Int { Int(random.next() % UInt64(max(bound, 1))) }

    mutating func word() -> String {
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        return String((0..<(1 + int(10))).map { _ in letters[int(letters.count)] })
    }

    mutating func text(maximum: Int) -> String {
        var words: [String] = []
        var length = 0
        let target = 1 + int(maximum)
        while length < target {
            let next = word()
            length += next.count + 1
            words.append(next)
        }
        return words.joined(separator: " ")
    }

    mutating func newKey(_ kind: String) -> String {
        counter += 1
        return "\(prefix)-\(kind)\(counter)"
    }

    /// Runs `count` operations in `txn`. Each emits exactly one instruction.
    public mutating func run(_ count: Int, in txn: Transaction, textLength: Int = 120) throws {
        for _ in 0..<count { try step(txn, textLength: textLength) }
    }

    mutating func step(_ txn: Transaction, textLength: Int) throws {
        let roll = int(100)
        if users.isEmpty || roll < 25 {
            let key = newKey("u")
            var values: [String: Value] = ["_id": .string(key), "name": .string(word())]
            if int(2) == 0 { values["age"] = .int(Int64(int(100))) }
            values["tags"] = .list((0..<int(6)).map { _ in .string(word()) })
            if !users.isEmpty && int(2) == 0 {
                values["friends"] = .list((0..<(1 + int(3))).map { _ in .link(.string(users[int(users.count)])) })
            }
            if int(3) == 0 {
                values["address"] = .embedded(
                    EmbeddedObject(type: "Address", fields: ["street": .string(word()), "city": .string(word())]))
            }
            try txn.create("User", values)
            users.append(key)
            return
        }
        if roll < 50 {
            let key = newKey("m")
            var values: [String: Value] = [
                "_id": .string(key), "author": .string(users[int(users.count)]),
                "text": .string(text(maximum: textLength)),
                "timestamp": .date(Date(timeIntervalSince1970: Double(1_700_000_000 + int(10_000_000)))),
                "conversationID": .string("c\(int(20))"),
            ]
            if int(2) == 0 { values["sender"] = .link(.string(users[int(users.count)])) }
            if int(2) == 0 {
                values["attachments"] = .list(
                    (0..<(1 + int(3))).map { _ in
                        .embedded(
                            EmbeddedObject(
                                type: "Attachment",
                                fields: ["name": .string(word()), "size": .int(Int64(int(1 << 20)))]))
                    })
            }
            try txn.create("ChatMessage", values)
            messages.append(key)
            return
        }
        let user = PrimaryKey.string(users[int(users.count)])
        let count = try txn.object("User", primaryKey: user)?["tags"].listValue?.count ?? 0
        switch roll {
        case 50..<62:
            try txn.append(.string(word()), to: ["tags"], of: "User", primaryKey: user)
        case 62..<72:
            try txn.insert(.string(word()), at: int(count + 1), into: ["tags"], of: "User", primaryKey: user)
        case 72..<78 where count >= 2:
            let from = int(count)
            var to = int(count - 1)
            if to >= from { to += 1 }
            try txn.moveElement(from: from, to: to, in: ["tags"], of: "User", primaryKey: user)
        case 78..<84 where count >= 1:
            try txn.replaceElement(at: int(count), with: .string(word()), in: ["tags"], of: "User", primaryKey: user)
        case 84..<90 where count >= 1:
            try txn.removeElement(at: int(count), from: ["tags"], of: "User", primaryKey: user)
        case 90..<91:
            try txn.removeAllElements(in: ["tags"], of: "User", primaryKey: user)
        case 91..<95:
            try txn.increment(["karma"], of: "User", primaryKey: user, by: Int64(1 + int(5)))
        case 95..<97 where !messages.isEmpty:
            let index = int(messages.count)
            let message = messages.remove(at: index)
            try txn.delete("ChatMessage", primaryKey: .string(message))
        default:
            try txn.set(.int(Int64(int(120))), at: ["age"], of: "User", primaryKey: user)
        }
    }
}

// MARK: Digests

/// Order-independent, process-independent digests of a replica.
public enum ReplicaDigest {
    /// XXH64 over the canonical description of every object, type by type in name order, objects in primary key
    /// order.
    public static func objects(_ replica: Replica) throws -> UInt64 {
        try replica.read { snapshot in try objects(snapshot) }
    }

    /// The same, on a snapshot.
    public static func objects(_ reader: some ObjectReading) throws -> UInt64 {
        var text = ""
        for type in reader.schema.types.filter({ !$0.isEmbedded }).map(\.name).sorted() {
            text += "#\(type)\n"
            for object in try reader.objects(type) { text += object.description + "\n" }
        }
        return XXHash64.hash(Array(text.utf8))
    }

    /// XXH64 of the canonical encoding of the changeset at `localSequence`.
    public static func changeset(_ replica: Replica, at localSequence: UInt64) throws -> UInt64 {
        XXHash64.hash(ChangesetCodec.encode(try replica.changeset(at: localSequence)))
    }

    /// XXH64 chained over every changeset of the log, in order.
    public static func log(_ replica: Replica) throws -> UInt64 {
        var digest: UInt64 = 0
        try replica.forEachChangeset { _, changeset in
            digest = XXHash64.hash(ChangesetCodec.encode(changeset), seed: digest)
            return true
        }
        return digest
    }

    public static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }
}

// MARK: Child processes

/// Where the test helper executables are: next to the test binary (`swift test` puts every product of the package in
/// one directory), or `TRIBUTARY_CRASH_CHILD`.
public enum ChildExecutable {
    public static func path(_ name: String = "tributary-crash-child") -> String? {
        if name == "tributary-crash-child", let explicit = ProcessInfo.processInfo.environment["TRIBUTARY_CRASH_CHILD"]
        {
            return explicit
        }
        var candidates: [URL] = []
        let argument0 = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        candidates.append(argument0.deletingLastPathComponent())
        // On macOS the test binary sits inside `X.xctest/Contents/MacOS/`.
        candidates.append(
            argument0.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent())
        candidates.append(Bundle.main.bundleURL.deletingLastPathComponent())
        candidates.append(Bundle.main.bundleURL)
        for directory in candidates {
            let candidate = directory.appendingPathComponent(name).path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}

/// How a child ended.
public enum ChildExit: Equatable, Sendable, CustomStringConvertible {
    case exited(Int32)
    case signaled(Int32)

    public var description: String {
        switch self {
        case .exited(let status): "exit status \(status)"
        case .signaled(let signal): "signal \(signal)"
        }
    }
}

/// A child process started with `Foundation.Process`, whose standard output is read line by line on a thread of its
/// own as it comes (so a line printed before a SIGKILL is never lost), and whose standard error goes to a file.
public final class ChildProcess: Sendable {
    private struct Output {
        var lines: [String] = []
        var partial: [UInt8] = []
        var finished = false
    }
    private let output = Mutex(Output())
    private let condition = NSCondition()
    private let process: Process
    public let pid: Int32
    public let stderrPath: String

    /// Starts `executable` with `arguments`, in this process's environment with `environment` added (a variable
    /// named in both takes `environment`'s value).
    public init(
        executable: String, arguments: [String], stderrPath: String, environment: [String: String] = [:]
    ) throws {
        var attempt = 0
        var started: (Process, Pipe)?
        while started == nil {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            if !environment.isEmpty {
                process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            }
            let pipe = Pipe()
            process.standardOutput = pipe
            _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
            let errorHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: stderrPath))
            process.standardError = errorHandle
            process.standardInput = FileHandle.nullDevice
            do {
                try process.run()
                started = (process, pipe)
            } catch let error as NSError
                where error.domain == NSPOSIXErrorDomain && error.code == Int(EBADF) && attempt < 5
            {
                // Foundation's Process asks posix_spawn to close every descriptor it saw open; one that another
                // thread closed meanwhile (a test running beside this one) fails the spawn with EBADF. Nothing was
                // started: try again. A deep corruption run, thousands of spawns, met it twice in half an hour.
                attempt += 1
            }
            try? errorHandle.close()
        }
        guard let (process, pipe) = started else { preconditionFailure("the loop ends only once a child started") }
        self.process = process
        self.pid = process.processIdentifier
        self.stderrPath = stderrPath
        let fd = pipe.fileHandleForReading.fileDescriptor
        // Keep the read end alive until the reader is done; close the write end in this process.
        try? pipe.fileHandleForWriting.close()
        let reader = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                self.append(buffer[0..<n])
            }
            // Closed here, before the output is marked finished: once `waitForExit` returns, this child holds no
            // descriptor that a later spawn could see open and then find closed.
            try? pipe.fileHandleForReading.close()
            self.condition.lock()
            self.output.withLock { $0.finished = true }
            self.condition.broadcast()
            self.condition.unlock()
        }
        reader.start()
    }

    private func append(_ bytes: ArraySlice<UInt8>) {
        condition.lock()
        output.withLock { output in
            for byte in bytes {
                if byte == UInt8(ascii: "\n") {
                    output.lines.append(String(decoding: output.partial, as: UTF8.self))
                    output.partial.removeAll(keepingCapacity: true)
                } else {
                    output.partial.append(byte)
                }
            }
        }
        condition.broadcast()
        condition.unlock()
    }

    /// The complete lines read so far.
    public var lines: [String] { output.withLock { $0.lines } }

    /// Waits until `predicate` holds for the lines read so far, the output ends, or `timeout` passes. Returns
    /// whether the predicate held.
    @discardableResult
    public func wait(timeout: Double, until predicate: ([String]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while true {
            let (lines, finished) = output.withLock { ($0.lines, $0.finished) }
            if predicate(lines) { return true }
            if finished { return false }
            if !condition.wait(until: deadline) {
                return predicate(output.withLock { $0.lines })
            }
        }
    }

    /// Waits for the first line starting with `prefix` and returns it.
    public func waitForLine(startingWith prefix: String, timeout: Double) -> String? {
        var found: String?
        wait(timeout: timeout) { lines in
            found = lines.first { $0.hasPrefix(prefix) }
            return found != nil
        }
        return found
    }

    /// Sends `signal` to the child.
    public func send(_ signal: Int32) { kill(pid, signal) }

    /// Waits for the child to end and its output to be read to the end.
    @discardableResult
    public func waitForExit(timeout: Double = 120) -> ChildExit? {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning {
            if Date() > deadline { return nil }
            usleep(1_000)
        }
        wait(timeout: max(1, deadline.timeIntervalSinceNow)) { _ in false }
        switch process.terminationReason {
        case .uncaughtSignal: return .signaled(process.terminationStatus)
        default: return .exited(process.terminationStatus)
        }
    }

    /// Kills the child (SIGKILL) and waits for it.
    @discardableResult
    public func killAndWait() -> ChildExit? {
        send(SIGKILL)
        return waitForExit()
    }

    /// The child's standard error, for failure messages.
    public var standardError: String {
        (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
    }
}
