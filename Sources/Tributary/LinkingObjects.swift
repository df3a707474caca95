public import TributaryModel

/// The objects of `Source` that link to this object, computed as the model is read (Realm's `LinkingObjects`): never
/// stored, never written, never synced.
///
/// ```swift
/// struct Person: Model {
///     var _id: String
///     var name: String
///     var tasks: LinkingObjects<Task> = .init()  // the tasks whose `assignee` is this person
/// }
/// struct Task: Model {
///     var _id: String
///     var assignee: Link<Person>?
/// }
/// let ada = try replica.object(Person.self, primaryKey: "ada")
/// let hers = try ada?.tasks.compactMap { try replica.object(Task.self, primaryKey: $0.primaryKey) }
/// ```
/// The source's link property that points here is found by its type (give it in ``Model/originProperties`` when
/// the source links here through more than one property). A list holding the link twice lists its object twice.
/// Queries read the property by name (`tasks.@count > 2`, `ANY tasks.priority > 3`), and live results that read it
/// change when a source object does. A value built in the app (`.init()`) is empty until the model is read back.
public struct LinkingObjects<Source: Model>: Codable, Hashable, Sendable, RandomAccessCollection {
    /// The links to the source objects, in the order of their primary keys.
    public var links: [Link<Source>]

    /// No objects: what a model holds before it is read from a replica.
    public init() { links = [] }

    public init(_ links: [Link<Source>]) { self.links = links }

    public var startIndex: Int { links.startIndex }
    public var endIndex: Int { links.endIndex }
    public subscript(position: Int) -> Link<Source> { links[position] }

    public init(from decoder: any Decoder) throws {
        links = try decoder.singleValueContainer().decode([Link<Source>].self)
    }

    /// Encodes the links (outside Tributary, for example with `JSONEncoder`); a replica's writes leave the property
    /// out.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(links)
    }
}

/// Marks ``LinkingObjects`` for the schema probe and the model encoder.
protocol LinkingObjectsValue {
    static var sourceTypeName: String { get }
}

extension LinkingObjects: LinkingObjectsValue {
    static var sourceTypeName: String { Source.typeName }
}

extension ObjectReading {
    /// The objects that a computed property (`ObjectSchema.linkingObjects`, a model's ``LinkingObjects``) of the
    /// object of `type` with `primaryKey` lists: those of its origin type whose link property points at the object,
    /// in primary key order, once per link.
    ///
    /// - Throws: ``TributaryError`` with `.unknownType`, or `.unknownProperty` when the type declares no such
    ///   computed property.
    public func linkingObjects(_ property: String, of type: String, primaryKey: PrimaryKey) throws -> [DynamicObject] {
        let computed = try linkingObjectsProperty(property, of: type)
        let origin = try schema.requireType(computed.originType)
        return linking(computed, to: primaryKey, in: ReaderObjectSource(self)).compactMap { values in
            origin.primaryKey.flatMap { values[$0] }.flatMap(PrimaryKey.init).map {
                DynamicObject(type: origin.name, primaryKey: $0, values: values)
            }
        }
    }

    func linkingObjectsProperty(_ property: String, of type: String) throws -> LinkingObjectsProperty {
        guard let objectType = schema[type: type] else {
            throw TributaryError(.unknownType, "the schema has no type '\(type)'")
        }
        guard let computed = objectType[linkingObjects: property] else {
            throw TributaryError(
                .unknownProperty,
                "'\(type).\(property)' is not a computed property: the schema the replica was opened with declares "
                    + (objectType.linkingObjects.isEmpty
                        ? "none for \(type)" : objectType.linkingObjects.map { "'\($0.name)'" }.joined(separator: ", "))
            )
        }
        return computed
    }

    /// The values of the objects a computed property lists for the object with `primaryKey`, found through `source`
    /// (which reads the origin type once for every object a read asks about, as queries' backlinks do).
    private func linking(_ computed: LinkingObjectsProperty, to primaryKey: PrimaryKey, in source: ReaderObjectSource)
        -> [[String: Value]]
    {
        source.objects(type: computed.originType, linkingTo: primaryKey, through: computed.originProperty)
    }

    /// `object` with the values of its type's computed properties under their names (lists of links), for reading it
    /// as a model; `source` keeps what one read of many objects found, and is made only for a type that has some.
    func addingLinkingObjects(_ object: DynamicObject, _ source: @autoclosure () -> ReaderObjectSource) -> DynamicObject
    {
        // Most types have none: an object a read returned knows it of its type, without a copy of the schema.
        if object.lacksLinkingObjects { return object }
        let schema = self.schema
        // Asked of the schema in place, without copying the type's definition.
        guard let index = schema.typeIndex(object.type), !schema.types[index].linkingObjects.isEmpty else {
            return object
        }
        let type = schema.types[index]
        let source = source()
        var values = object.values
        for computed in type.linkingObjects {
            let originKey = schema[type: computed.originType]?.primaryKey
            values[computed.name] = .list(
                linking(computed, to: object.primaryKey, in: source).compactMap { linking in
                    originKey.flatMap { linking[$0] }.flatMap(PrimaryKey.init).map(Value.link)
                })
        }
        return DynamicObject(type: object.type, primaryKey: object.primaryKey, values: values)
    }

    /// `objects`, of one type, with the values of their type's computed properties.
    func addingLinkingObjects(_ objects: [DynamicObject]) -> [DynamicObject] {
        guard let first = objects.first, schema[type: first.type]?.linkingObjects.isEmpty == false else {
            return objects
        }
        let source = ReaderObjectSource(self)
        return objects.map { addingLinkingObjects($0, source) }
    }
}
