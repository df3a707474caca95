import Dispatch
import Foundation
import Synchronization
import TributaryCompression
import TributaryLog
import TributaryMerge
public import TributaryModel
import TributaryStorage
import TributaryViews

/// A replica: one directory holding a changeset log and the object views derived from it.
///
/// Open one with a schema (from model types, JSON or code), write in transactions, read in consistent
/// snapshots. Every write transaction becomes one changeset, appended to the log and applied to the views in the
/// same atomic, durable commit.
///
/// ```swift
/// let replica = try Replica.open(directory: "chat.tributary", models: [ChatMessage.self, User.self])
/// try replica.write { txn in try txn.create(ChatMessage(_id: "m1", text: "Hello")) }
/// let messages = try replica.objects(ChatMessage.self)
/// ```
///
/// A replica is `Sendable`: any thread or task may use it. Writes are serialized; reads run concurrently with
/// each other and with the writer, each on a snapshot of the last commit.
///
/// - Warning: Do not open one replica directory for writing from two processes at once. Read-only opens (such as
///   `tributary-log`) may run alongside a writer.
public final class Replica: Sendable {
    /// The replica format this build writes for a new replica; one whose log was compacted is raised to the next.
    /// A replica of a format later than this build reads is refused with
    /// ``TributaryError/Code/newerFormat``; one written by a development build before 0.1.0 with
    /// ``TributaryError/Code/developmentFormat``.
    public static var formatVersion: UInt8 { ReplicaFormat.current }

    /// The replica's directory.
    public let directory: String
    /// The replica's id, fixed when the directory was created.
    public let replicaID: ReplicaID
    /// The configuration it was opened with.
    public let configuration: Configuration
    let environment: Environment
    let log: ChangesetLog
    let views: ViewStore
    let identity: Database
    let pending: Database
    let writeLock = WriteLock()
    /// The pending area decoded, as of the pending generation it was read or written at: integration decodes it from
    /// storage again only when another handle changed it (see ``Replica/pendingGenerationKey``).
    let pendingCache = Mutex<PendingArea?>(nil)
    /// The zstd context commits compress their changesets with, and ``integrate(encoded:)`` decompresses received
    /// frames with: creating one per commit costs more than compressing a small changeset. It is used only while
    /// holding ``writeLock`` (by ``persist(_:head:in:)`` and by that decoding), which lets one thread in at a time:
    /// that is what makes sharing it safe.
    nonisolated(unsafe) let compressionContext = ZstdContext()
    let observers = ObserverRegistry()
    /// Wakes those who wait on the flexible-sync subscription sets.
    let subscriptionWatchers = SubscriptionWatchers()
    /// The flexible-sync sessions a daemon serves from this replica, by what their subscriptions select.
    let subscriptionIndex = SubscriptionIndex()
    /// The schema the app gave when it opened this replica, `nil` when it gave none. A model's values are those of
    /// the properties it declares (``Transaction/modelValues(_:)``): another release of the app, syncing with this
    /// one, may have added properties that this release's writes must leave alone.
    let appSchema = Mutex<Schema?>(nil)
    /// Whether ``appSchema`` declares computed properties (``ObjectSchema/linkingObjects``): read by every snapshot,
    /// which otherwise need not look at the app's schema.
    private let declaresLinkingObjects = Atomic<Bool>(false)
    /// Where the app's declared properties live in the merged schema (``ModelNames``), for the schema of the last
    /// commit that changed it (computed on first use; `generation` counts schema changes).
    let modelNamesCache = Mutex<(generation: UInt64, names: ModelNames?)>((0, nil))
    /// Where async writes run: one serial queue per replica, so one replica's long write never delays another's.
    let writerQueue = DispatchQueue(label: "tributary.writer")

    struct State: Sendable {
        var head: LogHead
        var versionVector: VersionVector
        var clock: HybridLogicalClock
        var schema: Schema
    }
    let state: Mutex<State>

