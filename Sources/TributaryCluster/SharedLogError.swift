/// Why the shared log could not do what was asked, with a message an operator can act on.
public struct SharedLogError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure it was.
    public enum Code: String, Sendable, Hashable {
        /// PostgreSQL could not be reached, or the connection broke: retry later. Nothing was appended.
        case unreachable
        /// PostgreSQL answered with an error (a permission, a constraint, a malformed statement). The message holds
        /// its SQL state and text.
        case rejected
        /// The operation did not finish within the configured timeout. An append may or may not have committed:
        /// appending the same changesets again stores them once.
        case timedOut
        /// The log's tables hold something this build cannot read: a newer schema, or damaged rows.
        case incompatible
        /// The argument is out of range: a position past the head, a body over the limit.
        case invalidArgument
        /// The entries asked for were dropped by a compaction of the log: a daemon that has not applied them must
        /// start from a copy of another daemon's replica.
        case compacted
        /// The log was closed.
        case closed
        /// The task that asked was cancelled. An append may or may not have committed: appending the same
        /// changesets again stores them once.
        case cancelled
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
