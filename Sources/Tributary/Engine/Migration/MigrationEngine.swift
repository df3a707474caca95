import TributaryMerge
import TributaryModel

// The migration engine: what a ``MigrationContext`` does with the objects and renames a migration gave it, when the
// transaction that changes the schema applies it (Replica+Schema.swift runs it).

extension MigrationContext {
    /// The name a property of `type` ends with after the migration's renames, applied in order (from the one at
    /// `start`).
    func renamedName(_ type: String, _ name: String, from start: Int = 0) -> String {
        var current = name
        for rename in renames[min(start, renames.count)...] where rename.type == type && rename.from == current {
            current = rename.to
        }
        return current
    }

    func oldObject(_ type: String, _ key: PrimaryKey) -> DynamicObject? {
        oldPositions[type]?[key].flatMap { oldObjects[type]?[$0] }
    }

    /// A value of `oldProperty` as `newProperty` holds it, or `nil` when it does not carry over (the property then
    /// starts at its default). Values carry over when the definitions agree; links carry into a property that embeds
    /// their target (they become embedded objects in ``apply()``); embedded objects carry field by field into the new
    /// definition of their type, renamed as the migration has said so far, leaving out the fields it removed or whose
    /// definition changed.
    func carried(_ value: Value, from oldProperty: Property, to newProperty: Property) -> Value? {
        guard oldProperty.isList == newProperty.isList, oldProperty.isDictionary == newProperty.isDictionary else {
            return nil
        }
        switch (oldProperty.kind, newProperty.kind) {
        case (.embedded(let name), .embedded(let newName)) where name == newName:
            guard let oldType = oldSchema[type: name], let newType = newSchema[type: name], newType.isEmbedded else {
                return nil
            }
            func carry(_ value: Value) -> Value {
                guard case .embedded(let object) = value else { return value }
                var fields: [String: Value] = [:]
                for property in oldType.properties {
                    guard let field = object.fields[property.name] else { continue }
                    let fieldName = renamedName(name, property.name)
                    guard let newField = newType[property: fieldName] else {
                        // Not in the new definition (yet): a later rename may name it, ``completed(_:as:)`` decides.
                        fields[fieldName] = field
                        continue
                    }
                    if let carried = carried(field, from: property, to: newField) { fields[fieldName] = carried }
                }
                return .embedded(EmbeddedObject(type: name, fields: fields))
            }
            if case .list(let elements) = value { return .list(elements.map(carry)) }
            if case .dictionary(let entries) = value { return .dictionary(entries.mapValues(carry)) }
            return carry(value)
        case (.link(let target), .embedded(let embedded)) where target == embedded:
            return value  // still links; turned into embedded objects in `apply`
        default:
            return oldProperty.kind == newProperty.kind ? value : nil
        }
    }

    /// `value` of an embedded property as the migration writes it: in each embedded object, fields the new
    /// definition lacks are renamed as the migration asked (when the new name holds no value yet; a value of the old
    /// definition's type that does not fit the new one is old data, and is left out), old fields that stay undeclared
    /// are left out, and declared fields the object lacks hold their default. Fields of other names are kept, so that
    /// the write names them. The write leaves the fields no declaration has alone (another replica's release added
    /// them).
    ///
    /// The fields were named with the first `carriedRenames` renames applied: the later ones rename them (and all of
    /// them a field still undeclared after that, as in a copy of an old value).
    func completed(_ value: Value, as property: Property, carriedRenames: Int) -> Value {
        guard case .embedded(let name) = property.kind, let type = newSchema[type: name] else { return value }
        let oldType = oldSchema[type: name]
        // Every name an old field of the type had during the migration.
        var oldNames = Set(oldType?.properties.map(\.name) ?? [])
        for rename in renames where rename.type == name {
            oldNames.insert(rename.from)
            oldNames.insert(rename.to)
        }
        func complete(_ value: Value) -> Value {
            guard case .embedded(var object) = value else { return value }
            for key in object.fields.keys.sorted() where type[property: key] == nil {
                guard let field = object.fields.removeValue(forKey: key) else { continue }
                var target = renamedName(name, key, from: carriedRenames)
                if type[property: target] == nil { target = renamedName(name, key) }
                if let newField = type[property: target], object.fields[target] == nil {
                    // A value of the old definition, when that differs from the new one, is old data that does not
                    // carry; a value the migration set is written (and checked) as it is.
                    let origin = oldType?.properties.first { renamedName(name, $0.name) == target }
                    let sameDefinition = origin.map { $0.kind == newField.kind && $0.isList == newField.isList } ?? true
                    let isOldData = !sameDefinition && (origin.map { $0.problem(with: field) == nil } ?? false)
                    if !isOldData { object.fields[target] = field }
                } else if !oldNames.contains(key) {
                    object.fields[key] = field  // not a name of this type: the write says so
                }
            }
            for field in type.properties {
                if let current = object.fields[field.name] {
                    object.fields[field.name] = completed(current, as: field, carriedRenames: carriedRenames)
                } else {
                    object.fields[field.name] = Self.defaultValue(of: field)
                }
            }
            return .embedded(object)
        }
        if property.isList, case .list(let elements) = value { return .list(elements.map(complete)) }
        if property.isDictionary, case .dictionary(let entries) = value {
            return .dictionary(entries.mapValues(complete))
        }
        return complete(value)
    }

