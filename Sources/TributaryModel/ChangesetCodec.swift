/// The binary form of a changeset: compact, versioned and checksummed.
///
/// ```
/// "TRCS" formatVersion:u8
/// origin:u64 originSequence:varint time:u64 schemaVersion:varint author:string
/// context: count (replica:u64 sequence:varint)*
/// flags:u8                                  bit 0: a relay adopted it; bit 1: shape notes follow the names
/// relay: (replica:u64 sequence:varint)?     the adopting relay's dot, when bit 0 is set
/// extras: count (replica:u64 sequence:varint)*  causal dots the context covers besides the vector
/// names: count string*                      type and property names, referred to by index below
/// notes: (count (type:name count (property:name from:varint shape)*)*)?  when bit 1 is set, sorted
/// shape: kind:u8 (scalar type 1-8, link 9, embedded 10; bit 4 optional, bit 5 list) target:name?  (`shape(_:_:)`)
/// instructions: count instruction*
/// checksum:u64                              XXH64 of every byte before it
/// ```
/// Integers are little-endian; varints are LEB128; signed integers are zigzag varints. Decoding checks the
/// checksum first, then every tag, count and length against the bytes left and ``DecodingLimits``.
public enum ChangesetCodec {
    /// The format version this code writes. It reads this version only.
    public static let formatVersion: UInt8 = 1
    static let magic: [UInt8] = Array("TRCS".utf8)

    /// Encodes a changeset.
    public static func encode(_ changeset: Changeset) -> [UInt8] {
        var instructions = InstructionEncoding(capacity: 64 + changeset.instructions.count * 48)
        for instruction in changeset.instructions { instructions.append(instruction) }
        return instructions.changeset(changeset.header)
    }

    /// A changeset's instructions in their encoding, appended one by one as they are made: what a transaction holds
    /// instead of the instructions themselves (a create's values take several times their encoding in memory, and
    /// a large import held them all until it committed). ``ChangesetCodec/encode(_:)`` writes every changeset
    /// through it, so both give the same bytes.
    public struct InstructionEncoding: Sendable {
        private var names = NameTable.indexed()
        private var body: BinaryWriter
        /// How many instructions were appended.
        public private(set) var count = 0
        /// Whether none was.
        public var isEmpty: Bool { count == 0 }

        /// An empty encoding, with room for `capacity` bytes.
        public init(capacity: Int = 256) { body = BinaryWriter(capacity: capacity) }

        /// Appends the encoding of `instruction`; returns how many bytes it took.
        @discardableResult
        public mutating func append(_ instruction: Instruction) -> Int {
            let before = body.bytes.count
            body.instruction(instruction, &names, index: count)
            count += 1
            return body.bytes.count - before
        }

        /// The encoded changeset of `header` (whose ``Header/instructionCount`` is not read) and these instructions.
        public func changeset(_ header: Header) -> [UInt8] {
            var names = self.names
            var notes = BinaryWriter()
            let shapeNotes = header.shapeNotes.notes
            if !shapeNotes.isEmpty {
                // Grouped by type (the notes are sorted by type first): the type's name once, then its notes.
                var groups: [ArraySlice<ShapeNotes.Note>] = []
                var start = shapeNotes.startIndex
                for index in shapeNotes.indices.dropFirst()
                where shapeNotes[index].property.type != shapeNotes[start].property.type {
                    groups.append(shapeNotes[start..<index])
                    start = index
                }
                groups.append(shapeNotes[start...])
                notes.varint(groups.count)
                for group in groups {
                    notes.name(group.first!.property.type, &names)
                    notes.varint(group.count)
                    for note in group {
                        notes.name(note.property.property, &names)
                        notes.varint(note.from)
                        notes.shape(note.shape, &names)
                    }
                }
            }

            var writer = BinaryWriter(capacity: body.bytes.count + notes.bytes.count + 128)
            writer.raw(magic)
            writer.byte(formatVersion)
            writer.fixed64(header.origin.rawValue)
            writer.varint(header.originSequence)
            writer.fixed64(header.time.rawValue)
            writer.varint(header.schemaVersion)
            writer.string(header.author)
            writer.varint(header.context.entries.count)
            for entry in header.context.entries {
                writer.fixed64(entry.replica.rawValue)
                writer.varint(entry.sequence)
            }
            // Flags, then the relay's dot and the extra context dots.
            writer.byte((header.relay == nil ? 0 : 1) | (shapeNotes.isEmpty ? 0 : 2))
            if let relay = header.relay { writer.dot(relay) }
            writer.varint(header.contextExtras.count)
            for dot in header.contextExtras { writer.dot(dot) }
            writer.varint(names.names.count)
            for name in names.names { writer.string(name) }
            writer.raw(notes.bytes)
            writer.varint(count)
            writer.raw(body.bytes)
            writer.fixed64(XXHash64.hash(writer.bytes))
            return writer.bytes
        }
    }

