import TributaryMerge
public import TributaryModel

/// A property that replicas defined with different shapes (an `int` on one, a `string` on another), as every
/// replica resolves it (docs/MergeSemantics.md, rule 8): the latest definition is the property's, and the values
/// written under the others stay in the log and in each object, aside, where they do not show. They show again if a
/// later definition of their shape comes.
public struct SchemaConflict: Sendable, Hashable, CustomStringConvertible {
    public var type: String
    /// The property's definition: the latest.
    public var definition: Property
    /// How that definition was set.
    public var stamp: DefinitionStamp
    /// The definitions it won over: the latest of each other shape, sorted by shape.
    public var losing: [LosingDefinition]
    /// How many objects keep a value written under a losing definition: objects of the type, or for an embedded
    /// type, the top-level objects that hold such an embedded object at any depth.
    public var objectsWithValuesAside: Int

    public var description: String {
        let others = losing.map { "\($0.property.typeDescription) (\($0.stamp))" }.joined(separator: ", ")
        let objects = objectsWithValuesAside == 1 ? "1 object keeps" : "\(objectsWithValuesAside) objects keep"
        return "'\(type).\(definition.name)' is \(definition.typeDescription) (\(stamp)), over \(others); "
            + "\(objects) values written under \(losing.count == 1 ? "that definition" : "those definitions") aside"
    }

    /// The conflicts of `schema`, for the properties whose losing definitions differ from `previous`'s (all of them
    /// when `previous` is `nil`), with each object's record from `records` (called once per top-level type
    /// concerned, with a function to call for each record).
    static func conflicts(
        in schema: Schema, changedSince previous: Schema?,
        records: (_ type: String, _ each: (ObjectRecord) -> Void) throws -> Void
    ) rethrows -> [SchemaConflict] {
        var conflicts: [SchemaConflict] = []
        for (name, losing) in schema.losingDefinitions.sorted(by: { $0.key < $1.key }) {
            if let previous, previous.losingDefinitions[name] == losing { continue }
            guard let type = schema[type: name.type], let definition = type[property: name.property] else { continue }
            var aside = 0
            let holders = type.isEmbedded ? schema.types.filter { !$0.isEmbedded }.map(\.name) : [name.type]
            for holder in holders {
                try records(holder) { record in
                    guard record.exists, holdsAside(record.fields, of: holder, name) else { return }
                    aside += 1
                }
            }
            conflicts.append(
                SchemaConflict(
                    type: name.type, definition: definition,
                    stamp: schema.definitionStamp(of: name.property, in: name.type), losing: losing,
                    objectsWithValuesAside: aside))
        }
        return conflicts
    }

    /// Whether `fields`, of an object of `type`, or an embedded object in them at any depth, keeps a state of `name`
    /// aside.
    static func holdsAside(_ fields: FieldTable, of type: String, _ name: PropertyName) -> Bool {
        if type == name.type, fields.sideFields.contains(where: { $0.name == name.property }) { return true }
        func holds(_ state: FieldState) -> Bool {
            switch state {
            case .register(let register):
                guard case .embedded(let child) = register.value else { return false }
                return holdsAside(child.fields, of: child.type, name)
            case .list(let list):
                return list.elements.values.contains { element in
                    guard case .embedded(let child) = element.value else { return false }
                    return holdsAside(child.fields, of: child.type, name)
                }
            case .dictionary(let dictionary):
                return dictionary.entries.values.contains { entry in
                    guard case .embedded(let child)? = entry.value else { return false }
                    return holdsAside(child.fields, of: child.type, name)
                }
            }
        }
        return fields.states.contains(where: holds) || fields.sideFields.contains { holds($0.state) }
    }
}

/// A value of an object written under a definition of its property that lost (``SchemaConflict``): kept aside, not
/// shown.
public struct ValueAside: Sendable, Hashable, CustomStringConvertible {
    public var property: String
    /// The shape of the definition it was written under.
    public var shape: PropertyShape
    public var value: Value

    public var description: String { "\(property) as \(shape): \(value)" }
}
