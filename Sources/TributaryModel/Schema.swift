import Foundation

/// The type of a scalar property or of a list's elements.
public enum ScalarType: UInt8, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    case bool = 1
    case int, double, string, data, date, uuid, objectId
    /// A decimal number (Realm's `Decimal128`), held as Foundation's `Decimal`.
    case decimal
    /// A 32-bit floating-point number (Realm's `Float`).
    case float
    /// Any single value of the other scalar types, or null (Realm's `AnyRealmValue` and `mixed`): each write says
    /// which. A mixed property is always optional, and cannot be a primary key, indexed, or a counter.
    case mixed

    public var description: String {
        switch self {
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
        case .mixed: "mixed"
        }
    }
}

/// What a property holds: a scalar, a link to an object of another type, or an embedded object.
public enum PropertyKind: Hashable, Sendable, CustomStringConvertible {
    case scalar(ScalarType)
    /// A link to an object of the named (top-level) type.
    case link(String)
    /// An embedded object of the named (embedded) type, owned by the parent.
    case embedded(String)

    /// The named object type of a link or embedded property.
    public var objectType: String? {
        switch self {
        case .scalar: nil
        case .link(let type), .embedded(let type): type
        }
    }

    public var description: String {
        switch self {
        case .scalar(let type): type.description
        case .link(let type): "link<\(type)>"
        case .embedded(let type): "embedded<\(type)>"
        }
    }
}

/// What the values of a property must be: its kind, whether it is a list, and whether it (for a list: each element)
/// may be null. Two definitions of one property that differ in shape conflict (docs/MergeSemantics.md, rule 8): the
/// later one is the property's definition, and each value is kept under the shape its writer wrote it under.
public struct PropertyShape: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var kind: PropertyKind
    public var isOptional: Bool
    public var isList: Bool
    /// Whether the list is a set: its elements are distinct (``Property/isSet``).
    public var isSet: Bool
    /// Whether the property is a dictionary (``Property/isDictionary``).
    public var isDictionary: Bool

    public init(kind: PropertyKind, isOptional: Bool, isList: Bool, isSet: Bool = false, isDictionary: Bool = false) {
        self.kind = kind
        self.isOptional = isOptional
        self.isList = (isList || isSet) && !isDictionary
        self.isSet = isSet && !isDictionary
        self.isDictionary = isDictionary
    }

    /// As the schema diff and error messages write a type: `string?`, `list<int>`, `set<string>`, `link<User>`.
    /// Distinct shapes have distinct descriptions (a to-one link or embedded object is always optional).
    public var description: String {
        let element = kind.description + (isOptional && !isList && kind.objectType == nil ? "?" : "")
        if isDictionary { return "dictionary<\(kind.description)\(isOptional ? "?" : "")>" }
        return isList ? "\(isSet ? "set" : "list")<\(kind.description)\(isOptional ? "?" : "")>" : element
    }

    /// Ordered by description: the order in which records store the values kept under other shapes.
    public static func < (lhs: PropertyShape, rhs: PropertyShape) -> Bool { lhs.description < rhs.description }
}

/// One property of an object type.
public struct Property: Hashable, Sendable, CustomStringConvertible {
    /// The property's name, unique within its type.
    public var name: String
    /// What the property holds (for a list: what each element holds).
    public var kind: PropertyKind
    /// Whether the property (for a list: each element) may be null. Links are always optional.
    public var isOptional: Bool
    /// Whether the property is a list.
    public var isList: Bool
    /// Whether the list is a set (Realm's `MutableSet`): it reads each value once, in the order of its first element,
    /// and writes add and remove values (docs/MergeSemantics.md, rule 5): a value added concurrently by two replicas
    /// is held once, a removal takes out the elements of the value its writer saw, and an addition the remover did
    /// not see stays (add wins). ``isList`` is true too.
    public var isSet: Bool = false
    /// Whether the property is a dictionary (Realm's `Map`): values by string key, each key merged as a field
    /// (docs/MergeSemantics.md, rule 1): concurrent writes of different keys all stay, and of one key the last wins.
    /// ``isList`` is false.
    public var isDictionary: Bool = false
    /// Whether an index answers equality and range queries on the property.
    public var isIndexed: Bool
    /// The value a create fills in when the app gives none, or `nil`.
    public var defaultValue: Value?

    public init(
        _ name: String, _ kind: PropertyKind, optional: Bool = false, list: Bool = false, set: Bool = false,
        dictionary: Bool = false, indexed: Bool = false, default defaultValue: Value? = nil
    ) {
        // A dictionary's values are each like a list's elements: optional only when asked for.
        let list = (list || set) && !dictionary
        self.name = name
        self.kind = kind
        self.isSet = set && !dictionary
        self.isDictionary = dictionary
        // A to-one link or embedded object can always be null: its target may be erased (docs/MergeSemantics.md,
        // rule 7). A mixed value may be null too.
        if !list, !dictionary, case .scalar = kind {
            self.isOptional = optional
        } else {
            self.isOptional = list || dictionary ? optional : true
        }
        if kind == .scalar(.mixed) { self.isOptional = true }
        // A link under a dictionary's key reads as null once its target is erased (rule 7); an embedded object under
        // a key can be null, as Realm's.
        if dictionary, kind.objectType != nil { self.isOptional = true }
        self.isList = list
        self.isIndexed = indexed
        self.defaultValue = defaultValue
    }

