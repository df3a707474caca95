import TributaryMerge
import TributaryModel
import TributaryStorage

/// The schema versions an app declared to a replica: what a sync daemon checks against the versions it accepts.
public struct DeclaredSchemaVersions: Sendable, Hashable {
    /// The version the app last opened the replica with.
    public var current: UInt64
    /// The version the replica's history starts at: the one it was created with (or created again, by a client
    /// reset). `nil` for a replica created by a build that did not record it.
    public var first: UInt64?

    public init(current: UInt64, first: UInt64?) {
        self.current = current
        self.first = first
    }
}

extension Replica {
    static let declaredSchemaKey = Array("declaredSchema".utf8)
    static let firstDeclaredVersionKey = Array("firstDeclaredVersion".utf8)

    /// The schema versions the app declared to this replica; `nil` when it was opened without a schema so far (a
    /// daemon's replica, say).
    ///
    /// - Throws: ``TributaryError`` when the stored declaration cannot be read.
    public func declaredVersions() throws -> DeclaredSchemaVersions? {
        try environment.read { txn in
            guard let bytes = try txn.get(identity, key: Self.declaredSchemaKey) else { return nil }
            var reader = BinaryReader(bytes, subject: "declared schema")
            let declared = try reader.schema()
            let first = try Self.identityNumber(
                Self.firstDeclaredVersionKey, "first declared schema version", identity: identity, in: txn)
            return DeclaredSchemaVersions(current: declared.version, first: first)
        }
    }

    /// The schema the app last opened this replica with (its own declaration, which may list less than the merged
    /// schema: other replicas and runtime schema changes may have added types and properties).
    func declaredSchema() throws -> Schema? {
        try environment.read { txn in
            guard let bytes = try txn.get(identity, key: Self.declaredSchemaKey) else { return nil }
            var reader = BinaryReader(bytes, subject: "declared schema")
            return try reader.schema()
        }
    }

    /// Checks the schema given at open against the one the app declared last time; starts, keeps or migrates it.
    ///
    /// The comparison is with the app's previous declaration, not with the merged schema: what other replicas (or
    /// runtime schema changes) added stays, and does not make the app's unchanged schema "differ".
    func reconcile(schema given: Schema, migration: Migration?) throws {
        do {
            try given.validateDeclaration()
        } catch {
            throw TributaryError(
                .schemaMismatch, "the schema given to open \(directory) is invalid: \(error)", underlying: error)
        }
        let stored = self.schema
        if stored.types.isEmpty && lastLocalSequence == 0 {
            try write { txn in
                // No migration mark: a new replica migrated nothing (a device of an earlier release that updates
                // later still runs its steps on its data).
                for type in given.types { try txn.emit(.addType(type)) }
                try txn.emit(.setSchemaVersion(given.version))
                txn.declaredSchema = given
                txn.startsHistory = true
            }
            return
        }
        // An earlier build may have stored a declaration with defaults this one refuses; the app, which had to
        // remove them, declares the same schema.
        let declared = (try declaredSchema() ?? stored).withoutUnmergeableDefaults
        // Compared with this replica's own last declaration, not with the merged schema's version: a later release
        // syncing with this one raises that, and an app of the earlier release must keep opening its replica while
        // users update.
        if given.version < declared.version {
            throw TributaryError(
                .schemaMismatch,
                "schema version \(given.version) is lower than version \(declared.version), which \(directory) was last "
                    + "opened with (by a later release of the app); open it with version \(declared.version) or "
                    + "higher, or delete the replica and sync it again")
        }
        if given.version == declared.version {
            let differences = given.differences(from: declared)
            guard differences.isEmpty else {
                throw TributaryError(
                    .migrationRequired,
                    "Migration is required due to the following errors:\n"
                        + differences.map { "- \($0)" }.joined(separator: "\n")
                        + "\nRaise the schema version (now \(declared.version)) to migrate.")
            }
            // The same declaration: what it has that the merged schema lacks is added back (a replica rebuilt from
            // a log that lacks it).
            try declare(given, over: stored, storing: false)
            return
        }
        if stored.migratedVersion >= given.version {
            // Another replica's migration took the data to this version (or past it) already, and its changes are
            // here: no step runs again, and what the declaration adds that the merged schema lacks is added.
            try declare(given, over: stored, storing: true)
            return
        }
        try migrate(from: stored, declared: declared, to: given, migration: migration)
    }

    /// Adds what `given` declares and the merged schema `stored` lacks, but not what a migration removed or renamed
    /// (another release's decision, which this release's declaration must not undo); with `storing`, stores `given`
    /// as the app's declaration by the same commit.
    private func declare(_ given: Schema, over stored: Schema, storing: Bool) throws {
        let missing = given.types.compactMap { type -> (ObjectSchema, [Property])? in
            guard stored.removals(ofType: type.name).isEmpty else { return nil }
            guard let existing = stored[type: type.name] else { return (type, []) }
            let properties = type.properties.filter {
                existing[property: $0.name] == nil && stored.removals(of: $0.name, in: type.name).isEmpty
            }
            return properties.isEmpty ? nil : (type, properties)
        }
        guard !missing.isEmpty || storing else { return }
        try write { txn in
            for (type, properties) in missing {
                if properties.isEmpty {
                    try txn.emit(.addType(type))
                } else {
                    for property in properties { try txn.emit(.addProperty(type: type.name, property)) }
                }
            }
            if storing {
                txn.declaredSchema = given
                // A commit needs an instruction; this one changes nothing (the merged version is higher already).
                if txn.instructions.isEmpty { try txn.emit(.setSchemaVersion(given.version)) }
            }
        }
    }

    /// Changes the schema to `target` in one transaction, which records the change in the log like any other write:
    /// what the app's previous declaration had and the new one lacks is removed with its data (what other replicas
    /// added stays); renamed properties keep their values; changed properties get the values the migration gives
    /// them; types made embedded move into their parents; new types and properties are added.
    ///
    /// The new declaration is stored by the same commit. A storage failure keeps its own code (`.diskFull`,
    /// `.mapFull`, `.storage`...), so that callers handle it as they handle it for any write; every other failure is
    /// `.migrationFailed`. Either way nothing was committed.
    func migrate(from stored: Schema, declared: Schema, to target: Schema, migration: Migration?) throws {
        do {
            try write { txn in
                let context = try MigrationContext(
                    oldSchema: stored, declared: declared, newSchema: target, transaction: txn)
                if let migration { try migration.run(context) }
                try context.apply()
                txn.declaredSchema = target
                // A commit stores the declaration; one that changes nothing else still records the version.
                if txn.instructions.isEmpty { try txn.emit(.setSchemaVersion(target.version)) }
            }
        } catch let error as TributaryError {
            let storageCodes: [TributaryError.Code] = [.diskFull, .mapFull, .storage, .closed, .corrupted]
            // A required field of an embedded object left without a value: what the app can do about it.
            let hint =
                error.message.hasSuffix("got null (the property is required)")
                ? "; declare a default for it (a constant initial value under @Model or @EmbeddedModel, or "
                    + "defaultValues), make it optional, or set it in the migration (enumerateObjects works on "
                    + "embedded types)"
                : ""
            throw TributaryError(
                storageCodes.contains(error.code) ? error.code : .migrationFailed,
                "migrating \(directory) from schema version \(stored.version) to \(target.version) failed; "
                    + "the replica is unchanged: \(error.message)\(hint)", underlying: error)
        }
    }
}
