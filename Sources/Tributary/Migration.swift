public import TributaryModel
import TributaryMerge

/// Code that carries data from an older schema version to a newer one.
///
/// A migration runs inside the transaction that changes the schema, and its writes are recorded in the log with
/// the schema change, so replay and `verify` reproduce the migrated state. If it throws, the replica stays exactly
/// as it was.
///
/// ```swift
/// let migration = Migration { migration in
///     if migration.oldSchemaVersion < 1 {
///         try migration.enumerateObjects("Scrum") { old, new in
///             new?["numberOfAttendees"] = .int(Int64(old["attendeeList"].listValue?.count ?? 0))
///         }
///     }
///     if migration.oldSchemaVersion < 2 {
///         migration.renameProperty(onType: "Person", from: "yearsSinceBirth", to: "age")
///     }
/// }
/// ```
/// Or as steps, each run in order when the stored version is below the step's version:
/// ```swift
/// let migration = Migration(steps: [1: addAttendeeCount, 2: renameAge, 3: ageToString])
/// ```
public struct Migration: Sendable {
    let run: @Sendable (MigrationContext) throws -> Void

    /// A migration that runs `body` once, with the old schema version in the context.
    public init(_ body: @escaping @Sendable (MigrationContext) throws -> Void) {
        run = body
    }

    /// A migration made of steps: the step for version *v* runs when the stored version is lower than *v*, steps in
    /// ascending order, each seeing what the steps before it wrote.
    public init(steps: [UInt64: @Sendable (MigrationContext) throws -> Void]) {
        run = { context in
            for version in steps.keys.sorted() where context.oldSchemaVersion < version {
                try steps[version]?(context)
            }
        }
    }
}

/// An object being migrated: its values in the new schema, which a migration reads and changes.
public final class MigrationObject {
    /// The object's type name (in the new schema).
    public let type: String
    /// The object's primary key.
    public let primaryKey: PrimaryKey
    /// The property values in the new schema. Properties new in this version start at their default (or null).
    public var values: [String: Value]
    var isDeleted = false

    init(type: String, primaryKey: PrimaryKey, values: [String: Value]) {
        self.type = type
        self.primaryKey = primaryKey
        self.values = values
    }

    /// A property's value in the new schema.
    public subscript(property: String) -> Value {
        get { values[property] ?? .null }
        set { values[property] = newValue }
    }
}

/// What a ``Migration`` works with: the old objects (read-only, old schema) and the new ones (writable, new schema).
public final class MigrationContext {
    /// The schema version the replica had.
    public let oldSchemaVersion: UInt64
    /// The schema the replica had.
    public let oldSchema: Schema
    /// The schema the replica is migrating to.
    public let newSchema: Schema

    let declared: Schema
    let transaction: Transaction
    /// Old objects by type, in the old schema, read before anything changed.
    var oldObjects: [String: [DynamicObject]] = [:]
    /// Where each old object is in `oldObjects`, by type and primary key.
    var oldPositions: [String: [PrimaryKey: Int]] = [:]
    /// New objects by type and key, created lazily from the old ones.
    var newObjects: [String: [PrimaryKey: MigrationObject]] = [:]
    var newOrder: [String: [PrimaryKey]] = [:]
    /// Renames: type → (old name → new name).
    var renames: [String: [String: String]] = [:]

    init(oldSchema: Schema, declared: Schema, newSchema: Schema, transaction: Transaction) throws {
        self.oldSchemaVersion = oldSchema.version
        self.oldSchema = oldSchema
        self.newSchema = newSchema
        self.declared = declared
        self.transaction = transaction
        for type in oldSchema.types where !type.isEmbedded {
            let objects = try transaction.objects(type.name)
            oldObjects[type.name] = objects
            var positions: [PrimaryKey: Int] = Dictionary(minimumCapacity: objects.count)
            for (position, object) in objects.enumerated() { positions[object.primaryKey] = position }
            oldPositions[type.name] = positions
        }
    }

    // MARK: For migrations

