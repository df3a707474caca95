import Synchronization
import TributaryMerge
import TributaryModel
import TributaryStorage
import TributaryViews

/// Where the properties this release of the app declares live in the merged schema, when another release renamed
/// them since (docs/design/MixedReleases.md).
///
/// Releases of an app sync while users update. A later release's migration may rename a property this release still
/// declares (`name` to `fullName`): this release's models then read it from, and write it to, the new name, as its
/// writes would have landed had they been made before the rename. The renames followed are those the app's
/// declaration did not see (it was stored before they merged), by the merge rules' own walk (rule 8); a property that
/// such a change removed, or renamed to one of another shape, has no entry, and the model's value for it goes nowhere.
///
/// A later release may also define a property this release declares with another shape (`age` as a string where
/// this release has an int). This release's models then read it under their own shape: the values kept aside under
/// that shape (rule 8), or the property's default. Their writes of a single value go aside under their shape too,
/// when the schema keeps this release's definition as a losing one (two releases defined the property differently);
/// when a migration changed its type instead, they are dropped. Either way they fail neither to read nor to write,
/// and erase nothing the later release wrote.
struct ModelNames: Sendable {
    /// The merged schema's name of each declared property that another release renamed, by its declared name.
    var renamed: [PropertyName: String] = [:]
    /// This release's definition of each top-level property that the merged schema defines with another shape.
    var reshaped: [PropertyName: Property] = [:]
    /// Those of ``reshaped`` whose shape is one the merged schema keeps as a losing definition (rule 8): this
    /// release's writes of them are kept aside under it, and read back, instead of dropped.
    var keptAside: Set<PropertyName> = []

    var isEmpty: Bool { renamed.isEmpty && reshaped.isEmpty }

    /// This release's definitions of the properties of `type` that the merged schema defines with another shape.
    func reshaped(in type: String) -> [Property] {
        reshaped.isEmpty ? [] : reshaped.filter { $0.key.type == type }.map(\.value)
    }

    /// The merged schema's name of `property` of `type` as this release declares it, if another release renamed it.
    func target(of property: String, in type: String) -> String? {
        renamed.isEmpty ? nil : renamed[PropertyName(type: type, property: property)]
    }

    /// The names of `declared`'s properties that `schema` lacks, followed through the renames that the declaration,
    /// made when the replica held `anchor`, did not see.
    ///
    /// - Throws: ``TributaryError`` when the adoptions the walk reads cannot be read.
    static func compute(
        declared: Schema, schema: Schema, anchor: VersionVector, replica: ReplicaID, source: any RecordSource
    ) throws -> ModelNames {
        var names = ModelNames()
        for type in declared.types where !type.isEmbedded {
            guard let merged = schema[type: type.name] else { continue }
            for property in type.properties {
                guard let current = merged[property: property.name], current.shape != property.shape else { continue }
                let name = PropertyName(type: type.name, property: property.name)
                names.reshaped[name] = property
                // Single values only: a list or an embedded object written aside would need its own element ids.
                let isEmbedded = if case .embedded = property.kind { true } else { false }
                if !property.isList, !isEmbedded,
                    schema.losingDefinitions[name]?.contains(where: { $0.property.shape == property.shape }) == true
                {
                    names.keptAside.insert(name)
                }
            }
        }
        guard !schema.propertyRemovals.isEmpty else { return names }
        // What the declaration's commit saw: the anchor, and this replica's own changesets up to it.
        let info = ChangesetInfo(
            dot: Dot(origin: replica, sequence: anchor[replica] &+ 1), stamp: .zero, context: anchor)
        let causal = CausalResolver(source: source)
        for type in declared.types {
            guard let merged = schema[type: type.name] else { continue }
            for property in type.properties where merged[property: property.name] == nil {
                guard
                    let target = try info.writeTarget(
                        of: property.name, in: type.name, schema: schema, causal: causal),
                    target != property.name, let landed = merged[property: target], landed.shape == property.shape
                else { continue }
                names.renamed[PropertyName(type: type.name, property: property.name)] = target
            }
        }
        return names
    }
}

extension Replica {
    static let declarationAnchorKey = Array("declarationAnchor".utf8)

    /// `object` as a model of this release of the app, read after it was fetched (live results).
    func modelValue<M: Model>(_ type: M.Type, _ object: DynamicObject) throws -> M {
        let names = try modelNames()
        guard !names.reshaped(in: object.type).isEmpty || schema[type: object.type]?.linkingObjects.isEmpty == false
        else {
            return try ModelCoding.model(M.self, from: object, names: names)
        }
        return try read { snapshot in
            try snapshot.modelValue(M.self, object, names: names, backlinks: ReaderObjectSource(snapshot))
        }
    }

    /// `object` as this release's models read it (see ``ModelNames``), reading its record when some property of its
    /// type has another shape here.
    func asDeclared(_ object: DynamicObject, names: ModelNames, record: (String, PrimaryKey) throws -> ObjectRecord?)
        rethrows -> DynamicObject
    {
        let reshaped = names.reshaped(in: object.type)
        guard !reshaped.isEmpty else { return object }
        return object.showing(
            reshaped, of: try record(object.type, object.primaryKey), in: appSchema.withLock { $0 } ?? schema)
    }

