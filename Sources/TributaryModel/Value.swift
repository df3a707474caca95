public import Foundation

/// A primary key: a string, a 64-bit integer, a UUID or an ObjectID.
public enum PrimaryKey: Hashable, Comparable, Sendable, CustomStringConvertible {
    case string(String)
    case int(Int64)
    case uuid(UUID)
    case objectId(ObjectID)

    /// The key as a ``Value``.
    public var value: Value {
        switch self {
        case .string(let string): .string(string)
        case .int(let int): .int(int)
        case .uuid(let uuid): .uuid(uuid)
        case .objectId(let id): .objectId(id)
        }
    }

    /// The key held by `value`, or `nil` when that kind of value cannot be a primary key.
    public init?(_ value: Value) {
        switch value {
        case .string(let string): self = .string(string)
        case .int(let int): self = .int(int)
        case .uuid(let uuid): self = .uuid(uuid)
        case .objectId(let id): self = .objectId(id)
        default: return nil
        }
    }

    /// The scalar type of the key.
    public var type: ScalarType {
        switch self {
        case .string: .string
        case .int: .int
        case .uuid: .uuid
        case .objectId: .objectId
        }
    }

    public var description: String {
        switch self {
        case .string(let string): "\"\(string)\""
        case .int(let int): "\(int)"
        case .uuid(let uuid): uuid.uuidString
        case .objectId(let id): id.description
        }
    }

    /// String keys are equal when their UTF-8 bytes are, as a replica stores them: "é" as one scalar and as "e" with
    /// a combining accent are two keys, though Swift's `String` calls them equal.
    public static func == (lhs: PrimaryKey, rhs: PrimaryKey) -> Bool {
        switch (lhs, rhs) {
        case (.string(let a), .string(let b)): return a.hasSameUTF8(as: b)
        case (.int(let a), .int(let b)): return a == b
        case (.uuid(let a), .uuid(let b)): return a == b
        case (.objectId(let a), .objectId(let b)): return a == b
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .string(let string):
            hasher.combine(0 as UInt8)
            hasher.combine(string.utf8.count)
            let hashed: Void? = string.utf8.withContiguousStorageIfAvailable {
                hasher.combine(bytes: UnsafeRawBufferPointer($0))
            }
            if hashed == nil { for byte in string.utf8 { hasher.combine(byte) } }
        case .int(let int):
            hasher.combine(1 as UInt8)
            hasher.combine(int)
        case .uuid(let uuid):
            hasher.combine(2 as UInt8)
            hasher.combine(uuid)
        case .objectId(let id):
            hasher.combine(3 as UInt8)
            hasher.combine(id)
        }
    }

    /// String keys order by their UTF-8 bytes, as a replica stores them (the order of their Unicode scalars).
    public static func < (lhs: PrimaryKey, rhs: PrimaryKey) -> Bool {
        switch (lhs, rhs) {
        case (.string(let a), .string(let b)): return a.utf8Precedes(b)
        case (.int(let a), .int(let b)): return a < b
        case (.uuid(let a), .uuid(let b)): return a.uuidString < b.uuidString
        case (.objectId(let a), .objectId(let b)): return a < b
        default: return lhs.type.rawValue < rhs.type.rawValue
        }
    }
}

/// The fields of an embedded object, sorted by name.
public struct EmbeddedObject: Hashable, Sendable {
    /// The embedded object's type name.
    public var type: String
    /// Field values by property name.
    public var fields: [String: Value]

    public init(type: String, fields: [String: Value]) {
        self.type = type
        self.fields = fields
    }

    /// The value of a field (``Value/null`` when absent).
    public subscript(name: String) -> Value {
        get { fields[name] ?? .null }
        set { fields[name] = newValue }
    }
}

