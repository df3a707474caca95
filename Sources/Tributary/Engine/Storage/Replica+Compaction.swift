import Foundation
import Synchronization
import TributaryCompression
package import TributaryLog
package import TributaryMerge
package import TributaryModel
import TributaryStorage
import TributaryViews

/// What ``Replica/compact(through:recordsInMemory:now:stillAllowed:afterMarking:)`` did.
package struct CompactionOutcome: Sendable, Hashable {
    /// The marker now stored.
    package var compaction: LogCompaction
    /// The log entries removed.
    package var droppedEntries: Int
    /// The object records the new base holds (tombstones included).
    package var baseRecords: Int
}

/// A compacted log's base state, as a replica sends it to another that starts from it.
package struct BaseState: Sendable {
    /// The marker of the compaction that made it: its vector, held dots and latest stamp travel with it.
    package var compaction: LogCompaction
    /// The schema as of the base.
    package var schema: Schema
    /// Every record (tombstones included) as the views store it.
    package var records: [(key: RecordKey, record: [UInt8])]
    /// The relays' copies of changesets the base holds: each origin dot with its relay dots. Merges read them.
    package var adoptions: [(dot: Dot, relays: [Dot])]

    package init(
        compaction: LogCompaction, schema: Schema, records: [(key: RecordKey, record: [UInt8])],
        adoptions: [(dot: Dot, relays: [Dot])]
    ) {
        self.compaction = compaction
        self.schema = schema
        self.records = records
        self.adoptions = adoptions
    }
}

/// What a daemon last learned of a replica that synced with it: when, and what that replica held then.
package struct SyncReport: Sendable, Hashable {
    /// Seconds since 1970.
    package var time: UInt64
    /// The replica's version vector (at least: what its `hello` or acknowledgements said).
    package var vector: VersionVector

    package init(time: UInt64, vector: VersionVector) {
        self.time = time
        self.vector = vector
    }
}

extension Replica {
    static let syncReportsPrefix = Array("syncReports/".utf8)

