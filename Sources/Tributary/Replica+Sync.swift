import Synchronization
import TributaryCompression
import TributaryLog
import TributaryMerge
public import TributaryModel
import TributaryStorage
import TributaryViews

/// What ``Replica/integrate(_:)`` did with a batch of changesets.
public struct IntegrationReport: Sendable, Hashable, CustomStringConvertible {
    /// Changesets applied and appended to the log, in the order they were applied.
    public var integrated: [Dot] = []
    /// Changesets already integrated (by origin and origin sequence), ignored.
    public var duplicates = 0
    /// Changesets waiting in the pending area for changesets they depend on (or for this replica's clock to
    /// reach their stamp); they are integrated by a later call, once those arrive.
    public var waiting = 0
    /// Changesets refused, with the reason: a schema conflict (rule 8) or an instruction that does not fit the
    /// schema. They are not stored; changesets that depend on them wait.
    public var rejected: [Rejection] = []
    /// The causal dots of the changesets the call received (integrated, duplicate, waiting or refused), in the order
    /// they came: what the sender holds. A sync layer need not send these back.
    public var received: [Dot] = []
    /// Properties that the changesets integrated defined differently from a definition the replica held (or from
    /// each other), as the merge resolved them: the latest definition is the property's, and values written under
    /// the others are kept aside (docs/MergeSemantics.md, rule 8). Empty unless such a conflict is new or changed.
    public var schemaConflicts: [SchemaConflict] = []

    /// An empty report.
    public init() {}

    public struct Rejection: Sendable, Hashable {
        public var dot: Dot
        public var reason: String

        public init(dot: Dot, reason: String) {
            self.dot = dot
            self.reason = reason
        }
    }

    public var description: String {
        "integrated \(integrated.count), duplicates \(duplicates), waiting \(waiting), rejected \(rejected.count)"
            + rejected.map { "\n  \($0.dot): \($0.reason)" }.joined()
            + schemaConflicts.map { "\n  schema conflict: \($0)" }.joined()
    }
}

/// One batch for ``Replica/integrate(batches:)``: changesets as bytes, to be adopted or integrated.
public struct IncomingChangesets: Sendable, Hashable {
    /// The changesets, in either form ``Replica/integrate(encoded:)`` takes.
    public var changesets: [[UInt8]]
    /// Whether they are an app's upload, adopted into the replica's own sequence (``Replica/adopt(_:)``), rather
    /// than a peer's changesets, integrated as they are.
    public var adopt: Bool

    /// When set, every changeset must name this author, or the batch fails with
    /// ``TributaryError/Code-swift.struct/permissionDenied`` and none of it is integrated: a daemon sets it to the
    /// user an app's session authenticated as.
    public var requiredAuthor: String?

    /// The writes a daemon refused in judging these changesets (an app's upload), stored in the same commit: the
    /// changesets as reduced by the judgement, and the record that the app must receive the objects' corrections,
    /// are kept together or not at all.
    package var refusals: [RefusalRecord] = []

    public init(_ changesets: [[UInt8]], adopt: Bool, requiredAuthor: String? = nil) {
        self.changesets = changesets
        self.adopt = adopt
        self.requiredAuthor = requiredAuthor
    }
}

/// What ``Replica/export(missingFrom:excluding:origins:limit:maximumBytes:)`` read: the next batch a sync layer
/// sends.
public struct ChangesetExport: Sendable, Hashable {
    /// The changesets, as the log stores them (what ``Replica/integrate(encoded:)`` takes), in log order.
    public var changesets: [[UInt8]]
    /// Their total size in bytes.
    public var bytes: Int
    /// The other replica's vector advanced past what `changesets` holds: what it holds once it has integrated them.
    /// Pass it to the next call.
    public var progress: VersionVector
    /// Whether the other replica lacks more than this export holds.
    public var more: Bool
    /// The local sequence of each changeset in this replica's log.
    package var localSequences: [UInt64] = []

    public init(changesets: [[UInt8]], bytes: Int, progress: VersionVector, more: Bool) {
        self.changesets = changesets
        self.bytes = bytes
        self.progress = progress
        self.more = more
    }
}

extension Replica {
    /// A pending changeset's key: its causal dot, laid out as the log's origin index lays out dots.
    static func pendingKey(_ dot: Dot) -> [UInt8] { ChangesetLog.originKey(dot) }

