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

    public struct Rejection: Sendable, Hashable {
        public var dot: Dot
        public var reason: String
    }

    public var description: String {
        "integrated \(integrated.count), duplicates \(duplicates), waiting \(waiting), rejected \(rejected.count)"
            + rejected.map { "\n  \($0.dot): \($0.reason)" }.joined()
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
    ///   - origins: when given, only changesets from these origins that no relay adopted yet (a partial replica
    ///     uploads only its own; if the adoptions are damaged, adopted ones are sent again, which the relay drops as
    ///     duplicates).
    ///   - holds: when given, each changeset is projected for a partial replica: schema instructions and the
    ///     instructions on objects for which `holds` returns `true` are kept, the rest replaced by
    ///     ``Instruction/omitted``. The projection keeps the changeset's identity, so the partial replica's version
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
        try missingEntries(from: vector, limit: limit, origins: origins, excluding: excluding) { entry, context in
            var changeset = try log.changeset(of: entry, context: context)
            if let holds {
                changeset.instructions = changeset.instructions.map { instruction in
                    guard let object = instruction.object, !holds(object.type, object.primaryKey) else { return instruction }
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
    /// - Parameter compressed: `false` (the default): each changeset as ``ChangesetCodec`` encodes it. `true`: each
    ///   as the log stores it, a zstd frame of that encoding when compressing made it smaller (most changesets of
    ///   more than a few instructions; the log's compression ratio is about 4.8). Neither side then runs zstd's
    ///   compressor, and the bytes on the wire shrink by that ratio. ``integrate(encoded:)`` tells the two apart.
    public func encodedChangesets(
        missingFrom vector: VersionVector, limit: Int = .max, origins: Set<ReplicaID>? = nil, excluding: Set<Dot> = [],
        compressed: Bool = false
    ) throws -> [[UInt8]] {
        try missingEntries(from: vector, limit: limit, origins: origins, excluding: excluding) { entry, context in
            compressed ? log.storedChangeset(of: entry) : try log.encodedChangeset(of: entry, context: context)
        }
    }

    /// Reads, in log order, the entries of the changesets a replica with version vector `vector` lacks, and makes
    /// each into an element of the result with `element`.
    private func missingEntries<Element>(
        from vector: VersionVector, limit: Int, origins: Set<ReplicaID>?, excluding: Set<Dot>,
        _ element: (LogEntry, ZstdContext) throws -> Element
    ) throws -> [Element] {
        do {
            return try environment.read { txn in
                let have = try views.versionVector(in: txn)
                var sequences: [UInt64] = []
                for entry in have.entries where vector[entry.replica] < entry.sequence {
                    if let origins, !origins.contains(entry.replica) { continue }
                    let after = vector[entry.replica]
                    // The relays' copies of the origin's changesets. Damaged adoptions only cost duplicates here (the
                    // changesets they would leave out are sent), so the export goes on; verify names the damage.
                    let adopted: [Dot: [Dot]]
                    do {
                        adopted = try log.adoptedCopies(of: entry.replica, after: after, in: txn)
                    } catch is LogError {
                        adopted = [:]
                    }
                    // A dot of the origin index names one changeset (a relay adopts under its own sequences), so an
                    // excluded one is skipped before its entry is read.
                    for (dot, sequence) in try log.originEntries(from: entry.replica, after: after, in: txn)
                    where !excluding.contains(dot) {
                        if let copies = adopted[dot] {
                            // An app uploads only what no relay adopted yet.
                            if origins != nil { continue }
                            // The other replica holds it through a relay's copy (its vector counts it, or it waits
                            // there), though its vector does not count the app's dot (an app that also syncs directly
                            // with a peer): sent again, it would be dropped as a duplicate, on every sync.
                            if copies.contains(where: { vector.includes($0) || excluding.contains($0) }) { continue }
                        }
                        sequences.append(sequence)
                    }
                }
                // An adopted changeset is listed under its origin's dot and its relay's: once is enough.
                sequences.sort()
                sequences = sequences.enumerated().filter { $0.offset == 0 || sequences[$0.offset - 1] != $0.element }.map(\.element)
                let context = ZstdContext()
                var result: [Element] = []
                for sequence in sequences {
                    guard result.count < limit else { break }
                    let entry = try log.entry(sequence, in: txn)
                    result.append(try element(entry, context))
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
        try integrate(try encodedForLog(changesets, adopt: false), adopting: false)
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
        try integrate(adopting: false) {
            // Decoded under the write lock, which integration takes anyway: the replica's zstd context is then free
            // to use, and creating a decompression context per call costs more than decompressing a small frame.
            var decoded: [PendingChangeset] = []
            decoded.reserveCapacity(changesets.count)
            var decodedBytes = 0
            for (index, bytes) in changesets.enumerated() {
                if index > 0 && decodedBytes > configuration.maximumBatchBytes {
                    throw TributaryError(
                        .transactionTooLarge,
                        "changesets 0-\(index - 1) of a batch of \(changesets.count) decode to \(decodedBytes) bytes, over "
                            + "the limit of \(configuration.maximumBatchBytes) for one batch (maximumBatchBytes); nothing "
                            + "was integrated: pass "
                            + "changesets 0-\(index - 1) in one call and the rest in others")
                }
                do {
                    let received = try log.received(bytes, context: compressionContext)
                    decodedBytes += received.encoded.count
                    decoded.append(
                        PendingChangeset(
                            changeset: received.changeset, adopt: false, encoded: received.encoded, frame: received.frame))
                } catch {
                    throw TributaryError(
                        .invalidChangeset,
                        "changeset \(index) of \(changesets.count) (\(bytes.count) bytes) cannot be decoded: \(error)")
                }
            }
            return decoded
        }
    }

    /// Integrates what waits in the pending area and is ready now. A changeset that waits for this replica's clock
    /// (rule 9) becomes ready only as time passes, with nothing arriving to trigger a pass: a sync layer calls this
    /// now and then (an integration of new changesets does it too).
    ///
    /// - Throws: ``TributaryError`` for storage failures (nothing is integrated then).
    @discardableResult
    public func integratePending() throws -> IntegrationReport {
        try integrate([PendingChangeset](), adopting: false)
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
        try integrate(try encodedForLog(changesets, adopt: true), adopting: true)
    }

    func integrate(_ changesets: [PendingChangeset], adopting: Bool) throws -> IntegrationReport {
        try integrate(adopting: adopting) { changesets }
    }

    /// Integrates the changesets `incoming` gives; it runs holding the write lock.
    private func integrate(adopting: Bool, _ incoming: () throws -> [PendingChangeset]) throws -> IntegrationReport {
        guard !configuration.readOnly else {
            throw TributaryError(.readOnly, "replica \(directory) was opened read-only")
        }
        do {
            return try writeLock.withLock {
                let changesets = try incoming()
                var rejected: [IntegrationReport.Rejection] = []
                while true {
                    do {
                        return try integrateOnce(changesets, adopting: adopting, rejected: rejected)
                    } catch let error as MergeError {
                        guard let dot = error.dot, !rejected.contains(where: { $0.dot == dot }) else { throw error }
                        rejected.append(.init(dot: dot, reason: error.description))
                    }
                }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    private func integrateOnce(_ incoming: [PendingChangeset], adopting: Bool, rejected: [IntegrationReport.Rejection]) throws
        -> IntegrationReport
    {
        var start = state.withLock { $0 }
        let rejectedDots = Set(rejected.map(\.dot))
        var report = IntegrationReport()
        report.rejected = rejected
        var commit: PreparedCommit?
        var updatedPending: PendingArea?
        var head = start.head
        // The decoded pending area, taken out of the cache so that changing it copies nothing. A storage transaction
        // that fails (or runs again) reads it from storage instead; the cache gets it back after a commit.
        var taken = pendingCache.withLock { cache in
            defer { cache = nil }
            return cache
        }
        try environment.write { txn in
            start = try freshState(start, in: txn)
            commit = nil
            updatedPending = nil
            report = IntegrationReport()
            report.rejected = rejected
            var vector = start.versionVector
            var clock = start.clock
            let now = configuration.clock.milliseconds()
            let skew = configuration.maximumClockSkewMilliseconds
            var working = WorkingSet(
                source: ReplicaRecordSource(views: views, log: log, transaction: txn), schema: start.schema)
            // Origin dots integrated in this batch (the log answers for earlier ones).
            var integratedHere = Set<Dot>()
            func known(_ dot: Dot) throws -> Bool {
                try integratedHere.contains(dot) || log.localSequence(of: dot, in: txn) != nil
            }
            /// Whether this replica holds the changeset `dot` names and every one before it from the same origin:
            /// the vector counts it, or the changeset came through a relay's copy (which the vector counts by the
            /// relay's dot, not this one). Integrated, a changeset's causal past came before it, so holding one
            /// holds its origin's earlier ones too.
            func holds(_ dot: Dot) throws -> Bool { try vector.includes(dot) || known(dot) }
            /// Whether this replica holds everything `changeset`'s context and extra dots name, apart from its
            /// `origin`'s own entry. A writer names a changeset by the dot it integrated it as: an app's own dot
            /// where it came as the app sent it, though this replica may hold only a relay's copy.
            func holdsContext(of changeset: Changeset, apartFrom origin: ReplicaID) throws -> Bool {
                for entry in changeset.context.entries where entry.replica != origin {
                    guard try holds(Dot(origin: entry.replica, sequence: entry.sequence)) else { return false }
                }
                return try changeset.contextExtras.allSatisfy(holds)
            }

            // Candidates: everything pending and the batch, by causal dot (see ``PendingChangeset/key``). Entries
            // remember whether they came to be adopted (from an app) or integrated (from a peer). `added` and
            // `removed` are the changes to the stored pending area: keys of the area, and stored keys.
            let generation = try pendingGeneration(in: txn)
            var area = try pendingArea(generation: generation, taken: taken, in: txn)
            taken = nil
            var added = Set<Dot>()
            var removed = Set<Dot>()
            // The batch's changesets, in the order they came.
            var batch: [Dot] = []
            batch.reserveCapacity(incoming.count)
            for var received in incoming {
                let changeset = received.changeset
                let causal = changeset.causalDot
                // A stored row under its key that no longer decodes goes: this copy replaces it if it waits, and
                // nothing needs it if the changeset is integrated or a duplicate.
                if area.forgetUndecodable(causal) { removed.insert(causal) }
                if try vector[causal.origin] >= causal.sequence || area.entries[causal] != nil
                    || (changeset.relay == nil && known(changeset.dot))
                {
                    report.duplicates += 1
                    continue
                }
                received.adopt = adopting && changeset.relay == nil
                area.insert(received)
                if added.insert(causal).inserted { batch.append(causal) }
            }
            /// Takes the entry `key` names out of the area, and out of storage if it was stored.
            func drop(_ key: Dot) {
                guard area.remove(key) != nil, added.remove(key) == nil else { return }
                removed.insert(key)
            }
            // A refused changeset is dropped with every copy of it that waits.
            if !rejectedDots.isEmpty {
                for key in area.entries.filter({ rejectedDots.contains($0.value.changeset.dot) }).keys.sorted() { drop(key) }
            }

            var applied: [(changeset: Changeset, encoded: [UInt8], frame: [UInt8]?)] = []
            // The changeset after which the merged schema became invalid and has stayed so (nil while it is valid):
            // the one refused if the batch ends with it invalid. A later changeset of the batch may make it valid
            // again (one that removes what the invalid addition named), and then nothing is refused.
            var schemaInvalidSince: Dot?
            /// Applies the changeset `dot` names, the first of its lane, if it is ready; `true` when it left the
            /// pending area (applied, or dropped as one that can never be integrated).
            func step(_ dot: Dot) throws -> Bool {
                guard let entry = area.entries[dot] else { return false }
                var changeset = entry.changeset
                var encoded = entry.encoded
                var frame = entry.frame
                if changeset.relay == nil, try known(changeset.dot) {
                    // Integrated meanwhile through a relay's copy, which waited beside it: an app's upload is not
                    // adopted again, and a peer's changeset not applied twice.
                    drop(dot)
                    report.duplicates += 1
                    return true
                }
                guard changeset.time.milliseconds <= now &+ skew else { return false }
                if entry.adopt {
                    // Its origin's previous changeset is here, and everything its context names.
                    if changeset.originSequence > 1 {
                        let previous = Dot(origin: changeset.origin, sequence: changeset.originSequence - 1)
                        guard try known(previous) else { return false }
                    }
                    guard try holdsContext(of: changeset, apartFrom: changeset.origin) else { return false }
                    // Only a damaged stored vector counts this many; the relay dot would not fit (as for a write).
                    guard vector[replicaID] < .max else {
                        throw TributaryError(
                            .corrupted,
                            "replica \(directory): its stored version vector counts \(UInt64.max) changesets of its own, "
                                + "so it can adopt no more; the views are damaged (rebuild them from the log)")
                    }
                    changeset = try adopted(
                        changeset, as: Dot(origin: replicaID, sequence: vector[replicaID] + 1),
                        adoptions: working.adoptions, txn: txn)
                    encoded = nil  // adopted: a new causal identity
                    frame = nil
                } else {
                    let causal = changeset.causalDot
                    if vector[causal.origin] >= causal.sequence {
                        // Another changeset took this causal dot (a faulty relay): this one can never be
                        // integrated, and must not hold up the rest of its lane.
                        drop(dot)
                        report.duplicates += 1
                        return true
                    }
                    // The previous changeset of its causal dot's origin is here. For a changeset as its app sent
                    // it, that one may have come through a relay's copy, which the vector does not count by it.
                    let previous = Dot(origin: causal.origin, sequence: causal.sequence - 1)
                    if vector[causal.origin] != previous.sequence {
                        guard changeset.relay == nil, try known(previous) else { return false }
                    }
                    guard try holdsContext(of: changeset, apartFrom: causal.origin) else { return false }
                }
                // Only an adopted changeset is encoded here (its relay dot and extra dot are new); it is refused alone
                // if that takes it over the limits the log is read under.
                let bytes: [UInt8]
                if let encoded {
                    bytes = encoded
                } else {
                    do {
                        bytes = try ChangesetCodec.encode(changeset, within: log.decodingLimits)
                    } catch {
                        throw MergeError(
                            .limitExceeded, "adopted, it could not be read back from the log: \(error)", dot: changeset.dot,
                            instructionIndex: error.instructionIndex)
                    }
                }
                if try known(changeset.dot) {
                    // This replica holds the changeset already (it wrote it, before a relay adopted it): the
                    // log records the adoption; the changeset is not applied twice.
                    if let relay = changeset.relay { working.recordAdoption(of: changeset.dot, as: relay) }
                } else {
                    // A value or key the views could not store (or read back) is refused here, by the changeset,
                    // rather than failing the storage transaction of every batch that brings it.
                    if let (index, problem) = StorableValues.problem(in: changeset.instructions, encodedBytes: bytes.count) {
                        throw MergeError(.invalidInstruction, problem, dot: changeset.dot, instructionIndex: index)
                    }
                    try MergeEngine.apply(changeset, to: &working)
                    if changeset.instructions.contains(where: \.isSchemaInstruction) {
                        if (try? working.schema.validate()) == nil {
                            if schemaInvalidSince == nil { schemaInvalidSince = changeset.dot }
                        } else {
                            schemaInvalidSince = nil
                        }
                    }
                }
                try clock.observe(changeset.time, wallMilliseconds: now, maximumSkewMilliseconds: skew)
                vector.advance(changeset.causalDot.origin, to: changeset.causalDot.sequence)
                integratedHere.insert(changeset.dot)
                applied.append((changeset, bytes, encoded == nil ? nil : frame))
                drop(dot)
                return true
            }
            // Apply every ready changeset; repeat until none is ready. First the batch, in the order it came: a
            // peer's export is in the peer's log order, and integrated in that order it makes the peer's decisions
            // (a schema conflict refuses the changeset merged second; see docs/MergeSemantics.md, rule 8), so a
            // replica reset from a peer holds what the peer holds. Then every lane, in the lanes' order: only the
            // first changeset of each lane can be ready (see ``PendingLane``), so a pass costs one test per lane,
            // however many changesets wait. The log order is deterministic for a given input.
            var progress = true
            while progress {
                progress = false
                for dot in batch {
                    guard let entry = area.entries[dot], area.first(in: PendingLane.of(entry).lane) == dot else { continue }
                    if try step(dot) { progress = true }
                }
                for lane in area.lanes.keys.sorted() {
                    while let dot = area.first(in: lane), try step(dot) { progress = true }
                }
            }
            report.integrated = applied.map(\.changeset.dot)
            report.waiting = area.entries.count
            var prepared = PreparedCommit(
                changesets: applied, changes: working.takeChanges(), schema: working.schema,
                schemaChanged: working.schemaChanged, previousSchema: start.schema, versionVector: vector,
                clock: clock.latest)
            prepared.pendingRemovals = removed.sorted().map(Self.pendingKey)
            prepared.pendingAdditions = added.sorted().compactMap { dot in
                area.entries[dot].map { (Self.pendingKey(dot), $0.stored) }
            }
            let pendingChanged = !removed.isEmpty || !added.isEmpty
            if pendingChanged { prepared.pendingGeneration = generation &+ 1 }
            area.generation = prepared.pendingGeneration ?? generation
            updatedPending = area
            // Nothing to store: every changeset was a duplicate, or still waits where it waited.
            guard !applied.isEmpty || pendingChanged else { return }
            if working.schemaChanged {
                // The changeset that made the merged schema invalid (a type linking to a type a concurrent changeset
                // removed, say) is the one refused, not whichever the batch applied last.
                do { try working.schema.validate() } catch {
                    throw MergeError(
                        .schemaConflict, "the merged schema would be invalid: \(error)",
                        dot: schemaInvalidSince ?? applied.last?.changeset.dot)
                }
            }
            head = try persist(prepared, head: start.head, in: txn)
            commit = prepared
        }
        if let updatedPending { pendingCache.withLock { $0 = updatedPending } }
        if let commit { didCommit(commit, head: head) }
        return report
    }

    /// The pending generation stored in `txn` (0 before any commit changed the pending area).
    func pendingGeneration(in txn: TributaryStorageReadTransaction) throws -> UInt64 {
        try Self.identityNumber(Self.pendingGenerationKey, "pending generation", identity: identity, in: txn) ?? 0
    }

    /// The pending area as of `generation`: `taken` (the decoded copy) when it is current, else decoded from storage.
    /// An entry that no longer decodes, or whose changeset is not the one its key names, is left out, and stays stored
    /// (for `tributary-log` to show) until a copy of the changeset its key names arrives under that key.
    func pendingArea(generation: UInt64, taken: PendingArea?, in txn: TributaryStorageReadTransaction) throws -> PendingArea {
        if let taken, taken.generation == generation { return taken }
        var area = PendingArea(generation: generation)
        // In descending key order, so that each lane's changesets are appended, not inserted at the front.
        try txn.scan(pending, reverse: true) { key, value in
            let stored = Self.dot(pendingKey: key)
            if let entry = try? PendingChangeset(stored: value, limits: log.decodingLimits), entry.key == stored {
                area.insert(entry)
            } else if let stored {
                area.noteUndecodable(stored)
            }
            return true
        }
        return area
    }

    /// The changeset as this replica adopts it: its relay dot set, and its context restated without its origin's
    /// entry. The origin's previous changeset becomes an extra dot when the rest of the context does not reach it and
    /// this replica's own sequence does not order it first (another relay adopted it, or none did).
    ///
    /// One extra dot is enough, however many changesets the app wrote offline: a replica integrates that previous
    /// changeset only after everything its own context and extra dot name, so the whole run comes with it; and the
    /// merge rules count a changeset's earlier ones from the same origin as seen (``ChangesetInfo/covers(_:causal:)``)
    /// without the extras. Listing every earlier changeset instead made an offline run of k changesets cost O(k²)
    /// lookups and dots.
    private func adopted(
        _ changeset: Changeset, as relay: Dot, adoptions: [Dot: [Dot]], txn: TributaryStorageReadTransaction
    ) throws -> Changeset {
        var result = changeset
        result.relay = relay
        result.context = changeset.context.removing(changeset.origin)
        var extras = Set(changeset.contextExtras)
        if changeset.originSequence > 1 {
            let previous = Dot(origin: changeset.origin, sequence: changeset.originSequence - 1)
            // Any of its adoptions orders it before this one: the first recorded.
            let causal = try adoptions[previous]?.first ?? log.causalDot(ofOrigin: previous, in: txn) ?? previous
            // This replica's own earlier dots come before `relay` in its sequence, which every replica integrates in
            // order.
            if causal.origin != relay.origin && !result.context.includes(causal) { extras.insert(causal) }
        }
        result.contextExtras = extras.sorted()
        return result
    }
}

/// The pending area, decoded: what ``Replica/integrate(_:)`` reads instead of decoding every pending changeset again
/// on every call, with the changesets arranged in lanes so that finding the ready ones does not test them all.
struct PendingArea: Sendable {
    /// The stored pending generation this copy matches.
    var generation: UInt64
    private(set) var entries: [Dot: PendingChangeset] = [:]
    /// Each lane's changesets, by descending sequence in the lane: the last one is the lane's first.
    private(set) var lanes: [PendingLane: [(sequence: UInt64, dot: Dot)]] = [:]

    init(generation: UInt64) { self.generation = generation }

    /// Keys of stored rows that did not decode (damage). Left out of the entries, so that ``Replica/pendingDots()``
    /// does not tell peers they need not send them; deleted when a copy of the changeset a key names arrives.
    private var undecodable: Set<Dot> = []

    /// Notes a stored row under `key` that did not decode.
    mutating func noteUndecodable(_ key: Dot) {
        undecodable.insert(key)
    }

    /// Whether a row under `key` did not decode; it is forgotten here, as the caller deletes it.
    mutating func forgetUndecodable(_ key: Dot) -> Bool {
        undecodable.isEmpty ? false : undecodable.remove(key) != nil
    }

    mutating func insert(_ entry: PendingChangeset) {
        let dot = entry.key
        // Its row goes under its key, replacing a damaged one.
        if !undecodable.isEmpty { undecodable.remove(dot) }
        if let replaced = entries.updateValue(entry, forKey: dot) { removeFromLane(replaced, dot) }
        let (lane, sequence) = PendingLane.of(entry)
        // Changed in place (through the dictionary's accessor), so the lane is not copied.
        Self.insert((sequence, dot), into: &lanes[lane, default: []])
    }

    /// Inserts where the order stays descending: usually at the end (a lane's next changeset, or the next one read
    /// back from storage, which is read in descending key order).
    private static func insert(_ item: (sequence: UInt64, dot: Dot), into order: inout [(sequence: UInt64, dot: Dot)]) {
        var low = 0
        var high = order.count
        while low < high {
            let middle = (low + high) / 2
            if order[middle].sequence > item.sequence { low = middle + 1 } else { high = middle }
        }
        order.insert(item, at: low)
    }

    mutating func remove(_ dot: Dot) -> PendingChangeset? {
        guard let entry = entries.removeValue(forKey: dot) else { return nil }
        removeFromLane(entry, dot)
        return entry
    }

    private mutating func removeFromLane(_ entry: PendingChangeset, _ dot: Dot) {
        let (lane, _) = PendingLane.of(entry)
        // Taken out of the dictionary while it changes, so it is not copied.
        guard var order = lanes.removeValue(forKey: lane) else { return }
        // Usually the lane's first, which is the last element.
        if let index = order.lastIndex(where: { $0.dot == dot }) { order.remove(at: index) }
        if !order.isEmpty { lanes[lane] = order }
    }

    /// The dot of the lane's first changeset: the only one of the lane that can be ready.
    func first(in lane: PendingLane) -> Dot? { lanes[lane]?.last?.dot }
}

/// A sequence of pending changesets of which only the first can be ready, because each needs the one before it:
/// changesets from a peer, by the origin of their causal dot (each needs the one before it in that origin's sequence:
/// counted by the vector, or, for an app's changeset as written, held through a relay's copy); changesets to adopt
/// from an app, by their origin (each needs the app's previous one).
struct PendingLane: Hashable, Comparable, Sendable {
    var adopt: Bool
    var origin: ReplicaID

    static func of(_ entry: PendingChangeset) -> (lane: PendingLane, sequence: UInt64) {
        if entry.adopt {
            return (PendingLane(adopt: true, origin: entry.changeset.origin), entry.changeset.originSequence)
        }
        let causal = entry.changeset.causalDot
        return (PendingLane(adopt: false, origin: causal.origin), causal.sequence)
    }

    static func < (lhs: PendingLane, rhs: PendingLane) -> Bool {
        lhs.origin != rhs.origin ? lhs.origin < rhs.origin : !lhs.adopt && rhs.adopt
    }
}

struct PendingChangeset: Sendable {
    let changeset: Changeset
    /// Whether it came to be adopted (from an app) rather than integrated (from a peer).
    var adopt: Bool
    /// The changeset's encoding, when it came encoded (from a peer, or from the pending database): the log stores
    /// these bytes instead of encoding it again. It decoded to `changeset`, which never changes afterwards.
    let encoded: [UInt8]?
    /// The zstd frame of `encoded` it came in, if it came compressed: the log stores it as it came. Not kept in the
    /// pending database (a changeset that waits there is compressed again when it is integrated).
    let frame: [UInt8]?
    /// What it waits under, in the pending area and its database: its causal dot, which is a relay's dot for a
    /// relay's copy and the origin dot otherwise. Two relays' copies of one changeset wait side by side: keyed by the
    /// origin dot, the second was dropped as a duplicate of the first, and when each waited for the relay's earlier
    /// changesets (two relays that adopted two apps' uploads in opposite orders), neither ever came in.
    var key: Dot { changeset.causalDot }

    init(changeset: Changeset, adopt: Bool, encoded: [UInt8]? = nil, frame: [UInt8]? = nil) {
        self.changeset = changeset
        self.adopt = adopt
        self.encoded = encoded
        self.frame = frame
    }

    /// As the pending database stores it: one byte (1 to adopt, 0 to integrate), then the encoded changeset.
    var stored: [UInt8] { [adopt ? 1 : 0] + (encoded ?? ChangesetCodec.encode(changeset)) }

    /// Decodes a stored entry under `limits`: the log's, which the changeset was accepted under.
    init(stored value: UnsafeRawBufferPointer, limits: DecodingLimits) throws {
        guard let marker = value.first, marker <= 1 else {
            throw ChangesetDecodingError(.invalidValue, "pending entry starts with \(value.first.map { "\($0)" } ?? "nothing"), not 0 or 1", offset: 0)
        }
        let bytes = Array(value.dropFirst())
        self.init(changeset: try ChangesetCodec.decode(bytes, limits: limits), adopt: marker == 1, encoded: bytes)
    }
}

extension VersionVector {
    /// The vector without the entry of `replica`.
    func removing(_ replica: ReplicaID) -> VersionVector {
        VersionVector(entries.filter { $0.replica != replica }.map { ($0.replica, $0.sequence) })
    }
}