    /// The header of an encoded changeset: everything but its instructions.
    public struct Header: Hashable, Sendable {
        public var origin: ReplicaID
        public var originSequence: UInt64
        public var time: HybridTime
        public var schemaVersion: UInt64
        public var author: String
        public var context: VersionVector
        public var instructionCount: Int
        public var relay: Dot?
        public var contextExtras: [Dot]
        public var shapeNotes: ShapeNotes

        public init(
            origin: ReplicaID, originSequence: UInt64, time: HybridTime, schemaVersion: UInt64, author: String,
            context: VersionVector, instructionCount: Int, relay: Dot? = nil, contextExtras: [Dot] = [],
            shapeNotes: ShapeNotes = ShapeNotes()
        ) {
            self.origin = origin
            self.originSequence = originSequence
            self.time = time
            self.schemaVersion = schemaVersion
            self.author = author
            self.context = context
            self.instructionCount = instructionCount
            self.relay = relay
            self.contextExtras = contextExtras
            self.shapeNotes = shapeNotes
        }

        /// The changeset's origin identity.
        public var dot: Dot { Dot(origin: origin, sequence: originSequence) }
    }

    /// Decodes a changeset.
    ///
    /// - Throws: ``ChangesetDecodingError``: `.checksumMismatch` for damaged bytes, `.unsupportedFormatVersion`,
    ///   `.truncated`, `.invalidTag`, `.invalidValue`, `.limitExceeded` or `.trailingData`, with the offset.
    public static func decode(_ bytes: [UInt8], limits: DecodingLimits = .standard) throws(ChangesetDecodingError)
        -> Changeset
    {
        var reader = try verifiedReader(bytes, limits: limits)
        let (header, names) = try readHeader(&reader)
        var instructions: [Instruction] = []
        instructions.reserveCapacity(header.instructionCount)
        for index in 0..<header.instructionCount {
            instructions.append(try reader.instruction(names, index: index))
        }
        guard reader.isAtEnd else {
            throw reader.error(.trailingData, "\(reader.remaining) bytes follow the last instruction")
        }
        return Changeset(
            origin: header.origin, originSequence: header.originSequence, time: header.time, context: header.context,
            author: header.author, schemaVersion: header.schemaVersion, instructions: instructions, relay: header.relay,
            contextExtras: header.contextExtras, shapeNotes: header.shapeNotes)
    }

    /// Decodes only the header of a changeset (its checksum is still checked).
    public static func decodeHeader(_ bytes: [UInt8], limits: DecodingLimits = .standard)
        throws(ChangesetDecodingError) -> Header
    {
        var reader = try verifiedReader(bytes, limits: limits)
        return try readHeader(&reader).header
    }

