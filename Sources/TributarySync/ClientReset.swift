import Foundation
import NIOCore
import NIOWebSocket
public import Tributary
public import TributaryModel
import TributaryProtocol

/// What an app's sync session does when the daemon says its replica must be reset (``SyncError/Code/resetRequired``):
/// the two histories can no longer be merged, because the daemon was restored from a backup (its history went
/// back), or this device was.
///
/// A reset replaces the replica with the daemon's state, downloaded afresh under a new replica id, and then, by
/// ``Mode``, writes again what this device had not uploaded yet. The replica is replaced on disk in one atomic step:
/// a reset cut off at any point (the app killed) leaves either the old replica or the new one, whole.
///
/// ```swift
/// var configuration = SyncConfiguration()
/// configuration.clientReset = ClientReset(mode: .recoverUnsyncedChanges) { before, after in
///     print("reset: \(try before.objects("Task").count) tasks before, \(try after.objects("Task").count) after")
/// }
/// let session = replica.connect(to: endpoint, configuration: configuration)
/// // After a reset, `session.replica` is the new replica; the one opened before is closed.
/// ```
public struct ClientReset: Sendable {
    /// How a reset treats the changes this device made that the daemon does not hold.
    public enum Mode: Sendable, Hashable, CustomStringConvertible {
        /// No automatic reset: the session stops with the ``SyncError/Code/resetRequired`` error, and the app calls
        /// ``SyncSession/reset(_:)`` when it is ready. The old replica is kept at
        /// ``ClientResetReport/backupDirectory``.
        case manual
        /// Drops them: the replica becomes the daemon's state.
        case discardUnsyncedChanges
        /// Writes them again onto the daemon's state, by the rules of ``ClientReset``; when that fails, the reset
        /// fails and the session stops.
        case recoverUnsyncedChanges
        /// Writes them again, and drops them when that fails.
        case recoverOrDiscardUnsyncedChanges

        public var description: String {
            switch self {
            case .manual: "manual"
            case .discardUnsyncedChanges: "discard unsynced changes"
            case .recoverUnsyncedChanges: "recover unsynced changes"
            case .recoverOrDiscardUnsyncedChanges: "recover or discard unsynced changes"
            }
        }
    }

    /// What the session does. The default recovers unsynced changes.
    public var mode: Mode
    /// Called once the daemon's state is downloaded, before the replica is replaced, with the replica as it was.
    /// Throwing fails the reset.
    public var beforeReset: (@Sendable (_ before: Replica) throws -> Void)?
    /// Called after the replica was replaced, with the old state (a copy, closed after the call) and the new replica.
    public var afterReset: (@Sendable (_ before: Replica, _ after: Replica) throws -> Void)?

    /// A reset policy.
    ///
    /// Recovery writes the unsynced changes again as new writes of the new replica, by these rules:
    /// - an object created on this device (and not deleted since) is kept: created, or, when the daemon has an
    ///   object with its primary key, given this device's values;
    /// - a property this device wrote takes this device's value (local field writes win), but only on objects the
    ///   daemon still has: a deletion on the daemon beats a local change;
    /// - an integer this device only incremented gets the same increments on the daemon's value;
    /// - an object this device deleted is deleted;
    /// - a list (or an embedded object) this device changed takes this device's value whole: recovery cannot tell
    ///   its element edits from the daemon's.
    public init(
        mode: Mode = .recoverUnsyncedChanges, beforeReset: (@Sendable (_ before: Replica) throws -> Void)? = nil,
        afterReset: (@Sendable (_ before: Replica, _ after: Replica) throws -> Void)? = nil
    ) {
        self.mode = mode
        self.beforeReset = beforeReset
        self.afterReset = afterReset
    }
}

/// What a client reset did.
public struct ClientResetReport: Sendable, Hashable, CustomStringConvertible {
    /// Why the daemon asked for it.
    public var reason: String
    /// The replica's id before, and the new replica's.
    public var previousReplicaID: ReplicaID
    public var replicaID: ReplicaID
    /// Whether the unsynced changes were written again (recovery) or dropped.
    public var recovered: Bool
    /// The changesets this device had written that the daemon did not hold.
    public var unsyncedChangesets: Int
    /// Objects recovery created, changed or deleted on the new replica.
    public var objectsRecovered: Int
    /// Objects this device changed that the daemon deleted meanwhile: their changes were dropped.
    public var objectsDeletedOnDaemon: Int
    /// Where the old replica was kept (a manual reset keeps it; an automatic one deletes it), else `nil`.
    public var backupDirectory: String?

