import Foundation
public import TributaryModel

extension ObjectRecord {
    /// The values of the object's properties, as the merge rules leave them: lists in order, counters with their
    /// increments, embedded objects with their fields. Properties without state get their default (or null, or
    /// an empty list). Links are returned as stored: whether their target exists is for the caller to check.
    public func values(of type: ObjectSchema, in schema: Schema) -> [String: Value] {
        Self.values(fields, of: type, in: schema)
    }

    static func values(_ fields: FieldTable, of type: ObjectSchema, in schema: Schema) -> [String: Value] {
        var result: [String: Value] = Dictionary(minimumCapacity: type.properties.count)
        for property in type.properties where property.name != type.primaryKey {
            result[property.name] = value(fields[property.name], of: property, in: schema)
        }
        return result
    }

    /// The value of one field state.
    public static func value(_ field: FieldState?, of property: Property, in schema: Schema) -> Value {
        // A list holding a single value (a null set by an earlier build) reads as empty, as every reader gives it.
        if property.isList, case .register? = field { return .list([]) }
        if property.isDictionary {
            guard case .dictionary(let dictionary)? = field else { return .dictionary([:]) }
            return .dictionary(
                dictionary.values.mapValues { value($0, addend: 0, zeroStamp: false, of: property, in: schema) })
        }
        switch field {
        case .register(let register)?:
            return value(
                register.value, addend: register.addend, zeroStamp: register.stamp == .zero, of: property, in: schema)
        case .list(let list)?:
            let elements = list.orderedElements().map { element in
                value(element.value, addend: 0, zeroStamp: false, of: property, in: schema)
            }
            return .list(property.isSet ? distinctElements(elements) : elements)
        case .dictionary?:
            // A dictionary's state under a property defined otherwise: as the property reads without a value.
            return value(nil, of: property, in: schema)
        case nil:
            if property.isList { return .list([]) }
            return property.defaultValue ?? (property.isOptional ? .null : zeroValue(property.kind))
        }
    }

    /// A set's values: each once, where its first element is (two replicas that add one value concurrently make two
    /// elements of it, rule 5).
    public static func distinctElements(_ elements: [Value]) -> [Value] {
        var seen = Set<Value>()
        return elements.filter { seen.insert($0).inserted }
    }

    static func value(_ stored: StoredValue, addend: Int64, zeroStamp: Bool, of property: Property, in schema: Schema)
        -> Value
    {
        switch stored {
        case .scalar(let scalar):
            return adding(addend, to: scalar, zeroStamp: zeroStamp, unwritten: value(nil, of: property, in: schema))
        case .embedded(let child):
            guard let childType = schema[type: child.type] else { return .null }
            return .embedded(EmbeddedObject(type: child.type, fields: values(child.fields, of: childType, in: schema)))
        }
    }

    /// A register's value with its increments added (rule 4).
    ///
    /// Increments of an int property that held no value (an object created before the property was added) make a
    /// register that holds null with the zero stamp: it reads as the property reads without a value (`unwritten`:
    /// its default, or zero), plus the increments. A property that reads null without a value (optional, no
    /// default) stays null. A null someone wrote has a stamp, and stays null; so does a null default a create stored
    /// for a property of another type. (An int property's stored null default reads as its current default.)
    @inline(__always)
    static func adding(_ addend: Int64, to value: Value, zeroStamp: Bool, unwritten: @autoclosure () -> Value) -> Value
    {
        switch value {
        case .int(let base): return .int(base &+ addend)
        case .null where zeroStamp:
            if case .int(let base) = unwritten() { return .int(base &+ addend) }
            return .null
        default: return value
        }
    }

    /// A record's stamp table from its bytes: `count` stamps of 16 bytes each.
    static func stampTable(_ bytes: ArraySlice<UInt8>, count: Int, limits: DecodingLimits)
        throws(ChangesetDecodingError)
        -> [Stamp]
    {
        var reader = BinaryReader(Array(bytes), subject: "object record stamps", limits: limits)
        var table: [Stamp] = []
        table.reserveCapacity(count)
        for _ in 0..<count {
            let time = HybridTime(rawValue: try reader.fixed64())
            table.append(Stamp(time: time, replica: ReplicaID(rawValue: try reader.fixed64())))
        }
        return table
    }

