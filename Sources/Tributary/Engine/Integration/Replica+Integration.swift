import Synchronization
import TributaryCompression
import TributaryLog
import TributaryMerge
import TributaryModel
import TributaryStorage
import TributaryViews

// Integration: applying other replicas' changesets in causal order, through the pending area, under the write
// lock. The public calls are in Replica+Sync.swift.

extension Replica {
    func integrate(pending changesets: [PendingChangeset]) throws -> IntegrationReport {
        try integrate { changesets }
    }

    /// Integrates the changesets `incoming` gives (each adopted or integrated as its ``PendingChangeset/adopt``
    /// says); it runs holding the write lock. `recording`, when given, writes in the same transaction (what a
    /// cluster's follower stores of its position in the log).
    func integrate(
        _ incoming: () throws -> [PendingChangeset],
        recording: ((TributaryStorageWriteTransaction) throws -> Void)? = nil
    ) throws -> IntegrationReport {
        guard !configuration.readOnly else {
            throw TributaryError(.readOnly, "replica \(directory) was opened read-only")
        }
        do {
            return try writeLock.withLock {
                let changesets = try incoming()
                var rejected: [IntegrationReport.Rejection] = []
                while true {
                    do {
                        var report = try integrateOnce(changesets, rejected: rejected, recording: recording)
                        report.received = changesets.map(\.changeset.causalDot)
                        return report
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

    func integrateOnce(
        _ incoming: [PendingChangeset], rejected: [IntegrationReport.Rejection],
        recording: ((TributaryStorageWriteTransaction) throws -> Void)? = nil
    ) throws -> IntegrationReport {
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
                received.adopt = received.adopt && changeset.relay == nil
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
                for key in area.entries.filter({ rejectedDots.contains($0.value.changeset.dot) }).keys.sorted() {
                    drop(key)
                }
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
                            .limitExceeded, "adopted, it could not be read back from the log: \(error)",
                            dot: changeset.dot,
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
                    if let (index, problem) = StorableValues.problem(
                        in: changeset.instructions, encodedBytes: bytes.count)
                    {
                        throw MergeError(.invalidInstruction, problem, dot: changeset.dot, instructionIndex: index)
                    }
                    try MergeEngine.apply(changeset, to: &working)
                    if changeset.instructions.contains(where: \.isSchemaInstruction) {
                        if (try? working.schema.validate(targets: .none)) == nil {
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
                    guard let entry = area.entries[dot], area.first(in: PendingLane.of(entry).lane) == dot else {
                        continue
                    }
                    if try step(dot) { progress = true }
                }
                for lane in area.lanes.keys.sorted() {
                    while let dot = area.first(in: lane), try step(dot) { progress = true }
                }
            }
            report.integrated = applied.map(\.changeset.dot)
            report.waiting = area.entries.count
            if working.schema.losingDefinitions != start.schema.losingDefinitions {
                report.schemaConflicts = try SchemaConflict.conflicts(
                    in: working.schema, changedSince: start.schema
                ) { type, each in
                    for key in try working.keys(ofType: type) {
                        if let record = try working.record(key) { each(record) }
                    }
                }
            }
            var prepared = PreparedCommit(
                changesets: applied.map { ($0.changeset.header, $0.encoded, $0.frame) }, changes: working.takeChanges(),
                schema: working.schema,
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
            try recording?(txn)
            // Nothing to store: every changeset was a duplicate, or still waits where it waited.
            guard !applied.isEmpty || pendingChanged else { return }
            if working.schemaChanged {
                // The changeset that made the merged schema invalid (a definition malformed on its own: a name that is
                // not valid, a type without its primary key) is the one refused, not whichever the batch applied
                // last. A link left naming a type a concurrent changeset removed is not invalid (rule 8).
                do { try working.schema.validate(targets: .none) } catch {
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
    func pendingArea(generation: UInt64, taken: PendingArea?, in txn: TributaryStorageReadTransaction) throws
        -> PendingArea
    {
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
