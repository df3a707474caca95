public import TributaryModel

/// Where the merge engine reads object records that it has not loaded yet.
public protocol RecordSource {
    /// The stored record of an object, or `nil`.
    func loadRecord(type: String, primaryKey: PrimaryKey) throws -> ObjectRecord?
    /// The primary keys of every stored record of a type, in key order.
    func loadPrimaryKeys(ofType type: String) throws -> [PrimaryKey]
}

/// A type name and primary key: which object a record belongs to.
public struct RecordKey: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var type: String
    public var primaryKey: PrimaryKey

    public init(type: String, primaryKey: PrimaryKey) {
        self.type = type
        self.primaryKey = primaryKey
    }

    public static func < (lhs: RecordKey, rhs: RecordKey) -> Bool {
        lhs.type != rhs.type ? lhs.type < rhs.type : lhs.primaryKey < rhs.primaryKey
    }

    public var description: String { "\(type)[\(primaryKey)]" }
}

/// The records and schema a transaction (or an integration) works on: records are loaded from a
/// ``RecordSource`` on first use and kept, changed, in memory until the caller writes them back.
public struct WorkingSet<Source: RecordSource> {
    public let source: Source
    /// The schema, as changed so far.
    public var schema: Schema
    /// Whether the schema changed.
    public private(set) var schemaChanged = false
    private var loaded: [RecordKey: ObjectRecord?] = [:]
    /// The records as they were before this working set changed them, for the changed keys only.
    public private(set) var originals: [RecordKey: ObjectRecord?] = [:]

    public init(source: Source, schema: Schema) {
        self.source = source
        self.schema = schema
    }

    /// The current record of an object.
    public mutating func record(_ key: RecordKey) throws -> ObjectRecord? {
        if let cached = loaded[key] { return cached }
        let record = try source.loadRecord(type: key.type, primaryKey: key.primaryKey)
        loaded[key] = .some(record)
        return record
    }

    /// Replaces the record of an object (`nil` removes it).
    public mutating func setRecord(_ record: ObjectRecord?, for key: RecordKey) throws {
        if originals[key] == nil {
            originals[key] = .some(try self.record(key))
        }
        loaded[key] = .some(record)
    }

    /// Every key of a type: stored ones and ones this working set added.
    public mutating func keys(ofType type: String) throws -> [RecordKey] {
        var keys = Set(try source.loadPrimaryKeys(ofType: type).map { RecordKey(type: type, primaryKey: $0) })
        for (key, record) in loaded where key.type == type {
            if record == nil { keys.remove(key) } else { keys.insert(key) }
        }
        return keys.sorted()
    }

    /// Replaces the schema.
    public mutating func setSchema(_ schema: Schema) {
        if schema != self.schema { schemaChanged = true }
        self.schema = schema
    }

    /// The changed records, in key order: each with its record before and after.
    public var changes: [(key: RecordKey, before: ObjectRecord?, after: ObjectRecord?)] {
        originals.keys.sorted().map { key in (key, originals[key] ?? nil, loaded[key] ?? nil) }
    }

    /// Whether anything changed.
    public var hasChanges: Bool { !originals.isEmpty || schemaChanged }
}