    private static func verifiedReader(_ bytes: [UInt8], limits: DecodingLimits) throws(ChangesetDecodingError)
        -> BinaryReader
    {
        let minimum = magic.count + 1 + 8
        guard bytes.count >= minimum else {
            throw ChangesetDecodingError(
                .truncated, "changeset is truncated: \(bytes.count) bytes, at least \(minimum) needed", offset: 0)
        }
        guard Array(bytes[0..<4]) == magic else {
            throw ChangesetDecodingError(.badMagic, "bytes are not a Tributary changeset (no TRCS marker)", offset: 0)
        }
        guard bytes[4] == formatVersion else {
            throw ChangesetDecodingError(
                .unsupportedFormatVersion,
                "changeset format version \(bytes[4]) is not supported (this build reads version \(formatVersion))",
                offset: 4)
        }
        let bodyEnd = bytes.count - 8
        let stored = bytes.withUnsafeBytes { raw in
            UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: bodyEnd, as: UInt64.self))
        }
        let computed = bytes.withUnsafeBytes { XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[0..<bodyEnd])) }
        guard stored == computed else {
            throw ChangesetDecodingError(
                .checksumMismatch,
                "changeset checksum mismatch: stored \(hex(stored)), computed \(hex(computed)); the bytes are damaged",
                offset: bodyEnd)
        }
        var reader = BinaryReader(bytes, subject: "changeset", limits: limits)
        reader.offset = 5
        reader.end = bodyEnd
        return reader
    }

    private static func readHeader(_ reader: inout BinaryReader) throws(ChangesetDecodingError) -> (
        header: Header, names: NameTable
    ) {
        let origin = ReplicaID(rawValue: try reader.fixed64())
        let originSequence = try reader.varint()
        guard originSequence > 0 else { throw reader.error(.invalidValue, "origin sequence is 0") }
        let time = HybridTime(rawValue: try reader.fixed64())
        let schemaVersion = try reader.varint()
        let author = try reader.string("author")
        let entryCount = try reader.count("context entry", maximum: reader.limits.maximumElements, minimumBytesEach: 9)
        var context = VersionVector()
        var previous: ReplicaID?
        for _ in 0..<entryCount {
            let replica = ReplicaID(rawValue: try reader.fixed64())
            let sequence = try reader.varint()
            if let previous, previous >= replica {
                throw reader.error(.invalidValue, "causal context is not sorted by replica")
            }
            guard sequence > 0 else { throw reader.error(.invalidValue, "causal context entry has sequence 0") }
            previous = replica
            context.advance(replica, to: sequence)
        }
        let flags = try reader.byte()
        guard flags <= 3 else { throw reader.error(.invalidValue, "bad changeset flags \(flags)") }
        var relay: Dot?
        if flags & 1 != 0 {
            let dot = try reader.dot()
            guard dot.sequence > 0 else { throw reader.error(.invalidValue, "relay sequence is 0") }
            relay = dot
        }
        let extraCount = try reader.count("context extra", maximum: reader.limits.maximumElements, minimumBytesEach: 9)
        var extras: [Dot] = []
        extras.reserveCapacity(extraCount)
        for _ in 0..<extraCount {
            let dot = try reader.dot()
            if let last = extras.last, last >= dot {
                throw reader.error(.invalidValue, "context extras are not sorted")
            }
            extras.append(dot)
        }
        let nameCount = try reader.count("name", maximum: reader.limits.maximumElements)
        var names: [String] = []
        names.reserveCapacity(nameCount)
        for _ in 0..<nameCount { names.append(try reader.string("name")) }
        let table = NameTable(decoded: names)
        var notes: [ShapeNotes.Note] = []
        if flags & 2 != 0 {
            let types = try reader.count(
                "type with shape notes", maximum: reader.limits.maximumElements, minimumBytesEach: 5)
            guard types > 0 else {
                throw reader.error(.invalidValue, "the shape notes flag is set, but there are none")
            }
            for _ in 0..<types {
                let type = try reader.name(table, "noted type")
                let count = try reader.count("shape note", maximum: reader.limits.maximumElements, minimumBytesEach: 3)
                guard count > 0 else { throw reader.error(.invalidValue, "type '\(type)' has no shape notes") }
                for _ in 0..<count {
                    let property = PropertyName(type: type, property: try reader.name(table, "noted property"))
                    let from = try reader.varint()
                    guard from <= UInt64(reader.limits.maximumInstructions) else {
                        throw reader.error(.limitExceeded, "shape note of \(property) starts at instruction \(from)")
                    }
                    let note = ShapeNotes.Note(property, from: Int(from), try reader.shape(table))
                    if let last = notes.last, !((last.property, last.from) < (note.property, note.from)) {
                        throw reader.error(.invalidValue, "shape notes are not sorted, or repeat one (\(property))")
                    }
                    notes.append(note)
                }
            }
        }
        let instructionCount = try reader.count("instruction", maximum: reader.limits.maximumInstructions)
        let header = Header(
            origin: origin, originSequence: originSequence, time: time, schemaVersion: schemaVersion, author: author,
            context: context, instructionCount: instructionCount, relay: relay, contextExtras: extras,
            shapeNotes: ShapeNotes(notes))
        return (header, table)
    }
}

func hex(_ value: UInt64) -> String {
    let digits = String(value, radix: 16)
    return String(repeating: "0", count: 16 - digits.count) + digits
}