    static func defaultValue(of property: Property) -> Value {
        property.isList ? .list([]) : property.isDictionary ? .dictionary([:]) : (property.defaultValue ?? .null)
    }

    func defaults(_ type: ObjectSchema) -> [String: Value] {
        var values: [String: Value] = [:]
        for property in type.properties where property.name != type.primaryKey {
            values[property.name] = Self.defaultValue(of: property)
        }
        return values
    }

    /// The new-schema object for an old one, made on first use: values of properties that keep their definition (or
    /// were renamed) carry over.
    func newObject(_ type: String, _ key: PrimaryKey) -> MigrationObject? {
        if let existing = newObjects[type]?[key] { return existing }
        // Types that stay top-level, and types that become embedded (their objects move into their parents).
        guard let objectType = newSchema[type: type], let old = oldObject(type, key),
            let oldType = oldSchema[type: type]
        else { return nil }
        var values = defaults(objectType)
        for property in oldType.properties where property.name != oldType.primaryKey {
            let name = renamedName(type, property.name)
            guard let newProperty = objectType[property: name],
                let value = carried(old[property.name], from: property, to: newProperty)
            else { continue }
            values[name] = value
        }
        let object = MigrationObject(type: type, primaryKey: key, values: values)
        object.isFromOldObject = true
        object.carriedValues = values
        object.renamesCarried = renames.count
        newObjects[type, default: [:]][key] = object
        newOrder[type, default: []].append(key)
        return object
    }

    /// Writes the schema change and the new objects into the transaction.
    func apply() throws {
        // Every old object gets its new-schema version, so the checks below see all of them.
        for (type, objects) in oldObjects { for object in objects { _ = newObject(type, object.primaryKey) } }
        try checkEmbeddedTypesMadeTopLevel()
        try checkLateEmbeddedRenames()
        let replaced = try typesWithNewPrimaryKeys()
        let embeddedValues = try embedConvertedTypes()
        try emitSchemaChanges(replacing: replaced)
        for type in newSchema.types where !type.isEmbedded {
            for key in newOrder[type.name] ?? [] {
                guard let object = newObjects[type.name]?[key] else { continue }
                if object.isDeleted {
                    // A replaced type's old objects went with it.
                    if !replaced.contains(type.name) { _ = try transaction.delete(type.name, primaryKey: key) }
                    continue
                }
                var values = object.values
                for (property, value) in embeddedValues[type.name]?[key] ?? [:] { values[property] = value }
                for name in unchangedOldDefaults(type, object) { values.removeValue(forKey: name) }
                // (A create of a key whose old object the migration deleted updates that object's record, which it
                // resets: every property is written then.)
                if !object.isFromOldObject, try transaction.record(type.name, key)?.exists != true {
                    for name in defaultsLeftUnset(type, object) { values.removeValue(forKey: name) }
                }
                for property in type.properties {
                    guard case .embedded = property.kind, let value = values[property.name] else { continue }
                    values[property.name] = completed(value, as: property, carriedRenames: object.renamesCarried)
                }
                for property in type.properties
                where !property.isOptional && !property.isCollection && property.defaultValue == nil
                    && property.name != type.primaryKey
                {
                    if values[property.name] == nil || values[property.name] == .null {
                        throw TributaryError(
                            .missingProperty,
                            "required property '\(type.name).\(property.name)' was added without a default, and the "
                                + "migration did not set it on \(type.name) \(key): declare a default (a model's "
                                + "`defaultValues`, or `default:` in the schema), make it optional, or set it in the "
                                + "migration (`enumerateObjects(\"\(type.name)\") { old, new in "
                                + "new?[\"\(property.name)\"] = … }`)")
                    }
                }
                if let keyName = type.primaryKey { values[keyName] = key.value }
                // Fields of embedded objects that the new schema does not declare are left alone: another replica's
                // release may have added them.
                do {
                    _ = try transaction.upsert(type.name, values, leavingAbsentFields: true)
                } catch let error as TributaryError
                    where ![.diskFull, .mapFull, .storage, .closed].contains(error.code)
                {
                    // Named by the object, so that the app can look at one it fails on.
                    throw TributaryError(error.code, "on \(type.name) \(key): \(error.message)", underlying: error)
                }
            }
        }
    }

