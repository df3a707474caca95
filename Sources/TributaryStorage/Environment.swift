import CLMDB
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

// Named after the C constant it mirrors.
#if canImport(Glibc)
    // swift-format-ignore: AlwaysUseLowerCamelCase
    private let RLIMIT_FSIZE_VALUE = Int32(RLIMIT_FSIZE.rawValue)
#else
    // swift-format-ignore: AlwaysUseLowerCamelCase
    private let RLIMIT_FSIZE_VALUE = RLIMIT_FSIZE
#endif

/// An LMDB environment: one directory holding `data.mdb` and `lock.mdb`, with named databases.
///
/// Rules this type enforces, after lmdb.h's caveats:
/// - It opens with `MDB_NOTLS` (a read transaction belongs to its transaction object, not to a
///   thread) and never with `MDB_WRITEMAP` (which turns a full disk into SIGBUS).
/// - Stale reader slots left by crashed processes are cleared at every open.
/// - One directory is opened once per process: opening it again returns the same environment,
///   because closing a second handle would drop the first one's POSIX locks.
/// - The map grows by itself: a write that fills it is aborted, the map is doubled (up to
///   ``Configuration/maximumMapSize``) while no other storage call runs, and the write is run again.
///   A map grown by another process is adopted the same way. Before each write the map is grown, if
///   needed, to twice what is in use, so that writes seldom have to run twice.
/// - After `MDB_PANIC` the handle refuses all use; close it and open the directory again.
///
/// `@unchecked Sendable`: the LMDB environment handle is thread-safe; the only mutable Swift state is
/// behind `state` (a `Mutex`), and remapping is excluded from every other call by `remapLock`.
public final class Environment: @unchecked Sendable {
    /// How commits reach the disk, described by the ACID property each mode gives up (lmdb.h).
    public enum Durability: Sendable, Hashable {
        /// Every commit is flushed before it returns: committed data survives a process crash and power loss.
        case full
        /// The meta page is not flushed at commit (`MDB_NOMETASYNC`). Atomicity, consistency and isolation
        /// hold, and a process crash loses nothing, but a system crash may undo the most recent commit.
        case noMetaSync
        /// Nothing is flushed at commit (`MDB_NOSYNC`). A process crash (`kill -9`) loses nothing, because the
        /// operating system still holds the written pages; a system crash or power loss may undo recent commits.
        case noSync
    }

    /// How to open an environment. Every default is listed with its property.
    public struct Configuration: Sendable, Hashable {
        /// The map size to start with. Default: 16 MiB. It only reserves address space; the file grows as data
        /// is written.
        public var initialMapSize: Int = 16 << 20
        /// The largest the map may grow to; a write that needs more fails with ``StorageError/Code/mapFull``.
        /// Default: 64 GiB.
        public var maximumMapSize: Int = 64 << 30
        /// The number of named databases. Default: 16.
        public var maximumDatabases: Int = 16
        /// The number of reader slots, which bounds the number of open snapshots across all processes using the
        /// directory. Default: 1,024 (LMDB's own default is 126).
        public var maximumReaders: Int = 1024
        /// How commits reach the disk. Default: ``Durability/full``.
        public var durability: Durability = .full
        /// Open without the right to write. Default: `false`. A read-only environment still needs write access to
        /// `lock.mdb`, to register its readers.
        public var readOnly: Bool = false

        public init() {}
    }

    /// The directory.
    public let path: String
    /// The configuration the environment was opened with.
    public let configuration: Configuration
    /// How many stale reader slots (left by crashed processes) were cleared when the environment opened.
    public let staleReadersClearedAtOpen: Int

    let handle: OpaquePointer
    let remapLock = ReadWriteLock()
    let faults = FaultInjector()
    private struct State {
        var closed = false
        var panicked = false
        var databases: [String: Database] = [:]
        /// Open long-lived snapshots, so that ``close()`` can end them before it closes the handle.
        var snapshots: [ObjectIdentifier: WeakSnapshot] = [:]
    }
    private final class WeakSnapshot: Sendable {
        // Only read and written under `state`'s lock.
        nonisolated(unsafe) weak var snapshot: Snapshot?
        init(_ snapshot: Snapshot) { self.snapshot = snapshot }
    }
    private let state = Mutex(State())
    /// Pages of the data file known to exist (it never shrinks): a commit whose pages end within them need not look
    /// at the file (see ``coverMappedPages()``).
    private let coveredPages = Atomic<Int>(0)

