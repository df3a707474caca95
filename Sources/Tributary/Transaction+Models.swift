import Synchronization
import TributaryMerge
public import TributaryModel

extension Transaction {
    /// The values of a model object: those of the properties its release declares (a property that another release
    /// of the app added, and this one does not know, is left out, so that a write of this release leaves it as it
    /// is). The declaration is the schema the app gave at open (``Replica/appSchema``), or, when it gave none that
    /// holds the type, the model type's own shape.
    func modelValues<M: Model>(_ object: M) throws -> (ObjectSchema, [String: Value]) {
        let (type, values, _) = try modelValuesAndAside(object)
        return (type, values)
    }

    /// ``modelValues(_:)``, and the values this release writes aside under its own definitions (``ModelNames``).
    func modelValuesAndAside<M: Model>(_ object: M) throws -> (ObjectSchema, [String: Value], aside: [String: Value]) {
        if let plan = try modelWritePlan(M.self), let values = plan.values(of: object) {
            return (plan.type, plan.dictionary(values), [:])
        }
        let type = try working.schema.requireType(M.typeName)
        var declared = replica.appSchema.withLock { $0 }
        if declared?[type: M.typeName] == nil { declared = ModelShapes.shape(of: M.self) }
        let (values, aside) = try ModelCoding.valuesAndAside(
            of: object, type: type, schema: working.schema, declared: declared, names: try modelNames())
        return (type, values, aside)
    }

    /// Writes `aside` (``modelValuesAndAside(_:)``) to the object of `type` with `key`, each under this release's
    /// definition of its property: kept aside in the object (rule 8), where this release's models read it.
    func writeAside(_ aside: [String: Value], of type: String, _ key: PrimaryKey) throws {
        guard !aside.isEmpty else { return }
        let names = try modelNames()
        let declared = replica.appSchema.withLock { $0 }
        for (name, value) in aside.sorted(by: { $0.key < $1.key }) {
            guard let property = names.reshaped[PropertyName(type: type, property: name)] else { continue }
            if let problem = (declared ?? working.schema).problem(with: value, for: property) {
                throw TributaryError(.wrongType, "'\(type).\(name)': \(problem)")
            }
            let record = try self.record(type, key)
            let current = ObjectRecord.value(
                record?.fields[name, shape: property.shape], of: property, in: declared ?? working.schema)
            if current.storesAlike(value) { continue }
            try emit(.set(FieldPath(type: type, primaryKey: key, property: name), value), writtenAs: property)
        }
    }

    /// Creates an object from a model value.
    ///
    /// - Throws: ``TributaryError`` with `.duplicatePrimaryKey` when an object with its primary key exists.
    @discardableResult
    public func create<M: Model>(_ object: M) throws -> PrimaryKey {
        if let plan = try modelWritePlan(M.self), let values = plan.values(of: object) {
            let key = try checkedKey(plan.type, keyValue: values[plan.keySlot])
            try requireAbsent(M.typeName, key)
            try emit(
                plannedCreate(plan.type, key, plan.create) { values[$0] }
                    ?? checkedCreate(plan.type, key, plan.dictionary(values)))
            return key
        }
        let (type, values, aside) = try modelValuesAndAside(object)
        let key = try create(M.typeName, values, fallbacks: try fallbacks(for: type))
        try writeAside(aside, of: M.typeName, key)
        return key
    }

    /// Creates an object from each model value, in order: an import of many objects in one transaction.
    ///
    /// ```swift
    /// try replica.write { txn in try txn.create(contentsOf: messagesFromTheAPI) }
    /// ```
    ///
    /// - Returns: the objects' primary keys, in order.
    /// - Throws: ``TributaryError`` for the first object that cannot be created (`.duplicatePrimaryKey` when an object
    ///   with its primary key exists, or was created earlier in the sequence). The objects before it stay created in
    ///   the transaction; an error that leaves the ``Replica/write(_:)-9m3ir`` closure discards them all.
    @discardableResult
    public func create<S: Sequence>(contentsOf objects: S) throws -> [PrimaryKey] where S.Element: Model {
        var keys: [PrimaryKey] = []
        keys.reserveCapacity(objects.underestimatedCount)
        for object in objects { keys.append(try create(object)) }
        return keys
    }

    /// Creates an object, or updates the existing one with the same primary key (writing only what changed).
    @discardableResult
    public func upsert<M: Model>(_ object: M) throws -> PrimaryKey {
        let (type, values, aside) = try modelValuesAndAside(object)
        let key = try upsert(M.typeName, values, leavingAbsentFields: true, fallbacks: try fallbacks(for: type))
        try writeAside(aside, of: M.typeName, key)
        return key
    }

