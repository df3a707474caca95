import Foundation
public import TributaryModel

/// The wall clock of the operating system.
public struct SystemWallClock: WallClock {
    public init() {}
    public func milliseconds() -> UInt64 {
        UInt64(max(0, (Date().timeIntervalSince1970 * 1000).rounded(.down)))
    }
}

extension Replica {
    /// How commits reach the disk, described by the ACID property each mode gives up.
    public enum Durability: Sendable, Hashable {
        /// Every commit is flushed to disk before `write` returns: committed data survives a process crash and
        /// power loss. The default.
        case full
        /// The commit's last step is not flushed: atomicity, consistency and isolation hold and a process crash
        /// loses nothing, but a power loss may undo the most recent commit.
        case relaxed
        /// Commits are not flushed. A process crash (`kill -9`) loses nothing, because the operating system holds
        /// the written pages; a power loss or system crash may undo recent commits. For tests and rebuildable data.
        case none
    }

    /// How to open a replica. Every default is listed with its property.
    public struct Configuration: Sendable {
        /// How commits reach the disk. Default: ``Durability/full``.
        public var durability: Durability = .full
        /// The space reserved at first (it only reserves address space; the file grows as data is written). The
        /// replica grows by itself up to ``maximumSizeBytes``. Default: 16 MiB.
        public var initialSizeBytes: Int = 16 << 20
        /// The largest the replica may grow to. A write that would pass it fails with
        /// ``TributaryError/Code/mapFull``, and nothing committed is lost. Default: 64 GiB.
        public var maximumSizeBytes: Int = 64 << 30
        /// Open without writing: for tools that inspect a replica another process writes. Default: `false`.
        public var readOnly: Bool = false
        /// The user id recorded as the author of local writes (checked by a daemon's permission rules). Default: "".
        public var author: String = ""
        /// The largest amount a changeset from another replica may be stamped ahead of this replica's clock; one
        /// further ahead is refused (docs/MergeSemantics.md, rule 9). Default: 10 minutes.
        public var maximumClockSkew: Duration = .seconds(600)
        /// The source of wall-clock time. Default: the system clock. Tests and simulations inject their own.
        public var clock: any WallClock = SystemWallClock()
        /// The id of a new replica. Default: `nil`, a random id. Set it only in tests and simulations.
        public var replicaID: ReplicaID?
        /// Development only: when the stored schema differs from the one given and a migration would be needed,
        /// delete the replica and start over. **Never use this in production: it deletes every object and the
        /// whole history.** Default: `false`.
        public var deleteReplicaIfMigrationNeeded: Bool = false
        /// The most reader slots, which bounds concurrently open snapshots across processes. Default: 1,024.
        public var maximumReaders: Int = 1024
        /// The most bytes a batch given to ``Replica/integrate(encoded:)`` may decompress to (its changesets'
        /// encodings) before its next element; one changeset may always come alone, up to the log's limit of 256 MiB.
        /// A batch is decoded whole before it is applied, and a few kilobytes of zstd frames can claim gigabytes. The
        /// decoded changesets take a small multiple of their encodings' bytes in memory. Default: 256 MiB.
        public var maximumBatchBytes: Int = 256 << 20

        public init() {}

        /// The skew in milliseconds, at most 2^48 (about 8,900 years), so that adding it to a clock reading cannot
        /// overflow: a skew of `.seconds(.max)` means no bound.
        var maximumClockSkewMilliseconds: UInt64 { Self.skewMilliseconds(maximumClockSkew) }

        /// `skew` in milliseconds, at most 2^48.
        static func skewMilliseconds(_ skew: Duration) -> UInt64 {
            let (seconds, attoseconds) = skew.components
            let bound: Int64 = 1 << 48
            guard seconds < bound / 1000 else { return UInt64(bound) }
            return UInt64(max(0, seconds)) * 1000 + UInt64(max(0, attoseconds) / 1_000_000_000_000_000)
        }
    }
}