    /// Shorthand for a scalar property.
    public static func scalar(
        _ name: String, _ type: ScalarType, optional: Bool = false, indexed: Bool = false,
        default defaultValue: Value? = nil
    ) -> Property {
        Property(name, .scalar(type), optional: optional, indexed: indexed, default: defaultValue)
    }

    /// The property's type as the schema diff and error messages write it: `string?`, `list<int>`, `link<User>`.
    public var typeDescription: String { shape.description }

    /// Whether this definition, set as `stamp` says, is later than `other`, set as `otherStamp` says (rule 8): by
    /// stamp; two of one changeset (two names it defined, which a rename made one) are ordered by their
    /// descriptions, the one that sorts first being later, so that the outcome is the same in any order.
    public func isLater(stamped stamp: DefinitionStamp, than other: Property, stamped otherStamp: DefinitionStamp)
        -> Bool
    {
        stamp > otherStamp || (stamp == otherStamp && description < other.description)
    }

    /// What the property's values must be: its kind, list or not, optional or not (not its name, index or default).
    public var shape: PropertyShape {
        get {
            PropertyShape(kind: kind, isOptional: isOptional, isList: isList, isSet: isSet, isDictionary: isDictionary)
        }
        set {
            kind = newValue.kind
            isOptional = newValue.isOptional
            isList = newValue.isList
            isSet = newValue.isSet
            isDictionary = newValue.isDictionary
        }
    }

    public var description: String {
        var text = "\(name): \(typeDescription)"
        if isIndexed { text += " (indexed)" }
        if let defaultValue { text += " = \(defaultValue)" }
        return text
    }

    /// Whether the property has no default, or one that merges alike on every replica (rule 3): a single value
    /// (``Value/isSingleValue``), or for a list `[]` or null, which a create does not store (a list starts empty).
    /// A schema declares no other default (``Schema/validateDeclaration()``), and the merge drops one that a definition from an
    /// earlier build brings (``withoutUnmergeableDefault``).
    public var hasMergeableDefault: Bool {
        guard let defaultValue else { return true }
        if isDictionary { return defaultValue == .dictionary([:]) || defaultValue.isNull }
        return isList ? defaultValue == .list([]) || defaultValue.isNull : defaultValue.isSingleValue
    }

    /// Whether the property holds many values: a list (or set) or a dictionary. It is never required, and starts
    /// empty.
    public var isCollection: Bool { isList || isDictionary }

    /// The default a create stores for the property when the app gives no value: none for a list (it starts empty)
    /// or for a default that does not merge (``hasMergeableDefault``).
    public var createDefault: Value? {
        guard !isCollection, let defaultValue, defaultValue.isSingleValue else { return nil }
        return defaultValue
    }

    /// The error that names the property's default when it does not merge (``hasMergeableDefault``), or `nil`.
    public func unmergeableDefaultError(in type: String) -> SchemaError? {
        guard !hasMergeableDefault, let defaultValue else { return nil }
        return SchemaError(
            .invalidDefault,
            "'\(type).\(name)' cannot have the default \(defaultValue): a list starts empty and an embedded object "
                + "starts null. Remove the default from the schema and give the value when you create an object")
    }

    /// The property without its default when the default does not merge (``hasMergeableDefault``).
    public var withoutUnmergeableDefault: Property {
        guard !hasMergeableDefault else { return self }
        var property = self
        property.defaultValue = nil
        return property
    }
}

/// An object type: its name, primary key and properties.
public struct ObjectSchema: Hashable, Sendable, CustomStringConvertible {
    /// The type's name, unique within the schema.
    public var name: String
    /// The name of the primary key property, `_id` by default; `nil` for embedded types.
    public var primaryKey: String?
    /// Whether objects of this type only exist inside a parent object.
    public var isEmbedded: Bool
    /// The properties, in declaration order.
    public var properties: [Property] {
        didSet { index = PropertyIndex(properties) }
    }
    /// Properties computed from links (Realm's `LinkingObjects`): the objects of another type whose link property
    /// points at the object. Never stored, written or synced, so not part of equality: a replica computes them as it
    /// reads, from the schema the app opened it with.
    public var linkingObjects: [LinkingObjectsProperty] = []
    /// Property positions by name, rebuilt whenever the properties change; not part of equality.
    private var index: PropertyIndex

