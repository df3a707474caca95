/// The stable identity of a list element, a list position, or an embedded object instance.
///
/// Ids are never stored in instructions: each replica derives them from the changeset that made the element
/// (its origin and origin sequence) and the instruction's place in it, so every replica derives the same ids.
public struct ElementID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var origin: ReplicaID
    public var sequence: UInt64
    /// The instruction's index in its changeset, shifted left by 24 bits, plus a counter over the embedded
    /// objects and elements one instruction creates, in preorder.
    public var index: UInt64

    public init(origin: ReplicaID, sequence: UInt64, index: UInt64) {
        self.origin = origin
        self.sequence = sequence
        self.index = index
    }

    /// The first id that instruction `instruction` of changeset `dot` creates; later ones count up from it.
    public init(dot: Dot, instruction: Int, counter: UInt64 = 0) {
        self.init(origin: dot.origin, sequence: dot.sequence, index: UInt64(instruction) << 24 | counter)
    }

    /// The largest number of ids one instruction may create.
    public static let maximumPerInstruction: UInt64 = 1 << 24

    public static func < (lhs: ElementID, rhs: ElementID) -> Bool {
        (lhs.origin, lhs.sequence, lhs.index) < (rhs.origin, rhs.sequence, rhs.index)
    }

    public var description: String { "\(origin):\(sequence).\(index)" }
}

/// Where a new list position goes, as the Fugue list algorithm places it: as a left or right child of an
/// existing position (or of the list's root). Positions that are children of one parent on one side are
/// ordered by stamp, earlier first; this keeps one replica's run of inserts together (docs/MergeSemantics.md, rule 5).
public struct ListAnchor: Hashable, Sendable, CustomStringConvertible {
    public enum Side: UInt8, Hashable, Sendable {
        case left = 0
        case right = 1
    }
    /// The parent position, or `nil` for the root.
    public var parent: ElementID?
    public var side: Side

    public init(parent: ElementID?, side: Side) {
        self.parent = parent
        self.side = side
    }

    /// The anchor for the first element of an empty list.
    public static let root = ListAnchor(parent: nil, side: .right)

    public var description: String {
        "\(side == .left ? "left of" : "right of") \(parent.map(\.description) ?? "root")"
    }
}

/// One step into an embedded object: the property holding it and the object's instance id (for a list of
/// embedded objects, the element's id).
public struct EmbeddedStep: Hashable, Sendable {
    public var property: String
    public var id: ElementID

    public init(property: String, id: ElementID) {
        self.property = property
        self.id = id
    }
}

/// The property an instruction acts on: an object, the embedded objects to go through, and a property name.
public struct FieldPath: Hashable, Sendable, CustomStringConvertible {
    public var type: String
    public var primaryKey: PrimaryKey
    public var steps: [EmbeddedStep]
    public var property: String

    public init(type: String, primaryKey: PrimaryKey, steps: [EmbeddedStep] = [], property: String) {
        self.type = type
        self.primaryKey = primaryKey
        self.steps = steps
        self.property = property
    }

    public var description: String {
        "\(type)[\(primaryKey)]" + steps.map { ".\($0.property)<\($0.id)>" }.joined() + ".\(property)"
    }
}

/// A property name and a value, as a create instruction carries them.
public struct FieldValue: Hashable, Sendable {
    public var name: String
    public var value: Value

    public init(_ name: String, _ value: Value) {
        self.name = name
        self.value = value
    }
}

/// One step of a changeset. Instructions say what the writer meant, in terms that still make sense on a
/// replica that has integrated other changes meanwhile: objects by primary key, list elements by stable id.
public enum Instruction: Hashable, Sendable {
    // Schema
    /// Adds an object type with its properties. Adding an identical type again changes nothing.
    case addType(ObjectSchema)
    /// Adds a property to a type. Adding an identical property again changes nothing.
    case addProperty(type: String, Property)
    /// Removes a property and its values.
    case removeProperty(type: String, name: String)
    /// Renames a property, keeping its values.
    case renameProperty(type: String, from: String, to: String)
    /// Replaces a property's definition where only its index or default changes; the values stay.
    case redefineProperty(type: String, Property)
    /// Removes a type and all its objects.
    case removeType(String)
    /// Sets the schema version.
    case setSchemaVersion(UInt64)
    /// Marks that a migration took the data to a schema version: written by a migration only, never by a new
    /// replica's declaration. A device of an earlier release that updates later runs the migration steps above the
    /// highest mark it holds (``Schema/migratedVersion``), and no step at or below it again.
    case migrated(toVersion: UInt64)

