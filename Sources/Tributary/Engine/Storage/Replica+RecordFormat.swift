import TributaryLog
import TributaryMerge
import TributaryStorage
import TributaryViews

extension Replica {
    /// Rewrites every stored record whose bytes differ from what its decoded record encodes to today: the views'
    /// records and those of the live base state. Run by the upgrade to replica format 3, which drops the erased list
    /// elements that earlier formats kept (a record decodes without them, and verification compares bytes).
    ///
    /// Records are read and rewritten a batch at a time, so the memory held is bounded by a batch.
    ///
    /// - Throws: ``TributaryError`` with `.corrupted` naming the first record that does not decode; nothing is
    ///   written then (the transaction is abandoned by the caller).
    func rewriteRecordsInCurrentEncoding(in txn: TributaryStorageWriteTransaction) throws {
        try Self.rewriteRecords(in: views.objects, from: nil, to: nil, txn: txn) { key in
            "the record of \(Self.describeRecordKey(key)) in \(directory)"
        }
        guard let compaction = try log.compaction(in: txn), let base = try baseDatabase() else { return }
        let generation = compaction.generation
        try Self.rewriteRecords(
            in: base, from: Self.baseKey(generation: generation) + [0], to: Self.baseKey(generation: generation + 1),
            txn: txn
        ) { key in
            "the base state's record of \(Self.describeRecordKey(Array(key.dropFirst(8)))) in \(directory)"
        }
    }

    /// Re-encodes the records of `database` in `from ..< to`, writing those whose bytes change.
    private static func rewriteRecords(
        in database: Database, from start: [UInt8]?, to end: [UInt8]?, txn: TributaryStorageWriteTransaction,
        describe: ([UInt8]) -> String
    ) throws {
        let batch = 1024
        var next = start
        while true {
            var changed: [(key: [UInt8], value: [UInt8])] = []
            var visited = 0
            var resume: [UInt8]?
            var failure: TributaryError?
            try txn.scan(database, from: next, to: end) { key, value in
                let key = Array(key)
                if visited == batch {
                    resume = key
                    return false
                }
                visited += 1
                do {
                    let bytes = Array(value)
                    let encoded = try ObjectRecord(decoding: bytes).encoded()
                    if encoded != bytes { changed.append((key, encoded)) }
                    return true
                } catch {
                    failure = TributaryError(.corrupted, "\(describe(key)) does not decode: \(error)")
                    return false
                }
            }
            if let failure { throw failure }
            for (key, value) in changed { try txn.put(database, key: key, value: value) }
            guard let resume else { return }
            next = resume
        }
    }
}
