extension Schema {
    /// Why `value` cannot be stored in `property`, or `nil` when it can. Unlike ``Property/problem(with:)``,
    /// this also checks the fields of embedded objects against their type, at every depth.
    ///
    /// - Parameter requiringFields: whether an embedded object must give every required property of its type that
    ///   has no default. A local write must; a peer's need not (the merge passes `false`): the property may have been
    ///   added concurrently, after the peer wrote, so whether the write is accepted would depend on the order the
    ///   two merge in. Such a field reads as an object created before its property existed reads it. Nor need the
    ///   type of a peer's embedded object be in the schema.
    public func problem(with value: Value, for property: Property, depth: Int = 0, requiringFields: Bool = true)
        -> String?
    {
        if let problem = property.problem(with: value) { return problem }
        guard case .embedded(let typeName) = property.kind else { return nil }
        guard depth < 32 else { return "embedded objects nest deeper than 32 levels" }
        let objects: [Value] =
            property.isList
            ? (value.listValue ?? []) : property.isDictionary ? Array((value.dictionaryValue ?? [:]).values) : [value]
        guard let type = self[type: typeName] else {
            // A merge keeps them: a concurrent changeset may have removed the type after the writer embedded it, and
            // they read as null while it is absent (rule 8), in whichever order the two merge.
            return requiringFields ? "the schema lacks embedded type '\(typeName)'" : nil
        }
        for case .embedded(let object) in objects {
            for name in object.fields.keys.sorted() {
                guard let field = type[property: name] else {
                    return "embedded type '\(typeName)' has no property '\(name)'"
                }
                if let problem = self.problem(
                    with: object.fields[name] ?? .null, for: field, depth: depth + 1, requiringFields: requiringFields)
                {
                    return "\(typeName).\(name): \(problem)"
                }
            }
            for field in type.properties
            where requiringFields && !field.isOptional && !field.isCollection && field.defaultValue == nil {
                if object.fields[field.name] == nil {
                    return "embedded \(typeName) lacks required property '\(field.name)'"
                }
            }
        }
        return nil
    }
}
