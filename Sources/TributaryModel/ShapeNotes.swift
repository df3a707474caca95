/// The shape that each property a changeset writes had in its writer's schema, from the instruction on which it held
/// it (docs/MergeSemantics.md, rule 8).
///
/// Two replicas may define one property with different shapes (an `int` here, a `string` there). Every replica then
/// makes the later definition the property's, and keeps each value under the shape its writer wrote it under, so
/// that what shows does not depend on the order the replicas merged in. A receiver cannot tell that shape from what
/// it holds, so the writer says it: a changeset notes, for each property it writes, its writer's shape of it, and a
/// note holds until a later note of the same property (a migration in the same changeset that changes it).
public struct ShapeNotes: Hashable, Sendable {
    /// One property's shape from one instruction on.
    public struct Note: Hashable, Sendable {
        public var property: PropertyName
        /// The index of the first instruction the note holds for.
        public var from: Int
        public var shape: PropertyShape

        public init(_ property: PropertyName, from: Int, _ shape: PropertyShape) {
            self.property = property
            self.from = from
            self.shape = shape
        }
    }

    /// The notes, sorted by property, then by instruction.
    public private(set) var notes: [Note]

    public init(_ notes: [Note] = []) {
        self.notes = notes.sorted { ($0.property, $0.from) < ($1.property, $1.from) }
    }

    public var isEmpty: Bool { notes.isEmpty }

    /// The shape `property` of `type` had when the writer wrote instruction `instruction`, or `nil` when the
    /// changeset notes none (it was written before changesets carried notes).
    public func shape(of property: String, in type: String, at instruction: Int) -> PropertyShape? {
        guard !notes.isEmpty else { return nil }
        let name = PropertyName(type: type, property: property)
        var low = 0
        var high = notes.count
        while low < high {
            let middle = (low + high) / 2
            if notes[middle].property < name { low = middle + 1 } else { high = middle }
        }
        var found: PropertyShape?
        while low < notes.count, notes[low].property == name, notes[low].from <= instruction {
            found = notes[low].shape
            low += 1
        }
        return found
    }
}

/// Collects a transaction's notes as it writes: the properties each write touches (a create: every property of its
/// type), each noted the first time and again when a schema instruction changed its shape.
public struct ShapeNoteRecorder: Sendable {
    private var current: [PropertyName: PropertyShape] = [:]
    private var notes: [ShapeNotes.Note] = []
    /// Types noted whole since the last schema instruction.
    private var noted: Set<String> = []
    /// The type noted whole last: most transactions create objects of one type, and comparing names costs less than
    /// hashing them.
    private var last: String?

    public init() {}

    /// Notes what `instruction` writes, as `schema` defines it, for the instructions from `index` on.
    public mutating func note(_ instruction: Instruction, in schema: Schema, at index: Int) {
        switch instruction {
        case .create(let type, _, _, _):
            noteWhole(type, in: schema, from: index)
        case .set(let path, _), .addInteger(let path, _, _), .listInsert(let path, _, _), .listSet(let path, _, _),
            .listErase(let path, _), .listMove(let path, _, _), .listClear(let path), .dictionarySet(let path, _, _),
            .dictionaryErase(let path, _):
            guard var type = schema[type: path.type] else { return }
            for step in path.steps {
                guard let property = type[property: step.property] else { return }
                note(property, of: type.name, in: schema, from: index)
                guard case .embedded(let child) = property.kind, let childType = schema[type: child] else { return }
                type = childType
            }
            guard let property = type[property: path.property] else { return }
            note(property, of: type.name, in: schema, from: index)
        default:
            if instruction.isSchemaInstruction {
                noted.removeAll(keepingCapacity: true)
                last = nil
            }
        }
    }

    /// Notes `property` of `type` as its writer defines it, for the instructions from `index` on: a write made under a
    /// definition other than the schema's (an earlier release's, whose values are kept aside under its shape).
    public mutating func note(declared property: Property, of type: String, from index: Int) {
        let name = PropertyName(type: type, property: property.name)
        guard current[name] != property.shape else { return }
        current[name] = property.shape
        notes.append(ShapeNotes.Note(name, from: index, property.shape))
        // A later create of the type notes its properties again, this one as the schema defines it.
        noted.remove(type)
        if last == type { last = nil }
    }

    /// Notes one property; an embedded one with its type's properties, which a value written to it holds.
    private mutating func note(_ property: Property, of type: String, in schema: Schema, from index: Int) {
        let name = PropertyName(type: type, property: property.name)
        if current[name] != property.shape {
            current[name] = property.shape
            notes.append(ShapeNotes.Note(name, from: index, property.shape))
        }
        if case .embedded(let child) = property.kind { noteWhole(child, in: schema, from: index) }
    }

    /// Notes every property of `type`; costs one comparison once the type is noted.
    private mutating func noteWhole(_ type: String, in schema: Schema, from index: Int) {
        if type == last { return }
        last = type
        guard !noted.contains(type), let definition = schema[type: type] else { return }
        noted.insert(type)
        for property in definition.properties { note(property, of: type, in: schema, from: index) }
    }

    public var result: ShapeNotes { ShapeNotes(notes) }
}