    /// The fast path's plan for writing models of type `M` (``ModelWritePlan``), or `nil` when the general path
    /// writes them: this release declares other properties for the type than the schema holds, or another release
    /// renamed or redefined some property of the schema.
    func modelWritePlan<M: Model>(_ model: M.Type) throws -> ModelWritePlan? {
        let id = ObjectIdentifier(model)
        if let known = modelWritePlans[id] { return known }
        var plan: ModelWritePlan?
        if let type = working.schema[type: M.typeName], try modelNames().isEmpty {
            let declared =
                replica.appSchema.withLock { $0 }.flatMap { $0[type: M.typeName] != nil ? $0 : nil }
                ?? ModelShapes.shape(of: model)
            let declaredNames = declared?[type: M.typeName].map { Set($0.properties.map(\.name)) }
            if declaredNames == nil || declaredNames == Set(type.properties.map(\.name)) {
                plan = ModelWritePlan(type: type, schema: working.schema, declared: declared)
            }
        }
        modelWritePlans[id] = .some(plan)
        return plan
    }

    /// For a model of this release: the defaults a create gives the required properties of `type` that another
    /// release defined with another shape and that have no default (their values from this release's model go
    /// nowhere, ``ModelNames``): the zero value of the definition that shows, which any value written beats.
    func fallbacks(for type: ObjectSchema) throws -> [String: Value] {
        let reshaped = try modelNames().reshaped(in: type.name)
        guard !reshaped.isEmpty else { return [:] }
        var fallbacks: [String: Value] = [:]
        for declared in reshaped {
            guard let property = type[property: declared.name], !property.isOptional, !property.isList,
                property.createDefault == nil
            else { continue }
            fallbacks[property.name] = ObjectRecord.zeroValue(property.kind)
        }
        return fallbacks
    }

    /// Updates the stored object with the model value's primary key to equal it, writing only what changed.
    public func update<M: Model>(_ object: M) throws {
        let (type, values, aside) = try modelValuesAndAside(object)
        guard let keyName = type.primaryKey, let key = values[keyName].flatMap(PrimaryKey.init) else {
            throw TributaryError(.missingProperty, "\(M.typeName) has no primary key value")
        }
        var changes = values
        changes.removeValue(forKey: keyName)
        try update(M.typeName, primaryKey: key, changes, leavingAbsentFields: true)
        try writeAside(aside, of: M.typeName, key)
    }

    /// Deletes the object of a model type with a primary key. Returns whether it existed.
    @discardableResult
    public func delete<M: Model>(_ type: M.Type, primaryKey id: some PrimaryKeyConvertible) throws -> Bool {
        try delete(M.typeName, primaryKey: id.primaryKey)
    }

    /// Deletes the stored object with the model value's primary key. Returns whether it existed.
    @discardableResult
    public func delete<M: Model>(_ object: M) throws -> Bool {
        let (type, values) = try modelValues(object)
        guard let keyName = type.primaryKey, let key = values[keyName].flatMap(PrimaryKey.init) else { return false }
        return try delete(M.typeName, primaryKey: key)
    }
}

extension ObjectReading {
    /// The object of a model type with a primary key, or `nil`.
    public func object<M: Model>(_ type: M.Type, primaryKey id: some PrimaryKeyConvertible) throws -> M? {
        guard let object = try object(M.typeName, primaryKey: id.primaryKey) else { return nil }
        return try modelValue(M.self, object, names: try readingNames(), backlinks: ReaderObjectSource(self))
    }

    /// Every object of a model type, in primary key order.
    public func objects<M: Model>(_ type: M.Type) throws -> [M] {
        let names = try readingNames()
        let backlinks = ReaderObjectSource(self)
        return try objects(M.typeName).map { try modelValue(M.self, $0, names: names, backlinks: backlinks) }
    }

    /// The objects of a model type that match a query in the Realm Query Language.
    ///
    /// ```swift
    /// let page = try snapshot.objects(ChatMessage.self, where: "conversationID == $0 SORT(timestamp DESC)", arguments: ["c1"])
    /// ```
    public func objects<M: Model>(_ type: M.Type, where query: String, arguments: [Value] = []) throws -> [M] {
        let names = try readingNames()
        let backlinks = ReaderObjectSource(self)
        return try objects(M.typeName, where: query, arguments: arguments).map {
            try modelValue(M.self, $0, names: names, backlinks: backlinks)
        }
    }

