import Foundation
public import TributaryModel

extension Schema {
    /// The schema of a set of model types, derived from their `Codable` conformances, with the embedded types they
    /// use.
    ///
    /// - Throws: ``TributaryError`` with `.schemaMismatch` naming the type and property that cannot be stored (a
    ///   nested ``Model`` without ``Link``, a dictionary, an unsupported Swift type), or an invalid schema.
    public init(models: [any Model.Type], version: UInt64 = 0) throws {
        var probe = SchemaProbe()
        for model in models { try probe.add(model) }
        self.init(version: version, types: try probe.resolvingLinkingObjects(models))
        do { try validateDeclaration() } catch {
            throw TributaryError(
                .schemaMismatch, "the schema of the model types is invalid: \(error)", underlying: error)
        }
    }
}

extension CodingUserInfoKey {
    /// `true` in the `userInfo` of the decoder that reads a model's schema by decoding placeholder values (empty
    /// strings, zeros, empty lists): a model whose `init(from:)` validates what it decodes skips that when it is set.
    ///
    /// ```swift
    /// init(from decoder: any Decoder) throws {
    ///     let container = try decoder.container(keyedBy: CodingKeys.self)
    ///     email = try container.decode(String.self, forKey: .email)
    ///     if decoder.userInfo[.tributarySchemaProbe] as? Bool != true, !email.contains("@") { throw InvalidEmail() }
    /// }
    /// ```
    public static let tributarySchemaProbe = CodingUserInfoKey(rawValue: "tributary.schemaProbe")!
}

/// Derives object schemas from `Decodable` types by decoding a placeholder with a decoder that records every key
/// and type the initializer asks for.
struct SchemaProbe {
    var types: [ObjectSchema] = []
    /// The ``LinkingObjects`` properties of each model type: their names and source types, in declaration order.
    var linkingObjects: [String: [(name: String, source: String)]] = [:]

    mutating func add(_ model: any Model.Type) throws {
        guard !types.contains(where: { $0.name == model.typeName }) else { return }
        var properties = try probe(model, typeName: model.typeName)
        for name in model.originProperties.keys.sorted()
        where !(linkingObjects[model.typeName] ?? []).contains(where: { $0.name == name }) {
            throw TributaryError(
                .schemaMismatch,
                "\(model.typeName) gives an origin property for '\(name)', which is not one of its LinkingObjects properties"
            )
        }
        for index in properties.indices where model.indexedProperties.contains(properties[index].name) {
            properties[index].isIndexed = true
        }
        try applyDefaults(
            &properties, declared: model.defaultValues, initial: model.initialValues, of: model.typeName,
            primaryKey: model.primaryKeyProperty)
        for name in model.indexedProperties where !properties.contains(where: { $0.name == name }) {
            throw TributaryError(
                .schemaMismatch, "\(model.typeName) declares an index for '\(name)', which is not one of its properties"
            )
        }
        types.append(ObjectSchema(name: model.typeName, primaryKey: model.primaryKeyProperty, properties: properties))
    }

    mutating func addEmbedded(_ type: any EmbeddedModel.Type) throws {
        guard !types.contains(where: { $0.name == type.typeName }) else { return }
        // Registered before probing, so that a type that embeds itself (through a list or an optional) terminates.
        types.append(.embedded(type.typeName, properties: []))
        var properties = try probe(type, typeName: type.typeName)
        try applyDefaults(
            &properties, declared: type.defaultValues, initial: type.initialValues, of: type.typeName,
            primaryKey: nil)
        types.removeAll { $0.name == type.typeName }
        types.append(.embedded(type.typeName, properties: properties))
    }

