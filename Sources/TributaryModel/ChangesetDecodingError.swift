/// Bytes from disk or the network could not be decoded: they are truncated, damaged, of an unknown format
/// version, or over a limit. Decoding never traps; it throws this error, naming what is wrong and where.
public struct ChangesetDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What was wrong. New codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: Hashable, Sendable {
            case truncated, checksumMismatch, unsupportedFormatVersion, badMagic, invalidTag, limitExceeded
            case invalidValue, trailingData
        }
        private var wrapped: Wrapped
        /// The bytes end before the structure does.
        public static var truncated: Self { Self(wrapped: .truncated) }
        /// The checksum does not match the bytes: they were damaged.
        public static var checksumMismatch: Self { Self(wrapped: .checksumMismatch) }
        /// The bytes were written by a newer (or unknown) format version.
        public static var unsupportedFormatVersion: Self { Self(wrapped: .unsupportedFormatVersion) }
        /// The bytes do not start with the expected marker.
        public static var badMagic: Self { Self(wrapped: .badMagic) }
        /// A tag byte names no known kind of instruction or value.
        public static var invalidTag: Self { Self(wrapped: .invalidTag) }
        /// A count, length or nesting depth is over its limit.
        public static var limitExceeded: Self { Self(wrapped: .limitExceeded) }
        /// A value is malformed (invalid UTF-8, an index out of range, a bad length).
        public static var invalidValue: Self { Self(wrapped: .invalidValue) }
        /// Bytes follow the end of the structure.
        public static var trailingData: Self { Self(wrapped: .trailingData) }
        public var description: String { "\(wrapped)" }
    }

    public var code: Code
    public var message: String
    /// The byte offset where the problem was found.
    public var offset: Int

    public init(_ code: Code, _ message: String, offset: Int) {
        self.code = code
        self.message = message
        self.offset = offset
    }

    public var description: String { "\(message) (byte \(offset))" }
}

/// Bounds that decoding enforces, so hostile input cannot exhaust memory or the stack.
public struct DecodingLimits: Hashable, Sendable {
    /// The most instructions one changeset may hold. Default: 500,000.
    public var maximumInstructions: Int = 500_000
    /// The longest string or data value, in bytes. Default: 16 MiB.
    public var maximumValueBytes: Int = 16 << 20
    /// The deepest nesting of lists, embedded objects and path steps. Default: 32.
    public var maximumDepth: Int = 32
    /// The most elements in one list value or entries in one vector. Default: 1,000,000.
    public var maximumElements: Int = 1_000_000

    public init() {}

    /// The defaults.
    public static let standard = DecodingLimits()

    /// The bounds a stored object record is read under. A record is built by this replica's own merges, never taken
    /// from a peer, and grows with its object's history (a list keeps the elements it lost, as tombstones, and every
    /// replacement of a whole list adds its elements again), so its counts are not bounded: the standard 1,000,000
    /// made an object unreadable once its lists had seen that many elements. The reader still ties every count to
    /// the bytes that remain, so damaged bytes cannot claim memory. Values up to the log's largest changeset; nesting
    /// up to 128 (path steps and value nesting, each bounded by 32 in a changeset).
    public static let storedRecord: DecodingLimits = {
        var limits = DecodingLimits()
        limits.maximumElements = .max
        limits.maximumDepth = 128
        limits.maximumValueBytes = 256 << 20
        return limits
    }()
}
