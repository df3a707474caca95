import TributaryModel

/// Applies one instruction. Ids for the elements and embedded objects it creates are drawn, in a fixed order
/// that depends only on the instruction, from (changeset, instruction index, counter).
struct InstructionApplier {
    let info: ChangesetInfo
    let index: Int
    var counter: UInt64 = 0
    var checkValues = true

    init(info: ChangesetInfo, index: Int) {
        self.info = info
        self.index = index
    }

    var stamp: Stamp { info.stamp }

    mutating func nextID() throws -> ElementID {
        guard counter < ElementID.maximumPerInstruction else {
            throw MergeError(
                .limitExceeded, "one instruction may create at most \(ElementID.maximumPerInstruction) elements")
        }
        defer { counter += 1 }
        return ElementID(dot: info.dot, instruction: index, counter: counter)
    }

    // MARK: Values to states

    /// Converts a value to a field state, allocating ids in preorder. Depends only on the value.
    mutating func fieldState(_ value: Value) throws -> FieldState {
        if case .list(let elements) = value {
            return .list(try newList(elements))
        }
        if case .dictionary(let entries) = value {
            return .dictionary(try newDictionary(entries))
        }
        return .register(Register(value: try storedValue(value), stamp: stamp))
    }

    mutating func storedValue(_ value: Value) throws -> StoredValue {
        guard case .embedded(let object) = value else { return .scalar(value) }
        let id = try nextID()
        var fields = FieldTable()
        fields.reserveCapacity(object.fields.count)
        for name in object.fields.keys.sorted() {
            fields[name] = try fieldState(object.fields[name] ?? .null)
        }
        return .embedded(EmbeddedState(id: id, type: object.type, fields: fields))
    }

    /// A dictionary holding `entries`, written at once: ids for embedded objects drawn in the order of the keys.
    mutating func newDictionary(_ entries: [String: Value]) throws -> DictionaryState {
        var stored: [String: StoredValue] = [:]
        stored.reserveCapacity(entries.count)
        for key in entries.keys.sorted(by: { $0.utf8Precedes($1) }) {
            stored[key] = try storedValue(entries[key] ?? .null)
        }
        var dictionary = DictionaryState()
        dictionary.replace(with: stored, at: stamp)
        return dictionary
    }

    /// A list holding `values` in order: each slot a right child of the one before, the first one of the root.
    mutating func newList(_ values: [Value]) throws -> ListState {
        var list = ListState()
        var previous: ElementID? = nil
        for value in values {
            let id = try nextID()
            let stored = try storedValue(value)
            list.slots[id] = Slot(id: id, parent: previous, side: .right, stamp: stamp)
            list.elements[id] = ListElement(
                id: id, value: stored, valueStamp: stamp, position: id, positionStamp: stamp)
            previous = id
        }
        return list
    }

    /// Whether this changeset saw every removal of `type` (rule 8); costs nothing when no type was ever removed.
    func hasSeenRemovals(ofType type: String, in state: WorkingSet) throws -> Bool {
        try state.schema.typeRemovals.isEmpty
            || info.hasSeenRemovals(ofType: type, in: state.schema, causal: state.causalResolver)
    }

    /// A list element's converted value and its value as they land (rule 8): unchanged unless the schema remembers
    /// removals.
    func landed(_ stored: StoredValue, _ value: Value, in state: WorkingSet) throws -> (StoredValue, Value) {
        var stored = stored
        if !value.isSingleValue, let writers = writersSchema(state.schema) {
            Self.placeAside(&stored, writers: writers, schema: state.schema)
        }
        if !value.isSingleValue { Self.settleMixed(&stored, schema: state.schema, stamp: stamp) }
        guard !state.schema.propertyRemovals.isEmpty else { return (stored, value) }
        let causal = state.causalResolver
        return (
            try info.landed(stored, schema: state.schema, causal: causal),
            try info.landed(value, schema: state.schema, causal: causal)
        )
    }

    /// The schema as this changeset's writer held it, when it differs from `schema`: each property that has losing
    /// definitions in the shape the writer noted for it (rule 8). What values in embedded objects are checked
    /// against and placed by. `nil` when the writer held every such property as `schema` does.
    func writersSchema(_ schema: Schema) -> Schema? {
        guard !schema.losingDefinitions.isEmpty else { return nil }
        var view: Schema?
        for name in schema.losingDefinitions.keys {
            guard var type = (view ?? schema)[type: name.type],
                let position = type.position(ofProperty: name.property),
                let shape = info.shapeNotes.shape(of: name.property, in: name.type, at: index),
                shape != type.properties[position].shape
            else { continue }
            type.properties[position].shape = shape
            if view == nil { view = schema }
            view?.upsert(type)
        }
        return view
    }

    /// Puts aside the values of the embedded objects in `state`, at any depth, that were written under another
    /// definition of their property than the one `schema` holds: under the shape `writers` holds (rule 8).
    static func placeAside(_ state: inout FieldState, writers: Schema, schema: Schema) {
        state.updateEmbedded { placeAside(&$0, writers: writers, schema: schema) }
    }

