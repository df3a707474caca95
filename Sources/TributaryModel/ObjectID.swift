public import Foundation

/// A 12-byte object id in the BSON layout: 4 bytes of seconds since 1970, then 8 random bytes.
///
/// Shown as 24 hexadecimal digits, as MongoDB and Realm show them.
public struct ObjectID: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The id's 12 bytes.
    public private(set) var bytes: [UInt8]

    /// Wraps 12 bytes; returns `nil` for any other length.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 12 else { return nil }
        self.bytes = bytes
    }

    /// Parses 24 hexadecimal digits.
    public init?(hex: String) {
        let utf8 = Array(hex.utf8)
        guard utf8.count == 24 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(12)
        var index = 0
        while index < 24 {
            guard let high = hexValue(utf8[index]), let low = hexValue(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        self.bytes = bytes
    }

    /// A new id: the current time, then random bytes.
    public static func generate(date: Date = Date()) -> ObjectID {
        // Clamped: a date before 1970 or after 2106 (or not a number) still makes an id, as MongoDB's do.
        let interval = date.timeIntervalSince1970
        let seconds = interval.isNaN ? 0 : UInt32(max(0, min(interval, Double(UInt32.max))))
        var bytes: [UInt8] = [
            UInt8(seconds >> 24), UInt8(truncatingIfNeeded: seconds >> 16), UInt8(truncatingIfNeeded: seconds >> 8),
            UInt8(truncatingIfNeeded: seconds),
        ]
        var generator = SystemRandomNumberGenerator()
        let random = generator.next()
        for shift in stride(from: 56, through: 0, by: -8) {
            bytes.append(UInt8(truncatingIfNeeded: random >> UInt64(shift)))
        }
        return ObjectID(bytes: bytes)!
    }

    public var description: String {
        let digits: [Character] = Array("0123456789abcdef")
        return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] })
    }

    public static func < (lhs: ObjectID, rhs: ObjectID) -> Bool { lhs.bytes.lexicographicallyPrecedes(rhs.bytes) }
}

private func hexValue(_ character: UInt8) -> UInt8? {
    switch character {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): return character - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): return character - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): return character - UInt8(ascii: "A") + 10
    default: return nil
    }
}

extension ObjectID: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let id = ObjectID(hex: text) else {
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: "'\(text)' is not a 24-digit ObjectID")
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
