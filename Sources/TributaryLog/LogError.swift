import TributaryModel

/// A log entry is damaged, missing, or cannot be decoded.
public struct LogError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: Hashable, Sendable {
            case checksumMismatch, chainBroken, missingEntry, sequenceMismatch, truncated, unsupportedFormat
            case undecodable, tooLarge
        }
        private var wrapped: Wrapped
        /// The entry's bytes do not match its checksum: it was damaged on disk.
        public static var checksumMismatch: Self { Self(wrapped: .checksumMismatch) }
        /// The entry does not follow its predecessor: an entry before it was dropped, swapped or replaced.
        public static var chainBroken: Self { Self(wrapped: .chainBroken) }
        /// No entry exists at the requested local sequence.
        public static var missingEntry: Self { Self(wrapped: .missingEntry) }
        /// The entry is stored under one local sequence but says it is another.
        public static var sequenceMismatch: Self { Self(wrapped: .sequenceMismatch) }
        /// The entry is shorter than its header.
        public static var truncated: Self { Self(wrapped: .truncated) }
        /// The entry was written by a newer format.
        public static var unsupportedFormat: Self { Self(wrapped: .unsupportedFormat) }
        /// The entry's checksum holds but its changeset cannot be decompressed or decoded; or another stored value of
        /// the log (a changeset's adoptions) cannot be read.
        public static var undecodable: Self { Self(wrapped: .undecodable) }
        /// The changeset is larger than the log accepts.
        public static var tooLarge: Self { Self(wrapped: .tooLarge) }
        public var description: String { "\(wrapped)" }
    }

    public var code: Code
    /// The local sequence of the entry at fault; 0 when the fault is not in an entry (a changeset's adoptions, or a
    /// received changeset).
    public var localSequence: UInt64
    public var message: String

    public init(_ code: Code, localSequence: UInt64, _ message: String) {
        self.code = code
        self.localSequence = localSequence
        self.message = message
    }

    public var description: String { message }
}
