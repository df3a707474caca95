import TributaryLog
import TributaryMerge
public import TributaryModel
import TributaryQuery
import TributaryViews

/// A write transaction: reads see its own writes; when the closure that received it returns, everything it wrote
/// becomes one changeset.
///
/// Every method checks its input against the schema first and throws a ``TributaryError`` that names the type,
/// property and value at fault; a method that throws has changed nothing.
///
/// Not `Sendable`, and valid only during the ``Replica/write(_:)-9m3ir`` closure that passes it.
public final class Transaction: ObjectReading {
    let replica: Replica
    let storage: TributaryStorageWriteTransaction
    var working: WorkingSet
    let info: ChangesetInfo
    let author: String
    let start: Replica.State
    /// The instructions written, in their encoding: a large import holds a few dozen bytes per object here, where
    /// the instructions themselves took several hundred.
    var instructions = ChangesetCodec.InstructionEncoding()
    /// The types whose objects the instructions write, in the order they first do, for a flexible sync replica's
    /// check that each is subscribed.
    private(set) var writtenTypes: [String] = []
    /// The type the last instruction wrote, not looked for in ``writtenTypes`` again.
    private var lastWrittenType: String?
    /// The schema the app declared at open, stored by the same commit when set (a migration, a new replica), so that
    /// the stored schema and the declaration can never disagree after a failure or a crash between two commits.
    var declaredSchema: Schema?
    /// Whether this commit starts the replica's history: the declaration it stores is the first (see
    /// ``Replica/declaredVersions()``).
    var startsHistory = false
    private var failure: (any Error)?
    private var isValid = true
    /// The plan of the last type created in, while the schema stays as it was.
    private var createPlan: CreatePlan?
    /// The values of the create being planned, by position in its plan: one array for every create of the
    /// transaction, empty between creates, instead of one allocated and freed per object.
    private var givenValues: [Value?] = []
    /// Where the app's declared properties live in this transaction's schema, once a model write asked.
    var modelNamesCache: ModelNames?
    /// The fast path of each model type written, or `nil` where the general path writes it, while the schema stays
    /// as it was.
    var modelWritePlans: [ObjectIdentifier: ModelWritePlan?] = [:]
    /// The shapes of the properties written, as this replica's schema holds them (rule 8).
    private var shapeNotes = ShapeNoteRecorder()

    init(replica: Replica, storage: TributaryStorageWriteTransaction, state: Replica.State, author: String) {
        self.replica = replica
        self.storage = storage
        self.start = state
        self.author = author
        let dot = Dot(origin: replica.replicaID, sequence: state.versionVector[replica.replicaID] + 1)
        info = ChangesetInfo(
            dot: dot, stamp: Stamp(time: state.clock.latest, replica: replica.replicaID), context: state.versionVector)
        working = WorkingSet(
            source: ReplicaRecordSource(views: replica.views, log: replica.log, transaction: storage),
            schema: state.schema)
    }

    func invalidate() { isValid = false }

    func checkValid() {
        precondition(isValid, "a Transaction was used after the write(_:) closure that passed it returned")
    }

    /// The schema, with this transaction's changes.
    public var schema: Schema { working.schema }

    /// Applies an instruction to the working set and records it. A failure here (which the checks before each
    /// call should prevent) poisons the transaction: it cannot commit. Visible to the package's simulator, which
    /// emits the schema removals and renames that apps make only through migrations.
    package func emit(_ instruction: Instruction) throws {
        try emit(instruction, writtenAs: nil)
    }

    /// ``emit(_:)``; with `declared`, `instruction` is a set of one top-level property made under this release's
    /// definition of it, which the schema holds with another shape: its changeset notes that shape, and every replica
    /// keeps the value aside under it (rule 8), this one included.
    func emit(_ instruction: Instruction, writtenAs declared: Property?) throws {
        checkValid()
        if let failure { throw failure }
        if instruction.isSchemaInstruction {
            createPlan = nil
            modelNamesCache = nil
            modelWritePlans = [:]
        }
        do {
            let index = instructions.count
            // Encoded first: what the log could not read back is refused before it changes anything.
            try record(instruction)
            if let declared, case .set(let path, _) = instruction, path.steps.isEmpty {
                shapeNotes.note(declared: declared, of: path.type, from: index)
                // The local apply reads the note as every other replica will.
                var written = info
                written.shapeNotes = ShapeNotes([
                    ShapeNotes.Note(PropertyName(type: path.type, property: path.property), from: index, declared.shape)
                ])
                try MergeEngine.apply(instruction, index: index, of: written, to: &working, checkValues: false)
            } else {
                // Noted as the schema holds it before the instruction (a schema instruction changes it after).
                shapeNotes.note(instruction, in: working.schema, at: index)
                try MergeEngine.apply(instruction, index: index, of: info, to: &working, checkValues: false)
            }
        } catch {
            let wrapped = TributaryError.wrap(error)
            failure = wrapped
            throw wrapped
        }
    }

