public import TributaryCompression
public import TributaryModel
public import TributaryStorage

/// The position of the log's last entry: what the next append chains to.
public struct LogHead: Hashable, Sendable {
    /// The last entry's local sequence (0 for an empty log).
    public var localSequence: UInt64
    /// The last entry's chain value (0 for an empty log).
    public var chain: UInt64

    public init(localSequence: UInt64 = 0, chain: UInt64 = 0) {
        self.localSequence = localSequence
        self.chain = chain
    }
}

/// The changeset log: every changeset a replica integrated, in the order it did, compressed, checksummed and
/// chained; with an index from (origin, origin sequence) to local sequence that makes integration idempotent.
///
/// The log is the truth: the views are derived from it and can be rebuilt by replaying it.
public struct ChangesetLog: Sendable {
    /// Names of the LMDB databases the log uses.
    public static let databaseNames = ["log", "origins", "adoptions"]

    public let entries: Database
    /// (origin, origin sequence) → local sequence, and, for adopted changesets, (relay, relay sequence) → local
    /// sequence too: one index answers both "have I got this changeset?" and "what comes after this causal dot?".
    ///
    /// A changeset that directly follows its origin's previous changeset in the log (a replica's own commits, or one
    /// origin's changesets integrated in a row) has no key of its own: it continues the run of the last key before
    /// it, `sequence - key's sequence` entries on (``localSequence(of:in:)``). A durable commit then writes one
    /// B-tree fewer (about 8% of its time). A key for every changeset would read the same.
    public let origins: Database
    /// Origin dot → the relay dot it was adopted as.
    public let adoptions: Database
    /// The compaction marker (``compaction(in:)``); `nil` in a log opened read-only that was never compacted by a
    /// build that has it.
    public let compactions: Database?
    /// The marker last decoded, shared by the copies of this log.
    let compactionCache = CompactionCache()
    /// The codec for payloads.
    public var codec: ZstdCodec
    /// The largest changeset (encoded, before compression) the log stores or decodes. Default: 256 MiB.
    public var maximumChangesetBytes: Int
    /// Changesets smaller than this are stored uncompressed, where zstd's frame overhead would not pay.
    public var compressionThreshold: Int = 96

    /// Opens the log's databases in `environment`.
    public init(
        environment: Environment, codec: ZstdCodec = ZstdCodec(level: 3), maximumChangesetBytes: Int = 256 << 20
    )
        throws
    {
        let databases = try environment.openDatabases(Self.databaseNames)
        entries = databases[0]
        origins = databases[1]
        adoptions = databases[2]
        do {
            compactions = try environment.openDatabases([Self.compactionDatabaseName])[0]
        } catch let error as StorageError where error.code == .notFound && environment.configuration.readOnly {
            compactions = nil
        }
        self.codec = codec
        self.maximumChangesetBytes = maximumChangesetBytes
    }

    /// The 8-byte big-endian key of a local sequence, so keys sort numerically.
    public static func key(_ localSequence: UInt64) -> [UInt8] {
        withUnsafeBytes(of: localSequence.bigEndian) { Array($0) }
    }

    static func sequence(fromKey key: UnsafeRawBufferPointer) -> UInt64? {
        guard key.count == 8 else { return nil }
        return UInt64(bigEndian: key.loadUnaligned(as: UInt64.self))
    }

    public static func originKey(_ dot: Dot) -> [UInt8] {
        withUnsafeBytes(of: dot.origin.rawValue.bigEndian) { Array($0) }
            + withUnsafeBytes(of: dot.sequence.bigEndian) { Array($0) }
    }