    private init(path: String, configuration: Configuration, handle: OpaquePointer, staleReaders: Int) {
        self.path = path
        self.configuration = configuration
        self.handle = handle
        self.staleReadersClearedAtOpen = staleReaders
    }

    deinit {
        if !state.withLock({ $0.closed }) { mdb_env_close(handle) }
    }

    // MARK: Opening

    private struct FileIdentity: Hashable {
        var device: UInt64
        var inode: UInt64
    }
    private final class WeakEnvironment: Sendable {
        // `weak let` is not available; the box is only read and written under `registry`'s lock.
        nonisolated(unsafe) weak var environment: Environment?
        init(_ environment: Environment) { self.environment = environment }
    }
    private static let registry = Mutex<[FileIdentity: WeakEnvironment]>([:])

    /// Opens (and, unless read-only, creates) the environment in `path`.
    ///
    /// If the directory is already open in this process, the open environment is returned and
    /// `configuration` is ignored, except that a writable open of a directory open read-only fails.
    ///
    /// - Throws: ``StorageError`` with `.notFound` (no such directory, read-only), `.permissionDenied`,
    ///   `.invalidFile` (not an LMDB file), `.versionMismatch`, `.readersFull` or `.io`.
    public static func open(path: String, configuration: Configuration = Configuration()) throws(StorageError)
        -> Environment
    {
        if !configuration.readOnly {
            if mkdir(path, 0o755) != 0 && errno != EEXIST {
                throw StorageError(resultCode: errno, operation: "mkdir", path: path)
            }
        }
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw StorageError(resultCode: errno, operation: "stat", path: path, context: "no replica directory here")
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw StorageError(
                code: .invalidFile, operation: "open", path: path,
                message: "\(path) is not a directory; a replica is a directory holding data.mdb")
        }
        let identity = FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        return try registry.withLock { (entries) throws(StorageError) -> Environment in
            // A handle poisoned by MDB_PANIC is never handed out again: it is closed, and a fresh one is opened.
            if let existing = entries[identity]?.environment, existing.isPanicked { existing.close() }
            if let existing = entries[identity]?.environment, !existing.isClosed {
                if existing.configuration.readOnly && !configuration.readOnly {
                    throw StorageError(
                        code: .invalidArgument, operation: "open", path: path,
                        message:
                            "\(path) is already open read-only in this process; close it before opening it to write")
                }
                return existing
            }
            let environment = try openNew(path: path, configuration: configuration)
            entries[identity] = WeakEnvironment(environment)
            return environment
        }
    }

    private static func openNew(path: String, configuration: Configuration) throws(StorageError) -> Environment {
        var handle: OpaquePointer?
        var rc = mdb_env_create(&handle)
        guard rc == 0, let handle else { throw StorageError(resultCode: rc, operation: "mdb_env_create", path: path) }
        func fail(_ rc: Int32, _ operation: String) -> StorageError {
            mdb_env_close(handle)
            return StorageError(resultCode: rc, operation: operation, path: path)
        }
        guard let databases = MDB_dbi(exactly: configuration.maximumDatabases), databases > 0,
            let readers = UInt32(exactly: configuration.maximumReaders), readers > 0
        else {
            mdb_env_close(handle)
            throw StorageError(
                code: .invalidArgument, resultCode: EINVAL, operation: "mdb_env_open", path: path,
                message: "maximumDatabases (\(configuration.maximumDatabases)) and maximumReaders "
                    + "(\(configuration.maximumReaders)) must be from 1 to \(UInt32.max)")
        }
        rc = mdb_env_set_maxdbs(handle, databases)
        if rc != 0 { throw fail(rc, "mdb_env_set_maxdbs") }
        rc = mdb_env_set_maxreaders(handle, readers)
        if rc != 0 { throw fail(rc, "mdb_env_set_maxreaders") }
        rc = mdb_env_set_mapsize(handle, max(configuration.initialMapSize, 1 << 16))
        if rc != 0 { throw fail(rc, "mdb_env_set_mapsize") }
        var flags = UInt32(MDB_NOTLS)
        if configuration.readOnly { flags |= UInt32(MDB_RDONLY) }
        switch configuration.durability {
        case .full: break
        case .noMetaSync: flags |= UInt32(MDB_NOMETASYNC)
        case .noSync: flags |= UInt32(MDB_NOSYNC)
        }
        if configuration.readOnly {
            // LMDB would try to initialize an empty data file (and fail with EBADF): there is no replica to read.
            var file = stat()
            let dataPath = path.hasSuffix("/") ? path + "data.mdb" : path + "/data.mdb"
            if stat(dataPath, &file) == 0 && file.st_size == 0 {
                mdb_env_close(handle)
                throw StorageError(
                    code: .invalidFile, resultCode: MDB_INVALID, operation: "mdb_env_open", path: path,
                    message: "\(dataPath) is empty: the directory holds no replica, or its file is damaged")
            }
        }
        rc = mdb_env_open(handle, path, flags, 0o644)
        if rc != 0 { throw fail(rc, "mdb_env_open") }
        // A data file shorter than the pages its last commit counts would make LMDB fault with SIGBUS on the first
        // page past its end. LMDB may leave free pages at the end unwritten, so Tributary extends the file after every
        // commit (`coverMappedPages`); a small shortfall is then only possible after a crash between a commit and
        // that extension, and a writable open repairs it. Anything else is a file cut short: refused, by name.
        let shortfall = mappedPagesShortfall(handle)
        if shortfall.bytes > 0 {
            let repairable =
                !configuration.readOnly && shortfall.bytes <= Self.repairableShortfallPages * shortfall.pageSize
            if !repairable || ftruncate(shortfall.descriptor, off_t(shortfall.needed)) != 0 {
                mdb_env_close(handle)
                throw StorageError(
                    code: .invalidFile, resultCode: MDB_INVALID, operation: "mdb_env_open", path: path,
                    message: "the data file in \(path) is truncated: \(shortfall.needed - shortfall.bytes) bytes, but "
                        + "its last commit uses \(shortfall.needed)"
                        + (configuration.readOnly
                            && shortfall.bytes <= Self.repairableShortfallPages * shortfall.pageSize
                            ? "; if its writer crashed, open it once for writing, which repairs this; otherwise the file is damaged"
                            : "; the file is damaged or is not a Tributary replica"))
            }
        }
        var dead: Int32 = 0
        rc = mdb_reader_check(handle, &dead)
        if rc != 0 { throw fail(rc, "mdb_reader_check") }
        return Environment(path: path, configuration: configuration, handle: handle, staleReaders: Int(dead))
    }

    /// The most missing pages a writable open fills in (the free pages of one crashed commit).
    static let repairableShortfallPages = 64

    /// The bytes of pages 0 through `lastPage`: `Int.max` when that overflows, as a damaged meta page's page number may
    /// make it (LMDB's own arithmetic wraps silently there).
    static func bytes(throughPage lastPage: some BinaryInteger, pageSize: some BinaryInteger) -> Int {
        let (pages, pagesOverflow) = Int(clamping: lastPage).addingReportingOverflow(1)
        let (bytes, bytesOverflow) = pages.multipliedReportingOverflow(by: Int(clamping: pageSize))
        return pagesOverflow || bytesOverflow || pages <= 0 ? .max : bytes
    }

    /// How far the data file falls short of the pages LMDB's last commit counts (0 bytes when it covers them).
    private static func mappedPagesShortfall(_ handle: OpaquePointer) -> (
        bytes: Int, needed: Int, pageSize: Int, descriptor: Int32
    ) {
        var descriptor: mdb_filehandle_t = -1
        guard mdb_env_get_fd(handle, &descriptor) == 0 else { return (0, 0, 4096, -1) }
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        var pages = MDB_stat()
        mdb_env_stat(handle, &pages)
        var file = stat()
        let needed = bytes(throughPage: info.me_last_pgno, pageSize: pages.ms_psize)
        guard fstat(descriptor, &file) == 0 else { return (0, needed, Int(pages.ms_psize), descriptor) }
        return (max(0, needed - Int(file.st_size)), needed, Int(pages.ms_psize), descriptor)
    }

    /// Extends the data file over free pages LMDB left unwritten at its end, so that the file always covers what the
    /// last commit counts and a shorter file can be told apart as damaged.
    ///
    /// Asks the file only when the last commit's pages end beyond what it is known to hold. Asking after every commit
    /// (`fstat` and LMDB's statistics) cost durable single-object commits about a seventh of their speed.
    func coverMappedPages() {
        var info = MDB_envinfo()
        guard mdb_env_info(handle, &info) == 0 else { return }
        if Int(clamping: info.me_last_pgno) < coveredPages.load(ordering: .relaxed) { return }
        let shortfall = Self.mappedPagesShortfall(handle)
        guard shortfall.descriptor >= 0, shortfall.pageSize > 0 else { return }
        if shortfall.bytes > 0 {
            guard ftruncate(shortfall.descriptor, off_t(shortfall.needed)) == 0 else { return }
        }
        coveredPages.store(shortfall.needed / shortfall.pageSize, ordering: .relaxed)
    }

    /// Whether ``close()`` was called.
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Whether an `MDB_PANIC` poisoned the handle (it then refuses all use).
    var isPanicked: Bool { state.withLock { $0.panicked } }

    /// Closes the environment: waits for storage calls in progress, ends every open snapshot, and closes the LMDB
    /// handle, so the directory can be opened again in this process. Every later call fails with
    /// ``StorageError/Code/closed``.
    public func close() {
        remapLock.withExclusiveLock {
            // Idempotent: handles that share this environment (two replicas of one directory in one process) may each
            // close it, and LMDB's handle must be closed once.
            let snapshots = state.withLock { state -> [Snapshot]? in
                guard !state.closed else { return nil }
                state.closed = true
                defer { state.snapshots.removeAll() }
                return state.snapshots.values.compactMap(\.snapshot)
            }
            guard let snapshots else { return }
            for snapshot in snapshots { snapshot.endForClose() }
            mdb_env_close(handle)
        }
    }

    func register(_ snapshot: Snapshot) {
        state.withLock { $0.snapshots[ObjectIdentifier(snapshot)] = WeakSnapshot(snapshot) }
    }

    func unregister(_ snapshot: Snapshot) {
        state.withLock { _ = $0.snapshots.removeValue(forKey: ObjectIdentifier(snapshot)) }
    }

    // MARK: Databases

    /// Opens the named databases, creating the missing ones unless the environment is read-only.
    ///
    /// - Throws: ``StorageError`` with `.notFound` when a read-only environment lacks one of them.
    public func openDatabases(_ names: [String]) throws -> [Database] {
        let known = state.withLock { $0.databases }
        if names.allSatisfy({ known[$0] != nil }) { return names.map { known[$0]! } }
        let opened: [Database] = try remapLock.withSharedLock {
            try checkUsable()
            var txn: OpaquePointer?
            let readOnly = configuration.readOnly
            var rc = mdb_txn_begin(handle, nil, readOnly ? UInt32(MDB_RDONLY) : 0, &txn)
            guard rc == 0, let txn else { throw error(rc, "mdb_txn_begin") }
            var result: [Database] = []
            for name in names {
                var dbi = MDB_dbi()
                rc = mdb_dbi_open(txn, name, readOnly ? 0 : UInt32(MDB_CREATE), &dbi)
                if rc != 0 {
                    mdb_txn_abort(txn)
                    throw StorageError(
                        resultCode: rc, operation: "mdb_dbi_open", path: path, context: "database '\(name)'")
                }
                result.append(Database(name: name, dbi: dbi))
            }
            rc = mdb_txn_commit(txn)
            if rc != 0 { throw error(rc, "mdb_txn_commit") }
            return result
        }
        state.withLock { state in for db in opened { state.databases[db.name] = db } }
        return opened
    }

    // MARK: Transactions

    /// Runs `body` in a read-only transaction: a consistent snapshot of the last commit.
    ///
    /// Values passed to `body` as buffers are valid only during the call that passes them.
    public func read<T>(_ body: (ReadTransaction) throws -> T) throws -> T {
        try retryingMapResized {
            try remapLock.withSharedLock {
                try checkUsable()
                let txn = try beginTransaction(readOnly: true)
                let transaction = ReadTransaction(environment: self, txn: txn)
                defer { transaction.finish(commit: false) }
                return try body(transaction)
            }
        }
    }

    /// Runs `body` in the write transaction and commits it. Writes are serialized: one at a time, across all
    /// threads and processes.
    ///
    /// If the map fills, the transaction is aborted, the map grows, and **`body` runs again** from the start:
    /// it must derive everything it writes from its inputs and what it reads in the transaction.
    ///
    /// - Throws: whatever `body` throws (the transaction is then aborted), or ``StorageError`` with `.mapFull`
    ///   (the maximum map size is reached; the message names both sizes), `.diskFull`, `.io`, `.panic`.
    public func write<T>(_ body: (WriteTransaction) throws -> T) throws -> T {
        var growths = 0
        // Keep the map at least twice what is in use, so that a large write seldom fills it and runs twice.
        let statistics = self.statistics
        try grow(toHold: 2 * statistics.usedBytes, mapped: statistics.mapSize)
        while true {
            do {
                return try remapLock.withSharedLock {
                    try checkUsable()
                    let txn = try beginTransaction(readOnly: false)
                    let transaction = WriteTransaction(environment: self, txn: txn)
                    var committed = false
                    defer { if !committed { transaction.finish(commit: false) } }
                    let result = try body(transaction)
                    try transaction.commit()
                    committed = true
                    coverMappedPages()
                    return result
                }
            } catch let error as StorageError where error.code == .mapFull && growths < 64 {
                growths += 1
                try growMap(after: error)
            } catch let error as StorageError where error.code == .mapResized {
                try adoptMapSize()
            }
        }
    }

    /// Opens a long-lived snapshot: a read transaction that sees the last commit until released. A snapshot
    /// holds a reader slot and keeps the pages it sees from being reused, so release it when done.
    public func snapshot() throws -> Snapshot {
        try retryingMapResized {
            try remapLock.withSharedLock {
                try checkUsable()
                let snapshot = Snapshot(environment: self, txn: try beginTransaction(readOnly: true))
                register(snapshot)
                return snapshot
            }
        }
    }

    /// Begins an LMDB transaction. `MDB_MAP_RESIZED` (another process grew the map) is thrown to the caller:
    /// adopting the new size needs the exclusive lock, which this thread cannot take while it holds the shared one.
    func beginTransaction(readOnly: Bool) throws(StorageError) -> OpaquePointer {
        if let injected = faults.check(.transactionBegin) { throw error(injected, "mdb_txn_begin") }
        var txn: OpaquePointer?
        let rc = mdb_txn_begin(handle, nil, readOnly ? UInt32(MDB_RDONLY) : 0, &txn)
        guard rc == 0, let txn else { throw error(rc, "mdb_txn_begin") }
        return txn
    }

    /// Runs `body`, adopting a map grown by another process and retrying when LMDB reports `MDB_MAP_RESIZED`.
    func retryingMapResized<T>(_ body: () throws -> T) throws -> T {
        var attempts = 0
        while true {
            do {
                return try body()
            } catch let error as StorageError where error.code == .mapResized && attempts < 8 {
                attempts += 1
                try adoptMapSize()
            }
        }
    }

    /// Builds the error for a failed call and, for `MDB_PANIC`, marks this handle unusable.
    func error(_ rc: Int32, _ operation: String, context: String? = nil) -> StorageError {
        var error = StorageError(resultCode: rc, operation: operation, path: path, context: context)
        if error.code == .diskFull { error = diskFullError(error) }
        if error.code == .panic { state.withLock { $0.panicked = true } }
        return error
    }

    /// A disk-full error that says so first, with the free space and the file size limit; or, for an EIO that is
    /// neither (plenty of space, no limit reached), an input/output error.
    private func diskFullError(_ error: StorageError) -> StorageError {
        var fileSystem = statvfs()
        let free = statvfs(path, &fileSystem) == 0 ? Int(fileSystem.f_bavail) * Int(fileSystem.f_frsize) : -1
        var limit = rlimit()
        // RLIM_INFINITY is all ones; a limit that does not fit an Int is no limit.
        let sizeLimit = getrlimit(RLIMIT_FSIZE_VALUE, &limit) == 0 ? Int(exactly: limit.rlim_cur) : nil
        var dataFile = stat()
        let dataSize = stat(path + "/data.mdb", &dataFile) == 0 ? Int(dataFile.st_size) : 0
        let nearLimit = sizeLimit.map { dataSize + (1 << 20) >= $0 } ?? false
        if error.resultCode == EIO && free >= (64 << 20) && !nearLimit {
            var io = error
            io.code = .io
            return io
        }
        var message =
            "disk full writing \(path): \(error.operation) failed (code \(error.resultCode)); data.mdb is \(dataSize) bytes, "
        message += free >= 0 ? "\(free) bytes free on its file system" : "free space unknown"
        if let sizeLimit { message += ", file size limit \(sizeLimit) bytes" }
        message += ". Free disk space (or raise the limit) and retry; nothing committed was lost"
        var full = error
        full.message = message
        return full
    }

    func checkUsable() throws(StorageError) {
        let (closed, panicked) = state.withLock { ($0.closed, $0.panicked) }
        if closed {
            throw StorageError(
                code: .closed, operation: "use", path: path, message: "the replica at \(path) was closed")
        }
        if panicked {
            throw StorageError(
                code: .panic, resultCode: MDB_PANIC, operation: "use", path: path,
                message: "an earlier fatal storage error poisoned the handle for \(path); "
                    + "close it and open the directory again")
        }
    }

    // MARK: The map

    /// The current map size in bytes.
    public var mapSize: Int {
        remapLock.withSharedLock {
            guard !isClosed else { return 0 }
            var info = MDB_envinfo()
            mdb_env_info(handle, &info)
            return Int(info.me_mapsize)
        }
    }

    /// Figures about the environment, for tools and metrics.
    public struct Statistics: Sendable, Hashable {
        public var mapSize: Int
        public var usedBytes: Int
        public var pageSize: Int
        public var lastTransactionID: Int
        public var readersUsed: Int
        public var maximumReaders: Int
    }

    /// Figures about the environment.
    public var statistics: Statistics {
        remapLock.withSharedLock { unlockedStatistics }
    }

    private var unlockedStatistics: Statistics {
        guard !isClosed else {
            return Statistics(
                mapSize: 0, usedBytes: 0, pageSize: 0, lastTransactionID: 0, readersUsed: 0, maximumReaders: 0)
        }
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        var stat = MDB_stat()
        mdb_env_stat(handle, &stat)
        return Statistics(
            mapSize: Int(info.me_mapsize),
            usedBytes: Self.bytes(throughPage: info.me_last_pgno, pageSize: stat.ms_psize),
            pageSize: Int(stat.ms_psize), lastTransactionID: Int(info.me_last_txnid),
            readersUsed: Int(info.me_numreaders), maximumReaders: Int(info.me_maxreaders))
    }

    /// The reader table, which every process that has the environment open shares.
    public struct Readers: Sendable, Hashable {
        /// Reader slots held: by a read transaction running now, or kept by a thread for its next one.
        public var slotsHeld: Int
        /// Read transactions running now.
        public var active: Int
        /// How many commits the oldest running read transaction is behind the last one: the pages those commits
        /// freed cannot be reused until it ends, so a large and growing number is a reader that never finishes.
        /// `nil` when no read transaction runs.
        public var oldestLagTransactions: Int?

        public init(slotsHeld: Int, active: Int, oldestLagTransactions: Int?) {
            self.slotsHeld = slotsHeld
            self.active = active
            self.oldestLagTransactions = oldestLagTransactions
        }

        /// Reads the listing `mdb_reader_list` writes (a header, then `PID THREAD TXNID` per slot held, with `-` for
        /// no transaction), against the last committed transaction. Lines it does not recognise are skipped.
        public init(listing: String, lastTransactionID: Int) {
            var held = 0
            var active = 0
            var oldest: Int?
            for line in listing.split(separator: "\n") {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count == 3, Int(fields[0]) != nil else { continue }
                held += 1
                guard let transaction = Int(fields[2]) else { continue }
                active += 1
                oldest = min(oldest ?? transaction, transaction)
            }
            self.init(
                slotsHeld: held, active: active, oldestLagTransactions: oldest.map { max(0, lastTransactionID - $0) })
        }
    }

    /// The reader table now. A closed environment has none.
    public var readers: Readers {
        remapLock.withSharedLock {
            guard !isClosed else { return Readers(slotsHeld: 0, active: 0, oldestLagTransactions: nil) }
            var info = MDB_envinfo()
            mdb_env_info(handle, &info)
            var listing = ""
            withUnsafeMutablePointer(to: &listing) { pointer in
                _ = mdb_reader_list(
                    handle,
                    { message, context in
                        guard let message, let context else { return 0 }
                        context.assumingMemoryBound(to: String.self).pointee += String(cString: message)
                        return 0
                    }, pointer)
            }
            return Readers(listing: listing, lastTransactionID: Int(clamping: info.me_last_txnid))
        }
    }

    private func growMap(after failure: StorageError) throws {
        let mapped = mapSize
        let maximum = configuration.maximumMapSize
        guard mapped < maximum else {
            throw StorageError(
                code: .mapFull, resultCode: MDB_MAP_FULL, operation: failure.operation, path: path,
                message: "the replica at \(path) is full: the map reached its maximum of \(mapped) bytes "
                    + "(maximumMapSize \(maximum)); raise the maximum map size to continue. Nothing committed was lost")
        }
        try grow(toHold: mapped + 1, mapped: mapped)
    }

    /// Grows the map, if needed, so that `additionalBytes` more fit after what is in use now (within
    /// ``Configuration/maximumMapSize``).
    ///
    /// A write that fills the map is run again after the map grows, so a write known to be large (rebuilding the
    /// views, say) calls this first rather than doing its work twice. The map is address space, not disk: growing
    /// it costs nothing until pages are written.
    public func reserve(additionalBytes: Int) throws {
        let statistics = self.statistics
        try grow(toHold: statistics.usedBytes + max(0, additionalBytes), mapped: statistics.mapSize)
    }

    /// Grows the map, doubling it, until it holds `needed` bytes (within ``Configuration/maximumMapSize``); `mapped`
    /// is the size last seen.
    private func grow(toHold needed: Int, mapped: Int) throws {
        // Growing takes the exclusive lock, which waits for every storage call in progress: only when it can help.
        guard needed > mapped, mapped < configuration.maximumMapSize else { return }
        try remapLock.withExclusiveLock {
            try checkUsable()
            // Adopt first a larger map another process set, so as never to set a smaller one over it.
            var rc = mdb_env_set_mapsize(handle, 0)
            if rc != 0 { throw error(rc, "mdb_env_set_mapsize", context: "adopting the map size before growing it") }
            var info = MDB_envinfo()
            mdb_env_info(handle, &info)
            let current = Int(info.me_mapsize)
            guard needed > current else { return }
            var grown = current
            while grown < needed { grown = max(grown * 2, grown + (1 << 20)) }
            grown = min(grown, configuration.maximumMapSize)
            guard grown > current else { return }
            rc = mdb_env_set_mapsize(handle, grown)
            if rc != 0 { throw error(rc, "mdb_env_set_mapsize", context: "growing the map to \(grown) bytes") }
        }
    }

    func adoptMapSize() throws {
        try remapLock.withExclusiveLock {
            try checkUsable()
            let rc = mdb_env_set_mapsize(handle, 0)
            if rc != 0 { throw error(rc, "mdb_env_set_mapsize", context: "adopting a map grown by another process") }
        }
    }

    // MARK: Maintenance

    /// Clears reader slots left by processes that died holding a snapshot. Returns how many were cleared.
    @discardableResult
    public func clearStaleReaders() -> Int {
        remapLock.withSharedLock {
            guard !isClosed else { return 0 }
            var dead: Int32 = 0
            mdb_reader_check(handle, &dead)
            return Int(dead)
        }
    }

    /// Flushes written data to disk, for environments opened with a relaxed ``Durability``.
    public func flush() throws {
        try remapLock.withSharedLock {
            try checkUsable()
            let rc = mdb_env_sync(handle, 1)
            if rc != 0 { throw error(rc, "mdb_env_sync") }
        }
    }

    /// Copies the environment into the empty directory `target`, compacting it. The copy is a consistent
    /// snapshot, taken without blocking writers.
    public func copy(to target: String) throws {
        try remapLock.withSharedLock {
            try checkUsable()
            let rc = mdb_env_copy2(handle, target, UInt32(MDB_CP_COMPACT))
            if rc != 0 { throw error(rc, "mdb_env_copy2", context: "copying to \(target)") }
        }
    }

    // MARK: Testing

    /// Test-only: arms (or, with `nil`, disarms) a fault plan on this environment. Not API.
    package func injectFaults(_ plan: StorageFaultPlan?) { faults.arm(plan) }

    /// Test-only: the calls seen and failed by the armed fault plan. Not API.
    public var _faultCounts: (calls: Int, failures: Int) { faults.counts }
}

/// A named database inside an ``Environment``.
public struct Database: Sendable, Hashable {
    /// The database's name.
    public let name: String
    let dbi: MDB_dbi
}
