public import Foundation

// The App Services / Atlas Device Sync JSON schema form (its `title`, `bsonType`, `properties`,
// `required`), read into and written from the one ``Schema`` model the library and the daemon share.

extension Schema {
    /// Reads a schema in the App Services (Atlas Device Sync) JSON form.
    ///
    /// The input is one schema object, an array of them, or an object mapping type names to schema objects:
    ///
    /// ```swift
    /// let schema = try Schema(json: """
    ///     {
    ///       "title": "Project",
    ///       "bsonType": "object",
    ///       "required": ["isPinned"],
    ///       "properties": {
    ///         "_id": { "bsonType": "uuid" },
    ///         "isPinned": { "bsonType": "bool" }
    ///       }
    ///     }
    ///     """)
    /// ```
    ///
    /// ## Object types
    ///
    /// Each schema object has a `title` (the type name; in the mapping form the key may stand in for it), an
    /// optional `bsonType` that must be `"object"`, `properties` and `required`. A property not listed in
    /// `required` is optional. The primary key is `_id`; it is always required, listed or not (published
    /// `Project` schemas do not list it). Keys this reader does not know (`description`, `minLength`, …) are ignored,
    /// except keys starting with `x-tributary-`, which must be one of the extensions below.
    ///
    /// ## Property types
    ///
    /// | `bsonType` | property |
    /// | --- | --- |
    /// | `string` | string |
    /// | `int`, `long` | int (64-bit) |
    /// | `double` | double |
    /// | `float` | float (32-bit) |
    /// | `decimal` | decimal (Decimal128) |
    /// | `bool` | bool |
    /// | `date` | date |
    /// | `objectId` | objectId |
    /// | `uuid` | uuid |
    /// | `binData` | data |
    /// | `object` with a `title` and `properties` | embedded object of type `title` |
    /// | `array` with `items` | list of what `items` describes |
    /// | `array` with `items` and `uniqueItems: true` | set of what `items` describes (not of embedded objects) |
    /// | `object` with `additionalProperties` | dictionary of what `additionalProperties` describes (scalars, embedded objects) |
    ///
    /// The BSON types Tributary cannot store (`timestamp`, `regex`, …) are refused with
    /// ``SchemaError/Code/unsupportedType``, as are dictionaries of objects or lists, and lists of lists.
    ///
    /// A nested `object` is an embedded type; the same `title` may be defined in several places (RChat's
    /// schemas repeat `Photo` in three places) as long as the definitions agree. Lists are never optional and are
    /// empty by default; listing one in `required` changes nothing. List elements are required unless
    /// `items.bsonType` is an array naming `"null"` as well, such as `["double", "null"]`. To-one links and
    /// embedded objects are always optional (their target may be erased; docs/MergeSemantics.md, rule 7).
    ///
    /// ## Links
    ///
    /// As in App Services, a link is a property holding the target's primary key (its `bsonType` is the
    /// target's `_id` type, or an `array` of it for a list of links) plus an entry in the schema object's
    /// `relationships`, keyed by property name:
    ///
    /// ```json
    /// "relationships": {
    ///   "owner": { "ref": "#/relationship/mongodb-atlas/tributary/User", "foreign_key": "_id", "is_list": false }
    /// }
    /// ```
    ///
    /// The target type is the last component of `ref`; `foreign_key` must be the target's primary key and
    /// `is_list` must say whether the property is an array. App Services keeps relationships in a file of
    /// their own; here they sit next to `properties` of the (top-level or embedded) type that holds them.
    ///
    /// ## Tributary extensions
    ///
    /// - `"x-tributary-indexed": true` on a property: the property is indexed.
    /// - `"default": value` on a property: the value a create fills in (JSON Schema's own keyword). Values are
    ///   plain JSON in the property's type: numbers, strings, booleans, `null`, arrays for lists, objects for
    ///   embedded objects, the target's primary key for links; a date is an ISO 8601 string (millisecond
    ///   precision) or a number of seconds since 1970, data is base64, a uuid its usual string, an objectId 24
    ///   hexadecimal digits, and a double that JSON cannot write is `{"$numberDouble": "NaN"}` (or
    ///   `"Infinity"`, `"-Infinity"`).
    /// - `"x-tributary-primaryKey": "name"` on a top-level type: the primary key, when it is not `_id`.
    /// - `"x-tributary-embedded": true` on a top-level schema object: an embedded type (``jsonString()`` writes
    ///   these for embedded types that no other type holds, and for those held too deep to write nested, so that
    ///   every schema survives a round trip).
    /// - A nested `object` with a `title` and no `properties` refers to an embedded type defined elsewhere in
    ///   the document (``jsonString()`` writes these for recursive types, repeated uses, and types held too deep).
    ///
    /// - Parameters:
    ///   - json: UTF-8 JSON text.
    ///   - version: The schema version (the JSON form carries none).
    /// - Throws: ``SchemaError`` whose message starts with the JSON path at fault, for example
    ///   `schema[2].properties.author.bsonType: unknown bsonType 'strng'`: `.invalidJSON` for malformed JSON
    ///   or a malformed schema, `.unsupportedType` for a type Tributary cannot store, `.conflict` for two
    ///   different definitions of one type, `.unknownType` for a link or reference to a missing type,
    ///   `.missingPrimaryKey` and `.invalidDefault` with their paths; then any error of ``validateDeclaration()``
    ///   (including `.invalidDefault` for a list or embedded-object default).
    public init(json: [UInt8], version: UInt64 = 0) throws(SchemaError) {
        var parser = JSONParser(json)
        let root = try parser.parseDocument()
        var reader = SchemaJSONReader()
        try reader.read(root)
        self = try reader.finish(version: version)
    }

