/// A property computed from links, as Realm's `LinkingObjects`: the objects of `originType` whose link property
/// `originProperty` (a link, or a list of links) points at the object. A replica computes it when it reads; it is
/// never stored, written or synced, and queries read it as they read `@links.originType.originProperty`.
public struct LinkingObjectsProperty: Hashable, Sendable, CustomStringConvertible {
    /// The property's name, unique among the type's properties.
    public var name: String
    /// The type whose objects link to the object.
    public var originType: String
    /// The link property of `originType` that points at the object.
    public var originProperty: String

    public init(_ name: String, originType: String, originProperty: String) {
        self.name = name
        self.originType = originType
        self.originProperty = originProperty
    }

    public var description: String { "\(name): linkingObjects<\(originType).\(originProperty)>" }
}

extension Schema {
    /// Checks every type's ``ObjectSchema/linkingObjects``: each is declared on a top-level type, under a name no
    /// property of the type has, and names a top-level type and one of its link properties that targets the type.
    ///
    /// - Throws: ``SchemaError`` naming the type and the computed property at fault.
    public func validateLinkingObjects() throws(SchemaError) {
        for type in types {
            var names = Set(type.properties.map(\.name))
            for computed in type.linkingObjects {
                let path = "\(type.name).\(computed.name)"
                try checkNewPropertyName(computed.name, path: path, names: &names)
                guard !type.isEmbedded else {
                    throw SchemaError(
                        .invalidLink,
                        "'\(path)' lists the objects linking to an embedded object, but links cannot point at one")
                }
                guard let origin = self[type: computed.originType], !origin.isEmbedded else {
                    throw SchemaError(
                        .unknownType,
                        "'\(path)' lists objects of '\(computed.originType)', which is not a top-level type of the "
                            + "schema")
                }
                guard let property = origin[property: computed.originProperty], property.kind == .link(type.name)
                else {
                    let links = origin.properties.filter { $0.kind == .link(type.name) }.map { "'\($0.name)'" }
                    let hint =
                        links.isEmpty
                        ? "'\(origin.name)' has no link to '\(type.name)'"
                        : "its links to '\(type.name)' are \(links.joined(separator: ", "))"
                    throw SchemaError(
                        .invalidLink,
                        "'\(path)' goes through '\(origin.name).\(computed.originProperty)', which is not a link to "
                            + "'\(type.name)': \(hint)")
                }
            }
        }
    }

    /// This schema with the computed properties `declared` gives its types (``ObjectSchema/linkingObjects``): a
    /// replica's merged schema, which holds only what is stored, as the app that opened it declared it.
    public func withLinkingObjects(of declared: Schema?) -> Schema {
        guard let declared, declared.types.contains(where: { !$0.linkingObjects.isEmpty }) else { return self }
        var schema = self
        for declaredType in declared.types where !declaredType.linkingObjects.isEmpty {
            guard var type = schema[type: declaredType.name], type.linkingObjects != declaredType.linkingObjects
            else { continue }
            // A computed property whose name the merged type now stores (another release added it) gives way.
            type.linkingObjects = declaredType.linkingObjects.filter { type[property: $0.name] == nil }
            schema.upsert(type)
        }
        return schema
    }
}