/// A property value, as apps read and write it.
///
/// A value is what a property holds after every merge rule has been applied: lists hold their elements in
/// order, embedded objects their fields, links the primary key of their target.
public enum Value: Hashable, Sendable, CustomStringConvertible {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case data(Data)
    case date(Date)
    case uuid(UUID)
    case objectId(ObjectID)
    /// A decimal number, stored in its canonical form (``Foundation/Decimal/canonicalText``).
    case decimal(Decimal)
    /// A 32-bit floating-point number.
    case float(Float)
    /// A link to the object of the property's target type with this primary key.
    case link(PrimaryKey)
    /// An embedded object, owned by its parent.
    case embedded(EmbeddedObject)
    /// The elements of a list property, or a list held by a mixed value.
    case list([Value])
    /// The entries of a dictionary property, or a dictionary held by a mixed value, by key.
    case dictionary([String: Value])
    /// A link held by a mixed value (Realm's `AnyRealmValue` holding an object): the object of `type` with primary
    /// key `key`. Only mixed values hold one; a link property's ``link(_:)`` names no type, its property does. Reads
    /// as ``null`` once its target does not exist (docs/MergeSemantics.md, rule 7). Boxed (`indirect`): held inline it
    /// would make every value 8 bytes larger.
    indirect case typedLink(type: String, key: PrimaryKey)

    /// A short name for the value's kind, used in error messages.
    public var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "bool"
        case .int: "int"
        case .double: "double"
        case .string: "string"
        case .data: "data"
        case .date: "date"
        case .uuid: "uuid"
        case .objectId: "objectId"
        case .decimal: "decimal"
        case .float: "float"
        case .link: "link"
        case .embedded: "embedded object"
        case .list: "list"
        case .dictionary: "dictionary"
        case .typedLink: "link"
        }
    }

    public var isNull: Bool { if case .null = self { true } else { false } }

    /// Whether the value is a single value (a scalar, a link or null), not a list or an embedded object: one that
    /// holds no element or instance ids, which a merge draws from the changeset that stores them. Only such a value
    /// can be a default (rule 3): a default has no writer of its own, and a merge orders two of them by their
    /// encoding, so they merge alike in any order. A create stores no other default, and a schema declares none.
    public var isSingleValue: Bool {
        switch self {
        case .list, .embedded, .dictionary: false
        default: true
        }
    }

    public var boolValue: Bool? { if case .bool(let v) = self { v } else { nil } }
    public var intValue: Int64? { if case .int(let v) = self { v } else { nil } }
    public var doubleValue: Double? { if case .double(let v) = self { v } else { nil } }
    public var stringValue: String? { if case .string(let v) = self { v } else { nil } }
    public var dataValue: Data? { if case .data(let v) = self { v } else { nil } }
    public var dateValue: Date? { if case .date(let v) = self { v } else { nil } }
    public var uuidValue: UUID? { if case .uuid(let v) = self { v } else { nil } }
    public var objectIdValue: ObjectID? { if case .objectId(let v) = self { v } else { nil } }
    public var decimalValue: Decimal? { if case .decimal(let v) = self { v } else { nil } }
    public var floatValue: Float? { if case .float(let v) = self { v } else { nil } }
    public var linkValue: PrimaryKey? { if case .link(let v) = self { v } else { nil } }
    public var embeddedValue: EmbeddedObject? { if case .embedded(let v) = self { v } else { nil } }
    public var listValue: [Value]? { if case .list(let v) = self { v } else { nil } }
    public var dictionaryValue: [String: Value]? { if case .dictionary(let v) = self { v } else { nil } }
    /// The type and primary key of the object a mixed value links to, or `nil` when it holds no link.
    public var typedLinkValue: (type: String, key: PrimaryKey)? {
        if case .typedLink(let type, let key) = self { (type, key) } else { nil }
    }

    public var description: String {
        switch self {
        case .null: return "null"
        case .bool(let v): return "\(v)"
        case .int(let v): return "\(v)"
        case .double(let v): return "\(v)"
        case .string(let v): return "\"\(v)\""
        case .data(let v): return "<\(v.count) bytes>"
        case .date(let v): return Self.format(v)
        case .uuid(let v): return v.uuidString
        case .objectId(let v): return "ObjectId(\(v))"
        case .decimal(let v): return v.canonicalText
        case .float(let v): return "\(v)"
        case .link(let key): return "-> \(key)"
        case .typedLink(let type, let key): return "-> \(type)(\(key))"
        case .embedded(let object):
            let fields = object.fields.keys.sorted().map { "\($0): \(object.fields[$0]!)" }
            return "{" + fields.joined(separator: ", ") + "}"
        case .list(let values): return "[" + values.map(\.description).joined(separator: ", ") + "]"
        case .dictionary(let entries):
            return "[" + entries.keys.sorted().map { "\"\($0)\": \(entries[$0]!)" }.joined(separator: ", ") + "]"
        }
    }

    /// An ISO 8601 rendering with milliseconds, in UTC.
    public static func format(_ date: Date) -> String {
        date.formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true))
    }
}