    /// Reads a schema in the App Services JSON form; see ``init(json:version:)-([UInt8],_)``.
    public init(json: String, version: UInt64 = 0) throws(SchemaError) {
        try self.init(json: Array(json.utf8), version: version)
    }

    /// Reads a schema in the App Services JSON form; see ``init(json:version:)-([UInt8],_)``.
    public init(json: Data, version: UInt64 = 0) throws(SchemaError) {
        try self.init(json: [UInt8](json), version: version)
    }

    /// The schema in the App Services JSON form, as UTF-8 bytes; see ``jsonString()``.
    public func jsonData() -> Data {
        Data(jsonString().utf8)
    }

    /// The schema in the App Services JSON form: an array of schema objects, pretty-printed.
    ///
    /// Top-level types come in name order, each self-contained as App Services wants it: the embedded types it
    /// holds are written nested inside it, the first time it uses them, and referred to by `title` after that.
    /// Embedded types that no type holds come last, marked `"x-tributary-embedded": true`, and so do embedded
    /// types held more than 32 levels down (a chain a peer's changesets can make as long as they like), which are
    /// then referred to by `title` where they are held: such a schema object is not self-contained. Properties keep
    /// their declaration order, so ``init(json:version:)-([UInt8],_)`` gives back an equal schema (with the
    /// same version) for every schema that passes ``validate()``; a NaN default comes back as NaN, which `==`
    /// does not hold equal to itself. An int is written as `long`, Tributary's ints being 64-bit. A date
    /// default is written in ISO 8601 when that holds it exactly (whole milliseconds), else as seconds since
    /// 1970.
    ///
    /// - Complexity: O(types × size of the schema).
    public func jsonString() -> String {
        var writer = SchemaJSONWriter(schema: self)
        return writer.document().rendered()
    }
}

// MARK: - Reading

/// The BSON types that exist but that Tributary cannot store, with advice.
private let unsupportedBSONTypes: [String: String] = [
    "number": "'number' (any numeric type) is not supported; use int, long or double",
    "timestamp": "BSON timestamps are not supported; use date",
    "regex": "BSON regular expressions are not supported; use string",
    "javascript": "BSON javascript is not supported; use string",
    "javascriptWithScope": "BSON javascript is not supported; use string",
    "symbol": "BSON symbols are not supported; use string",
    "dbPointer": "BSON dbPointer is not supported; use a link (relationships)",
    "minKey": "BSON minKey is not supported",
    "maxKey": "BSON maxKey is not supported",
    "undefined": "BSON undefined is not supported",
    "null": "a property cannot only be null; write [\"type\", \"null\"] for an optional list element",
]

private let scalarBSONTypes: [String: ScalarType] = [
    "string": .string, "int": .int, "long": .int, "double": .double, "bool": .bool, "date": .date,
    "objectId": .objectId, "uuid": .uuid, "binData": .data, "decimal": .decimal,
    "float": .float, "mixed": .mixed,
]

private let knownExtensions: Set<String> = [
    "x-tributary-indexed", "x-tributary-primaryKey", "x-tributary-embedded",
]

private struct SchemaJSONReader {
    /// One object type as read, with where it was first defined and its raw defaults (converted at the end,
    /// once every link target is known).
    struct Definition {
        var type: ObjectSchema
        var path: String
        var defaults: [(property: String, json: JSONValue, path: String)]
    }

    var definitions: [String: Definition] = [:]
    /// Type names in the order they were first defined (never Dictionary order).
    var order: [String] = []
    /// Nested objects that refer to an embedded type by title, to check at the end.
    var references: [(type: String, path: String)] = []
    /// Links, to check against their targets at the end.
    var links: [(type: String, property: String, target: String, foreignKey: String, path: String)] = []

    mutating func read(_ root: JSONValue) throws(SchemaError) {
        switch root {
        case .array(let elements):
            for (index, element) in elements.enumerated() {
                try readType(element, path: "schema[\(index)]", name: nil, topLevel: true)
            }
        case .object(let members):
            let looksLikeSchema = members.contains { ["title", "bsonType", "properties"].contains($0.key) }
            if looksLikeSchema {
                try readType(root, path: "schema", name: nil, topLevel: true)
            } else {
                // The mapping form: { "User": { ... }, "Chatster": { ... } }.
                for member in members {
                    try readType(member.value, path: jsonPath("schema", member.key), name: member.key, topLevel: true)
                }
            }
        default:
            throw invalid(
                "schema",
                "expected a schema object, an array of schema objects, or an object mapping type names to schemas; "
                    + "got \(root.kindName)"
            )
        }
    }