    /// The properties of an object the migration created that hold the value it started with (the default, null or an
    /// empty list), neither given to `create` nor set since: its create leaves them to the schema's defaults, as any
    /// create does, so that a write made concurrently on another device wins over them (rule 3). Written explicitly,
    /// they would be writes with the migration's stamp.
    func defaultsLeftUnset(_ type: ObjectSchema, _ object: MigrationObject) -> [String] {
        type.properties.compactMap { property in
            guard property.name != type.primaryKey, !object.given.contains(property.name),
                !object.assigned.contains(property.name),
                property.isCollection || property.isOptional || property.createDefault != nil,
                let value = object.values[property.name], value.storesAlike(Self.defaultValue(of: property))
            else { return nil }
            return property.name
        }
    }

    /// The properties of `object` whose default the new schema changes and which hold, as carried and left by the
    /// migration, the old default: they are not written, so that an object that holds no value for one (created
    /// before it was added) reads the new default (rule 8), and one whose create stored the old default keeps it.
    /// A required property whose default the new schema drops is written: without a default, the object must hold
    /// the value it read.
    func unchangedOldDefaults(_ type: ObjectSchema, _ object: MigrationObject) -> [String] {
        guard object.isFromOldObject, let oldType = oldSchema[type: type.name] else { return [] }
        return type.properties.compactMap { property in
            guard !property.isList, property.name != type.primaryKey, !object.assigned.contains(property.name),
                property.defaultValue != nil || property.isOptional,
                let old = oldType.properties.first(where: {
                    $0.name != oldType.primaryKey && renamedName(type.name, $0.name) == property.name
                }),
                old.kind == property.kind, let oldDefault = old.defaultValue,
                !Property.defaultsStoreAlike(oldDefault, property.defaultValue),
                let value = object.values[property.name], let carried = object.carriedValues[property.name],
                value.storesAlike(carried), carried.storesAlike(oldDefault)
            else { return nil }
            return property.name
        }
    }

    /// Fails when an embedded type's property that the new schema still has was renamed after objects holding the type
    /// were made (`b` to `c`, then `a` to `b`, asked after enumerating their parents): their embedded values hold `b`
    /// as carried, or as the migration set it, and which one cannot be told.
    func checkLateEmbeddedRenames() throws {
        for (index, rename) in renames.enumerated() {
            guard let type = newSchema[type: rename.type], type.isEmbedded, type[property: rename.from] != nil else {
                continue
            }
            for (parentType, objects) in newObjects.sorted(by: { $0.key < $1.key })
            where embeds(parentType, rename.type) {
                guard
                    let made = objects.values.first(where: {
                        $0.isFromOldObject && !$0.isDeleted && $0.renamesCarried <= index
                    })
                else { continue }
                throw TributaryError(
                    .migrationFailed,
                    "renameProperty(onType: \"\(rename.type)\", from: \"\(rename.from)\", to: \"\(rename.to)\") came after "
                        + "\(parentType) \(made.primaryKey) was enumerated, and the new schema still has '\(rename.type).\(rename.from)': "
                        + "ask for the renames of \(rename.type) before enumerating the objects that hold it")
            }
        }
    }

