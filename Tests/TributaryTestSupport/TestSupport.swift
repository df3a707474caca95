import Foundation
import Synchronization
import Tributary
public import TributaryModel
import TributaryStorage

/// A fresh directory under the system's temporary directory, removed when the value is released.
public final class TemporaryDirectory: Sendable {
    public let path: String

    public init(_ label: String = "tributary") {
        let name = "\(label)-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8))"
        path = (NSTemporaryDirectory() as NSString).appendingPathComponent(name)
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// A path inside the directory.
    public func appending(_ component: String) -> String {
        (path as NSString).appendingPathComponent(component)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

extension SplitMix64 {
    /// The seed from `TRIBUTARY_SEED` when set, else `fallback`.
    package static func seedFromEnvironment(default fallback: UInt64) -> UInt64 {
        if let text = ProcessInfo.processInfo.environment["TRIBUTARY_SEED"], let seed = UInt64(text) { return seed }
        return fallback
    }
}

/// A wall clock that moves only when told to.
public final class ManualClock: WallClock {
    private let now: Mutex<UInt64>

    public init(milliseconds: UInt64 = 1_700_000_000_000) { now = Mutex(milliseconds) }

    public func milliseconds() -> UInt64 { now.withLock { $0 } }

    public func advance(byMilliseconds delta: UInt64) { now.withLock { $0 += delta } }

    public func set(milliseconds: UInt64) { now.withLock { $0 = milliseconds } }
}

/// Schemas used across tests.
public enum Fixtures {
    /// One type, `Task`: the schema of the sync tests over loopback, the kill drills, and the crash child's
    /// `subscribe` mode.
    public static let taskSchema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Task",
                properties: [
                    .scalar("_id", .string), .scalar("title", .string, default: ""), .scalar("count", .int, default: 0),
                ])
        ])

    /// A chat app in the shape of the RChat sample app.
    public static let chatSchema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "User",
                properties: [
                    .scalar("_id", .string),
                    .scalar("name", .string, indexed: true),
                    .scalar("age", .int, optional: true),
                    .scalar("karma", .int, default: 0),
                    Property("address", .embedded("Address")),
                    Property("tags", .scalar(.string), list: true),
                    Property("friends", .link("User"), list: true),
                ]),
            .embedded(
                "Address",
                properties: [
                    .scalar("street", .string, optional: true),
                    .scalar("city", .string, optional: true),
                ]),
            ObjectSchema(
                name: "ChatMessage",
                properties: [
                    .scalar("_id", .string),
                    .scalar("author", .string, indexed: true),
                    .scalar("text", .string),
                    .scalar("timestamp", .date, indexed: true),
                    .scalar("conversationID", .string, indexed: true),
                    .scalar("isHighPriority", .bool, default: false),
                    Property("sender", .link("User")),
                    Property("attachments", .embedded("Attachment"), list: true),
                ]),
            .embedded(
                "Attachment",
                properties: [
                    .scalar("name", .string),
                    .scalar("size", .int, default: 0),
                ]),
        ])
}

/// Runs `body` on a thread of its own, and waits for it without holding a thread of Swift's cooperative pool.
///
/// Swift Testing runs tests on that pool, which has one thread per core. A long synchronous test (a fault loop, a
/// thousand simulator seeds) holds its thread for minutes, and on a 2-core machine two of them starve the async tests
/// (live results) of threads to resume on. Long synchronous tests run their bodies through this instead.
public func offThePool(_ body: () throws -> Void) async throws {
    try await withoutActuallyEscaping(body) { escapable in
        let work = BodyHandOver(escapable)
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let thread = Thread {
                // The body is released before the caller resumes: `withoutActuallyEscaping` checks that no reference
                // to it is left when it returns.
                let result = work.run()
                continuation.resume(with: result)
            }
            thread.stackSize = 16 << 20
            thread.start()
        }
    }
}

/// Hands ``offThePool(_:)``'s body to its thread, which runs it while the caller waits, then lets go of it.
private final class BodyHandOver: @unchecked Sendable {
    private var body: (() throws -> Void)?

    init(_ body: @escaping () throws -> Void) { self.body = body }

    func run() -> Result<Void, any Error> {
        guard let body else { return .success(()) }
        self.body = nil
        return Result { try body() }
    }
}

/// Replica directories as other builds of Tributary leave them.
public enum StoredFormat {
    /// Rewrites the identity of the replica in `directory` (closed) as a development build before 0.1.0 stored it:
    /// its format number under the development key, and none under the release key.
    public static func markAsDevelopmentBuild(_ directory: String, developmentFormat: UInt8 = 7) throws {
        try editIdentity(directory) { txn, identity in
            _ = try txn.delete(identity, key: ReplicaFormat.key)
            try txn.put(identity, key: ReplicaFormat.developmentKey, value: [developmentFormat])
        }
    }

    /// Records `format` as the format of the replica in `directory` (closed).
    public static func setFormat(_ directory: String, _ format: UInt8) throws {
        try editIdentity(directory) { txn, identity in try txn.put(identity, key: ReplicaFormat.key, value: [format]) }
    }

    private static func editIdentity(
        _ directory: String, _ edit: (TributaryStorage.WriteTransaction, Database) throws -> Void
    ) throws {
        let environment = try Environment.open(path: directory)
        defer { environment.close() }
        let identity = try environment.openDatabases([Replica.identityDatabase])[0]
        try environment.write { txn in try edit(txn, identity) }
    }
}
