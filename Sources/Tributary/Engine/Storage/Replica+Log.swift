import Dispatch
import TributaryCompression
import TributaryLog
import TributaryMerge
public import TributaryModel
import TributaryStorage
import TributaryViews

/// Figures about a replica's changeset log.
public struct LogStatistics: Sendable, Hashable {
    /// The number of changesets in the log.
    public var changesets: Int
    /// The instructions they hold.
    public var instructions: Int
    /// The log entries' stored size in bytes (headers and compressed payloads).
    public var storedBytes: Int
    /// The changesets' encoded size before compression.
    public var uncompressedBytes: Int

    /// Uncompressed bytes per stored byte of payload (higher is better).
    public var compressionRatio: Double {
        storedBytes == 0 ? 1 : Double(uncompressedBytes) / Double(storedBytes)
    }
}

/// A summary of one log entry, read without decompressing its changeset.
public struct LogEntrySummary: Sendable, Hashable {
    public var localSequence: UInt64
    public var origin: ReplicaID
    public var originSequence: UInt64
    public var time: HybridTime
    public var instructionCount: Int
    /// The stored size: header and (possibly compressed) payload.
    public var storedBytes: Int
    /// The changeset's encoded size before compression.
    public var uncompressedBytes: Int
    public var isCompressed: Bool
}

extension Replica {
    /// Counts and sizes of the log, from a scan of its entries that checks every checksum.
    package func logStatistics() throws -> LogStatistics {
        var statistics = LogStatistics(changesets: 0, instructions: 0, storedBytes: 0, uncompressedBytes: 0)
        try forEachLogEntry { entry in
            statistics.changesets += 1
            statistics.instructions += entry.instructionCount
            statistics.storedBytes += entry.storedBytes
            statistics.uncompressedBytes += entry.uncompressedBytes
            return true
        }
        return statistics
    }