    static func placeAside(_ stored: inout StoredValue, writers: Schema, schema: Schema) {
        guard case .embedded(var child) = stored else { return }
        let written = writers[type: child.type]
        let shown = schema[type: child.type]
        for name in child.fields.names {
            guard var field = child.fields[name] else { continue }
            placeAside(&field, writers: writers, schema: schema)
            if let writersShape = written?[property: name]?.shape, let shownShape = shown?[property: name]?.shape,
                writersShape != shownShape
            {
                child.fields[name] = nil
                child.fields[name, shape: writersShape] = field
            } else {
                child.fields[name] = field
            }
        }
        stored = .embedded(child)
    }

    // MARK: Instructions

    mutating func apply(_ instruction: Instruction, to state: inout WorkingSet) throws {
        switch instruction {
        case .addType, .addProperty, .removeProperty, .renameProperty, .redefineProperty, .removeType,
            .setSchemaVersion, .migrated:
            try SchemaMerger(info: info).apply(instruction, to: &state)
        case .omitted:
            break
        case .create(let type, let key, let explicit, let defaults):
            try create(type: type, key: key, explicit: explicit, defaults: defaults, state: &state)
        case .erase(let type, let key):
            try erase(RecordKey(type: type, primaryKey: key), state: &state)
        case .set(let path, let value):
            let schema = state.schema
            let causal = state.causalResolver
            // Converted as written (the ids drawn must not depend on the replica), then as it lands (rule 8).
            var newState = try info.landed(try fieldState(value), schema: schema, causal: causal)
            // Embedded objects' values written under another definition than the one that shows go aside (rule 8).
            let writers = value.isSingleValue ? nil : writersSchema(schema)
            if let writers { Self.placeAside(&newState, writers: writers, schema: schema) }
            if !value.isSingleValue { Self.settleMixed(&newState, schema: schema, stamp: stamp) }
            // Null set on a list is an empty list set: it removes what the writer had seen, as `[]` does; on a
            // dictionary, an empty dictionary.
            let emptyList = value.isNull ? try fieldState(.list([])) : nil
            let emptyDictionary = value.isNull ? try fieldState(.dictionary([:])) : nil
            let value = try info.landed(value, schema: schema, causal: causal)
            try update(path, state: &state) { field, property in
                try check(value, fits: property, path, writers ?? schema)
                let written =
                    property.isList
                    ? emptyList ?? newState
                    : property.isDictionary
                        ? emptyDictionary ?? newState : Self.mixedState(newState, property, stamp: stamp)
                try merge(written, into: &field, causal: causal)
            }
        case .dictionarySet(let path, let key, let value):
            // Converted as written (the ids drawn must not depend on the replica), then as it lands (rule 8).
            let stored = try landed(storedValue(value), value, in: state)
            try updateDictionary(path, key: key, value: stored, state: &state)
        case .dictionaryErase(let path, let key):
            try updateDictionary(path, key: key, value: nil, state: &state)
        case .addInteger(let path, let delta, let base):
            try update(path, state: &state) { field, property in
                guard case .scalar(.int) = property.kind, !property.isList else {
                    throw MergeError(
                        .invalidInstruction, "cannot add to \(path): it is \(property.typeDescription), not int")
                }
                var register =
                    field.flatMap { if case .register(let r) = $0 { r } else { nil } }
                    ?? Register(value: .scalar(.null), stamp: .zero)
                // An increment counts only on top of the value its writer saw (rule 4).
                guard register.stamp == base else { return }
                register.addend = register.addend &+ delta
                field = .register(register)
            }
        case .listInsert(let path, let anchor, let value):
            let id = try nextID()
            let (stored, value) = try landed(storedValue(value), value, in: state)
            try updateList(path, element: value, state: &state) { list in
                list.slots[id] = Slot(id: id, parent: anchor.parent, side: anchor.side, stamp: stamp)
                list.elements[id] = ListElement(
                    id: id, value: stored, valueStamp: stamp, position: id, positionStamp: stamp)
            }
        case .listSet(let path, let element, let value):
            let (stored, value) = try landed(storedValue(value), value, in: state)
            let stamp = self.stamp
            try updateList(path, element: value, state: &state) { list in
                // Erase beats a concurrent set: an erased element is gone and stays gone (rule 5).
                guard var target = list.elements[element], stamp >= target.valueStamp else { return }
                target.value = stored
                target.valueStamp = stamp
                list.elements[element] = target
            }
        case .listErase(let path, let element):
            try updateList(path, element: nil, state: &state) { list in
                list.elements[element] = nil
            }
        case .listMove(let path, let element, let anchor):
            let slotID = try nextID()
            let stamp = self.stamp
            try updateList(path, element: nil, state: &state) { list in
                // The slot is added even when the move loses, so that inserts anchored to it place the same
                // way on every replica.
                list.slots[slotID] = Slot(id: slotID, parent: anchor.parent, side: anchor.side, stamp: stamp)
                guard var target = list.elements[element], stamp >= target.positionStamp else {
                    return
                }
                target.position = slotID
                target.positionStamp = stamp
                list.elements[element] = target
            }
        case .listClear(let path):
            let info = self.info
            let causal = state.causalResolver
            try updateList(path, element: nil, state: &state) { list in
                try Self.clear(&list, seenBy: info, causal: causal)
            }
        }
    }