    /// The probed types with their ``ObjectSchema/linkingObjects``: each one's source type's link property that points
    /// at the type, the one ``Model/originProperties`` names or else the only one there is.
    func resolvingLinkingObjects(_ models: [any Model.Type]) throws -> [ObjectSchema] {
        var resolved = types
        for index in resolved.indices {
            let type = resolved[index]
            guard let declared = linkingObjects[type.name] else { continue }
            let origins = models.first { $0.typeName == type.name }?.originProperties ?? [:]
            for (name, source) in declared {
                guard let sourceType = types.first(where: { $0.name == source }) else {
                    throw TributaryError(
                        .schemaMismatch,
                        "\(type.name).\(name) lists objects of \(source), which is not among the models the replica "
                            + "is opened with; add \(source).self to them")
                }
                let links = sourceType.properties.filter { $0.kind == .link(type.name) }.map(\.name)
                let origin: String
                if let given = origins[name] {
                    origin = given
                } else if links.count == 1 {
                    origin = links[0]
                } else {
                    throw TributaryError(
                        .schemaMismatch,
                        links.isEmpty
                            ? "\(type.name).\(name) lists the \(source) objects linking to it, but \(source) has no "
                                + "Link<\(type.name)> property"
                            : "\(type.name).\(name): \(source) links to \(type.name) through "
                                + "\(links.joined(separator: " and ")); name the one it lists in "
                                + "static var originProperties = [\"\(name)\": \"\(links[0])\"]")
                }
                resolved[index].linkingObjects.append(
                    LinkingObjectsProperty(name, originType: source, originProperty: origin))
            }
        }
        return resolved
    }

    /// Gives `properties` their defaults: those `declared` (``Model/defaultValues``), and where it gives none, the
    /// declaration's constant initial values (``Model/initialValues``) as the property stores them. Initial values
    /// that are not single values (a list with elements, an embedded object) are no defaults (rule 3), nor are those of
    /// names that are no property (a model with its own coding keys).
    private func applyDefaults(
        _ properties: inout [Property], declared: [String: Value], initial: [String: any Encodable], of type: String,
        primaryKey: String?
    ) throws {
        for name in declared.keys.sorted() where !properties.contains(where: { $0.name == name }) {
            throw TributaryError(
                .schemaMismatch, "\(type) declares a default for '\(name)', which is not one of its properties")
        }
        let known = Schema(version: 0, types: types)
        for index in properties.indices where properties[index].name != primaryKey {
            let property = properties[index]
            if let value = declared[property.name] {
                properties[index].defaultValue = value
                continue
            }
            guard let initial = initial[property.name] else { continue }
            let node: TreeNode.Resolved
            do {
                node = try TreeEncoder.encode(initial, codingPath: []).resolved
            } catch {
                throw TributaryError(
                    .schemaMismatch, "the initial value of \(type).\(property.name) does not encode: \(error)")
            }
            // A value that does not fit the property is the probe's to report; an empty list or a null is what the
            // property reads without a default.
            guard
                let value = try? ModelCoding.conform(
                    node, to: property, schema: known, declared: nil,
                    path: "\(type).\(property.name)"),
                value.isSingleValue, !value.isNull
            else { continue }
            properties[index].defaultValue = value
        }
    }

    mutating func probe(_ type: any Decodable.Type, typeName: String) throws -> [Property] {
        let recorder = ProbeRecorder()
        do {
            _ = try type.init(from: ProbeDecoder(recorder: recorder, codingPath: []))
        } catch let error as TributaryError {
            throw error
        } catch {
            if recorder.properties.isEmpty {
                throw TributaryError(
                    .schemaMismatch,
                    "cannot derive the schema of \(typeName) from its Codable conformance: \(error). "
                        + "Use stored properties of supported types (String, Int, Double, Bool, Date, Data, UUID, ObjectID, "
                        + "arrays, optionals, EmbeddedModel, Link)")
            }
            // The properties it would have read after the throw are not known: a schema without them would drop
            // their values from every write.
            throw TributaryError(
                .schemaMismatch,
                "cannot derive the schema of \(typeName): its init(from:) threw after reading "
                    + "\(recorder.properties.map(\.name).joined(separator: ", ")), so its other properties are not known: \(error). "
                    + "If it validates what it decodes, skip that when decoder.userInfo[.tributarySchemaProbe] is true: "
                    + "the schema is read by decoding placeholder values")
        }
        if let problem = recorder.problem {
            throw TributaryError(.schemaMismatch, "\(typeName).\(problem)")
        }
        if !recorder.linkingObjects.isEmpty {
            guard type is any Model.Type else {
                throw TributaryError(
                    .schemaMismatch,
                    "\(typeName).\(recorder.linkingObjects[0].name) is LinkingObjects, but an embedded object cannot be "
                        + "linked to: only a Model can list the objects linking to it")
            }
            linkingObjects[typeName] = recorder.linkingObjects
        }
        for embedded in recorder.embeddedTypes { try addEmbedded(embedded) }
        return recorder.properties
    }
}