    /// Finds this type's properties by name, shared with every copy of the definition: a reader that keeps it finds
    /// properties without copying the definition. It stays as it is if the definition's properties change.
    package var propertyIndex: PropertyIndex { index }

    public init(
        name: String, primaryKey: String? = "_id", embedded: Bool = false, properties: [Property],
        linkingObjects: [LinkingObjectsProperty] = []
    ) {
        self.name = name
        self.primaryKey = embedded ? nil : primaryKey
        self.isEmbedded = embedded
        self.properties = properties
        self.linkingObjects = linkingObjects
        self.index = PropertyIndex(properties)
    }

    /// The computed property named `name`, if any.
    public subscript(linkingObjects name: String) -> LinkingObjectsProperty? {
        linkingObjects.first { $0.name == name }
    }

    public static func == (lhs: ObjectSchema, rhs: ObjectSchema) -> Bool {
        lhs.name == rhs.name && lhs.primaryKey == rhs.primaryKey && lhs.isEmbedded == rhs.isEmbedded
            && lhs.properties == rhs.properties
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(name)
        hasher.combine(primaryKey)
        hasher.combine(isEmbedded)
        hasher.combine(properties)
    }

    /// An embedded type.
    public static func embedded(_ name: String, properties: [Property]) -> ObjectSchema {
        ObjectSchema(name: name, primaryKey: nil, embedded: true, properties: properties)
    }

    /// The property named `name`, if any.
    public subscript(property name: String) -> Property? {
        position(ofProperty: name).map { properties[$0] }
    }

    /// The position in ``properties`` of the property named `name`, if any.
    public func position(ofProperty name: String) -> Int? {
        index.position(of: name)
    }

    /// The position in ``properties`` of the property whose name has these UTF-8 bytes, if any: for decoders,
    /// which then need not build the name as a `String`.
    public func propertyPosition(utf8 name: UnsafeBufferPointer<UInt8>) -> Int? {
        index.position(ofUTF8: name)
    }

    /// The primary key property.
    public var primaryKeyProperty: Property? {
        primaryKey.flatMap { self[property: $0] }
    }

    public var description: String {
        let kind = isEmbedded ? "embedded " : ""
        return "\(kind)\(name) { " + properties.map(\.description).joined(separator: "; ") + " }"
    }
}

/// How the current index and default of a merged property were set, which orders concurrent definitions of them
/// (docs/MergeSemantics.md, rule 8): every redefinition is later than every addition, and within each kind the
/// greater stamp is later.
public struct DefinitionStamp: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// Whether an addition (a new type or property) or a redefinition (a migration's change of index or default)
    /// set the definition.
    public enum Kind: UInt8, Hashable, Comparable, Sendable {
        case addition = 0
        case redefinition = 1
        public static func < (lhs: Kind, rhs: Kind) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    public var kind: Kind
    /// The stamp of the changeset that set the definition.
    public var stamp: Stamp

    public init(_ kind: Kind, _ stamp: Stamp) {
        self.kind = kind
        self.stamp = stamp
    }

    /// What a property stored before definition stamps existed counts as: earlier than every definition.
    public static let unknown = DefinitionStamp(.addition, .zero)

    public static func < (lhs: DefinitionStamp, rhs: DefinitionStamp) -> Bool {
        lhs.kind != rhs.kind ? lhs.kind < rhs.kind : lhs.stamp < rhs.stamp
    }

    public var description: String { "\(kind == .addition ? "added" : "redefined") at \(stamp)" }
}

/// A definition of a property that lost to a later one of another shape (docs/MergeSemantics.md, rule 8), with how
/// it was set.
public struct LosingDefinition: Hashable, Sendable, CustomStringConvertible {
    public var property: Property
    public var stamp: DefinitionStamp

    public init(_ property: Property, _ stamp: DefinitionStamp) {
        self.property = property
        self.stamp = stamp
    }

    /// Whether this definition is later than `other` (``Property/isLater(stamped:than:stamped:)``).
    public func isLater(than other: LosingDefinition) -> Bool {
        property.isLater(stamped: stamp, than: other.property, stamped: other.stamp)
    }

    public var description: String { "\(property) (\(stamp))" }
}

/// A property of a type, named by both names: what definition stamps are kept by.
public struct PropertyName: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var type: String
    public var property: String

    public init(type: String, property: String) {
        self.type = type
        self.property = property
    }

    public static func < (lhs: PropertyName, rhs: PropertyName) -> Bool {
        lhs.type != rhs.type ? lhs.type < rhs.type : lhs.property < rhs.property
    }

    public var description: String { "\(type).\(property)" }
}

