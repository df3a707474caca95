package import Foundation

/// Names (of types and properties) as an encoding writes them: either inline, as strings, or as indices into a
/// table written once per changeset, which keeps bulk writes small.
package struct NameTable: Sendable {
    /// Whether names are written inline instead of as indices.
    public let isInline: Bool
    public private(set) var names: [String] = []
    private var indices: [String: Int] = [:]

    /// A table that writes names as indices.
    public static func indexed() -> NameTable { NameTable(isInline: false) }
    /// A table that writes names inline.
    public static let inline = NameTable(isInline: true)

    private init(isInline: Bool) { self.isInline = isInline }

    /// A table for decoding, holding names read from the input.
    public init(decoded names: [String]) {
        isInline = false
        self.names = names
    }

    /// How many names are found by comparing them one by one; a table of more finds them through a hash table.
    static let comparedNames = 16

    /// The index of `name`, added when new. Up to ``comparedNames`` names are found by comparing (a changeset names a
    /// few types and properties, and comparing short names is cheaper than hashing them); past that, through a hash
    /// table, built when the table outgrows comparing. Both find names as `String` equality does.
    mutating func index(of name: String) -> Int {
        if names.count <= Self.comparedNames {
            if let index = names.firstIndex(of: name) { return index }
        } else if let index = indices[name] {
            return index
        }
        let index = names.count
        names.append(name)
        if names.count == Self.comparedNames + 1 {
            indices.reserveCapacity(2 * names.count)
            for (position, known) in names.enumerated() { indices[known] = position }
        } else if names.count > Self.comparedNames + 1 {
            indices[name] = index
        }
        return index
    }
}

enum ValueTag: UInt8 {
    case null = 0
    case boolFalse, boolTrue, int, double, string, data, date, uuid, objectId, link, embedded, list, decimal, float
    case dictionary
    case typedLink
}

enum KeyTag: UInt8 {
    case string = 0
    case int, uuid, objectId
}

extension BinaryWriter {
    public mutating func name(_ name: String, _ table: inout NameTable) {
        if table.isInline { string(name) } else { varint(table.index(of: name)) }
    }

    public mutating func uuid(_ uuid: UUID) {
        withUnsafeBytes(of: uuid.uuid) { raw($0) }
    }

    public mutating func primaryKey(_ key: PrimaryKey) {
        switch key {
        case .string(let value):
            byte(KeyTag.string.rawValue)
            string(value)
        case .int(let value):
            byte(KeyTag.int.rawValue)
            zigzag(value)
        case .uuid(let value):
            byte(KeyTag.uuid.rawValue)
            uuid(value)
        case .objectId(let value):
            byte(KeyTag.objectId.rawValue)
            raw(value.bytes)
        }
    }

    public mutating func value(_ value: Value, _ names: inout NameTable) {
        switch value {
        case .null: byte(ValueTag.null.rawValue)
        case .bool(let v): byte(v ? ValueTag.boolTrue.rawValue : ValueTag.boolFalse.rawValue)
        case .int(let v):
            byte(ValueTag.int.rawValue)
            zigzag(v)
        case .double(let v):
            byte(ValueTag.double.rawValue)
            fixed64(v.bitPattern)
        case .string(let v):
            byte(ValueTag.string.rawValue)
            string(v)
        case .data(let v):
            byte(ValueTag.data.rawValue)
            lengthPrefixed(v)
        case .date(let v):
            byte(ValueTag.date.rawValue)
            fixed64(v.timeIntervalSince1970.bitPattern)
        case .uuid(let v):
            byte(ValueTag.uuid.rawValue)
            uuid(v)
        case .objectId(let v):
            byte(ValueTag.objectId.rawValue)
            raw(v.bytes)
        case .decimal(let v):
            byte(ValueTag.decimal.rawValue)
            string(v.canonicalText)
        case .float(let v):
            byte(ValueTag.float.rawValue)
            fixed32(v.bitPattern)
        case .link(let key):
            byte(ValueTag.link.rawValue)
            primaryKey(key)
        case .embedded(let object):
            byte(ValueTag.embedded.rawValue)
            name(object.type, &names)
            // Sorted, never in Dictionary order: the bytes must not depend on the process's hash seed.
            let keys = object.fields.keys.sorted()
            varint(keys.count)
            for key in keys {
                name(key, &names)
                self.value(object.fields[key] ?? .null, &names)
            }
        case .list(let elements):
            byte(ValueTag.list.rawValue)
            varint(elements.count)
            for element in elements { self.value(element, &names) }
        case .typedLink(let type, let key):
            byte(ValueTag.typedLink.rawValue)
            name(type, &names)
            primaryKey(key)
        case .dictionary(let entries):
            byte(ValueTag.dictionary.rawValue)
            // Sorted by key's UTF-8 bytes, never in Dictionary order: equal dictionaries encode alike.
            let keys = entries.keys.sorted { $0.utf8Precedes($1) }
            varint(keys.count)
            for key in keys {
                string(key)
                self.value(entries[key] ?? .null, &names)
            }
        }
    }
}

