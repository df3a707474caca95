import TributaryModel

/// Applies schema instructions (rule 8): additive changes merge as a union; a property's index and default are a
/// register that the latest definition sets (every redefinition is later than every addition, then the greater stamp
/// is later); definitions that disagree on what a property holds are refused with an error naming both; removals
/// and renames carry the data along.
///
/// Removals and renames are ordered like erases (rule 2): the schema remembers them, and an addition of a removed
/// type or property, a redefinition of it, or a write to it, counts only if its changeset saw every removal of it. A
/// write that did not see a rename follows it to the new name. So a replica of an old app version, whose first
/// changeset adds the schema it declares, does not bring back what a concurrent migration removed, on any replica.
struct SchemaMerger {
    let info: ChangesetInfo

    func apply(_ instruction: Instruction, to state: inout WorkingSet) throws {
        var schema = state.schema
        let causal = state.causalResolver
        // A definition brings no default that would not merge alike everywhere (rule 3): a list or embedded-object
        // default that an earlier build's definition holds is dropped, on every replica (a schema declares none).
        switch instruction {
        case .addType(var type):
            guard try info.hasSeenRemovals(ofType: type.name, in: schema, causal: causal) else { return }
            type.properties = type.properties.map(\.withoutUnmergeableDefault)
            let (incoming, alsoDefined) = try landedProperties(of: type, in: schema, causal: causal)
            var shapeChanges: [ShapeChange] = []
            if let existing = schema[type: type.name] {
                shapeChanges = try merge(existing, incoming, into: &schema)
            } else {
                schema.upsert(incoming)
                for property in incoming.properties { record(.addition, of: property.name, in: type.name, &schema) }
            }
            // The definitions that lost to another of this changeset landing on the same name (a rename).
            for property in alsoDefined {
                guard var merged = schema[type: type.name],
                    let index = merged.properties.firstIndex(where: { $0.name == property.name })
                else { continue }
                if let change = try define(
                    property, stamped: DefinitionStamp(.addition, info.stamp), in: &merged, at: index, &schema)
                {
                    shapeChanges.append(change)
                }
                schema.upsert(merged)
            }
            state.setSchema(schema)
            try moveStates(shapeChanges, of: type.name, in: &state)
            return
        case .addProperty(let typeName, let property):
            let property = property.withoutUnmergeableDefault
            guard try info.hasSeenRemovals(ofType: typeName, in: schema, causal: causal) else { return }
            guard let existing = schema[type: typeName] else {
                throw MergeError(
                    .invalidInstruction, "cannot add property '\(property.name)' to unknown type '\(typeName)'")
            }
            guard let name = try info.writeTarget(of: property.name, in: typeName, schema: schema, causal: causal)
            else { return }
            var landed = property
            landed.name = name
            let shapeChanges = try merge(
                existing,
                ObjectSchema(
                    name: existing.name, primaryKey: existing.primaryKey, embedded: existing.isEmbedded,
                    properties: [landed]),
                into: &schema, partial: true)
            state.setSchema(schema)
            try moveStates(shapeChanges, of: typeName, in: &state)
            return
        case .removeProperty(let typeName, let name):
            // Remembered even when the property is gone already, so that every replica holds the same removals.
            let removal = PropertyRemoval(
                dot: info.dot, removalsSeen: try seenRemovals(of: name, in: typeName, schema, causal),
                renamesOntoSeen: try seenRenames(onto: name, in: typeName, schema, causal))
            try refuseDisagreement(with: removal, of: name, in: typeName, schema, causal)
            // A copy of a removal merged already (one migration run on several replicas, each removing the property
            // it held and perhaps adding it back with another definition, as a change of its type does): the property
            // it removes is gone, and what holds the name now came after, from a changeset that saw one of the copies
            // (which counts as seeing this one). It stays. Asked before this one is remembered.
            let recorded = schema.removals(of: name, in: typeName)
            let copies = RemovalCopies(recorded + [removal])
            let repeated = recorded.contains { copies.isCopy(removal, of: $0) }
            schema.recordRemoval(removal, of: name, in: typeName)
            if repeated {
                state.setSchema(schema)
                return
            }
            try remove(name, of: typeName, schema, in: &state)
            return
        case .renameProperty(let typeName, let from, let to):
            let removal = PropertyRemoval(
                dot: info.dot, renamedTo: to,
                removalsOfNewNameSeen: try seenRemovals(of: to, in: typeName, schema, causal),
                removalsSeen: try seenRemovals(of: from, in: typeName, schema, causal),
                renamesOntoSeen: try seenRenames(onto: from, in: typeName, schema, causal))
            try refuseDisagreement(with: removal, of: from, in: typeName, schema, causal)
            // Copies of this rename merged already: the same rename (of `from` to `to`) made concurrently on other
            // replicas, of the same property. This one does not move the property from `from` again (the old name may
            // be in use again, added back after that rename); it can only move it on or drop it, below. A removal or
            // rename of `from` that one of the two saw and the other did not means that they renamed different
            // properties of that name (it was used again), so they are not copies. Asked before this one is remembered.
            let removalsOfFrom = schema.removals(of: from, in: typeName)
            let copiesOfFrom = RemovalCopies(removalsOfFrom + [removal])
            let copies = removalsOfFrom.filter { copiesOfFrom.isCopy(removal, of: $0) }
            let repeated = !copies.isEmpty
            // Remembered whatever happens next, like a removal.
            schema.recordRemoval(removal, of: from, in: typeName)
            // The name the property lands on, like a write to the new name: a rename of the new name that this one
            // did not see moves it on; a removal of it that this one did not see removes it (as that removal does when
            // it merges after this rename). Asked after this one is remembered, so that renames made concurrently that
            // lead back to `from` are seen as a cycle, which lands on the same name whichever of them merges last.
            let landing = try info.writeTarget(of: to, in: typeName, schema: schema, causal: causal)
            if repeated {
                // Copies of one rename land only where every copy would. One merged earlier put the property at the
                // new name; this one would have put it elsewhere, following a removal or rename of the new name that
                // it did not see (and that copy did). Merged before that copy, this one would have landed first and
                // the removal or rename would then have taken the property on, and that copy would have done
                // nothing; so the property goes where this one lands, or is dropped: where it is now, if renames
                // that saw a copy moved it on since.
                if let place = Self.place(ofPropertyPlacedBy: copies, at: to, in: typeName, schema), place != landing {
                    if let landing {
                        try move(place, to: landing, of: typeName, schema, in: &state)
                    } else {
                        try remove(place, of: typeName, schema, in: &state)
                    }
                    return
                }
                break
            }
            guard let landing else {
                try remove(from, of: typeName, schema, in: &state)
                return
            }
            try move(from, to: landing, of: typeName, schema, in: &state)
            return
        case .redefineProperty(let typeName, var property):
            guard try info.hasSeenRemovals(ofType: typeName, in: schema, causal: causal),
                let name = try info.writeTarget(of: property.name, in: typeName, schema: schema, causal: causal),
                var type = schema[type: typeName], let index = type.properties.firstIndex(where: { $0.name == name })
            else { return }
            property = property.withoutUnmergeableDefault
            property.name = name
            // A concurrent redefinition with a greater stamp may have set it already. One of another shape (its
            // writer held another definition of the property) is ordered against the definition like any other.
            let change = try define(
                property, stamped: DefinitionStamp(.redefinition, info.stamp), in: &type, at: index, &schema)
            schema.upsert(type)
            state.setSchema(schema)
            try moveStates(change.map { [$0] } ?? [], of: typeName, in: &state)
            return
        case .removeType(let typeName):
            // Remembered even when the type is gone already, so that every replica holds the same removals.
            let recorded = schema.removals(ofType: typeName)
            let removal = TypeRemoval(
                dot: info.dot, removalsSeen: try recorded.map(\.dot).filter { try info.covers($0, causal: causal) })
            // A copy of a removal merged already (one migration that replaces the type, run on several replicas, each
            // removing the type it held and perhaps adding it back with another definition): the type it removes is
            // gone, and what holds the name now came after, from changesets that saw one of the copies (which counts
            // as seeing this one). It stays, with its objects. Asked before this one is remembered.
            let copies = RemovalCopies(recorded + [removal])
            let repeated = recorded.contains { copies.isCopy(removal, of: $0) }
            schema.recordRemoval(removal, ofType: typeName)
            if !repeated, let type = schema[type: typeName] {
                if !type.isEmbedded {
                    for key in try state.keys(ofType: typeName) { try state.setRecord(nil, for: key) }
                }
                schema.remove(type: typeName)
            }
        case .setSchemaVersion(let version):
            // The highest version wins, so concurrent version changes agree.
            schema.version = max(schema.version, version)
        case .migrated(let version):
            schema.migratedVersion = max(schema.migratedVersion, version)
        default:
            throw MergeError(.invalidInstruction, "\(instruction) is not a schema instruction")
        }
        state.setSchema(schema)
    }

