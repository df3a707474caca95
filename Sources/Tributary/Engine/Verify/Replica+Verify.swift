import Foundation
import Synchronization
import TributaryCompression
import TributaryLog
import TributaryMerge
import TributaryModel
import TributaryStorage
import TributaryViews

/// What ``Replica/verify(progress:)`` found.
public struct VerificationReport: Sendable, Hashable, CustomStringConvertible {
    /// The log entries whose checksums and chain were checked and whose changesets were replayed.
    public var changesetsChecked: Int
    /// The object records compared.
    public var objectsCompared: Int
    /// The index entries compared.
    public var indexEntriesCompared: Int
    /// The first problem found (a damaged entry, or a view that differs from the replayed log), or `nil`.
    public var firstProblem: String?

    /// Whether every check passed.
    public var passed: Bool { firstProblem == nil }

    public var description: String {
        let figures =
            "\(changesetsChecked) changesets, \(objectsCompared) objects, \(indexEntriesCompared) index entries"
        return passed
            ? "verified: \(figures); the views equal a replay of the log" : "FAILED: \(firstProblem!) (\(figures))"
    }
}

/// The state a replay of the log builds.
struct ReplayedState {
    var working: WorkingSet
    var versionVector = VersionVector()
    var changesets = 0
    /// The relays' copies the entries hold, for ``ChangesetLog/adoptionProblem(expected:in:)``.
    var adoptions = ChangesetLog.RebuiltAdoptions()
}

extension Replica {
    /// Replays the log (through `end`, or all of it) into memory, checking every entry's checksum and chain. Throws
    /// ``LogError`` at a damaged entry, or one whose changeset the origin index does not find.
    ///
    /// - Parameter working: where to replay into: by default, an empty working set that keeps every record in
    ///   memory; ``rebuildViews()`` passes one that spills into the views it rebuilds.
    func replay(
        in transaction: TributaryStorageReadTransaction, through end: UInt64? = nil,
        into working: WorkingSet = WorkingSet(source: EmptyRecordSource(), schema: Schema(types: [])),
        progress: ((Int) -> Void)? = nil
    ) throws -> ReplayedState {
        var replayed = ReplayedState(working: working)
        let context = ZstdContext()
        try log.scan(in: transaction, through: end) { entry in
            let changeset = try log.changeset(of: entry, context: context)
            if let relay = changeset.relay {
                replayed.adoptions.record(changeset.dot, relay: relay, at: entry.localSequence)
            }
            if try log.isFirstEntry(entry, in: transaction) {
                try MergeEngine.apply(changeset, to: &replayed.working)
            } else if let relay = changeset.relay {
                // A relay's copy of a changeset this replica wrote earlier: it records the adoption only.
                replayed.working.recordAdoption(of: changeset.dot, as: relay)
            }
            replayed.versionVector.advance(changeset.causalDot.origin, to: changeset.causalDot.sequence)
            replayed.changesets += 1
            if replayed.changesets % 1024 == 0 { progress?(replayed.changesets) }
            return true
        }
        return replayed
    }

    /// Checks the replica: every log entry's checksum and chain, then rebuilds the views by replaying the log and
    /// compares them with the stored views, byte for byte. Runs on a snapshot, alongside writers.
    ///
    /// A replica of up to 131,072 records is replayed in memory. A larger one is replayed into scratch views in the
    /// system's temporary directory, in batches (``ReplicaInspection/verify(rebuildingIn:batchSize:progress:)``), so that memory stays
    /// bounded whatever the replica's size; the scratch directory is removed afterwards. Both find the same problems,
    /// in the same words.
    ///
    /// - Parameter progress: called now and then with the number of changesets replayed so far and the total.
    /// - Returns: a report whose ``VerificationReport/firstProblem`` names the first damaged entry or differing
    ///   view, if any.
    /// - Throws: ``TributaryError`` when storage cannot be read at all, or a large replica's scratch views cannot be
    ///   written.
    public func verify(progress: ((Int, Int) -> Void)? = nil) throws -> VerificationReport {
        try verify(recordsInMemory: Self.rebuildRecordsInMemory, progress: progress)
    }

