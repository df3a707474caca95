import CLMDB
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A read-only LMDB transaction: a consistent snapshot of one commit.
///
/// Not `Sendable`: an LMDB transaction and its cursors must be used by one thread at a time (lmdb.h), and a
/// transaction passed to a closure is valid only during that closure. Do not store it or return it.
public class ReadTransaction {
    let environment: Environment
    var txn: OpaquePointer?

    init(environment: Environment, txn: OpaquePointer) {
        self.environment = environment
        self.txn = txn
    }

    var handle: OpaquePointer {
        guard let txn else { preconditionFailure("a storage transaction was used after it ended") }
        return txn
    }

    func finish(commit: Bool) {
        guard let txn else { return }
        mdb_txn_abort(txn)
        self.txn = nil
    }

    /// Calls `body` with the value stored under `key`, or `nil`. The buffer is valid only during the call.
    public func withValue<T>(
        _ database: Database, key: [UInt8], _ body: (UnsafeRawBufferPointer?) throws -> T
    ) throws -> T {
        try body(try valueInPlace(database, key: key))
    }

    /// The value stored under `key`, where LMDB keeps it, or `nil`: for a hot path that reads one value and keeps
    /// nothing of its bytes (``withValue(_:key:_:)`` is generic, and called from another module it runs
    /// unspecialized). The bytes stay valid until this transaction ends, or, in a write transaction, until its next
    /// write; read them before either.
    public func valueInPlace(_ database: Database, key: [UInt8]) throws -> UnsafeRawBufferPointer? {
        if let injected = environment.faults.check(.get) {
            throw environment.error(injected, "mdb_get", context: "database '\(database.name)'")
        }
        var value = MDB_val()
        let rc = key.withUnsafeBytes { keyBytes in
            var keyValue = MDB_val(
                mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
            return mdb_get(handle, database.dbi, &keyValue, &value)
        }
        if rc == MDB_NOTFOUND { return nil }
        if rc != 0 { throw environment.error(rc, "mdb_get", context: "database '\(database.name)'") }
        return UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)
    }

    /// The value stored under `key`, copied, or `nil`.
    public func get(_ database: Database, key: [UInt8]) throws -> [UInt8]? {
        try withValue(database, key: key) { buffer in buffer.map { Array($0) } }
    }

    /// The number of entries in the database.
    public func count(_ database: Database) throws -> Int {
        var stat = MDB_stat()
        let rc = mdb_stat(handle, database.dbi, &stat)
        if rc != 0 { throw environment.error(rc, "mdb_stat", context: "database '\(database.name)'") }
        return Int(stat.ms_entries)
    }