    package static let identityDatabase = "replica"
    static let pendingDatabase = "pending"
    /// The database of base states: under an 8-byte generation, the schema; under the generation and a record's
    /// view key, the record as the views store it (a compacted log starts after one).
    static let baseDatabaseName = "base"
    static let replicaIDKey = Array("replicaID".utf8)
    static let clockKey = Array("clock".utf8)
    /// A counter that every commit changing the pending area raises, so that a handle knows whether its decoded copy
    /// of the pending area is current without reading the area.
    static let pendingGenerationKey = Array("pendingGeneration".utf8)

    /// How the identity database stores a number (the replica id, the clock, the pending generation): 8 bytes,
    /// little-endian, then their XXH64 checksum (8 bytes, little-endian). LMDB keeps no checksums: without one, a
    /// flipped bit in the replica id would make the replica write as another replica.
    static func identityBytes(_ number: UInt64) -> [UInt8] {
        var bytes = withUnsafeBytes(of: number.littleEndian) { Array($0) }
        let checksum = XXHash64.hash(bytes, seed: identityChecksumSeed)
        withUnsafeBytes(of: checksum.littleEndian) { bytes.append(contentsOf: $0) }
        return bytes
    }

    static let identityChecksumSeed: UInt64 = 0x7269_6465_6e74_6974  // "identit"