    /// Adds `instruction` to the changeset's encoding, refusing what the log could not read back or the views could
    /// not store, and notes the type it writes.
    private func record(_ instruction: Instruction) throws {
        if let type = instruction.object?.type, type != lastWrittenType {
            if !writtenTypes.contains(type) { writtenTypes.append(type) }
            lastWrittenType = type
        }
        // Nothing goes into the log that the log cannot read back: replay, verify and every peer decode it under the
        // log's limits.
        let bytes: Int
        do {
            bytes = try instructions.append(instruction, within: replica.log.decodingLimits)
        } catch {
            throw TributaryError(
                .invalidValue, "the transaction cannot commit, as its log entry could not be read back: \(error)")
        }
        // The writes checked each object's key already; only an instruction larger than the value limit can hold a
        // value over it.
        if bytes > StorableValues.maximumValueBytes, let problem = StorableValues.valueProblem(in: instruction) {
            throw TributaryError(.invalidValue, "the transaction cannot commit: \(problem)")
        }
    }

    /// The commit this transaction's writes make, or `nil` when it wrote nothing.
    func prepareCommit() throws -> Replica.PreparedCommit? {
        if let failure { throw failure }
        guard !instructions.isEmpty else { return nil }
        if working.schemaChanged {
            // A link that a merge left naming an absent type (rule 8) does not hold up another change.
            do { try working.schema.validate(targets: .changedSince(start.schema)) } catch {
                throw TributaryError(.schemaMismatch, "the schema this transaction built is invalid: \(error)")
            }
        }
        let header = ChangesetCodec.Header(
            origin: info.dot.origin, originSequence: info.dot.sequence, time: info.stamp.time,
            schemaVersion: working.schema.version, author: author, context: info.context,
            instructionCount: instructions.count, shapeNotes: shapeNotes.result)
        let encoded: [UInt8]
        do {
            encoded = try instructions.changeset(header, within: replica.log.decodingLimits)
            // The changeset holds them now: their encoding is freed before the changed records are gathered.
            instructions = ChangesetCodec.InstructionEncoding()
        } catch {
            throw TributaryError(
                .transactionTooLarge,
                "the transaction cannot commit, as its log entry could not be read back: \(error); split it into "
                    + "smaller transactions")
        }
        var vector = start.versionVector
        vector.advance(info.dot.origin, to: info.dot.sequence)
        return Replica.PreparedCommit(
            changesets: [(header, encoded, nil)], changes: working.takeChanges(),
            schema: working.schema, schemaChanged: working.schemaChanged, previousSchema: start.schema,
            versionVector: vector, clock: info.stamp.time,
            declaredSchema: declaredSchema.map { schema in
                var writer = BinaryWriter()
                writer.schema(schema)
                return writer.bytes
            },
            firstDeclaredVersion: startsHistory ? declaredSchema?.version : nil)
    }

    // MARK: Reading

    func record(_ type: String, _ primaryKey: PrimaryKey) throws -> ObjectRecord? {
        checkValid()
        return try working.record(RecordKey(type: type, primaryKey: primaryKey))
    }

    var materializer: Materializer {
        Materializer(schema: working.schema) { [unowned self] type, key in try self.record(type, key)?.exists ?? false }
    }

    public func object(_ type: String, primaryKey: PrimaryKey) throws -> DynamicObject? {
        let objectType = try working.schema.requireType(type)
        guard let record = try record(type, primaryKey), record.exists else { return nil }
        return try materializer.object(type: objectType, primaryKey: primaryKey, record: record)
    }

    public func objects(_ type: String) throws -> [DynamicObject] {
        let objectType = try working.schema.requireType(type)
        let materializer = self.materializer
        var result: [DynamicObject] = []
        for key in try working.keys(ofType: type) {
            guard let record = try working.record(key), record.exists else { continue }
            result.append(try materializer.object(type: objectType, primaryKey: key.primaryKey, record: record))
        }
        return result
    }