    /// Moves `property` of `typeName` to the name `to`, in `schema` and in every object, and stores the schema in
    /// `state`: what a rename does (or a late copy of the rename of an old name to that new name).
    /// When `to` exists already (added, or renamed to, concurrently), the two merge as ``join(_:_:)`` says, and the
    /// later definition of index and default wins.
    private func move(
        _ property: String, to: String, of typeName: String, _ schema: Schema, in state: inout WorkingSet
    ) throws {
        var schema = schema
        // A primary key is never renamed: a rename that names one concerned an earlier type of that name.
        guard var type = schema[type: typeName], let index = type.properties.firstIndex(where: { $0.name == property }),
            property != type.primaryKey
        else {
            state.setSchema(schema)
            return
        }
        var renamed = type.properties[index]
        renamed.name = to
        let movedShape = renamed.shape
        let movedStamp = schema.definitionStamps.removeValue(forKey: PropertyName(type: typeName, property: property))
        // The definitions that lost to the renamed one go with it.
        let movedLosing =
            schema.losingDefinitions.removeValue(
                forKey: PropertyName(type: typeName, property: property)) ?? []
        type.properties.remove(at: index)
        let visible: PropertyShape
        var addedShape: PropertyShape?
        if let existing = type.properties.firstIndex(where: { $0.name == to }) {
            addedShape = type.properties[existing].shape
            // The new name was added concurrently (a new replica declaring the renamed schema, say). Merged the
            // other way round, that addition would have merged into the renamed property; so it does here: the later
            // definition wins, as it would have when the addition merged after the rename. Two renamed properties
            // defined by one changeset tie: then the one that describes itself first wins, whichever rename merged
            // first. Of another shape, the one that loses is kept as a losing definition.
            _ = try define(renamed, stamped: movedStamp ?? .unknown, in: &type, at: existing, &schema)
            visible = type.properties[existing].shape
        } else {
            type.properties.append(renamed)
            schema.definitionStamps[PropertyName(type: typeName, property: to)] = movedStamp
            visible = movedShape
        }
        for losing in movedLosing {
            var definition = losing
            definition.property.name = to
            schema.recordLosing(definition, of: to, in: typeName)
        }
        // What a definition of a shape took from the renamed property's definition leaves no losing one of it.
        _ = schema.takeLosing(visible, of: to, in: typeName)
        type.properties.sort { $0.name < $1.name }
        schema.upsert(type)
        state.setSchema(schema)
        try rewriteFields(of: typeName, in: &state) { fields in
            // Every state of the old name joins the state of the new name kept under the same shape.
            let moved = fields.states(of: property, visible: movedShape)
            var states = fields.states(of: to, visible: addedShape ?? movedShape)
            guard !moved.isEmpty || (addedShape != nil && addedShape != visible) else { return }
            fields.removeStates(of: property)
            for (shape, state) in moved { states[shape] = states[shape].map { Self.join(state, $0) } ?? state }
            fields.setStates(states, of: to, visible: visible)
        }
    }