/// A removal of a property (or its rename) that a merged schema remembers, so that a concurrent addition of the
/// property, or a concurrent write to it, is ordered against it the same way on every replica
/// (docs/MergeSemantics.md, rule 8).
public struct PropertyRemoval: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The origin dot of the changeset that removed the property.
    public var dot: Dot
    /// For a rename, the property's new name: writes that did not see the rename go there.
    public var renamedTo: String?
    /// For a rename, the earlier removals of the new name that the rename saw (sorted): a write that follows the
    /// rename is not dropped for them, since the rename came after them.
    public var removalsOfNewNameSeen: [Dot]
    /// The earlier removals and renames of the same name that this one saw (sorted): which removals of a name came
    /// after a later addition of it, and so concern another property of that name. Repeats are kept: a later removal of
    /// the name in the same changeset lists that changeset's dot once more, which is how it is told from the earlier.
    public var removalsSeen: [Dot]
    /// The renames of other properties to this name that this one saw (sorted): a removal or rename that saw such a
    /// rename concerns the property that rename brought here, wherever that rename merged.
    public var renamesOntoSeen: [Dot]

    public init(
        dot: Dot, renamedTo: String? = nil, removalsOfNewNameSeen: [Dot] = [], removalsSeen: [Dot] = [],
        renamesOntoSeen: [Dot] = []
    ) {
        self.dot = dot
        self.renamedTo = renamedTo
        self.removalsOfNewNameSeen = removalsOfNewNameSeen.sorted()
        self.removalsSeen = removalsSeen.sorted()
        self.renamesOntoSeen = renamesOntoSeen.sorted()
    }

    public static func < (lhs: PropertyRemoval, rhs: PropertyRemoval) -> Bool {
        if lhs.dot != rhs.dot { return lhs.dot < rhs.dot }
        if lhs.renamedTo != rhs.renamedTo { return (lhs.renamedTo ?? "") < (rhs.renamedTo ?? "") }
        if lhs.removalsOfNewNameSeen != rhs.removalsOfNewNameSeen {
            return lhs.removalsOfNewNameSeen.lexicographicallyPrecedes(rhs.removalsOfNewNameSeen)
        }
        if lhs.removalsSeen != rhs.removalsSeen { return lhs.removalsSeen.lexicographicallyPrecedes(rhs.removalsSeen) }
        return lhs.renamesOntoSeen.lexicographicallyPrecedes(rhs.renamesOntoSeen)
    }

    public var description: String { renamedTo.map { "renamed to '\($0)' by \(dot)" } ?? "removed by \(dot)" }
}

/// A removal of a whole type that a merged schema remembers, so that a concurrent addition of the type, or a
/// concurrent write to one of its objects, is ordered against it the same way on every replica
/// (docs/MergeSemantics.md, rule 8).
public struct TypeRemoval: Hashable, Comparable, Sendable, CustomStringConvertible {
    /// The origin dot of the changeset that removed the type.
    public var dot: Dot
    /// The earlier removals of the same type name that this one saw (sorted): two removals made concurrently that
    /// saw the same earlier ones are copies of one (one migration run on several replicas) and remove one type.
    /// Repeats are kept, as in ``PropertyRemoval/removalsSeen``.
    public var removalsSeen: [Dot]

    public init(dot: Dot, removalsSeen: [Dot] = []) {
        self.dot = dot
        self.removalsSeen = removalsSeen.sorted()
    }

    public static func < (lhs: TypeRemoval, rhs: TypeRemoval) -> Bool {
        lhs.dot != rhs.dot ? lhs.dot < rhs.dot : lhs.removalsSeen.lexicographicallyPrecedes(rhs.removalsSeen)
    }

    public var description: String { "removed by \(dot)" }
}

/// A replica's schema: its object types and a version number that migrations raise.
public struct Schema: Hashable, Sendable {
    /// The schema version; opening a replica with a changed schema needs a higher one (and a migration).
    public var version: UInt64
    /// The object types, sorted by name.
    public private(set) var types: [ObjectSchema]
    /// For a merged schema (a replica's): how each property's index and default were set, so that concurrent
    /// definitions resolve the same way on every replica. Empty for a declared schema; a property without an entry
    /// counts as ``DefinitionStamp/unknown``.
    public var definitionStamps: [PropertyName: DefinitionStamp] = [:]
    /// For a merged schema: every removal and rename of a property, sorted by dot. An addition of the property, or a
    /// write to it, counts only if its changeset saw all of them (rule 8, ordered like erases by rule 2). Kept even
    /// when the property or its type is gone, so that every replica holds the same set whatever the order it merged in.
    public var propertyRemovals: [PropertyName: [PropertyRemoval]] = [:]
    /// For a merged schema: every removal of a type, sorted. An addition of the type, or a write to one of its objects,
    /// counts only if its changeset saw all of them (a removal it did not see that is a copy of one it saw counts as
    /// seen: the same migration run on another replica).
    public var typeRemovals: [String: [TypeRemoval]] = [:]
    /// For a merged schema: definitions of a property that lost to a later one of another shape (rule 8), the latest
    /// of each shape, sorted by shape. Values written under them are kept aside in the records, and show again if a
    /// later definition of their shape comes. Empty unless replicas defined a property differently.
    public var losingDefinitions: [PropertyName: [LosingDefinition]] = [:]
    /// For a merged schema: the highest schema version a migration of any replica took the data to (0 when none
    /// did). ``version`` is the highest any replica declared, a new install of a later release included; this one
    /// says which migration steps already ran on the data.
    public var migratedVersion: UInt64 = 0