    /// `object` as a model of this release of the app, with its computed properties (``LinkingObjects``).
    func modelValue<M: Model>(
        _ type: M.Type, _ object: DynamicObject, names: ModelNames, backlinks: @autoclosure () -> ReaderObjectSource
    )
        throws -> M
    {
        guard !names.isEmpty, let source = self as? any ModelNameSource else {
            return try ModelCoding.model(M.self, from: addingLinkingObjects(object, backlinks()), names: names)
        }
        let declared = try source.asDeclared(object, names: names)
        return try ModelCoding.model(M.self, from: addingLinkingObjects(declared, backlinks()), names: names)
    }

    /// Where the app's declared properties live in the schema these reads use (``ModelNames``).
    func readingNames() throws -> ModelNames {
        // The two readers there are, by class: asking for the protocol would look the conformance up on every read.
        if let snapshot = self as? Snapshot { return try snapshot.modelNames() }
        if let transaction = self as? Transaction { return try transaction.modelNames() }
        return ModelNames()
    }
}

/// A reader that knows which release of the app reads through it: a snapshot or a transaction of a replica.
protocol ModelNameSource {
    func modelNames() throws -> ModelNames
    /// `object` as this release's models read it (``ModelNames``).
    func asDeclared(_ object: DynamicObject, names: ModelNames) throws -> DynamicObject
}

extension Snapshot: ModelNameSource {
    func modelNames() throws -> ModelNames {
        if let cachedModelNames { return cachedModelNames }
        let names = try replica.modelNames()
        cachedModelNames = names
        return names
    }

    func asDeclared(_ object: DynamicObject, names: ModelNames) throws -> DynamicObject {
        try replica.asDeclared(object, names: names) { try record($0, $1) }
    }
}

extension Transaction: ModelNameSource {
    /// Those of this transaction's schema, read in the transaction itself (its schema may not be committed yet).
    func modelNames() throws -> ModelNames {
        if let modelNamesCache { return modelNamesCache }
        guard let declared = replica.appSchema.withLock({ $0 }) else { return ModelNames() }
        let names = try replica.modelNames(declared: declared, schema: working.schema, in: storage)
        modelNamesCache = names
        return names
    }

    func asDeclared(_ object: DynamicObject, names: ModelNames) throws -> DynamicObject {
        try replica.asDeclared(object, names: names) { try record($0, $1) }
    }
}

extension Replica {
    /// Opens (or creates) a replica whose schema is derived from model types.
    ///
    /// ```swift
    /// let replica = try Replica.open(directory: "chat", models: [User.self, ChatMessage.self], schemaVersion: 1)
    /// ```
    public static func open(
        directory: String, models: [any Model.Type], schemaVersion: UInt64 = 0,
        configuration: Configuration = Configuration(), migration: Migration? = nil
    ) throws -> Replica {
        try open(
            directory: directory, schema: try Schema(models: models, version: schemaVersion),
            configuration: configuration,
            migration: migration)
    }

    /// The object of a model type with a primary key, as of the last commit.
    public func object<M: Model>(_ type: M.Type, primaryKey id: some PrimaryKeyConvertible) throws -> M? {
        try read { try $0.object(type, primaryKey: id) }
    }

    /// Every object of a model type, as of the last commit.
    public func objects<M: Model>(_ type: M.Type) throws -> [M] {
        try read { try $0.objects(type) }
    }

    /// The objects of a model type that match a query, as of the last commit.
    public func objects<M: Model>(_ type: M.Type, where query: String, arguments: [Value] = []) throws -> [M] {
        try read { try $0.objects(type, where: query, arguments: arguments) }
    }

    /// The objects of `type` that match a query, as of the last commit.
    public func objects(_ type: String, where query: String, arguments: [Value] = []) throws -> [DynamicObject] {
        try read { try $0.objects(type, where: query, arguments: arguments) }
    }
}

/// The shapes of model types, as their `Codable` conformances give them (with the embedded types they use), worked out
/// once per type: what a model's values hold when the app gave no schema at open.
enum ModelShapes {
    private static let shapes = Mutex<[ObjectIdentifier: Schema]>([:])

    /// The shape of `model`, or `nil` when it cannot be derived (its values then hold every property).
    static func shape(of model: any Model.Type) -> Schema? {
        if let known = shapes.withLock({ $0[ObjectIdentifier(model)] }) { return known }
        var probe = SchemaProbe()
        guard (try? probe.add(model)) != nil else { return nil }
        let shape = Schema(version: 0, types: probe.types)
        shapes.withLock { $0[ObjectIdentifier(model)] = shape }
        return shape
    }
}