extension BinaryReader {
    public mutating func name(_ table: NameTable, _ what: String) throws(ChangesetDecodingError) -> String {
        if table.isInline { return try string(what) }
        let raw = try varint()
        guard raw < UInt64(table.names.count) else {
            throw error(.invalidValue, "\(what) refers to name \(raw), but the table has \(table.names.count)")
        }
        return table.names[Int(raw)]
    }

    public mutating func uuid() throws(ChangesetDecodingError) -> UUID {
        let slice = try rawBytes(16, "uuid")
        var tuple: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &tuple) { target in
            for (index, byte) in slice.enumerated() { target[index] = byte }
        }
        return UUID(uuid: tuple)
    }

    public mutating func objectID() throws(ChangesetDecodingError) -> ObjectID {
        let slice = try rawBytes(12, "objectId")
        guard let id = ObjectID(bytes: Array(slice)) else { throw error(.invalidValue, "objectId is not 12 bytes") }
        return id
    }

    public mutating func primaryKey() throws(ChangesetDecodingError) -> PrimaryKey {
        let tag = try byte()
        switch KeyTag(rawValue: tag) {
        case .string: return .string(try string("primary key"))
        case .int: return .int(try zigzag())
        case .uuid: return .uuid(try uuid())
        case .objectId: return .objectId(try objectID())
        case nil: throw error(.invalidTag, "unknown primary key tag \(tag)")
        }
    }

    public mutating func value(_ names: NameTable, depth: Int = 0) throws(ChangesetDecodingError) -> Value {
        guard depth <= limits.maximumDepth else {
            throw error(.limitExceeded, "values nest deeper than \(limits.maximumDepth) levels")
        }
        let tag = try byte()
        switch ValueTag(rawValue: tag) {
        case .null: return .null
        case .boolFalse: return .bool(false)
        case .boolTrue: return .bool(true)
        case .int: return .int(try zigzag())
        case .double: return .double(Double(bitPattern: try fixed64()))
        case .string: return .string(try string())
        case .data: return .data(Data(try lengthPrefixed("data")))
        case .date: return .date(Date(timeIntervalSince1970: Double(bitPattern: try fixed64())))
        case .uuid: return .uuid(try uuid())
        case .objectId: return .objectId(try objectID())
        case .decimal:
            let text = try string()
            guard let value = Decimal(canonicalText: text) else {
                throw error(.invalidValue, "'\(text.prefix(64))' is not a decimal in canonical form")
            }
            return .decimal(value)
        case .float: return .float(Float(bitPattern: try fixed32()))
        case .link: return .link(try primaryKey())
        case .typedLink:
            let type = try name(names, "linked type")
            return .typedLink(type: type, key: try primaryKey())
        case .embedded:
            let type = try name(names, "embedded type")
            let count = try self.count("embedded field", maximum: limits.maximumElements, minimumBytesEach: 2)
            var fields: [String: Value] = [:]
            fields.reserveCapacity(count)
            for _ in 0..<count {
                let key = try name(names, "embedded field name")
                guard fields[key] == nil else { throw error(.invalidValue, "embedded field '\(key)' appears twice") }
                fields[key] = try value(names, depth: depth + 1)
            }
            return .embedded(EmbeddedObject(type: type, fields: fields))
        case .list:
            let count = try self.count("list element", maximum: limits.maximumElements)
            var elements: [Value] = []
            elements.reserveCapacity(count)
            for _ in 0..<count { elements.append(try value(names, depth: depth + 1)) }
            return .list(elements)
        case .dictionary:
            let count = try self.count("dictionary entry", maximum: limits.maximumElements, minimumBytesEach: 2)
            var entries: [String: Value] = [:]
            entries.reserveCapacity(count)
            for _ in 0..<count {
                let key = try string("dictionary key")
                guard entries[key] == nil else {
                    throw error(.invalidValue, "dictionary key '\(key.prefix(64))' appears twice")
                }
                entries[key] = try value(names, depth: depth + 1)
            }
            return .dictionary(entries)
        case nil:
            throw error(.invalidTag, "unknown value tag \(tag)")
        }
    }
}
