/// A hybrid logical clock reading: milliseconds since 1970 in the high 48 bits and a logical counter in the low
/// 16 bits, so readings compare as plain integers.
///
/// A reading is never smaller than the wall clock it was taken at, and a replica's readings only grow, even when
/// its wall clock goes back: that keeps "happened before" consistent with "has a smaller stamp".
public struct HybridTime: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The packed reading.
    public var rawValue: UInt64

    public init(rawValue: UInt64) { self.rawValue = rawValue }

    public init(milliseconds: UInt64, counter: UInt16 = 0) {
        rawValue = (milliseconds << 16) | UInt64(counter)
    }

    /// The zero reading, earlier than every real one; it stamps values filled from defaults.
    public static let zero = HybridTime(rawValue: 0)

    /// Milliseconds since 1970-01-01 UTC.
    public var milliseconds: UInt64 { rawValue >> 16 }
    /// The logical counter that orders readings taken within one millisecond.
    public var counter: UInt16 { UInt16(truncatingIfNeeded: rawValue) }

    public static func < (lhs: HybridTime, rhs: HybridTime) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String { "\(milliseconds).\(counter)" }
}

/// A source of wall-clock time, injected so simulations and tests control time.
public protocol WallClock: Sendable {
    /// Milliseconds since 1970-01-01 UTC.
    func milliseconds() -> UInt64
}

/// The hybrid logical clock of one replica (Kulkarni et al., 2014).
///
/// ```swift
/// var clock = HybridLogicalClock()
/// let stamp = clock.tick(wallMilliseconds: wall.milliseconds())
/// try clock.observe(remoteStamp, wallMilliseconds: wall.milliseconds(), maximumSkewMilliseconds: 60_000)
/// ```
public struct HybridLogicalClock: Hashable, Sendable {
    /// The latest reading this clock produced or observed.
    public private(set) var latest: HybridTime

    public init(latest: HybridTime = .zero) { self.latest = latest }

    /// Takes a new reading, greater than every earlier one.
    public mutating func tick(wallMilliseconds: UInt64) -> HybridTime {
        let wall = HybridTime(milliseconds: wallMilliseconds)
        if wall > latest {
            latest = wall
        } else {
            // Same or earlier millisecond: count up. A full counter borrows the next millisecond.
            latest = HybridTime(rawValue: latest.rawValue &+ 1)
        }
        return latest
    }

    /// Advances the clock past a reading received from another replica, refusing one stamped further in the
    /// future than `maximumSkewMilliseconds` (docs/MergeSemantics.md, rule 9): such a reading would win every later
    /// conflict.
    ///
    /// - Throws: ``ClockSkewError`` naming both readings and the bound; the clock is then unchanged.
    public mutating func observe(
        _ remote: HybridTime, wallMilliseconds: UInt64, maximumSkewMilliseconds: UInt64
    ) throws(ClockSkewError) {
        let (limit, overflow) = wallMilliseconds.addingReportingOverflow(maximumSkewMilliseconds)
        if !overflow && remote.milliseconds > limit {
            throw ClockSkewError(
                remote: remote, localMilliseconds: wallMilliseconds, maximumSkewMilliseconds: maximumSkewMilliseconds)
        }
        if remote > latest { latest = remote }
    }
}

/// A reading from another replica is too far ahead of this replica's clock (docs/MergeSemantics.md, rule 9).
public struct ClockSkewError: Error, Hashable, Sendable, CustomStringConvertible {
    public var remote: HybridTime
    public var localMilliseconds: UInt64
    public var maximumSkewMilliseconds: UInt64

    public var description: String {
        "stamp \(remote) is \(remote.milliseconds &- localMilliseconds) ms ahead of this replica's clock "
            + "(\(localMilliseconds) ms); the limit is \(maximumSkewMilliseconds) ms. Check the sender's clock"
    }
}

/// A total order on writes: the hybrid time of the changeset, then its origin replica id.
///
/// Two changesets never share a stamp; instructions within one changeset share it and apply in order.
public struct Stamp: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var time: HybridTime
    public var replica: ReplicaID

    public init(time: HybridTime, replica: ReplicaID) {
        self.time = time
        self.replica = replica
    }

    /// The stamp of values filled from a default: earlier than every write (docs/MergeSemantics.md, rule 3).
    public static let zero = Stamp(time: .zero, replica: .none)

    public static func < (lhs: Stamp, rhs: Stamp) -> Bool {
        (lhs.time, lhs.replica) < (rhs.time, rhs.replica)
    }

    public var description: String { "\(time)@\(replica)" }
}