    /// Reads one object type (top-level, or nested as an embedded type) and returns its name.
    @discardableResult
    mutating func readType(
        _ json: JSONValue,
        path: String,
        name keyName: String?,
        topLevel: Bool
    )
        throws(SchemaError) -> String
    {
        guard case .object(let members) = json else {
            throw invalid(path, "expected a schema object, got \(json.kindName)")
        }
        for member in members where member.key.hasPrefix("x-tributary-") && !knownExtensions.contains(member.key) {
            throw invalid(jsonPath(path, member.key), "unknown Tributary extension '\(member.key)'")
        }
        if let bsonType = json["bsonType"], topLevel {
            guard case .string("object") = bsonType else {
                throw invalid(jsonPath(path, "bsonType"), "a schema's bsonType must be \"object\"")
            }
        }
        let title: String
        switch (json["title"], keyName) {
        case (.string(let text)?, let key?) where text != key:
            throw invalid(jsonPath(path, "title"), "title '\(text)' differs from its key '\(key)'")
        case (.string(let text)?, _): title = text
        case (let other?, _): throw invalid(jsonPath(path, "title"), "expected a string, got \(other.kindName)")
        case (nil, let key?): title = key
        case (nil, nil):
            throw invalid(
                jsonPath(path, "title"),
                topLevel
                    ? "missing; every schema needs a title, its type name"
                    : "missing; a nested object needs a title, the name of its embedded type"
            )
        }

        var embedded = !topLevel
        if let flag = json["x-tributary-embedded"] {
            guard topLevel, case .bool(let value) = flag else {
                throw invalid(
                    jsonPath(path, "x-tributary-embedded"),
                    topLevel ? "expected true or false" : "only a top-level schema can be marked embedded"
                )
            }
            embedded = value
        }

        guard let propertiesJSON = json["properties"] else {
            if topLevel { throw invalid(jsonPath(path, "properties"), "missing") }
            // A reference to an embedded type defined elsewhere in the document.
            references.append((title, path))
            return title
        }
        guard case .object(let propertyMembers) = propertiesJSON else {
            throw invalid(jsonPath(path, "properties"), "expected an object, got \(propertiesJSON.kindName)")
        }

        var required = Set<String>()
        if let requiredJSON = json["required"] {
            let requiredPath = jsonPath(path, "required")
            guard case .array(let names) = requiredJSON else {
                throw invalid(requiredPath, "expected an array of property names, got \(requiredJSON.kindName)")
            }
            for (index, nameJSON) in names.enumerated() {
                guard case .string(let name) = nameJSON else {
                    throw invalid("\(requiredPath)[\(index)]", "expected a property name, got \(nameJSON.kindName)")
                }
                guard propertyMembers.contains(where: { $0.key == name }) else {
                    throw invalid("\(requiredPath)[\(index)]", "'\(name)' is not in properties")
                }
                required.insert(name)
            }
        }

        var primaryKey: String? = nil
        if !embedded {
            primaryKey = "_id"
            if let keyJSON = json["x-tributary-primaryKey"] {
                guard case .string(let key) = keyJSON else {
                    throw invalid(jsonPath(path, "x-tributary-primaryKey"), "expected a property name")
                }
                primaryKey = key
            }
        } else if json["x-tributary-primaryKey"] != nil {
            throw invalid(jsonPath(path, "x-tributary-primaryKey"), "an embedded type has no primary key")
        }

        var properties: [Property] = []
        var defaults: [(property: String, json: JSONValue, path: String)] = []
        for member in propertyMembers {
            let propertyPath = jsonPath(jsonPath(path, "properties"), member.key)
            // The primary key is required whether or not `required` lists it (App Services treats `_id` so).
            let isRequired = required.contains(member.key) || member.key == primaryKey
            var property = try readProperty(member.value, name: member.key, path: propertyPath, required: isRequired)
            if member.key == primaryKey, case .scalar = property.kind, !property.isList { property.isOptional = false }
            if let value = member.value["default"] {
                defaults.append((member.key, value, jsonPath(propertyPath, "default")))
            }
            properties.append(property)
        }
        if let primaryKey, !properties.contains(where: { $0.name == primaryKey }) {
            throw SchemaError(
                .missingPrimaryKey,
                "\(jsonPath(path, "properties")): type '\(title)' has no primary key property '\(primaryKey)'"
            )
        }

        if let relationshipsJSON = json["relationships"] {
            try readRelationships(
                relationshipsJSON,
                type: title,
                properties: &properties,
                path: jsonPath(path, "relationships")
            )
        }

        let type =
            embedded
            ? ObjectSchema.embedded(title, properties: properties)
            : ObjectSchema(name: title, primaryKey: primaryKey, properties: properties)
        try register(Definition(type: type, path: path, defaults: defaults))
        return title
    }