    /// Visits the log's entries from `start` through `end` (inclusive) in order, checking each checksum and the
    /// chain, until `body` returns `false`. Runs on one snapshot.
    ///
    /// - Throws: ``TributaryError`` with `.corrupted` naming the first damaged entry.
    package func forEachLogEntry(
        from start: UInt64 = 1, through end: UInt64? = nil, _ body: (LogEntrySummary) throws -> Bool
    ) throws {
        do {
            try environment.read { txn in
                try log.scan(in: txn, from: max(start, 1), through: end) { entry in
                    try body(LogEntrySummary(entry))
                }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Visits the decoded changesets from `start` through `end` in log order, until `body` returns `false`.
    package func forEachChangeset(
        from start: UInt64 = 1, through end: UInt64? = nil,
        _ body: (LogEntrySummary, Changeset) throws -> Bool
    ) throws {
        do {
            try environment.read { txn in
                let context = ZstdContext()
                try log.scan(in: txn, from: max(start, 1), through: end) { entry in
                    try body(LogEntrySummary(entry), try log.changeset(of: entry, context: context))
                }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }
}

extension LogEntrySummary {
    init(_ entry: LogEntry) {
        self.init(
            localSequence: entry.localSequence, origin: entry.origin, originSequence: entry.originSequence,
            time: entry.time, instructionCount: Int(entry.instructionCount), storedBytes: entry.storedSize,
            uncompressedBytes: Int(entry.uncompressedLength), isCompressed: entry.isCompressed)
    }
}

extension Replica {
    /// Benchmark support: the storage key and stored record size of every object of a type. Not API.
    package func _recordSizes(type: String) throws -> [([UInt8], Int)] {
        var result: [([UInt8], Int)] = []
        try environment.read { txn in
            let prefix = ViewStore.typePrefix(type)
            try txn.scan(views.objects, from: prefix, to: ViewStore.prefixEnd(prefix)) { key, value in
                result.append((Array(key), value.count))
                return true
            }
        }
        return result
    }
}

extension Replica {
    /// A digest of the object records alone, in key order: what ``recordsDigest(of:)`` computes for records held
    /// elsewhere (the simulator's oracle). Equal digests mean byte-identical records.
    package func recordsDigest() throws -> UInt64 {
        do {
            return try environment.read { txn in
                var digest = RecordsDigest()
                try txn.scan(views.objects) { key, value in
                    digest.add(key: key, value: value)
                    return true
                }
                return digest.value
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The digest of records given as (type, primary key, encoded record), as ``recordsDigest()`` computes it.
    package static func recordsDigest(of records: [(type: String, primaryKey: PrimaryKey, bytes: [UInt8])]) -> UInt64 {
        var digest = RecordsDigest()
        let keyed = records.map { (ViewStore.objectKey(type: $0.type, primaryKey: $0.primaryKey), $0.bytes) }
        for (key, bytes) in keyed.sorted(by: { $0.0.lexicographicallyPrecedes($1.0) }) {
            key.withUnsafeBytes { key in bytes.withUnsafeBytes { digest.add(key: key, value: $0) } }
        }
        return digest.value
    }

    /// The stored bytes of one object's record (tombstones included), for convergence checks. Not API.
    package func _recordBytes(type: String, primaryKey: PrimaryKey) throws -> [UInt8]? {
        try environment.read { txn in
            try txn.get(views.objects, key: ViewStore.objectKey(type: type, primaryKey: primaryKey))
        }
    }

    /// Every stored record's type and primary key. Not API.
    package func _recordKeys() throws -> [(type: String, primaryKey: PrimaryKey)] {
        var result: [(String, PrimaryKey)] = []
        try environment.read { txn in
            try txn.scan(views.objects) { key, _ in
                if let record = ViewStore.recordKey(fromObjectKey: key) {
                    result.append((record.type, record.primaryKey))
                }
                return true
            }
        }
        return result
    }
}

struct RecordsDigest {
    var value: UInt64 = XXHash64.hash([])

    mutating func add(key: UnsafeRawBufferPointer, value bytes: UnsafeRawBufferPointer) {
        var combined = withUnsafeBytes(of: value) { Array($0) }
        combined.append(contentsOf: withUnsafeBytes(of: UInt32(key.count)) { Array($0) })
        combined.append(contentsOf: key)
        combined.append(contentsOf: bytes)
        value = XXHash64.hash(combined)
    }
}

extension Replica {
    /// Benchmark support: the index key ranges that hold `values` of an indexed property. Not API.
    package func _indexRanges(type: String, property: String, values: [Value]) throws -> [([UInt8], [UInt8])] {
        guard let objectType = schema[type: type], let indexed = objectType[property: property],
            let budget = ViewStore.indexValueBudget(of: indexed, in: objectType)
        else { return [] }
        return values.compactMap { value in
            var bytes = ViewStore.indexPrefix(type: type, property: property)
            guard KeyEncoding.appendIndexValue(value, budget: budget, to: &bytes) else { return nil }
            return (bytes, Snapshot.successor(bytes))
        }
    }

    /// Benchmark support: seconds to read the index ranges with a raw cursor and get each record, copying values.
    package func _rawRangeRead(_ ranges: [([UInt8], [UInt8])]) throws -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try environment.read { txn in
            var total = 0
            for (lower, upper) in ranges {
                var keys: [[UInt8]] = []
                try txn.scan(views.indexes, from: lower, to: upper) { key, _ in
                    keys.append(Array(key))
                    return true
                }
                for key in keys {
                    // The record key: type prefix + the primary key that ends the index key.
                    guard let zero = key.firstIndex(of: 0) else { continue }
                    var recordKey = Array(key[...zero])
                    recordKey.append(contentsOf: key.suffix(9))
                    total += try txn.get(views.objects, key: recordKey)?.count ?? 0
                }
            }
            precondition(total > 0)
        }
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }

    /// Benchmark support: seconds to scan every record of a type with a raw cursor, copying values.
    package func _rawScan(type: String) throws -> Double {
        let start = DispatchTime.now().uptimeNanoseconds
        try environment.read { txn in
            let prefix = ViewStore.typePrefix(type)
            var total = 0
            try txn.scan(views.objects, from: prefix, to: ViewStore.prefixEnd(prefix)) { _, value in
                total += Array(value).count
                return true
            }
            precondition(total > 0)
        }
        return Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    }
}
