import CLMDB

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// An error from the storage layer: an LMDB call, or the file system under it, failed.
///
/// Every error keeps LMDB's raw result code and its `mdb_strerror` text, names the operation that
/// failed and the environment's path, and maps the raw code to a ``Code`` a caller can switch on.
///
/// ```swift
/// do { try environment.write { txn in try txn.put(db, key: k, value: v) } }
/// catch let error as StorageError where error.code == .diskFull { /* free space, retry */ }
/// ```
public struct StorageError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong, as a closed set of cases a caller can act on. New codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: Hashable, Sendable {
            case mapFull, mapResized, readersFull, transactionFull, corrupted, panic, diskFull, io
            case notFound, permissionDenied, versionMismatch, invalidFile, badValueSize, invalidArgument
            case closed, keyExists, other
        }
        private var wrapped: Wrapped
        /// The map (the largest size the database may reach) is full, and growing it was not possible.
        public static var mapFull: Self { Self(wrapped: .mapFull) }
        /// Another process grew the map; the environment adopts the new size and retries by itself.
        public static var mapResized: Self { Self(wrapped: .mapResized) }
        /// Every reader slot is taken: too many open snapshots.
        public static var readersFull: Self { Self(wrapped: .readersFull) }
        /// A single transaction dirtied too many pages; split it.
        public static var transactionFull: Self { Self(wrapped: .transactionFull) }
        /// LMDB found a structural inconsistency in the file.
        public static var corrupted: Self { Self(wrapped: .corrupted) }
        /// A fatal error happened earlier; this handle refuses all use. Close it and open the directory again.
        public static var panic: Self { Self(wrapped: .panic) }
        /// The disk (or the process's file size limit) is full: ENOSPC, EFBIG, or a short write seen as EIO.
        public static var diskFull: Self { Self(wrapped: .diskFull) }
        /// Another input/output error from the operating system.
        public static var io: Self { Self(wrapped: .io) }
        /// The file or directory does not exist.
        public static var notFound: Self { Self(wrapped: .notFound) }
        /// The process may not read or write the file.
        public static var permissionDenied: Self { Self(wrapped: .permissionDenied) }
        /// The file was written by an incompatible LMDB version.
        public static var versionMismatch: Self { Self(wrapped: .versionMismatch) }
        /// The file is not an LMDB environment (or its header is damaged).
        public static var invalidFile: Self { Self(wrapped: .invalidFile) }
        /// A key or value is too large or empty.
        public static var badValueSize: Self { Self(wrapped: .badValueSize) }
        /// An argument was rejected (for example, a database opened with flags that conflict with the file).
        public static var invalidArgument: Self { Self(wrapped: .invalidArgument) }
        /// The environment was closed.
        public static var closed: Self { Self(wrapped: .closed) }
        /// An append's key does not sort after the last key of its database (nothing was stored).
        public static var keyExists: Self { Self(wrapped: .keyExists) }
        /// Any other LMDB or system error; `lmdbCode` and `message` say which.
        public static var other: Self { Self(wrapped: .other) }
        public var description: String { "\(wrapped)" }
    }

    /// What went wrong.
    public var code: Code
    /// The raw result code of the failing call (an LMDB `MDB_*` code or an `errno` value), or 0.
    public var resultCode: Int32
    /// The call or step that failed, such as `mdb_txn_commit`.
    public var operation: String
    /// The environment's path.
    public var path: String
    /// A sentence describing the failure and, where one exists, the remedy.
    public var message: String

    public init(code: Code, resultCode: Int32 = 0, operation: String, path: String, message: String) {
        self.code = code
        self.resultCode = resultCode
        self.operation = operation
        self.path = path
        self.message = message
    }

    /// Builds the error for an LMDB (or errno) result code, with LMDB's own text for it.
    public init(resultCode: Int32, operation: String, path: String, context: String? = nil) {
        let code = Self.classify(resultCode)
        let text = String(cString: mdb_strerror(resultCode))
        var message = "\(operation) failed on \(path): \(text) (code \(resultCode))"
        if let context { message += "; \(context)" }
        if let remedy = Self.remedy(for: code) { message += ". \(remedy)" }
        self.init(code: code, resultCode: resultCode, operation: operation, path: path, message: message)
    }

    public var description: String { message }

    static func classify(_ rc: Int32) -> Code {
        switch rc {
        case MDB_MAP_FULL: return .mapFull
        case MDB_MAP_RESIZED: return .mapResized
        case MDB_READERS_FULL: return .readersFull
        case MDB_TXN_FULL: return .transactionFull
        case MDB_CORRUPTED, MDB_PAGE_NOTFOUND: return .corrupted
        case MDB_PANIC: return .panic
        case MDB_VERSION_MISMATCH: return .versionMismatch
        case MDB_INVALID: return .invalidFile
        case MDB_BAD_VALSIZE: return .badValueSize
        case MDB_INCOMPATIBLE, EINVAL: return .invalidArgument
        case ENOSPC, EFBIG, EDQUOT: return .diskFull
        case EIO: return .diskFull  // a short write (RLIMIT_FSIZE, a full disk on some file systems) shows as EIO
        case ENOENT, MDB_NOTFOUND: return .notFound
        case MDB_KEYEXIST: return .keyExists
        case EACCES, EPERM, EROFS: return .permissionDenied
        default: return .other
        }
    }

    static func remedy(for code: Code) -> String? {
        switch code {
        case .mapFull: return "Raise the maximum map size, or free space by compacting"
        case .readersFull: return "Too many open snapshots; release snapshots or raise maximumReaders"
        case .transactionFull: return "The transaction is too large; split it into smaller transactions"
        case .panic: return "This handle can no longer be used; close it and open the directory again"
        case .diskFull: return "Free disk space (or raise the file size limit) and retry; committed data is intact"
        case .corrupted, .invalidFile: return "The file is damaged or is not a Tributary replica"
        case .badValueSize:
            return "A key is empty or longer than LMDB's limit of 511 bytes (mdb_env_get_maxkeysize), or a value is "
                + "empty where it may not be"
        default: return nil
        }
    }
}
