import Foundation
import TributaryModel

/// Converts model values to and from `Value` trees shaped by the schema.
enum ModelCoding {
    /// The values of the properties of `model`'s type that `declared` (the schema the app declared) gives it, all of
    /// them without one: properties the model leaves out read as null (or an empty list), so that an update clears
    /// them. A property that only the merged `schema` has (another release of the app added it) is left out, in
    /// embedded objects too, so that a write of this release leaves its value alone.
    ///
    /// A declared property that another release renamed (``ModelNames``) is written under its new name.
    static func values<M: Encodable>(
        of model: M, type: ObjectSchema, schema: Schema, declared: Schema? = nil, names: ModelNames = ModelNames()
    ) throws -> [String: Value] {
        try valuesAndAside(of: model, type: type, schema: schema, declared: declared, names: names).values
    }

    /// ``values(of:type:schema:declared:names:)``, and the values of the properties this release writes aside under
    /// its own definition (``ModelNames/keptAside``), by name.
    static func valuesAndAside<M: Encodable>(
        of model: M, type: ObjectSchema, schema: Schema, declared: Schema?, names: ModelNames
    ) throws -> (values: [String: Value], aside: [String: Value]) {
        let encoder = TreeEncoder(codingPath: [])
        try model.encode(to: encoder)
        guard case .object(let fields) = encoder.node.resolved else {
            throw TributaryError(.wrongType, "\(M.self) did not encode as an object with properties")
        }
        let values = try conform(fields, to: type, schema: schema, declared: declared, names: names, path: type.name)
        var aside: [String: Value] = [:]
        if !names.keptAside.isEmpty {
            for property in names.reshaped(in: type.name)
            where names.keptAside.contains(PropertyName(type: type.name, property: property.name)) {
                aside[property.name] = try conform(
                    fields[property.name] ?? .null, to: property, schema: declared ?? schema, declared: declared,
                    names: names, path: "\(type.name).\(property.name)")
            }
        }
        return (values, aside)
    }

    static func conform(
        _ fields: [String: TreeNode.Resolved], to type: ObjectSchema, schema: Schema, declared: Schema?,
        names: ModelNames = ModelNames(), path: String
    ) throws -> [String: Value] {
        var result: [String: Value] = [:]
        let declaredType = declared?[type: type.name]
        // A property this release declares and the merged schema lacks was removed by another release: its value
        // goes nowhere, as that release's removal says.
        for name in fields.keys.sorted() where type[property: name] == nil && declaredType?[property: name] == nil {
            throw TributaryError(.unknownProperty, "'\(path).\(name)' is not a property of \(type.name)")
        }
        let reshaped = Set(names.reshaped(in: type.name).map(\.name))
        for property in type.properties {
            if let declaredType, declaredType[property: property.name] == nil, fields[property.name] == nil { continue }
            // Defined with another shape by another release: this release's value goes nowhere (``ModelNames``).
            if reshaped.contains(property.name) { continue }
            let node = fields[property.name] ?? .null
            result[property.name] = try conform(
                node, to: property, schema: schema, declared: declared, names: names,
                path: "\(path).\(property.name)")
        }
        // A declared property another release renamed: its value goes to the new name, as the write would have
        // landed had it been made before the rename.
        if !names.isEmpty, let declaredType {
            for property in declaredType.properties where type[property: property.name] == nil {
                guard let target = names.target(of: property.name, in: type.name), fields[target] == nil,
                    let renamed = type[property: target]
                else { continue }
                result[target] = try conform(
                    fields[property.name] ?? .null, to: renamed, schema: schema, declared: declared, names: names,
                    path: "\(path).\(property.name)")
            }
        }
        return result
    }