    /// Erases the elements the writer had seen; concurrent inserts survive (rule 5). Changes nothing when it
    /// throws.
    static func clear(_ list: inout ListState, seenBy info: ChangesetInfo, causal: CausalResolver) throws {
        for id in try seenElements(of: list, by: info, causal: causal) { list.elements[id] = nil }
    }

    /// The live elements of `list` that the writer had seen.
    static func seenElements(of list: ListState, by info: ChangesetInfo, causal: CausalResolver) throws -> [ElementID] {
        var seen: [ElementID] = []
        for id in list.elements.keys {
            if try info.covers(Dot(origin: id.origin, sequence: id.sequence), causal: causal) { seen.append(id) }
        }
        return seen
    }

    /// Merges a newly written field state into the current one: a register by last writer wins (rule 1), a list
    /// as "clear what the writer saw, then insert" so that concurrent inserts survive.
    func merge(_ newState: FieldState, into field: inout FieldState?, causal: CausalResolver) throws {
        switch (newState, field) {
        case (.list(let added), .list(var list)?):
            // Found before anything changes: this throws, and the field must then stay as it was.
            let seen = try Self.seenElements(of: list, by: info, causal: causal)
            field = nil  // `list` is now the only reference: changing it copies nothing
            for id in seen { list.elements[id] = nil }
            list.slots.merge(added.slots) { old, _ in old }
            list.elements.merge(added.elements) { old, _ in old }
            field = .list(list)
        case (.register(let register), .register(let current)?):
            if register.stamp >= current.stamp { field = .register(register) }
        case (.dictionary(let written), .dictionary(var dictionary)?):
            field = nil  // `dictionary` is now the only reference: changing it copies nothing
            dictionary.replace(with: written.values, at: written.replaced)
            field = .dictionary(dictionary)
        default:
            field = newState
        }
    }

    /// Writes one key of the dictionary at `path` (a value, converted and landed, or `nil` to erase it), as a field
    /// is written (rule 1).
    func updateDictionary(
        _ path: FieldPath, key: String, value: (stored: StoredValue, value: Value)?, state: inout WorkingSet
    ) throws {
        let stamp = self.stamp
        let checkValues = self.checkValues
        let schema = state.schema
        try update(path, state: &state) { field, property in
            guard property.isDictionary else {
                throw MergeError(.invalidInstruction, "\(path) is \(property.typeDescription), not a dictionary")
            }
            if checkValues {
                // An embedded object is checked against the schema its writer held (rule 8).
                let checking = value.map { $0.value.isSingleValue ? schema : writersSchema(schema) ?? schema }
                if let problem = Property.dictionaryKeyProblem(key)
                    ?? value.flatMap({
                        checking?.problem(with: .dictionary([key: $0.value]), for: property, requiringFields: false)
                    })
                {
                    throw MergeError(.invalidInstruction, "\(path)['\(key.prefix(64))']: \(problem)")
                }
            }
            var dictionary: DictionaryState
            if case .dictionary(let current)? = field {
                dictionary = current
                field = nil  // `dictionary` is now the only reference: changing it copies nothing
            } else {
                dictionary = DictionaryState()
            }
            dictionary.write(key, value?.stored, at: stamp)
            field = .dictionary(dictionary)
        }
    }