    public var description: String {
        "client reset of \(previousReplicaID) (now \(replicaID)): \(unsyncedChangesets) unsynced changesets "
            + (recovered
                ? "recovered (\(objectsRecovered) objects written again, \(objectsDeletedOnDaemon) deleted on the daemon)"
                : "discarded")
            + (backupDirectory.map { "; the old replica is kept at \($0)" } ?? "") + "; reason: \(reason)"
    }
}

/// A reset that failed: its error, and whether the old replica was closed by then (the caller opens it again).
struct ResetFailure: Error {
    var error: SyncError
    var oldClosed: Bool

    /// The reset of `directory` failed at `step`.
    init(_ directory: String, _ step: String, _ error: any Error, oldClosed: Bool) {
        self.error = SyncError(
            .resetRequired, .reset,
            "the client reset of \(directory) failed while \(step): \(error) (the session stops; session.reset(_:) "
                + "tries again)")
        self.oldClosed = oldClosed
    }
}

/// Resets an app's replica: downloads the daemon's state into a replica beside it, recovers or discards the
/// unsynced changes, and puts the new replica in the old one's place.
enum ClientResetter {
    /// The file in a replica's directory that counts the resets since the daemon last took this replica's upload
    /// (or found nothing to take): two in a row that did not help stop the session instead of resetting for ever.
    static let attemptsFile = "client-reset-attempts"