    /// The reports stored by ``storeSyncReports(_:forgetting:)``. A damaged one reads as a replica seen at `now` that
    /// holds nothing, which holds every compaction back until the replica reports again or a retention passes.
    package func syncReports(now: UInt64) throws -> [ReplicaID: SyncReport] {
        do {
            return try environment.read { txn in
                var reports: [ReplicaID: SyncReport] = [:]
                try txn.scan(identity, from: Self.syncReportsPrefix, to: ViewStore.prefixEnd(Self.syncReportsPrefix)) {
                    key, value in
                    guard key.count == Self.syncReportsPrefix.count + 8 else { return true }
                    let replica = ReplicaID(
                        rawValue: key.loadUnaligned(fromByteOffset: Self.syncReportsPrefix.count, as: UInt64.self)
                            .bigEndian)
                    var reader = BinaryReader(Array(value), subject: "sync report of \(replica)")
                    if let time = try? reader.varint(), let vector = try? reader.versionVector() {
                        reports[replica] = SyncReport(time: time, vector: vector)
                    } else {
                        reports[replica] = SyncReport(time: now, vector: VersionVector())
                    }
                    return true
                }
                return reports
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    static let syncReportsSinceKey = Array("syncReportsSince".utf8)
    static let syncReportsRoundKey = Array("syncReportsRound".utf8)

    /// Since when this replica has kept reports of the replicas that sync with it without a gap (seconds since 1970),
    /// noting `now` as a round. Reports cover that time only: a daemon given a retention for the first time, or one
    /// that kept none for longer than `gap` (stopped, or run without a retention), starts again from `now`, so that
    /// no replica is taken for away because the daemon was not listening.
    package func syncReportsCoverage(now: UInt64, gap: UInt64) throws -> UInt64 {
        do {
            return try environment.write { txn in
                let since = try Self.identityNumber(
                    Self.syncReportsSinceKey, "sync reports' start", identity: identity, in: txn)
                let round = try Self.identityNumber(
                    Self.syncReportsRoundKey, "sync reports' round", identity: identity, in: txn)
                // Kept without a gap: there was a round before, and no longer than `gap` ago.
                let start =
                    since.flatMap { since in round.flatMap { now <= $0 || now - $0 <= gap ? since : nil } } ?? now
                try txn.put(identity, key: Self.syncReportsSinceKey, value: Self.identityBytes(start))
                try txn.put(identity, key: Self.syncReportsRoundKey, value: Self.identityBytes(max(now, round ?? 0)))
                return start
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Stores reports of replicas that synced with this one, replacing those stored for the same replicas, and
    /// removes the reports of `forgetting`.
    package func storeSyncReports(_ reports: [ReplicaID: SyncReport], forgetting: Set<ReplicaID> = []) throws {
        guard !reports.isEmpty || !forgetting.isEmpty else { return }
        func key(_ replica: ReplicaID) -> [UInt8] {
            Self.syncReportsPrefix + withUnsafeBytes(of: replica.rawValue.bigEndian) { Array($0) }
        }
        do {
            try environment.write { txn in
                for (replica, report) in reports {
                    var writer = BinaryWriter()
                    writer.varint(report.time)
                    writer.versionVector(report.vector)
                    try txn.put(identity, key: key(replica), value: writer.bytes)
                }
                for replica in forgetting { try txn.delete(identity, key: key(replica)) }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The last entry of the longest prefix of the log whose changesets a replica with version vector `vector` holds
    /// (by their causal dots), short of the last entry: how far a compaction may go when every replica still served
    /// holds `vector`. Reads the entries after the current compaction, up to the first one `vector` lacks.
    package func compactionCut(coveredBy vector: VersionVector) throws -> UInt64 {
        do {
            return try environment.read { txn in
                let head = try log.headUnverified(in: txn).localSequence
                var cut = try log.compaction(in: txn)?.through ?? 0
                guard head > 1 else { return cut }
                let context = ZstdContext()
                try log.scan(in: txn, from: cut + 1, through: head - 1) { entry in
                    guard vector.includes(try log.changeset(of: entry, context: context).causalDot) else {
                        return false
                    }
                    cut = entry.localSequence
                    return true
                }
                return cut
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }
}

extension Replica {
    /// The database of base states (``baseDatabaseName``), opened with the replica; `nil` in a replica opened
    /// read-only that never had one.
    func baseDatabase() throws -> Database? {
        do {
            return try environment.openDatabases([Self.baseDatabaseName])[0]
        } catch let error as StorageError where error.code == .notFound && environment.configuration.readOnly {
            return nil
        }
    }

    static func baseKey(generation: UInt64, record: [UInt8] = []) -> [UInt8] {
        withUnsafeBytes(of: generation.bigEndian) { Array($0) } + record
    }

    /// The schema of base generation `generation`.
    func baseSchema(generation: UInt64, in txn: TributaryStorageReadTransaction) throws -> Schema {
        guard let base = try baseDatabase(), let bytes = try txn.get(base, key: Self.baseKey(generation: generation))
        else {
            throw TributaryError(
                .corrupted,
                "replica \(directory): its log was compacted, but the base state it starts from (generation "
                    + "\(generation)) is missing; restore this replica from a peer or a backup")
        }
        var reader = BinaryReader(bytes, subject: "the schema of the base state")
        return try reader.schema()
    }

    /// Visits the records of base generation `generation`, in view key order.
    func scanBase(
        generation: UInt64, in txn: TributaryStorageReadTransaction,
        _ body: (RecordKey, ObjectRecord) throws -> Void
    ) throws {
        guard let base = try baseDatabase() else { return }
        let prefix = Self.baseKey(generation: generation)
        var failure: (any Error)?
        try txn.scan(base, from: prefix + [0], to: Self.baseKey(generation: generation + 1)) { key, value in
            do {
                let recordKey = try Self.recordKey(ofBaseKey: key, in: directory)
                let record: ObjectRecord
                do throws(ChangesetDecodingError) {
                    record = try ObjectRecord(decoding: Array(value))
                } catch {
                    throw error.inRecord(of: recordKey)
                }
                try body(recordKey, record)
                return true
            } catch {
                failure = error
                return false
            }
        }
        if let failure { throw failure }
    }

    /// The record key under a base generation's 8-byte prefix.
    ///
    /// - Throws: ``TributaryError`` with `.corrupted` naming `directory` when the bytes are not a record's key.
    static func recordKey(ofBaseKey key: UnsafeRawBufferPointer, in directory: String) throws -> RecordKey {
        guard key.count > 8, let recordKey = ViewStore.recordKey(fromObjectKey: key[8...]) else {
            throw TributaryError(
                .corrupted, "replica \(directory): its base state holds a damaged key (\(key.count) bytes)")
        }
        return recordKey
    }

    /// Seeds a replay with the base a compaction left, if the log has one: its schema, records and version vector.
    func seedReplayFromBase(_ replayed: inout ReplayedState, in txn: TributaryStorageReadTransaction) throws {
        guard let compaction = try log.compaction(in: txn) else { return }
        replayed.working.schema = try baseSchema(generation: compaction.generation, in: txn)
        try scanBase(generation: compaction.generation, in: txn) { key, record in
            try replayed.working.setRecord(record, for: key)
        }
        // Merges ask whether a writer had seen a changeset through the relays' copies of it: those the base holds
        // were recorded by the entries it replaced.
        try log.forEachAdoption(in: txn) { dot, relays in
            for relay in relays where compaction.holds(relay) { replayed.working.recordAdoption(of: dot, as: relay) }
            return true
        }
        replayed.versionVector = compaction.vector
        replayed.held = compaction.held
        replayed.latest = compaction.latest
    }

    /// Throws ``TributaryError/Code/historyCompacted`` when a replica with version vector `vector` lacks changesets
    /// that only the base of `compaction` holds (counting only `origins`, when given).
    static func checkCovers(
        _ vector: VersionVector, compaction: LogCompaction, origins: Set<ReplicaID>?, directory: String
    ) throws {
        for entry in compaction.vector.entries where vector[entry.replica] < entry.sequence {
            if let origins, !origins.contains(entry.replica) { continue }
            throw TributaryError(
                .historyCompacted,
                "replica \(directory) compacted its history: changesets of \(entry.replica) through \(entry.sequence) "
                    + "are held only in its base state, and the other replica holds them only through "
                    + "\(vector[entry.replica]); it must start again from the base state (a client reset)")
        }
    }

    /// The number of log entries, and the last entry a compaction replaced (0 for none).
    package func logFigures() throws -> (entries: Int, compactedThrough: UInt64) {
        do {
            return try environment.read { txn in
                (try log.count(in: txn), try log.compaction(in: txn)?.through ?? 0)
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The compaction marker, if the log was ever compacted (or started from a base).
    package func logCompaction() throws -> LogCompaction? {
        do {
            return try environment.read { txn in try log.compaction(in: txn) }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Replaces the log's entries 1 through `through` (at most all but the last entry) with a base state: the records
    /// and schema a replay of them builds. Those entries are then removed, 10,000 per write transaction, so that
    /// writers go on meanwhile; replay, ``verify(progress:)`` and ``rebuildViews()`` start from the base from then on.
    /// A replica whose version vector does not include the base's can no longer be sent what it lacks
    /// (``TributaryError/Code/historyCompacted``).
    ///
    /// The base is built in scratch views in the system's temporary directory, holding at most `recordsInMemory`
    /// records in memory, then copied beside the log under a new generation; the commit that stores the marker
    /// switches to it. Interrupted before that commit, the replica is as it was (the next compaction overwrites the
    /// partial generation); after it, only the removal of dropped entries and of the previous base is left, which the
    /// next compaction finishes.
    ///
    /// - Parameters:
    ///   - stillAllowed: asked, with the cut, just before the commit that stores the marker: `false` abandons the
    ///     compaction (the replicas it must serve changed while the base was built).
    ///   - afterMarking: called after the commit that stores the marker, before the dropped entries are removed (the
    ///     crash drill stops the process there).
    ///   - includingLastEntry: whether the last entry may be compacted too, leaving the log empty: only for a copy
    ///     that is read as a base and never written again (``startingNewHistory(from:directory:replicaID:configuration:)``).
    /// - Returns: what it did, or `nil` when `through` drops nothing new, or `stillAllowed` said no.
    @discardableResult
    package func compact(
        through: UInt64, recordsInMemory: Int = rebuildRecordsInMemory,
        now: UInt64 = UInt64(Date().timeIntervalSince1970), stillAllowed: ((UInt64) throws -> Bool)? = nil,
        afterMarking: (() -> Void)? = nil, includingLastEntry: Bool = false
    ) throws -> CompactionOutcome? {
        guard !configuration.readOnly else {
            throw TributaryError(.readOnly, "replica \(directory) was opened read-only; compaction removes log entries")
        }
        let scratchDirectory = FileManager.default.temporaryDirectory
            .appendingPathComponent("tributary-compact-\(UUID().uuidString)").path
        do {
            guard let base = try baseDatabase() else { return nil }
            let (previous, cut) = try environment.read { txn -> (LogCompaction?, UInt64) in
                let head = try log.headUnverified(in: txn).localSequence
                return (try log.compaction(in: txn), head > 0 ? min(through, includingLastEntry ? head : head - 1) : 0)
            }
            guard cut > (previous?.through ?? 0) else {
                try finishDropping(previous, base: base)
                return nil
            }
            try FileManager.default.createDirectory(atPath: scratchDirectory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: scratchDirectory) }
            var storage = Environment.Configuration()
            storage.durability = .noSync
            storage.initialMapSize = 64 << 20
            let scratch = try Environment.open(path: scratchDirectory, configuration: storage)
            defer { scratch.close() }
            let scratchViews = try ViewStore(environment: scratch)
            let generation = (previous?.generation ?? 0) + 1
            // The base as of `cut`, from the previous base and the entries after it.
            let (replayed, chain) = try environment.read { txn in
                let rebuilt = RebuiltViews(views: scratchViews, target: .environment(scratch))
                let replayed = try replay(in: txn, through: cut, into: rebuilt, recordsInMemory: recordsInMemory)
                return (replayed, try log.entry(cut, in: txn).checksum)
            }
            // A partial generation of an interrupted compaction goes first.
            try removeBase(generations: generation..<(generation + 1), from: base)
            var records = 0
            var after: [UInt8]?
            while true {
                let batch = try scratch.read { txn in
                    var batch: [(key: [UInt8], value: [UInt8])] = []
                    try txn.scan(scratchViews.objects, from: after.map { $0 + [0] }) { key, value in
                        batch.append((Array(key), Array(value)))
                        return batch.count < 10_000
                    }
                    return batch
                }
                guard let last = batch.last else { break }
                try environment.write { txn in
                    for (key, value) in batch {
                        try txn.put(base, key: Self.baseKey(generation: generation, record: key), value: value)
                    }
                }
                records += batch.count
                after = last.key
            }
            if let stillAllowed, try !stillAllowed(cut) { return nil }
            let compaction = LogCompaction(
                through: cut, chain: chain, vector: replayed.versionVector, held: replayed.held,
                latest: replayed.latest, time: now, generation: generation)
            try environment.write { txn in
                var schema = BinaryWriter()
                schema.schema(replayed.working.schema)
                try txn.put(base, key: Self.baseKey(generation: generation), value: schema.bytes)
                try log.storeCompaction(compaction, in: txn)
                // Stored whole: the entries dropped may include the last, whose dot the stored vector may lack.
                try views.setVersionVector(
                    try versionVector(in: txn), through: try log.headUnverified(in: txn).localSequence, in: txn)
                try removeObjectStates(through: cut, in: txn)
            }
            afterMarking?()
            let dropped = try finishDropping(compaction, base: base)
            return CompactionOutcome(compaction: compaction, droppedEntries: dropped, baseRecords: records)
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Removes the entries a stored compaction dropped and the base generations before its own, 10,000 keys per
    /// write transaction. Returns the number of entries removed.
    @discardableResult
    private func finishDropping(_ compaction: LogCompaction?, base: Database) throws -> Int {
        guard let compaction else { return 0 }
        var dropped = 0
        while true {
            let removed = try environment.write { txn in
                try log.dropEntries(through: compaction.through, limit: 10_000, in: txn)
            }
            dropped += removed
            if removed == 0 { break }
        }
        try removeBase(generations: 0..<compaction.generation, from: base)
        return dropped
    }

    /// Removes every key of the base generations in `generations` (one range of keys), 10,000 per write transaction.
    private func removeBase(generations: Range<UInt64>, from base: Database) throws {
        guard !generations.isEmpty else { return }
        let end = generations.upperBound == .max ? nil : Self.baseKey(generation: generations.upperBound)
        while true {
            let removed = try environment.write { txn in
                var keys: [[UInt8]] = []
                try txn.scan(base, from: Self.baseKey(generation: generations.lowerBound), to: end) { key, _ in
                    keys.append(Array(key))
                    return keys.count < 10_000
                }
                for key in keys { try txn.delete(base, key: key) }
                return keys.count
            }
            if removed == 0 { return }
        }
    }

    /// Removes the object states a daemon sent up to log position `through`: a base built through there holds them.
    private func removeObjectStates(through: UInt64, in txn: TributaryStorageWriteTransaction) throws {
        var keys: [[UInt8]] = []
        try txn.scan(identity, from: Self.objectStatesPrefix, to: ViewStore.prefixEnd(Self.objectStatesPrefix)) {
            key, _ in
            guard key.count == Self.objectStatesPrefix.count + 16 else { return true }
            let after = key.loadUnaligned(fromByteOffset: Self.objectStatesPrefix.count, as: UInt64.self).bigEndian
            guard after <= through else { return false }
            keys.append(Array(key))
            return true
        }
        for key in keys { try txn.delete(identity, key: key) }
    }

    /// The base state the log starts from, whole, as another replica installs it (``installBase(_:now:)``), or `nil`
    /// when the log was never compacted. A daemon sends it in parts instead (``baseReader()``).
    package func baseState() throws -> BaseState? {
        guard let reader = try baseReader() else { return nil }
        var base = BaseState(
            compaction: reader.compaction, schema: reader.schema, records: [], adoptions: [])
        while let part = try reader.next(maximumBytes: .max) {
            base.records += part.records
            base.adoptions += part.adoptions
        }
        return base
    }

    /// A reader of the base state the log starts from, part by part, on one snapshot (a compaction that runs
    /// meanwhile does not change what it reads), or `nil` when the log was never compacted.
    package func baseReader() throws -> BaseReader? {
        do {
            let snapshot = try environment.snapshot()
            guard let base = try baseDatabase(),
                let compaction = try snapshot.read({ txn in try log.compaction(in: txn) })
            else { return nil }
            let (schema, records) = try snapshot.read { txn in
                var records = 0
                try txn.scan(
                    base, from: Self.baseKey(generation: compaction.generation) + [0],
                    to: Self.baseKey(generation: compaction.generation + 1)
                ) { _, _ in
                    records += 1
                    return true
                }
                return (try baseSchema(generation: compaction.generation, in: txn), records)
            }
            return BaseReader(
                replica: self, snapshot: snapshot, base: base, compaction: compaction, schema: schema,
                recordCount: records)
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Starts a replica that holds nothing but its own changesets (what an app wrote before its first sync, its
    /// schema's declaration at least) from a base state another replica sent: a daemon whose log was compacted. The
    /// base's records, schema, adoptions and version vector become this replica's, its own changesets are applied on
    /// top of them again (they are concurrent with everything the base holds), and the log goes on after them. Replay
    /// and ``verify(progress:)`` start from the base from then on.
    ///
    /// This is ``stageBasePart(records:adoptions:first:)`` with the whole base, then
    /// ``finishBase(schema:vector:held:latest:now:)``.
    ///
    /// - Throws: ``TributaryError`` with `.invalidValue` when this replica holds changesets of other replicas, or a
    ///   base already; `.invalidChangeset` when a record does not decode (nothing is stored).
    package func installBase(_ base: BaseState, now: UInt64 = UInt64(Date().timeIntervalSince1970)) throws {
        try stageBasePart(records: base.records, adoptions: base.adoptions, first: true)
        try finishBase(
            schema: base.schema, vector: base.compaction.vector, held: base.compaction.held,
            latest: base.compaction.latest, now: now)
    }

    /// Keeps a part of a base state being received, in its own commit, until ``finishBase(schema:vector:held:latest:now:)``
    /// makes it the replica's: records under the base's first generation, adoptions beside them. The first part
    /// (`first`) removes what an interrupted earlier transfer left. Nothing is read from it before the finish.
    ///
    /// - Throws: ``TributaryError`` with `.invalidChangeset` when a record does not decode (nothing of this part is
    ///   stored), `.invalidValue` when this replica's log was compacted already.
    package func stageBasePart(
        records: [(key: RecordKey, record: [UInt8])], adoptions: [(dot: Dot, relays: [Dot])], first: Bool
    ) throws {
        do {
            guard let database = try baseDatabase() else {
                throw TributaryError(.readOnly, "replica \(directory) was opened read-only")
            }
            var keyed: [(key: [UInt8], value: [UInt8])] = []
            keyed.reserveCapacity(records.count + adoptions.count)
            for (key, bytes) in records {
                do {
                    _ = try ObjectRecord(decoding: bytes)
                } catch {
                    throw TributaryError(
                        .invalidChangeset,
                        "the base state sent holds a record of \(key) that does not decode (\(error))")
                }
                keyed.append(
                    (
                        Self.baseKey(
                            generation: Self.stagingGeneration,
                            record: ViewStore.objectKey(type: key.type, primaryKey: key.primaryKey)),
                        bytes
                    ))
            }
            for (dot, relays) in adoptions where !relays.isEmpty {
                keyed.append(
                    (
                        Self.baseKey(
                            generation: Self.stagingGeneration,
                            record: Self.stagedAdoptionMark + ChangesetLog.originKey(dot)),
                        relays.flatMap(ChangesetLog.originKey)
                    ))
            }
            try environment.read { txn in try checkTakesBase(held: nil, in: txn) }
            // What an interrupted earlier transfer left goes first; a live base is never of the staging generation.
            if first { try removeBase(generations: Self.stagingGeneration..<UInt64.max, from: database) }
            try environment.write { txn in
                try checkTakesBase(held: nil, in: txn)
                for (key, value) in keyed { try txn.put(database, key: key, value: value) }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Makes the staged base state (``stageBasePart(records:adoptions:first:)``) this replica's, in one commit: its
    /// schema, the adoptions, the compaction marker (through 0, holding `vector` and `held`), the clock moved past
    /// `latest`, and the views rebuilt from the base and this replica's own changesets.
    ///
    /// - Throws: ``TributaryError`` with `.invalidValue` when this replica holds changesets of other replicas, or a
    ///   base already.
    package func finishBase(
        schema: Schema, vector: VersionVector, held: VersionVector, latest: HybridTime,
        now: UInt64 = UInt64(Date().timeIntervalSince1970)
    ) throws {
        do {
            guard let database = try baseDatabase() else {
                throw TributaryError(.readOnly, "replica \(directory) was opened read-only")
            }
            try writeLock.withLock {
                let rebuilt = try environment.write { txn in
                    try checkTakesBase(held: held, in: txn)
                    var writer = BinaryWriter()
                    writer.schema(schema)
                    try txn.put(database, key: Self.baseKey(generation: 1), value: writer.bytes)
                    // The staged records become generation 1; the staged adoptions move to the log's adoptions,
                    // where merges read them.
                    let adoptionsFrom = Self.baseKey(
                        generation: Self.stagingGeneration, record: Self.stagedAdoptionMark)
                    var staged: [[UInt8]] = []
                    try txn.scan(database, from: Self.baseKey(generation: Self.stagingGeneration)) { key, value in
                        let stagedKey = Array(key)
                        if stagedKey.starts(with: adoptionsFrom) {
                            try txn.put(
                                log.adoptions, key: Array(stagedKey[adoptionsFrom.count...]), value: Array(value))
                        } else {
                            try txn.put(
                                database, key: Self.baseKey(generation: 1, record: Array(stagedKey[8...])),
                                value: Array(value))
                        }
                        staged.append(stagedKey)
                        return true
                    }
                    for key in staged { try txn.delete(database, key: key) }
                    try log.storeCompaction(
                        LogCompaction(
                            through: 0, chain: 0, vector: vector, held: held, latest: latest, time: now,
                            generation: 1),
                        in: txn)
                    let clock = try Self.identityNumber(Self.clockKey, "clock", identity: identity, in: txn) ?? 0
                    try txn.put(
                        identity, key: Self.clockKey, value: Self.identityBytes(max(clock, latest.rawValue)))
                    return try rebuildViews(in: txn, recordsInMemory: Self.rebuildRecordsInMemory)
                }
                let schema = withDeclaredLinkingObjects(rebuilt.0)
                state.withLock { state in
                    state.schema = schema
                    state.versionVector = rebuilt.1
                    state.clock = HybridLogicalClock(latest: max(state.clock.latest, latest))
                }
                modelNamesCache.withLock { $0 = ($0.generation &+ 1, nil) }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Where staged adoptions sort, after a generation's records: no type name (UTF-8) starts with this byte.
    static let stagedAdoptionMark: [UInt8] = [0xFF]

    /// The generation a base being received is kept under until it is complete: no compaction reaches it.
    static let stagingGeneration: UInt64 = 1 << 62

    /// Throws unless this replica may start from a base state: its log was never compacted, it holds no changeset of
    /// another replica (its version vector counts only itself), and, given the base's `held` dots, none of its own log
    /// entries is a changeset the base holds (a relay's adopted copy of an app's changeset that the base holds too
    /// would be applied twice).
    private func checkTakesBase(held: VersionVector?, in txn: TributaryStorageReadTransaction) throws {
        if try log.compaction(in: txn) != nil {
            throw TributaryError(
                .invalidValue, "replica \(directory) starts from a base state already; it cannot take another")
        }
        guard try versionVector(in: txn).entries.allSatisfy({ $0.replica == replicaID }) else {
            throw TributaryError(
                .invalidValue,
                "replica \(directory) holds changesets of other replicas; a base state starts only a replica that holds "
                    + "nothing but its own")
        }
        guard let held else { return }
        try log.scan(in: txn) { entry in
            if held.includes(entry.dot) {
                throw TributaryError(
                    .invalidValue,
                    "replica \(directory) holds changeset \(entry.dot), which the base state holds too; it cannot start "
                        + "from the base (reset it instead)")
            }
            return true
        }
    }
}

/// Reads a compacted replica's base state in parts, on one snapshot (``Replica/baseReader()``).
package final class BaseReader: @unchecked Sendable {
    // Used by one session at a time, from its actor: the snapshot's read transaction is not shared.
    private let replica: Replica
    private let snapshot: TributaryStorageSnapshot
    private let base: Database
    /// The marker of the compaction that made the base.
    package let compaction: LogCompaction
    /// The schema as of the base.
    package let schema: Schema
    /// How many records the base holds (tombstones included).
    package let recordCount: Int
    private var nextRecordKey: [UInt8]?
    private var recordsDone = false
    private var nextAdoptionKey: [UInt8]?
    private var adoptionsDone = false

    init(
        replica: Replica, snapshot: TributaryStorageSnapshot, base: Database, compaction: LogCompaction,
        schema: Schema, recordCount: Int
    ) {
        self.replica = replica
        self.snapshot = snapshot
        self.base = base
        self.compaction = compaction
        self.schema = schema
        self.recordCount = recordCount
        nextRecordKey = Replica.baseKey(generation: compaction.generation) + [0]
    }

    /// Reads no records from now on, only the adoptions (a flexible-sync app gets the base without records).
    package func skipRecords() { recordsDone = true }

    /// The next part: records, then the adoptions of changesets the base holds, up to about `maximumBytes` and at most
    /// `maximumCount` records (at least one item); `nil` once everything was read.
    package func next(maximumBytes: Int, maximumCount: Int = 10_000) throws -> (
        records: [(key: RecordKey, record: [UInt8])], adoptions: [(dot: Dot, relays: [Dot])]
    )? {
        do {
            return try snapshot.read { txn in
                var records: [(key: RecordKey, record: [UInt8])] = []
                var adoptions: [(dot: Dot, relays: [Dot])] = []
                var bytes = 0
                if !recordsDone, let from = nextRecordKey {
                    var failure: (any Error)?
                    var last: [UInt8]?
                    try txn.scan(base, from: from, to: Replica.baseKey(generation: compaction.generation + 1)) {
                        key, value in
                        guard bytes < maximumBytes, records.count < maximumCount else { return false }
                        do {
                            records.append((try Replica.recordKey(ofBaseKey: key, in: replica.directory), Array(value)))
                            bytes += key.count + value.count + 16
                            last = Array(key)
                            return true
                        } catch {
                            failure = error
                            return false
                        }
                    }
                    if let failure { throw failure }
                    if let last {
                        nextRecordKey = last + [0]
                    } else {
                        recordsDone = true
                    }
                }
                if recordsDone && !adoptionsDone && bytes < maximumBytes {
                    var last: [UInt8]?
                    try replica.log.forEachAdoption(in: txn, after: nextAdoptionKey) { dot, relays in
                        guard bytes < maximumBytes, adoptions.count < maximumCount else { return false }
                        last = ChangesetLog.originKey(dot)
                        let held = relays.filter(compaction.holds)
                        if !held.isEmpty {
                            adoptions.append((dot, held))
                            bytes += 16 * (held.count + 1)
                        }
                        return true
                    }
                    if let last { nextAdoptionKey = last } else { adoptionsDone = true }
                }
                return records.isEmpty && adoptions.isEmpty && recordsDone && adoptionsDone ? nil : (records, adoptions)
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }
}