    public init(version: UInt64 = 0, types: [ObjectSchema]) {
        self.version = version
        self.types = types.sorted { $0.name < $1.name }
    }

    /// How the definition of `property` of `type` was set (``DefinitionStamp/unknown`` when not recorded).
    public func definitionStamp(of property: String, in type: String) -> DefinitionStamp {
        definitionStamps[PropertyName(type: type, property: property)] ?? .unknown
    }

    /// The type named `name`, if any.
    public subscript(type name: String) -> ObjectSchema? {
        typeIndex(name).map { types[$0] }
    }

    /// The index in ``types`` of the type named `name`: for a read that needs one part of a type's definition, without
    /// copying the whole of it.
    package func typeIndex(_ name: String) -> Int? {
        var low = 0
        var high = types.count
        while low < high {
            let middle = (low + high) / 2
            if types[middle].name < name { low = middle + 1 } else { high = middle }
        }
        return low < types.count && types[low].name == name ? low : nil
    }

    /// Adds or replaces a type, keeping the order.
    public mutating func upsert(_ type: ObjectSchema) {
        if let index = types.firstIndex(where: { $0.name == type.name }) {
            types[index] = type
        } else {
            types.append(type)
            types.sort { $0.name < $1.name }
        }
    }

    /// The removals and renames of `property` of `type` (empty when there were none).
    public func removals(of property: String, in type: String) -> [PropertyRemoval] {
        propertyRemovals.isEmpty ? [] : propertyRemovals[PropertyName(type: type, property: property)] ?? []
    }

    /// Records a removal or rename of `property` of `type`, keeping the list sorted and free of repeats.
    public mutating func recordRemoval(_ removal: PropertyRemoval, of property: String, in type: String) {
        let name = PropertyName(type: type, property: property)
        var removals = propertyRemovals[name] ?? []
        guard !removals.contains(removal) else { return }
        removals.append(removal)
        removals.sort()
        propertyRemovals[name] = removals
    }

    /// The removals of the type `name` (empty when there were none).
    public func removals(ofType name: String) -> [TypeRemoval] {
        typeRemovals.isEmpty ? [] : typeRemovals[name] ?? []
    }

    /// Records a removal of the type `name`, keeping the list sorted and free of repeats.
    public mutating func recordRemoval(_ removal: TypeRemoval, ofType name: String) {
        var removals = typeRemovals[name] ?? []
        guard !removals.contains(removal) else { return }
        removals.append(removal)
        removals.sort()
        typeRemovals[name] = removals
    }

    /// Removes a type, with the definition stamps of its properties and the definitions that lost to them (not the
    /// removals: they stay remembered).
    public mutating func remove(type name: String) {
        types.removeAll { $0.name == name }
        definitionStamps = definitionStamps.filter { $0.key.type != name }
        if !losingDefinitions.isEmpty { losingDefinitions = losingDefinitions.filter { $0.key.type != name } }
    }

    /// The definitions of `property` of `type` that lost to its definition, one per shape (empty when none did).
    public func losingDefinitions(of property: String, in type: String) -> [LosingDefinition] {
        losingDefinitions.isEmpty ? [] : losingDefinitions[PropertyName(type: type, property: property)] ?? []
    }

    /// Records a definition that lost: it replaces a losing one of its shape that it is later than, and is dropped
    /// when one of its shape is later than it.
    public mutating func recordLosing(_ definition: LosingDefinition, of property: String, in type: String) {
        let name = PropertyName(type: type, property: property)
        var losing = losingDefinitions[name] ?? []
        if let index = losing.firstIndex(where: { $0.property.shape == definition.property.shape }) {
            guard definition.isLater(than: losing[index]) else { return }
            losing[index] = definition
        } else {
            losing.append(definition)
            losing.sort { $0.property.shape < $1.property.shape }
        }
        losingDefinitions[name] = losing
    }

    /// Takes out the losing definition of `property` of `type` with `shape`, if any.
    public mutating func takeLosing(_ shape: PropertyShape, of property: String, in type: String) -> LosingDefinition? {
        let name = PropertyName(type: type, property: property)
        guard var losing = losingDefinitions[name], let index = losing.firstIndex(where: { $0.property.shape == shape })
        else { return nil }
        let taken = losing.remove(at: index)
        losingDefinitions[name] = losing.isEmpty ? nil : losing
        return taken
    }