    /// The ``ModelNames`` of the app's declaration in the schema of the last commit, computed on first use after each
    /// schema change. Empty when the app declared no schema, or when the declaration predates the builds that store
    /// what it saw.
    func modelNames() throws -> ModelNames {
        let (generation, cached) = modelNamesCache.withLock { ($0.generation, $0.names) }
        if let cached { return cached }
        guard let declared = appSchema.withLock({ $0 }) else { return ModelNames() }
        let names = try environment.read { txn in
            guard let schema = try views.schema(in: txn) else { return ModelNames() }
            return try modelNames(declared: declared, schema: schema, in: txn)
        }
        modelNamesCache.withLock { cache in
            if cache.generation == generation { cache.names = names }
        }
        return names
    }

    /// The ``ModelNames`` of `declared` in `schema`, read in `txn`.
    func modelNames(declared: Schema, schema: Schema, in txn: TributaryStorageReadTransaction) throws -> ModelNames {
        // Without an anchor (a declaration stored before builds kept one), every rename counts as seen.
        var anchor = schema.propertyRemovals.isEmpty ? VersionVector() : try versionVector(in: txn)
        if !schema.propertyRemovals.isEmpty, let bytes = try txn.get(identity, key: Self.declarationAnchorKey) {
            anchor = try ViewStore.decodeVector(bytes, subject: "declaration anchor")
        }
        return try ModelNames.compute(
            declared: declared, schema: schema, anchor: anchor, replica: replicaID,
            source: ReplicaRecordSource(views: views, log: log, transaction: txn))
    }
}

extension DynamicObject {
    /// This object with the values of `properties` (an app release's definitions of properties that the schema
    /// defines with other shapes) as that release reads them: the states `record` keeps aside under their shapes
    /// (rule 8), or their defaults. `schema` is the release's, for the embedded types they hold.
    func showing(_ properties: [Property], of record: ObjectRecord?, in schema: Schema) -> DynamicObject {
        var values = self.values
        for property in properties {
            values[property.name] = ObjectRecord.value(
                record?.fields[property.name, shape: property.shape], of: property, in: schema)
        }
        return DynamicObject(type: type, primaryKey: primaryKey, values: values)
    }
}

/// Where this release of the app stands among the releases that synced with its replica: what an app shows when it
/// asks the user to update, or logs when a property it declares no longer holds what it expects.
public struct SchemaStatus: Sendable, Hashable {
    /// The versions this release declared (`nil` for a replica opened without a schema).
    public var declared: DeclaredSchemaVersions?
    /// The highest schema version any release declared to the replicas this one synced with.
    public var highestDeclared: UInt64
    /// The highest schema version a migration took the data to (0 when none ran).
    public var migrated: UInt64
    /// Properties this release declares that a later release renamed: this release's models read and write them
    /// under the new name.
    public var renamed: [PropertyName: String]
    /// Properties this release declares that another release defined with another shape: this release's models read
    /// and write them under their own definition, kept aside (or drop their writes, when a migration changed the
    /// property's type).
    public var reshaped: [PropertyName]
    /// Properties this release declares that another release removed: its models read their defaults, and their
    /// writes of them are dropped.
    public var removed: [PropertyName]
    /// Properties of the types this release declares that only other releases declare: this release's models leave
    /// them as they are.
    public var undeclared: [PropertyName]

    /// Whether a release later than this one synced with this replica: the app may ask the user to update.
    public var laterReleaseSynced: Bool { declared.map { highestDeclared > $0.current } ?? false }
}

extension Replica {
    /// Where this release of the app stands among the releases that synced with this replica (``SchemaStatus``).
    ///
    /// - Throws: ``TributaryError`` when the replica cannot be read.
    public func schemaStatus() throws -> SchemaStatus {
        let schema = self.schema
        let names = try modelNames()
        let declared = appSchema.withLock { $0 }
        var removed: [PropertyName] = []
        var undeclared: [PropertyName] = []
        for type in declared?.types ?? [] {
            guard let merged = schema[type: type.name] else { continue }
            for property in type.properties where merged[property: property.name] == nil {
                let name = PropertyName(type: type.name, property: property.name)
                if names.renamed[name] == nil { removed.append(name) }
            }
            let renameTargets = Set(names.renamed.filter { $0.key.type == type.name }.values)
            for property in merged.properties
            where type[property: property.name] == nil && !renameTargets.contains(property.name) {
                undeclared.append(PropertyName(type: type.name, property: property.name))
            }
        }
        return SchemaStatus(
            declared: try declaredVersions(), highestDeclared: schema.version, migrated: schema.migratedVersion,
            renamed: names.renamed, reshaped: names.reshaped.keys.sorted(), removed: removed.sorted(),
            undeclared: undeclared.sorted())
    }
}