    mutating func readProperty(
        _ json: JSONValue,
        name: String,
        path: String,
        required: Bool
    ) throws(SchemaError)
        -> Property
    {
        guard case .object(let members) = json else {
            throw invalid(path, "expected a property schema object, got \(json.kindName)")
        }
        for member in members where member.key.hasPrefix("x-tributary-") && !knownExtensions.contains(member.key) {
            throw invalid(jsonPath(path, member.key), "unknown Tributary extension '\(member.key)'")
        }
        var indexed = false
        if let flag = json["x-tributary-indexed"] {
            guard case .bool(let value) = flag else {
                throw invalid(jsonPath(path, "x-tributary-indexed"), "expected true or false, got \(flag.kindName)")
            }
            indexed = value
        }
        let (bsonType, nullable) = try bsonTypeOf(json, path: path)
        switch bsonType {
        case "array":
            // `uniqueItems`: a set (Realm's MutableSet).
            let set = json["uniqueItems"] == .bool(true)
            let itemsPath = jsonPath(path, "items")
            guard let items = json["items"] else { throw invalid(itemsPath, "missing; an array needs items") }
            guard case .object = items else { throw invalid(itemsPath, "expected an object, got \(items.kindName)") }
            let (itemType, itemNullable) = try bsonTypeOf(items, path: itemsPath)
            switch itemType {
            case "array":
                throw SchemaError(
                    .unsupportedType,
                    "\(jsonPath(itemsPath, "bsonType")): lists of lists are not supported"
                )
            case "object":
                if set {
                    throw SchemaError(
                        .unsupportedType,
                        "\(jsonPath(path, "uniqueItems")): a set cannot hold embedded objects; use an array")
                }
                let typeName = try readNested(items, path: itemsPath)
                return Property(name, .embedded(typeName), optional: itemNullable, list: true, indexed: indexed)
            default:
                let scalar = try scalarType(itemType, path: jsonPath(itemsPath, "bsonType"))
                return Property(
                    name, .scalar(scalar), optional: itemNullable, list: true, set: set, indexed: indexed)
            }
        case "object":
            // `additionalProperties` without a title or properties: a dictionary of what it describes.
            if json["title"] == nil && json["properties"] == nil, let values = json["additionalProperties"] {
                let valuesPath = jsonPath(path, "additionalProperties")
                guard case .object = values else {
                    throw invalid(valuesPath, "expected an object, got \(values.kindName)")
                }
                let (valueType, valueNullable) = try bsonTypeOf(values, path: valuesPath)
                if valueType == "object" {
                    // Embedded objects under keys (each may be null).
                    let typeName = try readNested(values, path: valuesPath)
                    return Property(name, .embedded(typeName), optional: true, dictionary: true, indexed: indexed)
                }
                guard valueType != "array" else {
                    throw SchemaError(
                        .unsupportedType,
                        "\(jsonPath(valuesPath, "bsonType")): a dictionary of \(valueType)s is not supported")
                }
                let scalar = try scalarType(valueType, path: jsonPath(valuesPath, "bsonType"))
                return Property(name, .scalar(scalar), optional: valueNullable, dictionary: true, indexed: indexed)
            }
            let typeName = try readNested(json, path: path)
            return Property(name, .embedded(typeName), list: false, indexed: indexed)
        default:
            let scalar = try scalarType(bsonType, path: jsonPath(path, "bsonType"))
            return Property(name, .scalar(scalar), optional: !required || nullable, indexed: indexed)
        }
    }

    /// A nested `object`: an embedded type (defined here, or referred to by title).
    mutating func readNested(_ json: JSONValue, path: String) throws(SchemaError) -> String {
        if json["title"] == nil && json["properties"] == nil {
            throw SchemaError(
                .unsupportedType,
                "\(path): an object needs a title and properties (an embedded object) or additionalProperties (a "
                    + "dictionary)"
            )
        }
        return try readType(json, path: path, name: nil, topLevel: false)
    }

    /// The `bsonType` of a property or of `items`: a string, or an array of one type and `"null"`.
    func bsonTypeOf(_ json: JSONValue, path: String) throws(SchemaError) -> (type: String, nullable: Bool) {
        let typePath = jsonPath(path, "bsonType")
        switch json["bsonType"] {
        case .string(let type)?: return (type, false)
        case .array(let elements)?:
            var types: [String] = []
            var nullable = false
            for (index, element) in elements.enumerated() {
                guard case .string(let type) = element else {
                    throw invalid("\(typePath)[\(index)]", "expected a bsonType name, got \(element.kindName)")
                }
                if type == "null" { nullable = true } else { types.append(type) }
            }
            guard types.count == 1 else {
                throw SchemaError(
                    .unsupportedType,
                    "\(typePath): a property has one type (optionally with \"null\"); got \(types.count) types"
                )
            }
            return (types[0], nullable)
        case nil: throw invalid(typePath, "missing")
        case let other?: throw invalid(typePath, "expected a string, got \(other.kindName)")
        }
    }

    func scalarType(_ name: String, path: String) throws(SchemaError) -> ScalarType {
        if let scalar = scalarBSONTypes[name] { return scalar }
        if let advice = unsupportedBSONTypes[name] { throw SchemaError(.unsupportedType, "\(path): \(advice)") }
        throw invalid(path, "unknown bsonType '\(name)'")
    }