    /// Checks a schema an app declares: ``validate()``, and no default that would not merge alike on every replica
    /// (``Property/hasMergeableDefault``: a list starts empty, an embedded object null). A merged schema is only
    /// validated: the merge drops such defaults from definitions, and one that an earlier build stored stays harmless.
    public func validateDeclaration() throws(SchemaError) {
        try validate()
        try validateDefaults()
        try validateLinkingObjects()
    }

    /// Checks that no property has a default that would not merge alike (``Property/hasMergeableDefault``).
    public func validateDefaults() throws(SchemaError) {
        for type in types {
            for property in type.properties {
                if let error = property.unmergeableDefaultError(in: type.name) { throw error }
            }
        }
    }

    /// The schema without the defaults that do not merge (``Property/withoutUnmergeableDefault``): what the merge
    /// makes of a declaration an earlier build stored.
    public var withoutUnmergeableDefaults: Schema {
        var schema = self
        for var type in types where type.properties.contains(where: { !$0.hasMergeableDefault }) {
            type.properties = type.properties.map(\.withoutUnmergeableDefault)
            schema.upsert(type)
        }
        return schema
    }

    /// Checks that the schema is well formed: names are valid and unique, every top-level type has a primary key
    /// of a key type, every link and embedded property names a type of the right kind, defaults fit their
    /// properties, and embedded types are not linked to.
    ///
    /// - Throws: ``SchemaError`` naming the type and property at fault.
    public func validate() throws(SchemaError) {
        try validate(targets: .everyProperty)
    }

    /// Which link and embedded properties ``validate(targets:)`` requires to name a type of the right kind.
    package enum TargetCheck {
        /// Every one: what an app declares.
        case everyProperty
        /// Those whose target had no such problem in the given schema: what a transaction that changes a merged
        /// schema must not make worse.
        case changedSince(Schema)
        /// None: a merged schema. A type removed while a changeset that had not seen the removal added a link to it
        /// leaves that link naming an absent type, in whatever order replicas merge the two (rule 8), and it reads
        /// as null while the type is absent, as a link to an erased object does (rule 7).
        case none
    }

    /// ``validate()``, with the properties whose target is checked chosen by `targets`.
    package func validate(targets: TargetCheck) throws(SchemaError) {
        var seen = Set<String>()
        for type in types {
            guard isValidName(type.name) else {
                throw SchemaError(.invalidName, "type name '\(type.name)' is not valid: use letters, digits and _")
            }
            var names = Set<String>()
            for property in type.properties {
                let path = "\(type.name).\(property.name)"
                try checkNewPropertyName(property.name, path: path, names: &names)
                if property.kind == .scalar(.mixed), property.isIndexed {
                    throw SchemaError(
                        .unsupportedType,
                        "property '\(path)' is mixed and cannot be indexed: its values of different types have no "
                            + "one order")
                }
                if property.isSet, case .embedded = property.kind {
                    throw SchemaError(
                        .invalidLink,
                        "property '\(path)' is a set of embedded objects, which cannot be told apart by value; make it "
                            + "a list")
                }
                if let problem = targetProblem(of: property, path: path) {
                    switch targets {
                    case .everyProperty: throw problem
                    case .changedSince(let base):
                        // Tolerated where `base` has a property naming the same target with the same problem: one
                        // the merge left so (perhaps renamed since, or joined by another link to the absent type).
                        // A new target with a problem (a misspelt type name, a type removed under its links) is not.
                        let known = base.types.contains { other in
                            other.properties.contains {
                                $0.kind == property.kind && base.targetProblem(of: $0, path: path)?.code == problem.code
                            }
                        }
                        if !known { throw problem }
                    case .none: break
                    }
                }
                if let value = property.defaultValue {
                    if let problem = property.problem(with: value) {
                        throw SchemaError(.invalidDefault, "default value of '\(path)' is invalid: \(problem)")
                    }
                    if case .typedLink = value {
                        throw SchemaError(
                            .invalidDefault, "default value of '\(path)' is a link: a default holds no link")
                    }
                }
            }
            if type.isEmbedded {
                if type.primaryKey != nil {
                    throw SchemaError(.invalidPrimaryKey, "embedded type '\(type.name)' cannot have a primary key")
                }
            } else {
                guard let keyName = type.primaryKey, let key = type[property: keyName] else {
                    throw SchemaError(
                        .missingPrimaryKey,
                        "type '\(type.name)' has no primary key property '\(type.primaryKey ?? "_id")'")
                }
                guard case .scalar(let scalar) = key.kind, !key.isList, !key.isOptional,
                    [.string, .int, .uuid, .objectId].contains(scalar)
                else {
                    throw SchemaError(
                        .invalidPrimaryKey,
                        "primary key '\(type.name).\(keyName)' is \(key.typeDescription); "
                            + "it must be a required string, int, uuid or objectId")
                }
            }
            seen.insert(type.name)
        }
    }