    /// The objects of `type` that match a query, this transaction's own writes included. Within a transaction a
    /// query reads every object of the type (indexes hold committed data only).
    public func objects(_ type: String, where query: String, arguments: [Value] = []) throws -> [DynamicObject] {
        let objectType = try working.schema.requireType(type)
        let parsed = try working.schema.query(query, arguments: arguments, type: objectType)
        return evaluate(parsed, on: try objects(type), type: type)
    }

    public func count(_ type: String) throws -> Int {
        _ = try working.schema.requireType(type)
        var count = 0
        for key in try working.keys(ofType: type) where try working.record(key)?.exists == true { count += 1 }
        return count
    }

    // MARK: Creating and deleting

    /// Creates an object from its property values (the primary key among them).
    ///
    /// Properties left out take their schema default; a required property without a default must be given.
    ///
    /// - Returns: the object's primary key.
    /// - Throws: ``TributaryError`` with `.duplicatePrimaryKey` when the object exists, `.unknownType`,
    ///   `.unknownProperty`, `.wrongType`, `.missingProperty` or `.invalidValue`.
    @discardableResult
    public func create(_ type: String, _ values: [String: Value]) throws -> PrimaryKey {
        try create(type, values, fallbacks: [:])
    }

    /// ``create(_:_:)``, with defaults for required properties that have none (see ``emitCreate(_:_:_:fallbacks:)``).
    func create(_ type: String, _ values: [String: Value], fallbacks: [String: Value]) throws -> PrimaryKey {
        let (objectType, key) = try checkedKey(type, values)
        try requireAbsent(type, key)
        try emitCreate(objectType, key, values, fallbacks: fallbacks)
        return key
    }

    /// Throws `.duplicatePrimaryKey` when the object of `type` with `key` exists.
    func requireAbsent(_ type: String, _ key: PrimaryKey) throws {
        if try record(type, key)?.exists == true {
            throw TributaryError(
                .duplicatePrimaryKey, "cannot create \(type) with primary key \(key): an object with that key exists")
        }
    }

    /// Creates an object, or, when one with the same primary key exists, updates the properties given (only those
    /// whose value changed become part of the changeset).
    @discardableResult
    public func upsert(_ type: String, _ values: [String: Value]) throws -> PrimaryKey {
        try upsert(type, values, leavingAbsentFields: false)
    }

    /// ``upsert(_:_:)``; see ``update(_:primaryKey:_:leavingAbsentFields:)``.
    func upsert(
        _ type: String, _ values: [String: Value], leavingAbsentFields: Bool, fallbacks: [String: Value] = [:]
    ) throws -> PrimaryKey {
        let (objectType, key) = try checkedKey(type, values)
        if try record(type, key)?.exists == true {
            var changes = values
            if let keyName = objectType.primaryKey { changes.removeValue(forKey: keyName) }
            try update(type, primaryKey: key, changes, leavingAbsentFields: leavingAbsentFields)
        } else {
            try emitCreate(objectType, key, values, fallbacks: fallbacks)
        }
        return key
    }

    /// Updates the given properties of an existing object. Only properties whose value changed are written, and a
    /// list or embedded object that changed is written as the edits that turn the old value into the new one, so
    /// that concurrent edits on other replicas merge with it (docs/MergeSemantics.md, rules 1, 5 and 6).
    ///
    /// - Throws: ``TributaryError`` with `.objectNotFound`, `.unknownProperty`, `.wrongType`, `.invalidValue`.
    public func update(_ type: String, primaryKey: PrimaryKey, _ values: [String: Value]) throws {
        try update(type, primaryKey: primaryKey, values, leavingAbsentFields: false)
    }