    mutating func readRelationships(
        _ json: JSONValue,
        type: String,
        properties: inout [Property],
        path: String
    ) throws(SchemaError) {
        guard case .object(let members) = json else {
            throw invalid(path, "expected an object mapping property names to relationships, got \(json.kindName)")
        }
        for member in members {
            let entryPath = jsonPath(path, member.key)
            guard let index = properties.firstIndex(where: { $0.name == member.key }) else {
                throw invalid(entryPath, "'\(member.key)' is not in properties")
            }
            guard case .object = member.value else {
                throw invalid(entryPath, "expected a relationship object, got \(member.value.kindName)")
            }
            guard case .string(let ref)? = member.value["ref"] else {
                throw invalid(
                    jsonPath(entryPath, "ref"),
                    "missing; expected \"#/relationship/<service>/<database>/<Type>\""
                )
            }
            let target = String(ref.split(separator: "/", omittingEmptySubsequences: false).last ?? "")
            guard !target.isEmpty else { throw invalid(jsonPath(entryPath, "ref"), "names no target type") }
            var foreignKey = "_id"
            if let keyJSON = member.value["foreign_key"] {
                guard case .string(let key) = keyJSON else {
                    throw invalid(jsonPath(entryPath, "foreign_key"), "expected a property name")
                }
                foreignKey = key
            }
            var isList = false
            if let listJSON = member.value["is_list"] {
                guard case .bool(let value) = listJSON else {
                    throw invalid(jsonPath(entryPath, "is_list"), "expected true or false")
                }
                isList = value
            }
            let property = properties[index]
            guard isList == property.isList else {
                throw invalid(
                    jsonPath(entryPath, "is_list"),
                    "is \(isList), but property '\(property.name)' \(property.isList ? "is" : "is not") an array"
                )
            }
            guard case .scalar(let keyType) = property.kind else {
                throw invalid(
                    entryPath,
                    "property '\(property.name)' must hold the target's primary key, not an object"
                )
            }
            links.append((type, property.name, target, foreignKey, entryPath))
            properties[index] = Property(
                property.name,
                .link(target),
                optional: property.isList && property.isOptional,
                list: property.isList,
                set: property.isSet,
                dictionary: property.isDictionary,
                indexed: property.isIndexed
            )
            // Remember the key type the JSON gave, to check against the target's primary key at the end.
            linkKeyTypes[entryPath] = keyType
        }
    }

    var linkKeyTypes: [String: ScalarType] = [:]

    mutating func register(_ definition: Definition) throws(SchemaError) {
        let name = definition.type.name
        guard let existing = definitions[name] else {
            definitions[name] = definition
            order.append(name)
            return
        }
        // A type may be defined more than once (published schemas repeat an embedded `Photo`) if the definitions agree.
        let sameDefaults =
            existing.defaults.count == definition.defaults.count
            && zip(existing.defaults, definition.defaults).allSatisfy {
                $0.property == $1.property && $0.json == $1.json
            }
        guard existing.type == definition.type, sameDefaults else {
            throw SchemaError(
                .conflict,
                "\(definition.path): type '\(name)' is defined differently at \(existing.path): "
                    + "there \(existing.type), here \(definition.type)"
            )
        }
    }

    func finish(version: UInt64) throws(SchemaError) -> Schema {
        for reference in references {
            guard let definition = definitions[reference.type] else {
                throw SchemaError(
                    .unknownType,
                    "\(reference.path): embedded type '\(reference.type)' is not defined in the schema"
                )
            }
            guard definition.type.isEmbedded else {
                throw SchemaError(
                    .invalidLink,
                    "\(reference.path): '\(reference.type)' is a top-level type, not an embedded one; "
                        + "link to it with relationships instead"
                )
            }
        }
        for link in links {
            guard let target = definitions[link.target]?.type else {
                throw SchemaError(.unknownType, "\(link.path).ref: type '\(link.target)' is not in the schema")
            }
            guard !target.isEmbedded, let key = target.primaryKeyProperty else {
                throw SchemaError(
                    .invalidLink,
                    "\(link.path).ref: '\(link.target)' is an embedded type; links need a top-level type"
                )
            }
            guard link.foreignKey == key.name else {
                throw invalid(
                    "\(link.path).foreign_key",
                    "'\(link.foreignKey)' is not the primary key of '\(link.target)' ('\(key.name)')"
                )
            }
            if case .scalar(let keyType) = key.kind, let given = linkKeyTypes[link.path], given != keyType {
                throw invalid(
                    link.path,
                    "property '\(link.type).\(link.property)' holds \(given), but the primary key of '\(link.target)' "
                        + "is \(keyType)"
                )
            }
        }

        var types: [ObjectSchema] = []
        for name in order {
            guard var definition = definitions[name] else { continue }
            for entry in definition.defaults {
                guard let index = definition.type.properties.firstIndex(where: { $0.name == entry.property }) else {
                    continue
                }
                let property = definition.type.properties[index]
                let value = try DefaultValues(definitions: definitions).value(
                    entry.json,
                    for: property,
                    path: entry.path,
                    depth: 0
                )
                if let problem = property.problem(with: value) {
                    throw SchemaError(.invalidDefault, "\(entry.path): \(problem)")
                }
                definition.type.properties[index].defaultValue = value
            }
            types.append(definition.type)
        }
        let schema = Schema(version: version, types: types)
        try schema.validateDeclaration()
        return schema
    }
}