    static func attempts(in directory: String) -> Int {
        let path = (directory as NSString).appendingPathComponent(attemptsFile)
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return 0 }
        return Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
    }

    static func recordAttempt(in directory: String) throws {
        let path = (directory as NSString).appendingPathComponent(attemptsFile)
        try "\(attempts(in: directory) + 1)\n".write(toFile: path, atomically: true, encoding: .utf8)
    }

    static func clearAttempts(in directory: String) {
        try? FileManager.default.removeItem(atPath: (directory as NSString).appendingPathComponent(attemptsFile))
    }

    /// Resets `old`, which is closed by the time this returns.
    ///
    /// - Throws: ``ResetFailure`` naming the step that failed, with a ``SyncError`` of code `.resetRequired`; the old
    ///   replica is then left in place, whole, and closed if the failure came after the download.
    static func reset(
        _ old: Replica, reason: String, mode: ClientReset.Mode, policy: ClientReset, endpoint: SyncEndpoint,
        credentials: SyncCredentials, configuration: SyncConfiguration, keepBackup: Bool
    ) async throws(ResetFailure) -> (Replica, ClientResetReport) {
        do {
            return try await start(
                old, reason: reason, mode: mode, policy: policy, endpoint: endpoint, credentials: credentials,
                configuration: configuration, keepBackup: keepBackup)
        } catch let failure as ResetFailure {
            throw failure
        } catch {
            throw ResetFailure(old.directory, "resetting", error, oldClosed: old.isClosed)
        }
    }

    private static func start(
        _ old: Replica, reason: String, mode: ClientReset.Mode, policy: ClientReset, endpoint: SyncEndpoint,
        credentials: SyncCredentials, configuration: SyncConfiguration, keepBackup: Bool
    ) async throws -> (Replica, ClientResetReport) {
        let directory = old.directory
        let staging = directory + ".reset-new"
        let files = FileManager.default
        func failure(_ step: String, _ error: any Error) -> ResetFailure {
            ResetFailure(directory, step, error, oldClosed: old.isClosed)
        }
        var replicaConfiguration = old.configuration
        replicaConfiguration.replicaID = nil

        // 1. The daemon's state, downloaded into a new replica beside the old one.
        let fresh: Replica
        do {
            try? files.removeItem(atPath: staging)
            try files.createDirectory(atPath: staging, withIntermediateDirectories: true)
            fresh = try Replica.open(
                directory: staging, schema: old.schemaOpenedWith, configuration: replicaConfiguration)
        } catch {
            throw failure("creating the new replica at \(staging)", error)
        }
        var closeFresh = true
        defer { if closeFresh { fresh.close() } }
        do {
            let flexible = try old.flexibleSyncQuery() != nil
            if flexible {
                let subscriptions = try old.subscriptions.latest.subscriptions
                _ = try fresh.subscriptions.commit { set in
                    for subscription in subscriptions { set.append(subscription) }
                }
            }
            var downloadConfiguration = configuration
            downloadConfiguration.clientReset = ClientReset(mode: .manual)
            downloadConfiguration.uploads = false
            let session = SyncSession(
                replica: fresh, endpoint: endpoint, credentials: credentials, configuration: downloadConfiguration)
            do {
                try await session.waitForDownload()
                if flexible { _ = try await fresh.subscriptions.waitForSync() }
            } catch {
                await session.close()
                throw error
            }
            await session.close()
        } catch {
            throw failure("downloading the daemon's state", error)
        }

        do {
            try policy.beforeReset?(old)
        } catch {
            throw failure("in the app's beforeReset", error)
        }
        // From here the old replica takes no more writes (a write now fails with `closed` instead of being lost
        // with the old replica): what it holds is read from a read-only copy of its storage.
        old.close()
        var readOnly = old.configuration
        readOnly.readOnly = true
        let frozen: Replica
        do {
            frozen = try Replica.open(directory: directory, configuration: readOnly)
        } catch {
            throw failure("reading the old replica", error)
        }
        do {
            let (replaced, report) = try await finish(
                old: frozen, fresh: fresh, reason: reason, mode: mode, policy: policy, endpoint: endpoint,
                credentials: credentials, configuration: configuration, keepBackup: keepBackup,
                schema: old.schemaOpenedWith, replicaConfiguration: replicaConfiguration)
            closeFresh = false
            return (replaced, report)
        } catch let error as ResetFailure {
            frozen.close()
            throw error
        } catch {
            frozen.close()
            throw failure("replacing the replica", error)
        }
    }

    /// The rest of a reset, once the old replica is closed: `old` is a read-only copy of it.
    private static func finish(
        old: Replica, fresh: Replica, reason: String, mode: ClientReset.Mode, policy: ClientReset,
        endpoint: SyncEndpoint, credentials: SyncCredentials, configuration: SyncConfiguration, keepBackup: Bool,
        schema: Schema?, replicaConfiguration: Replica.Configuration
    ) async throws -> (Replica, ClientResetReport) {
        let directory = old.directory
        let staging = directory + ".reset-new"
        let backup = directory + ".reset-backup"
        let files = FileManager.default
        func failure(_ step: String, _ error: any Error) -> ResetFailure {
            ResetFailure(directory, step, error, oldClosed: true)
        }
        // 2. What this device wrote that the daemon does not hold.
        let unsynced: [Changeset]
        do {
            // The daemon holds this device's changesets through `held`; but a device restored from a backup wrote
            // others under the same ids since: those, back to the last one both hold alike, are unsynced too. A
            // flexible-sync replica receives objects, not the changesets they came from: the daemon says.
            let flexible = try old.flexibleSyncQuery() != nil
            var held = min(
                flexible
                    ? try await heldSequence(
                        of: old.replicaID, at: endpoint, credentials: credentials, configuration: configuration,
                        schemaVersion: fresh.schemaVersions(configuration).declared)
                    : try fresh.heldSequence(of: old.replicaID),
                old.versionVector[old.replicaID])
            while held > 0 && !flexible {
                let dot = Dot(origin: old.replicaID, sequence: held)
                if try fresh.changesetFingerprint(at: dot) == old.changesetFingerprint(at: dot) { break }
                held -= 1
            }
            unsynced = try old.ownChangesets(after: held)
        } catch {
            throw failure("reading the unsynced changes", error)
        }

        // 3. Recovery, written on the new replica.
        var report = ClientResetReport(
            reason: reason, previousReplicaID: old.replicaID, replicaID: fresh.replicaID, recovered: false,
            unsyncedChangesets: unsynced.count, objectsRecovered: 0, objectsDeletedOnDaemon: 0)
        if mode == .recoverUnsyncedChanges || mode == .recoverOrDiscardUnsyncedChanges {
            do {
                let outcome = try await Recovery(unsynced).apply(from: old, to: fresh)
                report.recovered = true
                report.objectsRecovered = outcome.recovered
                report.objectsDeletedOnDaemon = outcome.deletedOnDaemon
            } catch {
                if mode == .recoverUnsyncedChanges { throw failure("recovering the unsynced changes", error) }
            }
        }

        // 4. The swap: the old storage file is kept aside (a hard link), then the new one renamed over it, in one
        // atomic step. Until the rename the old replica is whole in place; after it, the new one.
        old.close()
        fresh.close()
        let data = (directory as NSString).appendingPathComponent("data.mdb")
        do {
            try? files.removeItem(atPath: backup)
            try files.createDirectory(atPath: backup, withIntermediateDirectories: true)
            let kept = (backup as NSString).appendingPathComponent("data.mdb")
            do {
                try files.linkItem(atPath: data, toPath: kept)
            } catch {
                try files.copyItem(atPath: data, toPath: kept)
            }
            guard rename((staging as NSString).appendingPathComponent("data.mdb"), data) == 0 else {
                throw SyncError(
                    .resetRequired, .fatal,
                    "cannot rename the new replica into place: \(String(cString: strerror(errno)))")
            }
            syncDirectory(directory)
            try? files.removeItem(atPath: staging)
        } catch {
            throw failure("putting the new replica in place of \(directory)", error)
        }

        // 5. The new replica, opened where the old one was.
        let replaced: Replica
        do {
            replaced = try Replica.open(directory: directory, schema: schema, configuration: replicaConfiguration)
        } catch {
            throw failure("opening the new replica", error)
        }
        if let afterReset = policy.afterReset {
            do {
                let before = try Replica.open(directory: backup)
                defer { before.close() }
                try afterReset(before, replaced)
            } catch {
                // The reset is done: the app's callback failing does not undo it.
                report.reason += " (the app's afterReset failed: \(error))"
            }
        }
        if keepBackup {
            report.backupDirectory = backup
        } else {
            try? files.removeItem(atPath: backup)
        }
        return (replaced, report)
    }

    /// The highest sequence of `replica`'s own changesets the daemon holds: the `yours` of a handshake as that
    /// replica, which declares none of the daemon's changesets and so is not refused for divergence, and closes right
    /// after the daemon's welcome.
    static func heldSequence(
        of replica: ReplicaID, at endpoint: SyncEndpoint, credentials: SyncCredentials,
        configuration: SyncConfiguration, schemaVersion: UInt64
    ) async throws -> UInt64 {
        var token = String(decoding: credentials.bytes, as: UTF8.self)
        if token.isEmpty, let refresh = credentials.refresh { token = try await refresh() }
        let channel = try await WebSocketDialer.connect(
            to: endpoint, authorization: token.isEmpty ? nil : "Bearer \(token)",
            tls: endpoint.secure ? try configuration.tls.clientContext() : nil)
        let writer = WebSocketWriter(channel: channel.channel, masking: true)
        return try await channel.executeThenClose { inbound, _ in
            let hello = Hello(
                replica: replica, role: .app, schemaVersion: schemaVersion, name: "client reset probe",
                vector: VersionVector([(replica, .max)]), window: configuration.window, flexible: true)
            try await writer.send(MessageCodec.encode(.hello(hello)))
            for try await frame in inbound where frame.opcode == .binary {
                var data = frame.unmaskedData
                switch try MessageCodec.decode(data.readBytes(length: data.readableBytes) ?? []) {
                case .welcome(let welcome): return welcome.yours
                case .error(let error): throw error
                default: continue
                }
            }
            throw SyncError(.unavailable, .retry, "the daemon closed the connection before its welcome")
        }
    }

    /// Makes a rename in `directory` durable.
    private static func syncDirectory(_ directory: String) {
        let descriptor = open(directory, O_RDONLY)
        guard descriptor >= 0 else { return }
        _ = fsync(descriptor)
        _ = close(descriptor)
    }
}

