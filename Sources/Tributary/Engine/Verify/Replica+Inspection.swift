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
                let vector = try views.versionVector(in: txn)
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
                return ReplicaSummary(
                    formatVersion: format, schema: schema, versionVector: vector, lastLocalSequence: last,
                    log: statistics, objectCounts: counts, storage: storageStatistics)
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

    /// Checks the replica as ``verify(progress:)`` does, in memory bounded by `batchSize` rather than by the number
    /// of objects: the log is replayed in batches into views in `scratchDirectory` (an LMDB environment written
    /// without flushing), and those are compared with the stored views in key order, a chunk at a time.
    ///
    /// Runs on one snapshot of this replica, alongside writers. The replica is not changed. `scratchDirectory` must
    /// not hold anything; the caller removes it afterwards.
    ///
    /// - Parameters:
    ///   - scratchDirectory: a directory that does not exist yet, or is empty.
    ///   - batchSize: the most changesets replayed per scratch commit.
    ///   - progress: called after each batch with the number of changesets replayed so far and the total, and now
    ///     and then during the comparison that follows (with the same figures).
    /// - Returns: a report whose ``VerificationReport/firstProblem`` names the first damaged entry or differing
    ///   view, if any, in the words ``verify(progress:)`` uses.
    /// - Throws: ``TributaryError`` when storage cannot be read, or the scratch directory cannot be written
    ///   (`.invalidValue` when it is not empty).
    /// - Complexity: O(n) in the log entries and stored records; memory O(`batchSize`) changesets and the records
    ///   they touch (a changeset that removes a type loads that type's keys).
    package func verify(
        rebuildingIn scratchDirectory: String, batchSize: Int = 1_000, progress: ((Int, Int) -> Void)? = nil
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
            let scratchStore = try ViewStore(environment: scratch)
            return try environment.read { txn in
                return try verify(
                    in: txn, scratch: scratch, scratchViews: scratchStore, batchSize: max(1, batchSize),
                    progress: progress)
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    private func verify(
        in txn: TributaryStorageReadTransaction, scratch: Environment, scratchViews: ViewStore, batchSize: Int,
        progress: ((Int, Int) -> Void)?
    ) throws -> VerificationReport {
        var report = VerificationReport(changesetsChecked: 0, objectsCompared: 0, indexEntriesCompared: 0)
        let total = try log.count(in: txn)

        // 1. Replay the log into the scratch views, a batch per commit, as commits on the replica wrote them.
        var schema = Schema(types: [])
        var vector = VersionVector()
        var batch: [(changeset: Changeset, apply: Bool)] = []
        var adoptions = ChangesetLog.RebuiltAdoptions()
        var batchInstructions = 0
        var replayed = 0
        func flush() throws {
            guard !batch.isEmpty else { return }
            let before = schema
            // `write` may run its body again when the map grows: the body derives everything from `before` and
            // `batch`, and hands the new schema back.
            schema = try scratch.write { scratchTxn in
                var working = WorkingSet(
                    source: ReplicaRecordSource(
                        views: scratchViews, log: log, transaction: scratchTxn, logTransaction: txn),
                    schema: before)
                for (changeset, apply) in batch {
                    if apply {
                        try MergeEngine.apply(changeset, to: &working)
                    } else if let relay = changeset.relay {
                        // A relay's copy of a changeset this replica wrote earlier: it records the adoption only.
                        working.recordAdoption(of: changeset.dot, as: relay)
                    }
                }
                let after = working.schema
                try scratchViews.write(working.takeChanges(), schema: after, in: scratchTxn)
                if working.schemaChanged {
                    for type in Self.typesWithChangedIndexes(before, after) {
                        try scratchViews.rebuildIndexes(ofType: type, schema: after, in: scratchTxn)
                    }
                }
                return after
            }
            batch.removeAll(keepingCapacity: true)
            batchInstructions = 0
            progress?(replayed, total)
        }
        do {
            let context = ZstdContext()
            try log.scan(in: txn) { entry in
                let changeset = try log.changeset(of: entry, context: context)
                if let relay = changeset.relay {
                    adoptions.record(changeset.dot, relay: relay, at: entry.localSequence)
                }
                vector.advance(changeset.causalDot.origin, to: changeset.causalDot.sequence)
                batchInstructions += changeset.instructions.count
                batch.append((changeset, try log.isFirstEntry(entry, in: txn)))
                replayed += 1
                // Bound the batch by instructions too: one changeset may hold thousands.
                if batch.count >= batchSize || batchInstructions >= 20 * batchSize { try flush() }
                return true
            }
            try flush()
        } catch let error as LogError {
            // An entry's damage names the entry; other damage (a changeset's adoptions) stops the replay where it is.
            // (A failed batch was read, not applied: it is still in `batch`.)
            report.changesetsChecked =
                error.localSequence == 0 ? replayed - batch.count : max(0, Int(clamping: error.localSequence) - 1)
            report.firstProblem = error.message
            return report
        } catch let error as MergeError {
            report.changesetsChecked = try changesets(before: error, in: txn)
            report.firstProblem = "the log cannot be replayed: \(error)"
            return report
        }
        report.changesetsChecked = replayed
        progress?(replayed, total)
        if let problem = try firstLookupProblem(in: txn) ?? log.adoptionProblem(expected: adoptions, in: txn) {
            report.firstProblem = problem
            return report
        }

        // 2. Schema and version vector.
        let storedSchema = try views.schema(in: txn) ?? Schema(types: [])
        var expectedSchemaBytes = BinaryWriter()
        expectedSchemaBytes.schema(schema)
        var storedSchemaBytes = BinaryWriter()
        storedSchemaBytes.schema(storedSchema)
        if expectedSchemaBytes.bytes != storedSchemaBytes.bytes {
            report.firstProblem = "the stored schema differs from the replayed one"
            return report
        }
        let storedVector = try views.versionVector(in: txn)
        if storedVector != vector {
            report.firstProblem = "the stored version vector \(storedVector) differs from the replayed \(vector)"
            return report
        }

        // 3. Object records, then index entries, in key order, a chunk at a time from each side.
        return try scratch.read { scratchTxn in
            var stored = ChunkedScan(database: views.objects, transaction: txn)
            var expected = ChunkedScan(database: scratchViews.objects, transaction: scratchTxn)
            var compared = 0
            var problem: String?
            scan: while problem == nil {
                switch (try stored.next(), try expected.next()) {
                case (nil, nil):
                    break scan
                case (let have?, nil):
                    problem = "the views hold an object the log does not create: \(Self.describeRecordKey(have.key))"
                case (nil, let want?):
                    problem = "the views lack \(Self.describeRecordKey(want.key)), which the log creates"
                case (let have?, let want?) where have.key.lexicographicallyPrecedes(want.key):
                    problem = "the views hold an object the log does not create: \(Self.describeRecordKey(have.key))"
                case (let have?, let want?) where want.key.lexicographicallyPrecedes(have.key):
                    problem = "the views lack \(Self.describeRecordKey(want.key)), which the log creates"
                case (let have?, let want?):
                    if have.value != want.value {
                        problem =
                            "\(Self.describeRecordKey(want.key)) differs from its replayed state "
                            + "(stored \(have.value.count) bytes, replayed \(want.value.count))"
                    } else {
                        compared += 1
                        if compared % 4096 == 0 { progress?(replayed, total) }
                    }
                }
            }
            report.objectsCompared = compared
            if let problem {
                report.firstProblem = problem
                return report
            }

            var storedIndex = ChunkedScan(database: views.indexes, transaction: txn)
            var expectedIndex = ChunkedScan(database: scratchViews.indexes, transaction: scratchTxn)
            var indexCompared = 0
            index: while problem == nil {
                switch (try storedIndex.next(), try expectedIndex.next()) {
                case (nil, nil):
                    break index
                case (let have?, nil):
                    problem = "the index holds an entry the log does not produce (\(Self.describeIndexKey(have.key)))"
                case (nil, let want?):
                    problem = "the index lacks an entry the log produces (\(Self.describeIndexKey(want.key)))"
                case (let have?, let want?) where have.key.lexicographicallyPrecedes(want.key):
                    problem = "the index holds an entry the log does not produce (\(Self.describeIndexKey(have.key)))"
                case (let have?, let want?) where want.key.lexicographicallyPrecedes(have.key):
                    problem = "the index lacks an entry the log produces (\(Self.describeIndexKey(want.key)))"
                case (_?, _?):
                    indexCompared += 1
                    if indexCompared % 4096 == 0 { progress?(replayed, total) }
                }
            }
            report.indexEntriesCompared = indexCompared
            report.firstProblem = problem
            return report
        }
    }

    /// `Type["key"]` for an object record's storage key.
    static func describeRecordKey(_ key: [UInt8]) -> String {
        guard let zero = key.firstIndex(of: 0) else { return "\(key.count)-byte key" }
        let type = String(decoding: key[..<zero], as: UTF8.self)
        let primaryKey = KeyEncoding.primaryKey(from: key[(zero + 1)...]).map(\.description) ?? "?"
        return "\(type)[\(primaryKey)]"
    }

    /// `Type.property, N bytes` for an index entry's storage key.
    static func describeIndexKey(_ key: [UInt8]) -> String {
        let parts = key.split(separator: 0, maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2 else { return "\(key.count) bytes" }
        let type = String(decoding: parts[0], as: UTF8.self)
        let property = String(decoding: parts[1], as: UTF8.self)
        return "\(type).\(property), \(key.count) bytes"
    }
}

/// Reads a database in key order a chunk at a time, so that two databases can be walked side by side in bounded
/// memory without holding two cursors open across callbacks.
private struct ChunkedScan {
    let database: Database
    let transaction: TributaryStorageReadTransaction
    var chunkSize = 512
    private var buffer: [(key: [UInt8], value: [UInt8])] = []
    private var index = 0
    /// The smallest key not read yet (the last key read, followed by a zero byte), or `nil` before the first read.
    private var resume: [UInt8]?
    private var exhausted = false

    init(database: Database, transaction: TributaryStorageReadTransaction) {
        self.database = database
        self.transaction = transaction
    }

    mutating func next() throws -> (key: [UInt8], value: [UInt8])? {
        if index == buffer.count {
            guard !exhausted else { return nil }
            buffer.removeAll(keepingCapacity: true)
            index = 0
            let limit = chunkSize
            var chunk: [(key: [UInt8], value: [UInt8])] = []
            try transaction.scan(database, from: resume) { key, value in
                chunk.append((Array(key), Array(value)))
                return chunk.count < limit
            }
            if chunk.count < limit { exhausted = true }
            if let last = chunk.last { resume = last.key + [0] }
            buffer = chunk
            guard !buffer.isEmpty else { return nil }
        }
        defer { index += 1 }
        return buffer[index]
    }
}