    mutating func create(
        type: String, key: PrimaryKey, explicit: [FieldValue], defaults: [FieldValue], state: inout WorkingSet
    ) throws {
        // Only single values are defaults (rule 3, ``Value/isSingleValue``): a list or an embedded object that a
        // create gives as a default (a schema no longer declares one; an earlier build's or a peer's changeset may
        // hold one) has its writer's element ids, so two such defaults could not merge alike in every order. It is
        // left out: the property reads as it reads without a value.
        var defaults = defaults
        if defaults.contains(where: { !$0.value.isSingleValue }) { defaults.removeAll { !$0.value.isSingleValue } }
        // A null given for a list or a dictionary is an empty one (see `.set`), and a null default of either is left
        // out (both start empty). Here for the names that land as written (no property was ever removed or renamed); the
        // general path below decides for the others, by where each lands. The schema is read only when a null is
        // there: reading it copies it.
        var explicit = explicit
        if explicit.contains(where: { $0.value.isNull }) || defaults.contains(where: { $0.value.isNull }),
            state.schema.propertyRemovals.isEmpty, state.schema.losingDefinitions.isEmpty,
            let typeSchema = state.schema[type: type]
        {
            for index in explicit.indices where explicit[index].value.isNull {
                guard let property = typeSchema[property: explicit[index].name], property.isCollection else { continue }
                explicit[index].value = property.isList ? .list([]) : .dictionary([:])
            }
            defaults.removeAll { $0.value.isNull && typeSchema[property: $0.name]?.isCollection == true }
        }
        if try createNew(type: type, key: key, explicit: explicit, defaults: defaults, state: &state) { return }
        // Convert every value first: the ids drawn must not depend on what the replica holds.
        // Then each as it lands (rule 8).
        let schema = state.schema
        let causal = state.causalResolver
        var explicitStates: [(FieldValue, FieldState)] = []
        explicitStates.reserveCapacity(explicit.count)
        let hasRemovals = !schema.propertyRemovals.isEmpty
        for field in explicit {
            var converted = try fieldState(field.value)
            if hasRemovals {
                let landed = FieldValue(field.name, try info.landed(field.value, schema: schema, causal: causal))
                converted = try info.landed(converted, schema: schema, causal: causal)
                if !field.value.isSingleValue { Self.settleMixed(&converted, schema: schema, stamp: stamp) }
                explicitStates.append((landed, converted))
            } else {
                if !field.value.isSingleValue { Self.settleMixed(&converted, schema: schema, stamp: stamp) }
                explicitStates.append((field, converted))
            }
        }
        var defaultStates: [(FieldValue, FieldState)] = []
        defaultStates.reserveCapacity(defaults.count)
        for field in defaults {
            var converted = try fieldState(field.value)
            if hasRemovals { converted = try info.landed(converted, schema: schema, causal: causal) }
            if case .register(var register) = converted {
                register.stamp = .zero
                converted = .register(register)
            }
            defaultStates.append((field, converted))
        }

        guard let typeSchema = state.schema[type: type],  // a type removed meanwhile
            try info.hasSeenRemovals(ofType: type, in: schema, causal: causal)
        else { return }
        guard !typeSchema.isEmbedded else {
            throw MergeError(.invalidInstruction, "cannot create a standalone object of embedded type '\(type)'")
        }
        if let keyProperty = typeSchema.primaryKeyProperty, case .scalar(let keyType) = keyProperty.kind,
            keyType != key.type
        {
            throw MergeError(
                .invalidInstruction, "primary key of '\(type)' is \(keyType), but the create gives \(key.type) \(key)")
        }
        let recordKey = RecordKey(type: type, primaryKey: key)
        try state.withRecord(recordKey) { stored in
            var record = stored ?? ObjectRecord()
            stored = nil  // `record` is now the only reference: changing it copies nothing
            defer { stored = record }
            return try self.create(
                &record, type: typeSchema, schema: schema, explicit: explicitStates, defaults: defaultStates,
                causal: causal)
        }
    }

    /// Applies a create to a record; returns whether it changed it.
    private func create(
        _ record: inout ObjectRecord, type typeSchema: ObjectSchema, schema: Schema,
        explicit explicitStates: [(FieldValue, FieldState)], defaults defaultStates: [(FieldValue, FieldState)],
        causal: CausalResolver
    ) throws -> Bool {
        let type = typeSchema.name
        // Erase wins: a create survives only if its writer had seen every erase of the object (rule 2).
        guard try record.erasures.allSatisfy({ try info.covers($0, causal: causal) }) else { return false }
        record.exists = true
        if record.fields.isEmpty && schema.propertyRemovals.isEmpty && schema.losingDefinitions.isEmpty,
            let fields = try newFields(
                type: typeSchema, schema: schema, explicit: explicitStates, defaults: defaultStates)
        {
            record.fields = fields
            return true
        }
        // A new record: one allocation for its fields, not one per growth step.
        if record.fields.isEmpty { record.fields.reserveCapacity(explicitStates.count + defaultStates.count) }
        // Values that land on one name (one given under a name since renamed to it), joined as the rename joins them
        // when it merges after this create; only a schema that remembers removals can have them.
        var landedTwice: [(name: String, shape: PropertyShape?, landing: SchemaMerger.Landing<FieldState>)] = []
        let writersSchema = self.writersSchema(schema)
        let hasRemovals = !schema.propertyRemovals.isEmpty
        for (field, converted) in explicitStates {
            // A property removed or renamed since the writer's view: the value follows the rename or is dropped.
            guard field.name != typeSchema.primaryKey,
                let name = try info.writeTarget(of: field.name, in: type, schema: schema, causal: causal),
                let landed = typeSchema[property: name]
            else { continue }
            // Written under another definition of the property: kept under its shape (rule 8).
            let writers = writersDefinition(of: landed, written: field.name, in: type, schema)
            let property = writers ?? landed
            try check(field.value, fits: property, QualifiedName(type: type, property: name), writersSchema ?? schema)
            // A null landing on a list is an empty list, on a dictionary an empty one written now (see `.set`).
            var converted =
                property.isList && field.value.isNull
                ? .list(ListState())
                : property.isDictionary && field.value.isNull
                    ? .dictionary(DictionaryState(replaced: stamp))
                    : Self.mixedState(converted, property, stamp: stamp)
            if let writersSchema { Self.placeAside(&converted, writers: writersSchema, schema: schema) }
            guard hasRemovals else {
                try merge(converted, into: &record.fields[name, writers?.shape], causal: causal)
                continue
            }
            let shape = writers?.shape
            let at = landedTwice.firstIndex { $0.name == name && $0.shape == shape }
            let landing = SchemaMerger.Landing(
                converted, direct: field.name == name, onto: at.map { landedTwice[$0].landing }, join: SchemaMerger.join
            )
            if let at { landedTwice[at].landing = landing } else { landedTwice.append((name, shape, landing)) }
        }
        for landed in landedTwice {
            try merge(landed.landing.field, into: &record.fields[landed.name, landed.shape], causal: causal)
        }
        for (field, converted) in defaultStates {
            guard field.name != typeSchema.primaryKey,
                let name = try info.writeTarget(of: field.name, in: type, schema: schema, causal: causal),
                let landed = typeSchema[property: name]
            else { continue }
            let writers = writersDefinition(of: landed, written: field.name, in: type, schema)
            let property = writers ?? landed
            try check(field.value, fits: property, QualifiedName(type: type, property: name), writersSchema ?? schema)
            // A list's or a dictionary's default is left out (above), also where a rename took it.
            if property.isCollection { continue }
            // A default never beats a value someone wrote (rule 3). Two defaults (possible only when the schema's
            // default changed between writers) are ordered by their encoding, so the choice is the same everywhere;
            // they are single values (lists and embedded objects were left out above).
            // Increments made on a default count on whichever default stands (their base is the zero stamp, which
            // names no single default): a default that replaces another keeps its increments, in any order.
            switch record.fields[name, writers?.shape] {
            case nil:
                record.fields[name, writers?.shape] = converted
            case .register(let current)? where current.stamp == .zero:
                if case .register(var new) = converted,
                    Self.defaultOrder(current.value).lexicographicallyPrecedes(Self.defaultOrder(new.value))
                {
                    new.addend = new.addend &+ current.addend
                    record.fields[name, writers?.shape] = .register(new)
                }
            default:
                break
            }
        }
        return true
    }