    /// Whether objects of `type` hold `embedded` in `schema` (by default the new one), at any depth.
    func embeds(_ type: String, _ embedded: String, in schema: Schema? = nil) -> Bool {
        let schema = schema ?? newSchema
        var seen: Set<String> = []
        var pending = [type]
        while let next = pending.popLast() {
            guard seen.insert(next).inserted, let definition = schema[type: next] else { continue }
            for property in definition.properties {
                guard case .embedded(let child) = property.kind else { continue }
                if child == embedded { return true }
                pending.append(child)
            }
        }
        return false
    }

    /// Fails when a type that was embedded becomes top-level while objects hold it embedded, at any depth, in
    /// properties the new schema keeps, and the migration creates none of its objects: that data would be dropped
    /// without a word. (Data in properties the new schema removes goes, as with any removed property.)
    func checkEmbeddedTypesMadeTopLevel() throws {
        for type in newSchema.types where !type.isEmbedded && oldSchema[type: type.name]?.isEmbedded == true {
            let created = newObjects[type.name]?.values.contains { !$0.isDeleted } ?? false
            guard !created else { continue }
            var holders: [String] = []
            /// Records `path` when `value`, of `property` of the old type `owner`, holds `type` embedded somewhere.
            func search(_ value: Value, _ property: Property, owner: String, path: String) {
                guard newSchema[type: owner]?[property: renamedName(owner, property.name)] != nil,
                    case .embedded(let embedded) = property.kind
                else { return }
                let objects =
                    property.isList
                    ? (value.listValue ?? [])
                    : property.isDictionary ? Array((value.dictionaryValue ?? [:]).values) : [value]
                for case .embedded(let object) in objects {
                    if embedded == type.name {
                        holders.append(path)
                        return
                    }
                    for child in oldSchema[type: embedded]?.properties ?? [] {
                        search(object[child.name], child, owner: embedded, path: path + "." + child.name)
                    }
                }
            }
            for oldType in oldSchema.types where !oldType.isEmbedded {
                for object in oldObjects[oldType.name] ?? [] {
                    for property in oldType.properties {
                        search(
                            object[property.name], property, owner: oldType.name,
                            path: "\(oldType.name)[\(object.primaryKey)].\(property.name)")
                    }
                }
            }
            guard let first = holders.first else { continue }
            throw TributaryError(
                .migrationFailed,
                "'\(type.name)' becomes a top-level type, and \(holders.count) object\(holders.count == 1 ? "" : "s") hold it "
                    + "embedded (\(first)\(holders.count > 1 ? ", ..." : "")): that data would be lost. In the migration, "
                    + "create the \(type.name) objects from them (enumerateObjects on the parent type, then create), or "
                    + "clear those properties in an earlier schema version")
        }
    }

    /// The top-level types whose primary key changes type or name: their objects cannot be carried over, so the type
    /// is removed and added again. Fails when the migration left an old object of such a type in place (it must
    /// delete each and create it anew with a key of the new type).
    func typesWithNewPrimaryKeys() throws -> Set<String> {
        var replaced = Set<String>()
        for type in newSchema.types where !type.isEmbedded {
            guard let oldType = oldSchema[type: type.name], !oldType.isEmbedded,
                let oldKey = oldType.primaryKey.flatMap({ oldType[property: $0] }),
                let newKey = type.primaryKey.flatMap({ type[property: $0] }),
                oldKey.name != newKey.name || oldKey.kind != newKey.kind
            else { continue }
            let deleted = deletedOldKeys[type.name] ?? []
            let kept = (oldObjects[type.name] ?? []).filter { !deleted.contains($0.primaryKey) }
            if let first = kept.first {
                throw TributaryError(
                    .migrationFailed,
                    "the primary key of \(type.name) changes from '\(type.name).\(oldKey.name)' (\(oldKey.kind)) to "
                        + "'\(type.name).\(newKey.name)' (\(newKey.kind)), and \(kept.count) object\(kept.count == 1 ? "" : "s") "
                        + "(\(first.primaryKey)\(kept.count > 1 ? ", ..." : "")) would keep the old key. In the migration, delete "
                        + "each (enumerateObjects, then delete) and create it with its new key (create)")
            }
            replaced.insert(type.name)
        }
        return replaced
    }