extension Value: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByNilLiteral, ExpressibleByArrayLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(nilLiteral: ()) { self = .null }
    public init(arrayLiteral elements: Value...) { self = .list(elements) }
}

extension Value {
    /// This mixed value with each link it holds, at any depth, to an object that `exists` says is missing read as
    /// null: the element or key holding it stays (docs/MergeSemantics.md, rule 7). The value itself, not rebuilt,
    /// when none of its links is missing.
    public func resolvingTypedLinks(_ exists: (_ type: String, _ key: PrimaryKey) throws -> Bool) rethrows -> Value {
        try withMissingLinksNulled(exists) ?? self
    }

    /// ``resolvingTypedLinks(_:)`` in one walk: `nil` when nothing changes, so that only the lists and dictionaries
    /// on the way to a missing link are rebuilt.
    private func withMissingLinksNulled(_ exists: (_ type: String, _ key: PrimaryKey) throws -> Bool) rethrows
        -> Value?
    {
        switch self {
        case .typedLink(let type, let key):
            return try exists(type, key) ? nil : .null
        case .list(let elements):
            var changed: [Value]?
            for (index, element) in elements.enumerated() {
                guard let resolved = try element.withMissingLinksNulled(exists) else { continue }
                if changed == nil { changed = elements }
                changed?[index] = resolved
            }
            return changed.map(Value.list)
        case .dictionary(let entries):
            var changed: [String: Value]?
            for (key, value) in entries {
                guard let resolved = try value.withMissingLinksNulled(exists) else { continue }
                if changed == nil { changed = entries }
                changed?[key] = resolved
            }
            return changed.map(Value.dictionary)
        default:
            return nil
        }
    }

    /// Whether two values store alike: they are equal, or differ only where the stored form cannot tell them apart.
    ///
    /// A date is stored as seconds since 1970 and Foundation keeps it as seconds since 2001, so a date read back can
    /// differ in its last bit from the one written; both are the same stored date. Doubles store alike when their bits
    /// are equal: two NaNs with the same bits are one stored value though `==` says they differ, and -0.0 and 0.0 are
    /// two though `==` says they are one. A write compares with this, so that writing back what a
    /// replica already holds changes nothing (and does not win a merge over a concurrent write of another replica).
    /// Strings store alike when their UTF-8 bytes are equal: "é" as one scalar and as "e" with a combining accent are
    /// `==` in Swift, and two different stored values.
    public func storesAlike(_ other: Value) -> Bool {
        switch (self, other) {
        case (.string(let a), .string(let b)):
            return a.hasSameUTF8(as: b)
        case (.date(let a), .date(let b)):
            return a.timeIntervalSince1970.bitPattern == b.timeIntervalSince1970.bitPattern
        case (.double(let a), .double(let b)):
            return a.bitPattern == b.bitPattern
        case (.float(let a), .float(let b)):
            return a.bitPattern == b.bitPattern
        case (.list(let a), .list(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.storesAlike($1) }
        case (.dictionary(let a), .dictionary(let b)):
            return a.count == b.count && a.allSatisfy { key, value in b[key].map(value.storesAlike) ?? false }
        case (.embedded(let a), .embedded(let b)):
            return a.type == b.type && a.fields.count == b.fields.count
                && a.fields.allSatisfy { name, value in b.fields[name].map(value.storesAlike) ?? false }
        default:
            return self == other
        }
    }
}
