import TributaryMerge
public import TributaryModel
import TributaryStorage
import TributaryViews

/// Reads objects: implemented by ``Snapshot`` (a consistent view of one commit) and ``Transaction`` (which also
/// sees its own uncommitted writes). Do not declare new conformances.
public protocol ObjectReading {
    /// The schema the reads use.
    var schema: Schema { get }
    /// The object of `type` with `primaryKey`, or `nil`.
    func object(_ type: String, primaryKey: PrimaryKey) throws -> DynamicObject?
    /// Every object of `type`, in primary key order.
    func objects(_ type: String) throws -> [DynamicObject]
    /// The number of objects of `type`.
    func count(_ type: String) throws -> Int
    /// The objects of `type` that match a query in the Realm Query Language, after its SORT, DISTINCT and LIMIT.
    func objects(_ type: String, where query: String, arguments: [Value]) throws -> [DynamicObject]
}

/// Turns stored records into values: applies the merge rules' read side (counters, list order, defaults) and hides
/// links to objects that do not exist (docs/MergeSemantics.md, rule 7).
///
/// A class: reads pass it around, and copying it would copy the whole schema.
final class Materializer {
    let schema: Schema
    let exists: (String, PrimaryKey) throws -> Bool

    init(schema: Schema, exists: @escaping (String, PrimaryKey) throws -> Bool) {
        self.schema = schema
        self.exists = exists
    }

    func object(type: ObjectSchema, primaryKey: PrimaryKey, record: ObjectRecord) throws -> DynamicObject {
        try object(type: type, primaryKey: primaryKey, values: record.values(of: type, in: schema))
    }

    /// The object with these values, by position in `type.properties` (as
    /// ``ObjectRecord/positionalValues(decoding:of:in:wanted:limits:)`` reads them): links resolved, primary key
    /// added.
    func object(type: ObjectSchema, primaryKey: PrimaryKey, positional values: consuming [Value]) throws
        -> DynamicObject
    {
        try object(layout: PositionalLayout(type), primaryKey: primaryKey, positional: values)
    }

    /// Which positions of a type's values a read fills in or resolves: worked out once for many objects, and passed
    /// by reference (a read passes it for every object, and copying the type's schema would retain all of it).
    final class PositionalLayout: Sendable {
        /// The primary key's position.
        let keyPosition: Int?
        /// The links and embedded objects (whose links to objects that do not exist are left out), by position.
        let objectProperties: [(position: Int, property: Property)]
        /// The type, as the objects read share it.
        let positionalType: DynamicObject.PositionalType

        /// The object with these values, whose links (if the type has any) are resolved already: primary key added.
        func object(primaryKey: PrimaryKey, positional values: consuming [Value]) -> DynamicObject {
            var values = values  // consumed: the only reference, so the change below copies nothing
            if let keyPosition, keyPosition < values.count { values[keyPosition] = primaryKey.value }
            return DynamicObject(schema: positionalType, primaryKey: primaryKey, positional: values)
        }

        init(_ type: ObjectSchema) {
            positionalType = DynamicObject.PositionalType(type)
            let keyPosition = type.primaryKey.flatMap { type.position(ofProperty: $0) }
            self.keyPosition = keyPosition
            objectProperties = type.properties.indices.compactMap { position in
                let property = type.properties[position]
                return position != keyPosition && property.holdsLinks ? (position, property) : nil
            }
        }
    }

    /// ``object(type:primaryKey:positional:)``, with the type's layout worked out already.
    func object(layout: PositionalLayout, primaryKey: PrimaryKey, positional values: consuming [Value]) throws
        -> DynamicObject
    {
        var values = values  // consumed: the only reference, so the changes below copy nothing
        for (position, property) in layout.objectProperties where position < values.count {
            values[position] = try resolveLinks(values[position], property)
        }
        return layout.object(primaryKey: primaryKey, positional: values)
    }