    /// Visits the entries whose keys are in `start ..< end` in key order (or in reverse order), until `body`
    /// returns `false`. A `nil` bound is open. The buffers are valid only during the call that passes them.
    ///
    /// - Complexity: O(log n) to find the start, then O(1) per entry visited.
    public func scan(
        _ database: Database, from start: [UInt8]? = nil, to end: [UInt8]? = nil, reverse: Bool = false,
        _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        var cursor: OpaquePointer?
        let rc = mdb_cursor_open(handle, database.dbi, &cursor)
        guard rc == 0, let cursor else {
            throw environment.error(rc, "mdb_cursor_open", context: "database '\(database.name)'")
        }
        defer { mdb_cursor_close(cursor) }
        var key = MDB_val()
        var value = MDB_val()
        // No nested functions here: variables they capture and change are checked for exclusive access on every use.
        var found: Bool
        if !reverse, let start {
            found = try start.withUnsafeBytes { bytes in
                key = MDB_val(mv_size: bytes.count, mv_data: UnsafeMutableRawPointer(mutating: bytes.baseAddress))
                return try cursorGet(cursor, &key, &value, MDB_SET_RANGE, database)
            }
        } else if !reverse {
            found = try cursorGet(cursor, &key, &value, MDB_FIRST, database)
        } else if let end {
            let positioned = try end.withUnsafeBytes { bytes in
                key = MDB_val(mv_size: bytes.count, mv_data: UnsafeMutableRawPointer(mutating: bytes.baseAddress))
                return try cursorGet(cursor, &key, &value, MDB_SET_RANGE, database)
            }
            found = try cursorGet(cursor, &key, &value, positioned ? MDB_PREV : MDB_LAST, database)
        } else {
            found = try cursorGet(cursor, &key, &value, MDB_LAST, database)
        }
        while found {
            let keyBuffer = UnsafeRawBufferPointer(start: key.mv_data, count: key.mv_size)
            if !reverse, let end, compareBytes(keyBuffer, end) >= 0 { return }
            if reverse, let start, compareBytes(keyBuffer, start) < 0 { return }
            let valueBuffer = UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size)
            guard try body(keyBuffer, valueBuffer) else { return }
            found = try cursorGet(cursor, &key, &value, reverse ? MDB_PREV : MDB_NEXT, database)
        }
    }

    /// One `mdb_cursor_get`: `false` at the end of the data, an error for any failure.
    @inline(__always)
    private func cursorGet(
        _ cursor: OpaquePointer, _ key: inout MDB_val, _ value: inout MDB_val, _ op: MDB_cursor_op, _ database: Database
    ) throws -> Bool {
        if let injected = environment.faults.check(.cursorGet) {
            throw environment.error(injected, "mdb_cursor_get", context: "database '\(database.name)'")
        }
        let rc = mdb_cursor_get(cursor, &key, &value, op)
        if rc == MDB_NOTFOUND { return false }
        if rc != 0 { throw environment.error(rc, "mdb_cursor_get", context: "database '\(database.name)'") }
        return true
    }

    /// The last key of the database, copied, or `nil` when it is empty.
    public func lastKey(_ database: Database) throws -> [UInt8]? {
        var result: [UInt8]?
        try scan(database, reverse: true) { key, _ in
            result = Array(key)
            return false
        }
        return result
    }
}

/// LMDB's default key order: bytewise, a shorter key first when it is a prefix of a longer one.
@inline(__always)
func compareBytes(_ lhs: UnsafeRawBufferPointer, _ rhs: [UInt8]) -> Int {
    rhs.withUnsafeBytes { rhs in
        let common = min(lhs.count, rhs.count)
        if common > 0, let l = lhs.baseAddress, let r = rhs.baseAddress {
            let c = memcmp(l, r, common)
            if c != 0 { return Int(c) }
        }
        return lhs.count - rhs.count
    }
}

/// The write transaction. Only one exists at a time, across all threads and processes.
///
/// Not `Sendable`: an LMDB write transaction belongs to the thread that began it (lmdb.h, `mdb_txn_begin`).
public final class WriteTransaction: ReadTransaction {
    /// Stores `value` under `key`, replacing what was there.
    ///
    /// - Throws: ``StorageError`` with `.mapFull` (the environment grows the map and reruns the whole write),
    ///   `.badValueSize` (an empty or too long key), `.transactionFull`.
    public func put(_ database: Database, key: [UInt8], value: [UInt8]) throws {
        try value.withUnsafeBytes { try put(database, key: key, bytes: $0) }
    }

    /// Stores the bytes of `bytes` under `key`, replacing what was there.
    public func put(_ database: Database, key: [UInt8], bytes: UnsafeRawBufferPointer) throws {
        try put(database, key: key, bytes: bytes, flags: 0)
    }

    /// Stores `value` under `key`, which must sort after every key `database` holds: LMDB then goes straight to the
    /// last page instead of searching, and fills pages instead of splitting them in half. For keys that only grow,
    /// such as a log's sequence numbers.
    ///
    /// - Throws: ``StorageError`` with `.keyExists` when `key` does not sort after the last key (nothing is stored),
    ///   and as ``put(_:key:value:)`` does.
    public func append(_ database: Database, key: [UInt8], value: [UInt8]) throws {
        try value.withUnsafeBytes { try put(database, key: key, bytes: $0, flags: UInt32(MDB_APPEND)) }
    }