    static func conform(
        _ node: TreeNode.Resolved, to property: Property, schema: Schema, declared: Schema?,
        names: ModelNames = ModelNames(), path: String
    ) throws -> Value {
        if property.isDictionary {
            // A Swift dictionary with String keys encodes as an object of its keys.
            guard case .object(let entries) = node else {
                if case .null = node { return .dictionary([:]) }
                throw TributaryError(.wrongType, "'\(path)' is a dictionary, but the model encoded \(node)")
            }
            var single = property
            single.isDictionary = false
            var values: [String: Value] = [:]
            for key in entries.keys.sorted() {
                values[key] = try conform(
                    entries[key] ?? .null, to: single, schema: schema, declared: declared, names: names,
                    path: "\(path)['\(key)']")
            }
            return .dictionary(values)
        }
        if property.isList {
            guard case .list(let elements) = node else {
                if case .null = node { return .list([]) }
                throw TributaryError(.wrongType, "'\(path)' is a list, but the model encoded \(node)")
            }
            var single = property
            single.isList = false
            single.isOptional = property.isOptional
            return .list(
                try elements.map {
                    try conform($0, to: single, schema: schema, declared: declared, names: names, path: path)
                })
        }
        if case .value(let value) = node, let conformed = conformScalar(value, scalarConversion(of: property)) {
            return conformed
        }
        switch (property.kind, node) {
        case (_, .null):
            return .null
        case (.embedded(let typeName), .object(let fields)):
            guard let type = schema[type: typeName] else {
                throw TributaryError(.unknownType, "'\(path)' embeds '\(typeName)', which the schema lacks")
            }
            return .embedded(
                EmbeddedObject(
                    type: typeName,
                    fields: try conform(
                        fields, to: type, schema: schema, declared: declared, names: names, path: path)))
        case (.link, .value(let value)):
            throw TributaryError(.wrongType, "'\(path)' is a link, but the model encoded \(value.kindName)")
        default:
            throw TributaryError(.wrongType, "'\(path)' is \(property.typeDescription), but the model encoded \(node)")
        }
    }

    /// How a value a model encodes becomes the value of a property that holds one scalar or link
    /// (``conformScalar(_:_:)``).
    enum ScalarConversion {
        case asIs
        /// Integers become doubles.
        case double
        /// Integers become decimals.
        case decimal
        /// Doubles and integers become floats.
        case float
        /// A link, or a primary key value that names one.
        case link
        /// A list, a dictionary or an embedded object: not a scalar.
        case none
    }

    static func scalarConversion(of property: Property) -> ScalarConversion {
        guard !property.isList, !property.isDictionary else { return .none }
        switch property.kind {
        case .scalar(.double): return .double
        case .scalar(.decimal): return .decimal
        case .scalar(.float): return .float
        case .scalar: return .asIs
        case .link: return .link
        case .embedded: return .none
        }
    }

    /// A value the model encoded as a property with `conversion` stores it; `nil` when that property cannot hold it
    /// (it is a list, a dictionary or an embedded object, or a link the value cannot name).
    @inline(__always)
    static func conformScalar(_ value: Value, _ conversion: ScalarConversion) -> Value? {
        switch (conversion, value) {
        case (.none, _): return nil
        case (_, .null): return .null
        case (.link, .link): return value
        case (.link, _): return PrimaryKey(value).map(Value.link)
        case (.double, .int(let int)): return .double(Double(int))
        case (.decimal, .int(let int)): return .decimal(Decimal(int))
        // A Swift Float encodes as a double (its models' default storage); a float property takes it back.
        case (.float, .double(let double)): return .float(Float(double))
        case (.float, .int(let int)): return .float(Float(int))
        default: return value
        }
    }

    /// Decodes a model from an object's values.
    ///
    /// A property that another release renamed (``ModelNames``) is read from its new name.
    static func model<M: Decodable>(_ type: M.Type, from object: DynamicObject, names: ModelNames = ModelNames())
        throws -> M
    {
        do {
            // Read in place by property position when nothing is renamed: no dictionary per object.
            guard !names.renamed.isEmpty else { return try M(from: ValueDecoder(object: object)) }
            let value = aliased(.embedded(EmbeddedObject(type: object.type, fields: object.values)), names)
            return try M(from: ValueDecoder(value: value, codingPath: []))
        } catch let error as DecodingError {
            throw TributaryError(
                .wrongType, "cannot read \(object.type) \(object.primaryKey) as \(M.self): \(describe(error))")
        }
    }