    /// Calls `body` for every object of `type` that existed before the migration, with the object as it was (old
    /// schema) and as it will be (new schema; `nil` when the type is not in the new schema, or the object was
    /// deleted). Changes to `new` are written when the migration ends. For a type that becomes embedded, `new` is the
    /// object that will move into its parent; delete it if it has no parent.
    public func enumerateObjects(_ type: String, _ body: (_ old: DynamicObject, _ new: MigrationObject?) throws -> Void)
        rethrows
    {
        for old in oldObjects[type] ?? [] {
            let new = newObject(type, old.primaryKey)
            try body(old, new.flatMap { $0.isDeleted ? nil : $0 })
        }
    }

    /// Renames a property, keeping its values. The new schema names it `newName`; the old one `oldName`.
    ///
    /// Renames in later steps follow earlier ones: `a` to `b`, then `b` to `c`, renames `a` to `c`. It works on
    /// embedded types too. Rename an embedded type's properties before enumerating the objects that hold
    /// it: the new objects made before the rename hold their embedded values as they were carried then. The migration
    /// fails, naming the property, when neither the stored schema has `oldName` nor the new schema `newName`.
    public func renameProperty(onType type: String, from oldName: String, to newName: String) {
        renames[type, default: [:]][oldName] = newName
        // New objects already made pick up the value under its new name: the one they hold, or the old object's value
        // under the name the chain of renames started from.
        let origin = oldSchema[type: type]?.properties.first { renamedName(type, $0.name) == newName }?.name ?? oldName
        for object in newObjects[type]?.values ?? [:].values {
            if let current = object.values.removeValue(forKey: oldName) {
                object.values[newName] = current
            } else if let old = oldObject(type, object.primaryKey) {
                object.values[newName] = old[origin]
            }
        }
    }

    /// Creates an object in the new schema. Returns it, for further changes.
    @discardableResult
    public func create(_ type: String, _ values: [String: Value]) throws -> MigrationObject {
        guard let objectType = newSchema[type: type], !objectType.isEmbedded, let keyName = objectType.primaryKey else {
            throw TributaryError(.unknownType, "the new schema has no top-level type '\(type)'")
        }
        guard let key = values[keyName].flatMap(PrimaryKey.init) else {
            throw TributaryError(.missingProperty, "creating \(type) in a migration: its primary key '\(keyName)' is missing")
        }
        if let existing = newObject(type, key), !existing.isDeleted {
            throw TributaryError(.duplicatePrimaryKey, "creating \(type) \(key) in a migration: it exists")
        }
        let object = MigrationObject(type: type, primaryKey: key, values: defaults(objectType).merging(values) { $1 })
        newObjects[type, default: [:]][key] = object
        newOrder[type, default: []].append(key)
        return object
    }

    /// Deletes an object (by its new-schema handle).
    public func delete(_ object: MigrationObject) {
        object.isDeleted = true
    }

    /// Deletes every object of a type.
    public func deleteAll(_ type: String) {
        for old in oldObjects[type] ?? [] { newObject(type, old.primaryKey)?.isDeleted = true }
        for object in newObjects[type]?.values ?? [:].values { object.isDeleted = true }
    }

    // MARK: Internals

    /// The name a property of `type` ends with after the migration's renames, following chains (`a` to `b` in one step,
    /// `b` to `c` in a later one).
    func renamedName(_ type: String, _ name: String) -> String {
        guard let pairs = renames[type] else { return name }
        var current = name
        for _ in 0..<pairs.count {
            guard let next = pairs[current], next != name else { break }
            current = next
        }
        return current
    }

    func oldObject(_ type: String, _ key: PrimaryKey) -> DynamicObject? {
        oldPositions[type]?[key].flatMap { oldObjects[type]?[$0] }
    }