    /// The number stored as `bytes` by ``identityBytes(_:)``; `nil` when the bytes are of another length or fail
    /// their checksum.
    static func identityNumber(_ bytes: [UInt8]) -> UInt64? {
        guard bytes.count == 16 else { return nil }
        let number = bytes.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) }
        let stored = bytes.withUnsafeBytes {
            UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
        }
        guard stored == XXHash64.hash(Array(bytes[0..<8]), seed: identityChecksumSeed) else { return nil }
        return number
    }

    /// The number stored under `key` in the identity database, `nil` when there is none.
    ///
    /// - Throws: ``TributaryError`` with `.corrupted` naming `what` when the stored bytes are damaged.
    static func identityNumber(
        _ key: [UInt8], _ what: String, identity: Database, in txn: TributaryStorageReadTransaction
    ) throws -> UInt64? {
        guard let bytes = try txn.get(identity, key: key) else { return nil }
        return try checkedIdentityNumber(bytes, what)
    }

    /// The number stored as `bytes`.
    ///
    /// - Throws: ``TributaryError`` with `.corrupted` naming `what` when the bytes are damaged.
    static func checkedIdentityNumber(_ bytes: [UInt8], _ what: String) throws -> UInt64 {
        guard let number = identityNumber(bytes) else {
            throw TributaryError(
                .corrupted,
                "the replica's stored \(what) is damaged (\(bytes.count) bytes that fail their checksum): the storage "
                    + "file is corrupted; restore this replica from a peer or a backup")
        }
        return number
    }

    private init(
        directory: String, replicaID: ReplicaID, configuration: Configuration, environment: Environment,
        log: ChangesetLog, views: ViewStore, identity: Database, pending: Database,
        state: State
    ) {
        self.directory = directory
        self.replicaID = replicaID
        self.configuration = configuration
        self.environment = environment
        self.log = log
        self.views = views
        self.identity = identity
        self.pending = pending
        self.state = Mutex(state)
    }

    // MARK: Opening

    /// Opens the replica in `directory`, creating it when the directory is empty or missing.
    ///
    /// With a `schema`, a new replica starts with it, and an existing one checks it against the stored schema: the
    /// same schema opens as is; a different one at the same `Schema/version` fails with
    /// ``TributaryError/Code/migrationRequired`` listing every difference; a higher version migrates (see
    /// ``open(directory:schema:configuration:migration:)``). Without a schema, the stored one is used.
    ///
    /// - Throws: ``TributaryError`` with `.notAReplica` (the directory holds something else, or is damaged),
    ///   `.newerFormat`, `.developmentFormat` (a replica of a development build before 0.1.0; the message says how
    ///   to rebuild it), `.migrationRequired`, `.schemaMismatch`, or a storage code.
    public static func open(
        directory: String, schema: Schema? = nil, configuration: Configuration = Configuration(),
        migration: Migration? = nil
    ) throws -> Replica {
        do {
            let replica = try openStorage(directory: directory, configuration: configuration)
            if let schema {
                do {
                    try replica.reconcile(schema: schema, migration: migration)
                } catch let error as TributaryError
                    where error.code == .migrationRequired && configuration.deleteReplicaIfMigrationNeeded
                {
                    replica.environment.close()
                    try deleteReplicaFiles(in: directory)
                    let fresh = try openStorage(directory: directory, configuration: configuration)
                    try fresh.reconcile(schema: schema, migration: nil)
                    fresh.declare(schema)
                    return fresh
                }
                replica.declare(schema)
            }
            // Without a schema, the stored one is used; a new replica gets one with the first changesets it integrates.
            return replica
        } catch {
            throw TributaryError.wrap(error, context: "opening replica \(directory)")
        }
    }

    static func deleteReplicaFiles(in directory: String) throws {
        for name in ["data.mdb", "lock.mdb"] {
            let path = (directory as NSString).appendingPathComponent(name)
            if FileManager.default.fileExists(atPath: path) { try FileManager.default.removeItem(atPath: path) }
        }
    }

    private static func openStorage(directory: String, configuration: Configuration) throws -> Replica {
        var storage = Environment.Configuration()
        storage.initialMapSize = configuration.initialSizeBytes
        storage.maximumMapSize = max(configuration.maximumSizeBytes, configuration.initialSizeBytes)
        storage.readOnly = configuration.readOnly
        storage.maximumReaders = configuration.maximumReaders
        storage.durability =
            switch configuration.durability {
            case .full: .full
            case .relaxed: .noMetaSync
            case .none: .noSync
            }
        let environment: Environment
        switch Result(catching: { () throws(StorageError) in
            try Environment.open(path: directory, configuration: storage)
        }) {
        case .success(let opened):
            environment = opened
        case .failure(let error):
            if error.code == .invalidFile || error.code == .versionMismatch || error.code == .corrupted {
                throw TributaryError(
                    .notAReplica,
                    "\(directory) is not a Tributary replica, or it is damaged: \(error.message)", underlying: error)
            }
            if error.code == .notFound && configuration.readOnly {
                throw TributaryError(.notAReplica, "\(directory) does not exist or holds no replica", underlying: error)
            }
            throw error
        }

        let names = ChangesetLog.databaseNames + ViewStore.databaseNames + [identityDatabase, pendingDatabase]
        do {
            _ = try environment.openDatabases(names)
        } catch let error as StorageError where error.code == .notFound {
            throw TributaryError(.notAReplica, "\(directory) holds no Tributary replica", underlying: error)
        }
        let log = try ChangesetLog(environment: environment)
        let views = try ViewStore(environment: environment)
        // Opened here, before any transaction: a database opened after a read transaction began cannot be read in it.
        do {
            _ = try environment.openDatabases([baseDatabaseName])
        } catch let error as StorageError where error.code == .notFound && configuration.readOnly {
            // A replica never compacted, opened read-only: it has no base.
        }
        let databases = try environment.openDatabases([identityDatabase, pendingDatabase])
        let identity = databases[0]
        let pending = databases[1]

        // Identity: format and replica id, written once when the replica is created.
        func readIdentity() throws -> (format: [UInt8]?, developmentFormat: [UInt8]?, id: [UInt8]?) {
            try environment.read { txn in
                (
                    try txn.get(identity, key: ReplicaFormat.key),
                    try txn.get(identity, key: ReplicaFormat.developmentKey),
                    try txn.get(identity, key: replicaIDKey)
                )
            }
        }
        var stored = try readIdentity()
        if let development = stored.developmentFormat, stored.format == nil {
            throw TributaryError(
                .developmentFormat,
                ReplicaFormat.developmentFormatMessage(
                    directory: directory, developmentFormat: development.count == 1 ? development[0] : nil))
        }
        if stored.format == nil {
            guard !configuration.readOnly else {
                throw TributaryError(.notAReplica, "\(directory) holds no Tributary replica")
            }
            let id = configuration.replicaID ?? ReplicaID.random()
            try environment.write { txn in
                if try txn.get(identity, key: ReplicaFormat.key) == nil {
                    try txn.put(identity, key: ReplicaFormat.key, value: [ReplicaFormat.current])
                    try txn.put(identity, key: replicaIDKey, value: identityBytes(id.rawValue))
                }
            }
            stored = try readIdentity()
        }
        guard let format = stored.format, format.count == 1, let idBytes = stored.id else {
            throw TributaryError(.notAReplica, "\(directory) holds a damaged replica identity")
        }
        guard format[0] <= ReplicaFormat.newest else {
            throw TributaryError(
                .newerFormat,
                "\(directory) was written in replica format \(format[0]) by a newer release of Tributary; this build "
                    + "reads formats up to \(ReplicaFormat.newest). Upgrade Tributary to open it")
        }
        let replicaID = ReplicaID(rawValue: try checkedIdentityNumber(idBytes, "replica id"))
        let state = try environment.read { txn in
            try loadState(in: txn, log: log, views: views, identity: identity, head: try log.head(in: txn))
        }
        let replica = Replica(
            directory: directory, replicaID: replicaID, configuration: configuration, environment: environment,
            log: log, views: views, identity: identity, pending: pending, state: state)
        if format[0] < ReplicaFormat.current {
            try replica.upgradeFormat(from: format[0], steps: ReplicaFormat.upgrades)
        }
        return replica
    }

    /// The replica format the identity records in `txn`.
    ///
    /// - Throws: ``TributaryError`` with `.corrupted` when the stored format is damaged (an open checked it, so that
    ///   is damage found since).
    func storedFormat(in txn: TributaryStorageReadTransaction) throws -> UInt8 {
        guard let bytes = try txn.get(identity, key: ReplicaFormat.key), bytes.count == 1 else {
            throw TributaryError(.corrupted, "\(directory) holds a damaged replica format in its identity")
        }
        return bytes[0]
    }

    /// Raises this replica from format `stored` to ``ReplicaFormat/current`` by the registered `steps`, in one write
    /// transaction (``ReplicaFormat``).
    ///
    /// - Throws: ``TributaryError`` with `.readOnly` when the replica was opened read-only and a step rewrites what
    ///   this build reads (``ReplicaFormat/Upgrade/readsAsItIs``), `.notAReplica` when no step reads `stored`, or
    ///   what a step throws (the replica is then left as it was).
    func upgradeFormat(from stored: UInt8, steps registered: [ReplicaFormat.Upgrade]) throws {
        guard let steps = ReplicaFormat.steps(from: stored, to: ReplicaFormat.current, in: registered) else {
            throw TributaryError(
                .notAReplica,
                "\(directory) is in replica format \(stored), which no release of Tributary wrote; it is damaged")
        }
        guard !configuration.readOnly else {
            // What this build reads as it is, a read-only open reads without raising it.
            if steps.allSatisfy(\.readsAsItIs) { return }
            throw TributaryError(
                .readOnly,
                "\(directory) is in replica format \(stored); open it for writing once to raise it to format "
                    + "\(ReplicaFormat.current) (\(steps.map(\.summary).joined(separator: "; ")))")
        }
        do {
            // The state is read back in the same transaction, so that nothing can fail after the commit.
            let raised = try environment.write { txn -> State? in
                // Another process may have raised it first.
                guard let bytes = try txn.get(identity, key: ReplicaFormat.key), bytes.count == 1, bytes[0] == stored
                else { return nil }
                for step in steps { try step.apply(self, txn) }
                try txn.put(identity, key: ReplicaFormat.key, value: [ReplicaFormat.current])
                return try Self.loadState(
                    in: txn, log: log, views: views, identity: identity, head: try log.head(in: txn))
            }
            if let raised { self.state.withLock { $0 = raised } }
        } catch {
            let context = "raising \(directory) from replica format \(stored) to \(ReplicaFormat.current)"
            if let error = error as? TributaryError {
                throw TributaryError(error.code, "\(context): \(error.message)", underlying: error)
            }
            throw TributaryError.wrap(error, context: context)
        }
    }

    /// The replica's state as stored, with the log's head already read. The clock is the later of the stored one and
    /// the time of the log's last entry: a commit stores the clock only when it ran ahead of that entry
    /// (``persist(_:head:in:)``).
    static func loadState(
        in txn: TributaryStorageReadTransaction, log: ChangesetLog, views: ViewStore, identity: Database, head: LogHead
    ) throws -> State {
        var latest = HybridTime.zero
        if let clock = try identityNumber(clockKey, "clock", identity: identity, in: txn) {
            latest = HybridTime(rawValue: clock)
        }
        let last = head.localSequence > 0 ? try log.entry(head.localSequence, in: txn) : nil
        if let last { latest = max(latest, last.time) }
        let vector = versionVector(
            stored: try views.storedVersionVector(in: txn), last: last.map { ($0.localSequence, $0.dot) })
        let schema = try views.schema(in: txn) ?? Schema(types: [])
        return State(head: head, versionVector: vector, clock: HybridLogicalClock(latest: latest), schema: schema)
    }

    /// What the replica has integrated, as `txn` holds it: the stored version vector, advanced by the dot of the log's
    /// last entry when that entry came after the vector was stored. A commit whose only change to the vector is that
    /// dot leaves the stored vector as it was (``persist(_:head:in:)``), so that a local commit writes one page fewer.
    func versionVector(in txn: TributaryStorageReadTransaction) throws -> VersionVector {
        Self.versionVector(stored: try views.storedVersionVector(in: txn), last: try log.lastDot(in: txn))
    }

    /// The version vector `stored` with the log's `last` entry (see ``versionVector(in:)``). A vector stored by
    /// replica format 3 (`through` is `nil`) is whole; the next commit stores it again with its entry.
    static func versionVector(
        stored: (vector: VersionVector, through: UInt64?), last: (localSequence: UInt64, dot: Dot)?
    ) -> VersionVector {
        var vector = stored.vector
        if let last, let through = stored.through, last.localSequence > through {
            vector.advance(last.dot.origin, to: last.dot.sequence)
        }
        return vector
    }

    /// The state to write on: the cached one, unless another process committed since (the log's head moved), in
    /// which case it is read again inside the write transaction, so that nothing that process wrote is overwritten.
    func freshState(_ cached: State, in txn: TributaryStorageReadTransaction) throws -> State {
        let head = try log.headUnverified(in: txn)
        guard head != cached.head else { return cached }
        var state = try Self.loadState(in: txn, log: log, views: views, identity: identity, head: try log.head(in: txn))
        state.clock = HybridLogicalClock(latest: max(state.clock.latest, cached.clock.latest))
        _ = state.clock.tick(wallMilliseconds: configuration.clock.milliseconds())
        self.state.withLock { $0 = state }
        return state
    }

    /// Closes the replica: every later call fails with ``TributaryError/Code/closed``. The files are released when
    /// the last reference goes away.
    public func close() {
        environment.close()
        observers.finishAll()
        subscriptionWatchers.finish()
    }

    // MARK: State

    /// Whether ``close()`` was called (by any holder of the replica's storage): a closed replica reads and writes
    /// nothing.
    public var isClosed: Bool { environment.isClosed }

    /// The current schema.
    public var schema: Schema { state.withLock { $0.schema } }

    /// The schema the app opened this replica with, `nil` when it gave none: what a replica made in its place (a
    /// client reset) is opened with.
    package var schemaOpenedWith: Schema? { appSchema.withLock { $0 } }

    /// What this replica has integrated: the highest origin sequence from each replica.
    public var versionVector: VersionVector { state.withLock { $0.versionVector } }

    /// The local sequence of the last changeset in the log (0 for an empty log).
    public var lastLocalSequence: UInt64 { state.withLock { $0.head.localSequence } }

    /// Figures about the replica's storage.
    public var storageStatistics: StorageStatistics {
        let statistics = environment.statistics
        return StorageStatistics(
            mapSize: statistics.mapSize, usedBytes: statistics.usedBytes, pageSize: statistics.pageSize,
            readersUsed: statistics.readersUsed, maximumReaders: statistics.maximumReaders)
    }

    /// The read transactions running on the replica's storage now, in every process that has it open.
    public var storageReaders: StorageReaders {
        let readers = environment.readers
        return StorageReaders(
            slotsHeld: readers.slotsHeld, active: readers.active,
            oldestLagTransactions: readers.oldestLagTransactions)
    }

    // MARK: Writing

    /// Runs `body` in a write transaction and commits it: the changes become one changeset, appended to the log
    /// and applied to the views in one durable commit. If `body` throws, nothing is written and the error is
    /// rethrown.
    ///
    /// ```swift
    /// try replica.write { txn in
    ///     try txn.create("Task", ["_id": "t1", "title": "Write docs"])
    /// }
    /// ```
    /// Writes are serialized. The closure is synchronous on purpose: the storage transaction belongs to the
    /// thread that runs it. Use ``write(_:)-6oq0j`` from async code.
    ///
    /// - Precondition: not called inside another `write` on the same replica (that would deadlock).
    /// - Throws: what `body` throws, or ``TributaryError`` (`.diskFull`, `.mapFull`, `.transactionTooLarge`,
    ///   `.readOnly`, ...). After any error the replica holds exactly what it held before.
    @discardableResult
    public func write<T>(_ body: (Transaction) throws -> T) throws -> T {
        guard !configuration.readOnly else {
            throw TributaryError(.readOnly, "replica \(directory) was opened read-only")
        }
        return try writeLock.withLock { try performWrite(author: configuration.author, body) }
    }

    /// Runs `body` in a write transaction on a background thread and commits it.
    @discardableResult
    public func write<T: Sendable>(_ body: @escaping @Sendable (Transaction) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            writerQueue.async {
                continuation.resume(with: Result { try self.write(body) })
            }
        }
    }

    func performWrite<T>(author: String, _ body: (Transaction) throws -> T) throws -> T {
        var start = state.withLock { state -> State in
            let now = configuration.clock.milliseconds()
            _ = state.clock.tick(wallMilliseconds: now)
            return state
        }
        var outcome: (result: T, commit: PreparedCommit?)?
        var head = start.head
        do {
            try environment.write { storage in
                if outcome == nil {
                    start = try freshState(start, in: storage)
                    // Only a damaged stored vector counts this many; the next dot would not fit.
                    guard start.versionVector[replicaID] < .max else {
                        throw TributaryError(
                            .corrupted,
                            "replica \(directory): its stored version vector counts \(UInt64.max) changesets of its own, "
                                + "so no write can follow; the views are damaged (rebuild them from the log)")
                    }
                    let transaction = Transaction(replica: self, storage: storage, state: start, author: author)
                    defer { transaction.invalidate() }
                    let result = try body(transaction)
                    let commit = try transaction.prepareCommit()
                    if commit != nil { try checkWritesCovered(transaction.writtenTypes, in: storage) }
                    outcome = (result, commit)
                }
                if let commit = outcome?.commit { head = try self.persist(commit, head: start.head, in: storage) }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
        guard let outcome else { preconditionFailure("a write transaction ended without an outcome") }
        if let commit = outcome.commit { didCommit(commit, head: head) }
        return outcome.result
    }

    /// Everything a commit writes, computed once: if the map fills, the storage transaction is retried with the
    /// same commit.
    struct PreparedCommit {
        /// Each changeset's header with its encoding and, when it came compressed from a peer, the zstd frame it came
        /// in.
        var changesets: [(header: ChangesetCodec.Header, encoded: [UInt8], frame: [UInt8]?)]
        var changes: [RecordChange]
        var schema: Schema
        var schemaChanged: Bool
        var previousSchema: Schema
        var versionVector: VersionVector
        var clock: HybridTime
        var pendingRemovals: [[UInt8]] = []
        var pendingAdditions: [([UInt8], [UInt8])] = []
        /// The pending generation to store, when the pending area changes.
        var pendingGeneration: UInt64? = nil
        /// The encoded schema the app declared, to store with this commit (see ``Transaction/declaredSchema``).
        var declaredSchema: [UInt8]? = nil
        /// The schema version the replica's history starts at, to store with this commit: its first declaration's.
        var firstDeclaredVersion: UInt64? = nil
    }

    /// Writes a prepared commit into the storage transaction; returns the log's new head.
    func persist(_ commit: PreparedCommit, head: LogHead, in storage: WriteTransaction) throws -> LogHead {
        var head = head
        for (header, encoded, frame) in commit.changesets {
            try log.append(
                header, encoded: encoded, frame: frame, after: &head, in: storage, context: compressionContext)
        }
        try views.write(commit.changes, schema: commit.schema, in: storage)
        if commit.schemaChanged {
            try views.setSchema(commit.schema, in: storage)
            for type in Self.typesWithChangedIndexes(commit.previousSchema, commit.schema) {
                try views.rebuildIndexes(ofType: type, schema: commit.schema, in: storage)
            }
        }
        // Stored only when the commit changes it otherwise than by the dot of the last entry it appends, which every
        // reading adds back (``versionVector(in:)``): a local commit leaves the vector's page alone, one of the few
        // pages a durable commit writes.
        var implied: VersionVector?
        if let last = commit.changesets.last {
            implied = Self.versionVector(
                stored: try views.storedVersionVector(in: storage), last: (head.localSequence, last.header.dot))
        }
        if implied != commit.versionVector {
            try views.setVersionVector(commit.versionVector, through: head.localSequence, in: storage)
        }
        // Opening takes the later of the stored clock and the time of the log's last entry (``loadState``, as every
        // build has), so the clock is stored only when it ran ahead of the last entry this commit appends: a commit
        // that appended nothing, or whose last changeset, merged from a peer, is older than the clock. A local commit's
        // changeset carries the clock's time, and leaving the identity database alone spares a durable commit the
        // writing of one page of the few it writes.
        if commit.changesets.last?.header.time != commit.clock {
            try storage.put(identity, key: Self.clockKey, value: Self.identityBytes(commit.clock.rawValue))
        }
        for key in commit.pendingRemovals { try storage.delete(pending, key: key) }
        for (key, value) in commit.pendingAdditions { try storage.put(pending, key: key, value: value) }
        if let generation = commit.pendingGeneration {
            try storage.put(identity, key: Self.pendingGenerationKey, value: Self.identityBytes(generation))
        }
        if let declared = commit.declaredSchema {
            try storage.put(identity, key: Self.declaredSchemaKey, value: declared)
            try storage.put(identity, key: Self.declarationAnchorKey, value: ViewStore.encode(commit.versionVector))
        }
        if let version = commit.firstDeclaredVersion {
            try storage.put(identity, key: Self.firstDeclaredVersionKey, value: Self.identityBytes(version))
        }
        return head
    }

    /// The types whose index entries a schema change from `old` to `new` changes: their indexes are rebuilt. A removed
    /// type's entries go with it.
    static func typesWithChangedIndexes(_ old: Schema, _ new: Schema) -> [String] {
        // Whole definitions, not names: an object without a value is indexed under the property's default.
        func indexed(_ schema: Schema, _ name: String) -> [ViewStore.IndexedProperty] {
            let type = schema[type: name]
            return (type.map { ViewStore.indexedProperties(of: $0) } ?? [])
                .sorted { $0.property.name < $1.property.name }
        }
        let names = Set(old.types.map(\.name)).union(new.types.map(\.name)).sorted()
        return names.filter { indexed(old, $0) != indexed(new, $0) }
    }

    /// Keeps `schema` as the one the app opened the replica with, and gives the current schema its computed
    /// properties (``ObjectSchema/linkingObjects``).
    func declare(_ schema: Schema) {
        appSchema.withLock { $0 = schema }
        declaresLinkingObjects.store(
            schema.types.contains { !$0.linkingObjects.isEmpty }, ordering: .releasing)
        state.withLock { $0.schema = $0.schema.withLinkingObjects(of: schema) }
    }

    /// `schema`, a merged one, with the computed properties of the schema the app opened the replica with.
    func withDeclaredLinkingObjects(_ schema: Schema) -> Schema {
        guard declaresLinkingObjects.load(ordering: .acquiring) else { return schema }
        return schema.withLinkingObjects(of: appSchema.withLock { $0 })
    }

    func didCommit(_ commit: PreparedCommit, head: LogHead) {
        let schema = commit.schemaChanged ? withDeclaredLinkingObjects(commit.schema) : nil
        let previous = state.withLock { state in
            let previous = state.head.localSequence
            state.head = head
            state.versionVector = commit.versionVector
            if let schema { state.schema = schema }
            state.clock = HybridLogicalClock(latest: max(state.clock.latest, commit.clock))
            return previous
        }
        if commit.schemaChanged || commit.declaredSchema != nil {
            modelNamesCache.withLock { $0 = ($0.generation &+ 1, nil) }
        }
        // A commit that appended nothing (it only moved changesets into the pending area) concerns no session.
        if head.localSequence > previous {
            subscriptionIndex.committed(
                commit.changes, schemaChanged: commit.schemaChanged, schema: commit.schema,
                sequences: (previous + 1)...head.localSequence)
        }
        observers.notify(
            changedKeys: commit.changes.map(\.key), schemaChanged: commit.schemaChanged, sequence: head.localSequence)
    }

    // MARK: Reading

    /// Runs `body` with a consistent snapshot of the last commit.
    ///
    /// ```swift
    /// let count = try replica.read { snapshot in try snapshot.count("Task") }
    /// ```
    public func read<T>(_ body: (Snapshot) throws -> T) throws -> T {
        do {
            return try environment.read { storage in
                let snapshot = Snapshot(replica: self, storage: storage)
                defer { snapshot.invalidate() }
                return try body(snapshot)
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Runs `body` with a consistent snapshot of the last commit, on a background thread, so that a long read (a
    /// large query, an export) does not block the caller's task. Reads run alongside each other and alongside writes.
    ///
    /// ```swift
    /// let open = try await replica.read { snapshot in try snapshot.objects("Task", where: "done == false") }
    /// ```
    ///
    /// The snapshot is valid only inside `body`; return values, not the snapshot.
    public func read<T: Sendable>(_ body: @escaping @Sendable (Snapshot) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try self.read(body) })
            }
        }
    }

    /// The object of `type` with `primaryKey`, as of the last commit.
    public func object(_ type: String, primaryKey: PrimaryKey) throws -> DynamicObject? {
        try read { try $0.object(type, primaryKey: primaryKey) }
    }

    /// Every object of `type`, in primary key order, as of the last commit.
    public func objects(_ type: String) throws -> [DynamicObject] {
        try read { try $0.objects(type) }
    }
}

/// Figures about a replica's storage.
public struct StorageStatistics: Sendable, Hashable {
    /// The space reserved for the replica (it grows by itself up to the configured maximum).
    public var mapSize: Int
    /// The bytes in use, up to the last page written.
    public var usedBytes: Int
    /// The storage page size.
    public var pageSize: Int
    /// The reader slots in use, across processes.
    public var readersUsed: Int
    /// The reader slots available.
    public var maximumReaders: Int
}

/// The read transactions on a replica's storage, across processes.
public struct StorageReaders: Sendable, Hashable {
    /// Reader slots held: by a read transaction running now, or kept by a thread for its next one.
    public var slotsHeld: Int
    /// Read transactions running now.
    public var active: Int
    /// How many commits the oldest running read transaction is behind the last one (`nil` when none runs). The pages
    /// those commits freed are reused only once it ends: a number that keeps growing is a reader that never
    /// finishes, and the replica's file grows meanwhile.
    public var oldestLagTransactions: Int?
}
