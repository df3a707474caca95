/// For each replica, the highest origin sequence number integrated from it.
///
/// Kept as an array sorted by replica id, so that encoding and comparison never depend on hash order.
/// Changesets from one origin are integrated in sequence order, so one number per origin says everything.
public struct VersionVector: Hashable, Sendable, CustomStringConvertible {
    /// The entries, sorted by replica id, each with a sequence greater than zero.
    public private(set) var entries: [Entry]

    public struct Entry: Hashable, Sendable {
        public var replica: ReplicaID
        public var sequence: UInt64
        public init(replica: ReplicaID, sequence: UInt64) {
            self.replica = replica
            self.sequence = sequence
        }
    }

    public init() { entries = [] }

    /// Builds a vector from entries in any order; a replica listed twice keeps its highest sequence.
    public init(_ pairs: [(ReplicaID, UInt64)]) {
        entries = []
        for (replica, sequence) in pairs { advance(replica, to: sequence) }
    }

    private func index(of replica: ReplicaID) -> (found: Bool, index: Int) {
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].replica < replica { low = middle + 1 } else { high = middle }
        }
        return (low < entries.count && entries[low].replica == replica, low)
    }

    /// The highest sequence integrated from `replica` (0 for none).
    public subscript(replica: ReplicaID) -> UInt64 {
        let (found, index) = index(of: replica)
        return found ? entries[index].sequence : 0
    }

    /// Raises the entry of `replica` to `sequence` (never lowers it).
    public mutating func advance(_ replica: ReplicaID, to sequence: UInt64) {
        guard sequence > 0 else { return }
        let (found, index) = index(of: replica)
        if found {
            entries[index].sequence = max(entries[index].sequence, sequence)
        } else {
            entries.insert(Entry(replica: replica, sequence: sequence), at: index)
        }
    }

    /// Whether the changeset `dot` is covered by this vector.
    public func includes(_ dot: Dot) -> Bool { self[dot.origin] >= dot.sequence }

    /// Whether every entry of `other` is covered by this vector.
    public func includes(_ other: VersionVector) -> Bool {
        other.entries.allSatisfy { self[$0.replica] >= $0.sequence }
    }

    /// The entry-wise maximum.
    public mutating func formUnion(_ other: VersionVector) {
        for entry in other.entries { advance(entry.replica, to: entry.sequence) }
    }

    /// The total number of changesets the vector covers.
    public var total: UInt64 { entries.reduce(0) { $0 &+ $1.sequence } }

    public var description: String {
        "[" + entries.map { "\($0.replica):\($0.sequence)" }.joined(separator: ", ") + "]"
    }
}
