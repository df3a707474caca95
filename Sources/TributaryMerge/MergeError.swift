public import TributaryModel

/// A changeset could not be merged: it conflicts with the schema, or it is malformed.
///
/// The whole changeset is refused; nothing of it is applied.
public struct MergeError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: Hashable, Sendable { case schemaConflict, invalidInstruction, limitExceeded }
        private var wrapped: Wrapped
        /// Two definitions of one type or property conflict (rule 8); the message names both.
        public static var schemaConflict: Self { Self(wrapped: .schemaConflict) }
        /// An instruction does not fit the schema (a value of the wrong type, a list operation on a
        /// non-list property).
        public static var invalidInstruction: Self { Self(wrapped: .invalidInstruction) }
        /// An instruction creates more elements or embedded objects than one instruction may.
        public static var limitExceeded: Self { Self(wrapped: .limitExceeded) }
        public var description: String { "\(wrapped)" }
    }

    public var code: Code
    public var message: String
    /// The changeset and the index of the instruction at fault.
    public var dot: Dot?
    public var instructionIndex: Int?

    public init(_ code: Code, _ message: String, dot: Dot? = nil, instructionIndex: Int? = nil) {
        self.code = code
        self.message = message
        self.dot = dot
        self.instructionIndex = instructionIndex
    }

    public var description: String {
        if let dot, let instructionIndex { return "changeset \(dot), instruction \(instructionIndex): \(message)" }
        return message
    }
}