    /// The fields a create gives an object that has none, when no property was ever removed or renamed (so every
    /// value lands on the property it names): the explicit values and the defaults of properties not given, each
    /// checked, in the order ``newRecordOrder(type:schema:explicit:defaults:)`` gives, without the general path's
    /// lookups and merges. `nil` when that order is `nil`: the general path then decides, as for any record. Both
    /// build the same fields for what this one accepts. A create that throws leaves the record without the fields
    /// the general path would have merged before the failing check: callers discard a working set whose apply
    /// threw, so nothing sees the difference.
    private func newFields(
        type: ObjectSchema, schema: Schema, explicit: [(FieldValue, FieldState)], defaults: [(FieldValue, FieldState)]
    ) throws -> FieldTable? {
        guard
            let order = try Self.newRecordOrder(
                type: type, schema: schema, explicit: explicit.map(\.0), defaults: defaults.map(\.0),
                checkValues: checkValues)
        else { return nil }
        var fields = FieldTable()
        fields.reserveCapacity(order.count)
        for (isDefault, index) in order {
            let (field, state) = isDefault ? defaults[index] : explicit[index]
            let landed = Self.mixedState(state, type[property: field.name], stamp: stamp)
            guard fields.appendInOrder(field.name, landed) else { return nil }  // the order is by name: never taken
        }
        return fields
    }

    /// The embedded objects in `state`, at any depth, with each list or dictionary that landed on a mixed field made
    /// one value, as ``mixedState(_:_:stamp:)`` makes it for a mixed property of an object. `state` was converted
    /// from a value of this instruction, so its lists and dictionaries hold that value's elements, at its stamp.
    static func settleMixed(_ state: inout FieldState, schema: Schema, stamp: Stamp) {
        state.updateEmbedded { settleMixed(&$0, schema: schema, stamp: stamp) }
    }

    static func settleMixed(_ stored: inout StoredValue, schema: Schema, stamp: Stamp) {
        guard case .embedded(var child) = stored, let type = schema[type: child.type] else { return }
        for name in child.fields.names {
            guard var field = child.fields[name] else { continue }
            let property = type[property: name]
            if property?.kind == .scalar(.mixed) {
                field = mixedState(field, property, stamp: stamp)
            } else {
                settleMixed(&field, schema: schema, stamp: stamp)
            }
            child.fields[name] = field
        }
        stored = .embedded(child)
    }

    /// The state a value written to `property` takes: `state` (converted from the value alone, with its ids drawn),
    /// except that a list or a dictionary landing on a mixed property is one value, last writer wins as a whole
    /// (rule 1), like any other value of the property: a mixed register never holds a list's or a dictionary's
    /// merge state, so two writes of different kinds of value merge alike in any order. `state` was converted from a
    /// value of this instruction, so its list or dictionary holds that value's elements (mixed values hold no
    /// embedded objects), at its stamp.
    static func mixedState(_ state: FieldState, _ property: Property?, stamp: Stamp) -> FieldState {
        guard let property, property.kind == .scalar(.mixed), !property.isCollection else { return state }
        func scalar(_ stored: StoredValue) -> Value? { if case .scalar(let value) = stored { value } else { nil } }
        switch state {
        case .register:
            return state
        case .list(let list):
            let elements = list.orderedElements().compactMap { scalar($0.value) }
            return .register(Register(value: .scalar(.list(elements)), stamp: stamp))
        case .dictionary(let dictionary):
            let entries = dictionary.values.compactMapValues(scalar)
            return .register(Register(value: .scalar(.dictionary(entries)), stamp: stamp))
        }
    }