    /// A value of `oldProperty` as `newProperty` holds it, or `nil` when it does not carry over (the property then
    /// starts at its default). Values carry over when the definitions agree; links carry into a property that embeds
    /// their target (they become embedded objects in ``apply()``); embedded objects carry field by field into the new
    /// definition of their type, renamed as the migration says, leaving out the fields it removed or changed.
    func carried(_ value: Value, from oldProperty: Property, to newProperty: Property) -> Value? {
        guard oldProperty.isList == newProperty.isList else { return nil }
        switch (oldProperty.kind, newProperty.kind) {
        case (.embedded(let oldName), .embedded(let newName)):
            guard let oldType = oldSchema[type: oldName], let newType = newSchema[type: newName], newType.isEmbedded else {
                return nil
            }
            func carry(_ value: Value) -> Value {
                guard case .embedded(let object) = value else { return value }
                var fields: [String: Value] = [:]
                for property in oldType.properties {
                    let name = renamedName(oldName, property.name)
                    guard let field = object.fields[property.name], let newField = newType[property: name],
                        let carried = carried(field, from: property, to: newField)
                    else { continue }
                    fields[name] = carried
                }
                return .embedded(EmbeddedObject(type: newName, fields: fields))
            }
            if case .list(let elements) = value { return .list(elements.map(carry)) }
            return carry(value)
        case (.link(let target), .embedded(let embedded)) where target == embedded:
            return value  // still links; turned into embedded objects in `apply`
        default:
            return oldProperty.kind == newProperty.kind ? value : nil
        }
    }

    func defaults(_ type: ObjectSchema) -> [String: Value] {
        var values: [String: Value] = [:]
        for property in type.properties where property.name != type.primaryKey {
            values[property.name] = property.isList ? .list([]) : (property.defaultValue ?? .null)
        }
        return values
    }

    /// The new-schema object for an old one, made on first use: values of properties that keep their definition (or
    /// were renamed) carry over.
    func newObject(_ type: String, _ key: PrimaryKey) -> MigrationObject? {
        if let existing = newObjects[type]?[key] { return existing }
        // Types that stay top-level, and types that become embedded (their objects move into their parents).
        guard let objectType = newSchema[type: type], let old = oldObject(type, key), let oldType = oldSchema[type: type]
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
        newObjects[type, default: [:]][key] = object
        newOrder[type, default: []].append(key)
        return object
    }