    /// ``update(_:primaryKey:_:)``; with `leavingAbsentFields`, an embedded object's fields that its new value does
    /// not hold are left as they are (a model's values hold only the properties its release declares).
    func update(_ type: String, primaryKey: PrimaryKey, _ values: [String: Value], leavingAbsentFields: Bool) throws {
        let objectType = try working.schema.requireType(type)
        guard let record = try record(type, primaryKey), record.exists else {
            throw TributaryError(.objectNotFound, "cannot update \(type) \(primaryKey): no such object")
        }
        // Every value is checked before any is written: an update that throws has changed nothing.
        var checked: [(name: String, value: Value, property: Property)] = []
        for name in values.keys.sorted() {
            let value = values[name] ?? .null
            let property = try checkedProperty(objectType, name, value)
            if name == objectType.primaryKey {
                guard PrimaryKey(value) == primaryKey else {
                    throw TributaryError(
                        .invalidValue,
                        "the primary key '\(type).\(name)' cannot change (from \(primaryKey) to \(value))")
                }
                continue
            }
            checked.append((name, value, property))
        }
        // Only the properties given are read, as a read of the whole object gives them (links to objects that do not
        // exist left out, rule 7): materializing every property was nearly half of a one-field update's own work.
        let schema = working.schema
        let materializer = checked.contains { $0.property.holdsLinks } ? self.materializer : nil
        for (name, value, property) in checked {
            var current = ObjectRecord.value(record.fields[name], of: property, in: schema)
            if let materializer, property.holdsLinks { current = try materializer.resolveLinks(current, property) }
            try Differ(transaction: self, leavesAbsentFields: leavingAbsentFields).update(
                from: current, to: value, property: property,
                path: FieldPath(type: type, primaryKey: primaryKey, property: name))
        }
    }

    /// Deletes an object and the objects embedded in it. Links to it read as null from then on.
    ///
    /// - Returns: whether the object existed.
    @discardableResult
    public func delete(_ type: String, primaryKey: PrimaryKey) throws -> Bool {
        _ = try working.schema.requireType(type)
        guard try record(type, primaryKey)?.exists == true else { return false }
        try emit(.erase(type: type, primaryKey: primaryKey))
        return true
    }

    /// Deletes every object of a type.
    public func deleteAll(_ type: String) throws {
        for object in try objects(type) { try emit(.erase(type: type, primaryKey: object.primaryKey)) }
    }

    func checkedKey(_ type: String, _ values: [String: Value]) throws -> (ObjectSchema, PrimaryKey) {
        // An import writes one type over and over: its definition comes from the plan of the previous create while
        // the schema stays the same, instead of being looked up (and the schema copied) per object.
        let objectType: ObjectSchema
        if let plan = createPlan, plan.type.name == type {
            objectType = plan.type
        } else {
            objectType = try working.schema.requireType(type)
        }
        return (objectType, try checkedKey(objectType, keyValue: objectType.primaryKey.flatMap { values[$0] }))
    }

    /// The primary key `keyValue` gives an object of `objectType`, checked.
    func checkedKey(_ objectType: ObjectSchema, keyValue: Value?) throws -> PrimaryKey {
        let type = objectType.name
        guard let keyName = objectType.primaryKey, let keyProperty = objectType[property: keyName] else {
            throw TributaryError(.unknownType, "type '\(type)' has no primary key")
        }
        guard let keyValue, !keyValue.isNull else {
            throw TributaryError(.missingProperty, "cannot create \(type): its primary key '\(keyName)' is missing")
        }
        guard let key = PrimaryKey(keyValue), keyProperty.elementProblem(keyValue) == nil else {
            throw TributaryError(
                .wrongType,
                "primary key '\(type).\(keyName)' is \(keyProperty.typeDescription), got \(keyValue.kindName) \(keyValue)"
            )
        }
        if let problem = KeyEncoding.problem(storing: key, of: type) { throw TributaryError(.invalidValue, problem) }
        return key
    }

    func checkedProperty(_ type: ObjectSchema, _ name: String, _ value: Value) throws -> Property {
        guard let property = type[property: name] else {
            let known = type.properties.map(\.name).joined(separator: ", ")
            throw TributaryError(
                .unknownProperty, "'\(type.name).\(name)' is not a property of \(type.name) (it has: \(known))")
        }
        if let problem = working.schema.problem(with: value, for: property) {
            throw TributaryError(.wrongType, "'\(type.name).\(name)': \(problem)")
        }
        try checkLinkTargets(value, property)
        return property
    }

    /// A link must name a key of the target type's primary key type; a link in a mixed value, a type of the schema
    /// that is not embedded, and a key of its primary key's type.
    func checkLinkTargets(_ value: Value, _ property: Property) throws {
        if property.kind == .scalar(.mixed) {
            try checkTypedLinks(value, property)
            return
        }
        guard case .link(let targetName) = property.kind, let target = working.schema[type: targetName],
            let keyType = target.primaryKeyProperty.flatMap({ if case .scalar(let t) = $0.kind { t } else { nil } })
        else { return }
        let links =
            property.isList
            ? (value.listValue ?? []) : property.isDictionary ? Array((value.dictionaryValue ?? [:]).values) : [value]
        for case .link(let key) in links where key.type != keyType {
            throw TributaryError(
                .wrongType,
                "link '\(property.name)' to \(targetName) needs a \(keyType) primary key, got \(key.type) \(key)")
        }
    }