/// The recovery of a device's unsynced changesets onto a replica holding the daemon's state (``ClientReset``'s
/// rules): what the changesets touched is read from the old replica's state, and written as new writes.
struct Recovery {
    struct Object: Hashable, Comparable {
        var type: String
        var key: PrimaryKey

        static func < (lhs: Object, rhs: Object) -> Bool { (lhs.type, lhs.key) < (rhs.type, rhs.key) }
    }

    private(set) var created: Set<Object> = []
    private(set) var erased: Set<Object> = []
    /// Top-level properties written other than by increments (sets, list edits, embedded objects' changes).
    private(set) var written: [Object: Set<String>] = [:]
    /// Top-level integer properties changed by increments, with their sum.
    private(set) var increments: [Object: [String: Int64]] = [:]

    init(_ changesets: [Changeset]) {
        for changeset in changesets {
            for instruction in changeset.instructions { note(instruction) }
        }
    }

    private mutating func note(_ instruction: Instruction) {
        switch instruction {
        case .create(let type, let key, _, _):
            created.insert(Object(type: type, key: key))
        case .erase(let type, let key):
            erased.insert(Object(type: type, key: key))
        case .addInteger(let path, let delta, _) where path.steps.isEmpty:
            let object = Object(type: path.type, key: path.primaryKey)
            increments[object, default: [:]][path.property, default: 0] &+= delta
        case .set(let path, _), .addInteger(let path, _, _), .listInsert(let path, _, _), .listSet(let path, _, _),
            .listErase(let path, _), .listMove(let path, _, _), .listClear(let path), .dictionarySet(let path, _, _),
            .dictionaryErase(let path, _):
            let object = Object(type: path.type, key: path.primaryKey)
            written[object, default: []].insert(path.steps.first?.property ?? path.property)
        case .addType, .addProperty, .removeProperty, .renameProperty, .redefineProperty, .removeType,
            .setSchemaVersion, .migrated, .omitted:
            // Schema changes are not recovered: the new replica has the app's schema from its first changeset.
            break
        }
    }

