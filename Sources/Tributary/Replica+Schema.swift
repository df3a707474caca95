import TributaryMerge
public import TributaryModel

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
    /// Checks the schema given at open against the stored one; starts, keeps or migrates it.
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
            return
        }
        if given.version < stored.version {
            throw TributaryError(
                .schemaMismatch,
                "schema version \(given.version) is lower than the stored schema version \(stored.version) of \(directory); "
                    + "open it with version \(stored.version) or higher")
        }
        let differences = given.differences(from: stored)
        if given.version == stored.version {
            guard differences.isEmpty else {
                throw TributaryError(
                    .migrationRequired,
                    "Migration is required due to the following errors:\n"
                        + differences.map { "- \($0)" }.joined(separator: "\n")
                        + "\nRaise the schema version (now \(stored.version)) to migrate.")
            }
            return
        }
        try migrate(from: stored, to: given, migration: migration)
    }

    /// Changes the stored schema to `target` in one transaction: types and properties that went away are removed
    /// with their data, new ones added, changed ones replaced; then `migration` runs.
    func migrate(from stored: Schema, to target: Schema, migration: Migration?) throws {
        do {
            try write { txn in
                for old in stored.types where target[type: old.name] == nil || target[type: old.name]!.isEmbedded != old.isEmbedded {
                    for key in try txn.working.keys(ofType: old.name) where !old.isEmbedded {
                        try txn.emit(.erase(type: old.name, primaryKey: key.primaryKey))
                    }
                }
                // Properties first removed or replaced, then types removed, then additions.
                for new in target.types {
                    guard let old = stored[type: new.name], old.isEmbedded == new.isEmbedded else { continue }
                    for property in old.properties {
                        if let replacement = new[property: property.name], replacement == property { continue }
                        if let replacement = new[property: property.name],
                            replacement.kind == property.kind, replacement.isList == property.isList,
                            replacement.isOptional == property.isOptional
                        {
                            // Only the index or default changed: keep the data.
                            try txn.emit(.removeProperty(type: new.name, name: property.name))
                            try txn.emit(.addProperty(type: new.name, replacement))
                            continue
                        }
                        try txn.emit(.removeProperty(type: new.name, name: property.name))
                    }
                }
                for old in stored.types where target[type: old.name] == nil || target[type: old.name]!.isEmbedded != old.isEmbedded {
                    try txn.emit(.removeType(old.name))
                }
                for new in target.types {
                    if let old = txn.working.schema[type: new.name] {
                        for property in new.properties where old[property: property.name] == nil {
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