    private func checkTypedLinks(_ value: Value, _ property: Property) throws {
        switch value {
        case .typedLink(let typeName, let key):
            guard let target = working.schema[type: typeName], !target.isEmbedded,
                case .scalar(let keyType)? = target.primaryKeyProperty?.kind
            else {
                let known = working.schema.types.filter { !$0.isEmbedded }.map(\.name).sorted()
                throw TributaryError(
                    .wrongType,
                    "'\(property.name)' holds a link to type '\(typeName)', which is not a type of the schema with a "
                        + "primary key (link to one of: \(known.joined(separator: ", ")))")
            }
            guard key.type == keyType else {
                throw TributaryError(
                    .wrongType,
                    "'\(property.name)' holds a link to \(typeName), which needs a \(keyType) primary key, got "
                        + "\(key.type) \(key)")
            }
        case .list(let elements):
            for element in elements { try checkTypedLinks(element, property) }
        case .dictionary(let entries):
            for key in entries.keys.sorted() { try checkTypedLinks(entries[key] ?? .null, property) }
        default:
            break
        }
    }

    ///
    /// `fallbacks` are defaults for required properties that have none and that `values` leaves out (a model of an
    /// earlier release that holds another definition of them): they lose to any value written, as defaults do.
    func emitCreate(
        _ type: ObjectSchema, _ key: PrimaryKey, _ values: [String: Value], fallbacks: [String: Value] = [:]
    ) throws {
        // The planned path leaves a required property without a value or default to the checked one.
        try emit(plannedCreate(type, key, values) ?? checkedCreate(type, key, values, fallbacks: fallbacks))
    }

    /// What creating an object of one type needs, worked out once while the schema stays the same (only ``emit(_:)``
    /// changes it, and it drops the plan): the properties other than the primary key, sorted by name (the order a
    /// create instruction lists its fields in).
    struct CreatePlan {
        /// The type's definition in the schema the plan was made from (a top-level type).
        let type: ObjectSchema
        let properties: [Property]

        init(_ type: ObjectSchema) {
            self.type = type
            properties = type.properties.filter { $0.name != type.primaryKey }.sorted { $0.name < $1.name }
        }

        /// The position in ``properties`` of the property spelled exactly `name` (the same bytes, not merely an
        /// equal `String`: an instruction keeps the caller's spelling, and the slow path handles other spellings).
        func position(of name: String) -> Int? {
            for position in properties.indices where properties[position].name == name {
                return properties[position].name.hasSameUTF8(as: name) ? position : nil
            }
            return nil
        }
    }

    /// The create instruction for valid `values`, built in one pass over them and one over the type's properties;
    /// `nil` when anything is wrong with them (or a name is spelled otherwise than in the schema), for
    /// ``emitCreate(_:_:_:)``'s general path to build or to find and name.
    func plannedCreate(_ type: ObjectSchema, _ key: PrimaryKey, _ values: [String: Value]) -> Instruction? {
        let plan: CreatePlan
        if let cached = createPlan, cached.type.name == type.name {
            plan = cached
        } else {
            plan = CreatePlan(type)
            createPlan = plan
        }
        // The values by property position, in the transaction's array (taken out of `self` while in use, so that
        // writing to it copies nothing), emptied again for the next create whatever happens.
        var given: [Value?] = []
        swap(&given, &givenValues)
        defer {
            given.removeAll(keepingCapacity: true)
            swap(&given, &givenValues)
        }
        given.append(contentsOf: repeatElement(nil, count: plan.properties.count))
        for (name, value) in values {
            if let keyName = type.primaryKey, name == keyName {
                guard keyName.hasSameUTF8(as: name) else { return nil }
                continue
            }
            guard let position = plan.position(of: name) else { return nil }
            given[position] = value
        }
        return plannedCreate(type, key, plan) { given[$0] }
    }

