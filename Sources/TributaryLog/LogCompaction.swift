import Synchronization
public import TributaryModel
public import TributaryStorage

/// What a compacted log no longer holds: its entries 1 through ``through``, whose effect a base state replaces (the
/// replica keeps that state beside the log). A replica that started from a daemon's base (a fresh replica
/// bootstrapped from a compacted daemon) has a compaction through 0: it dropped nothing of its own, but its base
/// holds the changesets of ``held``.
public struct LogCompaction: Hashable, Sendable {
    /// The last local sequence the base replaces; the log's first entry is the one after it.
    public var through: UInt64
    /// The chain value of entry ``through``, which the next entry chains to (0 for none).
    public var chain: UInt64
    /// The version vector the base holds: what a replay of the dropped entries integrated, counted by causal dots (a
    /// relay's dot for a changeset it adopted), as version vectors count. A replica whose vector does not include it
    /// lacks changesets that only the base holds, and cannot be sent them.
    public var vector: VersionVector
    /// For each origin, the highest sequence of the changesets whose first entry the base replaces, by origin dot and
    /// by relay dot alike: the origin index's answer for those dots (``ChangesetLog/localSequence(of:in:)``), so that
    /// a changeset the base holds is never taken again.
    public var held: VersionVector
    /// The latest stamp of the changesets the base holds: a replica that starts from the base sets its clock past it,
    /// so that its own writes are stamped after every value the base holds.
    public var latest: HybridTime
    /// When the compaction ran, in seconds since 1970.
    public var time: UInt64
    /// Which of the replica's base states holds the records: each compaction writes a new generation beside the last
    /// one, and switches to it in the commit that stores this.
    public var generation: UInt64

    public init(
        through: UInt64, chain: UInt64, vector: VersionVector, held: VersionVector, latest: HybridTime, time: UInt64,
        generation: UInt64
    ) {
        self.latest = latest
        self.through = through
        self.chain = chain
        self.vector = vector
        self.held = held
        self.time = time
        self.generation = generation
    }

    /// Whether the base holds changeset `dot` (named by its origin dot or a relay's).
    public func holds(_ dot: Dot) -> Bool { held.includes(dot) }

    /// The stored form.
    public func encoded() -> [UInt8] {
        var writer = BinaryWriter()
        writer.byte(1)
        writer.varint(through)
        writer.fixed64(chain)
        writer.versionVector(vector)
        writer.versionVector(held)
        writer.fixed64(latest.rawValue)
        writer.varint(time)
        writer.varint(generation)
        return writer.bytes
    }

    /// Decodes ``encoded()``.
    ///
    /// - Throws: ``LogError`` with `.undecodable` when the bytes are damaged or of a later version.
    public init(decoding bytes: [UInt8]) throws(LogError) {
        var reader = BinaryReader(bytes, subject: "the log's compaction marker")
        do throws(ChangesetDecodingError) {
            let version = try reader.byte()
            guard version == 1 else {
                throw reader.error(.unsupportedFormatVersion, "version \(version), which this build does not read")
            }
            self.init(
                through: try reader.varint(), chain: try reader.fixed64(), vector: try reader.versionVector(),
                held: try reader.versionVector(), latest: HybridTime(rawValue: try reader.fixed64()),
                time: try reader.varint(), generation: try reader.varint())
        } catch {
            throw LogError(
                .undecodable, localSequence: 0,
                "the log's compaction marker is damaged (\(error)); restore this replica from a peer or a backup")
        }
    }
}

/// The last compaction marker a log decoded, with the stamp it was stored under: the marker's `held` vector has an
/// entry per app, and exports read the marker on every batch.
final class CompactionCache: Sendable {
    let value = Mutex<(stamp: [UInt8], compaction: LogCompaction)?>(nil)
}

extension ChangesetLog {
    /// The name of the database that holds the compaction marker.
    public static let compactionDatabaseName = "compaction"
    static let compactionKey = Array("marker".utf8)
    /// A short stamp of the marker (its generation, cut and time), stored beside it, by which a decoded marker is
    /// known to be current without reading the marker.
    static let compactionStampKey = Array("stamp".utf8)

    static func stamp(of compaction: LogCompaction) -> [UInt8] {
        var writer = BinaryWriter()
        writer.varint(compaction.generation)
        writer.varint(compaction.through)
        writer.varint(compaction.time)
        writer.fixed64(compaction.chain)
        return writer.bytes
    }

    /// What the log no longer holds, or `nil` when it was never compacted (it starts at entry 1).
    ///
    /// - Throws: ``LogError`` when the marker is damaged, or a storage error.
    public func compaction(in transaction: ReadTransaction) throws -> LogCompaction? {
        guard let compactions, let stamp = try transaction.get(compactions, key: Self.compactionStampKey) else {
            return nil
        }
        if let cached = compactionCache.value.withLock({ $0 }), cached.stamp == stamp { return cached.compaction }
        guard let bytes = try transaction.get(compactions, key: Self.compactionKey) else {
            throw LogError(
                .undecodable, localSequence: 0,
                "the log's compaction marker is missing beside its stamp; restore this replica from a peer or a backup")
        }
        let compaction = try LogCompaction(decoding: bytes)
        compactionCache.value.withLock { $0 = (stamp, compaction) }
        return compaction
    }

    /// Stores the marker of a compaction. Entries up to its ``LogCompaction/through`` are from then on read as
    /// dropped, whether or not ``dropEntries(through:limit:in:)`` removed them yet; the caller stores the base state
    /// it names in the same transaction.
    ///
    /// Before it stores the marker, it gives the entry after the dropped ones a key of its own in the origin index,
    /// where that entry continued a run whose key is among the dropped entries: a run is followed from its key by
    /// reading entry headers, which the dropped part no longer has. A run is a stretch of consecutive entries, so no
    /// later entry can continue one that began before the cut.
    public func storeCompaction(_ compaction: LogCompaction, in transaction: WriteTransaction) throws {
        guard let compactions else {
            throw LogError(
                .unsupportedFormat, localSequence: 0, "the log was opened read-only without a compaction database")
        }
        let next = compaction.through + 1
        if compaction.through > 0, let dot = try originDot(ofEntry: next, in: transaction),
            try localSequence(of: dot, in: transaction) == next
        {
            try transaction.put(origins, key: Self.originKey(dot), value: Self.key(next))
        }
        try transaction.put(compactions, key: Self.compactionKey, value: compaction.encoded())
        try transaction.put(compactions, key: Self.compactionStampKey, value: Self.stamp(of: compaction))
    }

    /// Removes up to `limit` entries at or below `through` (a stored compaction's), the first ones first. Returns how
    /// many it removed: 0 once none is left. The origin index and the adoptions keep their keys: merges and the
    /// "have I got this changeset?" question still read them.
    public func dropEntries(through: UInt64, limit: Int, in transaction: WriteTransaction) throws -> Int {
        var keys: [[UInt8]] = []
        try transaction.scan(entries, to: Self.key(through + 1)) { key, _ in
            keys.append(Array(key))
            return keys.count < limit
        }
        for key in keys { try transaction.delete(entries, key: key) }
        return keys.count
    }
}
