/// The identity of a replica: 64 random bits, shown as 16 hexadecimal digits.
///
/// Every changeset carries its origin's replica id, and the id breaks ties between equal clock readings, so
/// two replicas must never share one. A new replica draws its id from the system's random generator.
public struct ReplicaID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The id's bits.
    public var rawValue: UInt64

    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// The zero id, which no replica uses; it marks "no replica" in stamps that stand for defaults.
    public static let none = ReplicaID(rawValue: 0)

    /// A fresh random id (never ``none``).
    public static func random() -> ReplicaID {
        var generator = SystemRandomNumberGenerator()
        return random(using: &generator)
    }

    /// A fresh id drawn from `generator` (never ``none``), for seeded tests and simulations.
    public static func random(using generator: inout some RandomNumberGenerator) -> ReplicaID {
        while true {
            let bits = generator.next()
            if bits != 0 { return ReplicaID(rawValue: bits) }
        }
    }

    /// Parses 16 hexadecimal digits (or fewer).
    public init?(hex: some StringProtocol) {
        guard !hex.isEmpty, hex.count <= 16, let value = UInt64(hex, radix: 16) else { return nil }
        self.rawValue = value
    }

    public var description: String {
        let digits = String(rawValue, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    public static func < (lhs: ReplicaID, rhs: ReplicaID) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// One changeset's causal identity: its origin replica and the origin's sequence number for it.
public struct Dot: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var origin: ReplicaID
    public var sequence: UInt64

    public init(origin: ReplicaID, sequence: UInt64) {
        self.origin = origin
        self.sequence = sequence
    }

    public var description: String { "\(origin):\(sequence)" }

    public static func < (lhs: Dot, rhs: Dot) -> Bool {
        (lhs.origin, lhs.sequence) < (rhs.origin, rhs.sequence)
    }
}