    /// `value` with each renamed property's value also under the name this release declares, in embedded objects and
    /// lists too.
    static func aliased(_ value: Value, _ names: ModelNames) -> Value {
        switch value {
        case .embedded(let object):
            var fields = object.fields
            for (name, field) in object.fields { fields[name] = aliased(field, names) }
            for (declared, target) in names.renamed
            where declared.type == object.type && fields[declared.property] == nil {
                fields[declared.property] = fields[target]
            }
            return .embedded(EmbeddedObject(type: object.type, fields: fields))
        case .list(let elements):
            return .list(elements.map { aliased($0, names) })
        default:
            return value
        }
    }

    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context),
            .dataCorrupted(let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? context.debugDescription : "\(path): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }
}

// MARK: Encoding

/// A node of the tree an encoder builds; objects and lists are boxes so nested containers can fill them in place.
final class TreeNode {
    enum Resolved: CustomStringConvertible {
        case null
        case value(Value)
        case object([String: Resolved])
        case list([Resolved])

        var description: String {
            switch self {
            case .null: "null"
            case .value(let value): value.kindName
            case .object: "an object"
            case .list: "a list"
            }
        }
    }
    enum Content {
        case empty
        case value(Value)
        case object([String: TreeNode])
        case list([TreeNode])
    }
    var content: Content = .empty

    var resolved: Resolved {
        switch content {
        case .empty: .null
        case .value(let value): value.isNull ? .null : .value(value)
        case .object(let fields): .object(fields.mapValues(\.resolved))
        case .list(let elements): .list(elements.map(\.resolved))
        }
    }
}

final class TreeEncoder: Encoder {
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    let node = TreeNode()