    /// The value a required property reads as before anything was written to it.
    public static func zeroValue(_ kind: PropertyKind) -> Value {
        switch kind {
        case .scalar(.bool): .bool(false)
        case .scalar(.int): .int(0)
        case .scalar(.double): .double(0)
        case .scalar(.string): .string("")
        case .scalar(.data): .data(Data())
        case .scalar(.date): .date(Date(timeIntervalSince1970: 0))
        case .scalar(.uuid): .uuid(UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)))
        case .scalar(.objectId): .objectId(ObjectID(bytes: [UInt8](repeating: 0, count: 12))!)
        case .scalar(.decimal): .decimal(0)
        case .scalar(.float): .float(0)
        case .link, .embedded, .scalar(.mixed): .null
        }
    }

    /// The instance id of the embedded object held by `property`, if one is there: what a path step into it names.
    public func embeddedID(at property: String) -> ElementID? {
        guard case .register(let register)? = fields[property], case .embedded(let child) = register.value else {
            return nil
        }
        return child.id
    }
}

extension ObjectRecord {
    /// Reads an object's values straight from its stored bytes, without building the merge metadata: the fast path
    /// for reads and queries. Returns `nil` for a record whose object does not exist (a tombstone).
    ///
    /// The result equals ``values(of:in:)`` on the decoded record.
    public static func values(
        decoding bytes: [UInt8], of type: ObjectSchema, in schema: Schema, limits: DecodingLimits = .storedRecord
    ) throws(ChangesetDecodingError) -> [String: Value]? {
        guard let values = try positionalValues(decoding: bytes, of: type, in: schema, limits: limits) else {
            return nil
        }
        var result: [String: Value] = Dictionary(minimumCapacity: type.properties.count)
        for (position, property) in type.properties.enumerated() where property.name != type.primaryKey {
            result[property.name] = values[position]
        }
        return result
    }

    /// Whether `wanted` (positions in a type's properties, or `nil` for all) asks for `position`; positions past its
    /// end are not wanted.
    @inline(__always)
    static func isWanted(_ position: Int, in wanted: [Bool]?) -> Bool {
        guard let wanted else { return true }
        return position < wanted.count && wanted[position]
    }

    /// Reads an object's values from its stored bytes, by position in `type.properties`: the form that builds no
    /// dictionary. Returns `nil` for a tombstone. Positions `wanted` leaves out, and the primary key's, hold
    /// ``Value/null``; the others hold what ``values(of:in:)`` would give for them.
    ///
    /// It accepts exactly the records ``init(decoding:limits:)`` accepts, and throws the error that gives for the
    /// others.
    ///
    /// - Parameter wanted: the positions to decode, or `nil` for all of them: a query reads only the properties
    ///   it tests.
    public static func positionalValues(
        decoding bytes: [UInt8], of type: ObjectSchema, in schema: Schema, wanted: [Bool]? = nil,
        limits: DecodingLimits = .storedRecord
    ) throws(ChangesetDecodingError) -> [Value]? {
        do {
            switch try positionalValuesInOrder(decoding: bytes, of: type, in: schema, wanted: wanted, limits: limits) {
            case .values(let values): return values
            case .tombstone: return nil
            case .outOfOrder: break
            }
        } catch {
            // Damaged: the full decoder names the fault, in the words every reader of records uses.
        }
        // Field names out of order or not ASCII (or damage): the full decoder reads the record, or names the fault.
        let record = try ObjectRecord(decoding: bytes, limits: limits)
        guard record.exists else { return nil }
        return positionalValues(record.fields, of: type, in: schema, wanted: wanted)
    }

    /// ``positionalValues(decoding:of:in:wanted:limits:)`` of a decoded record's fields.
    static func positionalValues(_ fields: FieldTable, of type: ObjectSchema, in schema: Schema, wanted: [Bool]?)
        -> [Value]
    {
        let properties = type.properties
        var values = [Value]()
        values.reserveCapacity(properties.count)
        for position in properties.indices {
            let property = properties[position]
            let decoded = property.name != type.primaryKey && isWanted(position, in: wanted)
            values.append(decoded ? value(fields[property.name], of: property, in: schema) : .null)
        }
        return values
    }

    /// What ``positionalValuesInOrder(decoding:of:in:wanted:limits:)`` read.
    private enum PositionalRead {
        case values([Value])
        case tombstone
        /// The record's field names are not ASCII in ascending order, as the encoder writes them: the full decoder
        /// reads it.
        case outOfOrder
    }