    /// Where each value of a create lands in an object that has no fields, when no property was ever removed or
    /// renamed: the explicit values and the defaults of properties not given, merged in name order, each a position
    /// in `explicit` or in `defaults`. The primary key and names the type does not have are left out. `nil` when the
    /// create names a property twice, or as a default one it also gives, or out of order (an instruction from
    /// elsewhere may): the general path then decides. Values are checked (with ``checkValues``) explicit ones first,
    /// each before its place is taken, then the defaults: the order the general path checks them in, so that a bad
    /// create fails the same way.
    private static func newRecordOrder(
        type: ObjectSchema, schema: Schema, explicit: [FieldValue], defaults: [FieldValue], checkValues: Bool
    ) throws -> [(isDefault: Bool, index: Int)]? {
        var order: [(isDefault: Bool, index: Int)] = []
        order.reserveCapacity(explicit.count + defaults.count)
        var last: String?
        /// Takes the next place; `false` when `name` does not sort after the last name placed.
        func place(_ name: String, _ isDefault: Bool, _ index: Int) -> Bool {
            if let last, !(last < name) { return false }
            last = name
            order.append((isDefault, index))
            return true
        }
        var next = defaults.startIndex
        /// Places the defaults that sort before `name` (all of them when `nil`); `false` when one is out of order.
        func placeDefaults(before name: String?) -> Bool {
            while next < defaults.endIndex, name.map({ defaults[next].name < $0 }) ?? true {
                let index = next
                next += 1
                let field = defaults[index]
                guard field.name != type.primaryKey, type.position(ofProperty: field.name) != nil else { continue }
                guard place(field.name, true, index) else { return false }
            }
            return true
        }
        for index in explicit.indices {
            let field = explicit[index]
            guard field.name != type.primaryKey, let position = type.position(ofProperty: field.name) else { continue }
            if checkValues {
                try check(
                    field.value, fits: type.properties[position], QualifiedName(type: type.name, property: field.name),
                    schema, checkValues: true)
            }
            guard placeDefaults(before: field.name), place(field.name, false, index) else { return nil }
        }
        guard placeDefaults(before: nil) else { return nil }
        for field in defaults where checkValues && field.name != type.primaryKey {
            guard let property = type[property: field.name] else { continue }
            try check(
                field.value, fits: property, QualifiedName(type: type.name, property: field.name), schema,
                checkValues: true)
        }
        return order
    }

    /// The common create: of an object that has no record, here or stored, with plain values only (no lists, no
    /// embedded objects, so no ids to draw), in a schema that never removed or renamed a property or a type. The
    /// working set keeps the record as a ``NewRecord`` (the values, in the order
    /// ``newRecordOrder(type:schema:explicit:defaults:)`` gives): unless something reads or changes it again, it is
    /// encoded straight from the values, without being built, into the bytes the general path of
    /// ``create(type:key:explicit:defaults:state:)`` would store; a replay or a large import then does not spend its
    /// time building records. Returns `false`, changing nothing, when any of that does not hold (the general path
    /// then applies the create).
    private func createNew(
        type: String, key: PrimaryKey, explicit: [FieldValue], defaults: [FieldValue], state: inout WorkingSet
    ) throws -> Bool {
        guard state.schema.propertyRemovals.isEmpty, state.schema.typeRemovals.isEmpty,
            state.schema.losingDefinitions.isEmpty,
            explicit.allSatisfy(\.value.isSingleValue), defaults.allSatisfy(\.value.isSingleValue),
            let typeSchema = state.schema[type: type], !typeSchema.isEmbedded
        else { return false }
        // A key of the wrong type is refused by the general path, with its error.
        if let name = typeSchema.primaryKey, let position = typeSchema.position(ofProperty: name),
            case .scalar(let keyType) = typeSchema.properties[position].kind, keyType != key.type
        {
            return false
        }
        // The closure captures only these, not `self`: a copy of the applier for every create retained and released
        // all its changeset's information holds.
        let stamp = self.stamp
        let checkValues = self.checkValues
        // The schema is the working set's, lent: copying it for every create retained and released all it holds.
        return try state.createNew(RecordKey(type: type, primaryKey: key)) { plan, schema in
            guard
                let order = try Self.newRecordOrder(
                    type: typeSchema, schema: schema, explicit: explicit, defaults: defaults, plan: &plan,
                    checkValues: checkValues)
            else { return nil }
            return NewRecord(order: order, explicit: explicit, defaults: defaults, stamp: stamp)
        }
    }

