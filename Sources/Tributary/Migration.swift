import TributaryMerge
public import TributaryModel

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
    /// The object's primary key; for an embedded object (``MigrationContext/enumerateObjects(_:_:)`` of an embedded
    /// type), its top-level parent's.
    public let primaryKey: PrimaryKey
    /// For an embedded object, where its top-level parent holds it (`["history", 2]`, `["latest", "last"]`); empty
    /// for a top-level object.
    public internal(set) var path: PropertyPath = []
    /// The property values in the new schema. Properties new in this version start at their default (or null).
    ///
    /// In an object the migration creates, a property that still holds the value it started with, and was neither
    /// given to ``MigrationContext/create(_:_:)`` nor set through the subscript, is left to the schema's default,
    /// as any create leaves what it is not given: a concurrent write on another device wins over it (rule 3). (Not
    /// when the migration deleted an old object of the same key: every property is written then.)
    public var values: [String: Value]
    var isDeleted = false
    /// Whether it is the new version of an object that existed before the migration.
    var isFromOldObject = false
    /// The values it was made with (or a rename last gave it), to tell what the migration changed since.
    var carriedValues: [String: Value] = [:]
    /// How many renames the migration had asked for when it was made: its embedded values carry those.
    var renamesCarried = 0
    /// The properties the migration set through the subscript: written even when they hold what was carried.
    var assigned = Set<String>()
    /// For an object the migration created: the properties its `create` gave.
    var given = Set<String>()

    init(type: String, primaryKey: PrimaryKey, values: [String: Value]) {
        self.type = type
        self.primaryKey = primaryKey
        self.values = values
    }

    /// A property's value in the new schema. A value set here is written, even one equal to what the object held.
    public subscript(property: String) -> Value {
        get { values[property] ?? .null }
        set {
            values[property] = newValue
            assigned.insert(property)
        }
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
    /// Renames, in the order the migration asked for them.
    var renames: [(type: String, from: String, to: String)] = []
    /// The old objects the migration deleted, by type.
    var deletedOldKeys: [String: Set<PrimaryKey>] = [:]

    init(oldSchema: Schema, declared: Schema, newSchema: Schema, transaction: Transaction) throws {
        // How far the data was migrated: by a migration of any replica (its mark), or by this device's own
        // declaration (its data was written at that version). A later release installed fresh elsewhere raises
        // neither, so the steps it skipped still run here.
        self.oldSchemaVersion = max(oldSchema.migratedVersion, declared.version)
        self.oldSchema = oldSchema
        self.newSchema = newSchema
        self.declared = declared
        self.transaction = transaction
        for type in oldSchema.types where !type.isEmbedded {
            var objects = try transaction.objects(type.name)
            // A property that another release defined with another shape, and whose definition won (rule 8), shows
            // its values; this device's were kept aside under the shape it declared, and are what its migration
            // reads as the old values.
            let asideShapes = (declared[type: type.name]?.properties ?? []).filter { property in
                type[property: property.name].map { $0.shape != property.shape } ?? false
            }
            if !asideShapes.isEmpty {
                for index in objects.indices {
                    let object = objects[index]
                    objects[index] = object.showing(
                        asideShapes, of: try transaction.record(type.name, object.primaryKey), in: declared)
                }
            }
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
    ///
    /// For an embedded type, `body` is called for every embedded object of that type wherever it is held (in a
    /// property, a list, or another embedded object) in an object that stays: `old` and `new` carry the parent's
    /// primary key, `new.path` says where the parent holds it, and a change to `new` (or ``delete(_:)``, which removes it from its parent) is written into the
    /// parent when the migration ends. Embedded objects in a list are paired by position.
    public func enumerateObjects(_ type: String, _ body: (_ old: DynamicObject, _ new: MigrationObject?) throws -> Void)
        rethrows
    {
        if oldSchema[type: type]?.isEmbedded == true {
            try enumerateEmbedded(type, body)
            return
        }
        for old in oldObjects[type] ?? [] {
            let new = newObject(type, old.primaryKey)
            try body(old, new.flatMap { $0.isDeleted ? nil : $0 })
        }
    }

    private func enumerateEmbedded(
        _ type: String, _ body: (_ old: DynamicObject, _ new: MigrationObject?) throws -> Void
    ) rethrows {
        /// Visits the embedded objects of `type` in `old` (a value of the old schema) and its counterpart `new`:
        /// `new` as the migration leaves it, or `nil` when `body` deleted it.
        func visit(_ old: Value, _ new: Value, key: PrimaryKey, path: PropertyPath) throws -> Value? {
            switch (old, new) {
            case (.list(let oldElements), .list(let newElements)):
                var elements: [Value] = []
                for (index, element) in newElements.enumerated() {
                    guard index < oldElements.count else {
                        elements.append(element)
                        continue
                    }
                    if let kept = try visit(oldElements[index], element, key: key, path: path + [.index(index)]) {
                        elements.append(kept)
                    }
                }
                return .list(elements)
            case (.embedded(let oldObject), .embedded(var newObject)):
                if oldObject.type == type {
                    let proxy = MigrationObject(type: type, primaryKey: key, values: newObject.fields)
                    proxy.path = path
                    try body(DynamicObject(type: type, primaryKey: key, values: oldObject.fields), proxy)
                    if proxy.isDeleted { return nil }
                    newObject.fields = proxy.values
                }
                for (name, value) in oldObject.fields.sorted(by: { $0.key < $1.key }) {
                    guard let counterpart = newObject.fields[name] else { continue }
                    newObject.fields[name] =
                        try visit(value, counterpart, key: key, path: path + [.property(name)]) ?? .null
                }
                return .embedded(newObject)
            default:
                return new
            }
        }
        for parent in oldSchema.types where !parent.isEmbedded && embeds(parent.name, type, in: oldSchema) {
            for old in oldObjects[parent.name] ?? [] {
                guard let new = newObject(parent.name, old.primaryKey), !new.isDeleted else { continue }
                for property in parent.properties {
                    guard case .embedded = property.kind else { continue }
                    let name = renamedName(parent.name, property.name)
                    guard let current = new.values[name] else { continue }
                    let updated =
                        try visit(old[property.name], current, key: old.primaryKey, path: [.property(name)]) ?? .null
                    if updated != current {
                        new.values[name] = updated
                        new.assigned.insert(name)
                    }
                }
            }
        }
    }

    /// Renames a property, keeping its values. The new schema names it `newName`; the old one `oldName`.
    ///
    /// Renames apply in the order they are asked for, each to the names the ones before it left: `a` to `b` at one
    /// step and `b` to `c` at a later one rename `a` to `c`; `b` to `c` and then `a` to `b` shift both. It works on
    /// embedded types too. Objects enumerated before the rename get the renamed values: a value the migration set
    /// under `oldName` moves to `newName`; otherwise the properties (or embedded fields) this rename names take their
    /// values from the old objects again. The migration fails, naming the property, when the stored schema has no
    /// property `oldName` to rename (and none renamed to `newName` already) or the new schema none named as it ends up.
    public func renameProperty(onType type: String, from oldName: String, to newName: String) {
        renames.append((type, oldName, newName))
        // Embedded fields are renamed when the migration ends (``completed(_:as:)``). Objects of a top-level type
        // (or one becoming embedded) already made get the renamed properties' values.
        guard let oldType = oldSchema[type: type], !oldType.isEmbedded, let newType = newSchema[type: type] else {
            return
        }
        for object in newObjects[type]?.values ?? [:].values where object.isFromOldObject {
            guard let old = oldObject(type, object.primaryKey) else { continue }
            // A value the migration set under the old name moves to the new one.
            let moved = object.values[oldName].flatMap { current in
                current.storesAlike(object.carriedValues[oldName] ?? .null) ? nil : current
            }
            for name in [newName, oldName] {
                guard let newProperty = newType[property: name], name != newType.primaryKey else { continue }
                let origin = oldType.properties.first {
                    $0.name != oldType.primaryKey && renamedName(type, $0.name) == name
                }
                let value =
                    origin.flatMap { carried(old[$0.name], from: $0, to: newProperty) }
                    ?? Self.defaultValue(of: newProperty)
                object.values[name] = value
                object.carriedValues[name] = value
            }
            if newType[property: oldName] == nil { object.values.removeValue(forKey: oldName) }
            if let moved { object.values[newName] = moved }
        }
    }

    /// Creates an object in the new schema. Returns it, for further changes.
    @discardableResult
    public func create(_ type: String, _ values: [String: Value]) throws -> MigrationObject {
        guard let objectType = newSchema[type: type], !objectType.isEmbedded, let keyName = objectType.primaryKey else {
            throw TributaryError(.unknownType, "the new schema has no top-level type '\(type)'")
        }
        guard let key = values[keyName].flatMap(PrimaryKey.init) else {
            throw TributaryError(
                .missingProperty, "creating \(type) in a migration: its primary key '\(keyName)' is missing")
        }
        if let existing = newObject(type, key), !existing.isDeleted {
            throw TributaryError(.duplicatePrimaryKey, "creating \(type) \(key) in a migration: it exists")
        }
        let object = MigrationObject(type: type, primaryKey: key, values: defaults(objectType).merging(values) { $1 })
        object.given = Set(values.keys)
        newObjects[type, default: [:]][key] = object
        newOrder[type, default: []].append(key)
        return object
    }

    /// Deletes an object (by its new-schema handle).
    public func delete(_ object: MigrationObject) {
        object.isDeleted = true
        if object.isFromOldObject { deletedOldKeys[object.type, default: []].insert(object.primaryKey) }
    }

    /// Deletes every object of a type.
    public func deleteAll(_ type: String) {
        for old in oldObjects[type] ?? [] { newObject(type, old.primaryKey).map(delete) }
        for object in newObjects[type]?.values ?? [:].values { delete(object) }
    }
}

@available(*, unavailable, message: "a migration runs inside one write transaction, on one thread")
extension MigrationContext: Sendable {}