/// What the probing decoder learned. A class, so the nested decoders share it.
final class ProbeRecorder {
    var properties: [Property] = []
    var embeddedTypes: [any EmbeddedModel.Type] = []
    /// The ``LinkingObjects`` properties: computed, not stored.
    var linkingObjects: [(name: String, source: String)] = []
    var problem: String?

    func record(_ name: String, _ type: Any.Type, optional: Bool) {
        guard !properties.contains(where: { $0.name == name }) else { return }
        if let computed = type as? any LinkingObjectsValue.Type {
            if !linkingObjects.contains(where: { $0.name == name }) {
                linkingObjects.append((name, computed.sourceTypeName))
            }
            return
        }
        // `[String: T]`: a dictionary of what T stores (a scalar, a mixed Value, optional or not; an optional link or
        // embedded object).
        let dictionary =
            (type as? any DictionaryValue.Type)
            ?? (type as? any OptionalValue.Type).flatMap {
                $0.wrappedType as? any DictionaryValue.Type
            }
        if let dictionary {
            var element = dictionary.valueType
            var elementOptional = false
            if let wrapped = element as? any OptionalValue.Type {
                element = wrapped.wrappedType
                elementOptional = true
            }
            guard let (kind, isList, _) = Self.describe(element), !isList else {
                if problem == nil {
                    problem =
                        "\(name) is a dictionary of \(dictionary.valueType), which cannot be stored; a dictionary holds "
                        + "String, Int, Double, Decimal, Bool, Date, Data, UUID, ObjectID, Value, Link or EmbeddedModel "
                        + "values"
                }
                return
            }
            if case .link(let target) = kind, !elementOptional {
                if problem == nil {
                    problem =
                        "\(name) is a dictionary of Link<\(target)>: make its values optional ([String: Link<\(target)>?]),"
                        + " as a link whose target is deleted reads as nil under its key"
                }
                return
            }
            if case .embedded(let target) = kind {
                guard elementOptional else {
                    if problem == nil {
                        problem =
                            "\(name) is a dictionary of \(target): make its values optional ([String: \(target)?]), as "
                            + "Realm's dictionaries of embedded objects are"
                    }
                    return
                }
                if let embedded = Self.embeddedType(element) { embeddedTypes.append(embedded) }
            }
            properties.append(Property(name, kind, optional: elementOptional, dictionary: true))
            return
        }
        guard let (kind, isList, elementOptional) = Self.describe(type) else {
            if problem == nil {
                problem =
                    "\(name) has type \(type), which cannot be stored; use String, Int, Double, Decimal, Bool, Date, "
                    + "Data, UUID, ObjectID, an EmbeddedModel, a Link, or an array, set or optional of those"
            }
            return
        }
        if case .embedded = kind, let embedded = Self.embeddedType(type) { embeddedTypes.append(embedded) }
        if isList {
            let set = type is any SetValue.Type || (type as? any OptionalValue.Type)?.wrappedType is any SetValue.Type
            properties.append(Property(name, kind, optional: elementOptional, list: true, set: set))
        } else {
            properties.append(Property(name, kind, optional: optional))
        }
    }

    static func embeddedType(_ type: Any.Type) -> (any EmbeddedModel.Type)? {
        if let embedded = type as? any EmbeddedModel.Type { return embedded }
        if let list = type as? any ListValue.Type { return embeddedType(list.elementType) }
        if let optional = type as? any OptionalValue.Type { return embeddedType(optional.wrappedType) }
        return nil
    }

    /// The kind of a Swift type: (kind, is a list, elements optional).
    static func describe(_ type: Any.Type) -> (PropertyKind, Bool, Bool)? {
        if let scalar = scalarType(type) { return (.scalar(scalar), false, false) }
        if let link = type as? any LinkValue.Type { return (.link(link.targetTypeName), false, false) }
        if let embedded = type as? any EmbeddedModel.Type { return (.embedded(embedded.typeName), false, false) }
        if let list = type as? any ListValue.Type {
            var element = list.elementType
            var optional = false
            if let wrapped = element as? any OptionalValue.Type {
                element = wrapped.wrappedType
                optional = true
            }
            guard let (kind, isList, _) = describe(element), !isList else { return nil }
            return (kind, true, optional)
        }
        if let raw = type as? any PersistableEnum.Type, let scalar = scalarType(raw.rawType) {
            return (.scalar(scalar), false, false)
        }
        return nil
    }