    private func put(_ database: Database, key: [UInt8], bytes: UnsafeRawBufferPointer, flags: UInt32) throws {
        if let injected = environment.faults.check(.put) {
            throw environment.error(injected, "mdb_put", context: "database '\(database.name)'")
        }
        let rc = key.withUnsafeBytes { keyBytes in
            var keyValue = MDB_val(
                mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
            var value = MDB_val(mv_size: bytes.count, mv_data: UnsafeMutableRawPointer(mutating: bytes.baseAddress))
            return mdb_put(handle, database.dbi, &keyValue, &value, flags)
        }
        if rc != 0 {
            let what = flags & UInt32(MDB_APPEND) != 0 ? "an append whose key does not sort after the last key, " : ""
            throw environment.error(
                rc, "mdb_put",
                context: "database '\(database.name)', \(what)\(key.count)-byte key, \(bytes.count)-byte value")
        }
    }

    /// Removes the entry under `key`. Returns whether there was one.
    @discardableResult
    public func delete(_ database: Database, key: [UInt8]) throws -> Bool {
        if let injected = environment.faults.check(.delete) {
            throw environment.error(injected, "mdb_del", context: "database '\(database.name)'")
        }
        let rc = key.withUnsafeBytes { keyBytes in
            var keyValue = MDB_val(
                mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
            return mdb_del(handle, database.dbi, &keyValue, nil)
        }
        if rc == MDB_NOTFOUND { return false }
        if rc != 0 { throw environment.error(rc, "mdb_del", context: "database '\(database.name)'") }
        return true
    }

    /// Removes every entry of the database.
    public func removeAll(_ database: Database) throws {
        let rc = mdb_drop(handle, database.dbi, 0)
        if rc != 0 { throw environment.error(rc, "mdb_drop", context: "database '\(database.name)'") }
    }

    func commit() throws {
        guard let txn else { preconditionFailure("a storage transaction was committed after it ended") }
        if let injected = environment.faults.check(.commit) {
            mdb_txn_abort(txn)
            self.txn = nil
            throw environment.error(injected, "mdb_txn_commit")
        }
        let rc = mdb_txn_commit(txn)
        self.txn = nil  // committed or not, LMDB has freed the transaction
        if rc != 0 { throw environment.error(rc, "mdb_txn_commit") }
    }
}

@available(*, unavailable, message: "an LMDB transaction belongs to the thread that began it")
extension ReadTransaction: Sendable {}

/// A long-lived read snapshot. Any thread may use it, one call at a time (calls are serialized).
///
/// A snapshot holds a reader slot and keeps the pages it sees from being reused: release it (drop the last
/// reference, or call ``release()``) when done.
///
/// `@unchecked Sendable`: the LMDB read transaction (opened with `MDB_NOTLS`) may move between threads when its
/// use is serialized, which `lock` does; the map may be remapped between calls, never during one.
public final class Snapshot: @unchecked Sendable {
    /// `@unchecked Sendable`: the pointer is only touched under `lock`.
    private struct Handle: @unchecked Sendable {
        var txn: OpaquePointer?
    }
    private let environment: Environment
    private let lock: Mutex<Handle>

    init(environment: Environment, txn: OpaquePointer) {
        self.environment = environment
        self.lock = Mutex(Handle(txn: txn))
    }

    deinit { release() }

    /// Runs `body` against the snapshot.
    public func read<T>(_ body: (ReadTransaction) throws -> T) throws -> T {
        try environment.remapLock.withSharedLock {
            try environment.checkUsable()
            return try lock.withLock { held in
                guard let handle = held.txn else { preconditionFailure("a snapshot was used after release()") }
                let transaction = ReadTransaction(environment: environment, txn: handle)
                defer { transaction.txn = nil }  // the snapshot, not the wrapper, owns the transaction
                return try body(transaction)
            }
        }
    }

    /// Ends the snapshot and frees its reader slot. Using it afterwards is a programmer error.
    public func release() {
        environment.remapLock.withSharedLock {
            lock.withLock { held in
                if let handle = held.txn, !environment.isClosed { mdb_txn_abort(handle) }
                held.txn = nil
            }
        }
        environment.unregister(self)
    }

    /// Ends the transaction because the environment is closing (its exclusive lock is held).
    func endForClose() {
        lock.withLock { held in
            if let handle = held.txn { mdb_txn_abort(handle) }
            held.txn = nil
        }
    }
}