    /// For each type that becomes embedded: the embedded values each parent's converted property will hold, after
    /// checking that every object of the type has exactly one parent (Realm's backlink rule).
    func embedConvertedTypes() throws -> [String: [PrimaryKey: [String: Value]]] {
        var result: [String: [PrimaryKey: [String: Value]]] = [:]
        let converted = newSchema.types.filter { type in
            type.isEmbedded && oldSchema[type: type.name].map { !$0.isEmbedded } == true
        }
        for embeddedType in converted {
            var parents: [PrimaryKey: [String]] = [:]
            var children: [PrimaryKey: MigrationObject] = [:]
            for (key, object) in newObjects[embeddedType.name] ?? [:] where !object.isDeleted { children[key] = object }
            for parentType in newSchema.types where !parentType.isEmbedded {
                for property in parentType.properties where property.kind == .embedded(embeddedType.name) {
                    for key in newOrder[parentType.name] ?? [] {
                        guard let parent = newObjects[parentType.name]?[key], !parent.isDeleted else { continue }
                        // A dictionary's links by key (sorted), a list's in order, or the one link.
                        let entries = parent[property.name].dictionaryValue ?? [:]
                        let keys = entries.keys.sorted { $0.utf8Precedes($1) }
                        let links =
                            property.isDictionary
                            ? keys.map { entries[$0] ?? .null }
                            : property.isList ? (parent[property.name].listValue ?? []) : [parent[property.name]]
                        var embedded: [Value] = []
                        var embeddedByKey: [String: Value] = [:]
                        for (index, link) in links.enumerated() {
                            guard case .link(let target) = link else { continue }
                            parents[target, default: []].append("\(parentType.name)[\(key)].\(property.name)")
                            if let child = children[target] {
                                var fields = child.values
                                fields.removeValue(forKey: "_id")
                                let object = Value.embedded(
                                    EmbeddedObject(
                                        type: embeddedType.name,
                                        fields: fields.filter { embeddedType[property: $0.key] != nil }))
                                embedded.append(object)
                                if property.isDictionary { embeddedByKey[keys[index]] = object }
                            }
                        }
                        let value: Value =
                            property.isDictionary
                            ? .dictionary(embeddedByKey) : property.isList ? .list(embedded) : (embedded.first ?? .null)
                        result[parentType.name, default: [:]][key, default: [:]][property.name] = value
                    }
                }
            }
            for key in children.keys.sorted() {
                let linked = parents[key] ?? []
                if linked.isEmpty {
                    throw TributaryError(
                        .migrationFailed,
                        "At least one object does not have a backlink (data would get lost): \(embeddedType.name) \(key) "
                            + "becomes embedded but no object links to it; delete it in the migration or link it from one parent"
                    )
                }
                if linked.count > 1 {
                    throw TributaryError(
                        .migrationFailed,
                        "At least one object does have multiple backlinks: \(embeddedType.name) \(key) becomes embedded but "
                            + "is linked from \(linked.joined(separator: " and ")); an embedded object has exactly one parent"
                    )
                }
            }
        }
        return result
    }

