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
    /// Every changeset replayed, by origin dot and relay dot (``LogCompaction/held``).
    var held = VersionVector()
    /// The latest stamp replayed (``LogCompaction/latest``).
    var latest = HybridTime.zero
}

extension Replica {
    /// Replays the log (through `end`, or all of it) into memory, checking every entry's checksum and chain. Throws
    /// ``LogError`` at a damaged entry, or one whose changeset the origin index does not find.
    ///
    /// - Parameter working: where to replay into: by default, an empty working set that keeps every record in
    ///   memory; ``replay(in:into:recordsInMemory:progress:)`` passes one that spills into views.
    func replay(
        in transaction: TributaryStorageReadTransaction, through end: UInt64? = nil,
        into working: WorkingSet = WorkingSet(source: EmptyRecordSource(), schema: Schema(types: [])),
        progress: ((Int) -> Void)? = nil
    ) throws -> ReplayedState {
        var replayed = ReplayedState(working: working)
        try seedReplayFromBase(&replayed, in: transaction)
        let context = ZstdContext()
        // Object states a daemon sent (flexible sync), each applied after the log entry it followed.
        var objectStates = try storedObjectStates(in: transaction)[...]
        func applyObjectStates(through position: UInt64) throws {
            while let first = objectStates.first, first.after <= position {
                for (key, record) in first.records { try replayed.working.setRecord(record, for: key) }
                objectStates.removeFirst()
            }
        }
        try log.scan(in: transaction, through: end) { entry in
            try applyObjectStates(through: entry.localSequence - 1)
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
            replayed.held.advance(changeset.origin, to: changeset.originSequence)
            if let relay = changeset.relay { replayed.held.advance(relay.origin, to: relay.sequence) }
            replayed.latest = max(replayed.latest, changeset.time)
            replayed.changesets += 1
            if replayed.changesets % 1024 == 0 { progress?(replayed.changesets) }
            return true
        }
        try applyObjectStates(through: end ?? .max)
        return replayed
    }

    /// Replays the whole log, read in `transaction`, into `rebuilt`'s views, which must be empty, keeping at most
    /// `recordsInMemory` records in memory: the replay writes its records into the views that many at a time, and
    /// loads them from there when a later changeset changes them again, so memory stays bounded however many
    /// objects the replica holds. At the end it writes the rest, and builds the indexes from the final schema. It
    /// does not store the schema or the version vector; the returned state holds them. Throws as
    /// ``replay(in:through:into:progress:)`` does, or a storage error of the views.
    ///
    /// This is how ``rebuildViews()`` rebuilds the views, and how a verification of a large replica builds scratch
    /// views to compare with the stored ones.
    func replay(
        in transaction: TributaryStorageReadTransaction, through end: UInt64? = nil, into rebuilt: RebuiltViews,
        recordsInMemory: Int, progress: ((Int) -> Void)? = nil
    ) throws -> ReplayedState {
        let views = rebuilt.views
        var working = WorkingSet(source: rebuilt, schema: Schema(types: []))
        working.spill = WorkingSet.Spill(threshold: recordsInMemory) { changes in
            try rebuilt.write { try views.write(changes, schema: Schema(types: []), updatingIndexes: false, in: $0) }
        }
        var replayed = try replay(in: transaction, through: end, into: working, progress: progress)
        let schema = replayed.working.schema
        let rest = replayed.working.takeChanges()
        try rebuilt.write { txn in
            try views.write(rest, schema: schema, updatingIndexes: false, in: txn)
            for type in schema.types where !ViewStore.indexedProperties(of: type).isEmpty {
                try views.rebuildIndexes(ofType: type.name, schema: schema, in: txn)
            }
        }
        return replayed
    }

    /// Checks the replica: every log entry's checksum and chain, then rebuilds the views by replaying the log and
    /// compares them with the stored views, byte for byte. Runs on a snapshot, alongside writers.
    ///
    /// A replica of up to 131,072 records is replayed in memory. A larger one is replayed into scratch views in the
    /// system's temporary directory (``ReplicaInspection/verify(rebuildingIn:progress:)``), keeping at most as many
    /// records in memory, as ``rebuildViews()`` does; the scratch directory is removed afterwards. Both find the same
    /// problems, in the same words.
    ///
    /// - Parameter progress: called now and then with the number of changesets replayed so far and the total.
    /// - Returns: a report whose ``VerificationReport/firstProblem`` names the first damaged entry or differing
    ///   view, if any.
    /// - Throws: ``TributaryError`` when storage cannot be read at all, or a large replica's scratch views cannot be
    ///   written.
    public func verify(progress: ((Int, Int) -> Void)? = nil) throws -> VerificationReport {
        try verify(recordsInMemory: Self.rebuildRecordsInMemory, progress: progress)
    }