    /// Removes `property` of `typeName` from `schema` and from every object, and stores the schema in `state`.
    private func remove(_ property: String, of typeName: String, _ schema: Schema, in state: inout WorkingSet) throws {
        var schema = schema
        // A primary key is never removed: a removal that names one concerned an earlier type of that name.
        guard var type = schema[type: typeName], type[property: property] != nil, property != type.primaryKey else {
            state.setSchema(schema)
            return
        }
        type.properties.removeAll { $0.name == property }
        // Canonical order after a removal, so that a concurrent addition merged before or after it ends the same.
        type.properties.sort { $0.name < $1.name }
        schema.upsert(type)
        schema.definitionStamps[PropertyName(type: typeName, property: property)] = nil
        schema.losingDefinitions[PropertyName(type: typeName, property: property)] = nil
        state.setSchema(schema)
        try rewriteFields(of: typeName, in: &state) { fields in fields.removeStates(of: property) }
    }

    /// A change of the shape of a property's definition: each object's state of the property under `to`, kept aside
    /// until now, shows, and the state under `from` goes aside.
    struct ShapeChange {
        var property: String
        var from: PropertyShape
        var to: PropertyShape
    }

    /// Merges the definition `property`, set as `stamp` says, into the definition of that name at `index` of `type`
    /// (rule 8): the later one is the property's (``replaces(_:stamped:_:stamped:)``). Of the same shape, that sets
    /// the index and default; of another shape, the one that loses is kept in `schema` as a losing definition (the
    /// latest of its shape), and when the incoming one wins, the change of shape is returned: the caller moves each
    /// object's states (``moveStates(_:of:in:)``) once it stored the schema. Every replica reaches the same
    /// definition and the same losing ones, in whatever order the definitions merge.
    func define(
        _ property: Property, stamped stamp: DefinitionStamp, in type: inout ObjectSchema, at index: Int,
        _ schema: inout Schema
    ) throws -> ShapeChange? {
        let current = type.properties[index]
        let currentStamp = schema.definitionStamp(of: current.name, in: type.name)
        let wins = Self.replaces(property, stamped: stamp, current, stamped: currentStamp)
        // Objects are stored by their primary key: one of another type would be another object. Refused, as two
        // primary keys are.
        if property.shape != current.shape, current.name == type.primaryKey {
            throw MergeError(
                .schemaConflict,
                "the primary key '\(type.name).\(current.name)' is defined twice: as \(current.typeDescription) and as "
                    + "\(property.typeDescription)")
        }
        guard property.shape != current.shape else {
            if wins { Self.set(property, stamped: stamp, at: index, of: &type, &schema) }
            return nil
        }
        guard wins else {
            schema.recordLosing(LosingDefinition(property, stamp), of: property.name, in: type.name)
            return nil
        }
        schema.recordLosing(LosingDefinition(current, currentStamp), of: current.name, in: type.name)
        _ = schema.takeLosing(property.shape, of: property.name, in: type.name)
        Self.set(property, stamped: stamp, at: index, of: &type, &schema)
        return ShapeChange(property: property.name, from: current.shape, to: property.shape)
    }