    /// The create instruction for valid values given by position in `plan` (`nil` where none is given), built in one
    /// pass over the type's properties; `nil` when anything is wrong with them.
    func plannedCreate(
        _ type: ObjectSchema, _ key: PrimaryKey, _ plan: CreatePlan, given: (Int) -> Value?
    ) -> Instruction? {
        var explicit: [FieldValue] = []
        explicit.reserveCapacity(plan.properties.count)
        var defaults: [FieldValue] = []
        let schema = working.schema  // read once: reading a class's stored struct copies it each time
        // The properties are read where the plan holds them: binding each to a variable copies it (its name, its
        // type's name and its default, retained and released per object).
        let planned = plan.properties.withUnsafeBufferPointer { properties -> Bool in
            for position in properties.indices {
                if let value = given(position) {
                    guard schema.problem(with: value, for: properties[position]) == nil,
                        (try? checkLinkTargets(value, properties[position])) != nil
                    else { return false }
                    explicit.append(FieldValue(properties[position].name, value))
                } else if let value = properties[position].createDefault {
                    defaults.append(FieldValue(properties[position].name, value))
                } else if !properties[position].isOptional && !properties[position].isCollection {
                    return false
                }
            }
            return true
        }
        guard planned else { return nil }
        return .create(type: type.name, primaryKey: key, fields: explicit, defaults: defaults)
    }

    /// The create instruction for `values`, checking each one and naming the first problem.
    func checkedCreate(
        _ type: ObjectSchema, _ key: PrimaryKey, _ values: [String: Value], fallbacks: [String: Value] = [:]
    ) throws -> Instruction {
        var explicit: [FieldValue] = []
        for name in values.keys.sorted() where name != type.primaryKey {
            let value = values[name] ?? .null
            let property = try checkedProperty(type, name, value)
            // A set holds each value once.
            if property.isSet, case .list(let elements) = value {
                explicit.append(FieldValue(name, .list(ObjectRecord.distinctElements(elements))))
            } else {
                explicit.append(FieldValue(name, value))
            }
        }
        var defaults: [FieldValue] = []
        for property in type.properties where property.name != type.primaryKey && values[property.name] == nil {
            if let value = property.createDefault ?? fallbacks[property.name] {
                defaults.append(FieldValue(property.name, value))
            } else if !property.isOptional && !property.isCollection {
                throw TributaryError(
                    .missingProperty,
                    "cannot create \(type.name) \(key): required property '\(property.name)' (\(property.typeDescription)) is missing"
                )
            }
        }
        defaults.sort { $0.name < $1.name }
        return .create(type: type.name, primaryKey: key, fields: explicit, defaults: defaults)
    }
}

@available(*, unavailable, message: "a Transaction holds the storage write transaction, which belongs to one thread")
extension Transaction: Sendable {}

extension Transaction {
    /// Adds a property to a type, as part of this transaction's changeset. Existing objects read the new property
    /// as its default (or null). Replicas that add the same property concurrently merge; conflicting definitions
    /// are refused (docs/MergeSemantics.md, rule 8).
    ///
    /// - Throws: ``TributaryError`` with `.unknownType`, `.schemaConflict` when the type has a different property
    ///   of that name, or `.schemaMismatch` for a required property without a default or a default that would not
    ///   merge (a list's or an embedded object's).
    public func addProperty(_ property: Property, to type: String) throws {
        guard let existing = working.schema[type: type] else {
            throw TributaryError(
                .unknownType, "cannot add '\(property.name)' to '\(type)': the schema has no such type")
        }
        if let current = existing[property: property.name] {
            // As stored: a date default read back from the stored schema may differ from the app's in its last bit.
            guard current.storesAlike(property) else {
                throw TributaryError(
                    .schemaConflict,
                    "'\(type).\(property.name)' is defined as \(current); cannot also define it as \(property)")
            }
            return
        }
        if let error = property.unmergeableDefaultError(in: type) {
            throw TributaryError(.schemaMismatch, "cannot add '\(type).\(property.name)': \(error)", underlying: error)
        }
        guard property.isOptional || property.isCollection || property.defaultValue != nil else {
            throw TributaryError(
                .schemaMismatch,
                "'\(type).\(property.name)' is required and has no default: existing objects would lack it; give it a default"
            )
        }
        try emit(.addProperty(type: type, property))
    }

    /// Adds an object type, as part of this transaction's changeset.
    public func addType(_ type: ObjectSchema) throws {
        var schema = working.schema
        schema.upsert(type)
        do {
            try schema.validate(targets: .changedSince(working.schema))
            try Schema(types: [type]).validateDefaults()
        } catch {
            throw TributaryError(.schemaMismatch, "cannot add type '\(type.name)': \(error)", underlying: error)
        }
        try emit(.addType(type))
    }
}
