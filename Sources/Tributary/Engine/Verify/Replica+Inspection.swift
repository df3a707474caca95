import Foundation
import TributaryCompression
import TributaryLog
import TributaryMerge
public import TributaryModel
import TributaryStorage
import TributaryViews

// Read-only inspection for tools (`tributary-log`): a consistent summary of a replica, one log entry's header, and a
// verification that rebuilds the views in a scratch directory, so that its memory does not grow with the replica.

/// A picture of a replica taken from one snapshot: identity, schema, log figures and object counts agree with each
/// other even while another process writes.
public struct ReplicaSummary: Sendable, Hashable {
    /// The number of live objects of one top-level type.
    public struct TypeCount: Sendable, Hashable {
        public var type: String
        public var objects: Int
    }

    /// The replica format the directory is in (at most ``Replica/formatVersion``).
    public var formatVersion: UInt8
    /// The stored schema.
    public var schema: Schema
    /// What the replica had integrated.
    public var versionVector: VersionVector
    /// The local sequence of the log's last entry (0 for an empty log).
    public var lastLocalSequence: UInt64
    /// Counts and sizes of the log.
    public var log: LogStatistics
    /// Live objects per top-level type, in type name order.
    public var objectCounts: [TypeCount]
    /// Figures about the replica's storage file.
    public var storage: StorageStatistics
    /// The properties that replicas defined with different shapes, as the merge resolved them (rule 8).
    public var schemaConflicts: [SchemaConflict]
}

extension Replica {
    /// A summary of the replica read from one snapshot.
    ///
    /// - Complexity: O(n + m) for n log entries (each checksum is checked) and m objects.
    /// - Throws: ``TributaryError`` with `.corrupted` naming the first damaged log entry, or a storage code.
    package func summary() throws -> ReplicaSummary {
        do {
            return try environment.read { txn in
                let format = try storedFormat(in: txn)
                let schema = try views.schema(in: txn) ?? Schema(types: [])
                let vector = try versionVector(in: txn)
                var statistics = LogStatistics(changesets: 0, instructions: 0, storedBytes: 0, uncompressedBytes: 0)
                var last: UInt64 = 0
                try log.scan(in: txn) { entry in
                    statistics.changesets += 1
                    statistics.instructions += Int(entry.instructionCount)
                    statistics.storedBytes += entry.storedSize
                    statistics.uncompressedBytes += Int(entry.uncompressedLength)
                    last = entry.localSequence
                    return true
                }
                var counts: [ReplicaSummary.TypeCount] = []
                for type in schema.types where !type.isEmbedded {
                    var count = 0
                    try views.scanRecords(ofType: type.name, in: txn) { _, record in
                        if record.exists { count += 1 }
                        return true
                    }
                    counts.append(ReplicaSummary.TypeCount(type: type.name, objects: count))
                }
                let conflicts = try SchemaConflict.conflicts(in: schema, changedSince: nil) { type, each in
                    try views.scanRecords(ofType: type, in: txn) { _, record in
                        each(record)
                        return true
                    }
                }
                return ReplicaSummary(
                    formatVersion: format, schema: schema, versionVector: vector, lastLocalSequence: last,
                    log: statistics, objectCounts: counts, storage: storageStatistics, schemaConflicts: conflicts)
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The header of the log entry at `localSequence`, its checksum checked, or `nil` when the log has no such
    /// entry. Unlike ``forEachLogEntry(from:through:_:)`` it does not check the chain to the entry before, so one
    /// damaged entry does not hide the next.
    ///
    /// - Throws: ``TributaryError`` with `.corrupted` when the entry is damaged.
    package func logEntry(at localSequence: UInt64) throws -> LogEntrySummary? {
        do {
            return try environment.read { txn in
                do {
                    return LogEntrySummary(try log.entry(localSequence, in: txn))
                } catch let error as LogError where error.code == .missingEntry {
                    return nil
                }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Checks the replica as ``verify(progress:)`` does, in memory bounded by `recordsInMemory` rather than by the
    /// number of objects: the log is replayed into views in `scratchDirectory` (an LMDB environment written without
    /// flushing), as ``rebuildViews()`` rebuilds the views but committing each write, and those are compared with the
    /// stored views in key order, a chunk at a time.
    ///
    /// Runs on one snapshot of this replica, alongside writers. The replica is not changed. `scratchDirectory` must
    /// not hold anything; the caller removes it afterwards.
    ///
    /// - Parameters:
    ///   - scratchDirectory: a directory that does not exist yet, or is empty.
    ///   - recordsInMemory: the most records the replay keeps in memory before it writes them to the scratch views.
    ///   - progress: called every 1,024 changesets replayed with the number replayed so far and the total, and now
    ///     and then during the comparison that follows (with the same figures).
    /// - Returns: a report whose ``VerificationReport/firstProblem`` names the first damaged entry or differing
    ///   view, if any, in the words ``verify(progress:)`` uses.
    /// - Throws: ``TributaryError`` when storage cannot be read, or the scratch directory cannot be written
    ///   (`.invalidValue` when it is not empty).
    /// - Complexity: O(n) in the log entries and stored records; memory O(`recordsInMemory`) records, and the
    ///   relays' adoptions (a changeset that removes a type loads that type's keys; the indexes of a type are built
    ///   from its records at the end, in memory).
    package func verify(
        rebuildingIn scratchDirectory: String, recordsInMemory: Int = rebuildRecordsInMemory,
        progress: ((Int, Int) -> Void)? = nil
    ) throws -> VerificationReport {
        if let contents = try? FileManager.default.contentsOfDirectory(atPath: scratchDirectory), !contents.isEmpty {
            throw TributaryError(
                .invalidValue,
                "\(scratchDirectory) is not empty; verify rebuilds the views in an empty scratch directory")
        }
        do {
            var storage = Environment.Configuration()
            storage.durability = .noSync
            storage.initialMapSize = 64 << 20
            let scratch = try Environment.open(path: scratchDirectory, configuration: storage)
            defer { scratch.close() }
            let scratchViews = try ViewStore(environment: scratch)
            // The scratch views take about as much room as the replica: made up front, so that the map seldom grows.
            try scratch.reserve(additionalBytes: environment.statistics.usedBytes)
            return try environment.read { txn in
                try verify(in: txn, progress: progress) { progress in
                    // Each write is committed: held in one transaction, the pages it changed would stay in memory.
                    let rebuilt = RebuiltViews(views: scratchViews, target: .environment(scratch))
                    let replayed = try replay(
                        in: txn, into: rebuilt, recordsInMemory: recordsInMemory, progress: progress)
                    return (
                        replayed, ChunkedScan(database: scratchViews.objects, of: rebuilt),
                        ChunkedScan(database: scratchViews.indexes, of: rebuilt)
                    )
                }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }
}