    private static func set(
        _ property: Property, stamped stamp: DefinitionStamp, at index: Int, of type: inout ObjectSchema,
        _ schema: inout Schema
    ) {
        type.properties[index] = property
        // An unknown stamp is no entry, as for a property stored before stamps were kept.
        schema.definitionStamps[PropertyName(type: type.name, property: property.name)] =
            stamp == .unknown ? nil : stamp
    }

    /// Moves each object's states of the properties whose definitions changed shape: the state under the new shape
    /// shows, the one under the old goes aside. The only write that touches every object of a type for a merge of a
    /// definition: it happens once for each definition that wins over one of another shape.
    func moveStates(_ changes: [ShapeChange], of typeName: String, in state: inout WorkingSet) throws {
        guard !changes.isEmpty else { return }
        try rewriteFields(of: typeName, in: &state) { fields in
            for change in changes {
                let states = fields.states(of: change.property, visible: change.from)
                guard !states.isEmpty else { continue }
                fields.setStates(states, of: change.property, visible: change.to)
            }
        }
    }

    /// Refuses a removal or rename of `property` of `type` that disagrees with one made concurrently (rule 8): a
    /// rename against a removal, or against a rename to another name. Merged in either order they would leave the
    /// replicas with different schemas and data, so whichever of the two a replica merges second is refused, on
    /// every replica, naming both. Two removals agree, and so do two renames to one name (one migration run on
    /// several replicas).
    ///
    /// A pair does not disagree when one of them concerns a later property of that name: it saw a rename that the
    /// other is a copy of (the name was used again after that rename), so the copy renames nothing that the later
    /// one touches. A removal gets that pass only as a copy of a removal the later one saw (the same migration run on
    /// several replicas): otherwise one that the later property's addition did not see removes that property too (an
    /// addition counts only if it saw every removal, or a copy of it), so a concurrent rename of it disagrees.
    private func refuseDisagreement(
        with incoming: PropertyRemoval, of property: String, in type: String, _ schema: Schema, _ causal: CausalResolver
    ) throws {
        let recorded = schema.removals(of: property, in: type)
        let copies = RemovalCopies(recorded + [incoming])
        // A copy of a rename or removal that `later` saw (and `copy` did not): `later` counts as having seen `copy`.
        func isCopy(_ copy: PropertyRemoval, ofOneSeenBy later: PropertyRemoval) -> Bool {
            recorded.contains { seen in later.saw(seen) && copies.isCopy(copy, of: seen) }
        }
        // Recorded ones that this changeset did not see: made concurrently (it applies after its causal past).
        for other in recorded where other.renamedTo != incoming.renamedTo {
            guard try !info.covers(other.dot, causal: causal) else { continue }
            if isCopy(other, ofOneSeenBy: incoming) || isCopy(incoming, ofOneSeenBy: other) { continue }
            throw MergeError(
                .schemaConflict,
                "'\(type).\(property)' is \(Self.describe(incoming)) and, concurrently, \(Self.describe(other)): two "
                    + "migrations disagree about it; the changeset merged second is refused on every replica")
        }
    }