    /// Why `property` (at `path`) names no type of the kind it needs, or `nil` when it does or holds no object.
    func targetProblem(of property: Property, path: String) -> SchemaError? {
        guard let target = property.kind.objectType else { return nil }
        guard let targetType = self[type: target] else {
            return SchemaError(.unknownType, "property '\(path)' refers to type '\(target)', which the schema lacks")
        }
        if case .link = property.kind, targetType.isEmbedded {
            return SchemaError(.invalidLink, "property '\(path)' links to embedded type '\(target)'; embed it instead")
        }
        if case .embedded = property.kind, !targetType.isEmbedded {
            return SchemaError(
                .invalidLink, "property '\(path)' embeds '\(target)', which is not an embedded type; link to it instead"
            )
        }
        return nil
    }
}

/// Refuses a property name that is not valid, or that `names` (those of the type so far) holds, and adds it there.
func checkNewPropertyName(_ name: String, path: String, names: inout Set<String>) throws(SchemaError) {
    guard isValidName(name) else {
        throw SchemaError(.invalidName, "property name '\(path)' is not valid: use letters, digits and _")
    }
    guard names.insert(name).inserted else {
        throw SchemaError(.duplicateProperty, "property '\(path)' is declared twice")
    }
}

func isValidName(_ name: String) -> Bool {
    guard let first = name.unicodeScalars.first, !name.isEmpty, name.utf8.count <= 200 else { return false }
    guard first == "_" || first.properties.isAlphabetic else { return false }
    return name.unicodeScalars.allSatisfy { $0 == "_" || $0.properties.isAlphabetic || ("0"..."9").contains($0) }
}

extension Property {
    /// Why `value` cannot be stored in this property, or `nil` when it can. Lists are checked element by element.
    public func problem(with value: Value) -> String? {
        if isDictionary {
            guard case .dictionary(let entries) = value else {
                if case .null = value { return nil }  // a null dictionary is an empty one
                return "expected a dictionary, got \(value.kindName)"
            }
            for key in entries.keys.sorted() {
                if let problem = Self.dictionaryKeyProblem(key) { return problem }
                if let problem = elementProblem(entries[key] ?? .null) { return "key '\(key)': \(problem)" }
            }
            return nil
        }
        if isList {
            guard case .list(let elements) = value else {
                if case .null = value { return nil }  // a null list is an empty list
                return "expected a list, got \(value.kindName)"
            }
            for (index, element) in elements.enumerated() {
                if let problem = elementProblem(element) { return "element \(index): \(problem)" }
            }
            return nil
        }
        return elementProblem(value)
    }

    /// Why `key` cannot be a dictionary's key, or `nil`: keys are strings of at most 200 UTF-8 bytes, without a NUL
    /// or a `.`, that do not start with `$` (as Realm's).
    public static func dictionaryKeyProblem(_ key: String) -> String? {
        if key.isEmpty { return "a dictionary key cannot be empty" }
        if key.utf8.count > 200 { return "dictionary key '\(key.prefix(40))...' is longer than 200 bytes" }
        if key.utf8.contains(0) || key.contains(".") || key.hasPrefix("$") {
            return "dictionary key '\(key)' holds a '.' or a NUL, or starts with '$', which keys cannot"
        }
        return nil
    }

    /// Whether values of this property can hold links: a link, an embedded object (whose fields may), or a mixed
    /// value (which may hold a ``Value/typedLink(type:key:)``). Reads check those links' targets (rule 7).
    public var holdsLinks: Bool { kind.objectType != nil || kind == .scalar(.mixed) }

    /// Why `value` cannot be a mixed value, or `nil`: a mixed value holds a bool, a number, a string, data, a date,
    /// an id, null, a link that names its type (``Value/typedLink(type:key:)``), or a list or dictionary of mixed
    /// values (as Realm's `AnyRealmValue` does), nested at most `limit` levels deep.
    public static func mixedProblem(_ value: Value, depth: Int = 0) -> String? {
        switch value {
        case .link:
            return "a link in a mixed value names its target's type: use Value.typedLink(type:key:)"
        case .embedded:
            return "a mixed value cannot hold an embedded object"
        case .list(let elements):
            guard depth < mixedNestingLimit else { return "a mixed value nests more than \(mixedNestingLimit) levels" }
            for (index, element) in elements.enumerated() {
                if let problem = mixedProblem(element, depth: depth + 1) { return "element \(index): \(problem)" }
            }
            return nil
        case .dictionary(let entries):
            guard depth < mixedNestingLimit else { return "a mixed value nests more than \(mixedNestingLimit) levels" }
            for key in entries.keys.sorted() {
                if let problem = dictionaryKeyProblem(key) ?? mixedProblem(entries[key] ?? .null, depth: depth + 1) {
                    return "key '\(key)': \(problem)"
                }
            }
            return nil
        default:
            return nil
        }
    }

    /// How deep lists and dictionaries nest inside one mixed value.
    public static let mixedNestingLimit = 16

