import CLMDB
import Foundation

/// The baseline: LMDB called directly, with the same flags Tributary uses (NOTLS, full durability), no Swift layers.
final class RawLMDB {
    let environment: OpaquePointer
    var database = MDB_dbi()

    /// - Parameter synced: `false` opens with `MDB_NOSYNC`: commits are not flushed, as in Tributary's scratch views.
    init(path: String, mapSize: Int = 4 << 30, synced: Bool = true) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        var handle: OpaquePointer?
        try check(mdb_env_create(&handle), "mdb_env_create")
        environment = handle!
        try check(mdb_env_set_mapsize(environment, mapSize), "mdb_env_set_mapsize")
        try check(mdb_env_set_maxdbs(environment, 4), "mdb_env_set_maxdbs")
        let flags = UInt32(MDB_NOTLS) | (synced ? 0 : UInt32(MDB_NOSYNC))
        try check(mdb_env_open(environment, path, flags, 0o644), "mdb_env_open")
        var txn: OpaquePointer?
        try check(mdb_txn_begin(environment, nil, 0, &txn), "mdb_txn_begin")
        try check(mdb_dbi_open(txn, "objects", UInt32(MDB_CREATE), &database), "mdb_dbi_open")
        try check(mdb_txn_commit(txn), "mdb_txn_commit")
    }

    deinit { mdb_env_close(environment) }

    /// Puts every (key, value) pair in one write transaction and commits it durably.
    func putAll(_ pairs: [([UInt8], [UInt8])]) throws {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(environment, nil, 0, &txn), "mdb_txn_begin")
        for (key, value) in pairs { try put(txn, key, value) }
        try check(mdb_txn_commit(txn), "mdb_txn_commit")
    }

    func put(_ txn: OpaquePointer?, _ key: [UInt8], _ value: [UInt8]) throws {
        try key.withUnsafeBytes { keyBytes in
            try value.withUnsafeBytes { valueBytes in
                var k = MDB_val(
                    mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
                var v = MDB_val(
                    mv_size: valueBytes.count, mv_data: UnsafeMutableRawPointer(mutating: valueBytes.baseAddress))
                try check(mdb_put(txn, database, &k, &v, 0), "mdb_put")
            }
        }
    }

    /// Reads every key in one read transaction, copying each value out (as any reader must). Returns bytes read.
    func getAll(_ keys: [[UInt8]]) throws -> Int {
        var txn: OpaquePointer?
        try check(mdb_txn_begin(environment, nil, UInt32(MDB_RDONLY), &txn), "mdb_txn_begin")
        defer { mdb_txn_abort(txn) }
        var total = 0
        for key in keys {
            try key.withUnsafeBytes { keyBytes in
                var k = MDB_val(
                    mv_size: keyBytes.count, mv_data: UnsafeMutableRawPointer(mutating: keyBytes.baseAddress))
                var v = MDB_val()
                try check(mdb_get(txn, database, &k, &v), "mdb_get")
                let copy = Array(UnsafeRawBufferPointer(start: v.mv_data, count: v.mv_size))
                total += copy.count
            }
        }
        return total
    }
}

struct LMDBFailure: Error, CustomStringConvertible {
    var description: String
}

func check(_ rc: Int32, _ call: String) throws {
    if rc != 0 { throw LMDBFailure(description: "\(call): \(String(cString: mdb_strerror(rc)))") }
}

// swift-format-ignore: AlwaysUseLowerCamelCase
func mdb_txn_begin_shim(_ raw: RawLMDB, _ txn: inout OpaquePointer?) -> Int32 {
    mdb_txn_begin(raw.environment, nil, 0, &txn)
}

// swift-format-ignore: AlwaysUseLowerCamelCase
func mdb_txn_commit_shim(_ txn: OpaquePointer?) -> Int32 {
    mdb_txn_commit(txn)
}