    private static func describe(_ removal: PropertyRemoval) -> String {
        removal.renamedTo.map { "renamed to '\($0)' by changeset \(removal.dot)" }
            ?? "removed by changeset \(removal.dot)"
    }

    /// The removals of `property` of `type` recorded so far that this changeset saw. Every removal it saw is recorded
    /// already (a changeset applies after its causal past), so every replica computes the same list.
    private func seenRemovals(of property: String, in type: String, _ schema: Schema, _ causal: CausalResolver) throws
        -> [Dot]
    {
        try schema.removals(of: property, in: type).map(\.dot).filter { try info.covers($0, causal: causal) }
    }

    /// The renames of other properties of `type` to `property`, recorded so far, that this changeset saw. Every
    /// rename it saw is recorded already (a changeset applies after its causal past), so every replica computes the
    /// same list.
    private func seenRenames(onto property: String, in type: String, _ schema: Schema, _ causal: CausalResolver) throws
        -> [Dot]
    {
        var dots: Set<Dot> = []
        for (name, removals) in schema.propertyRemovals where name.type == type {
            for removal in removals where removal.renamedTo == property {
                guard try info.covers(removal.dot, causal: causal) else { continue }
                dots.insert(removal.dot)
            }
        }
        return dots.sorted()
    }

    /// Where the property that `copies` (copies of one rename, merged already) put at `name` is now: there, unless
    /// removals or renames of the name that none of them saw came since. Those that saw a copy concern that property:
    /// a rename took it on (and the walk goes on from its new name), a removal dropped it (`nil`). `nil` too when the
    /// first of those the copies did not see had not seen a copy: the name was then used again, and what is there is
    /// not the copies' property.
    static func place(
        ofPropertyPlacedBy copies: [PropertyRemoval], at name: String, in type: String, _ schema: Schema
    ) -> String? {
        var name = name
        // The renames that brought the property to `name`, and the removals of `name` that they saw.
        var arrivals = Set(copies.map(\.dot))
        var seenByArrivals = Set(copies.flatMap(\.removalsOfNewNameSeen))
        // Bounded: each step follows a rename recorded in the schema.
        let steps = schema.propertyRemovals.values.reduce(0) { $0 + $1.count }
        for _ in 0...steps {
            let first = PropertyRemoval.firstUnseen(among: schema.removals(of: name, in: type)) {
                seenByArrivals.contains($0.dot)
            }
            guard !first.isEmpty else { return name }
            guard first.allSatisfy({ !arrivals.isDisjoint(with: $0.renamesOntoSeen) }),
                let next = first[0].renamedTo, first.allSatisfy({ $0.renamedTo == next })
            else { return nil }
            name = next
            arrivals = Set(first.map(\.dot))
            seenByArrivals = Set(first.flatMap(\.removalsOfNewNameSeen))
        }
        return nil
    }