    init(codingPath: [any CodingKey]) { self.codingPath = codingPath }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = node.content {} else { node.content = .object([:]) }
        return KeyedEncodingContainer(TreeKeyedContainer<Key>(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .list = node.content {} else { node.content = .list([]) }
        return TreeUnkeyedContainer(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        TreeSingleValueContainer(node: node, codingPath: codingPath)
    }

    /// The node for one value: special types become values directly, everything else encodes itself.
    static func encode<T: Encodable>(_ value: T, codingPath: [any CodingKey]) throws -> TreeNode {
        let node = TreeNode()
        if let direct = try directValue(value, codingPath: codingPath) {
            node.content = .value(direct)
            return node
        }
        let encoder = TreeEncoder(codingPath: codingPath)
        try value.encode(to: encoder)
        return encoder.node
    }

    static func directValue(_ value: Any, codingPath: [any CodingKey]) throws -> Value? {
        switch value {
        case let value as String: return .string(value)
        case let value as Bool: return .bool(value)
        case let value as Int: return .int(Int64(value))
        case let value as Int64: return .int(value)
        case let value as Int32: return .int(Int64(value))
        case let value as Int16: return .int(Int64(value))
        case let value as Int8: return .int(Int64(value))
        case let value as UInt8: return .int(Int64(value))
        case let value as UInt16: return .int(Int64(value))
        case let value as UInt32: return .int(Int64(value))
        case let value as UInt:
            guard let int = Int64(exactly: value) else { throw overflow(value, codingPath) }
            return .int(int)
        case let value as UInt64:
            guard let int = Int64(exactly: value) else { throw overflow(value, codingPath) }
            return .int(int)
        case let value as Double: return .double(value)
        case let value as Float: return .double(Double(value))
        case let value as Date: return .date(value)
        case let value as Data: return .data(value)
        case let value as UUID: return .uuid(value)
        case let value as ObjectID: return .objectId(value)
        case let value as Decimal: return .decimal(value)
        case let value as PrimaryKey: return value.value
        // A mixed property's value, as it is.
        case let value as Value: return value
        case let value as any LinkValue: return .link(value.primaryKey)
        default: return nil
        }
    }

    static func overflow(_ value: Any, _ codingPath: [any CodingKey]) -> EncodingError {
        EncodingError.invalidValue(
            value, .init(codingPath: codingPath, debugDescription: "\(value) does not fit a 64-bit signed integer"))
    }
}

struct TreeKeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: TreeNode
    let codingPath: [any CodingKey]

    private func set(_ child: TreeNode, _ key: Key) {
        guard case .object(var fields) = node.content else { return }
        fields[key.stringValue] = child
        node.content = .object(fields)
    }

    mutating func encodeNil(forKey key: Key) throws {
        let child = TreeNode()
        child.content = .value(.null)
        set(child, key)
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        // Computed as the object is read, never written.
        if value is any LinkingObjectsValue { return }
        set(try TreeEncoder.encode(value, codingPath: codingPath + [key]), key)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
        -> KeyedEncodingContainer<NestedKey>
    {
        let child = TreeNode()
        child.content = .object([:])
        set(child, key)
        return KeyedEncodingContainer(TreeKeyedContainer<NestedKey>(node: child, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let child = TreeNode()
        child.content = .list([])
        set(child, key)
        return TreeUnkeyedContainer(node: child, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder { TreeEncoder(codingPath: codingPath) }
    mutating func superEncoder(forKey key: Key) -> any Encoder {
        let encoder = TreeEncoder(codingPath: codingPath + [key])
        set(encoder.node, key)
        return encoder
    }
}

struct TreeUnkeyedContainer: UnkeyedEncodingContainer {
    let node: TreeNode
    let codingPath: [any CodingKey]
    var count: Int {
        if case .list(let elements) = node.content { return elements.count }
        return 0
    }

    private func append(_ child: TreeNode) {
        guard case .list(var elements) = node.content else { return }
        elements.append(child)
        node.content = .list(elements)
    }

    mutating func encodeNil() throws {
        let child = TreeNode()
        child.content = .value(.null)
        append(child)
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        append(try TreeEncoder.encode(value, codingPath: codingPath))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
        -> KeyedEncodingContainer<NestedKey>
    {
        let child = TreeNode()
        child.content = .object([:])
        append(child)
        return KeyedEncodingContainer(TreeKeyedContainer<NestedKey>(node: child, codingPath: codingPath))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let child = TreeNode()
        child.content = .list([])
        append(child)
        return TreeUnkeyedContainer(node: child, codingPath: codingPath)
    }

    mutating func superEncoder() -> any Encoder { TreeEncoder(codingPath: codingPath) }
}

struct TreeSingleValueContainer: SingleValueEncodingContainer {
    let node: TreeNode
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws { node.content = .value(.null) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        node.content = try TreeEncoder.encode(value, codingPath: codingPath).content
    }
}

// MARK: Decoding

struct ValueDecoder: Decoder {
    let value: Value
    /// The fields of the object decoded, when it is a top-level object read from a replica.
    let fields: DecodedFields?
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(value: Value, codingPath: [any CodingKey]) {
        self.value = value
        self.fields = nil
        self.codingPath = codingPath
    }

    /// Decodes an object read from a replica: by position when it holds its values so (as every read returns them).
    init(object: DynamicObject) {
        self.value = .embedded(EmbeddedObject(type: object.type, fields: [:]))
        if let (type, values) = object.positional {
            fields = .positional(PositionalFields(type: type, values: values))
        } else {
            fields = .named(object.values)
        }
        self.codingPath = []
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        if let fields {
            return KeyedDecodingContainer(ValueKeyedContainer<Key>(fields: fields, codingPath: codingPath))
        }
        // A dictionary decodes as a Swift dictionary does: one key each.
        if case .dictionary(let entries) = value {
            return KeyedDecodingContainer(ValueKeyedContainer<Key>(fields: .named(entries), codingPath: codingPath))
        }
        guard case .embedded(let object) = value else {
            throw DecodingError.typeMismatch(
                [String: Any].self,
                .init(codingPath: codingPath, debugDescription: "expected an object, found \(value.kindName)"))
        }
        return KeyedDecodingContainer(ValueKeyedContainer<Key>(fields: .named(object.fields), codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .list(let elements) = value else {
            throw DecodingError.typeMismatch(
                [Any].self, .init(codingPath: codingPath, debugDescription: "expected a list, found \(value.kindName)"))
        }
        return ValueUnkeyedContainer(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        guard let fields, case .embedded(let object) = value else {
            return ValueSingleContainer(value: value, codingPath: codingPath)
        }
        return ValueSingleContainer(
            value: .embedded(EmbeddedObject(type: object.type, fields: fields.byName)), codingPath: codingPath)
    }

    /// `value` as a `T`. The coding path is built only for an error or a nested decoder.
    static func decode<T: Decodable>(
        _ type: T.Type, from value: Value, codingPath: @autoclosure () -> [any CodingKey]
    ) throws -> T {
        if let direct = try direct(type, value, codingPath()) { return direct }
        return try T(from: ValueDecoder(value: value, codingPath: codingPath()))
    }

    static func direct<T>(_ type: T.Type, _ value: Value, _ codingPath: @autoclosure () -> [any CodingKey]) throws -> T?
    {
        func mismatch() -> DecodingError {
            DecodingError.typeMismatch(
                type, .init(codingPath: codingPath(), debugDescription: "found \(value.kindName) \(value)"))
        }
        func integer<I: FixedWidthInteger>(_: I.Type) throws -> I {
            guard case .int(let int) = value else { throw mismatch() }
            guard let result = I(exactly: int) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: codingPath(), debugDescription: "\(int) does not fit \(I.self)"))
            }
            return result
        }
        let result: Any?
        switch type {
        case is String.Type:
            guard case .string(let string) = value else { throw mismatch() }
            result = string
        case is Bool.Type:
            guard case .bool(let bool) = value else { throw mismatch() }
            result = bool
        case is Int.Type: result = try integer(Int.self)
        case is Int64.Type: result = try integer(Int64.self)
        case is Int32.Type: result = try integer(Int32.self)
        case is Int16.Type: result = try integer(Int16.self)
        case is Int8.Type: result = try integer(Int8.self)
        case is UInt.Type: result = try integer(UInt.self)
        case is UInt64.Type: result = try integer(UInt64.self)
        case is UInt32.Type: result = try integer(UInt32.self)
        case is UInt16.Type: result = try integer(UInt16.self)
        case is UInt8.Type: result = try integer(UInt8.self)
        case is Double.Type:
            switch value {
            case .double(let double): result = double
            case .int(let int): result = Double(int)
            default: throw mismatch()
            }
        case is Float.Type:
            switch value {
            case .double(let double): result = Float(double)
            case .float(let float): result = float
            default: throw mismatch()
            }
        case is Date.Type:
            guard case .date(let date) = value else { throw mismatch() }
            result = date
        case is Data.Type:
            guard case .data(let data) = value else { throw mismatch() }
            result = data
        case is UUID.Type:
            guard case .uuid(let uuid) = value else { throw mismatch() }
            result = uuid
        case is ObjectID.Type:
            guard case .objectId(let id) = value else { throw mismatch() }
            result = id
        case is Decimal.Type:
            switch value {
            case .decimal(let decimal): result = decimal
            case .int(let int): result = Decimal(int)
            default: throw mismatch()
            }
        case is PrimaryKey.Type:
            guard let key = value.linkValue ?? PrimaryKey(value) else { throw mismatch() }
            result = key
        case is Value.Type:
            result = value
        default:
            if let link = type as? any LinkValue.Type {
                guard case .link(let key) = value else { throw mismatch() }
                result = link.init(linkTo: key)
            } else {
                result = nil
            }
        }
        // Not `result as? T` alone: nil cast to an optional `T` would succeed, as a `T` holding nil.
        guard let result else { return nil }
        return result as? T
    }
}

/// The fields a keyed container reads: by name, or those of an object read from a replica, by position.
enum DecodedFields {
    case named([String: Value])
    case positional(PositionalFields)

    subscript(name: String) -> Value? {
        switch self {
        case .named(let fields): fields[name]
        case .positional(let fields): fields.value(name)
        }
    }

    var names: [String] {
        switch self {
        case .named(let fields): Array(fields.keys)
        case .positional(let fields): fields.type.names
        }
    }

    var byName: [String: Value] {
        switch self {
        case .named(let fields): fields
        case .positional(let fields):
            Dictionary(zip(fields.type.names, fields.values), uniquingKeysWith: { first, _ in first })
        }
    }
}

/// An object's values by position, read by name. A model decodes its keys in the order it declares them, which is
/// the order of the schema its type derives: each key is compared with the name after the last one read before it is
/// looked up.
final class PositionalFields {
    let type: DynamicObject.PositionalType
    let values: [Value]
    private var next = 0

    init(type: DynamicObject.PositionalType, values: [Value]) {
        self.type = type
        self.values = values
    }

    func value(_ name: String) -> Value? {
        let position: Int
        if next < type.names.count, type.names[next] == name {
            position = next
        } else if let found = type.schema.position(ofProperty: name) {
            position = found
        } else {
            return nil
        }
        next = position + 1
        return position < values.count ? values[position] : nil
    }
}

struct ValueKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let fields: DecodedFields
    let codingPath: [any CodingKey]

    var allKeys: [Key] { fields.names.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { fields[key.stringValue] != nil }

    func decodeNil(forKey key: Key) throws -> Bool { fields[key.stringValue]?.isNull ?? true }

    func decode(_ type: String.Type, forKey key: Key) throws -> String {
        if case .string(let string)? = fields[key.stringValue] { return string }
        return try decode(type, forKey: key, generic: ())
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool {
        if case .bool(let bool)? = fields[key.stringValue] { return bool }
        return try decode(type, forKey: key, generic: ())
    }

    func decode(_ type: Int.Type, forKey key: Key) throws -> Int {
        if case .int(let int)? = fields[key.stringValue], let result = Int(exactly: int) { return result }
        return try decode(type, forKey: key, generic: ())
    }

    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 {
        if case .int(let int)? = fields[key.stringValue] { return int }
        return try decode(type, forKey: key, generic: ())
    }

    func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
        if case .double(let double)? = fields[key.stringValue] { return double }
        return try decode(type, forKey: key, generic: ())
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try decode(type, forKey: key, generic: ())
    }

    /// The general decode, which every other ends in.
    private func decode<T: Decodable>(_ type: T.Type, forKey key: Key, generic: Void) throws -> T {
        guard let value = fields[key.stringValue] else {
            // A computed property a read did not fill in (an object read without its replica): none.
            if type is any LinkingObjectsValue.Type {
                return try ValueDecoder.decode(type, from: .list([]), codingPath: codingPath + [key])
            }
            throw DecodingError.keyNotFound(
                key, .init(codingPath: codingPath, debugDescription: "no property '\(key.stringValue)'"))
        }
        return try ValueDecoder.decode(type, from: value, codingPath: codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try ValueDecoder(value: fields[key.stringValue] ?? .null, codingPath: codingPath + [key]).container(
            keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(value: fields[key.stringValue] ?? .null, codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        ValueDecoder(value: .embedded(EmbeddedObject(type: "", fields: fields.byName)), codingPath: codingPath)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        ValueDecoder(value: fields[key.stringValue] ?? .null, codingPath: codingPath + [key])
    }
}

struct IndexKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(_ index: Int) {
        stringValue = "\(index)"
        intValue = index
    }
    init?(stringValue: String) { return nil }
    init?(intValue: Int) { self.init(intValue) }
}

struct ValueUnkeyedContainer: UnkeyedDecodingContainer {
    let elements: [Value]
    let codingPath: [any CodingKey]
    var currentIndex = 0
    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    init(elements: [Value], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    mutating func next(_ type: Any.Type) throws -> Value {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                type, .init(codingPath: codingPath, debugDescription: "the list has no more elements"))
        }
        defer { currentIndex += 1 }
        return elements[currentIndex]
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, elements[currentIndex].isNull else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let key = IndexKey(currentIndex)
        return try ValueDecoder.decode(type, from: try next(type), codingPath: codingPath + [key])
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try ValueDecoder(value: try next([String: Any].self), codingPath: codingPath).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(value: try next([Any].self), codingPath: codingPath).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        ValueDecoder(value: try next(Any.self), codingPath: codingPath)
    }
}

struct ValueSingleContainer: SingleValueDecodingContainer {
    let value: Value
    let codingPath: [any CodingKey]

    func decodeNil() -> Bool { value.isNull }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try ValueDecoder.decode(type, from: value, codingPath: codingPath)
    }
}