    /// The changesets this replica holds that a replica with version vector `vector` lacks, in this replica's log
    /// order (a causal order), at most `limit` of them.
    ///
    /// - Complexity: O(k log n) for k changesets missing from a log of n: found through the origin index, not by a
    ///   scan of the log. Plus, for each origin walked, a read of the adoptions of its changesets after what the
    ///   other replica's vector counts: for an app's upload (a relay's vector never counts the app) that is every
    ///   adoption of the app's changesets, in one range read.
    ///
    /// - Parameters:
    ///   - vector: the other replica's version vector.
    ///   - limit: the most changesets returned; the next call with the other replica's new vector returns the rest.
    ///   - origins: when given, only changesets from these origins that no relay adopted yet (a partial replica
    ///     uploads only its own; if the adoptions are damaged, adopted ones are sent again, which the relay drops as
    ///     duplicates).
    ///   - holds: when given, each changeset is projected for a partial replica: schema instructions and the
    ///     instructions on objects for which `holds` returns `true` are kept, the rest replaced by
    ///     `Instruction/omitted`. The projection keeps the changeset's identity, so the partial replica's version
    ///     vector stays complete. A partial replica must not export what it received this way.
    ///   - excluding: causal dots of changesets the other replica holds already though its vector does not count
    ///     them: its ``pendingDots()``. They are neither read nor sent, nor is an app's changeset as written when a
    ///     relay's copy of it is among them (or the vector counts one). A relay's copy of an app's changeset is named
    ///     by the relay's dot, so another relay's copy of it is still sent: the one that waits may wait for the
    ///     relay's earlier changesets, and the other may come in first.
    public func changesets(
        missingFrom vector: VersionVector, limit: Int = .max, origins: Set<ReplicaID>? = nil,
        holds: ((String, PrimaryKey) -> Bool)? = nil, excluding: Set<Dot> = []
    ) throws -> [Changeset] {
        try missingEntries(from: vector, limit: limit, origins: origins, excluding: excluding) { entry, _, context in
            var changeset = try log.changeset(of: entry, context: context)
            if let holds {
                changeset.instructions = changeset.instructions.map { instruction in
                    guard let object = instruction.object, !holds(object.type, object.primaryKey) else {
                        return instruction
                    }
                    return .omitted
                }
            }
            return changeset
        }
    }

    /// The changesets ``changesets(missingFrom:limit:origins:holds:excluding:)`` returns (without projection), as
    /// bytes: what a sync layer sends, read from the log without decoding them. The other replica passes them to
    /// ``integrate(encoded:)``.
    ///
    /// - Parameters:
    ///   - vector: the other replica's version vector.
    ///   - limit: the most changesets returned.
    ///   - origins: as for ``changesets(missingFrom:limit:origins:holds:excluding:)``.
    ///   - excluding: as for ``changesets(missingFrom:limit:origins:holds:excluding:)``.
    ///   - compressed: `false` (the default): each changeset as `ChangesetCodec` encodes it. `true`: each as the log
    ///     stores it, a zstd frame of that encoding when compressing made it smaller (most changesets of more than a
    ///     few instructions; the log's compression ratio is about 4.8). Neither side then runs zstd's compressor, and
    ///     the bytes on the wire shrink by that ratio. ``integrate(encoded:)`` tells the two apart.
    public func encodedChangesets(
        missingFrom vector: VersionVector, limit: Int = .max, origins: Set<ReplicaID>? = nil, excluding: Set<Dot> = [],
        compressed: Bool = false
    ) throws -> [[UInt8]] {
        try missingEntries(from: vector, limit: limit, origins: origins, excluding: excluding) { entry, _, context in
            compressed ? log.storedChangeset(of: entry) : try log.encodedChangeset(of: entry, context: context)
        }
    }