private enum InstructionTag: UInt8 {
    case addType = 1
    case addProperty, removeProperty, renameProperty, removeType, setSchemaVersion, redefineProperty, migrated
    case create = 16
    case erase, set, addInteger, listInsert, listSet, listErase, listMove, listClear
    case dictionarySet, dictionaryErase
    case omitted = 32
}

extension BinaryWriter {
    public mutating func elementID(_ id: ElementID) {
        fixed64(id.origin.rawValue)
        varint(id.sequence)
        varint(id.index)
    }

    mutating func anchor(_ anchor: ListAnchor) {
        byte(anchor.side.rawValue | (anchor.parent == nil ? 0 : 2))
        if let parent = anchor.parent { elementID(parent) }
    }

    mutating func path(_ path: FieldPath, _ names: inout NameTable) {
        name(path.type, &names)
        primaryKey(path.primaryKey)
        varint(path.steps.count)
        for step in path.steps {
            name(step.property, &names)
            elementID(step.id)
        }
        name(path.property, &names)
    }

    mutating func fields(_ fields: [FieldValue], _ names: inout NameTable) {
        varint(fields.count)
        for field in fields {
            name(field.name, &names)
            value(field.value, &names)
        }
    }

    mutating func instruction(_ instruction: Instruction, _ names: inout NameTable, index: Int) {
        switch instruction {
        case .addType(let type):
            byte(InstructionTag.addType.rawValue)
            objectSchema(type, &names)
        case .addProperty(let type, let property):
            byte(InstructionTag.addProperty.rawValue)
            name(type, &names)
            self.property(property, &names)
        case .removeProperty(let type, let property):
            byte(InstructionTag.removeProperty.rawValue)
            name(type, &names)
            name(property, &names)
        case .renameProperty(let type, let from, let to):
            byte(InstructionTag.renameProperty.rawValue)
            name(type, &names)
            name(from, &names)
            name(to, &names)
        case .redefineProperty(let type, let property):
            byte(InstructionTag.redefineProperty.rawValue)
            name(type, &names)
            self.property(property, &names)
        case .removeType(let type):
            byte(InstructionTag.removeType.rawValue)
            name(type, &names)
        case .setSchemaVersion(let version):
            byte(InstructionTag.setSchemaVersion.rawValue)
            varint(version)
        case .migrated(let version):
            byte(InstructionTag.migrated.rawValue)
            varint(version)
        case .create(let type, let key, let explicit, let defaults):
            byte(InstructionTag.create.rawValue)
            name(type, &names)
            primaryKey(key)
            fields(explicit, &names)
            fields(defaults, &names)
        case .erase(let type, let key):
            byte(InstructionTag.erase.rawValue)
            name(type, &names)
            primaryKey(key)
        case .set(let path, let newValue):
            byte(InstructionTag.set.rawValue)
            self.path(path, &names)
            value(newValue, &names)
        case .addInteger(let path, let delta, let base):
            byte(InstructionTag.addInteger.rawValue)
            self.path(path, &names)
            zigzag(delta)
            fixed64(base.time.rawValue)
            fixed64(base.replica.rawValue)
        case .listInsert(let path, let anchor, let newValue):
            byte(InstructionTag.listInsert.rawValue)
            self.path(path, &names)
            self.anchor(anchor)
            value(newValue, &names)
        case .listSet(let path, let element, let newValue):
            byte(InstructionTag.listSet.rawValue)
            self.path(path, &names)
            elementID(element)
            value(newValue, &names)
        case .listErase(let path, let element):
            byte(InstructionTag.listErase.rawValue)
            self.path(path, &names)
            elementID(element)
        case .listMove(let path, let element, let anchor):
            byte(InstructionTag.listMove.rawValue)
            self.path(path, &names)
            elementID(element)
            self.anchor(anchor)
        case .listClear(let path):
            byte(InstructionTag.listClear.rawValue)
            self.path(path, &names)
        case .dictionarySet(let path, let key, let newValue):
            byte(InstructionTag.dictionarySet.rawValue)
            self.path(path, &names)
            string(key)
            value(newValue, &names)
        case .dictionaryErase(let path, let key):
            byte(InstructionTag.dictionaryErase.rawValue)
            self.path(path, &names)
            string(key)
        case .omitted:
            byte(InstructionTag.omitted.rawValue)
        }
    }
}

