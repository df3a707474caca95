public import TributaryMerge
public import TributaryModel
public import TributaryStorage

/// The materialized views of a replica: object records, secondary indexes, and the schema and version vector.
///
/// Everything here is derived from the changeset log and can be dropped and rebuilt by replaying it; the rebuilt
/// views equal the live ones byte for byte.
public struct ViewStore: Sendable {
    /// Names of the LMDB databases the views use.
    public static let databaseNames = ["objects", "indexes", "viewmeta"]

    public let objects: Database
    public let indexes: Database
    public let meta: Database
    static let schemaKey = Array("schema".utf8)
    package static let versionVectorKey = Array("versionVector".utf8)

    /// Opens the views' databases in `environment`.
    public init(environment: Environment) throws {
        let databases = try environment.openDatabases(Self.databaseNames)
        objects = databases[0]
        indexes = databases[1]
        meta = databases[2]
    }

    // MARK: Keys

    /// The key of an object record: the type name, a zero byte, and the encoded primary key.
    public static func objectKey(type: String, primaryKey: PrimaryKey) -> [UInt8] {
        // One allocation: a key of 17 bytes or less (all but string keys) fits what is reserved.
        var bytes = typePrefix(type, reserving: 17)
        KeyEncoding.append(primaryKey, to: &bytes)
        return bytes
    }

    /// The record key an ``objectKey(type:primaryKey:)`` encodes, or `nil` for bytes that are not one.
    public static func recordKey(fromObjectKey key: some Collection<UInt8>) -> RecordKey? {
        guard let zero = key.firstIndex(of: 0),
            let primaryKey = KeyEncoding.primaryKey(from: key[key.index(after: zero)...])
        else { return nil }
        return RecordKey(type: String(decoding: key[..<zero], as: UTF8.self), primaryKey: primaryKey)
    }

