import Foundation
public import TributaryModel

extension ObjectRecord {
    /// The values of the object's properties, as the merge rules leave them: lists in order, counters with their
    /// increments, embedded objects with their fields. Properties without state get their default (or null, or
    /// an empty list). Links are returned as stored: whether their target exists is for the caller to check.
    public func values(of type: ObjectSchema, in schema: Schema) -> [String: Value] {
        Self.values(fields, of: type, in: schema)
    }

    static func values(_ fields: [String: FieldState], of type: ObjectSchema, in schema: Schema) -> [String: Value] {
        var result: [String: Value] = [:]
        result.reserveCapacity(type.properties.count)
        for property in type.properties where property.name != type.primaryKey {
            result[property.name] = value(fields[property.name], of: property, in: schema)
        }
        return result
    }

    /// The value of one field state.
    public static func value(_ field: FieldState?, of property: Property, in schema: Schema) -> Value {
        switch field {
        case .register(let register)?:
            return value(register.value, addend: register.addend, of: property, in: schema)
        case .list(let list)?:
            return .list(list.orderedElements().map { element in
                value(element.value ?? .scalar(.null), addend: 0, of: property, in: schema)
            })
        case nil:
            if property.isList { return .list([]) }
            return property.defaultValue ?? (property.isOptional ? .null : zeroValue(property.kind))
        }
    }

    static func value(_ stored: StoredValue, addend: Int64, of property: Property, in schema: Schema) -> Value {
        switch stored {
        case .scalar(.int(let base)):
            return .int(base &+ addend)
        case .scalar(let scalar):
            return scalar
        case .embedded(let child):
            guard let childType = schema[type: child.type] else { return .null }
            return .embedded(EmbeddedObject(type: child.type, fields: values(child.fields, of: childType, in: schema)))
        }
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
        case .link, .embedded: .null
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