    /// The values by name of the properties at the positions `wanted` marks (all when `nil`): links resolved,
    /// primary key added.
    func fields(type: ObjectSchema, primaryKey: PrimaryKey, positional values: [Value], wanted: [Bool]? = nil) throws
        -> [String: Value]
    {
        var result: [String: Value] = Dictionary(minimumCapacity: type.properties.count)
        for position in type.properties.indices where wanted?[position] ?? true {
            result[type.properties[position].name] = try value(
                at: position, of: type, primaryKey: primaryKey, positional: values)
        }
        return result
    }

    /// The value of the property at `position` as a read gives it: the primary key for the key property, links to
    /// objects that do not exist left out (rule 7), else the stored value. Reads single fields by index: iterating the
    /// properties would copy each one.
    private func value(at position: Int, of type: ObjectSchema, primaryKey: PrimaryKey, positional values: [Value])
        throws
        -> Value
    {
        let properties = type.properties
        if properties[position].name == type.primaryKey { return primaryKey.value }
        if properties[position].holdsLinks {
            return try resolveLinks(values[position], properties[position])
        }
        return values[position]
    }

    /// The object with these materialized values: links resolved, primary key added.
    func object(type: ObjectSchema, primaryKey: PrimaryKey, values: consuming [String: Value]) throws -> DynamicObject {
        var values = values  // consumed: the only reference, so the changes below copy nothing
        for property in type.properties where property.holdsLinks && property.name != type.primaryKey {
            if let value = values[property.name] { values[property.name] = try resolveLinks(value, property) }
        }
        if let keyName = type.primaryKey { values[keyName] = primaryKey.value }
        return DynamicObject(type: type.name, primaryKey: primaryKey, values: values)
    }

    func resolveLinks(_ value: Value, _ property: Property) throws -> Value {
        if case .embedded(let typeName) = property.kind, schema[type: typeName]?.isEmbedded != true {
            // The type was removed while a concurrent changeset embedded it (rule 8): nothing shows while it is
            // absent, as links to a removed type show nothing.
            if property.isList { return .list([]) }
            if case .dictionary(let entries) = value { return .dictionary(entries.mapValues { _ in .null }) }
            return property.isDictionary ? value : .null
        }
        switch (property.kind, value) {
        case (.link(let target), .link(let key)):
            return try exists(target, key) ? value : .null
        case (.link(let target), .list(let elements)):
            return .list(
                try elements.filter { element in
                    guard case .link(let key) = element else { return true }
                    return try exists(target, key)
                })
        case (.link(let target), .dictionary(let entries)):
            // A key whose link's target does not exist reads as null: the key stays (rule 7).
            var resolved = entries
            for (key, entry) in entries {
                if case .link(let linked) = entry, try !exists(target, linked) { resolved[key] = .null }
            }
            return .dictionary(resolved)
        case (.embedded(let typeName), .embedded(var object)):
            guard let type = schema[type: typeName] else { return .null }
            for child in type.properties {
                guard let field = object.fields[child.name] else { continue }
                // Written before its type was removed and then defined again another way (rule 8): it does not show.
                if field != .null, child.problem(with: field) != nil {
                    object.fields[child.name] = nil
                    continue
                }
                object.fields[child.name] = try resolveLinks(field, child)
            }
            return .embedded(object)
        case (.embedded, .list(let elements)):
            var single = property
            single.isList = false
            return .list(try elements.map { try resolveLinks($0, single) })
        case (.embedded, .dictionary(let entries)):
            var single = property
            single.isDictionary = false
            return .dictionary(try entries.mapValues { try resolveLinks($0, single) })
        case (.scalar(.mixed), _):
            return try value.resolvingTypedLinks(exists)
        default:
            return value
        }
    }
}

/// A consistent, read-only view of a replica as of one commit.
///
/// Not `Sendable`, and valid only during the ``Replica/read(_:)-8c44g`` closure that passes it: it holds a storage
/// transaction. The objects it returns are values, free to keep and share.
public final class Snapshot: ObjectReading {
    let replica: Replica
    let storage: TributaryStorageReadTransaction
    private var isValid = true
    private var cachedSchema: Schema?
    /// Where the app's declared properties live, asked of the replica on the first read as a model: a snapshot reads
    /// one schema, and every read as a model needs them.
    var cachedModelNames: ModelNames?

