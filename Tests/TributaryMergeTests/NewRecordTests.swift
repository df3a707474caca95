import Testing
import TributaryModel
import TributaryTestSupport

@testable import TributaryMerge

/// A create of an object that has no fields yet builds them in one ordered pass when the schema never removed a
/// property, and through the general merge otherwise (names given twice, out of order, or given and defaulted, which
/// only instructions from elsewhere hold). Either way the record must be what the rules say: each value given lands
/// with the create's stamp (of a name given twice, the later), each default fills a property not given with the zero
/// stamp (rule 3), and the primary key and unknown names are not fields. Lists and embedded objects get ids drawn
/// from the changeset's dot, the instruction's index and a counter, in preorder over every value the create holds; a
/// name is the property it equals as a `String`, whatever code points spell it; and defaults count the same in any
/// order. Each create is also applied to an object that already has a field, which the general path builds on: the
/// two must give the same bytes.
@Suite struct NewRecordTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Item",
                properties: [
                    .scalar("_id", .int), .scalar("a", .string), .scalar("b", .int, default: .int(7)),
                    .scalar("c", .double, optional: true), .scalar("d", .bool, default: .bool(false)),
                    .scalar("e", .string, optional: true), .scalar("note", .string, optional: true),
                    Property("tags", .scalar(.string), list: true, default: Self.defaultTags),
                    Property("spot", .embedded("Spot"), default: Self.homeSpot),
                    Property("stops", .embedded("Spot"), list: true),
                ]),
            .embedded(
                "Spot",
                properties: [
                    .scalar("label", .string), .scalar("rank", .int, optional: true),
                    Property("marks", .scalar(.int), list: true), Property("notes", .scalar(.string), list: true),
                    Property("next", .embedded("Spot")),
                ]),
        ])

    /// The default of `Item.tags`: a list, which a schema may no longer declare and a create leaves out (an earlier
    /// build's create may hold it).
    static let defaultTags = Value.list([.string("t1"), .string("t2")])

    /// The default of `Item.spot`: an embedded object holding a list, left out like `defaultTags`.
    static let homeSpot = Value.embedded(
        EmbeddedObject(
            type: "Spot",
            fields: [
                "label": .string("home"), "rank": .null, "marks": .list([.int(1)]), "notes": .list([]), "next": .null,
            ]))

    static func info(_ sequence: UInt64) -> ChangesetInfo {
        let replica = ReplicaID(rawValue: 5)
        return ChangesetInfo(
            dot: Dot(origin: replica, sequence: sequence),
            stamp: Stamp(time: HybridTime(milliseconds: 1_700_000_000_000 + sequence, counter: 0), replica: replica),
            context: VersionVector())
    }

    static func randomValue(of name: String, _ generator: inout SplitMix64) -> Value {
        let number = generator.next() % 1000
        switch name {
        case "a", "e": return .string("s\(number)")
        case "b", "_id": return .int(Int64(number))
        case "c": return .double(Double(number) / 4)
        case "d": return .bool(number % 2 == 0)
        case "tags":
            var tags: [Value] = []
            for _ in 0..<number % 4 { tags.append(.string("s\(generator.next() % 1000)")) }
            return .list(tags)
        case "spot": return number % 5 == 0 ? .null : randomSpot(depth: 0, &generator)
        case "stops":
            var stops: [Value] = []
            for _ in 0..<number % 4 { stops.append(randomSpot(depth: 0, &generator)) }
            return .list(stops)
        default:
            // A name the type lacks: whatever it holds is dropped, but a list or embedded object still draws its ids.
            switch number % 3 {
            case 0: return .string("s\(number)")
            case 1: return .list([.string("s\(number)"), .string("s\(number + 1)")])
            default: return randomSpot(depth: 0, &generator)
            }
        }
    }

    /// A `Spot` with every property given (so that it reads back as given), nested at most two deep. Its fields are a
    /// dictionary, as app code gives them, which iterates in an order of its own that changes with its capacity: made
    /// with various capacities, they show whether ids follow the order of the names, as they must.
    static func randomSpot(depth: Int, _ generator: inout SplitMix64) -> Value {
        let number = generator.next() % 1000
        var fields = [String: Value](minimumCapacity: 4 << (generator.next() % 5))
        fields["label"] = .string("l\(number)")
        fields["rank"] = number % 2 == 0 ? .null : .int(Int64(number))
        var marks: [Value] = []
        for _ in 0..<generator.next() % 3 { marks.append(.int(Int64(generator.next() % 100))) }
        fields["marks"] = .list(marks)
        var notes: [Value] = []
        for _ in 0..<generator.next() % 3 { notes.append(.string("n\(generator.next() % 100)")) }
        fields["notes"] = .list(notes)
        fields["next"] = depth < 2 && generator.next() % 3 == 0 ? randomSpot(depth: depth + 1, &generator) : .null
        return .embedded(EmbeddedObject(type: "Spot", fields: fields))
    }

    /// Whether writing `value` draws ids: an embedded object does, and so does a list with elements.
    static func drawsIDs(_ value: Value) -> Bool {
        switch value {
        case .embedded: true
        case .list(let elements): !elements.isEmpty
        default: false
        }
    }

    // MARK: The rules

    /// Ids as the rules draw them for instruction 0 of the changeset with origin dot `dot`: counting up from zero.
    struct IDs {
        let dot: Dot
        var counter: UInt64 = 0

        mutating func next() -> ElementID {
            defer { counter += 1 }
            return ElementID(dot: dot, instruction: 0, counter: counter)
        }
    }

    /// The state `value` is written as with `stamp`, ids drawn in preorder: a register; or for a list one slot per
    /// element, each the right child of the one before (the first of the root), its element drawing its id before
    /// what it holds.
    static func expectedState(of value: Value, stamp: Stamp, ids: inout IDs) -> FieldState {
        guard case .list(let values) = value else {
            return .register(Register(value: expectedStored(value, stamp: stamp, ids: &ids), stamp: stamp))
        }
        var list = ListState()
        var previous: ElementID? = nil
        for value in values {
            let id = ids.next()
            list.slots[id] = Slot(id: id, parent: previous, side: .right, stamp: stamp)
            list.elements[id] = ListElement(
                id: id, value: expectedStored(value, stamp: stamp, ids: &ids), valueStamp: stamp, position: id,
                positionStamp: stamp)
            previous = id
        }
        return .list(list)
    }

    /// A scalar as it is; an embedded object with its id, drawn before its fields, which follow in name order.
    static func expectedStored(_ value: Value, stamp: Stamp, ids: inout IDs) -> StoredValue {
        guard case .embedded(let object) = value else { return .scalar(value) }
        let id = ids.next()
        var fields = FieldTable()
        for name in object.fields.keys.sorted() {
            fields[name] = expectedState(of: object.fields[name] ?? .null, stamp: stamp, ids: &ids)
        }
        return .embedded(EmbeddedState(id: id, type: object.type, fields: fields))
    }

    /// What a create of a new object must leave, by the rules.
    struct Expectation {
        var record: ObjectRecord
        /// The values the object reads as.
        var values: [String: Value]
    }

    /// The record a create makes of an object that has none. Every value given, then every default that is a single
    /// value, draws its ids in the order the create holds them, kept or not; list and embedded defaults are left out. A value given lands with the create's stamp: of a name given
    /// twice, the later (a list given again clears the one before, as a set of a list does). A default fills a
    /// property not given, with the zero stamp on its register (rule 3); of two defaults of one property, the greater
    /// by encoding is kept, as when two writers' defaults differ. The primary key and names the type lacks are not
    /// fields. A name is the property it equals as a `String`, and its field keeps the spelling it was first given in.
    static func expected(
        _ explicit: [FieldValue], defaults: [FieldValue], info: ChangesetInfo, type: ObjectSchema, schema: Schema
    ) -> Expectation {
        func isField(_ name: String) -> Bool { name != type.primaryKey && type[property: name] != nil }
        var ids = IDs(dot: info.dot)
        var fields = FieldTable()
        var given: [String: Value] = [:]
        for field in explicit {
            let state = expectedState(of: field.value, stamp: info.stamp, ids: &ids)
            guard isField(field.name) else { continue }
            if case .list(let added) = state, case .list(var list)? = fields[field.name] {
                // A list given again clears what its writer saw (all of the list given before, its own), whose
                // positions stay, then inserts.
                list.elements.removeAll()
                list.slots.merge(added.slots) { old, _ in old }
                list.elements.merge(added.elements) { old, _ in old }
                fields[field.name] = .list(list)
            } else {
                fields[field.name] = state
            }
            given[field.name] = field.value
        }
        // A default that is a list or an embedded object (an earlier build's create holds them) is left out before
        // anything draws ids (rule 3: a default is a single value).
        for field in defaults where field.value.isSingleValue {
            var state = expectedState(of: field.value, stamp: info.stamp, ids: &ids)
            if case .register(var register) = state {
                register.stamp = .zero
                state = .register(register)
            }
            guard isField(field.name) else { continue }
            switch fields[field.name] {
            case nil:
                break
            case .register(let current)? where current.stamp == .zero:
                guard case .register(let new) = state,
                    InstructionApplier.defaultOrder(current.value).lexicographicallyPrecedes(
                        InstructionApplier.defaultOrder(new.value))
                else { continue }
            default:
                continue  // a value given beats a default
            }
            fields[field.name] = state
            given[field.name] = field.value
        }
        var values: [String: Value] = [:]
        for property in type.properties where property.name != type.primaryKey {
            values[property.name] = given[property.name] ?? ObjectRecord.value(nil, of: property, in: schema)
        }
        return Expectation(record: ObjectRecord(exists: true, fields: fields), values: values)
    }

    /// A field of `note` that another replica wrote.
    static let unrelated = FieldState.register(
        Register(
            value: .scalar(.string("elsewhere")),
            stamp: Stamp(
                time: HybridTime(milliseconds: 1_600_000_000_000, counter: 0), replica: ReplicaID(rawValue: 9))))

    /// The record the general merge path builds for `create`: the same create applied to an object that already has
    /// a field (`note`, which the create does not name, as a create elsewhere may have left it), that field then
    /// taken out again.
    static func generalPathRecord(
        _ create: Instruction, of info: ChangesetInfo, key: RecordKey, schema: Schema
    ) throws -> ObjectRecord {
        var working = WorkingSet(source: EmptyRecordSource(), schema: schema)
        try working.setRecord(ObjectRecord(exists: true, fields: ["note": unrelated]), for: key)
        try MergeEngine.apply(create, index: 0, of: info, to: &working)
        var record = try #require(try working.record(key))
        #expect(record.fields["note"] == unrelated)
        record.fields["note"] = nil
        return record
    }

    /// Checks the create with the plain values of `explicit` and `defaults` alone (no lists, no embedded objects): the
    /// common create, whose record is encoded straight from its values without being built. Its bytes must be the
    /// ones the rules give and the general path builds. Returns whether it was encoded so.
    static func checkPlainCreate(
        _ explicit: [FieldValue], defaults: [FieldValue], sequence: UInt64, type: ObjectSchema, schema: Schema
    ) throws -> Bool {
        func isPlain(_ field: FieldValue) -> Bool {
            switch field.value {
            case .list, .embedded: false
            default: true
            }
        }
        let explicit = explicit.filter(isPlain)
        let defaults = defaults.filter(isPlain)
        let key = PrimaryKey.int(Int64(sequence))
        let recordKey = RecordKey(type: type.name, primaryKey: key)
        let info = Self.info(sequence)
        let create = Instruction.create(type: type.name, primaryKey: key, fields: explicit, defaults: defaults)
        var working = WorkingSet(source: EmptyRecordSource(), schema: schema)
        try MergeEngine.apply(create, index: 0, of: info, to: &working)
        let change = try #require(working.takeChanges().first)
        let expected = Self.expected(explicit, defaults: defaults, info: info, type: type, schema: schema)
        #expect(
            change.encodedAfter() == expected.record.encoded(), "plain create \(sequence): \(explicit) + \(defaults)")
        #expect(change.after.map(Self.spelledNames) == Self.spelledNames(expected.record), "plain create \(sequence)")
        let general = try Self.generalPathRecord(create, of: info, key: recordKey, schema: schema)
        #expect(change.encodedAfter() == general.encoded(), "plain create \(sequence): \(explicit) + \(defaults)")
        return change.holdsEncoding
    }

    /// The field names of a record as bytes: `String` equality cannot tell spellings apart; the bytes can.
    static func spelledNames(_ record: ObjectRecord) -> [[UInt8]] {
        record.fields.names.map { Array($0.utf8) }
    }

    /// Whether the names are in `String` order, as the one-pass build takes them.
    static func inNameOrder(_ fields: [FieldValue]) -> Bool {
        zip(fields, fields.dropFirst()).allSatisfy { $0.name < $1.name }
    }

    // MARK: Tests

    @Test func createsOfNewObjectsFollowTheRules() throws {
        var generator = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 0x2EC0))
        let names = ["a", "b", "c", "d", "e", "tags", "spot", "stops", "_id", "ghost"]
        let item = try #require(Self.schema[type: "Item"])
        var outOfOrder = 0
        var defaultsOutOfOrder = 0
        var withIDs = 0
        var encoded = 0
        for sequence in UInt64(1)...2_000 {
            // Values given: a random selection, in name order most of the time, else shuffled, with repeats.
            var explicit: [FieldValue] = []
            for name in names where generator.next() % 2 == 0 {
                explicit.append(FieldValue(name, Self.randomValue(of: name, &generator)))
            }
            if generator.next() % 4 == 0 {
                if let repeated = explicit.randomElement(using: &generator) {
                    explicit.append(FieldValue(repeated.name, Self.randomValue(of: repeated.name, &generator)))
                }
                explicit.shuffle(using: &generator)
                outOfOrder += 1
            }
            if explicit.contains(where: { Self.drawsIDs($0.value) }) { withIDs += 1 }
            // Defaults: of the properties not given, as a local writer sends them, or sometimes of given ones too.
            let given = Set(explicit.map(\.name))
            var defaults = [
                FieldValue("b", .int(7)), FieldValue("d", .bool(false)), FieldValue("ghost", .string("g")),
                FieldValue("spot", Self.homeSpot), FieldValue("tags", Self.defaultTags),
            ].filter { !given.contains($0.name) || generator.next() % 8 == 0 }
            // Rarely a second default of one property, as only a hand-made instruction holds.
            if generator.next() % 16 == 0 { defaults.append(FieldValue("b", .int(Int64(generator.next() % 1000)))) }
            // Sometimes out of name order, as an instruction from another replica may hold them.
            if generator.next() % 4 == 0 {
                defaults.shuffle(using: &generator)
                if !Self.inNameOrder(defaults) { defaultsOutOfOrder += 1 }
            }
            let key = PrimaryKey.int(Int64(sequence))
            let recordKey = RecordKey(type: "Item", primaryKey: key)
            let info = Self.info(sequence)
            let create = Instruction.create(type: "Item", primaryKey: key, fields: explicit, defaults: defaults)
            var working = WorkingSet(source: EmptyRecordSource(), schema: Self.schema)
            try MergeEngine.apply(create, index: 0, of: info, to: &working)

            let expected = Self.expected(explicit, defaults: defaults, info: info, type: item, schema: Self.schema)
            let record = try #require(try working.record(recordKey))
            #expect(record == expected.record, "create \(sequence): \(explicit) + \(defaults)")
            #expect(record.encoded() == expected.record.encoded())
            #expect(record.values(of: item, in: Self.schema) == expected.values, "create \(sequence)")
            let general = try Self.generalPathRecord(create, of: info, key: recordKey, schema: Self.schema)
            #expect(general.encoded() == record.encoded(), "create \(sequence): \(explicit) + \(defaults)")
            if try Self.checkPlainCreate(
                explicit, defaults: defaults, sequence: sequence, type: item, schema: Self.schema)
            {
                encoded += 1
            }
        }
        // Most plain creates are encoded straight away; those whose names come out of order take the general path.
        #expect(encoded > 1_000)
        #expect(outOfOrder > 300)
        #expect(defaultsOutOfOrder > 250)
        #expect(withIDs > 1_000)
    }

    /// Types whose property names have other spellings equal to them as `String`s (canonically equivalent): the primary
    /// key "clé", its é one code point where the property is declared and two (e and a combining acute accent) where
    /// `WideSpelling` names it as its key; "café", declared with two; "Kind", also spelled with the Kelvin sign; and
    /// "été", declared with one, whose spelling with two sorts before "f" by its code points but after it as a
    /// `String`. `WideSpelling` has more than twelve properties, so the schema finds its properties by hashing their
    /// names, where it compares them for `Spelling`.
    static let spellingSchema: Schema = {
        let properties: [Property] = [
            .scalar("cl\u{E9}", .int), .scalar("cafe\u{301}", .int, default: .int(1)),
            .scalar("Kind", .string, optional: true), .scalar("f", .string, optional: true),
            .scalar("\u{E9}t\u{E9}", .int, default: .int(2)), Property("marks", .scalar(.int), list: true),
            .scalar("note", .string, optional: true),
        ]
        let padding = (0..<10).map { Property.scalar("p\($0)", .int, optional: true) }
        return Schema(
            version: 1,
            types: [
                ObjectSchema(name: "Spelling", primaryKey: "cl\u{E9}", properties: properties),
                ObjectSchema(
                    name: "WideSpelling", primaryKey: "cle\u{301}", properties: padding + properties.reversed()),
            ])
    }()

    /// The ways a create may spell each name, the first as `Spelling` declares it.
    static let spellings: [[String]] = [
        ["cl\u{E9}", "cle\u{301}"], ["cafe\u{301}", "caf\u{E9}"], ["Kind", "\u{212A}ind"], ["f"],
        ["\u{E9}t\u{E9}", "e\u{301}te\u{301}", "\u{E9}te\u{301}"], ["marks"], ["ghost"],
    ]

    /// One of the ways to spell `name`, at random.
    static func randomSpelling(of name: String, _ generator: inout SplitMix64) -> String {
        (spellings.first { $0.contains(name) } ?? [name]).randomElement(using: &generator) ?? name
    }

    static func randomSpelledValue(of name: String, _ generator: inout SplitMix64) -> Value {
        let number = generator.next() % 1000
        switch name {
        case "Kind", "f", "ghost": return .string("s\(number)")
        case "marks":
            var marks: [Value] = []
            for _ in 0..<number % 3 { marks.append(.int(Int64(generator.next() % 100))) }
            return .list(marks)
        default: return .int(Int64(number))
        }
    }

    @Test func namesSpelledOtherwiseAreTheSameProperty() throws {
        var generator = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 0x5BE11))
        var otherSpellings = 0
        var bytesOrderOtherwise = 0
        var twice = 0
        var defaultsOutOfOrder = 0
        var encoded = 0
        for sequence in UInt64(1)...2_000 {
            let typeName = sequence % 2 == 0 ? "Spelling" : "WideSpelling"
            let type = try #require(Self.spellingSchema[type: typeName])
            // Values given: a random selection, each name in a random spelling, in name order most of the time, else
            // shuffled with a name given twice (maybe spelled otherwise the second time).
            var explicit: [FieldValue] = []
            for ways in Self.spellings where generator.next() % 2 == 0 {
                let name = Self.randomSpelling(of: ways[0], &generator)
                explicit.append(FieldValue(name, Self.randomSpelledValue(of: name, &generator)))
            }
            explicit.sort { $0.name < $1.name }
            if generator.next() % 4 == 0, let repeated = explicit.randomElement(using: &generator) {
                let name = Self.randomSpelling(of: repeated.name, &generator)
                explicit.append(FieldValue(name, Self.randomSpelledValue(of: name, &generator)))
                explicit.shuffle(using: &generator)
                twice += 1
            }
            // Defaults: of the properties not given (which a `Set` of `String`s finds whatever the spelling), or
            // sometimes of given ones too, each in a random spelling; in name order, or sometimes not.
            let given = Set(explicit.map(\.name))
            var defaults = [
                FieldValue(Self.randomSpelling(of: "cafe\u{301}", &generator), .int(1)),
                FieldValue(Self.randomSpelling(of: "\u{E9}t\u{E9}", &generator), .int(2)),
                FieldValue("marks", .list([.int(0)])), FieldValue("ghost", .string("g")),
            ].filter { !given.contains($0.name) || generator.next() % 8 == 0 }
            defaults.sort { $0.name < $1.name }
            if generator.next() % 4 == 0 {
                defaults.shuffle(using: &generator)
                if !Self.inNameOrder(defaults) { defaultsOutOfOrder += 1 }
            }
            let spelled = explicit + defaults
            let declared = type.properties.map(\.name)
            if spelled.contains(where: { field in
                declared.contains { $0 == field.name && !$0.utf8.elementsEqual(field.name.utf8) }
            }) {
                otherSpellings += 1
            }
            let names = spelled.map(\.name)
            if names.sorted() != names.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
                bytesOrderOtherwise += 1
            }

            let key = PrimaryKey.int(Int64(sequence))
            let recordKey = RecordKey(type: typeName, primaryKey: key)
            let info = Self.info(sequence)
            let create = Instruction.create(type: typeName, primaryKey: key, fields: explicit, defaults: defaults)
            var working = WorkingSet(source: EmptyRecordSource(), schema: Self.spellingSchema)
            try MergeEngine.apply(create, index: 0, of: info, to: &working)

            let expected = Self.expected(
                explicit, defaults: defaults, info: info, type: type, schema: Self.spellingSchema)
            let record = try #require(try working.record(recordKey))
            #expect(record == expected.record, "create \(sequence): \(explicit) + \(defaults)")
            #expect(Self.spelledNames(record) == Self.spelledNames(expected.record), "create \(sequence)")
            #expect(record.encoded() == expected.record.encoded())
            #expect(record.fields.names == record.fields.names.sorted(), "create \(sequence): not in String order")
            // Read under the schema's spellings, the values are there.
            #expect(record.values(of: type, in: Self.spellingSchema) == expected.values, "create \(sequence)")
            let general = try Self.generalPathRecord(create, of: info, key: recordKey, schema: Self.spellingSchema)
            #expect(Self.spelledNames(general) == Self.spelledNames(record), "create \(sequence)")
            #expect(general.encoded() == record.encoded(), "create \(sequence): \(explicit) + \(defaults)")
            if try Self.checkPlainCreate(
                explicit, defaults: defaults, sequence: sequence, type: type, schema: Self.spellingSchema)
            {
                encoded += 1
            }
        }
        #expect(encoded > 1_000)
        #expect(otherSpellings > 1_000)
        #expect(bytesOrderOtherwise > 300)
        #expect(twice > 300)
        #expect(defaultsOutOfOrder > 180)
    }

    @Test func aBadCreateNamesTheValueGivenFirst() throws {
        var working = WorkingSet(source: EmptyRecordSource(), schema: Self.schema)
        let create = Instruction.create(
            type: "Item", primaryKey: .int(1), fields: [FieldValue("a", .int(3))],
            defaults: [FieldValue("b", .string("x"))])
        #expect {
            try MergeEngine.apply(create, index: 0, of: Self.info(1), to: &working)
        } throws: { error in
            let error = error as? MergeError
            return error?.code == .invalidInstruction && error?.message.contains("Item.a") == true
        }
    }
}