    static func scalarType(_ type: Any.Type) -> ScalarType? {
        switch type {
        case is String.Type: .string
        case is Bool.Type: .bool
        case is Int.Type, is Int64.Type, is Int32.Type, is Int16.Type, is Int8.Type, is UInt32.Type, is UInt16.Type,
            is UInt8.Type:
            .int
        case is Double.Type, is Float.Type: .double
        case is Date.Type: .date
        case is Data.Type: .data
        case is UUID.Type: .uuid
        case is ObjectID.Type: .objectId
        case is Decimal.Type: .decimal
        // A mixed property: any single value.
        case is Value.Type: .mixed
        default: nil
        }
    }
}

/// Arrays, seen through a protocol so the probe can ask for their element type.
protocol ListValue {
    static var elementType: Any.Type { get }
    static var empty: Self { get }
}

extension Array: ListValue {
    static var elementType: Any.Type { Element.self }
    static var empty: [Element] { [] }
}

/// Dictionaries with `String` keys, stored as dictionary properties (Realm's `Map`).
protocol DictionaryValue {
    static var valueType: Any.Type { get }
    static var empty: Self { get }
}

extension Dictionary: DictionaryValue where Key == String {
    static var valueType: Any.Type { Value.self }
    static var empty: [String: Value] { [:] }
}

/// Sets, stored as set properties (Realm's `MutableSet`).
protocol SetValue {}

extension Set: ListValue, SetValue {
    static var elementType: Any.Type { Element.self }
    static var empty: Set<Element> { [] }
}

/// Optionals, seen through a protocol.
protocol OptionalValue {
    static var wrappedType: Any.Type { get }
}

extension Optional: OptionalValue {
    static var wrappedType: Any.Type { Wrapped.self }
}

/// An enum stored by its raw value (a `String` or an integer), like Realm's `PersistableEnum`.
///
/// ```swift
/// enum Status: String, PersistableEnum { case open, done }
/// ```
public protocol PersistableEnum: RawRepresentable, CaseIterable, Codable, Sendable {}

extension PersistableEnum {
    /// The type of the raw value the enum is stored as.
    static var rawType: Any.Type { RawValue.self }
    /// A value for the schema probe to decode.
    static var placeholder: Self? { allCases.first }
}

struct ProbeDecoder: Decoder {
    let recorder: ProbeRecorder
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [.tributarySchemaProbe: true] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(ProbeKeyedContainer<Key>(recorder: recorder, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        ProbeUnkeyedContainer(codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        ProbeSingleValueContainer(recorder: recorder, codingPath: codingPath)
    }
}

/// Placeholder values for the probe to return.
enum ProbePlaceholder {
    static func value<T: Decodable>(_ type: T.Type, recorder: ProbeRecorder, codingPath: [any CodingKey]) throws -> T {
        let placeholder: Any? =
            switch type {
            case is String.Type: ""
            case is Bool.Type: false
            case is Int.Type: 0 as Int
            case is Int64.Type: 0 as Int64
            case is Int32.Type: 0 as Int32
            case is Int16.Type: 0 as Int16
            case is Int8.Type: 0 as Int8
            case is UInt32.Type: 0 as UInt32
            case is UInt16.Type: 0 as UInt16
            case is UInt8.Type: 0 as UInt8
            case is Double.Type: 0 as Double
            case is Float.Type: 0 as Float
            case is Date.Type: Date(timeIntervalSince1970: 0)
            case is Data.Type: Data()
            case is UUID.Type: UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
            case is ObjectID.Type: ObjectID(bytes: [UInt8](repeating: 0, count: 12))
            case is Decimal.Type: Decimal(0)
            case is Value.Type: Value.null
            default: nil
            }
        if let placeholder = placeholder as? T { return placeholder }
        if let link = type as? any LinkValue.Type, let value = link.init(linkTo: .string("")) as? T { return value }
        if let list = type as? any ListValue.Type, let value = list.empty as? T { return value }
        if let dictionary = type as? any DictionaryValue.Type, let value = dictionary.empty as? T { return value }
        if let probe = type as? any PersistableEnum.Type, let value = probe.placeholder as? T { return value }
        if type is any Model.Type {
            throw TributaryError(
                .schemaMismatch,
                "\(codingPath.map(\.stringValue).joined(separator: ".")) holds a Model (\(type)) directly; "
                    + "use Link<\(type)> to refer to another object, or make it an EmbeddedModel")
        }
        // An embedded model, or a type that decodes itself from a single value: probe it with a fresh recorder, so
        // its fields do not land among the parent's.
        do {
            return try T(from: ProbeDecoder(recorder: ProbeRecorder(), codingPath: codingPath))
        } catch {
            throw TributaryError(
                .schemaMismatch,
                "\(codingPath.map(\.stringValue).joined(separator: ".")) has type \(type), which cannot be stored"
                    + (type is any RawRepresentable.Type ? "; make the enum conform to PersistableEnum" : ""))
        }
    }
}

struct ProbeKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let recorder: ProbeRecorder
    let codingPath: [any CodingKey]
    var allKeys: [Key] { [] }

    func contains(_ key: Key) -> Bool { true }
    func decodeNil(forKey key: Key) throws -> Bool { false }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        if codingPath.isEmpty { recorder.record(key.stringValue, type, optional: false) }
        return try ProbePlaceholder.value(type, recorder: recorder, codingPath: codingPath + [key])
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        if codingPath.isEmpty { recorder.record(key.stringValue, type, optional: true) }
        return try ProbePlaceholder.value(type, recorder: recorder, codingPath: codingPath + [key])
    }

