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
struct ModelNames: Sendable {
    /// The merged schema's name of each declared property that another release renamed, by its declared name.
    var renamed: [PropertyName: String] = [:]

    var isEmpty: Bool { renamed.isEmpty }

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
        guard !schema.propertyRemovals.isEmpty,
            let bytes = try txn.get(identity, key: Self.declarationAnchorKey)
        else { return ModelNames() }
        let anchor = try ViewStore.decodeVector(bytes, subject: "declaration anchor")
        return try ModelNames.compute(
            declared: declared, schema: schema, anchor: anchor, replica: replicaID,
            source: ReplicaRecordSource(views: views, log: log, transaction: txn))
    }
}