    /// The next batch of what a replica with version vector `vector` lacks, as the log stores it: at most `limit`
    /// changesets and about `maximumBytes` (always at least one changeset when anything is missing), in log order.
    /// ``ChangesetExport/progress`` is `vector` advanced past the batch: a sync layer sends batch after batch, each
    /// from the progress of the one before, without waiting for the other replica's vector.
    ///
    /// - Parameters:
    ///   - vector: what the other replica holds, or the progress of the previous export.
    ///   - excluding: as for ``changesets(missingFrom:limit:origins:holds:excluding:)``.
    ///   - origins: as for ``changesets(missingFrom:limit:origins:holds:excluding:)``: an app uploading its own.
    ///   - limit: the most changesets.
    ///   - maximumBytes: the size after which no further changeset is added.
    public func export(
        missingFrom vector: VersionVector, excluding: Set<Dot> = [], origins: Set<ReplicaID>? = nil,
        limit: Int = 1_000, maximumBytes: Int = 1 << 20
    ) throws -> ChangesetExport {
        var export = ChangesetExport(changesets: [], bytes: 0, progress: vector, more: false)
        // One more than `limit`, to know whether more is missing.
        _ = try missingEntries(
            from: vector, limit: limit == .max ? .max : limit + 1, origins: origins, excluding: excluding,
            withDots: true
        ) { entry, dots, _ -> Void? in
            if !export.changesets.isEmpty && (export.changesets.count >= limit || export.bytes >= maximumBytes) {
                export.more = true
                return nil
            }
            let stored = log.storedChangeset(of: entry)
            export.changesets.append(stored)
            export.localSequences.append(entry.localSequence)
            export.bytes += stored.count
            for dot in dots { export.progress.advance(dot.origin, to: dot.sequence) }
            return ()
        }
        return export
    }