    var objects: [Object] {
        Set(created).union(erased).union(written.keys).union(increments.keys).sorted()
    }

    /// Writes the recovery on `fresh`, in one transaction, reading the changed objects from `old`.
    func apply(from old: Replica, to fresh: Replica) async throws -> (recovered: Int, deletedOnDaemon: Int) {
        let objects = self.objects
        let before: [Object: DynamicObject] = try await old.read { txn in
            var found: [Object: DynamicObject] = [:]
            for object in objects {
                if let value = try txn.object(object.type, primaryKey: object.key) { found[object] = value }
            }
            return found
        }
        let schema = fresh.schema
        return try await fresh.write { txn in
            var recovered = 0
            var deletedOnDaemon = 0
            for object in objects {
                let current = try txn.object(object.type, primaryKey: object.key)
                guard let local = before[object] else {
                    // Deleted on this device (maybe after creating it): local deletes apply.
                    if erased.contains(object), current != nil {
                        try txn.delete(object.type, primaryKey: object.key)
                        recovered += 1
                    }
                    continue
                }
                guard let type = schema.types.first(where: { $0.name == object.type }) else { continue }
                let names = Set(type.properties.map(\.name)).subtracting([type.primaryKey].compactMap { $0 })
                if created.contains(object) {
                    let values = local.values.filter { names.contains($0.key) }
                    if current == nil {
                        var all = values
                        if let primaryKey = type.primaryKey { all[primaryKey] = local[primaryKey] }
                        _ = try txn.create(object.type, all)
                    } else {
                        try txn.update(object.type, primaryKey: object.key, values)
                    }
                    recovered += 1
                    continue
                }
                guard current != nil else {
                    // A deletion on the daemon beats a local change.
                    deletedOnDaemon += 1
                    continue
                }
                let writtenNames = (written[object] ?? []).intersection(names)
                var values: [String: Value] = [:]
                for name in writtenNames { values[name] = local[name] }
                if !values.isEmpty { try txn.update(object.type, primaryKey: object.key, values) }
                for (name, delta) in increments[object] ?? [:]
                where names.contains(name) && !writtenNames.contains(name) && delta != 0 {
                    try txn.increment([.property(name)], of: object.type, primaryKey: object.key, by: delta)
                }
                recovered += 1
            }
            return (recovered, deletedOnDaemon)
        }
    }
}
