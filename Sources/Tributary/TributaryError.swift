import TributaryCompression
import TributaryLog
import TributaryMerge
import TributaryModel
import TributaryStorage
import TributaryViews

/// An error from Tributary's public API: what went wrong, in a sentence that names the replica, type, property or
/// entry at fault and, where one exists, the remedy.
///
/// ```swift
/// do { try replica.write { try $0.create(task) } }
/// catch let error as TributaryError where error.code == .duplicatePrimaryKey { … }
/// ```
public struct TributaryError: Error, CustomStringConvertible, Sendable {
    /// What went wrong. New codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: Hashable, Sendable {
            case notAReplica, newerFormat, developmentFormat, migrationRequired, schemaMismatch, unknownType,
                unknownProperty
            case wrongType, missingProperty, duplicatePrimaryKey, objectNotFound, invalidPath, invalidValue
            case schemaConflict, invalidChangeset, corrupted, diskFull, mapFull, storage, clockSkew, closed
            case transactionTooLarge, readOnly, migrationFailed, missingPredecessor, invalidQuery, nestedWrite
            case permissionDenied, noSubscription, historyCompacted
        }
        private var wrapped: Wrapped
        /// The directory does not hold a Tributary replica, or its files are damaged beyond opening.
        public static var notAReplica: Self { Self(wrapped: .notAReplica) }
        /// The replica was written by a newer version of Tributary.
        public static var newerFormat: Self { Self(wrapped: .newerFormat) }
        /// The replica was written by a development build of Tributary from before release 0.1.0, whose on-disk
        /// format this build does not read. The message says how to rebuild it from its log.
        public static var developmentFormat: Self { Self(wrapped: .developmentFormat) }
        /// The schema given differs from the stored one at the same schema version; the message lists every
        /// difference.
        public static var migrationRequired: Self { Self(wrapped: .migrationRequired) }
        /// The schema given cannot be used with the stored one (a lower version, or an impossible change).
        public static var schemaMismatch: Self { Self(wrapped: .schemaMismatch) }
        /// No object type of that name exists in the schema.
        public static var unknownType: Self { Self(wrapped: .unknownType) }
        /// The type has no property of that name.
        public static var unknownProperty: Self { Self(wrapped: .unknownProperty) }
        /// A value does not fit the property's type.
        public static var wrongType: Self { Self(wrapped: .wrongType) }
        /// A required property (or the primary key) was not given.
        public static var missingProperty: Self { Self(wrapped: .missingProperty) }
        /// An object with that primary key already exists.
        public static var duplicatePrimaryKey: Self { Self(wrapped: .duplicatePrimaryKey) }
        /// No object with that primary key exists.
        public static var objectNotFound: Self { Self(wrapped: .objectNotFound) }
        /// A property path does not lead anywhere (an index out of range, a step into a non-embedded property).
        public static var invalidPath: Self { Self(wrapped: .invalidPath) }
        /// A value cannot be stored (a primary key too long, a string that is too large).
        public static var invalidValue: Self { Self(wrapped: .invalidValue) }
        /// Two schema definitions conflict (docs/MergeSemantics.md, rule 8).
        public static var schemaConflict: Self { Self(wrapped: .schemaConflict) }
        /// A changeset from another replica is malformed or does not fit the schema.
        public static var invalidChangeset: Self { Self(wrapped: .invalidChangeset) }
        /// A write to an object type that no flexible-sync subscription covers, on a replica that subscribes
        /// (``Replica/subscriptions``): subscribe to the type first.
        public static var noSubscription: Self { Self(wrapped: .noSubscription) }
        /// Stored data is damaged: a checksum mismatch, a broken log chain, or views that differ from the log.
        public static var corrupted: Self { Self(wrapped: .corrupted) }
        /// The disk is full; nothing committed was lost. Free space and retry.
        public static var diskFull: Self { Self(wrapped: .diskFull) }
        /// The replica reached its maximum size; raise `Configuration.maximumSizeBytes`.
        public static var mapFull: Self { Self(wrapped: .mapFull) }
        /// Another storage error; `underlying` holds the `TributaryStorage` error.
        public static var storage: Self { Self(wrapped: .storage) }
        /// A changeset is stamped too far in the future of this replica's clock (docs/MergeSemantics.md, rule 9).
        public static var clockSkew: Self { Self(wrapped: .clockSkew) }
        /// The replica was closed.
        public static var closed: Self { Self(wrapped: .closed) }
        /// A transaction is larger than the log accepts; split it.
        public static var transactionTooLarge: Self { Self(wrapped: .transactionTooLarge) }
        /// The replica was opened read-only.
        public static var readOnly: Self { Self(wrapped: .readOnly) }
        /// A migration could not complete; the replica is unchanged.
        public static var migrationFailed: Self { Self(wrapped: .migrationFailed) }
        /// A changeset depends on changesets this replica has not integrated yet.
        public static var missingPredecessor: Self { Self(wrapped: .missingPredecessor) }
        /// A query could not be parsed or does not fit the schema.
        public static var invalidQuery: Self { Self(wrapped: .invalidQuery) }
        /// A write (or an integration, or a rebuild) was started inside a write on the same replica and thread, where
        /// it would wait for itself; do the work in the outer transaction instead.
        public static var nestedWrite: Self { Self(wrapped: .nestedWrite) }
        /// Changesets came from a writer that may not make them: an upload whose author is not the uploading user.
        public static var permissionDenied: Self { Self(wrapped: .permissionDenied) }
        /// The changesets another replica lacks are no longer in this replica's log: a compaction replaced them with a
        /// base state. The other replica must start again from that state (a client reset, or a bootstrap when it
        /// holds nothing yet).
        public static var historyCompacted: Self { Self(wrapped: .historyCompacted) }
        public var description: String { "\(wrapped)" }
    }

    public var code: Code
    public var message: String
    /// The lower-level error this one wraps, if any.
    public var underlying: (any Error & Sendable)?

    public init(_ code: Code, _ message: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String { message }

    /// Wraps a lower layer's error, keeping its message.
    static func wrap(_ error: any Error, context: String? = nil) -> any Error {
        func prefixed(_ message: String) -> String { context.map { "\($0): \(message)" } ?? message }
        switch error {
        case let error as TributaryError:
            return error
        case let error as StorageError:
            let code: Code
            switch error.code {
            case .diskFull: code = .diskFull
            case .mapFull: code = .mapFull
            case .closed: code = .closed
            case .corrupted, .invalidFile, .versionMismatch: code = .notAReplica
            default: code = .storage
            }
            return TributaryError(code, prefixed(error.message), underlying: error)
        case let error as LogError:
            let code: Code = error.code == .tooLarge ? .transactionTooLarge : .corrupted
            return TributaryError(code, prefixed(error.message), underlying: error)
        case let error as MergeError:
            let code: Code = error.code == .schemaConflict ? .schemaConflict : .invalidChangeset
            return TributaryError(code, prefixed(error.description), underlying: error)
        case let error as ChangesetDecodingError:
            return TributaryError(.corrupted, prefixed(error.description), underlying: error)
        case let error as CompressionError:
            return TributaryError(.corrupted, prefixed(error.message), underlying: error)
        case let error as SchemaError:
            return TributaryError(.schemaMismatch, prefixed(error.message), underlying: error)
        case let error as IndexKeyError:
            return TributaryError(.storage, prefixed(error.description), underlying: error)
        case let error as ClockSkewError:
            return TributaryError(.clockSkew, prefixed(error.description), underlying: error)
        default:
            return error
        }
    }
}