// MARK: - Default values

private struct DefaultValues {
    let definitions: [String: SchemaJSONReader.Definition]

    func value(_ json: JSONValue, for property: Property, path: String, depth: Int) throws(SchemaError) -> Value {
        if case .null = json { return .null }
        guard property.isList else { return try element(json, kind: property.kind, path: path, depth: depth) }
        guard case .array(let elements) = json else {
            throw SchemaError(
                .invalidDefault,
                "\(path): expected an array for list '\(property.name)', got \(json.kindName)"
            )
        }
        var values: [Value] = []
        for (index, element) in elements.enumerated() {
            if case .null = element {
                values.append(.null)
            } else {
                values.append(try self.element(element, kind: property.kind, path: "\(path)[\(index)]", depth: depth))
            }
        }
        return .list(values)
    }

    private func mismatch(_ path: String, _ expected: String, _ json: JSONValue) -> SchemaError {
        SchemaError(.invalidDefault, "\(path): expected \(expected), got \(json.kindName)")
    }

    func element(_ json: JSONValue, kind: PropertyKind, path: String, depth: Int) throws(SchemaError) -> Value {
        switch kind {
        case .scalar(let type): return try scalar(json, type: type, path: path)
        case .link(let target):
            guard let key = definitions[target]?.type.primaryKeyProperty, case .scalar(let keyType) = key.kind else {
                throw SchemaError(.unknownType, "\(path): link target '\(target)' has no primary key")
            }
            guard let primaryKey = PrimaryKey(try scalar(json, type: keyType, path: path)) else {
                throw SchemaError(.invalidDefault, "\(path): '\(target)' has a primary key of type \(keyType)")
            }
            return .link(primaryKey)
        case .embedded(let typeName):
            guard depth < 32 else { throw SchemaError(.invalidDefault, "\(path): nests deeper than 32 levels") }
            guard let type = definitions[typeName]?.type else {
                throw SchemaError(.unknownType, "\(path): embedded type '\(typeName)' is not in the schema")
            }
            guard case .object(let members) = json else { throw mismatch(path, "an object (\(typeName))", json) }
            var fields: [String: Value] = [:]
            for member in members {
                guard let field = type[property: member.key] else {
                    throw SchemaError(
                        .invalidDefault,
                        "\(jsonPath(path, member.key)): embedded type '\(typeName)' has no such property"
                    )
                }
                fields[member.key] = try value(
                    member.value,
                    for: field,
                    path: jsonPath(path, member.key),
                    depth: depth + 1
                )
            }
            return .embedded(EmbeddedObject(type: typeName, fields: fields))
        }
    }

    func scalar(_ json: JSONValue, type: ScalarType, path: String) throws(SchemaError) -> Value {
        switch (type, json) {
        case (.mixed, .bool(let value)): return .bool(value)
        case (.mixed, .string(let text)): return .string(text)
        case (.mixed, .number(let text)):
            if let integer = Int64(text) { return .int(integer) }
            return try scalar(json, type: .double, path: path)
        case (.bool, .bool(let value)): return .bool(value)
        case (.int, .number(let text)):
            guard let value = Int64(text) else {
                throw SchemaError(.invalidDefault, "\(path): \(text) is not a 64-bit integer")
            }
            return .int(value)
        case (.double, .number), (.double, .object):
            guard let value = double(json) else {
                throw mismatch(path, "a number, or {\"$numberDouble\": \"NaN\" | \"Infinity\" | \"-Infinity\"}", json)
            }
            return .double(value)
        case (.string, .string(let text)): return .string(text)
        case (.data, .string(let text)):
            guard let data = Data(base64Encoded: text) else {
                throw SchemaError(.invalidDefault, "\(path): data defaults are base64 strings")
            }
            return .data(data)
        case (.date, .string(let text)):
            guard let date = parseISO8601(text) else {
                throw SchemaError(
                    .invalidDefault,
                    "\(path): '\(text)' is not an ISO 8601 date such as 2024-01-31T12:00:00.000Z"
                )
            }
            return .date(date)
        case (.date, .number), (.date, .object):
            // Seconds since 1970, for dates an ISO 8601 string cannot hold exactly.
            guard let seconds = double(json) else {
                throw mismatch(path, "an ISO 8601 date string or a number of seconds since 1970", json)
            }
            return .date(Date(timeIntervalSince1970: seconds))
        case (.uuid, .string(let text)):
            guard let uuid = UUID(uuidString: text) else {
                throw SchemaError(.invalidDefault, "\(path): '\(text)' is not a UUID")
            }
            return .uuid(uuid)
        case (.objectId, .string(let text)):
            guard let id = ObjectID(hex: text) else {
                throw SchemaError(.invalidDefault, "\(path): '\(text)' is not an objectId (24 hexadecimal digits)")
            }
            return .objectId(id)
        case (.decimal, .string(let text)), (.decimal, .number(let text)):
            guard let value = Decimal(parsing: text) else {
                throw SchemaError(.invalidDefault, "\(path): '\(text)' is not a decimal number")
            }
            return .decimal(value)
        case (.float, .number), (.float, .object):
            guard let value = double(json) else {
                throw mismatch(path, "a number, or {\"$numberDouble\": \"NaN\" | \"Infinity\" | \"-Infinity\"}", json)
            }
            return .float(Float(value))
        case (.decimal, .object(let members)):
            // Extended JSON: {"$numberDecimal": "12.50"}.
            guard members.count == 1, members[0].key == "$numberDecimal", case .string(let text) = members[0].value,
                let value = Decimal(parsing: text)
            else { throw mismatch(path, "a decimal string, or {\"$numberDecimal\": \"12.50\"}", json) }
            return .decimal(value)
        default:
            let expected: String
            switch type {
            case .bool: expected = "true or false"
            case .int: expected = "an integer"
            case .double: expected = "a number"
            case .string: expected = "a string"
            case .data: expected = "a base64 string"
            case .date: expected = "an ISO 8601 date string"
            case .uuid: expected = "a UUID string"
            case .objectId: expected = "an objectId string"
            case .decimal: expected = "a decimal string such as \"12.50\""
            case .float: expected = "a number"
            case .mixed: expected = "a boolean, a number or a string"
            }
            throw mismatch(path, expected, json)
        }
    }
}