    /// Writes the schema change and the new objects into the transaction.
    func apply() throws {
        // Every old object gets its new-schema version, so the checks below see all of them.
        for (type, objects) in oldObjects { for object in objects { _ = newObject(type, object.primaryKey) } }
        try checkEmbeddedTypesMadeTopLevel()
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
                for property in type.properties where !property.isOptional && !property.isList && property.defaultValue == nil
                    && property.name != type.primaryKey
                {
                    if values[property.name] == nil || values[property.name] == .null {
                        throw TributaryError(
                            .missingProperty,
                            "required property '\(type.name).\(property.name)' was added without a default, and the "
                                + "migration did not set it on \(type.name) \(key)")
                    }
                }
                if let keyName = type.primaryKey { values[keyName] = key.value }
                try transaction.upsert(type.name, values)
            }
        }
    }

    /// Fails when a type that was embedded becomes top-level while objects hold it embedded and the migration creates
    /// none of its objects: its embedded data would be dropped without a word.
    func checkEmbeddedTypesMadeTopLevel() throws {
        for type in newSchema.types where !type.isEmbedded && oldSchema[type: type.name]?.isEmbedded == true {
            let created = newObjects[type.name]?.values.contains { !$0.isDeleted } ?? false
            guard !created else { continue }
            var holders: [String] = []
            for oldType in oldSchema.types where !oldType.isEmbedded {
                let holding = oldType.properties.filter { $0.kind == .embedded(type.name) }
                guard !holding.isEmpty else { continue }
                for object in oldObjects[oldType.name] ?? [] {
                    for property in holding where !object[property.name].isNull && object[property.name] != .list([]) {
                        holders.append("\(oldType.name)[\(object.primaryKey)].\(property.name)")
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
            let kept = (oldObjects[type.name] ?? []).filter { newObjects[type.name]?[$0.primaryKey]?.isDeleted != true }
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
                        let links = property.isList ? (parent[property.name].listValue ?? []) : [parent[property.name]]
                        var embedded: [Value] = []
                        for case .link(let target) in links {
                            parents[target, default: []].append("\(parentType.name)[\(key)].\(property.name)")
                            if let child = children[target] {
                                var fields = child.values
                                fields.removeValue(forKey: "_id")
                                embedded.append(.embedded(EmbeddedObject(type: embeddedType.name, fields: fields.filter { embeddedType[property: $0.key] != nil })))
                            }
                        }
                        let value: Value = property.isList ? .list(embedded) : (embedded.first ?? .null)
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
                            + "becomes embedded but no object links to it; delete it in the migration or link it from one parent")
                }
                if linked.count > 1 {
                    throw TributaryError(
                        .migrationFailed,
                        "At least one object does have multiple backlinks: \(embeddedType.name) \(key) becomes embedded but "
                            + "is linked from \(linked.joined(separator: " and ")); an embedded object has exactly one parent")
                }
            }
        }
        return result
    }

    /// Emits the schema instructions, in an order that keeps what must be kept. The types in `replacing` are removed
    /// and added again (their primary key changed).
    func emitSchemaChanges(replacing replaced: Set<String>) throws {
        let stored = transaction.working.schema
        // Renames first: the values stay under the new name.
        for (type, pairs) in renames.sorted(by: { $0.key < $1.key }) {
            guard let storedType = stored[type: type] else {
                throw TributaryError(.migrationFailed, "renameProperty names the type '\(type)', which the stored schema does not have")
            }
            let intermediate = Set(pairs.values)
            for from in pairs.keys.sorted() {
                // `b` of `a` to `b`, then `b` to `c`: the rename of `a` goes straight to `c`.
                if intermediate.contains(from), storedType[property: from] == nil { continue }
                let to = renamedName(type, from)
                guard to != from else { continue }
                guard newSchema[type: type]?[property: to] != nil else {
                    throw TributaryError(
                        .migrationFailed, "cannot rename '\(type).\(from)' to '\(to)': the new schema has no property '\(type).\(to)'")
                }
                guard storedType[property: from] != nil else {
                    // Renamed already (by another replica of this release): nothing to do.
                    if storedType[property: to] != nil { continue }
                    throw TributaryError(
                        .migrationFailed,
                        "cannot rename '\(type).\(from)' to '\(to)': the stored schema has no property '\(type).\(from)' "
                            + "(it has \(storedType.properties.map(\.name).joined(separator: ", ")))")
                }
                // The app's own previous schema has the new name: renaming onto it would merge two properties' values.
                // (A property of that name that only another replica added is the renamed one, as rule 8 merges it.)
                if let existing = transaction.working.schema[type: type]?[property: to],
                    declared[type: type]?[property: to] != nil
                {
                    throw TributaryError(
                        .migrationFailed,
                        "cannot rename '\(type).\(from)' to '\(to)': the previous schema already has '\(type).\(existing)'; "
                            + "rename or remove that property first")
                }
                try transaction.emit(.renameProperty(type: type, from: from, to: to))
            }
        }
        let current = transaction.working.schema
        let removedTypes = current.types.filter { old in
            // A type the new schema lacks goes if the app declared it before; types other replicas added stay.
            guard let new = newSchema[type: old.name] else { return declared[type: old.name] != nil }
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
            guard let existing = current[type: new.name], existing.isEmbedded == new.isEmbedded, !replaced.contains(new.name)
            else { continue }
            let previous = declared[type: new.name]
            for property in existing.properties where property.name != existing.primaryKey {
                if let replacement = new[property: property.name] {
                    if replacement == property { continue }
                    if replacement.kind == property.kind, replacement.isList == property.isList,
                        replacement.isOptional == property.isOptional
                    {
                        try transaction.emit(.redefineProperty(type: new.name, replacement))  // index or default: keep values
                    } else {
                        try transaction.emit(.removeProperty(type: new.name, name: property.name))
                    }
                } else if previous?[property: property.name] != nil {
                    try transaction.emit(.removeProperty(type: new.name, name: property.name))
                }
            }
        }
        for old in removedTypes { try transaction.emit(.removeType(old.name)) }
        for new in newSchema.types {
            if let existing = transaction.working.schema[type: new.name] {
                for property in new.properties where existing[property: property.name] == nil {
                    try transaction.emit(.addProperty(type: new.name, property))
                }
            } else {
                try transaction.emit(.addType(new))
            }
        }
        try transaction.emit(.setSchemaVersion(newSchema.version))
    }
}

@available(*, unavailable, message: "a migration runs inside one write transaction, on one thread")
extension MigrationContext: Sendable {}