    /// ``positionalValues(decoding:of:in:wanted:limits:)`` in one pass over a record whose field names are ASCII in
    /// ascending order (every record the encoder writes), checking what the full decoder checks: a record it reads
    /// is one the full decoder reads, to the same values. Names out of order, or not ASCII, take the full decoder,
    /// which finds a name given twice as `String` compares names.
    private static func positionalValuesInOrder(
        decoding bytes: [UInt8], of type: ObjectSchema, in schema: Schema, wanted: [Bool]?, limits: DecodingLimits
    ) throws(ChangesetDecodingError) -> PositionalRead {
        var reader = BinaryReader(bytes, subject: "object record", limits: limits)
        let version = try reader.byte()
        guard version == formatVersion else {
            throw reader.error(.unsupportedFormatVersion, "record format version \(version) is not supported")
        }
        let flags = try reader.byte()
        guard flags <= 3 else { throw reader.error(.invalidValue, "unknown record flags \(flags)") }
        // States kept under other shapes (rule 8): rare, for the full decoder.
        guard flags & 2 == 0 else { return .outOfOrder }
        let exists = flags == 1
        // Stamps and erasures are merge metadata: skip them, checking what the full decoder checks.
        let stampCount = try reader.count("stamp", maximum: reader.limits.maximumElements, minimumBytesEach: 16)
        let stampBytes = try reader.rawBytes(stampCount * 16, "stamps")
        guard stampBytes.withUnsafeBytes({ RecordBytes.stampsAscending($0) }) else {
            throw reader.error(.invalidValue, "stamps out of order")
        }
        // The table is sorted: the zero stamp, if the record holds one, is its first (index 0). The whole table is
        // read only for a list or an embedded object, whose order and values depend on their stamps.
        let zeroStampFirst = stampCount > 0 && stampBytes.prefix(16).allSatisfy { $0 == 0 }
        var table: [Stamp]?
        let erasureCount = try reader.count("erasure", maximum: reader.limits.maximumElements, minimumBytesEach: 9)
        for _ in 0..<erasureCount {
            _ = try reader.fixed64()
            _ = try reader.varint()
        }
        let properties = type.properties
        let keyPosition = type.primaryKey.flatMap { key in properties.firstIndex { $0.name == key } }
        // Defaults first: the fields stored replace them.
        var values = [Value]()
        if exists {
            values.reserveCapacity(properties.count)
            // By index, reading single fields: iterating the properties would copy each one.
            for position in properties.indices {
                let decoded = position != keyPosition && ObjectRecord.isWanted(position, in: wanted)
                values.append(decoded ? value(nil, of: properties[position], in: schema) : .null)
            }
        }
        let fieldCount = try reader.count("field", maximum: reader.limits.maximumElements, minimumBytesEach: 3)
        var previousName: ArraySlice<UInt8>?
        for _ in 0..<fieldCount {
            let name = try reader.lengthPrefixed("field name")
            let inOrder = name.withUnsafeBytes { name in
                RecordBytes.isASCII(name)
                    && previousName.map { $0.withUnsafeBytes { RecordBytes.precedes($0, name) } } ?? true
            }
            guard inOrder else { return .outOfOrder }
            previousName = name
            // Only an existing object's values are read; a tombstone's fields are checked all the same.
            let position = exists ? name.withUnsafeBufferPointer { type.propertyPosition(utf8: $0) } : nil
            let start = reader.offset
            let tag = try reader.byte()
            if tag == 0, try reader.peekByte() == 0 {
                // A register holding a scalar: value, stamp index, addend.
                _ = try reader.byte()
                let value = try reader.value(.inline)
                let stampIndex = try reader.varint()
                guard stampIndex < UInt64(stampCount) else {
                    throw reader.error(.invalidValue, "stamp index \(stampIndex) is out of range")
                }
                let zeroStamp = stampIndex == 0 && zeroStampFirst
                let addend = try reader.zigzag()
                if let position, position != keyPosition, !properties[position].isList,
                    ObjectRecord.isWanted(position, in: wanted)
                {
                    values[position] = adding(addend, to: value, zeroStamp: zeroStamp, unwritten: values[position])
                }
                continue
            }
            // Lists and embedded objects: decode the field fully, then read it the usual way.
            reader.offset = start
            if table == nil { table = try stampTable(stampBytes, count: stampCount, limits: reader.limits) }
            let field = try reader.fieldState(stamps: table ?? [], depth: 0)
            if let position, position != keyPosition, ObjectRecord.isWanted(position, in: wanted) {
                values[position] = value(field, of: properties[position], in: schema)
            }
        }
        guard reader.isAtEnd else { throw reader.error(.trailingData, "\(reader.remaining) bytes follow the record") }
        return exists ? .values(values) : .tombstone
    }
}