    init(replica: Replica, storage: TributaryStorageReadTransaction) {
        self.replica = replica
        self.storage = storage
    }

    func invalidate() { isValid = false }

    func checkValid() {
        precondition(isValid, "a Snapshot was used after the read(_:) closure that passed it returned")
    }

    public var schema: Schema {
        checkValid()
        if let cachedSchema { return cachedSchema }
        let stored = (try? replica.views.schema(in: storage)) ?? nil
        // With the computed properties the app declared, which are not stored.
        let schema = stored.map(replica.withDeclaredLinkingObjects) ?? replica.schema
        cachedSchema = schema
        return schema
    }

    func record(_ type: String, _ primaryKey: PrimaryKey) throws -> ObjectRecord? {
        checkValid()
        return try replica.views.record(type: type, primaryKey: primaryKey, in: storage)
    }

    /// Built once per snapshot: every read materializes through it. A link's target is checked by its record's
    /// header alone.
    private(set) lazy var materializer = Materializer(schema: schema) { [unowned self] type, key in
        self.checkValid()
        return try self.replica.views.exists(type: type, primaryKey: key, in: self.storage)
    }

    /// What reading objects of one type needs, worked out once per snapshot and type.
    final class TypeReader {
        /// `type.name`, kept apart: comparing it would otherwise copy the whole `ObjectSchema` out of the class.
        let name: String
        let type: ObjectSchema
        /// Reads whole objects.
        let projector: RecordProjector
        /// What every record key of the type starts with.
        let keyPrefix: [UInt8]
        let layout: Materializer.PositionalLayout
        /// Reused by every read of one object: its key (the prefix, then the primary key). A snapshot is used from
        /// one thread at a time, and no access to it overlaps another: unchecked, so that a read by primary key pays
        /// for no run-time exclusivity check.
        @exclusivity(unchecked) private var key: [UInt8]

        /// The record key of the object with `primaryKey`, built in a buffer the reads share.
        func key(_ primaryKey: PrimaryKey) -> [UInt8] {
            key.removeLast(key.count - keyPrefix.count)
            KeyEncoding.append(primaryKey, to: &key)
            return key
        }

        init(type: ObjectSchema, schema: Schema) {
            self.name = type.name
            self.type = type
            projector = RecordProjector(type: type, schema: schema)
            keyPrefix = ViewStore.typePrefix(type.name)
            key = keyPrefix
            key.reserveCapacity(keyPrefix.count + 32)
            layout = Materializer.PositionalLayout(type)
        }
    }

    private var typeReaders: [String: TypeReader] = [:]
    /// The last type read: reads of one type in a row skip the table.
    private var lastTypeReader: TypeReader?

    /// The reader of `type`, built on first use.
    ///
    /// - Throws: ``TributaryError`` with `.unknownType`.
    func typeReader(_ type: String) throws -> TypeReader {
        if let last = lastTypeReader, last.name == type { return last }
        let reader: TypeReader
        if let known = typeReaders[type] {
            reader = known
        } else {
            reader = TypeReader(type: try schema.requireType(type), schema: schema)
            typeReaders[type] = reader
        }
        lastTypeReader = reader
        return reader
    }

    /// The stored values of the object of the reader's type with `primaryKey`, by position; `nil` when it does not
    /// exist.
    func storedValues(_ reader: TypeReader, _ primaryKey: PrimaryKey) throws -> [Value]? {
        checkValid()
        // Read before anything else uses the transaction.
        guard let bytes = try storage.valueInPlace(replica.views.objects, key: reader.key(primaryKey)) else {
            return nil
        }
        var values: [Value] = []
        do throws(ChangesetDecodingError) {
            return try reader.projector.project(bytes, into: &values) ? values : nil
        } catch {
            throw error.inRecord(of: RecordKey(type: reader.name, primaryKey: primaryKey))
        }
    }

    public func object(_ type: String, primaryKey: PrimaryKey) throws -> DynamicObject? {
        let reader = try typeReader(type)
        guard let values = try storedValues(reader, primaryKey) else { return nil }
        let layout = reader.layout
        // A type without links has nothing for the materializer to resolve.
        if layout.objectProperties.isEmpty { return layout.object(primaryKey: primaryKey, positional: values) }
        return try materializer.object(layout: layout, primaryKey: primaryKey, positional: values)
    }