/// A JSON number, or Extended JSON's `{"$numberDouble": "NaN" | "Infinity" | "-Infinity"}`.
private func double(_ json: JSONValue) -> Double? {
    switch json {
    case .number(let text): return Double(text)
    case .object(let members) where members.count == 1:
        switch json["$numberDouble"] {
        case .string("NaN")?: return .nan
        case .string("Infinity")?: return .infinity
        case .string("-Infinity")?: return -.infinity
        default: return nil
        }
    default: return nil
    }
}

/// A double as JSON: a number when JSON can write it, else Extended JSON's `$numberDouble`.
private func json(_ double: Double) -> JSONValue {
    if double.isNaN { return .object([("$numberDouble", .string("NaN"))]) }
    if double.isInfinite { return .object([("$numberDouble", .string(double < 0 ? "-Infinity" : "Infinity"))]) }
    return .number("\(double)")
}

private func parseISO8601(_ text: String) -> Date? {
    if let date = try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) { return date }
    return try? Date(text, strategy: Date.ISO8601FormatStyle())
}

private func formatISO8601(_ date: Date) -> String {
    date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
}

// MARK: - Writing

private struct SchemaJSONWriter {
    let schema: Schema
    /// Embedded types written in full within the top-level schema being written.
    private var defined = Set<String>()
    /// Embedded types nested too deep to write in full where they are held, in the order met: each is referred to
    /// by title there, and written at the top, marked, as one that no type holds.
    private var cutOff: [String] = []

    /// How many embedded types deep a schema writes in full. A chain of embedded types (which a peer's changesets
    /// can make as long as they like) would otherwise nest the document past what ``JSONParser`` reads back, and
    /// the writing and rendering, which recurse, past the stack.
    static let maximumNesting = 32

    init(schema: Schema) { self.schema = schema }

    mutating func document() -> JSONValue {
        var elements: [JSONValue] = []
        var reached = Set<String>()
        var writtenAtTop = Set<String>()
        for type in schema.types where !type.isEmbedded {
            defined = []
            elements.append(object(for: type, nestingStack: [], marker: nil))
            reached.formUnion(embeddedTypes(reachableFrom: type))
        }
        // Embedded types that no top-level type holds: written at the top, marked, so they survive a round trip.
        for type in schema.types where type.isEmbedded && !reached.contains(type.name) {
            defined = []
            elements.append(object(for: type, nestingStack: [], marker: "x-tributary-embedded"))
            writtenAtTop.insert(type.name)
            reached.formUnion(embeddedTypes(reachableFrom: type))
        }
        // Then those nested too deep, the same way (writing one may cut off more, further down its chain).
        var next = 0
        while next < cutOff.count {
            let name = cutOff[next]
            next += 1
            guard writtenAtTop.insert(name).inserted, let type = schema[type: name] else { continue }
            defined = []
            elements.append(object(for: type, nestingStack: [], marker: "x-tributary-embedded"))
        }
        return .array(elements)
    }

    private func embeddedTypes(reachableFrom root: ObjectSchema) -> Set<String> {
        var seen = Set<String>()
        var pending = [root]
        while let type = pending.popLast() {
            for property in type.properties {
                guard case .embedded(let name) = property.kind, !seen.contains(name) else { continue }
                seen.insert(name)
                if let nested = schema[type: name] { pending.append(nested) }
            }
        }
        return seen
    }

