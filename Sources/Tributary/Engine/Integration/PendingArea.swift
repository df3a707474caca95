import Synchronization
import TributaryCompression
import TributaryLog
import TributaryMerge
import TributaryModel
import TributaryStorage
import TributaryViews

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
            throw ChangesetDecodingError(
                .invalidValue, "pending entry starts with \(value.first.map { "\($0)" } ?? "nothing"), not 0 or 1",
                offset: 0)
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