    /// Why `value` cannot be one element of this property (or its single value), or `nil`.
    public func elementProblem(_ value: Value) -> String? {
        if case .null = value {
            return isOptional ? nil : "expected \(kind), got null (the property is required)"
        }
        switch (kind, value) {
        case (.scalar(.bool), .bool), (.scalar(.int), .int), (.scalar(.double), .double),
            (.scalar(.string), .string), (.scalar(.data), .data), (.scalar(.date), .date),
            (.scalar(.uuid), .uuid), (.scalar(.objectId), .objectId), (.scalar(.decimal), .decimal),
            (.scalar(.float), .float),
            (.link, .link):
            return nil
        case (.scalar(.mixed), let value):
            return Self.mixedProblem(value)
        case (.embedded(let type), .embedded(let object)):
            return object.type == type ? nil : "expected embedded \(type), got embedded \(object.type)"
        default:
            return "expected \(kind), got \(value.kindName)"
        }
    }
}

/// A schema is malformed, or two schema definitions conflict.
public struct SchemaError: Error, Hashable, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: Hashable, Sendable {
            case invalidName, duplicateProperty, unknownType, invalidLink, invalidDefault, missingPrimaryKey
            case invalidPrimaryKey, conflict, migrationRequired, olderVersion, invalidJSON, unsupportedType
        }
        private var wrapped: Wrapped
        /// A type or property name is empty or has characters other than letters, digits and `_`.
        public static var invalidName: Self { Self(wrapped: .invalidName) }
        /// A type declares one property name twice.
        public static var duplicateProperty: Self { Self(wrapped: .duplicateProperty) }
        /// A link or embedded property names a type the schema lacks.
        public static var unknownType: Self { Self(wrapped: .unknownType) }
        /// A link targets an embedded type, or an embedded property a top-level type.
        public static var invalidLink: Self { Self(wrapped: .invalidLink) }
        /// A default value does not fit its property.
        public static var invalidDefault: Self { Self(wrapped: .invalidDefault) }
        /// A top-level type lacks its primary key property.
        public static var missingPrimaryKey: Self { Self(wrapped: .missingPrimaryKey) }
        /// A primary key has a type that cannot be a key.
        public static var invalidPrimaryKey: Self { Self(wrapped: .invalidPrimaryKey) }
        /// Two definitions of one property or type conflict (docs/MergeSemantics.md, rule 8).
        public static var conflict: Self { Self(wrapped: .conflict) }
        /// The schema changed without a version change (and a migration).
        public static var migrationRequired: Self { Self(wrapped: .migrationRequired) }
        /// The schema version given is lower than the stored one.
        public static var olderVersion: Self { Self(wrapped: .olderVersion) }
        /// A JSON schema is malformed.
        public static var invalidJSON: Self { Self(wrapped: .invalidJSON) }
        /// A model type uses a Swift type Tributary cannot store.
        public static var unsupportedType: Self { Self(wrapped: .unsupportedType) }
        public var description: String { "\(wrapped)" }
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}

/// Positions of properties by name. A class, so copies of a schema share it; immutable once built.
package final class PropertyIndex: Sendable {
    /// The properties' names, in order.
    package let names: [String]
    let positions: [String: Int]
    /// Each property's name as UTF-8, sorted bytewise, with its position: finds a property from stored bytes
    /// without building a `String`.
    let utf8Names: [(name: [UInt8], position: Int)]

    init(_ properties: [Property]) {
        names = properties.map(\.name)
        var positions: [String: Int] = [:]
        positions.reserveCapacity(properties.count)
        for (position, property) in properties.enumerated() where positions[property.name] == nil {
            positions[property.name] = position
        }
        self.positions = positions
        self.utf8Names = positions.map { (Array($0.key.utf8), $0.value) }.sorted {
            $0.name.lexicographicallyPrecedes($1.name)
        }
    }

    /// The position of the first property named `name`, if any.
    package func position(of name: String) -> Int? {
        // A few properties: comparing names (small ones compare as two words) beats hashing one.
        if names.count <= 12 {
            for position in names.indices where names[position] == name { return position }
            return nil
        }
        return positions[name]
    }

    func position(ofUTF8 name: UnsafeBufferPointer<UInt8>) -> Int? {
        var low = 0
        var high = utf8Names.count
        while low < high {
            let middle = (low + high) / 2
            let order = utf8Names[middle].name.withUnsafeBufferPointer { Self.compare($0, name) }
            if order == 0 { return utf8Names[middle].position }
            if order < 0 { low = middle + 1 } else { high = middle }
        }
        return nil
    }

    private static func compare(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Int {
        let common = min(a.count, b.count)
        if common > 0, let x = a.baseAddress, let y = b.baseAddress {
            let order = memcmp(x, y, common)
            if order != 0 { return Int(order) }
        }
        return a.count - b.count
    }
}