    // Objects
    /// Creates an object, or updates it when it exists (upsert by primary key). `fields` were given by the
    /// writer; `defaults` were filled from the schema's defaults and lose to any explicit write (rule 3).
    case create(type: String, primaryKey: PrimaryKey, fields: [FieldValue], defaults: [FieldValue])
    /// Erases an object, and its embedded objects with it. An erase beats concurrent writes (rule 2).
    case erase(type: String, primaryKey: PrimaryKey)
    /// Sets a property; for an embedded property, `.embedded` makes a new instance and `.null` removes it.
    case set(FieldPath, Value)
    /// Adds `delta` to an integer property. `base` is the stamp of the value the writer added to
    /// (``Stamp/zero`` for a default): the increment counts while that value stands (rule 4).
    case addInteger(FieldPath, delta: Int64, base: Stamp)
    /// Inserts a new element into a list at `anchor`.
    case listInsert(FieldPath, anchor: ListAnchor, value: Value)
    /// Replaces the value of a list element.
    case listSet(FieldPath, element: ElementID, value: Value)
    /// Removes a list element.
    case listErase(FieldPath, element: ElementID)
    /// Moves a list element to a new position at `anchor`.
    case listMove(FieldPath, element: ElementID, anchor: ListAnchor)
    /// Removes every element the writer had seen (those its causal context covers).
    case listClear(FieldPath)
    /// Sets one key of a dictionary: the key takes the value if the write is later than the key's last (rule 1).
    case dictionarySet(FieldPath, key: String, value: Value)
    /// Erases one key of a dictionary: a write too, which a later set of the key undoes (rule 1).
    case dictionaryErase(FieldPath, key: String)

    /// An instruction left out of a partial replica's projection of a changeset. It does nothing, and keeps the
    /// index of every later instruction, from which the ids of the elements they create derive.
    case omitted

    /// The object the instruction touches, if it touches one.
    public var object: (type: String, primaryKey: PrimaryKey)? {
        switch self {
        case .create(let type, let key, _, _), .erase(let type, let key): return (type, key)
        case .set(let path, _), .addInteger(let path, _, _), .listInsert(let path, _, _), .listSet(let path, _, _),
            .listErase(let path, _), .listMove(let path, _, _), .listClear(let path), .dictionarySet(let path, _, _),
            .dictionaryErase(let path, _):
            return (path.type, path.primaryKey)
        case .addType, .addProperty, .removeProperty, .renameProperty, .redefineProperty, .removeType,
            .setSchemaVersion, .migrated,
            .omitted:
            return nil
        }
    }

    /// Whether the instruction changes the schema.
    public var isSchemaInstruction: Bool {
        switch self {
        case .addType, .addProperty, .removeProperty, .renameProperty, .redefineProperty, .removeType,
            .setSchemaVersion, .migrated:
            true
        default: false
        }
    }
}

/// One write transaction's worth of instructions, with everything another replica needs to merge it.
///
/// A changeset has two identities. Its **origin dot** (origin, origin sequence) never changes: it makes integration
/// idempotent and element ids stable. Its **causal dot** orders it among changesets: the origin dot, or, once a relay
/// replica adopted it into its own sequence, the relay's dot. Version vectors and causal contexts count causal dots,
/// so app replicas that sync through relays add nothing to them (docs/MergeSemantics.md, "Relays").
public struct Changeset: Hashable, Sendable {
    /// The replica that wrote it. Integration on other replicas keeps it.
    public var origin: ReplicaID
    /// The origin's sequence number for it: 1, 2, 3... with no gaps.
    public var originSequence: UInt64
    /// The origin's hybrid logical clock reading when it was written.
    public var time: HybridTime
    /// What the origin had integrated when it wrote this changeset, by causal dots: its causal context.
    public var context: VersionVector
    /// Causal dots the context covers besides `context`: the causal dot of the origin's previous changeset, when a
    /// relay adopted this one and neither `context` nor the relay's own sequence orders that one first (changesets
    /// adopted by earlier builds may list every earlier changeset of the origin). Sorted; empty unless a relay
    /// adopted the changeset.
    public var contextExtras: [Dot]
    /// The relay's dot, when a relay adopted the changeset into its sequence; `nil` otherwise.
    public var relay: Dot?
    /// The user who wrote it (for permission checks), or empty.
    public var author: String
    /// The schema version it was written against.
    public var schemaVersion: UInt64
    /// The instructions, applied in order.
    public var instructions: [Instruction]
    /// The shape each property it writes had in its writer's schema: under which definition each value was written,
    /// when replicas defined a property differently (rule 8). Empty in changesets written before they carried it.
    public var shapeNotes: ShapeNotes

    public init(
        origin: ReplicaID, originSequence: UInt64, time: HybridTime, context: VersionVector, author: String = "",
        schemaVersion: UInt64, instructions: [Instruction], relay: Dot? = nil, contextExtras: [Dot] = [],
        shapeNotes: ShapeNotes = ShapeNotes()
    ) {
        self.shapeNotes = shapeNotes
        self.origin = origin
        self.originSequence = originSequence
        self.time = time
        self.context = context
        self.author = author
        self.schemaVersion = schemaVersion
        self.instructions = instructions
        self.relay = relay
        self.contextExtras = contextExtras
    }

    /// The stamp every instruction of the changeset carries.
    public var stamp: Stamp { Stamp(time: time, replica: origin) }
    /// The changeset's origin identity.
    public var dot: Dot { Dot(origin: origin, sequence: originSequence) }
    /// The changeset's causal identity: the relay's dot once adopted, else the origin dot.
    public var causalDot: Dot { relay ?? dot }

    /// Everything but the instructions, and how many there are.
    public var header: ChangesetCodec.Header {
        ChangesetCodec.Header(
            origin: origin, originSequence: originSequence, time: time, schemaVersion: schemaVersion, author: author,
            context: context, instructionCount: instructions.count, relay: relay, contextExtras: contextExtras,
            shapeNotes: shapeNotes)
    }

    /// Whether the causal context covers the causal dot `dot`.
    public func contextIncludes(_ dot: Dot) -> Bool {
        context.includes(dot) || contextExtras.contains(dot)
    }
}