    /// ``newRecordOrder(type:schema:explicit:defaults:)``, from `plan` when it holds for this create: creates in a
    /// replay or an import name the same properties, one after another, and checking that the names are the same
    /// costs less than placing them again. The values are checked as that function checks them.
    private static func newRecordOrder(
        type: ObjectSchema, schema: Schema, explicit: [FieldValue], defaults: [FieldValue], plan: inout NewRecordPlan?,
        checkValues: Bool
    ) throws -> [(isDefault: Bool, index: Int)]? {
        guard let planned = plan, planned.holds(for: type, explicit: explicit, defaults: defaults) else {
            guard
                let order = try newRecordOrder(
                    type: type, schema: schema, explicit: explicit, defaults: defaults, checkValues: checkValues)
            else { return nil }
            plan = NewRecordPlan(type: type, explicit: explicit, defaults: defaults, order: order)
            return order
        }
        if checkValues {
            // The order holds: the function would have checked every value, explicit ones first.
            func checkAll(_ fields: [FieldValue], at positions: [Int?]) throws {
                for index in fields.indices {
                    guard let position = positions[index] else { continue }
                    try check(
                        fields[index].value, fits: type.properties[position],
                        QualifiedName(type: type.name, property: fields[index].name), schema, checkValues: true)
                }
            }
            try checkAll(explicit, at: planned.explicitPositions)
            try checkAll(defaults, at: planned.defaultPositions)
        }
        return planned.order
    }

    /// The order of two defaults of one field (possible only when the schema's default changed between writers): by
    /// their encoding, so that the choice is the same everywhere.
    static func defaultOrder(_ value: StoredValue) -> [UInt8] {
        guard case .scalar(let scalar) = value else { return [] }
        var writer = BinaryWriter()
        var names = NameTable.inline
        writer.value(scalar, &names)
        return writer.bytes
    }

    func erase(_ key: RecordKey, state: inout WorkingSet) throws {
        guard let typeSchema = state.schema[type: key.type], !typeSchema.isEmbedded,
            try hasSeenRemovals(ofType: key.type, in: state)
        else { return }
        let info = self.info
        let causal = state.causalResolver
        try state.withRecord(key) { stored in
            var record = stored ?? ObjectRecord()
            // Keep only the erases this one has not seen; it supersedes the rest.
            try record.erasures.removeAll { try info.covers($0, causal: causal) }
            record.erasures.append(info.dot)
            record.erasures.sort()
            record.exists = false
            // Every write that came before this erase is undone by it; later writes must have seen it.
            record.fields = [:]
            stored = record
            return true
        }
    }

    // MARK: Paths

    /// Finds the property `path` names, checks it against the schema, and lets `body` change its state. Does
    /// nothing when the object does not exist, an erase it has not seen wins, or an embedded object on the way
    /// has been replaced or removed.
    func update(
        _ path: FieldPath, state: inout WorkingSet,
        _ body: (inout FieldState?, Property) throws -> Void
    ) throws {
        guard let typeSchema = state.schema[type: path.type], !typeSchema.isEmbedded,
            try hasSeenRemovals(ofType: path.type, in: state)
        else { return }
        let key = RecordKey(type: path.type, primaryKey: path.primaryKey)
        let schema = state.schema
        let info = self.info
        let causal = state.causalResolver
        try state.withRecord(key) { stored in
            guard var record = stored, record.exists,
                try record.erasures.allSatisfy({ try info.covers($0, causal: causal) })
            else {
                return false
            }
            stored = nil  // `record` is now the only reference: changing it copies nothing
            defer { stored = record }
            return try descend(
                into: &record.fields, type: typeSchema, steps: path.steps[...], property: path.property, schema: schema,
                causal: causal, body)
        }
    }

