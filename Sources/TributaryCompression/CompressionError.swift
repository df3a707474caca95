/// A compressed payload was refused or could not be decoded.
///
/// Decoding is defensive: the payload must be exactly one zstd frame that declares its content size, the size
/// must be within the caller's bound, and nothing may follow the frame. A payload that breaks any of these
/// rules is refused before any memory is allocated for its content.
public struct CompressionError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What was wrong with the payload. New codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: Hashable, Sendable {
            case truncated, notZstd, skippableFrame, unknownContentSize, tooLarge, windowTooLarge
            case trailingData, corrupted, sizeMismatch, compressionFailed
        }
        private var wrapped: Wrapped
        /// The input ends before the frame header or the frame does.
        public static var truncated: Self { Self(wrapped: .truncated) }
        /// The input does not start with a zstd frame.
        public static var notZstd: Self { Self(wrapped: .notZstd) }
        /// The input is a skippable frame, which carries no content.
        public static var skippableFrame: Self { Self(wrapped: .skippableFrame) }
        /// The frame does not declare its content size, so its output cannot be bounded before decoding.
        public static var unknownContentSize: Self { Self(wrapped: .unknownContentSize) }
        /// The declared content size is over the caller's limit.
        public static var tooLarge: Self { Self(wrapped: .tooLarge) }
        /// The frame asks for a larger window than the decoder allows.
        public static var windowTooLarge: Self { Self(wrapped: .windowTooLarge) }
        /// Bytes (another frame, or garbage) follow the frame.
        public static var trailingData: Self { Self(wrapped: .trailingData) }
        /// zstd could not decode the frame.
        public static var corrupted: Self { Self(wrapped: .corrupted) }
        /// The frame decoded to a different size than it declared.
        public static var sizeMismatch: Self { Self(wrapped: .sizeMismatch) }
        /// zstd failed to compress (out of memory, or a bad parameter).
        public static var compressionFailed: Self { Self(wrapped: .compressionFailed) }
        public var description: String { "\(wrapped)" }
    }

    /// What was wrong.
    public var code: Code
    /// A sentence naming the problem and the sizes involved.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