    /// The values of an object written under definitions of its properties that lost to the property's definition
    /// (docs/MergeSemantics.md, rule 8): kept aside in the object, not shown, and shown again if a later definition
    /// of their shape comes. Empty for an object without any, and for one that does not exist.
    public func valuesAside(_ type: String, primaryKey: PrimaryKey) throws -> [ValueAside] {
        let objectType = try schema.requireType(type)
        guard let record = try record(type, primaryKey), record.exists else { return [] }
        return record.fields.sideFields.compactMap { side in
            guard var property = objectType[property: side.name] else { return nil }
            property.shape = side.shape
            property.defaultValue = nil
            return ValueAside(
                property: side.name, shape: side.shape,
                value: ObjectRecord.value(side.state, of: property, in: schema))
        }
    }

    public func objects(_ type: String) throws -> [DynamicObject] {
        let reader = try typeReader(type)
        let objectType = reader.type
        let projector = reader.projector
        let layout = reader.layout
        let materializer = self.materializer
        var result: [DynamicObject] = []
        try scanAll(objectType) { primaryKey, bytes in
            let read: [Value]?
            do throws(ChangesetDecodingError) {
                read = try projector.values(bytes)
            } catch {
                throw error.inRecord(of: RecordKey(type: objectType.name, primaryKey: primaryKey))
            }
            if let values = read {
                result.append(try materializer.object(layout: layout, primaryKey: primaryKey, positional: values))
            }
        }
        return result
    }

    /// Calls `body` with every stored record of `type`, in primary key order.
    func scanAll(_ type: ObjectSchema, _ body: (PrimaryKey, UnsafeRawBufferPointer) throws -> Void) throws {
        try scanStored(type) { key, bytes in
            if let primaryKey = KeyEncoding.primaryKey(from: key) { try body(primaryKey, bytes) }
        }
    }

    /// Calls `body` with every stored record of `type`, in primary key order, and its primary key as stored: for a
    /// scan that decodes the keys of the records it keeps only.
    func scanStored(
        _ type: ObjectSchema, _ body: (Slice<UnsafeRawBufferPointer>, UnsafeRawBufferPointer) throws -> Void
    ) throws {
        checkValid()
        let prefix = ViewStore.typePrefix(type.name)
        try storage.scan(replica.views.objects, from: prefix, to: ViewStore.prefixEnd(prefix)) { key, bytes in
            try body(key[prefix.count...], bytes)
            return true
        }
    }

    public func count(_ type: String) throws -> Int {
        checkValid()
        let objectType = try schema.requireType(type)
        var count = 0
        try scanStored(objectType) { key, bytes in
            do throws(ChangesetDecodingError) {
                if try ObjectRecord.exists(inStored: bytes) { count += 1 }
            } catch {
                throw error.inRecord(of: Self.describe(type: objectType.name, storedKey: key))
            }
        }
        return count
    }
}

extension Snapshot {
    /// `Type[primaryKey]` for a record of `type` stored under `storedKey` (the key after the type's prefix), as errors
    /// name an object.
    static func describe(type: String, storedKey: Slice<UnsafeRawBufferPointer>) -> String {
        RecordKey.describe(type: type, primaryKey: KeyEncoding.primaryKey(from: storedKey))
    }
}

@available(*, unavailable, message: "a Snapshot holds a storage transaction, which belongs to one thread")
extension Snapshot: Sendable {}

extension Schema {
    /// The top-level type named `name`, or an error naming it.
    func requireType(_ name: String) throws -> ObjectSchema {
        guard let type = self[type: name] else {
            let known = types.filter { !$0.isEmbedded }.map(\.name).joined(separator: ", ")
            throw TributaryError(.unknownType, "the schema has no type '\(name)' (it has: \(known))")
        }
        guard !type.isEmbedded else {
            throw TributaryError(
                .unknownType, "'\(name)' is an embedded type: its objects live inside their parents, read those instead"
            )
        }
        return type
    }
}
