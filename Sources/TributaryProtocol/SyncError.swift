/// Why a session ended, and what the side that reads it should do: the `error` message, and what a sync session
/// reports when it is disconnected.
public struct SyncError: Error, Sendable, Hashable, CustomStringConvertible {
    public var code: Code
    public var action: Action
    /// For ``Action/retry``: the fewest seconds to wait before reconnecting.
    public var retryAfterSeconds: UInt64
    /// What went wrong, in words a person can act on (at most 4 KiB of UTF-8 on the wire).
    public var message: String

    /// What the side that reads an error does.
    public enum Action: UInt8, Sendable, Hashable, CustomStringConvertible {
        /// Reconnect, no sooner than ``SyncError/retryAfterSeconds``.
        case retry = 1
        /// The replica cannot sync with this daemon any more and must be reset.
        case reset = 2
        /// Do not reconnect until a person has fixed the cause.
        case fatal = 3

        public var description: String {
            switch self {
            case .retry: "retry"
            case .reset: "reset"
            case .fatal: "fatal"
            }
        }
    }

    /// The error codes of docs/Protocol.md. A code this build does not know is kept as its number.
    public struct Code: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public var rawValue: UInt64
        public init(rawValue: UInt64) { self.rawValue = rawValue }

        /// A malformed message, a message not allowed in the session's state, or a window exceeded.
        public static let protocolViolation = Code(rawValue: 1)
        /// No protocol version both sides speak.
        public static let unsupportedVersion = Code(rawValue: 2)
        /// The credentials were refused.
        public static let unauthorized = Code(rawValue: 3)
        /// A changeset does not decode, or is over the receiver's limits.
        public static let badChangeset = Code(rawValue: 4)
        /// The acceptor does not take this role from this replica.
        public static let roleRefused = Code(rawValue: 5)
        /// A newer session of the same replica replaced this one.
        public static let superseded = Code(rawValue: 6)
        /// The daemon is shutting down or overloaded.
        public static let unavailable = Code(rawValue: 7)
        /// The receiver could not read or write its replica.
        public static let storage = Code(rawValue: 8)
        /// Nothing was received for three keepalive intervals.
        public static let timeout = Code(rawValue: 9)
        /// The daemon no longer holds what this replica would need to catch up.
        public static let resetRequired = Code(rawValue: 10)
        /// The session's token expired: the client asks the app for a fresh one and reconnects at once.
        public static let tokenExpired = Code(rawValue: 11)
        /// The session's user may not upload what it sent (a changeset written by another author).
        public static let forbidden = Code(rawValue: 12)
        /// The TLS connection could not be made: the daemon's certificate is untrusted, expired or for another host,
        /// the client's certificate was refused, or one side does not speak TLS on that port.
        public static let tls = Code(rawValue: 13)
        /// The session's user uploaded faster than the daemon allows: the client reconnects after the delay given, and
        /// sends again what was not acknowledged.
        public static let rateLimited = Code(rawValue: 14)
        /// The app's schema version is earlier than one the daemon's operator marked as a breaking change: the app
        /// must be updated before it syncs again. Its replica and unsynced changes are kept.
        public static let schemaVersionTooOld = Code(rawValue: 15)

        public var description: String {
            switch self {
            case .protocolViolation: "protocolViolation"
            case .unsupportedVersion: "unsupportedVersion"
            case .unauthorized: "unauthorized"
            case .badChangeset: "badChangeset"
            case .roleRefused: "roleRefused"
            case .superseded: "superseded"
            case .unavailable: "unavailable"
            case .storage: "storage"
            case .timeout: "timeout"
            case .resetRequired: "resetRequired"
            case .tokenExpired: "tokenExpired"
            case .forbidden: "forbidden"
            case .tls: "tls"
            case .rateLimited: "rateLimited"
            case .schemaVersionTooOld: "schemaVersionTooOld"
            default: "error \(rawValue)"
            }
        }
    }

    public init(_ code: Code, _ action: Action, _ message: String, retryAfterSeconds: UInt64 = 0) {
        self.code = code
        self.action = action
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }

    /// A protocol violation: the other side sent what the protocol does not allow. The session ends, and an initiator
    /// reconnects after ``violationRetrySeconds`` (or its backoff, if longer). A byte stream damaged on its way (a
    /// faulty middlebox or proxy, a corrupted segment that TCP's checksum missed) arrives as exactly such a message;
    /// nothing of it was integrated, and a new session resumes where the acknowledgements left off.
    public static func violation(_ message: String) -> SyncError {
        SyncError(.protocolViolation, .retry, message, retryAfterSeconds: violationRetrySeconds)
    }

    /// How long an initiator waits before it reconnects after a protocol violation.
    public static let violationRetrySeconds: UInt64 = 5

    public var description: String {
        var text = "\(code) (\(action)): \(message)"
        if action == .retry && retryAfterSeconds > 0 { text += "; retry after \(retryAfterSeconds) s" }
        return text
    }
}