extension BinaryReader {
    public mutating func elementID() throws(ChangesetDecodingError) -> ElementID {
        let origin = ReplicaID(rawValue: try fixed64())
        let sequence = try varint()
        let index = try varint()
        return ElementID(origin: origin, sequence: sequence, index: index)
    }

    mutating func anchor() throws(ChangesetDecodingError) -> ListAnchor {
        let flags = try byte()
        guard flags <= 3 else { throw error(.invalidValue, "bad list anchor flags \(flags)") }
        let side: ListAnchor.Side = flags & 1 == 0 ? .left : .right
        let parent = flags & 2 == 0 ? nil : try elementID()
        return ListAnchor(parent: parent, side: side)
    }

    mutating func path(_ names: NameTable) throws(ChangesetDecodingError) -> FieldPath {
        let type = try name(names, "type name")
        let key = try primaryKey()
        let count = try self.count("path step", maximum: limits.maximumDepth, minimumBytesEach: 11)
        var steps: [EmbeddedStep] = []
        for _ in 0..<count {
            let property = try name(names, "path property")
            steps.append(EmbeddedStep(property: property, id: try elementID()))
        }
        let property = try name(names, "property name")
        return FieldPath(type: type, primaryKey: key, steps: steps, property: property)
    }

    mutating func fields(_ names: NameTable) throws(ChangesetDecodingError) -> [FieldValue] {
        let count = try self.count("field", maximum: limits.maximumElements, minimumBytesEach: 2)
        var fields: [FieldValue] = []
        fields.reserveCapacity(count)
        for _ in 0..<count {
            let fieldName = try name(names, "field name")
            fields.append(FieldValue(fieldName, try value(names)))
        }
        return fields
    }

    mutating func instruction(_ names: NameTable, index: Int) throws(ChangesetDecodingError) -> Instruction {
        let tag = try byte()
        switch InstructionTag(rawValue: tag) {
        case .addType: return .addType(try objectSchema(names))
        case .addProperty:
            let type = try name(names, "type name")
            return .addProperty(type: type, try property(names))
        case .removeProperty:
            let type = try name(names, "type name")
            return .removeProperty(type: type, name: try name(names, "property name"))
        case .renameProperty:
            let type = try name(names, "type name")
            let from = try name(names, "property name")
            return .renameProperty(type: type, from: from, to: try name(names, "property name"))
        case .redefineProperty:
            let type = try name(names, "type name")
            return .redefineProperty(type: type, try property(names))
        case .removeType: return .removeType(try name(names, "type name"))
        case .setSchemaVersion: return .setSchemaVersion(try varint())
        case .migrated: return .migrated(toVersion: try varint())
        case .create:
            let type = try name(names, "type name")
            let key = try primaryKey()
            let explicit = try fields(names)
            return .create(type: type, primaryKey: key, fields: explicit, defaults: try fields(names))
        case .erase:
            let type = try name(names, "type name")
            return .erase(type: type, primaryKey: try primaryKey())
        case .set:
            let path = try path(names)
            return .set(path, try value(names))
        case .addInteger:
            let path = try path(names)
            let delta = try zigzag()
            let time = HybridTime(rawValue: try fixed64())
            let replica = ReplicaID(rawValue: try fixed64())
            return .addInteger(path, delta: delta, base: Stamp(time: time, replica: replica))
        case .listInsert:
            let path = try path(names)
            let anchor = try anchor()
            return .listInsert(path, anchor: anchor, value: try value(names))
        case .listSet:
            let path = try path(names)
            let element = try elementID()
            return .listSet(path, element: element, value: try value(names))
        case .listErase:
            let path = try path(names)
            return .listErase(path, element: try elementID())
        case .listMove:
            let path = try path(names)
            let element = try elementID()
            return .listMove(path, element: element, anchor: try anchor())
        case .listClear: return .listClear(try path(names))
        case .dictionarySet:
            let path = try path(names)
            let key = try string("dictionary key")
            return .dictionarySet(path, key: key, value: try value(names))
        case .dictionaryErase:
            let path = try path(names)
            return .dictionaryErase(path, key: try string("dictionary key"))
        case .omitted: return .omitted
        case nil: throw error(.invalidTag, "unknown instruction tag \(tag) in instruction \(index)")
        }
    }
}