    /// `type`'s properties as they land, like writes: without those removed since the writer's view, and under their
    /// new names those renamed since (a definition added before a rename is carried along by it, so one that arrives
    /// after it follows it). The primary key always stays. When anything moved or went, the properties are sorted by
    /// name, as a removal or rename merged after the addition would have left them.
    ///
    /// Two definitions that land on one name (the type declares both a property and the name a rename gave it) are
    /// one changeset's, so they tie: the one that describes itself first stands, as ``replaces(_:stamped:_:stamped:)``
    /// decides when the rename merges after this addition and moves the one onto the other; when they hold different
    /// values, the addition is refused, naming both, as that rename refuses them. None lands on the primary key's name.
    private func landedProperties(of type: ObjectSchema, in schema: Schema, causal: CausalResolver) throws
        -> (type: ObjectSchema, alsoDefined: [Property])
    {
        guard !schema.propertyRemovals.isEmpty else { return (type, []) }
        var landed = type
        landed.properties = []
        var alsoDefined: [Property] = []
        for var property in type.properties {
            guard property.name != type.primaryKey else {
                landed.properties.append(property)
                continue
            }
            guard let name = try info.writeTarget(of: property.name, in: type.name, schema: schema, causal: causal),
                name == property.name || name != type.primaryKey
            else { continue }
            property.name = name
            if let other = landed.properties.firstIndex(where: { $0.name == name }) {
                let current = landed.properties[other]
                // Of another shape, the one that does not stand is merged after the type, as a definition of this
                // changeset that loses to the one that stands.
                if property.description < current.description {
                    landed.properties[other] = property
                    if current.shape != property.shape { alsoDefined.append(current) }
                } else if current.shape != property.shape {
                    alsoDefined.append(property)
                }
                continue
            }
            landed.properties.append(property)
        }
        if landed.properties.map(\.name) != type.properties.map(\.name) { landed.properties.sort { $0.name < $1.name } }
        return (landed, alsoDefined)
    }

    private func record(_ kind: DefinitionStamp.Kind, of property: String, in type: String, _ schema: inout Schema) {
        schema.definitionStamps[PropertyName(type: type, property: property)] = DefinitionStamp(kind, info.stamp)
    }

    /// Merges a definition of an existing type into `schema`: the union of the properties, and for a property both
    /// define, the later definition of its index and default. Fails naming both definitions when they disagree on the
    /// type's kind or primary key, or on what a property holds.
    ///
    /// When the definitions disagree on the properties' names, order or what they hold (not on indexes and
    /// defaults), or `incoming` is `partial` (the properties an `addProperty` adds), the merged properties are sorted
    /// by name, so that replicas that merged the same definitions in other orders agree.
    func merge(_ existing: ObjectSchema, _ incoming: ObjectSchema, into schema: inout Schema, partial: Bool = false)
        throws -> [ShapeChange]
    {
        guard existing.isEmbedded == incoming.isEmbedded else {
            throw MergeError(
                .schemaConflict,
                "type '\(existing.name)' is defined twice: as \(existing) and as \(incoming)")
        }
        guard existing.primaryKey == incoming.primaryKey else {
            throw MergeError(
                .schemaConflict,
                "type '\(existing.name)' has two primary keys: '\(existing.primaryKey ?? "-")' and '\(incoming.primaryKey ?? "-")'"
            )
        }
        var merged = existing
        let addition = DefinitionStamp(.addition, info.stamp)
        var changes: [ShapeChange] = []
        for property in incoming.properties {
            guard let position = existing.properties.firstIndex(where: { $0.name == property.name }) else {
                merged.properties.append(property)
                record(.addition, of: property.name, in: existing.name, &schema)
                continue
            }
            // The later definition wins, even when it is the same one: its stamp is kept, so that the stamps agree
            // in whatever order replicas merge the definitions. One of another shape is kept as a losing definition.
            if let change = try define(property, stamped: addition, in: &merged, at: position, &schema) {
                changes.append(change)
            }
        }
        let sameLayout =
            incoming.properties.count == existing.properties.count
            && incoming.properties.indices.allSatisfy { position in
                incoming.properties[position].name == existing.properties[position].name
                    && incoming.properties[position].shape == existing.properties[position].shape
            }
        if partial || !sameLayout {
            merged.properties.sort { $0.name < $1.name }
        }
        schema.upsert(merged)
        return changes
    }

    /// Whether `property`, defined by a changeset as `stamp` says, replaces `current`, defined as `currentStamp` says
    /// (rule 8): the later definition wins; two from one changeset (two names it defined, which a rename made one)
    /// are ordered by their descriptions, the one that sorts first winning, so the outcome is the same in any order.
    static func replaces(
        _ property: Property, stamped stamp: DefinitionStamp, _ current: Property, stamped currentStamp: DefinitionStamp
    ) -> Bool {
        property.isLater(stamped: stamp, than: current, stamped: currentStamp)
    }

