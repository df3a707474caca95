import Foundation
import Synchronization
import TributaryCompression
import TributaryLog
import TributaryMerge
public import TributaryModel
import TributaryStorage
import TributaryViews

/// The state a replay of the log rebuilt: the schema and every object, as of one local sequence.
public struct ReplayedObjects: Sendable {
    /// The local sequence replayed through.
    public var localSequence: UInt64
    /// The schema as of that point.
    public var schema: Schema
    /// Every object that existed then, sorted by type name and primary key.
    public var objects: [DynamicObject]
    /// What the replica had integrated by then.
    public var versionVector: VersionVector
}

extension Replica {
    /// Rebuilds the state as of local sequence `localSequence` by replaying the log from its start, checking every
    /// entry on the way. The replica is not changed.
    ///
    /// - Complexity: O(n) in the changesets replayed; memory in proportion to the objects.
    package func objects(asOf localSequence: UInt64, progress: ((Int) -> Void)? = nil) throws -> ReplayedObjects {
        do {
            return try environment.read { txn in
                if let compaction = try log.compaction(in: txn), localSequence < compaction.through {
                    throw TributaryError(
                        .historyCompacted,
                        "the log was compacted through entry \(compaction.through): the state as of entry "
                            + "\(localSequence) is no longer held")
                }
                var replayed = try replay(in: txn, through: localSequence, progress: progress)
                let schema = replayed.working.schema
                var records: [RecordKey: ObjectRecord] = [:]
                for change in replayed.working.takeChanges() {
                    if let after = change.after { records[change.key] = after }
                }
                let materializer = Materializer(schema: schema) { type, key in
                    records[RecordKey(type: type, primaryKey: key)]?.exists ?? false
                }
                var objects: [DynamicObject] = []
                for key in records.keys.sorted() {
                    guard let record = records[key], record.exists, let type = schema[type: key.type] else { continue }
                    objects.append(try materializer.object(type: type, primaryKey: key.primaryKey, record: record))
                }
                return ReplayedObjects(
                    localSequence: min(
                        localSequence, (try log.compaction(in: txn)?.through ?? 0) + UInt64(replayed.changesets)),
                    schema: schema, objects: objects,
                    versionVector: replayed.versionVector)
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Writes a new replica directory holding this replica's log through `localSequence` (entries copied byte for
    /// byte, so checksums and the chain carry over) and views rebuilt from it. The new replica gets its own
    /// replica id, so that writing to it never collides with this one. A flexible-sync replica's object states (the
    /// objects its daemon sent whole) up to that point are carried over too, so that the views equal this replica's.
    ///
    /// - Parameter directory: a directory that does not exist yet, or is empty.
    /// - Returns: the new replica, open.
    /// - Throws: ``TributaryError`` with `.invalidValue` when `directory` holds anything, `.corrupted` for a damaged
    ///   entry in the copied range.
    @discardableResult
    package func replay(
        through localSequence: UInt64, into directory: String, configuration: Configuration = Configuration()
    )
        throws -> Replica
    {
        let objectStates = try environment.read { txn in
            var states: [(key: [UInt8], value: [UInt8])] = []
            try txn.scan(identity, from: Self.objectStatesPrefix, to: ViewStore.prefixEnd(Self.objectStatesPrefix)) {
                key, value in
                guard key.count == Self.objectStatesPrefix.count + 16 else { return true }
                let after = key.loadUnaligned(fromByteOffset: Self.objectStatesPrefix.count, as: UInt64.self).bigEndian
                guard after <= localSequence else { return false }
                states.append((Array(key), Array(value)))
                return true
            }
            return states
        }
        return try Self.copyLog(
            from: environment, log: log, through: localSequence, into: directory, objectStates: objectStates,
            configuration: configuration)
    }

    /// Writes a new replica directory from the log of the replica in `sourceDirectory`, as
    /// ``ReplicaInspection/replay(through:into:configuration:)`` does, without opening the source as a replica: it reads only the
    /// log, whose entries every build of Tributary wrote alike. This is how a replica written by a development build
    /// from before release 0.1.0, which ``open(directory:schema:configuration:migration:)`` refuses with
    /// ``TributaryError/Code/developmentFormat``, is carried over. The source is opened read-only and never changed.
    ///
    /// - Parameters:
    ///   - sourceDirectory: the replica directory whose log is read.
    ///   - directory: a directory that does not exist yet, or is empty.
    ///   - localSequence: the last entry to copy; `nil` for the whole log.
    ///   - configuration: how to open the new replica (its `readOnly` and `replicaID` are ignored).
    /// - Returns: the new replica, open, with a replica id of its own.
    /// - Throws: ``TributaryError`` with `.notAReplica` when `sourceDirectory` holds no log, `.invalidValue` when
    ///   `directory` holds anything, `.corrupted` for a damaged entry.
    @discardableResult
    public static func rebuild(
        fromLogOf sourceDirectory: String, into directory: String, through localSequence: UInt64? = nil,
        configuration: Configuration = Configuration()
    ) throws -> Replica {
        var storage = Environment.Configuration()
        storage.readOnly = true
        let source: Environment
        do {
            source = try Environment.open(path: sourceDirectory, configuration: storage)
        } catch {
            throw TributaryError(
                .notAReplica, "\(sourceDirectory) holds no Tributary replica whose log can be read: \(error.message)",
                underlying: error)
        }
        defer { source.close() }
        let log: ChangesetLog
        do {
            log = try ChangesetLog(environment: source)
        } catch {
            throw TributaryError(
                .notAReplica, "\(sourceDirectory) holds no Tributary changeset log", underlying: error as? StorageError)
        }
        return try copyLog(
            from: source, log: log, through: localSequence ?? .max, into: directory, configuration: configuration)
    }

    /// Copies `log` (in `source`) through `localSequence` into a new replica in `directory`, indexing each entry as the
    /// log indexes what it appends, and rebuilds the new replica's views from it.
    private static func copyLog(
        from source: Environment, log: ChangesetLog, through localSequence: UInt64, into directory: String,
        objectStates: [(key: [UInt8], value: [UInt8])] = [], configuration: Configuration
    ) throws -> Replica {
        if let contents = try? FileManager.default.contentsOfDirectory(atPath: directory), !contents.isEmpty {
            throw TributaryError(
                .invalidValue, "\(directory) is not empty; replay writes a new replica into an empty directory")
        }
        var target = configuration
        target.readOnly = false
        target.replicaID = nil
        let copy = try Replica.open(directory: directory, configuration: target)
        do {
            try source.read { sourceTxn in
                if let compaction = try log.compaction(in: sourceTxn) {
                    throw TributaryError(
                        .historyCompacted,
                        "the log was compacted"
                            + (compaction.through > 0
                                ? ": entries 1-\(compaction.through) were replaced by a base state"
                                : ": it starts from another replica's base state")
                            + ", so a replay of its entries alone cannot rebuild the replica; copy the directory "
                            + "instead (verify and rebuildViews start from the base)")
                }
                let end = min(localSequence, try log.head(in: sourceTxn).localSequence)
                guard end > 0 else { return }
                var next: UInt64 = 1
                let context = ZstdContext()
                while next <= end {
                    let batchEnd = min(end, next + 9_999)
                    try copy.environment.write { destination in
                        try log.scan(in: sourceTxn, from: next, through: batchEnd) { entry in
                            try destination.put(
                                copy.log.entries, key: ChangesetLog.key(entry.localSequence), value: entry.encoded())
                            // Indexed as the log indexes what it appends: relay dots and adoptions included.
                            let relay = try log.changeset(of: entry, context: context).relay
                            try copy.log.index(entry.dot, relay: relay, at: entry.localSequence, in: destination)
                            return true
                        }
                    }
                    next = batchEnd + 1
                }
            }
            if !objectStates.isEmpty {
                try copy.environment.write { txn in
                    // Each keeps its key (the log position it followed, then its number), and the count the
                    // highest number, so that states stored later sort after them.
                    var highest: UInt64 = 0
                    for (key, value) in objectStates {
                        try txn.put(copy.identity, key: key, value: value)
                        highest = max(
                            highest,
                            key.withUnsafeBytes {
                                $0.loadUnaligned(fromByteOffset: key.count - 8, as: UInt64.self).bigEndian
                            })
                    }
                    try txn.put(copy.identity, key: Self.objectStatesCountKey, value: Self.identityBytes(highest))
                }
            }
            try copy.rebuildViews()
            let head = try copy.environment.read { txn in try copy.log.head(in: txn) }
            copy.state.withLock { $0.head = head }
        } catch {
            copy.close()
            throw TributaryError.wrap(error)
        }
        return copy
    }
}
