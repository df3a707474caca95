import TributaryMerge
public import TributaryModel
import TributaryStorage

/// Code that carries data from an older schema version to a newer one, run inside the transaction that changes
/// the schema: if it throws, the replica stays exactly as it was.
public struct Migration: Sendable {
    let body: @Sendable (MigrationContext) throws -> Void

    /// - Parameter body: called once with the old schema version, inside the migration's transaction.
    public init(_ body: @escaping @Sendable (MigrationContext) throws -> Void) {
        self.body = body
    }
}

/// What a ``Migration`` works with.
public final class MigrationContext {
    /// The schema version the replica had.
    public let oldSchemaVersion: UInt64
    /// The schema the replica had.
    public let oldSchema: Schema
    /// The schema the replica is migrating to.
    public let newSchema: Schema
    /// The migration's transaction, for reads and writes in the new schema.
    public let transaction: Transaction

    init(oldSchema: Schema, newSchema: Schema, transaction: Transaction) {
        self.oldSchemaVersion = oldSchema.version
        self.oldSchema = oldSchema
        self.newSchema = newSchema
        self.transaction = transaction
    }
}

extension Replica {
    static let declaredSchemaKey = Array("declaredSchema".utf8)

    /// The schema the app last opened this replica with (its own declaration, which may list less than the merged
    /// schema: other replicas and runtime schema changes may have added types and properties).
    func declaredSchema() throws -> Schema? {
        try environment.read { txn in
            guard let bytes = try txn.get(identity, key: Self.declaredSchemaKey) else { return nil }
            var reader = BinaryReader(bytes, subject: "declared schema")
            return try reader.schema()
        }
    }

    func storeDeclaredSchema(_ schema: Schema) throws {
        var writer = BinaryWriter()
        writer.schema(schema)
        try environment.write { txn in try txn.put(identity, key: Self.declaredSchemaKey, value: writer.bytes) }
    }

    /// Checks the schema given at open against the one the app declared last time; starts, keeps or migrates it.
    ///
    /// The comparison is with the app's previous declaration, not with the merged schema: what other replicas (or
    /// runtime schema changes) added stays, and does not make the app's unchanged schema "differ".
    func reconcile(schema given: Schema, migration: Migration?) throws {
        do {
            try given.validate()
        } catch {
            throw TributaryError(.schemaMismatch, "the schema given to open \(directory) is invalid: \(error)", underlying: error)
        }
        let stored = self.schema
        if stored.types.isEmpty && lastLocalSequence == 0 {
            try write { txn in
                for type in given.types { try txn.emit(.addType(type)) }
                try txn.emit(.setSchemaVersion(given.version))
            }
            try storeDeclaredSchema(given)
            return
        }
        let declared = try declaredSchema() ?? stored
        if given.version < stored.version {
            throw TributaryError(
                .schemaMismatch,
                "schema version \(given.version) is lower than the stored schema version \(stored.version) of \(directory); "
                    + "open it with version \(stored.version) or higher")
        }
        if given.version == stored.version {
            let differences = given.differences(from: declared)
            guard differences.isEmpty else {
                throw TributaryError(
                    .migrationRequired,
                    "Migration is required due to the following errors:\n"
                        + differences.map { "- \($0)" }.joined(separator: "\n")
                        + "\nRaise the schema version (now \(stored.version)) to migrate.")
            }
            // The same declaration: anything it has that the merged schema lacks (it cannot, unless the replica was
            // rebuilt) is added back.
            if !given.isSubset(of: stored) {
                try write { txn in
                    for type in given.types {
                        if let existing = txn.schema[type: type.name] {
                            for property in type.properties where existing[property: property.name] == nil {
                                try txn.emit(.addProperty(type: type.name, property))
                            }
                        } else {
                            try txn.emit(.addType(type))
                        }
                    }
                }
            }
            return
        }
        try migrate(from: stored, declared: declared, to: given, migration: migration)
        try storeDeclaredSchema(given)
    }

    /// Changes the stored schema to `target` in one transaction: what the app's previous declaration had and the new
    /// one lacks is removed with its data (what other replicas added stays), changed properties are replaced, new
    /// types and properties are added; then `migration` runs.
    func migrate(from stored: Schema, declared: Schema, to target: Schema, migration: Migration?) throws {
        do {
            try write { txn in
                let removedTypes = declared.types.filter { old in
                    guard let new = target[type: old.name] else { return stored[type: old.name] != nil }
                    return new.isEmbedded != old.isEmbedded
                }
                for old in removedTypes where !old.isEmbedded {
                    for key in try txn.working.keys(ofType: old.name) {
                        try txn.emit(.erase(type: old.name, primaryKey: key.primaryKey))
                    }
                }
                // Properties removed or redefined, then types removed, then additions.
                for new in target.types {
                    guard let current = stored[type: new.name], current.isEmbedded == new.isEmbedded else { continue }
                    let previous = declared[type: new.name]
                    for property in current.properties where property.name != current.primaryKey {
                        if let replacement = new[property: property.name] {
                            if replacement == property { continue }
                            if replacement.kind == property.kind, replacement.isList == property.isList,
                                replacement.isOptional == property.isOptional
                            {
                                // Only the index or the default changed: keep the data.
                                try txn.emit(.redefineProperty(type: new.name, replacement))
                            } else {
                                try txn.emit(.removeProperty(type: new.name, name: property.name))
                            }
                        } else if previous?[property: property.name] != nil {
                            try txn.emit(.removeProperty(type: new.name, name: property.name))
                        }
                    }
                }
                for old in removedTypes { try txn.emit(.removeType(old.name)) }
                for new in target.types {
                    if let existing = txn.working.schema[type: new.name] {
                        for property in new.properties where existing[property: property.name] == nil {
                            try txn.emit(.addProperty(type: new.name, property))
                        }
                    } else {
                        try txn.emit(.addType(new))
                    }
                }
                try txn.emit(.setSchemaVersion(target.version))
                if let migration {
                    try migration.body(MigrationContext(oldSchema: stored, newSchema: target, transaction: txn))
                }
            }
        } catch let error as TributaryError {
            throw TributaryError(
                .migrationFailed,
                "migrating \(directory) from schema version \(stored.version) to \(target.version) failed; "
                    + "the replica is unchanged: \(error.message)", underlying: error)
        }
    }
}