    func descend(
        into fields: inout FieldTable, type: ObjectSchema, steps: ArraySlice<EmbeddedStep>, property: String,
        schema: Schema, causal: CausalResolver, _ body: (inout FieldState?, Property) throws -> Void
    ) throws -> Bool {
        guard let step = steps.first else {
            guard property != type.primaryKey else {
                throw MergeError(.invalidInstruction, "the primary key '\(type.name).\(property)' cannot change")
            }
            // Removed or renamed since the writer's view: the write follows the rename or is dropped (rule 8).
            guard let landing = try info.writeTarget(of: property, in: type.name, schema: schema, causal: causal),
                let definition = type[property: landing]
            else { return false }
            // Written under another definition of the property: to the state kept under its shape.
            let writers = writersDefinition(of: definition, written: property, in: type.name, schema)
            // Changed in place, so that a write to a long list copies nothing. Every body leaves the field as it was
            // when it throws (it checks before it changes anything), so a write that fails changes nothing.
            try body(&fields[landing, writers?.shape], writers ?? definition)
            return true
        }
        guard let stepProperty = try info.writeTarget(of: step.property, in: type.name, schema: schema, causal: causal),
            let landed = type[property: stepProperty]
        else { return false }
        let writers = writersDefinition(of: landed, written: step.property, in: type.name, schema)
        guard case .embedded(let childTypeName) = (writers ?? landed).kind,
            let childType = schema[type: childTypeName]
                ?? writersEmbeddedType(childTypeName, holding: steps.dropFirst().first?.property ?? property)
        else { return false }
        // The embedded object is changed in place through the table: taken out of the field (and of the register or
        // the list element holding it), so that `child` is the only reference to its fields and a write to a long
        // list in it copies nothing. It is put back also when the write throws, which changes nothing.
        func descendIntoField(_ state: inout FieldState?) throws -> Bool {
            switch state {
            case .register(var register)?:
                guard case .embedded(var child) = register.value, child.id == step.id else { return false }
                state = nil
                register.value = .scalar(.null)
                defer {
                    register.value = .embedded(child)
                    state = .register(register)
                }
                return try descend(
                    into: &child.fields, type: childType, steps: steps.dropFirst(), property: property, schema: schema,
                    causal: causal, body)
            case .list(var list)?:
                guard
                    let id = list.elements.first(where: {
                        if case .embedded(let child) = $0.value.value { child.id == step.id } else { false }
                    })?.key, case .embedded(var child)? = list.elements[id]?.value
                else { return false }
                state = nil
                list.elements[id]?.value = .scalar(.null)
                defer {
                    list.elements[id]?.value = .embedded(child)
                    state = .list(list)
                }
                return try descend(
                    into: &child.fields, type: childType, steps: steps.dropFirst(), property: property, schema: schema,
                    causal: causal, body)
            case .dictionary(var dictionary)?:
                guard
                    let key = dictionary.entries.first(where: {
                        if case .embedded(let child)? = $0.value.value { child.id == step.id } else { false }
                    })?.key, case .embedded(var child)? = dictionary.entries[key]?.value
                else { return false }
                state = nil
                dictionary.entries[key]?.value = .scalar(.null)
                defer {
                    dictionary.entries[key]?.value = .embedded(child)
                    state = .dictionary(dictionary)
                }
                return try descend(
                    into: &child.fields, type: childType, steps: steps.dropFirst(), property: property, schema: schema,
                    causal: causal, body)
            case nil:
                return false
            }
        }
        return try descendIntoField(&fields[stepProperty, writers?.shape])
    }

    /// The embedded type `name`, which the schema lacks, as this changeset's writer held it, as far as a write into
    /// an object of it needs: its property `property`, by the writer's shape note. A concurrent changeset removed the
    /// type; the objects embedded in it are kept (rule 8), and a write into one lands as it does where the type was
    /// still there when the write merged. `nil` without a note (a changeset of a build that wrote none).
    func writersEmbeddedType(_ name: String, holding property: String) -> ObjectSchema? {
        guard let shape = info.shapeNotes.shape(of: property, in: name, at: index) else { return nil }
        var definition = Property(property, .scalar(.mixed))
        definition.shape = shape
        return .embedded(name, properties: [definition])
    }

    /// The definition a write to `written` (the name as written) of `type` was made under, when it is not
    /// `definition`, the one of the property it lands on: its writer held another definition of the property, of
    /// another shape (rule 8), and the value goes to the state kept under that shape. `nil` otherwise, and always
    /// when no property has a losing definition.
    func writersDefinition(of definition: Property, written: String, in type: String, _ schema: Schema) -> Property? {
        guard !schema.losingDefinitions.isEmpty,
            let shape = info.shapeNotes.shape(of: written, in: type, at: index), shape != definition.shape
        else { return nil }
        var property = definition
        property.shape = shape
        return property
    }

    /// Like ``update(_:state:_:)`` for a list property; `element` (when given) is checked against its type.
    func updateList(
        _ path: FieldPath, element: Value?, state: inout WorkingSet, _ body: (inout ListState) throws -> Void
    ) throws {
        let schema = state.schema
        try update(path, state: &state) { field, property in
            guard property.isList else {
                throw MergeError(.invalidInstruction, "\(path) is \(property.typeDescription), not a list")
            }
            if checkValues, let element,
                let problem = ((element.isSingleValue ? nil : writersSchema(schema)) ?? schema).problem(
                    with: .list([element]), for: property, requiringFields: false)
            {
                throw MergeError(.invalidInstruction, "list element for \(path): \(problem)")
            }
            guard case .list(var list)? = field else {
                var list = ListState()
                try body(&list)
                field = .list(list)
                return
            }
            field = nil  // `list` is now the only reference: changing it copies nothing
            // `body` throws only before it changes the list: put it back as it was.
            defer { field = .list(list) }
            try body(&list)
        }
    }

    func check(_ value: Value, fits property: Property, _ path: some CustomStringConvertible, _ schema: Schema) throws {
        try Self.check(value, fits: property, path, schema, checkValues: checkValues)
    }

    static func check(
        _ value: Value, fits property: Property, _ path: some CustomStringConvertible, _ schema: Schema,
        checkValues: Bool
    ) throws {
        // `path` is described only when the check fails: building the text for every value checked is costly.
        guard checkValues else { return }
        // Embedded objects need not give every required field: see ``Schema/problem(with:for:depth:requiringFields:)``.
        if let problem = schema.problem(with: value, for: property, requiringFields: false) {
            throw MergeError(.invalidInstruction, "value for \(path): \(problem)")
        }
    }
}

/// `Type.property`, written out only when an error needs it.
struct QualifiedName: CustomStringConvertible {
    let type: String
    let property: String
    var description: String { "\(type).\(property)" }
}