    /// The dot whose ``originKey(_:)`` starts at `offset` in `bytes` (which must hold 16 bytes from there).
    public static func dot(fromOriginKey bytes: UnsafeRawBufferPointer, at offset: Int = 0) -> Dot {
        Dot(
            origin: ReplicaID(
                rawValue: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))),
            sequence: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self)))
    }

    // MARK: Reading

    /// The head of the log: its last entry's sequence and chain value.
    public func head(in transaction: ReadTransaction) throws -> LogHead {
        var head = LogHead()
        var failure: (any Error)?
        try transaction.scan(entries, reverse: true) { key, value in
            guard let sequence = Self.sequence(fromKey: key) else { return false }
            do {
                let entry = try LogEntry(decoding: value, localSequence: sequence)
                head = LogHead(localSequence: sequence, chain: entry.checksum)
            } catch {
                failure = error
            }
            return false
        }
        if let failure { throw failure }
        return head
    }

    /// The head of the log, read from the last entry's header without checking its checksum: cheap enough to call
    /// at every write, to notice another process's commits.
    public func headUnverified(in transaction: ReadTransaction) throws -> LogHead {
        var head = LogHead()
        try transaction.scan(entries, reverse: true) { key, value in
            if let sequence = Self.sequence(fromKey: key), value.count >= LogEntry.headerSize {
                head = LogHead(
                    localSequence: sequence,
                    chain: UInt64(littleEndian: value.loadUnaligned(fromByteOffset: 50, as: UInt64.self)))
            }
            return false
        }
        return head
    }

    /// The local sequence and dot of the log's last entry, `nil` for an empty log, read from the entry's header without
    /// checking its checksum (opening a replica reads the last entry whole).
    ///
    /// - Throws: ``LogError`` with `.truncated` when the last entry's bytes hold no header of that entry.
    public func lastDot(in transaction: ReadTransaction) throws -> (localSequence: UInt64, dot: Dot)? {
        var last: (UInt64, Dot)?
        var damaged: UInt64?
        try transaction.scan(entries, reverse: true) { key, value in
            guard let sequence = Self.sequence(fromKey: key) else { return false }
            if let dot = LogEntry.originDot(ofStored: value, localSequence: sequence) {
                last = (sequence, dot)
            } else {
                damaged = sequence
            }
            return false
        }
        if let damaged {
            throw LogError(
                .truncated, localSequence: damaged,
                "log entry \(damaged) holds no header of its own: the entry is damaged on disk")
        }
        return last
    }

    /// The number of entries.
    public func count(in transaction: ReadTransaction) throws -> Int { try transaction.count(entries) }

    /// The entry at `localSequence`, its checksum checked.
    ///
    /// - Throws: ``LogError`` (`.missingEntry`, `.checksumMismatch`, ...) or a ``StorageError``.
    public func entry(_ localSequence: UInt64, in transaction: ReadTransaction) throws -> LogEntry {
        try transaction.withValue(entries, key: Self.key(localSequence)) { value in
            guard let value else {
                throw LogError(.missingEntry, localSequence: localSequence, "the log has no entry \(localSequence)")
            }
            return try LogEntry(decoding: value, localSequence: localSequence)
        }
    }

    /// Decompresses and decodes the changeset an entry holds, and checks it against the entry's header.
    /// The header of the changeset an entry holds, its instructions left undecoded.
    public func header(of entry: LogEntry, context: ZstdContext? = nil) throws(LogError) -> ChangesetCodec.Header {
        let bytes = try encodedChangeset(of: entry, context: context)
        do {
            return try ChangesetCodec.decodeHeader(bytes, limits: decodingLimits)
        } catch {
            throw Self.undecodable(entry, error)
        }
    }

    private static func undecodable(_ entry: LogEntry, _ error: ChangesetDecodingError) -> LogError {
        LogError(
            .undecodable, localSequence: entry.localSequence,
            "log entry \(entry.localSequence) (origin \(entry.origin), seq \(entry.originSequence)) cannot be decoded: \(error)"
        )
    }

    public func changeset(of entry: LogEntry, context: ZstdContext? = nil) throws(LogError) -> Changeset {
        let bytes = try encodedChangeset(of: entry, context: context)
        let changeset: Changeset
        do {
            changeset = try ChangesetCodec.decode(bytes, limits: decodingLimits)
        } catch {
            throw Self.undecodable(entry, error)
        }
        guard changeset.dot == entry.dot, changeset.time == entry.time,
            changeset.instructions.count == Int(entry.instructionCount)
        else {
            throw LogError(
                .undecodable, localSequence: entry.localSequence,
                "log entry \(entry.localSequence) holds changeset \(changeset.dot), but its header says \(entry.dot)")
        }
        return changeset
    }

    /// The encoded (uncompressed) changeset an entry holds.
    public func encodedChangeset(of entry: LogEntry, context: ZstdContext? = nil) throws(LogError) -> [UInt8] {
        guard entry.isCompressed else { return entry.payload }
        do {
            let limit = min(Int(entry.uncompressedLength), maximumChangesetBytes)
            return try codec.decompress(entry.payload, maximumOutputBytes: limit, context: context)
        } catch {
            throw LogError(
                .undecodable, localSequence: entry.localSequence,
                "log entry \(entry.localSequence) (origin \(entry.origin), seq \(entry.originSequence)) cannot be decompressed: \(error)"
            )
        }
    }

    /// The changeset an entry holds, as the entry stores it: a zstd frame of its encoding when that was smaller, else
    /// the encoding itself (which starts "TRCS", never as a frame does). What a peer can receive without this
    /// replica decompressing it, and store without compressing it again (see ``received(_:context:)``).
    public func storedChangeset(of entry: LogEntry) -> [UInt8] { entry.payload }

    /// A changeset as a peer sent it, in either form ``storedChangeset(of:)`` gives: decoded, with its encoding, and
    /// the zstd frame it came in, if it came compressed, for ``append(_:encoded:frame:after:in:context:)`` to store.
    ///
    /// - Throws: ``LogError`` with `.undecodable` (and local sequence 0: the bytes are not from this log) when they do
    ///   not decompress within the log's largest changeset or do not decode.
    public func received(
        _ bytes: [UInt8], context: ZstdContext? = nil
    ) throws(LogError) -> (changeset: Changeset, encoded: [UInt8], frame: [UInt8]?) {
        var encoded = bytes
        var frame: [UInt8]?
        if ZstdCodec.startsFrame(bytes) {
            do {
                encoded = try codec.decompress(bytes, maximumOutputBytes: maximumChangesetBytes, context: context)
            } catch {
                throw LogError(
                    .undecodable, localSequence: 0,
                    "a received zstd frame of \(bytes.count) bytes cannot be decompressed: \(error)")
            }
            frame = bytes
        }
        do {
            return (try ChangesetCodec.decode(encoded, limits: decodingLimits), encoded, frame)
        } catch {
            throw LogError(
                .undecodable, localSequence: 0,
                "a received changeset of \(encoded.count) bytes cannot be decoded: \(error)")
        }
    }

    /// The limits a changeset read from this log, or received for it, is decoded under: values up to the log's
    /// largest changeset.
    public var decodingLimits: DecodingLimits {
        var limits = DecodingLimits()
        limits.maximumValueBytes = maximumChangesetBytes
        limits.maximumInstructions = max(limits.maximumInstructions, 4_000_000)
        limits.maximumElements = max(limits.maximumElements, 4_000_000)
        return limits
    }

    /// Visits the entries from `start` through `end` (inclusive; `nil` for the last) in order, checking each
    /// checksum and that each chains to the one before it, until `body` returns `false`.
    ///
    /// - Throws: the first ``LogError`` found (the entry it names is not passed to `body`), or what `body` throws.
    public func scan(
        in transaction: ReadTransaction, from start: UInt64 = 1, through end: UInt64? = nil,
        _ body: (LogEntry) throws -> Bool
    ) throws {
        var previous: (sequence: UInt64, chain: UInt64)?
        var start = start
        if let compaction = try compaction(in: transaction), start <= compaction.through + 1 {
            // The entries a compaction dropped are not read, even where they are still there to be removed.
            start = compaction.through + 1
            if compaction.through > 0 { previous = (compaction.through, compaction.chain) }
        } else if start > 1 {
            let before = try entry(start - 1, in: transaction)
            previous = (before.localSequence, before.checksum)
        }
        var failure: (any Error)?
        let upper = end.flatMap { $0 == UInt64.max ? nil : Self.key($0 + 1) }
        try transaction.scan(entries, from: Self.key(start), to: upper) { key, value in
            guard let sequence = Self.sequence(fromKey: key) else {
                failure = LogError(.sequenceMismatch, localSequence: 0, "the log holds a key of \(key.count) bytes")
                return false
            }
            do {
                let entry = try LogEntry(decoding: value, localSequence: sequence)
                let expected = previous.map { $0.sequence + 1 } ?? 1
                if sequence != expected {
                    throw LogError(
                        .chainBroken, localSequence: sequence,
                        "log entry \(expected) is missing: entry \(sequence) follows entry \(expected - 1)")
                }
                if entry.previousChain != (previous?.chain ?? 0) {
                    throw LogError(
                        .chainBroken, localSequence: sequence,
                        "log entry \(sequence) (origin \(entry.origin), seq \(entry.originSequence)) does not chain to "
                            + "entry \(sequence - 1): an entry was replaced, dropped or swapped")
                }
                previous = (sequence, entry.checksum)
                return try body(entry)
            } catch {
                failure = error
                return false
            }
        }
        if let failure { throw failure }
    }

    /// The local sequence at which changeset `dot` was integrated, if it was (its first entry, for a changeset a relay
    /// adopted after this replica held it). A dot without a key of its own is looked for where the run of the last key
    /// before it puts it, and counts only if that entry's header names it.
    ///
    /// A changeset that a compaction's base holds (``LogCompaction/held``) is integrated; its entry may be gone. Its
    /// answer is then its entry as the index gives it, which is at or below the compaction's ``LogCompaction/through``,
    /// or 0 when the index has no key for it (a base installed from a daemon's).
    public func localSequence(of dot: Dot, in transaction: ReadTransaction) throws -> UInt64? {
        guard let run = try indexedKey(atOrBefore: dot, in: transaction) else {
            return try compaction(in: transaction)?.holds(dot) == true ? 0 : nil
        }
        if run.sequence == dot.sequence { return run.localSequence }
        let (candidate, overflow) = run.localSequence.addingReportingOverflow(dot.sequence - run.sequence)
        guard !overflow else { return nil }
        guard let named = try originDot(ofEntry: candidate, in: transaction) else {
            // Only a missing entry (a dropped one, or past the end) is worth reading the compaction marker for.
            guard let compaction = try compaction(in: transaction), compaction.holds(dot) else { return nil }
            return min(candidate, compaction.through)
        }
        return named == dot ? candidate : nil
    }

    /// Whether `entry` is the entry the origin index gives for its changeset: its first one (a later one is a relay's
    /// adopted copy, which records the adoption only). What a replay asks of every entry.
    ///
    /// - Throws: ``LogError`` naming the entry when the origin index does not find its changeset at all: the index is
    ///   damaged, and a replay that went on would leave the changeset out.
    public func isFirstEntry(_ entry: LogEntry, in transaction: ReadTransaction) throws -> Bool {
        guard let first = try localSequence(of: entry.dot, in: transaction) else {
            throw LogError(
                .missingEntry, localSequence: entry.localSequence,
                "the log's origin index does not find changeset \(entry.dot) of entry \(entry.localSequence): the index "
                    + "is damaged; restore this replica from a peer or a backup")
        }
        return first == entry.localSequence
    }

    /// The last key of the origin index at or before `dot`, among its origin's: that key's origin sequence and local
    /// sequence.
    private func indexedKey(
        atOrBefore dot: Dot, in transaction: ReadTransaction
    ) throws -> (sequence: UInt64, localSequence: UInt64)? {
        var found: (sequence: UInt64, localSequence: UInt64)?
        // Keys are 16 bytes: this one plus a zero byte sorts after the dot's own key and before every later one.
        try transaction.scan(
            origins, from: Self.originKey(Dot(origin: dot.origin, sequence: 0)), to: Self.originKey(dot) + [0],
            reverse: true
        ) { key, value in
            if key.count == 16, value.count == 8 {
                found = (
                    UInt64(bigEndian: key.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
                    UInt64(bigEndian: value.loadUnaligned(as: UInt64.self))
                )
            }
            return false
        }
        return found
    }

    /// The origin dot the header of entry `localSequence` names, or `nil` when the log has no such entry. Reads the
    /// header only: the payload's checksum is checked where the entry is read.
    ///
    /// - Throws: ``LogError`` naming the entry when its header is damaged: a run must not end early, quietly, at it.
    func originDot(ofEntry localSequence: UInt64, in transaction: ReadTransaction) throws -> Dot? {
        try transaction.withValue(entries, key: Self.key(localSequence)) { value in
            guard let value else { return nil }
            guard let dot = LogEntry.originDot(ofStored: value, localSequence: localSequence) else {
                throw LogError(
                    .truncated, localSequence: localSequence,
                    "log entry \(localSequence) has a damaged header (\(value.count) bytes): restore this replica from a "
                        + "peer or a backup")
            }
            return dot
        }
    }

    /// The changesets from `origin` with origin sequence greater than `after`, in origin order: each one's origin dot
    /// and local sequence. Reads the origin index, and of a run of changesets without keys of their own (see
    /// ``origins``) the headers of a few entries, to find where the run ends; so a caller can skip changesets by dot
    /// without reading them.
    ///
    /// - Parameter limit: the changesets wanted: the read stops once it has at least that many (it may return a
    ///   few more), so that a caller taking the first few of a long history does not read all of it.
    public func originEntries(
        from origin: ReplicaID, after: UInt64, limit: Int = .max, in transaction: ReadTransaction
    ) throws -> [(dot: Dot, localSequence: UInt64)] {
        let compaction = try compaction(in: transaction)
        // What a compaction's base holds has no entries to list.
        let after = max(after, compaction?.held[origin] ?? 0)
        guard after < UInt64.max else { return [] }
        // The keys from the one whose run may hold `after + 1` on.
        var keys: [(sequence: UInt64, localSequence: UInt64)] = []
        if let run = try indexedKey(atOrBefore: Dot(origin: origin, sequence: after + 1), in: transaction),
            run.sequence <= after
        {
            keys.append(run)
        }
        try transaction.scan(
            origins, from: Self.originKey(Dot(origin: origin, sequence: after + 1)),
            to: Self.originKey(Dot(origin: origin, sequence: .max)) + [0]
        ) { key, value in
            if key.count == 16, value.count == 8 {
                keys.append(
                    (
                        UInt64(bigEndian: key.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
                        UInt64(bigEndian: value.loadUnaligned(as: UInt64.self))
                    ))
            }
            // Each key names at least its own changeset; one more key bounds the last run read.
            return limit == .max || keys.count <= limit + 1
        }
        if let compaction {
            // A run whose key a compaction dropped ends at or before the dropped entries: the first entry after them
            // that continued it got a key of its own (``storeCompaction(_:in:)``).
            keys.removeAll { $0.localSequence <= compaction.through }
        }
        guard !keys.isEmpty else { return [] }
        let last = try lastLocalSequence(in: transaction)
        var result: [(dot: Dot, localSequence: UInt64)] = []
        for index in keys.indices {
            if result.count >= limit { break }
            let key = keys[index]
            // A damaged page could list keys out of order; the arithmetic below needs them ascending.
            if index + 1 < keys.count, keys[index + 1].sequence <= key.sequence {
                throw LogError(
                    .sequenceMismatch, localSequence: keys[index + 1].localSequence,
                    "the origin index of \(origin) lists sequence \(keys[index + 1].sequence) after \(key.sequence): "
                        + "the index is damaged")
            }
            // The run goes on while each next entry names the next dot, up to the next key and the log's end. Its
            // entries are those of a prefix of that range (each one continues the one before), so the end is found
            // by bisection, reading a few headers.
            var longest = min(
                index + 1 < keys.count ? keys[index + 1].sequence - key.sequence - 1 : .max - key.sequence,
                last >= key.localSequence ? last - key.localSequence : 0)
            var shortest: UInt64 = 0
            while shortest < longest {
                let middle = shortest + (longest - shortest + 1) / 2
                let dot = Dot(origin: origin, sequence: key.sequence + middle)
                guard let named = try originDot(ofEntry: key.localSequence + middle, in: transaction) else {
                    throw LogError(
                        .missingEntry, localSequence: key.localSequence + middle,
                        "the log has no entry \(key.localSequence + middle), before its last (\(last))")
                }
                if named == dot {
                    shortest = middle
                } else {
                    longest = middle - 1
                }
            }
            let first = key.sequence > after ? 0 : after + 1 - key.sequence
            guard first <= shortest else { continue }
            // A run may hold a long history: only as much of it as the caller wants.
            let wanted = UInt64(clamping: limit - result.count)
            let through = shortest - first >= wanted ? first + wanted - 1 : shortest
            for step in first...through {
                result.append((Dot(origin: origin, sequence: key.sequence + step), key.localSequence + step))
            }
        }
        return result
    }

    /// Records the entry at `localSequence`, written already, in the origin index and the adoptions: what
    /// ``append(_:encoded:frame:after:in:context:)`` does after writing an entry, for a copy of a log.
    ///
    /// The first entry of an origin dot stays its entry: an adopted copy of a changeset the log already holds only
    /// records the adoption. A changeset whose origin's previous changeset is the entry just before it continues that
    /// one's run, and gets no key of its own (see ``origins``); every other one does. So every dot without a key
    /// follows held dots back to a key, at consecutive entries, and no key can later come between them (those dots are
    /// held): a run's entries are always those of a prefix of the sequences up to the next key.
    ///
    /// - Throws: ``LogError`` when the changeset's stored adoptions are damaged (a relay's copy cannot be recorded
    ///   beside them), or a storage error.
    public func index(_ dot: Dot, relay: Dot?, at localSequence: UInt64, in transaction: WriteTransaction) throws {
        // Counting from an earlier key may land on this very entry (it names the dot) without the entries between
        // continuing the run: that is not holding it.
        let held = try self.localSequence(of: dot, in: transaction)
        if held == nil || held == localSequence {
            var continuesRun = false
            if dot.sequence > 0 && localSequence > 1 {
                let previous = Dot(origin: dot.origin, sequence: dot.sequence - 1)
                continuesRun = try self.localSequence(of: previous, in: transaction) == localSequence - 1
            }
            if !continuesRun {
                try transaction.put(origins, key: Self.originKey(dot), value: Self.key(localSequence))
            }
        }
        if let relay {
            try transaction.put(origins, key: Self.originKey(relay), value: Self.key(localSequence))
            // Every adoption is kept, in the order recorded: a changeset adopted by two relays is seen through either.
            let recorded = try causalDots(ofOrigin: dot, in: transaction)
            if !recorded.contains(relay) {
                try transaction.put(
                    adoptions, key: Self.originKey(dot), value: (recorded + [relay]).flatMap { Self.originKey($0) })
            }
        }
    }

    /// The local sequence of the log's last entry, 0 when it is empty.
    private func lastLocalSequence(in transaction: ReadTransaction) throws -> UInt64 {
        try transaction.lastKey(entries).flatMap { key in key.withUnsafeBytes { Self.sequence(fromKey: $0) } } ?? 0
    }

    /// The adoptions as the log's entries give them, in log order: what ``index(_:relay:at:in:)`` records as entries
    /// are appended. `verify` records them as its replay meets the entries, and compares them with the stored ones
    /// (``adoptionProblem(expected:in:)``).
    public struct RebuiltAdoptions: Sendable {
        /// Origin dots in the order their first relay dot appears.
        var order: [Dot] = []
        /// Every relay dot of each origin dot, in log order.
        var copies: [Dot: [Dot]] = [:]
        /// Each relay dot's log entry.
        var relayEntries: [(relay: Dot, localSequence: UInt64)] = []

        /// None yet: entries are recorded as a scan of the log meets them.
        public init() {}

        /// Records the entry at `localSequence`, which holds `relay`'s copy of the changeset `dot`. Entries must be
        /// recorded in log order.
        public mutating func record(_ dot: Dot, relay: Dot, at localSequence: UInt64) {
            relayEntries.append((relay, localSequence))
            if copies[dot]?.contains(relay) != true {
                if copies[dot] == nil { order.append(dot) }
                copies[dot, default: []].append(relay)
            }
        }
    }

    /// The first way the stored adoptions, and the origin index's relay dots, differ from `expected` (what the
    /// entries hold, recorded as a scan met them), in words for a verify report; `nil` when they agree.
    ///
    /// Merges read the adoptions to decide whether a writer had seen a changeset, so adoptions that lost a copy, or
    /// name one no entry holds, can make a replica merge differently from its peers.
    ///
    /// In a compacted log, the copies whose entries a base replaced (``LogCompaction/held``) are not compared.
    public func adoptionProblem(expected: RebuiltAdoptions, in transaction: ReadTransaction) throws -> String? {
        let compaction = try compaction(in: transaction)
        func inEntries(_ relays: [Dot]) -> [Dot] {
            guard let compaction else { return relays }
            return relays.filter { !compaction.holds($0) }
        }
        for dot in expected.order {
            let stored: [Dot]
            do { stored = inEntries(try causalDots(ofOrigin: dot, in: transaction)) } catch let error as LogError {
                return error.message
            }
            let copies = expected.copies[dot] ?? []
            if stored != copies {
                return
                    "the log's adoptions of changeset \(dot) are \(stored), but its entries hold the copies \(copies)"
            }
        }
        var problem: String?
        try transaction.scan(adoptions) { key, value in
            guard key.count == 16 else {
                problem = "the log's adoptions hold a key of \(key.count) bytes"
                return false
            }
            let dot = Self.dot(fromOriginKey: key)
            let replaced = try compaction != nil && inEntries(Self.relayDots(adoptionsValue: value, of: dot)).isEmpty
            if expected.copies[dot] == nil, !replaced {
                problem = "the log's adoptions name changeset \(dot), of which no entry holds a relay's copy"
                return false
            }
            return true
        }
        if let problem { return problem }
        for (relay, localSequence) in expected.relayEntries {
            let indexed = try self.localSequence(of: relay, in: transaction)
            if indexed != localSequence {
                return "the origin index gives relay dot \(relay) "
                    + (indexed.map { "entry \($0)" } ?? "no entry") + ", but entry \(localSequence) holds it"
            }
        }
        return nil
    }

    /// The relay dot the changeset with origin dot `dot` was first adopted as, if a relay adopted it.
    ///
    /// - Throws: ``LogError`` when its stored adoptions are damaged (see ``causalDots(ofOrigin:in:)``).
    public func causalDot(ofOrigin dot: Dot, in transaction: ReadTransaction) throws -> Dot? {
        try causalDots(ofOrigin: dot, in: transaction).first
    }

    /// Every relay dot the changeset with origin dot `dot` was adopted as, in the order this log recorded them (more
    /// than one when an app uploaded it to two relays before it heard of either adoption). Stored as one value of
    /// 16 bytes per dot.
    ///
    /// - Throws: ``LogError`` when the stored value is not a whole number of dots (damage).
    public func causalDots(ofOrigin dot: Dot, in transaction: ReadTransaction) throws -> [Dot] {
        try transaction.withValue(adoptions, key: Self.originKey(dot)) { value in
            guard let value else { return [] }
            return try Self.relayDots(adoptionsValue: value, of: dot)
        }
    }

    /// The relays' copies of `origin`'s changesets after sequence `after`: each adopted changeset's origin dot, with
    /// the relay dots it was adopted as (see ``causalDots(ofOrigin:in:)``). One range read of the adoptions, as long
    /// as that range; an empty read for an origin whose changesets no relay adopted.
    ///
    /// - Throws: ``LogError`` when a stored value in the range is not a whole number of dots (damage).
    package func adoptedCopies(
        of origin: ReplicaID, after: UInt64, in transaction: ReadTransaction
    ) throws -> [Dot: [Dot]] {
        guard after < UInt64.max else { return [:] }
        var result: [Dot: [Dot]] = [:]
        try transaction.scan(
            adoptions, from: Self.originKey(Dot(origin: origin, sequence: after + 1)),
            to: Self.originKey(Dot(origin: origin, sequence: .max)) + [0]
        ) { key, value in
            guard key.count == 16 else { return true }  // verify names a key of another length
            let dot = Self.dot(fromOriginKey: key)
            result[dot] = try Self.relayDots(adoptionsValue: value, of: dot)
            return true
        }
        return result
    }

    /// Visits the stored adoptions, each adopted changeset's origin dot with its relay dots, in origin key order
    /// (after the origin key `after`, when given), until `body` returns `false`.
    ///
    /// - Throws: ``LogError`` when a stored value is damaged, or what `body` throws.
    public func forEachAdoption(
        in transaction: ReadTransaction, after: [UInt8]? = nil, _ body: (Dot, [Dot]) throws -> Bool
    ) throws {
        try transaction.scan(adoptions, from: after.map { $0 + [0] }) { key, value in
            guard key.count == 16 else { return true }  // verify names a key of another length
            let dot = Self.dot(fromOriginKey: key)
            return try body(dot, try Self.relayDots(adoptionsValue: value, of: dot))
        }
    }

    /// The relay dots a stored adoptions value lists.
    ///
    /// - Throws: ``LogError`` when it is not a whole number of dots (damage). Read as none, it would make merges on
    ///   this replica decide unlike its peers'.
    private static func relayDots(adoptionsValue value: UnsafeRawBufferPointer, of dot: Dot) throws -> [Dot] {
        guard !value.isEmpty, value.count % 16 == 0 else {
            throw LogError(
                .undecodable, localSequence: 0,
                "the log's adoptions of changeset \(dot) are damaged: \(value.count) bytes, not a whole number of "
                    + "16-byte dots; restore this replica from a peer or a backup")
        }
        return stride(from: 0, to: value.count, by: 16).map { Self.dot(fromOriginKey: value, at: $0) }
    }

    /// The number of entries in the origin index.
    public func originCount(in transaction: ReadTransaction) throws -> Int { try transaction.count(origins) }

    // MARK: Writing

    /// Appends a changeset after `head` and records it in the origin index. `encoded` is its encoding, when the
    /// caller already has it; `frame`, a zstd frame of that encoding as a peer sent it (see ``received(_:context:)``),
    /// is stored as it came instead of compressing the encoding again.
    ///
    /// - Throws: ``LogError/Code/tooLarge`` for a changeset over ``maximumChangesetBytes``, or a storage error.
    @discardableResult
    public func append(
        _ changeset: Changeset, encoded: [UInt8]? = nil, frame: [UInt8]? = nil, after head: inout LogHead,
        in transaction: WriteTransaction, context: ZstdContext? = nil
    ) throws -> LogEntry {
        try append(
            changeset.header, encoded: encoded ?? ChangesetCodec.encode(changeset), frame: encoded == nil ? nil : frame,
            after: &head, in: transaction, context: context)
    }

    /// ``append(_:encoded:frame:after:in:context:)`` of the changeset `header` heads, given its encoding: what a
    /// transaction that holds its instructions encoded appends.
    @discardableResult
    public func append(
        _ header: ChangesetCodec.Header, encoded bytes: [UInt8], frame: [UInt8]? = nil, after head: inout LogHead,
        in transaction: WriteTransaction, context: ZstdContext? = nil
    ) throws -> LogEntry {
        guard head.localSequence < .max else {
            throw LogError(
                .sequenceMismatch, localSequence: head.localSequence,
                "the log's last entry has local sequence \(head.localSequence), the largest there is: no entry can follow "
                    + "it (the log is damaged)")
        }
        let localSequence = head.localSequence + 1
        guard bytes.count <= maximumChangesetBytes, let length = UInt32(exactly: bytes.count) else {
            throw LogError(
                .tooLarge, localSequence: localSequence,
                "changeset \(header.dot) is \(bytes.count) bytes encoded, over the log's limit of "
                    + "\(maximumChangesetBytes) bytes; split the transaction")
        }
        var payload = bytes
        var compressed = false
        if let frame, frame.count < bytes.count {
            // The frame a peer sent, which decompressed to `encoded` (see ``received(_:context:)``): stored as it came.
            payload = frame
            compressed = true
        } else if bytes.count >= compressionThreshold {
            let packed = try codec.compress(bytes, context: context)
            if packed.count < bytes.count {
                payload = packed
                compressed = true
            }
        }
        let entry = LogEntry(
            localSequence: localSequence, origin: header.origin, originSequence: header.originSequence,
            time: header.time, instructionCount: UInt32(clamping: header.instructionCount),
            uncompressedLength: length, isCompressed: compressed, previousChain: head.chain, payload: payload)
        try transaction.append(entries, key: Self.key(localSequence), value: entry.encoded())
        try index(header.dot, relay: header.relay, at: localSequence, in: transaction)
        head = LogHead(localSequence: localSequence, chain: entry.checksum)
        return entry
    }
}