    private mutating func object(for type: ObjectSchema, nestingStack: [String], marker: String?) -> JSONValue {
        defined.insert(type.name)
        var members: [(key: String, value: JSONValue)] = [
            ("title", .string(type.name)), ("bsonType", .string("object")),
        ]
        if let marker { members.append((marker, .bool(true))) }
        if !type.isEmbedded, let key = type.primaryKey, key != "_id" {
            members.append(("x-tributary-primaryKey", .string(key)))
        }
        var properties: [(key: String, value: JSONValue)] = []
        var relationships: [(key: String, value: JSONValue)] = []
        for property in type.properties {
            properties.append((property.name, self.property(property, nestingStack: nestingStack + [type.name])))
            if case .link(let target) = property.kind {
                let foreignKey = schema[type: target]?.primaryKey ?? "_id"
                relationships.append(
                    (
                        property.name,
                        .object([
                            ("ref", .string("#/relationship/mongodb-atlas/tributary/\(target)")),
                            ("foreign_key", .string(foreignKey)), ("is_list", .bool(property.isList)),
                        ])
                    )
                )
            }
        }
        members.append(("properties", .object(properties)))
        let required = type.properties.filter { property in
            guard !property.isList, !property.isOptional, case .scalar = property.kind else { return false }
            return true
        }
        members.append(("required", .array(required.map { .string($0.name) })))
        if !relationships.isEmpty { members.append(("relationships", .object(relationships))) }
        return .object(members)
    }

    private mutating func property(_ property: Property, nestingStack: [String]) -> JSONValue {
        var members: [(key: String, value: JSONValue)]
        if property.isDictionary {
            members = [
                ("bsonType", .string("object")),
                ("additionalProperties", element(property, nestingStack: nestingStack)),
            ]
        } else if property.isList {
            members = [("bsonType", .string("array")), ("items", element(property, nestingStack: nestingStack))]
            if property.isSet { members.append(("uniqueItems", .bool(true))) }
        } else {
            guard case .object(let described) = element(property, nestingStack: nestingStack) else { return .null }
            members = described
        }
        if property.isIndexed { members.append(("x-tributary-indexed", .bool(true))) }
        if let value = property.defaultValue { members.append(("default", json(for: value))) }
        return .object(members)
    }

    /// The schema of one value of the property (for a list: of one element).
    private mutating func element(_ property: Property, nestingStack: [String]) -> JSONValue {
        let nullable = (property.isList || property.isDictionary) && property.isOptional
        func typed(_ name: String) -> JSONValue {
            .object([("bsonType", nullable ? .array([.string(name), .string("null")]) : .string(name))])
        }
        switch property.kind {
        case .scalar(let type): return typed(bsonName(type))
        case .link(let target):
            guard let key = schema[type: target]?.primaryKeyProperty, case .scalar(let keyType) = key.kind else {
                return typed("string")
            }
            return typed(bsonName(keyType))
        case .embedded(let name):
            let reference = JSONValue.object([("title", .string(name)), ("bsonType", .string("object"))])
            guard let nested = schema[type: name], !nestingStack.contains(name), !defined.contains(name) else {
                // Written in full earlier in this top-level schema, recursive, or missing: refer to it by title.
                return reference
            }
            guard nestingStack.count < Self.maximumNesting else {
                cutOff.append(name)
                return reference
            }
            return object(for: nested, nestingStack: nestingStack, marker: nil)
        }
    }

    private func bsonName(_ type: ScalarType) -> String {
        switch type {
        case .bool: "bool"
        case .int: "long"
        case .double: "double"
        case .string: "string"
        case .data: "binData"
        case .date: "date"
        case .uuid: "uuid"
        case .objectId: "objectId"
        case .decimal: "decimal"
        case .float: "float"
        case .mixed: "mixed"
        }
    }

    private func json(for value: Value) -> JSONValue {
        switch value {
        case .null: return .null
        case .bool(let bool): return .bool(bool)
        case .int(let int): return .number(String(int))
        case .double(let double): return TributaryModel.json(double)
        case .string(let string): return .string(string)
        case .data(let data): return .string(data.base64EncodedString())
        case .date(let date):
            // ISO 8601 when it holds the date exactly (whole milliseconds), else the exact seconds since 1970.
            let seconds = date.timeIntervalSince1970
            if abs(seconds) < 100_000_000_000 {
                let text = formatISO8601(date)
                if parseISO8601(text) == date { return .string(text) }
            }
            return TributaryModel.json(seconds)
        case .uuid(let uuid): return .string(uuid.uuidString)
        case .objectId(let id): return .string(id.description)
        case .decimal(let decimal): return .object([("$numberDecimal", .string(decimal.canonicalText))])
        case .float(let float): return TributaryModel.json(Double(float))
        case .link(let key), .typedLink(_, let key): return json(for: key.value)
        case .embedded(let object):
            return .object(object.fields.keys.sorted().map { ($0, json(for: object.fields[$0] ?? .null)) })
        case .list(let elements): return .array(elements.map { json(for: $0) })
        case .dictionary(let entries):
            return .object(entries.keys.sorted { $0.utf8Precedes($1) }.map { ($0, json(for: entries[$0] ?? .null)) })
        }
    }
}