    // The concrete overloads route to the generic ones, so each records its key once.
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try decodeGeneric(type, key) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try decodeGeneric(type, key) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try decodeGeneric(type, key) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try decodeGeneric(type, key) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try decodeGeneric(type, key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try decodeGeneric(type, key) }
    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? { try decodeOptional(type, key) }
    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? { try decodeOptional(type, key) }
    func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? { try decodeOptional(type, key) }
    func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? { try decodeOptional(type, key) }
    func decodeIfPresent(_ type: Int64.Type, forKey key: Key) throws -> Int64? { try decodeOptional(type, key) }

    private func decodeGeneric<T: Decodable>(_ type: T.Type, _ key: Key) throws -> T {
        if codingPath.isEmpty { recorder.record(key.stringValue, type, optional: false) }
        return try ProbePlaceholder.value(type, recorder: recorder, codingPath: codingPath + [key])
    }

    private func decodeOptional<T: Decodable>(_ type: T.Type, _ key: Key) throws -> T? {
        if codingPath.isEmpty { recorder.record(key.stringValue, type, optional: true) }
        return try ProbePlaceholder.value(type, recorder: recorder, codingPath: codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        KeyedDecodingContainer(
            ProbeKeyedContainer<NestedKey>(recorder: ProbeRecorder(), codingPath: codingPath + [key]))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        ProbeUnkeyedContainer(codingPath: codingPath + [key])
    }

    func superDecoder() throws -> any Decoder { ProbeDecoder(recorder: ProbeRecorder(), codingPath: codingPath) }
    func superDecoder(forKey key: Key) throws -> any Decoder {
        ProbeDecoder(recorder: ProbeRecorder(), codingPath: codingPath + [key])
    }
}

struct ProbeUnkeyedContainer: UnkeyedDecodingContainer {
    let codingPath: [any CodingKey]
    var count: Int? { 0 }
    var isAtEnd: Bool { true }
    var currentIndex: Int { 0 }

    mutating func decodeNil() throws -> Bool { true }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        throw DecodingError.valueNotFound(type, .init(codingPath: codingPath, debugDescription: "probe: empty list"))
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        KeyedDecodingContainer(ProbeKeyedContainer<NestedKey>(recorder: ProbeRecorder(), codingPath: codingPath))
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { self }
    mutating func superDecoder() throws -> any Decoder {
        ProbeDecoder(recorder: ProbeRecorder(), codingPath: codingPath)
    }
}

struct ProbeSingleValueContainer: SingleValueDecodingContainer {
    let recorder: ProbeRecorder
    let codingPath: [any CodingKey]

    func decodeNil() -> Bool { false }
    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try ProbePlaceholder.value(type, recorder: recorder, codingPath: codingPath)
    }
}