    /// The state of a renamed property (`moved`) merged with the state of the property of its new name that was
    /// added concurrently (`added`), as the writes that made `added` would have merged into `moved` had the rename
    /// come first: a register by the greater stamp (two defaults as a create orders them, the increments on both
    /// adding up on the one that stands); a list as the union of the two, whose positions and elements have
    /// distinct ids.
    static func join(_ moved: FieldState, _ added: FieldState) -> FieldState {
        switch (moved, added) {
        case (.register(var kept), .register(let other)):
            if other.stamp > kept.stamp { return added }
            guard other.stamp == kept.stamp else { return moved }
            if case .embedded(let keptObject) = kept.value, case .embedded(let otherObject) = other.value {
                // Two embedded objects one changeset wrote (a rename joins two of its properties): the one with the
                // greater id stands, whichever property was renamed onto the other.
                if otherObject.id > keptObject.id { kept.value = other.value }
            } else {
                let order = InstructionApplier.defaultOrder
                if kept.value != other.value && order(kept.value).lexicographicallyPrecedes(order(other.value)) {
                    kept.value = other.value
                }
            }
            kept.addend = kept.addend &+ other.addend
            return .register(kept)
        case (.list(var list), .list(let other)):
            list.slots.merge(other.slots) { old, _ in old }
            list.elements.merge(other.elements) { old, new in new.valueStamp > old.valueStamp ? new : old }
            return .list(list)
        case (.dictionary(var dictionary), .dictionary(let other)):
            // As if every write of both had been made to one dictionary: the later whole write, and each key's
            // latest write after it.
            if other.replaced > dictionary.replaced {
                dictionary.replaced = other.replaced
                dictionary.entries = dictionary.entries.filter { $0.value.stamp >= other.replaced }
            }
            for (key, entry) in other.entries where entry.stamp >= dictionary.replaced {
                if let current = dictionary.entries[key], current.stamp >= entry.stamp { continue }
                dictionary.entries[key] = entry
            }
            return .dictionary(dictionary)
        default:
            return moved
        }
    }

    /// Applies `transform` to the fields of every object of `typeName`, or, for an embedded type, of every embedded
    /// object of that type at any depth.
    func rewriteFields(
        of typeName: String, in state: inout WorkingSet, _ transform: (inout FieldTable) -> Void
    ) throws {
        guard let type = state.schema[type: typeName] else { return }
        let topLevel = type.isEmbedded ? state.schema.types.filter { !$0.isEmbedded }.map(\.name) : [typeName]
        for name in topLevel {
            for key in try state.keys(ofType: name) {
                guard var record = try state.record(key) else { continue }
                let before = record
                if type.isEmbedded {
                    Self.rewriteEmbedded(&record.fields, type: typeName, transform)
                } else {
                    transform(&record.fields)
                }
                if record != before { try state.setRecord(record, for: key) }
            }
        }
    }

    static func rewriteEmbedded(
        _ fields: inout FieldTable, type: String, _ transform: (inout FieldTable) -> Void
    ) {
        for (name, field) in fields {
            var field = field
            var changed = false
            field.updateEmbedded { stored in
                guard case .embedded(var child) = stored else { return }
                rewriteEmbedded(&child.fields, type: type, transform)
                if child.type == type { transform(&child.fields) }
                stored = .embedded(child)
                changed = true
            }
            if changed { fields[name] = field }
        }
    }
}

extension SchemaMerger {
    /// A value that lands on a property, and whether it was written under that name (`direct`) or under a name since
    /// renamed to it. Two values that land on one property are joined as the rename joins them when it merges after
    /// the write: the moved one first, the direct one second.
    struct Landing<Field> {
        var field: Field
        var direct: Bool

        init(_ field: Field, direct: Bool, onto present: Landing?, join: (_ moved: Field, _ added: Field) -> Field) {
            guard let present else {
                self.field = field
                self.direct = direct
                return
            }
            self.field = present.direct ? join(field, present.field) : join(present.field, field)
            self.direct = direct || present.direct
        }
    }
}

extension SchemaMerger {
    /// ``join(_:_:)`` for values as written, which a replica checks against its schema: the same choice for single
    /// values; for lists and embedded objects (which the state join merges) the moved one, which holds the same kind.
    static func join(_ moved: Value, _ added: Value) -> Value {
        switch (moved, added) {
        case (.embedded, _), (.list, _), (_, .embedded), (_, .list):
            return moved
        default:
            let order = InstructionApplier.defaultOrder
            return order(.scalar(moved)).lexicographicallyPrecedes(order(.scalar(added))) ? added : moved
        }
    }
}
