import TributaryModel

/// Applies schema instructions: additive changes merge as a union, conflicting definitions are refused with an
/// error naming both (rule 8), and removals and renames carry the data along.
struct SchemaMerger {
    let info: ChangesetInfo

    func apply(_ instruction: Instruction, to state: inout WorkingSet) throws {
        var schema = state.schema
        switch instruction {
        case .addType(let type):
            if let existing = schema[type: type.name] {
                schema.upsert(try union(existing, type))
            } else {
                schema.upsert(type)
            }
        case .addProperty(let typeName, let property):
            guard let existing = schema[type: typeName] else {
                throw MergeError(.invalidInstruction, "cannot add property '\(property.name)' to unknown type '\(typeName)'")
            }
            schema.upsert(try union(existing, ObjectSchema(
                name: existing.name, primaryKey: existing.primaryKey, embedded: existing.isEmbedded,
                properties: existing.properties + [property])))
        case .removeProperty(let typeName, let name):
            guard var type = schema[type: typeName], type[property: name] != nil else { return }
            guard name != type.primaryKey else {
                throw MergeError(.invalidInstruction, "cannot remove the primary key '\(typeName).\(name)'")
            }
            type.properties.removeAll { $0.name == name }
            schema.upsert(type)
            try rewriteFields(of: typeName, in: &state) { fields in fields.removeValue(forKey: name) }
        case .renameProperty(let typeName, let from, let to):
            guard var type = schema[type: typeName], let index = type.properties.firstIndex(where: { $0.name == from })
            else { return }
            if let clash = type[property: to] {
                throw MergeError(
                    .schemaConflict,
                    "cannot rename '\(typeName).\(from)' to '\(to)': '\(typeName).\(clash)' already exists")
            }
            guard from != type.primaryKey else {
                throw MergeError(.invalidInstruction, "cannot rename the primary key '\(typeName).\(from)'")
            }
            type.properties[index].name = to
            schema.upsert(type)
            try rewriteFields(of: typeName, in: &state) { fields in
                if let value = fields.removeValue(forKey: from) { fields[to] = value }
            }
        case .redefineProperty(let typeName, let property):
            guard var type = schema[type: typeName], let index = type.properties.firstIndex(where: { $0.name == property.name })
            else { return }
            let current = type.properties[index]
            guard current.kind == property.kind, current.isList == property.isList, current.isOptional == property.isOptional
            else {
                throw MergeError(
                    .invalidInstruction,
                    "'\(typeName).\(property.name)' cannot be redefined from \(current) to \(property): only its index or default may change")
            }
            type.properties[index] = property
            schema.upsert(type)
        case .removeType(let typeName):
            guard let type = schema[type: typeName] else { return }
            if !type.isEmbedded {
                for key in try state.keys(ofType: typeName) { try state.setRecord(nil, for: key) }
            }
            schema.remove(type: typeName)
        case .setSchemaVersion(let version):
            // The highest version wins, so concurrent version changes agree.
            schema.version = max(schema.version, version)
        default:
            preconditionFailure("SchemaMerger.apply called with an object instruction")
        }
        state.setSchema(schema)
    }

    /// The union of two definitions of one type, or an error naming both definitions of what conflicts.
    ///
    /// When the union differs from `existing` (new properties, or the same ones in another order), properties
    /// are sorted by name, so that replicas that merged the same definitions in other orders agree.
    func union(_ existing: ObjectSchema, _ incoming: ObjectSchema) throws -> ObjectSchema {
        guard existing.isEmbedded == incoming.isEmbedded else {
            throw MergeError(
                .schemaConflict,
                "type '\(existing.name)' is defined twice: as \(existing) and as \(incoming)")
        }
        guard existing.primaryKey == incoming.primaryKey else {
            throw MergeError(
                .schemaConflict,
                "type '\(existing.name)' has two primary keys: '\(existing.primaryKey ?? "-")' and '\(incoming.primaryKey ?? "-")'")
        }
        var merged = existing
        for property in incoming.properties {
            if let current = existing[property: property.name] {
                guard current == property else {
                    throw MergeError(
                        .schemaConflict,
                        "property '\(existing.name).\(property.name)' is defined twice: as \(current) and as \(property)")
                }
            } else {
                merged.properties.append(property)
            }
        }
        if merged.properties != existing.properties || incoming.properties != existing.properties {
            merged.properties.sort { $0.name < $1.name }
        }
        return merged
    }

    /// Applies `transform` to the fields of every object of `typeName`, or, for an embedded type, of every embedded
    /// object of that type at any depth.
    func rewriteFields(
        of typeName: String, in state: inout WorkingSet, _ transform: (inout [String: FieldState]) -> Void
    ) throws {
        guard let type = state.schema[type: typeName] else { return }
        let topLevel = type.isEmbedded ? state.schema.types.filter { !$0.isEmbedded }.map(\.name) : [typeName]
        for name in topLevel {
            for key in try state.keys(ofType: name) {
                guard var record = try state.record(key) else { continue }
                let before = record
                if type.isEmbedded {
                    Self.rewriteEmbedded(&record.fields, type: typeName, transform)
                } else {
                    transform(&record.fields)
                }
                if record != before { try state.setRecord(record, for: key) }
            }
        }
    }

    static func rewriteEmbedded(
        _ fields: inout [String: FieldState], type: String, _ transform: (inout [String: FieldState]) -> Void
    ) {
        for (name, field) in fields {
            switch field {
            case .register(var register):
                guard case .embedded(var child) = register.value else { continue }
                rewriteEmbedded(&child.fields, type: type, transform)
                if child.type == type { transform(&child.fields) }
                register.value = .embedded(child)
                fields[name] = .register(register)
            case .list(var list):
                var changed = false
                for (id, element) in list.elements {
                    guard case .embedded(var child)? = element.value else { continue }
                    rewriteEmbedded(&child.fields, type: type, transform)
                    if child.type == type { transform(&child.fields) }
                    list.elements[id]?.value = .embedded(child)
                    changed = true
                }
                if changed { fields[name] = .list(list) }
            }
        }
    }
}
