import Foundation
import Tributary
import TributaryCompression
import TributaryModel

/// Storage figures: bulk insert, durable single commits, primary-key reads, replay, log size.
struct StorageBenchmarks {
    let context: BenchContext

    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Item",
                properties: [
                    .scalar("_id", .int), .scalar("name", .string), .scalar("count", .int), .scalar("price", .double),
                    .scalar("active", .bool),
                ])
        ])

    /// The bulk insert's object as a model: the same values as ``values(_:)``.
    struct BenchItem: Model {
        static let typeName = "Item"
        var _id: Int
        var name: String
        var count: Int
        var price: Double
        var active: Bool

        init(_ index: Int) {
            _id = index
            name = "item-\(index)-\(index &* 2_654_435_761 % 100_000)"
            count = index % 1000
            price = Double(index) * 0.25
            active = index % 2 == 0
        }
    }

    static func values(_ index: Int) -> [String: Value] {
        [
            "_id": .int(Int64(index)), "name": .string("item-\(index)-\(index &* 2_654_435_761 % 100_000)"),
            "count": .int(Int64(index % 1000)), "price": .double(Double(index) * 0.25), "active": .bool(index % 2 == 0),
        ]
    }

    func open(_ name: String) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .full
        return try Replica.open(directory: context.path(name), schema: Self.schema, configuration: configuration)
    }

    func run() throws {
        let replica = try open("bulk")
        let raw = try RawLMDB(path: context.path("raw-bulk"))
        if context.wants("bulk_insert") || context.wants("primary_key_read") || context.wants("replay")
            || context.wants("log_")
        {
            try bulkInsert(replica, raw)
        }
        if context.wants("primary_key_read") { try primaryKeyReads(replica, raw) }
        if context.wants("replay") { try replay(replica) }
        if context.wants("log_") { try logSize(replica) }
        if context.wants("single_object_durable_commit") { try singleCommits() }
    }

    /// The same records, as raw key/value pairs: Tributary's own keys and record sizes, with random bytes.
    func rawPairs(_ replica: Replica) throws -> [([UInt8], [UInt8])] {
        var generator = SplitMix64(seed: 7)
        let sizes = try replica._recordSizes(type: "Item")
        return sizes.map { key, size in (key, (0..<size).map { _ in UInt8(truncatingIfNeeded: generator.next()) }) }
    }

    func bulkInsert(_ replica: Replica, _ raw: RawLMDB) throws {
        let count = context.objects
        // The values are built before the clock starts, as the raw side's records are.
        let objects = (0..<count).map(Self.values)
        // Best of three on each side: the time of one large durable commit swings with the disk.
        let insert = { (replica: Replica) in
            try time { try replica.write { txn in for values in objects { try txn.create("Item", values) } } }
        }
        var ours = try insert(replica)
        for attempt in 2...3 {
            let extra = try open("bulk-\(attempt)")
            ours = min(ours, try insert(extra))
            extra.close()
        }
        let pairs = try rawPairs(replica)
        precondition(pairs.count == count, "bulk insert stored \(pairs.count) of \(count) objects")
        var baseline = try time { try raw.putAll(pairs) }
        for attempt in 2...3 {
            let extra = try RawLMDB(path: context.path("raw-bulk-\(attempt)"))
            baseline = min(baseline, try time { try extra.putAll(pairs) })
        }
        if context.wants("bulk_insert") {
            Measurement(
                name: "bulk_insert_100k_objects_5_fields", value: Double(count) / ours, unit: "objects/s",
                baseline: "raw LMDB puts of the same keys and record sizes, one durable txn",
                baselineValue: Double(pairs.count) / baseline
            ).print()
            try bulkInsertFloor(replica, pairs: pairs, baseline: baseline)
            try bulkInsertModels(pairs: pairs, baseline: baseline)
            var sqlite = Double.infinity
            for attempt in 1...3 {
                let database = try SQLiteBaseline.items(context.path("sqlite-bulk-\(attempt).db"))
                sqlite = min(sqlite, try time { try SQLiteBaseline.insertItems(count, into: database) })
            }
            Measurement(
                name: "bulk_insert_100k_objects_5_fields_vs_sqlite", value: Double(count) / ours, unit: "objects/s",
                baseline: "SQLite (WAL, synchronous=FULL) inserts of the same rows, one transaction (objects/s)",
                baselineValue: Double(count) / sqlite
            ).print()
            try bulkInsertMemory(objects, pairs: pairs)
        }
    }

    /// The bulk insert's objects as an app holds them: model values of a `Codable` type, created one by one and all
    /// at once (``Transaction/create(contentsOf:)``), against the same raw puts.
    func bulkInsertModels(pairs: [([UInt8], [UInt8])], baseline: Double) throws {
        let models = (0..<context.objects).map(BenchItem.init)
        var oneByOne = Double.infinity
        var batch = Double.infinity
        for attempt in 1...3 {
            let single = try open("bulk-models-\(attempt)")
            oneByOne = min(
                oneByOne, try time { try single.write { txn in for model in models { try txn.create(model) } } })
            single.close()
            let batched = try open("bulk-models-batch-\(attempt)")
            batch = min(batch, try time { try batched.write { txn in _ = try txn.create(contentsOf: models) } })
            let stored = try batched.read { try $0.count("Item") }
            precondition(stored == models.count, "the batched insert stored \(stored) of \(models.count) objects")
            batched.close()
        }
        let count = Double(models.count)
        Measurement(
            name: "bulk_insert_100k_models_5_fields", value: count / oneByOne, unit: "objects/s",
            baseline: "raw LMDB puts of the same keys and record sizes, one durable txn",
            baselineValue: Double(pairs.count) / baseline
        ).print()
        Measurement(
            name: "bulk_insert_100k_models_5_fields_contents_of", value: count / batch, unit: "objects/s",
            baseline: "raw LMDB puts of the same keys and record sizes, one durable txn",
            baselineValue: Double(pairs.count) / baseline
        ).print()
    }

    /// The heap a bulk insert holds at its peak, per object, beside raw LMDB's puts of the same records and SQLite's
    /// inserts of the same rows (each in one transaction, in runs of their own, untimed).
    func bulkInsertMemory(_ objects: [[String: Value]], pairs: [([UInt8], [UInt8])]) throws {
        let count = Double(objects.count)
        let memoryReplica = try open("bulk-memory")
        let ours = try TransientMemory.peakGrowth {
            try memoryReplica.write { txn in for values in objects { try txn.create("Item", values) } }
        }
        memoryReplica.close()
        let raw = try RawLMDB(path: context.path("raw-bulk-memory"))
        let rawPeak = try TransientMemory.peakGrowth { try raw.putAll(pairs) }
        let database = try SQLiteBaseline.items(context.path("sqlite-bulk-memory.db"))
        let sqlitePeak = try TransientMemory.peakGrowth {
            try SQLiteBaseline.insertItems(objects.count, into: database)
        }
        Measurement(
            name: "bulk_insert_transient_bytes_per_object", value: Double(ours) / count, unit: "bytes",
            baseline: "raw LMDB puts of the same records: peak heap growth per object",
            baselineValue: Double(rawPeak) / count, higherIsBetter: false
        ).print()
        Measurement(
            name: "bulk_insert_transient_bytes_per_object_vs_sqlite", value: Double(ours) / count, unit: "bytes",
            baseline: "SQLite (WAL) inserts of the same rows: peak heap growth per object",
            baselineValue: Double(sqlitePeak) / count, higherIsBetter: false
        ).print()
    }

    /// What any design that stores the objects and a zstd-compressed changeset of them must spend: the raw puts of the
    /// records, the compression of the transaction's encoded changeset (at the log's level), and a put of that frame,
    /// in one durable transaction. Its ratio to the raw puts is the most a bulk insert can reach while it logs its
    /// changeset; ours against it is the share of the time our own work (values, instructions, merge, encoding) takes.
    func bulkInsertFloor(_ replica: Replica, pairs: [([UInt8], [UInt8])], baseline: Double) throws {
        var largest: [UInt8] = []
        try replica.forEachChangeset { _, changeset in
            let encoded = ChangesetCodec.encode(changeset)
            if encoded.count > largest.count { largest = encoded }
            return true
        }
        let codec = ZstdCodec(level: 3)
        // The records and the log's frame, built before the clock starts (as the raw side's records are); the
        // frame is compressed again inside the timed part.
        let records = pairs + [(Array("log".utf8), try codec.compress(largest))]
        var floor = Double.infinity
        for attempt in 1...3 {
            let raw = try RawLMDB(path: context.path("raw-floor-\(attempt)"))
            floor = min(
                floor,
                try time {
                    _ = try codec.compress(largest)
                    try raw.putAll(records)
                })
        }
        let count = Double(pairs.count)
        Measurement(
            name: "bulk_insert_floor_raw_puts_and_zstd_changeset", value: count / floor, unit: "objects/s",
            baseline: "raw LMDB puts of the same keys and record sizes, one durable txn",
            baselineValue: count / baseline
        ).print()
    }

    func primaryKeyReads(_ replica: Replica, _ raw: RawLMDB) throws {
        var generator = SplitMix64(seed: 11)
        let count = context.reads
        let indexes = (0..<count).map { _ in Int(generator.next() % UInt64(context.objects)) }
        let keys = try replica._recordSizes(type: "Item").map(\.0)
        let rawKeys = indexes.map { keys[$0] }
        var found = 0
        var bytes = 0
        // Alternate blocks, so that a change in the machine's speed during the run hits both sides alike.
        var ours = 0.0
        var models = 0.0
        var baseline = 0.0
        var modelsFound = 0
        let blocks = 10
        let perBlock = (count + blocks - 1) / blocks
        for start in stride(from: 0, to: count, by: perBlock) {
            let block = start..<min(count, start + perBlock)
            ours += try time {
                try replica.read { snapshot in
                    // Each read uses a property of the object, as an app would.
                    for index in indexes[block] {
                        if case .string = try snapshot.object("Item", primaryKey: .int(Int64(index)))?["name"] {
                            found += 1
                        }
                    }
                }
            }
            models += try time {
                try replica.read { snapshot in
                    for index in indexes[block] where try snapshot.object(BenchItem.self, primaryKey: index) != nil {
                        modelsFound += 1
                    }
                }
            }
            let rawBlock = Array(rawKeys[block])
            baseline += try time { bytes += try raw.getAll(rawBlock) }
        }
        precondition(found == count, "primary-key reads found \(found) of \(count)")
        precondition(modelsFound == count, "primary-key reads of models found \(modelsFound) of \(count)")
        Measurement(
            name: "primary_key_read_models", value: Double(count) / models, unit: "reads/s",
            baseline: "raw mdb_get of the same keys, copying the value",
            baselineValue: Double(count) / baseline
        ).print()
        precondition(bytes > 0)
        // SQLite: the same rows by primary key, each read's name column read into a String, in one transaction.
        let database = try SQLiteBaseline.items(context.path("sqlite-reads.db"))
        try SQLiteBaseline.insertItems(context.objects, into: database)
        let select = try SQLiteBaseline.Statement("SELECT name FROM Item WHERE id = ?", in: database)
        var sqliteFound = 0
        let sqlite = try time {
            try database.transaction {
                for index in indexes {
                    try select.run([index]) { row in if case .text = row[0] { sqliteFound += 1 } }
                }
            }
        }
        precondition(sqliteFound == count, "SQLite primary-key reads found \(sqliteFound) of \(count)")
        Measurement(
            name: "primary_key_read", value: Double(count) / ours, unit: "reads/s",
            baseline: "raw mdb_get of the same keys in one read txn, value copied",
            baselineValue: Double(count) / baseline
        ).print()
        Measurement(
            name: "primary_key_read_vs_sqlite", value: Double(count) / ours, unit: "reads/s",
            baseline: "SQLite (WAL) SELECT of the same rows by primary key, one transaction (reads/s)",
            baselineValue: Double(count) / sqlite
        ).print()
    }

    func replay(_ replica: Replica) throws {
        // Give the log some updates to replay too: each one changes both fields it names (even objects are active).
        try replica.write { txn in
            for index in stride(from: 0, to: context.objects, by: 10) {
                try txn.update("Item", primaryKey: .int(Int64(index)), ["count": .int(-1), "active": .bool(false)])
            }
        }
        let statistics = try replica.inspection.logStatistics()
        let instructions = Double(statistics.instructions)
        let digest = try replica.inspection.recordsDigest()
        // Best of three on each side: the time of one large durable commit swings with the disk.
        var seconds = Double.infinity
        for _ in 1...3 { seconds = min(seconds, try time { try replica.rebuildViews() }) }
        let rebuilt = try replica.inspection.recordsDigest()
        precondition(rebuilt == digest, "rebuilding the views changed them")
        let pairs = try rawPairs(replica)
        var baseline = Double.infinity
        for attempt in 1...3 {
            let raw = try RawLMDB(path: context.path("raw-replay-\(attempt)"))
            baseline = min(baseline, try time { try raw.putAll(pairs) })
        }
        // The ratio is of times: the raw side puts the records the replay ends with; the replay applies every
        // instruction of the log to get them (more instructions than records).
        Measurement(
            name: "replay_rebuild_views", value: instructions / seconds, unit: "instructions/s",
            baseline: "raw LMDB puts of the \(pairs.count) rebuilt records in one durable txn, per log instruction",
            baselineValue: instructions / baseline
        ).print()
        // Verify replays into scratch views that are never synced, and compares: against unsynced raw puts.
        var report: VerificationReport?
        var verify = Double.infinity
        for _ in 1...3 { verify = min(verify, try time { report = try replica.verify() }) }
        precondition(
            report?.passed == true && report?.objectsCompared == pairs.count, "verify: \(String(describing: report))")
        var unsynced = Double.infinity
        for attempt in 1...3 {
            let raw = try RawLMDB(path: context.path("raw-verify-\(attempt)"), synced: false)
            unsynced = min(unsynced, try time { try raw.putAll(pairs) })
        }
        Measurement(
            name: "replay_verify", value: instructions / verify, unit: "instructions/s",
            baseline: "raw LMDB puts of the \(pairs.count) rebuilt records in one unsynced txn, per log instruction",
            baselineValue: instructions / unsynced
        ).print()
    }

    func logSize(_ replica: Replica) throws {
        let statistics = try replica.inspection.logStatistics()
        var encoded: [UInt8] = []
        try replica.forEachChangeset { _, changeset in
            encoded.append(contentsOf: ChangesetCodec.encode(changeset))
            return true
        }
        let zstd = try ZstdCodec(level: 3).compress(encoded)
        let objects = Double(context.objects)
        Measurement(
            name: "log_bytes_per_object", value: Double(statistics.storedBytes) / objects, unit: "bytes",
            baseline: "raw zstd (level 3) of the encoded changesets, per object",
            baselineValue: Double(zstd.count) / objects, higherIsBetter: false
        ).print()
        Measurement(
            name: "log_compression_ratio", value: statistics.compressionRatio, unit: "uncompressed/stored",
            baseline: "raw zstd (level 3) of the same bytes, as one frame",
            baselineValue: Double(encoded.count) / Double(zstd.count)
        ).print()
    }

    func singleCommits() throws {
        let replica = try open("single")
        try replica.write { txn in for index in 0..<100 { try txn.create("Item", Self.values(index)) } }
        let raw = try RawLMDB(path: context.path("raw-single"))
        let value = [UInt8](repeating: 7, count: 90)
        // Alternate blocks, so a change in the disk's speed during the run hits both sides alike.
        var ours = 0.0
        var baseline = 0.0
        let blocks = 10
        let perBlock = max(1, context.commits / blocks)
        for block in 0..<blocks {
            ours += try time {
                for index in 0..<perBlock {
                    let key = Int64(block * perBlock + index) % 100
                    // A count no object holds yet: every write changes its object, so every one commits (an
                    // unchanged value writes nothing, and a transaction that writes nothing does not commit).
                    try replica.write { txn in
                        try txn.update(
                            "Item", primaryKey: .int(key), ["count": .int(Int64(1_000_000 + block * perBlock + index))])
                    }
                }
            }
            baseline += try time {
                for index in 0..<perBlock {
                    var txn: OpaquePointer?
                    try check(mdb_txn_begin_shim(raw, &txn), "mdb_txn_begin")
                    try raw.put(txn, Array("key-\(index % 100)".utf8), value)
                    try check(mdb_txn_commit_shim(txn), "mdb_txn_commit")
                }
            }
        }
        let total = Double(blocks * perBlock)
        Measurement(
            name: "single_object_durable_commit", value: total / ours, unit: "commits/s",
            baseline: "raw LMDB single-put durable commits", baselineValue: total / baseline
        ).print()
        // SQLite: the same updates, each its own durable transaction.
        let database = try SQLiteBaseline.items(context.path("sqlite-single.db"))
        try SQLiteBaseline.insertItems(100, into: database)
        let update = try SQLiteBaseline.Statement("UPDATE Item SET count = ? WHERE id = ?", in: database)
        let sqlite = try time {
            for index in 0..<(blocks * perBlock) { try update.run([2_000_000 + index, index % 100]) }
        }
        Measurement(
            name: "single_object_durable_commit_vs_sqlite", value: total / ours, unit: "commits/s",
            baseline: "SQLite (WAL, synchronous=FULL) single-row UPDATE commits (commits/s)",
            baselineValue: total / sqlite
        ).print()
    }
}