    /// The prefix every record key of `type` starts with, with room for `extra` more bytes.
    public static func typePrefix(_ type: String, reserving extra: Int = 0) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(type.utf8.count + 1 + extra)
        bytes.append(contentsOf: type.utf8)
        bytes.append(0)
        return bytes
    }

    /// The smallest key after every key that starts with `prefix`.
    public static func prefixEnd(_ prefix: [UInt8]) -> [UInt8] {
        var end = prefix
        end[end.count - 1] &+= 1  // prefixes end in a 0 separator, so this never wraps
        return end
    }

    /// The prefix of the index keys of `type.property`.
    public static func indexPrefix(type: String, property: String) -> [UInt8] {
        // Room for the value and the primary key that follow in an index key, so that building one allocates once.
        var bytes = typePrefix(type, reserving: property.utf8.count + 1 + 40)
        bytes.append(contentsOf: property.utf8)
        bytes.append(0)
        return bytes
    }

    // MARK: Reading

    /// The record of an object, or `nil`.
    public func record(type: String, primaryKey: PrimaryKey, in transaction: ReadTransaction) throws -> ObjectRecord? {
        try transaction.withValue(objects, key: Self.objectKey(type: type, primaryKey: primaryKey)) {
            value -> ObjectRecord? in
            guard let value else { return nil }
            do throws(ChangesetDecodingError) {
                return try ObjectRecord(decoding: Array(value))
            } catch {
                throw error.inRecord(of: RecordKey(type: type, primaryKey: primaryKey))
            }
        }
    }

    /// Whether the object of `type` with `primaryKey` exists (a record that is not a tombstone), its record checked
    /// as the full decoder checks it.
    public func exists(type: String, primaryKey: PrimaryKey, in transaction: ReadTransaction) throws -> Bool {
        try transaction.withValue(objects, key: Self.objectKey(type: type, primaryKey: primaryKey)) { value in
            guard let value else { return false }
            do throws(ChangesetDecodingError) {
                return try ObjectRecord.exists(inStored: value)
            } catch {
                throw error.inRecord(of: RecordKey(type: type, primaryKey: primaryKey))
            }
        }
    }

    /// Visits the records of a type in primary key order until `body` returns `false`.
    public func scanRecords(
        ofType type: String, in transaction: ReadTransaction,
        _ body: (PrimaryKey, ObjectRecord) throws -> Bool
    ) throws {
        let prefix = Self.typePrefix(type)
        var failure: (any Error)?
        try transaction.scan(objects, from: prefix, to: Self.prefixEnd(prefix)) { key, value in
            guard let primaryKey = KeyEncoding.primaryKey(from: key[prefix.count...]) else { return true }
            do {
                let record: ObjectRecord
                do throws(ChangesetDecodingError) {
                    record = try ObjectRecord(decoding: Array(value))
                } catch {
                    throw error.inRecord(of: RecordKey(type: type, primaryKey: primaryKey))
                }
                return try body(primaryKey, record)
            } catch {
                failure = error
                return false
            }
        }
        if let failure { throw failure }
    }

    /// The primary keys of every record of a type (tombstones included).
    public func primaryKeys(ofType type: String, in transaction: ReadTransaction) throws -> [PrimaryKey] {
        let prefix = Self.typePrefix(type)
        var keys: [PrimaryKey] = []
        try transaction.scan(objects, from: prefix, to: Self.prefixEnd(prefix)) { key, _ in
            if let primaryKey = KeyEncoding.primaryKey(from: key[prefix.count...]) { keys.append(primaryKey) }
            return true
        }
        return keys
    }

    /// The schema the views were built with, or `nil` for a replica that has none yet.
    public func schema(in transaction: ReadTransaction) throws -> Schema? {
        guard let bytes = try transaction.get(meta, key: Self.schemaKey) else { return nil }
        var reader = BinaryReader(bytes, subject: "stored schema")
        return try reader.schema()
    }

    /// The version vector as stored, and the local sequence of the log entry it was stored with: it is whole through
    /// that entry. A commit whose only change to the vector is the dot of the entry it appends last does not store it
    /// (the replica's own commits, nearly always), so that what the replica holds is this vector advanced by the dot
    /// of the log's last entry, when that entry comes after `through`: the replica's `versionVector(in:)` reads both.
    /// `through` is `nil` for a vector stored by replica format 3, which stored it with every commit.
    public func storedVersionVector(in transaction: ReadTransaction) throws -> (vector: VersionVector, through: UInt64?)
    {
        // None stored: nothing integrated, whole through no entry.
        guard let bytes = try transaction.get(meta, key: Self.versionVectorKey) else { return (VersionVector(), 0) }
        let subject = "stored version vector"
        var reader = BinaryReader(bytes, subject: subject)
        var through: UInt64?
        if bytes.starts(with: Self.wholeThroughMark) {
            reader.offset = Self.wholeThroughMark.count
            through = try reader.fixed64()
        }
        let vector = try reader.versionVector()
        guard reader.isAtEnd else {
            throw ChangesetDecodingError(
                .trailingData, "the \(subject) has \(reader.remaining) bytes after its end", offset: reader.offset)
        }
        return (vector, through)
    }

    /// What a vector stored with its entry starts with: a count no earlier build reads (it is over their limit of
    /// entries), so that a process of an earlier build that still has the replica open fails to read the vector instead
    /// of reading it without the entries after it, and giving a new changeset a dot already used.
    static let wholeThroughMark: [UInt8] = {
        var writer = BinaryWriter()
        writer.varint(UInt64.max)
        return writer.bytes
    }()

    /// A version vector as the replica stores it: a count, then each origin and its sequence.
    public static func encode(_ vector: VersionVector) -> [UInt8] {
        var writer = BinaryWriter()
        writer.versionVector(vector)
        return writer.bytes
    }

    /// A version vector stored by ``encode(_:)``.
    ///
    /// - Throws: ``ChangesetDecodingError`` naming `subject` when the bytes are damaged.
    public static func decodeVector(_ bytes: [UInt8], subject: String) throws -> VersionVector {
        var reader = BinaryReader(bytes, subject: subject)
        return try reader.versionVector()
    }

    /// The primary keys whose indexed `property` has an encoded value in `lower ..< upper` (encodings from
    /// ``KeyEncoding/appendIndexValue(_:to:)``; `nil` bounds are open), each with that encoded value, in index order
    /// (value, then primary key), or in reverse order with `reverse`.
    public func indexScan(
        type: String, property: String, lower: [UInt8]?, upper: [UInt8]?, reverse: Bool = false,
        in transaction: ReadTransaction,
        _ body: (_ primaryKey: PrimaryKey, _ value: UnsafeRawBufferPointer) throws -> Bool
    ) throws {
        let prefix = Self.indexPrefix(type: type, property: property)
        let start = prefix + (lower ?? [])
        let end = upper.map { prefix + $0 } ?? Self.prefixEnd(prefix)
        var failure: (any Error)?
        try transaction.scan(indexes, from: start, to: end, reverse: reverse) { key, _ in
            // Read in place: an index scan reads every entry of its range.
            let rest = key[prefix.count...]
            guard let length = KeyEncoding.indexValueLength(rest),
                let primaryKey = KeyEncoding.primaryKey(from: rest.dropFirst(length))
            else { return true }
            do { return try body(primaryKey, UnsafeRawBufferPointer(rebasing: rest.prefix(length))) } catch {
                failure = error
                return false
            }
        }
        if let failure { throw failure }
    }

    // MARK: Writing

    /// Writes changed records and updates the indexes of their indexed properties.
    ///
    /// - Parameter updatingIndexes: `false` writes the records alone, for a caller that rebuilds the indexes after
    ///   (``rebuildIndexes(ofType:schema:in:)``): a rebuild of the views, whose schema may still change.
    public func write(
        _ changes: [RecordChange], schema: Schema,
        updatingIndexes: Bool = true, in transaction: WriteTransaction
    ) throws {
        // Changes come sorted by type: look each type and its indexed properties up once.
        var current: (name: String, type: ObjectSchema?, indexed: [IndexedProperty])?
        // A record whose key sorts after every stored one is appended: LMDB then skips the search of the tree and
        // fills its pages. Changes come in key order, so new objects with growing keys (a rebuild, an import) all
        // are. `last` is never below the greatest stored key.
        var last = try transaction.lastKey(objects)
        // Each change is read where it is: iterating would copy it out, retaining and releasing both records.
        try changes.withUnsafeBufferPointer { changes in
            for change in changes.indices {
                let recordKey = changes[change].key
                let key = Self.objectKey(type: recordKey.type, primaryKey: recordKey.primaryKey)
                if let encoded = changes[change].encodedAfter() {
                    if last.map({ $0.lexicographicallyPrecedes(key) }) ?? true {
                        try transaction.append(objects, key: key, value: encoded)
                        last = key
                    } else {
                        try transaction.put(objects, key: key, value: encoded)
                    }
                } else {
                    try transaction.delete(objects, key: key)
                }
                guard updatingIndexes else { continue }
                if current?.name != recordKey.type {
                    let type = schema[type: recordKey.type]
                    let indexed = type.map { Self.indexedProperties(of: $0) } ?? []
                    current = (recordKey.type, type, indexed)
                }
                guard let type = current?.type, let indexed = current?.indexed, !indexed.isEmpty else { continue }
                let old = Self.indexKeys(
                    changes[change].before, key: recordKey, type: type, properties: indexed, schema: schema)
                let new = Self.indexKeys(
                    changes[change].after, key: recordKey, type: type, properties: indexed, schema: schema)
                // In key order, not the sets' (which Swift seeds per process): the same writes then lay out the
                // same pages, so a damaged file found once can be made again.
                for stale in old.subtracting(new).sorted(by: { $0.lexicographicallyPrecedes($1) }) {
                    try transaction.delete(indexes, key: stale)
                }
                for fresh in new.subtracting(old).sorted(by: { $0.lexicographicallyPrecedes($1) }) {
                    try putIndexEntry(fresh, in: transaction)
                }
            }
        }
    }

    /// An indexed property that has index entries, with its values' budget in its index keys.
    public struct IndexedProperty: Hashable, Sendable {
        /// The property.
        public var property: Property
        /// How many bytes its string, data and link values take at most in an index key, between their tag and
        /// terminator (``KeyEncoding/appendIndexValue(_:budget:to:)``).
        public var valueBudget: Int
    }

    /// The budget of `property`'s values in its index keys, or `nil` when it has no index entries: it is not
    /// indexed, is a list, is the primary key (the record key answers for it), or its index keys would have no room
    /// for its values. String, data and link values keep what the budget leaves room for
    /// (``KeyEncoding/indexValueBudget(type:property:primaryKey:)``), so that every key fits LMDB's limit. Writes,
    /// rebuilds, `verify` and the query planner all decide by this function.
    public static func indexValueBudget(of property: Property, in type: ObjectSchema) -> Int? {
        guard property.isIndexed, !property.isCollection, property.name != type.primaryKey else { return nil }
        var keyType: ScalarType?
        if let key = type.primaryKeyProperty, case .scalar(let scalar) = key.kind { keyType = scalar }
        return KeyEncoding.indexValueBudget(type: type.name, property: property.name, primaryKey: keyType)
    }

    /// The properties of `type` that have index entries (``indexValueBudget(of:in:)``), in declaration order.
    public static func indexedProperties(of type: ObjectSchema) -> [IndexedProperty] {
        type.properties.compactMap { property in
            indexValueBudget(of: property, in: type).map {
                IndexedProperty(property: property, valueBudget: $0)
            }
        }
    }

    /// The index keys of a record's values of `properties` (from ``indexedProperties(of:)``); none for a
    /// missing record or a tombstone.
    public static func indexKeys(
        _ record: ObjectRecord?, key: RecordKey, type: ObjectSchema, properties: [IndexedProperty], schema: Schema
    ) -> Set<[UInt8]> {
        guard let record, record.exists else { return [] }
        var keys = Set<[UInt8]>()
        for indexed in properties {
            let property = indexed.property
            let value = ObjectRecord.value(record.fields[property.name], of: property, in: schema)
            var bytes = indexPrefix(type: key.type, property: property.name)
            guard KeyEncoding.appendIndexValue(value, budget: indexed.valueBudget, to: &bytes) else { continue }
            KeyEncoding.append(key.primaryKey, to: &bytes)
            keys.insert(bytes)
        }
        return keys
    }

    /// Stores an index entry, after checking that its key fits LMDB's limit: the budgets make every key fit, and
    /// this says so plainly if one ever does not, where LMDB would fail with `MDB_BAD_VALSIZE`.
    ///
    /// - Throws: ``IndexKeyError`` for a key over ``KeyEncoding/maximumKeyBytes``; a storage error.
    func putIndexEntry(_ key: [UInt8], in transaction: WriteTransaction) throws {
        guard key.count <= KeyEncoding.maximumKeyBytes else { throw IndexKeyError(key: key) }
        try transaction.put(indexes, key: key, value: [])
    }

    /// Rebuilds the index entries of every indexed property of `typeName` from its records.
    public func rebuildIndexes(ofType typeName: String, schema: Schema, in transaction: WriteTransaction) throws {
        let prefix = Self.typePrefix(typeName)
        var stale: [[UInt8]] = []
        try transaction.scan(indexes, from: prefix, to: Self.prefixEnd(prefix)) { key, _ in
            stale.append(Array(key))
            return true
        }
        for key in stale { try transaction.delete(indexes, key: key) }
        guard let type = schema[type: typeName] else { return }
        let indexed = Self.indexedProperties(of: type)
        if indexed.isEmpty { return }
        var fresh: [[UInt8]] = []
        try scanRecords(ofType: typeName, in: transaction) { primaryKey, record in
            let key = RecordKey(type: typeName, primaryKey: primaryKey)
            fresh.append(contentsOf: Self.indexKeys(record, key: key, type: type, properties: indexed, schema: schema))
            return true
        }
        for key in fresh { try putIndexEntry(key, in: transaction) }
    }

    /// Stores the schema.
    public func setSchema(_ schema: Schema, in transaction: WriteTransaction) throws {
        var writer = BinaryWriter()
        writer.schema(schema)
        try transaction.put(meta, key: Self.schemaKey, value: writer.bytes)
    }

    /// Stores the version vector, whole through the log entry at `localSequence` (see ``storedVersionVector(in:)``).
    public func setVersionVector(
        _ vector: VersionVector, through localSequence: UInt64, in transaction: WriteTransaction
    ) throws {
        var writer = BinaryWriter()
        writer.raw(Self.wholeThroughMark)
        writer.fixed64(localSequence)
        writer.versionVector(vector)
        try transaction.put(meta, key: Self.versionVectorKey, value: writer.bytes)
    }

    /// Removes every view: records, indexes, schema and version vector.
    public func removeAll(in transaction: WriteTransaction) throws {
        try transaction.removeAll(objects)
        try transaction.removeAll(indexes)
        try transaction.removeAll(meta)
    }
}

/// An index key longer than LMDB allows (``KeyEncoding/maximumKeyBytes``), found before it is stored. The budgets of
/// ``KeyEncoding/indexValueBudget(type:property:primaryKey:)`` make every index key fit: this error means a bug in
/// them, reported instead of LMDB's `MDB_BAD_VALSIZE`.
public struct IndexKeyError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The type whose index the key belongs to.
    public var type: String
    /// The indexed property.
    public var property: String
    /// The key's length in bytes.
    public var keyBytes: Int

    init(key: [UInt8]) {
        let parts = key.split(separator: 0, maxSplits: 2, omittingEmptySubsequences: false)
        type = parts.first.map { String(decoding: $0, as: UTF8.self) } ?? "?"
        property = parts.count > 1 ? String(decoding: parts[1], as: UTF8.self) : "?"
        keyBytes = key.count
    }

    public var description: String {
        "an index key of \(type).\(property) is \(keyBytes) bytes, over LMDB's limit of \(KeyEncoding.maximumKeyBytes) "
            + "(a bug in Tributary's index key budgets: please report it); making \(property) unindexed, or giving "
            + "\(type) or \(property) a shorter name, avoids it"
    }
}