    /// For each origin this replica's vector counts, its own included, the newest changeset of that origin it holds,
    /// and that changeset's fingerprint (of its origin, origin sequence and stamp). A sync session sends
    /// them, so that the other side can tell whether it holds the same changesets under those dots: a replica
    /// restored from a backup gives the dots it lost to other changesets. An origin whose newest changeset is not in
    /// the log (a flexible-sync replica skips those outside its view) gets no anchor.
    package func historyAnchors() throws -> [(dot: Dot, fingerprint: UInt64)] {
        do {
            return try environment.read { txn in
                var anchors: [(dot: Dot, fingerprint: UInt64)] = []
                for entry in try versionVector(in: txn).entries {
                    let dot = Dot(origin: entry.replica, sequence: entry.sequence)
                    if let fingerprint = try changesetFingerprint(at: dot, in: txn) {
                        anchors.append((dot, fingerprint))
                    }
                }
                return anchors
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// This replica's own changesets with an origin sequence above `sequence`, in their order, whether or not a relay
    /// adopted them: what a client reset recovers when the daemon lost them.
    package func ownChangesets(after sequence: UInt64) throws -> [Changeset] {
        do {
            return try environment.read { txn in
                let context = ZstdContext()
                return try log.originEntries(from: replicaID, after: sequence, in: txn).map { dot, localSequence in
                    try log.changeset(of: try log.entry(localSequence, in: txn), context: context)
                }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The fingerprint of the changeset this replica holds under `dot` (its origin dot, or the dot a relay adopted it
    /// as): `nil` when it holds none. Two different changesets have different fingerprints: a replica stamps each of
    /// its changesets with a later hybrid time than the one before, also after a restore from a backup (the wall
    /// clock went on). Read from the log entry's header, so that a large changeset is not decompressed for it.
    package func changesetFingerprint(at dot: Dot) throws -> UInt64? {
        do {
            return try environment.read { txn in try changesetFingerprint(at: dot, in: txn) }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    private func changesetFingerprint(at dot: Dot, in txn: TributaryStorageReadTransaction) throws -> UInt64? {
        guard let localSequence = try log.localSequence(of: dot, in: txn) else { return nil }
        // A changeset that only a compaction's base holds has no entry left to fingerprint.
        if let compaction = try log.compaction(in: txn), localSequence <= compaction.through || localSequence == 0 {
            return nil
        }
        let entry = try log.entry(localSequence, in: txn)
        var bytes: [UInt8] = []
        for number in [entry.origin.rawValue, entry.originSequence, entry.time.rawValue] {
            withUnsafeBytes(of: number.littleEndian) { bytes.append(contentsOf: $0) }
        }
        return XXHash64.hash(bytes, seed: 0x616e_6368_6f72)  // "anchor"
    }

    /// The highest origin sequence of `origin`'s changesets this replica holds, as written or as a relay adopted
    /// them, or 0. A daemon tells an app where to resume its upload: its vector does not count the apps whose
    /// changesets it adopted.
    public func heldSequence(of origin: ReplicaID) throws -> UInt64 {
        do {
            return try environment.read { txn in
                try heldSequence(of: origin, vector: try versionVector(in: txn), in: txn)
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// ``heldSequence(of:)`` in a transaction whose version vector is `vector`: also the changesets of `origin` that a
    /// compaction's base holds.
    func heldSequence(
        of origin: ReplicaID, vector: VersionVector, in txn: TributaryStorageReadTransaction
    ) throws -> UInt64 {
        let held = try log.originEntries(from: origin, after: vector[origin], in: txn).last?.dot.sequence
        return max(held ?? 0, vector[origin], try log.compaction(in: txn)?.held[origin] ?? 0)
    }

    /// Reads, in log order, the entries of the changesets a replica with version vector `vector` lacks, and makes
    /// each into an element of the result with `element`, which also gets the dots `vector` would count the entry
    /// under (its origin's, and a relay's if one adopted it) when `withDots`, and stops the read by returning `nil`.
    private func missingEntries<Element>(
        from vector: VersionVector, limit: Int, origins: Set<ReplicaID>?, excluding: Set<Dot>, withDots: Bool = false,
        _ element: (LogEntry, [Dot], ZstdContext) throws -> Element?
    ) throws -> [Element] {
        do {
            return try environment.read { txn in
                let have = try versionVector(in: txn)
                if let compaction = try log.compaction(in: txn) {
                    try Self.checkCovers(vector, compaction: compaction, origins: origins, directory: directory)
                }
                var sequences: [UInt64] = []
                var dots: [UInt64: [Dot]] = [:]
                // Each origin's first `perOrigin` changesets at most: the first `limit` in log order are among them.
                // Where an origin's read stopped short, only entries up to its last one read are sure to be complete
                // across origins; if skipped entries leave none, the read goes on further.
                var perOrigin = limit
                while true {
                    sequences.removeAll(keepingCapacity: true)
                    dots.removeAll(keepingCapacity: true)
                    var bound = UInt64.max
                    for entry in have.entries where vector[entry.replica] < entry.sequence {
                        if let origins, !origins.contains(entry.replica) { continue }
                        let after = vector[entry.replica]
                        // The relays' copies of the origin's changesets. Damaged adoptions only cost duplicates here
                        // (the changesets they would leave out are sent), so the export goes on; verify names the
                        // damage.
                        let adopted: [Dot: [Dot]]
                        do {
                            adopted = try log.adoptedCopies(of: entry.replica, after: after, in: txn)
                        } catch is LogError {
                            adopted = [:]
                        }
                        let read = try log.originEntries(from: entry.replica, after: after, limit: perOrigin, in: txn)
                        if perOrigin < .max, read.count >= perOrigin, let last = read.last {
                            bound = min(bound, last.localSequence)
                        }
                        // A dot of the origin index names one changeset (a relay adopts under its own sequences), so
                        // an excluded one is skipped before its entry is read.
                        for (dot, sequence) in read where !excluding.contains(dot) {
                            if let copies = adopted[dot] {
                                // An app uploads only what no relay adopted yet.
                                if origins != nil { continue }
                                // The other replica holds it through a relay's copy (its vector counts it, or it waits
                                // there), though its vector does not count the app's dot (an app that also syncs
                                // directly with a peer): sent again, it would be dropped as a duplicate, on every sync.
                                if copies.contains(where: { vector.includes($0) || excluding.contains($0) }) {
                                    continue
                                }
                            }
                            sequences.append(sequence)
                            if withDots { dots[sequence, default: []].append(dot) }
                        }
                    }
                    if bound < .max { sequences.removeAll { $0 > bound } }
                    if !sequences.isEmpty || bound == .max { break }
                    perOrigin = perOrigin.multipliedReportingOverflow(by: 4).overflow ? .max : perOrigin * 4
                }
                // An adopted changeset is listed under its origin's dot and its relay's: once is enough.
                sequences.sort()
                sequences = sequences.enumerated().filter { $0.offset == 0 || sequences[$0.offset - 1] != $0.element }
                    .map(\.element)
                let context = ZstdContext()
                var result: [Element] = []
                for sequence in sequences {
                    guard result.count < limit else { break }
                    let entry = try log.entry(sequence, in: txn)
                    guard let made = try element(entry, dots[sequence] ?? [], context) else { break }
                    result.append(made)
                }
                return result
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The causal dots of the changesets waiting in the pending area: a relay's dot for a relay's copy of an app's
    /// changeset, the origin dot otherwise. A peer that exports to this replica can pass them as `excluding:` to
    /// ``changesets(missingFrom:limit:origins:holds:excluding:)``, so as not to send them again. A stored changeset
    /// that no longer decodes (damage) is not listed: a peer sends it again, and its good copy replaces it.
    ///
    /// - Complexity: O(1) while this handle's decoded copy of the pending area is current (after its own
    ///   integrations); otherwise it decodes every waiting changeset once, and keeps the result.
    public func pendingDots() throws -> Set<Dot> {
        do {
            return try environment.read { txn in
                let generation = try pendingGeneration(in: txn)
                let cached = pendingCache.withLock { $0 }
                if let cached, cached.generation == generation { return Set(cached.entries.keys) }
                let area = try pendingArea(generation: generation, taken: nil, in: txn)
                // Kept for the next call and the next integration, unless one of those stored a newer copy meanwhile.
                pendingCache.withLock { cache in
                    if cache.map({ $0.generation < generation }) ?? true { cache = area }
                }
                return Set(area.entries.keys)
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    static func dot(pendingKey key: UnsafeRawBufferPointer) -> Dot? {
        key.count == 16 ? ChangesetLog.dot(fromOriginKey: key) : nil
    }

    /// The changesets waiting in the pending area.
    public func pendingChangesets() throws -> [Changeset] {
        do {
            return try environment.read { txn in
                var result: [Changeset] = []
                try txn.scan(pending) { _, value in
                    result.append(try PendingChangeset(stored: value, limits: log.decodingLimits).changeset)
                    return true
                }
                return result
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Integrates changesets from other replicas: each is applied by the merge rules, appended to the log with its
    /// origin, origin sequence, stamp and author, and its effects written to the views, all in one atomic commit.
    ///
    /// Integration is idempotent: a changeset already integrated is ignored. Changesets may arrive in any order: one
    /// whose causal predecessors are missing waits, durably, in the pending area until they arrive. The batch is
    /// applied in the order given, as far as causal order allows: the export of a peer (in its log order) is then
    /// integrated in the peer's order, and refuses what the peer refused (see docs/MergeSemantics.md, rule 8). A changeset
    /// stamped more than ``Configuration/maximumClockSkew`` ahead of this replica's clock also waits (rule 9), so
    /// that a wrong clock cannot win every later conflict.
    ///
    /// - Throws: ``TributaryError`` with `.invalidChangeset` naming the first changeset whose encoding would not
    ///   decode under the log's limits (values nested too deeply, too many instructions or elements; nothing is
    ///   integrated then, as replay and peers could not read it back), or for storage failures (nothing is integrated
    ///   then).
    @discardableResult
    public func integrate(_ changesets: [Changeset]) throws -> IntegrationReport {
        try integrate(pending: try encodedForLog(changesets, adopt: false))
    }

    /// In-memory changesets as the log takes them: each encoded once (the pending area and the log keep these bytes),
    /// and the whole call refused, before anything is applied or waits, when one's encoding would not decode under
    /// the log's limits. Replay, verify and every peer read the log under those limits, so an entry over them would
    /// be lost to all of them.
    private func encodedForLog(_ changesets: [Changeset], adopt: Bool) throws -> [PendingChangeset] {
        var pending: [PendingChangeset] = []
        pending.reserveCapacity(changesets.count)
        for (index, changeset) in changesets.enumerated() {
            do {
                let encoded = try ChangesetCodec.encode(changeset, within: log.decodingLimits)
                pending.append(PendingChangeset(changeset: changeset, adopt: adopt, encoded: encoded))
            } catch {
                throw TributaryError(
                    .invalidChangeset,
                    "changeset \(index) of \(changesets.count) (\(changeset.dot)) could not be read back from the log: "
                        + "\(error); nothing was integrated")
            }
        }
        return pending
    }

    /// Integrates changesets as bytes (what ``encodedChangesets(missingFrom:limit:origins:excluding:compressed:)``
    /// returns and a sync layer receives, in either of its forms), like ``integrate(_:)``. The bytes go into the log
    /// as they came, so a changeset is decoded once and never encoded or compressed again.
    ///
    /// A batch is decoded whole before any of it is applied, so what it decodes to is bounded: past
    /// ``Configuration/maximumBatchBytes`` in all, the rest of the batch must come in another call. A few kilobytes
    /// of zstd frames can otherwise claim gigabytes.
    ///
    /// - Throws: ``TributaryError`` with `.invalidChangeset` naming the first element that does not decompress or
    ///   decode, with `.transactionTooLarge` naming the element at which the batch decodes to more than that bound
    ///   (nothing is integrated then), or for storage failures.
    @discardableResult
    public func integrate(encoded changesets: [[UInt8]]) throws -> IntegrationReport {
        try integrate { try decodeReceived(changesets, adopt: false) }
    }

    /// Changesets as bytes, decoded as ``integrate(encoded:)`` decodes them. Called holding the write lock: the
    /// replica's zstd context is then free to use, and creating a decompression context per call costs more than
    /// decompressing a small frame.
    private func decodeReceived(_ changesets: [[UInt8]], adopt: Bool, requiredAuthor: String? = nil) throws
        -> [PendingChangeset]
    {
        var decoded: [PendingChangeset] = []
        decoded.reserveCapacity(changesets.count)
        var decodedBytes = 0
        for (index, bytes) in changesets.enumerated() {
            if index > 0 && decodedBytes > configuration.maximumBatchBytes {
                throw TributaryError(
                    .transactionTooLarge,
                    "changesets 0-\(index - 1) of a batch of \(changesets.count) decode to \(decodedBytes) bytes, over "
                        + "the limit of \(configuration.maximumBatchBytes) for one batch (maximumBatchBytes); nothing "
                        + "was integrated: pass changesets 0-\(index - 1) in one call and the rest in others")
            }
            let received: (changeset: Changeset, encoded: [UInt8], frame: [UInt8]?)
            do {
                received = try log.received(bytes, context: compressionContext)
            } catch {
                throw TributaryError(
                    .invalidChangeset,
                    "changeset \(index) of \(changesets.count) (\(bytes.count) bytes) cannot be decoded: \(error)")
            }
            try Self.checkAuthor(of: received.changeset, is: requiredAuthor)
            decodedBytes += received.encoded.count
            decoded.append(
                PendingChangeset(
                    changeset: received.changeset, adopt: adopt, encoded: received.encoded, frame: received.frame))
        }
        return decoded
    }

    /// Throws when `requiredAuthor` is set and `changeset` names another author: an upload's changesets must be its
    /// user's.
    static func checkAuthor(of changeset: Changeset, is requiredAuthor: String?) throws {
        guard let requiredAuthor, changeset.author != requiredAuthor else { return }
        throw TributaryError(
            .permissionDenied,
            "changeset \(changeset.dot) was written by author \"\(changeset.author)\", but this upload's user is "
                + "\"\(requiredAuthor)\": an app writes with its signed-in user's id as the author "
                + "(Replica.Configuration.author); nothing of the batch was integrated")
    }

    /// Integrates several batches of changesets as bytes in one atomic, durable commit: what a daemon does with the
    /// uploads that arrived within a few milliseconds of each other, so that one disk sync serves them all. Each
    /// batch is adopted (an app's upload, as ``adopt(_:)``) or integrated (a peer's, as ``integrate(encoded:)``), as
    /// it says.
    ///
    /// A batch that does not decode fails alone, with the error ``integrate(encoded:)`` would throw for it; the
    /// others are integrated. Each report lists the batch's own integrated and rejected changesets; its
    /// `duplicates` and `waiting` are those of the whole call.
    ///
    /// - Throws: ``TributaryError`` for storage failures: nothing is integrated then.
    public func integrate(batches: [IncomingChangesets]) throws -> [Result<IntegrationReport, TributaryError>] {
        try integrate(batches: batches, sharedLogPosition: nil)
    }

    /// ``integrate(batches:)``, storing in the same commit where this replica stands in the shared log it follows (a
    /// cluster's follower).
    package func integrate(
        batches: [IncomingChangesets], sharedLogPosition: SharedLogPosition?
    ) throws -> [Result<IntegrationReport, TributaryError>] {
        var failures: [Int: TributaryError] = [:]
        var dots: [Set<Dot>] = Array(repeating: [], count: batches.count)
        var causal: [[Dot]] = Array(repeating: [], count: batches.count)
        let report = try integrate {
            var all: [PendingChangeset] = []
            failures = [:]
            for (index, batch) in batches.enumerated() {
                do {
                    let decoded = try decodeReceived(
                        batch.changesets, adopt: batch.adopt, requiredAuthor: batch.requiredAuthor)
                    dots[index] = Set(decoded.map(\.changeset.dot))
                    causal[index] = decoded.map(\.changeset.causalDot)
                    all.append(contentsOf: decoded)
                } catch {
                    failures[index] =
                        TributaryError.wrap(error) as? TributaryError
                        ?? TributaryError(.invalidChangeset, "\(error)")
                }
            }
            return all
        } recording: { txn in
            // A follower's position moves only past entries that decoded: one that does not is applied again (and
            // fails again) instead of being skipped at the next start.
            if let sharedLogPosition, failures.isEmpty { try self.storeSharedLogPosition(sharedLogPosition, in: txn) }
            for (index, batch) in batches.enumerated() where failures[index] == nil {
                try self.storeRefusals(batch.refusals, in: txn)
            }
        }
        return batches.indices.map { index in
            if let failure = failures[index] { return .failure(failure) }
            var own = report
            own.integrated = report.integrated.filter { dots[index].contains($0) }
            own.rejected = report.rejected.filter { dots[index].contains($0.dot) }
            own.received = causal[index]
            return .success(own)
        }
    }

    /// Integrates what waits in the pending area and is ready now. A changeset that waits for this replica's clock
    /// (rule 9) becomes ready only as time passes, with nothing arriving to trigger a pass: a sync layer calls this
    /// now and then (an integration of new changesets does it too).
    ///
    /// - Throws: ``TributaryError`` for storage failures (nothing is integrated then).
    @discardableResult
    public func integratePending() throws -> IntegrationReport {
        try integrate(pending: [])
    }

    /// Integrates changesets uploaded by app replicas that sync through this replica, adopting each into this
    /// replica's own sequence: it keeps its origin, origin sequence, stamp and author, and gets this replica's dot as
    /// its causal identity. Version vectors then count this replica's sequence, not one entry per app, so causal
    /// metadata stays bounded by the number of relays however many apps write (docs/MergeSemantics.md, "Relays").
    ///
    /// An app's changesets are adopted in its own order; each one's causal context is rewritten from the app's
    /// terms (its own entry) to this replica's (the dots its earlier changesets were adopted as).
    ///
    /// - Throws: what ``integrate(_:)`` throws.
    @discardableResult
    public func adopt(_ changesets: [Changeset]) throws -> IntegrationReport {
        try integrate(pending: try encodedForLog(changesets, adopt: true))
    }
}

extension Replica {
    /// The local log sequence after each commit (a local write or an integration): what a sync layer waits on to
    /// send what is new. It keeps only the newest: a reader that falls behind sees the latest sequence, not every
    /// one. The sequence ends when the replica is closed.
    public func commits() -> AsyncStream<UInt64> {
        let (stream, continuation) = AsyncStream<UInt64>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let identifier = onCommit({ continuation.yield($0) }, onClose: { continuation.finish() })
        continuation.onTermination = { [weak self] _ in self?.removeCommitHandler(identifier) }
        return stream
    }

    /// Calls `handler` with the local log sequence after each commit, on the committing thread, right after the
    /// commit (it must return quickly), and `onClose` when the replica closes. Returns a handle for
    /// ``removeCommitHandler(_:)``. For sync sessions, which wake on it without a task of their own.
    package func onCommit(
        _ handler: @escaping @Sendable (UInt64) -> Void, onClose: @escaping @Sendable () -> Void = {}
    ) -> UInt64 {
        observers.add(ObserverRegistry.Entry(onCommit: { _, _, sequence in handler(sequence) }, onFinish: onClose))
    }

    /// Stops calling a handler ``onCommit(_:onClose:)`` registered.
    package func removeCommitHandler(_ identifier: UInt64) { observers.remove(identifier) }
}