    /// ``verify(progress:)``, replaying in memory when the views hold at most `recordsInMemory` records, and into
    /// scratch views holding at most `recordsInMemory` records in memory otherwise (tests use small bounds to check
    /// that both ways agree).
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
            return try verify(rebuildingIn: scratch, recordsInMemory: recordsInMemory, progress: progress)
        }
        do {
            return try environment.read { txn in
                try verify(in: txn, progress: progress) { progress in
                    var replayed = try replay(in: txn, progress: progress)
                    let expected = Self.expectedViews(replayed.working.takeChanges(), schema: replayed.working.schema)
                    return (replayed, expected.objects, expected.indexes)
                }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The object records and index entries that the records a replay into memory changed make, sorted as the views
    /// store them.
    private static func expectedViews(_ changes: [RecordChange], schema: Schema) -> (
        objects: SortedEntries, indexes: SortedEntries
    ) {
        var objects: [(key: [UInt8], value: [UInt8])] = []
        objects.reserveCapacity(changes.count)
        var indexes: [(key: [UInt8], value: [UInt8])] = []
        var indexedByType: [String: (ObjectSchema, [ViewStore.IndexedProperty])] = [:]
        for type in schema.types {
            let indexed = ViewStore.indexedProperties(of: type)
            if !indexed.isEmpty { indexedByType[type.name] = (type, indexed) }
        }
        for change in changes {
            guard let encoded = change.encodedAfter() else { continue }
            objects.append((ViewStore.objectKey(type: change.key.type, primaryKey: change.key.primaryKey), encoded))
            guard let (type, indexed) = indexedByType[change.key.type] else { continue }
            // Each entry names its object's primary key, so no two records produce the same one.
            for key in ViewStore.indexKeys(
                change.after, key: change.key, type: type, properties: indexed, schema: schema)
            {
                indexes.append((key, []))
            }
        }
        return (SortedEntries(objects), SortedEntries(indexes))
    }

    /// The checks of a verification, on a snapshot `txn` of the replica, whichever way the log is replayed.
    ///
    /// `replayLog` replays the log (reporting progress with the number of changesets replayed so far) and returns
    /// the replayed state with the object records and index entries the views must hold, in key order. Then come, in
    /// this order, the lookups by key, the log's adoptions, the schema, the version vector, the object records and
    /// the index entries; the first problem found ends the report.
    func verify<Expected: ExpectedEntries>(
        in txn: TributaryStorageReadTransaction, progress: ((Int, Int) -> Void)?,
        replaying replayLog: (_ progress: @escaping (Int) -> Void) throws -> (
            ReplayedState, objects: Expected, indexes: Expected
        )
    ) throws -> VerificationReport {
        var report = VerificationReport(changesetsChecked: 0, objectsCompared: 0, indexEntriesCompared: 0)
        let total = try log.count(in: txn)
        var replayed: ReplayedState
        var expectedObjects: Expected
        var expectedIndexes: Expected
        do {
            (replayed, expectedObjects, expectedIndexes) = try replayLog { progress?($0, total) }
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
        let heldVector = try versionVector(in: txn)
        if heldVector != replayed.versionVector {
            report.firstProblem =
                "the version vector the views hold, \(heldVector), differs from the replayed \(replayed.versionVector)"
            return report
        }

        // Object records, then index entries, in key order.
        let comparing: () -> Void = { progress?(replayed.changesets, total) }
        let objects = try compare(.objects, in: txn, with: &expectedObjects, progress: comparing)
        report.objectsCompared = objects.compared
        if let problem = objects.problem {
            report.firstProblem = problem
            return report
        }
        let indexes = try compare(.indexes, in: txn, with: &expectedIndexes, progress: comparing)
        report.indexEntriesCompared = indexes.compared
        report.firstProblem = indexes.problem
        return report
    }

    /// The stored views a verification compares with the replayed ones, and how a report words their differences.
    private enum ComparedView {
        case objects, indexes

        func extra(_ key: [UInt8]) -> String {
            switch self {
            case .objects: "the views hold an object the log does not create: \(Replica.describeRecordKey(key))"
            case .indexes: "the index holds an entry the log does not produce (\(Replica.describeIndexKey(key)))"
            }
        }

        func missing(_ key: [UInt8]) -> String {
            switch self {
            case .objects: "the views lack \(Replica.describeRecordKey(key)), which the log creates"
            case .indexes: "the index lacks an entry the log produces (\(Replica.describeIndexKey(key)))"
            }
        }
    }

    /// Walks the stored database of `view` and `expected` side by side, in key order, and returns how many entries
    /// agree and the first difference, in a report's words, if any. Index entries are keys alone: only object
    /// records' values are compared. Calls `progress` every 4,096 entries that agree.
    private func compare(
        _ view: ComparedView, in txn: TributaryStorageReadTransaction, with expected: inout some ExpectedEntries,
        progress: () -> Void
    ) throws -> (compared: Int, problem: String?) {
        var compared = 0
        var problem: String?
        var next = try expected.next()
        try txn.scan(view == .objects ? views.objects : views.indexes) { key, value in
            guard let want = next else {
                problem = view.extra(Array(key))
                return false
            }
            let order = Self.order(key, want.key)
            if order != 0 {
                problem = order < 0 ? view.extra(Array(key)) : view.missing(want.key)
                return false
            }
            if view == .objects && Self.order(value, want.value) != 0 {
                problem =
                    "\(Self.describeRecordKey(want.key)) differs from its replayed state "
                    + "(stored \(value.count) bytes, replayed \(want.value.count))"
                return false
            }
            compared += 1
            if compared % 4096 == 0 { progress() }
            next = try expected.next()
            return true
        }
        if problem == nil, let want = next { problem = view.missing(want.key) }
        return (compared, problem)
    }

    /// How `stored` sorts against `expected` in LMDB's key order (bytewise, a prefix first): negative, zero when they
    /// are equal, or positive.
    private static func order(_ stored: UnsafeRawBufferPointer, _ expected: [UInt8]) -> Int {
        expected.withUnsafeBytes { expected in
            let common = min(stored.count, expected.count)
            if common > 0 {
                let order = memcmp(stored.baseAddress!, expected.baseAddress!, common)
                if order != 0 { return Int(order) }
            }
            return stored.count - expected.count
        }
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
                let name = database.name == views.objects.name ? Self.describeRecordKey(key) : "a \(key.count)-byte key"
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

    /// `Type[primaryKey]` for an object record's storage key.
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
                let replayedVector = try environment.write { txn in
                    try rebuildViews(in: txn, recordsInMemory: recordsInMemory)
                }
                let schema = withDeclaredLinkingObjects(replayedVector.0)
                state.withLock { state in
                    state.schema = schema
                    state.versionVector = replayedVector.1
                }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }
}

extension Replica {
    /// Drops every view and rebuilds it, in `txn`, by replaying the log; returns the schema and version vector stored.
    /// The caller holds the write lock and updates the cached state.
    func rebuildViews(
        in txn: TributaryStorageWriteTransaction, recordsInMemory: Int
    ) throws -> (Schema, VersionVector) {
        try views.removeAll(in: txn)
        let replayed = try replay(
            in: txn, into: RebuiltViews(views: views, target: .transaction(txn)), recordsInMemory: recordsInMemory)
        let schema = replayed.working.schema
        try views.setSchema(schema, in: txn)
        try views.setVersionVector(
            replayed.versionVector, through: try log.headUnverified(in: txn).localSequence, in: txn)
        return (schema, replayed.versionVector)
    }
}

/// What a verification expects a view database to hold, in key order: the storage keys and values of the object
/// records, or of the index entries, that a replay of the log made.
protocol ExpectedEntries {
    /// The next entry in key order, or `nil` after the last.
    mutating func next() throws -> (key: [UInt8], value: [UInt8])?
}

/// The entries a replay into memory made, sorted once.
struct SortedEntries: ExpectedEntries {
    private let entries: [(key: [UInt8], value: [UInt8])]
    private var index = 0

    init(_ entries: [(key: [UInt8], value: [UInt8])]) {
        self.entries = entries.sorted { $0.key.lexicographicallyPrecedes($1.key) }
    }

    mutating func next() -> (key: [UInt8], value: [UInt8])? {
        guard index < entries.count else { return nil }
        defer { index += 1 }
        return entries[index]
    }
}

/// The entries of a database of rebuilt views, read in key order a chunk at a time: what the scratch views a replay
/// wrote hold, read while the stored views are scanned, in bounded memory.
struct ChunkedScan: ExpectedEntries {
    let database: Database
    let views: Replica.RebuiltViews
    var chunkSize = 512
    private var buffer: [(key: [UInt8], value: [UInt8])] = []
    private var index = 0
    /// The smallest key not read yet (the last key read, followed by a zero byte), or `nil` before the first read.
    private var resume: [UInt8]?
    private var exhausted = false

    init(database: Database, of views: Replica.RebuiltViews) {
        self.database = database
        self.views = views
    }

    mutating func next() throws -> (key: [UInt8], value: [UInt8])? {
        if index == buffer.count {
            guard !exhausted else { return nil }
            buffer.removeAll(keepingCapacity: true)
            index = 0
            let limit = chunkSize
            var chunk: [(key: [UInt8], value: [UInt8])] = []
            try views.read { txn in
                try txn.scan(database, from: resume) { key, value in
                    chunk.append((Array(key), Array(value)))
                    return chunk.count < limit
                }
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

extension Replica {
    /// How many records a rebuild of the views, or a verification of a replica that holds more, keeps in memory before
    /// it writes them (up to about a kilobyte each).
    ///
    /// Once it has written some, each object the replay meets for the first time is looked up in the views, and one
    /// it wrote is read back when a later changeset changes it. On a replica of 1M objects the rebuild was still the
    /// faster for it (1.95 s against 2.24 s holding every record), with less than half the peak memory.
    package static let rebuildRecordsInMemory = 131_072

    /// The views a replay writes its records into as it goes (``replay(in:into:recordsInMemory:progress:)``), and
    /// loads them back from: the records written so far. Unlike the replica's own source, it does not look adoptions
    /// up in the log, which holds those of changesets the replay has not reached yet; the replay knows the adoptions
    /// it made, as a replay into memory does.
    final class RebuiltViews: RecordSource {
        /// Where the views are written.
        enum Target {
            /// In one write transaction, which the loads read too: a rebuild of the replica's own views, which
            /// changes them all at once.
            case transaction(TributaryStorageWriteTransaction)
            /// In an environment of their own, each write committed, so that the pages it changed leave memory, and
            /// read from a snapshot taken after it: scratch views, which nothing else reads.
            case environment(Environment)
        }

        let views: ViewStore
        let target: Target
        /// What a target environment held after the last write.
        private var snapshot: TributaryStorageSnapshot?
        /// Whether any record was written yet: until then there is nothing to look up.
        private var hasRecords = false

        init(views: ViewStore, target: Target) {
            self.views = views
            self.target = target
        }

        /// Runs `body`, which writes to the views, in the target's transaction; what it wrote is then read. With a
        /// target environment, `body` may run again when the map grows.
        func write(_ body: (TributaryStorageWriteTransaction) throws -> Void) throws {
            switch target {
            case .transaction(let transaction):
                try body(transaction)
            case .environment(let environment):
                try environment.write(body)
                snapshot = try environment.snapshot()
            }
            hasRecords = true
        }

        /// `body`'s result on what was written so far, or `nil` before anything was.
        func read<T>(_ body: (TributaryStorageReadTransaction) throws -> T) throws -> T? {
            guard hasRecords else { return nil }
            switch target {
            case .transaction(let transaction): return try body(transaction)
            case .environment: return try snapshot?.read(body)
            }
        }

        func loadRecord(type: String, primaryKey: PrimaryKey) throws -> ObjectRecord? {
            try read { try views.record(type: type, primaryKey: primaryKey, in: $0) } ?? nil
        }

        func loadPrimaryKeys(ofType type: String) throws -> [PrimaryKey] {
            try read { try views.primaryKeys(ofType: type, in: $0) } ?? []
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
                for database in [views.objects, views.indexes, views.meta] {
                    try txn.scan(database) { key, value in
                        // The vector as the replica holds it, below: what is stored of it depends on which commit
                        // stored it last (``versionVector(in:)``).
                        if database == views.meta && key.elementsEqual(ViewStore.versionVectorKey) { return true }
                        mix(key)
                        mix(value)
                        return true
                    }
                }
                if includeVersionVector {
                    ViewStore.encode(try versionVector(in: txn)).withUnsafeBytes { mix($0) }
                }
                return digest
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }
}