    /// ``verify(progress:)``, replaying in memory when the views hold at most `recordsInMemory` records (tests use
    /// small bounds to check that both ways agree).
    package func verify(recordsInMemory: Int, progress: ((Int, Int) -> Void)? = nil) throws -> VerificationReport {
        let records: Int
        do {
            records = try environment.read { txn in try txn.count(views.objects) }
        } catch {
            throw TributaryError.wrap(error)
        }
        if records > recordsInMemory {
            let scratch = FileManager.default.temporaryDirectory
                .appendingPathComponent("tributary-verify-\(UUID().uuidString)").path
            do {
                try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
            } catch {
                throw TributaryError(
                    .storage,
                    "verify replays this replica's \(records) records into scratch views on disk, and cannot create "
                        + "\(scratch): \(error.localizedDescription). Set TMPDIR to a writable directory with room for a "
                        + "copy of the views, or call verify(rebuildingIn:) with one")
            }
            defer { try? FileManager.default.removeItem(atPath: scratch) }
            return try verify(rebuildingIn: scratch, progress: progress)
        }
        do {
            return try environment.read { txn in try verify(in: txn, progress: progress) }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    func verify(in txn: TributaryStorageReadTransaction, progress: ((Int, Int) -> Void)?) throws -> VerificationReport {
        var report = VerificationReport(changesetsChecked: 0, objectsCompared: 0, indexEntriesCompared: 0)
        let total = try log.count(in: txn)
        var replayed: ReplayedState
        do {
            replayed = try replay(in: txn) { progress?($0, total) }
        } catch let error as LogError {
            report.changesetsChecked = max(0, Int(clamping: error.localSequence) - 1)
            report.firstProblem = error.message
            return report
        } catch let error as MergeError {
            report.changesetsChecked = try changesets(before: error, in: txn)
            report.firstProblem = "the log cannot be replayed: \(error)"
            return report
        }
        report.changesetsChecked = replayed.changesets
        progress?(replayed.changesets, total)

        if let problem = try firstLookupProblem(in: txn) ?? log.adoptionProblem(expected: replayed.adoptions, in: txn) {
            report.firstProblem = problem
            return report
        }

        // Schema and version vector.
        let storedSchema = try views.schema(in: txn) ?? Schema(types: [])
        var expectedSchemaBytes = BinaryWriter()
        expectedSchemaBytes.schema(replayed.working.schema)
        var storedSchemaBytes = BinaryWriter()
        storedSchemaBytes.schema(storedSchema)
        if expectedSchemaBytes.bytes != storedSchemaBytes.bytes {
            report.firstProblem = "the stored schema differs from the replayed one"
            return report
        }
        if try views.versionVector(in: txn) != replayed.versionVector {
            report.firstProblem =
                "the stored version vector \(try views.versionVector(in: txn)) differs from the replayed \(replayed.versionVector)"
            return report
        }

        // Object records, in key order. (`changes` sorts: take it once.)
        let changes = replayed.working.takeChanges()
        var expected: [([UInt8], [UInt8], RecordKey)] = []
        expected.reserveCapacity(changes.count)
        for change in changes {
            guard let encoded = change.encodedAfter() else { continue }
            expected.append(
                (ViewStore.objectKey(type: change.key.type, primaryKey: change.key.primaryKey), encoded, change.key))
        }
        expected.sort { $0.0.lexicographicallyPrecedes($1.0) }
        var index = 0
        var problem: String?
        try txn.scan(views.objects) { key, value in
            let storedKey = Array(key)
            guard index < expected.count else {
                problem = "the views hold an object the log does not create: \(describe(key: storedKey))"
                return false
            }
            let (expectedKey, expectedValue, recordKey) = expected[index]
            if storedKey != expectedKey {
                problem =
                    storedKey.lexicographicallyPrecedes(expectedKey)
                    ? "the views hold an object the log does not create: \(describe(key: storedKey))"
                    : "the views lack \(recordKey), which the log creates"
                return false
            }
            if Array(value) != expectedValue {
                problem =
                    "\(recordKey) differs from its replayed state (stored \(value.count) bytes, replayed \(expectedValue.count))"
                return false
            }
            index += 1
            return true
        }
        report.objectsCompared = index
        if problem == nil && index < expected.count {
            problem = "the views lack \(expected[index].2), which the log creates"
        }
        if let problem {
            report.firstProblem = problem
            return report
        }

        // Index entries.
        // Each entry names its object's primary key, so no two records produce the same one: an array, sorted once.
        var expectedIndex: [[UInt8]] = []
        let schema = replayed.working.schema
        var indexedByType: [String: (ObjectSchema, [ViewStore.IndexedProperty])] = [:]
        for type in schema.types {
            let indexed = ViewStore.indexedProperties(of: type)
            if !indexed.isEmpty { indexedByType[type.name] = (type, indexed) }
        }
        for change in changes {
            guard let (type, indexed) = indexedByType[change.key.type] else { continue }
            expectedIndex.append(
                contentsOf:
                    ViewStore.indexKeys(change.after, key: change.key, type: type, properties: indexed, schema: schema))
        }
        // In key order, side by side, as the scratch views' comparison walks them (the same problem, in the same words).
        expectedIndex.sort { $0.lexicographicallyPrecedes($1) }
        let expectedSorted = expectedIndex
        var matched = 0
        try txn.scan(views.indexes) { key, _ in
            let have = Array(key)
            if matched == expectedSorted.count || have.lexicographicallyPrecedes(expectedSorted[matched]) {
                problem = "the index holds an entry the log does not produce (\(Self.describeIndexKey(have)))"
                return false
            }
            if expectedSorted[matched].lexicographicallyPrecedes(have) {
                problem =
                    "the index lacks an entry the log produces (\(Self.describeIndexKey(expectedSorted[matched])))"
                return false
            }
            matched += 1
            return true
        }
        report.indexEntriesCompared = matched
        if problem == nil && matched < expectedSorted.count {
            problem = "the index lacks an entry the log produces (\(Self.describeIndexKey(expectedSorted[matched])))"
        }
        report.firstProblem = problem
        return report
    }

    /// The number of changesets replayed before the one that failed with `error`, as a report counts them.
    func changesets(before error: MergeError, in txn: TributaryStorageReadTransaction) throws -> Int {
        guard let dot = error.dot, let failed = try? log.localSequence(of: dot, in: txn) else { return 0 }
        return max(0, Int(failed) - 1)
    }

    /// What ``firstKeyLookupMisses(_:in:)`` finds in the log's and the views' databases, as a report says it, or `nil`.
    /// Lookups by key must find what a scan finds: a damaged branch page sends lookups to the wrong leaf while a scan,
    /// which walks the leaves in order, still sees every entry.
    func firstLookupProblem(in txn: TributaryStorageReadTransaction) throws -> String? {
        let lookedUp: [(Database, String)] = [
            (log.entries, "a log entry"), (log.origins, "an entry of the log's origin index"),
            (log.adoptions, "an entry of the log's adoptions"), (views.objects, "an object record"),
            (views.indexes, "an index entry"),
        ]
        for (database, what) in lookedUp {
            if let key = try Self.firstKeyLookupMisses(database, in: txn) {
                let name = database.name == views.objects.name ? describe(key: key) : "a \(key.count)-byte key"
                return
                    "the storage file is damaged: \(what) (\(name)) is stored, but a lookup by its key does not find it"
                    + (database.name == views.objects.name || database.name == views.indexes.name
                        ? "; rebuildViews() rewrites the views" : "; restore this replica from a peer or a backup")
            }
        }
        return nil
    }

    /// The first key of `database` that a scan finds and a lookup by that key does not (or finds with another
    /// value), or `nil`: what a damaged branch page of LMDB's B-tree looks like from outside.
    static func firstKeyLookupMisses(_ database: Database, in txn: TributaryStorageReadTransaction) throws -> [UInt8]? {
        var missed: [UInt8]?
        try txn.scan(database) { key, value in
            let storedKey = Array(key)
            let found = try txn.withValue(database, key: storedKey) { found in
                guard let found, found.count == value.count else { return false }
                return found.count == 0 || memcmp(found.baseAddress!, value.baseAddress!, found.count) == 0
            }
            if !found { missed = storedKey }
            return found
        }
        return missed
    }

    private func describe(key: [UInt8]) -> String {
        guard let zero = key.firstIndex(of: 0) else { return "\(key.count)-byte key" }
        let type = String(decoding: key[..<zero], as: UTF8.self)
        let primaryKey = KeyEncoding.primaryKey(from: key[(zero + 1)...]).map(\.description) ?? "?"
        return "\(type)[\(primaryKey)]"
    }

    /// Drops every view and rebuilds it by replaying the log: the repair for views that ``verify(progress:)``
    /// found differing. The log itself is not changed.
    public func rebuildViews() throws {
        try rebuildViews(recordsInMemory: Self.rebuildRecordsInMemory)
    }

    /// ``rebuildViews()``, keeping at most `recordsInMemory` records in memory (tests and the simulator use small
    /// numbers, so that records are written and loaded again often).
    package func rebuildViews(recordsInMemory: Int) throws {
        do {
            // The new views are written before the old ones' pages can be reused: make room for both up front, so
            // that a full map does not make the whole replay run twice.
            try environment.reserve(additionalBytes: environment.statistics.usedBytes)
            try writeLock.withLock {
                let replayedVector = try environment.write { txn -> (Schema, VersionVector) in
                    try views.removeAll(in: txn)
                    // The replay writes its records into the emptied views as it goes, a few thousand at a time, and
                    // loads them from there when a later changeset changes them again: memory stays bounded however
                    // many objects the replica holds. The indexes are built at the end, from the final schema.
                    let views = self.views
                    let source = RebuiltViews(views: views, transaction: txn)
                    var working = WorkingSet(source: source, schema: Schema(types: []))
                    working.spill = WorkingSet.Spill(threshold: recordsInMemory) { changes in
                        try views.write(changes, schema: Schema(types: []), updatingIndexes: false, in: txn)
                        source.hasRecords = true
                    }
                    var replayed = try replay(in: txn, into: working)
                    let schema = replayed.working.schema
                    try views.write(replayed.working.takeChanges(), schema: schema, updatingIndexes: false, in: txn)
                    for type in schema.types where !ViewStore.indexedProperties(of: type).isEmpty {
                        try views.rebuildIndexes(ofType: type.name, schema: schema, in: txn)
                    }
                    try views.setSchema(schema, in: txn)
                    try views.setVersionVector(replayed.versionVector, in: txn)
                    return (schema, replayed.versionVector)
                }
                state.withLock { state in
                    state.schema = replayedVector.0
                    state.versionVector = replayedVector.1
                }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }
}

extension Replica {
    /// How many records a rebuild of the views keeps in memory before it writes them (up to about a kilobyte each).
    ///
    /// Once it has written some, each object the replay meets for the first time is looked up in the views, and one
    /// it wrote is read back when a later changeset changes it. On a replica of 1M objects the rebuild was still the
    /// faster for it (1.95 s against 2.24 s holding every record), with less than half the peak memory.
    static let rebuildRecordsInMemory = 131_072

    /// What a rebuild of the views replays into: the records it wrote so far. Unlike the replica's own source, it
    /// does not look adoptions up in the log, which holds those of changesets the replay has not reached yet; the
    /// replay knows the adoptions it made, as a replay into memory does.
    final class RebuiltViews: RecordSource {
        let views: ViewStore
        let transaction: TributaryStorageReadTransaction
        /// Whether any record was written yet: until then there is nothing to look up.
        var hasRecords = false

        init(views: ViewStore, transaction: TributaryStorageReadTransaction) {
            self.views = views
            self.transaction = transaction
        }

        func loadRecord(type: String, primaryKey: PrimaryKey) throws -> ObjectRecord? {
            guard hasRecords else { return nil }
            return try views.record(type: type, primaryKey: primaryKey, in: transaction)
        }

        func loadPrimaryKeys(ofType type: String) throws -> [PrimaryKey] {
            guard hasRecords else { return [] }
            return try views.primaryKeys(ofType: type, in: transaction)
        }
    }

    /// The changeset at `localSequence`, decoded.
    ///
    /// - Throws: ``TributaryError`` with `.corrupted` when the entry is damaged or missing.
    package func changeset(at localSequence: UInt64) throws -> Changeset {
        do {
            return try environment.read { txn in try log.changeset(of: try log.entry(localSequence, in: txn)) }
        } catch {
            throw TributaryError.wrap(error)
        }
    }
}

extension Replica {
    /// A digest of the views (records, indexes, schema; the version vector too unless `includeVersionVector` is
    /// false): replicas that integrated the same changesets have equal digests. For tests and the simulator.
    package func viewDigest(includeVersionVector: Bool = true) throws -> UInt64 {
        do {
            return try environment.read { txn in
                var digest = XXHash64.hash([])
                func mix(_ bytes: UnsafeRawBufferPointer) {
                    var combined = withUnsafeBytes(of: digest) { Array($0) }
                    combined.append(contentsOf: bytes)
                    digest = XXHash64.hash(combined)
                }
                var databases = [views.objects, views.indexes]
                if includeVersionVector { databases.append(views.meta) }
                for database in databases {
                    try txn.scan(database) { key, value in
                        mix(key)
                        mix(value)
                        return true
                    }
                }
                if !includeVersionVector, let schema = try txn.get(views.meta, key: Array("schema".utf8)) {
                    schema.withUnsafeBytes { mix($0) }
                }
                return digest
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }
}