    /// Emits the schema instructions, in an order that keeps what must be kept. The types in `replacing` are removed
    /// and added again (their primary key changed).
    func emitSchemaChanges(replacing replaced: Set<String>) throws {
        let stored = transaction.working.schema
        // Every property renamed must end under a name the new schema has.
        for type in Set(renames.map(\.type)).sorted() {
            guard let storedType = stored[type: type] else {
                throw TributaryError(
                    .migrationFailed, "renameProperty names the type '\(type)', which the stored schema does not have")
            }
            for property in storedType.properties {
                let final = renamedName(type, property.name)
                if final != property.name, newSchema[type: type]?[property: final] == nil {
                    throw TributaryError(
                        .migrationFailed,
                        "cannot rename '\(type).\(property.name)' to '\(final)': the new schema has no property '\(type).\(final)'"
                    )
                }
            }
        }
        // Renames first, in the order asked, each on the schema the ones before it left: the values stay under the new
        // name.
        for (type, from, to) in renames where from != to {
            guard let current = transaction.working.schema[type: type] else { continue }
            guard current[property: from] != nil else {
                // Renamed already (by another replica of this release): nothing to do.
                if current[property: to] != nil || current[property: renamedName(type, from)] != nil { continue }
                throw TributaryError(
                    .migrationFailed,
                    "cannot rename '\(type).\(from)' to '\(to)': the stored schema has no property '\(type).\(from)' "
                        + "(it has \(current.properties.map(\.name).joined(separator: ", ")))")
            }
            // The app's own previous schema has the new name: renaming onto it would merge two properties' values.
            // (A property of that name that only another replica added is the renamed one, as rule 8 merges it.)
            if let existing = current[property: to], declared[type: type]?[property: to] != nil {
                throw TributaryError(
                    .migrationFailed,
                    "cannot rename '\(type).\(from)' to '\(to)': the previous schema already has '\(type).\(existing)'; "
                        + "rename or remove that property first")
            }
            try transaction.emit(.renameProperty(type: type, from: from, to: to))
        }
        let current = transaction.working.schema
        // A later release than this migration's target has synced here (a device updating late, from an earlier
        // release): what its schema holds may be that release's, which this migration must not erase, and what it
        // removed must not come back. So this migration removes no property or type the app's previous declaration
        // had, and adds back none that a migration removed. What it leaves may outlive its use; nothing is lost.
        let laterReleaseSynced = current.version > newSchema.version
        let removedTypes = current.types.filter { old in
            // A type the new schema lacks goes if the app declared it before; types other replicas added stay.
            guard let new = newSchema[type: old.name] else {
                return declared[type: old.name] != nil && !laterReleaseSynced
            }
            return new.isEmbedded != old.isEmbedded || replaced.contains(old.name)
        }
        for old in removedTypes where !old.isEmbedded {
            for key in try transaction.working.keys(ofType: old.name) {
                if try transaction.record(old.name, key.primaryKey)?.exists == true {
                    try transaction.emit(.erase(type: old.name, primaryKey: key.primaryKey))
                }
            }
        }
        for new in newSchema.types {
            guard let existing = current[type: new.name], existing.isEmbedded == new.isEmbedded,
                !replaced.contains(new.name)
            else { continue }
            let previous = declared[type: new.name]
            for property in existing.properties where property.name != existing.primaryKey {
                if let replacement = new[property: property.name] {
                    if replacement.storesAlike(property) { continue }
                    if replacement.kind == property.kind, replacement.isList == property.isList,
                        replacement.isOptional == property.isOptional
                    {
                        // The index or the default changed: the values stay.
                        try transaction.emit(.redefineProperty(type: new.name, replacement))
                    } else {
                        try transaction.emit(.removeProperty(type: new.name, name: property.name))
                    }
                } else if previous?[property: property.name] != nil, !laterReleaseSynced {
                    try transaction.emit(.removeProperty(type: new.name, name: property.name))
                }
            }
        }
        for old in removedTypes { try transaction.emit(.removeType(old.name)) }
        for new in newSchema.types {
            let working = transaction.working.schema
            if let existing = working[type: new.name] {
                for property in new.properties where existing[property: property.name] == nil {
                    if laterReleaseSynced, !working.removals(of: property.name, in: new.name).isEmpty { continue }
                    try transaction.emit(.addProperty(type: new.name, property))
                }
            } else if !laterReleaseSynced || working.removals(ofType: new.name).isEmpty {
                try transaction.emit(.addType(new))
            }
        }
        try transaction.emit(.setSchemaVersion(newSchema.version))
        try transaction.emit(.migrated(toVersion: newSchema.version))
    }
}
