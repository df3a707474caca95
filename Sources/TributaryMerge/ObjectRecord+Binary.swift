public import TributaryModel

/// The stored form of an ``ObjectRecord``.
///
/// ```
/// formatVersion:u8 flags:u8 (bit 0: exists; bit 1: side states follow the fields)
/// stamps: count (time:u64 replica:u64)*       every stamp in the record, sorted, referred to by index
/// erasures: count (origin:u64 sequence:varint)*
/// fields: count (name:string state)*          sorted by name
/// sides: count (name:string shape state)*     when bit 1 is set: states kept under other shapes, sorted (the
///                                             shape as ``BinaryWriter/shape(_:_:)`` writes it)
/// state:  0 register(stored stamp:index addend:zigzag) | 1 list(slots elements)
/// stored: 0 scalar | 1 embedded(id type fields) | 2 embedded(id type fields sides)
/// ```
/// Every collection is written sorted, so equal records have equal bytes on every replica.
extension ObjectRecord {
    /// The record format version this code writes and reads.
    public static let formatVersion: UInt8 = 1

    /// The record's bytes.
    public func encoded() -> [UInt8] {
        var stamps = StampCollector()
        Self.collectStamps(fields, into: &stamps)
        let table = stamps.sorted()
        let index = StampIndex(table)

        var writer = BinaryWriter(capacity: 128)
        writer.byte(Self.formatVersion)
        writer.byte((exists ? 1 : 0) | (fields.sideFields.isEmpty ? 0 : 2))
        writer.varint(table.count)
        for stamp in table {
            writer.fixed64(stamp.time.rawValue)
            writer.fixed64(stamp.replica.rawValue)
        }
        writer.varint(erasures.count)
        for dot in erasures {
            writer.fixed64(dot.origin.rawValue)
            writer.varint(dot.sequence)
        }
        var names = NameTable.inline  // values in records write their names inline
        writer.fields(fields, stamps: index, names: &names)
        if !fields.sideFields.isEmpty { writer.sides(fields, stamps: index, names: &names) }
        return writer.bytes
    }

    /// The bytes of a new record, one that exists and has no erasures, whose fields are plain values (no lists, no
    /// embedded objects), each a register without increments: `fields` in name order, each a position in
    /// `explicit` (a value written, stamped `stamp`) or in `defaults` (a default, stamped zero). The same bytes as
    /// ``encoded()`` of that record, written without building it.
    static func encodedNew(
        _ fields: [(isDefault: Bool, index: Int)], explicit: [FieldValue], defaults: [FieldValue], stamp: Stamp
    ) -> [UInt8] {
        var hasDefaults = false
        var hasWritten = false
        for field in fields {
            if field.isDefault { hasDefaults = true } else { hasWritten = true }
        }
        // The stamp table, sorted: zero, for defaults, sorts first.
        let writesStamp = hasWritten && !(hasDefaults && stamp == .zero)
        let writtenIndex = hasDefaults && writesStamp ? 1 : 0

        var writer = BinaryWriter(capacity: 36 + fields.count * 24)
        writer.byte(Self.formatVersion)
        writer.byte(1)  // exists
        writer.varint((hasDefaults ? 1 : 0) + (writesStamp ? 1 : 0))
        if hasDefaults {
            writer.fixed64(Stamp.zero.time.rawValue)
            writer.fixed64(Stamp.zero.replica.rawValue)
        }
        if writesStamp {
            writer.fixed64(stamp.time.rawValue)
            writer.fixed64(stamp.replica.rawValue)
        }
        writer.varint(0)  // erasures
        var names = NameTable.inline
        writer.varint(fields.count)
        explicit.withUnsafeBufferPointer { explicit in
            defaults.withUnsafeBufferPointer { defaults in
                for field in fields {
                    let source = field.isDefault ? defaults : explicit
                    writer.string(source[field.index].name)
                    writer.byte(FieldTag.register.rawValue)
                    writer.byte(StoredTag.scalar.rawValue)
                    writer.value(source[field.index].value, &names)
                    writer.varint(field.isDefault ? 0 : writtenIndex)
                    writer.zigzag(0)
                }
            }
        }
        return writer.bytes
    }

    private static func collectStamps(_ fields: FieldTable, into stamps: inout StampCollector) {
        fields.forEachField { _, field in collectStamps(field, into: &stamps) }
        for side in fields.sideFields { collectStamps(side.state, into: &stamps) }
    }

    private static func collectStamps(_ field: FieldState, into stamps: inout StampCollector) {
        switch field {
        case .register(let register):
            stamps.insert(register.stamp)
            if case .embedded(let child) = register.value { collectStamps(child.fields, into: &stamps) }
        case .list(let list):
            for slot in list.slots.values { stamps.insert(slot.stamp) }
            for element in list.elements.values {
                stamps.insert(element.valueStamp)
                stamps.insert(element.positionStamp)
                if case .embedded(let child) = element.value { collectStamps(child.fields, into: &stamps) }
            }
        case .dictionary(let dictionary):
            stamps.insert(dictionary.replaced)
            for entry in dictionary.entries.values {
                stamps.insert(entry.stamp)
                if case .embedded(let child)? = entry.value { collectStamps(child.fields, into: &stamps) }
            }
        }
    }

    /// Decodes a record.
    ///
    /// - Throws: ``ChangesetDecodingError`` for damaged or unknown bytes.
    public init(decoding bytes: [UInt8], limits: DecodingLimits = .storedRecord) throws(ChangesetDecodingError) {
        var reader = BinaryReader(bytes, subject: "object record", limits: limits)
        let version = try reader.byte()
        guard version == Self.formatVersion else {
            throw reader.error(.unsupportedFormatVersion, "record format version \(version) is not supported")
        }
        let flags = try reader.byte()
        guard flags <= 3 else { throw reader.error(.invalidValue, "unknown record flags \(flags)") }
        let stampCount = try reader.count("stamp", maximum: reader.limits.maximumElements, minimumBytesEach: 16)
        var table: [Stamp] = []
        table.reserveCapacity(stampCount)
        for _ in 0..<stampCount {
            let time = HybridTime(rawValue: try reader.fixed64())
            let stamp = Stamp(time: time, replica: ReplicaID(rawValue: try reader.fixed64()))
            // The encoder writes each stamp once, in order; the readers that skip the table rely on it (the zero
            // stamp, if there, is index 0).
            if let last = table.last, !(last < stamp) {
                throw reader.error(.invalidValue, "stamp \(table.count) is not after the one before it")
            }
            table.append(stamp)
        }
        let erasureCount = try reader.count("erasure", maximum: reader.limits.maximumElements, minimumBytesEach: 9)
        var erasures: [Dot] = []
        for _ in 0..<erasureCount {
            let origin = ReplicaID(rawValue: try reader.fixed64())
            erasures.append(Dot(origin: origin, sequence: try reader.varint()))
        }
        var fields = try reader.fields(stamps: table, depth: 0)
        if flags & 2 != 0 { try reader.sides(into: &fields, stamps: table, depth: 0) }
        guard reader.isAtEnd else { throw reader.error(.trailingData, "\(reader.remaining) bytes follow the record") }
        self.init(exists: flags & 1 == 1, erasures: erasures, fields: fields)
    }
}

private enum FieldTag: UInt8 {
    case register = 0
    case list = 1
    case dictionary = 2
}

private enum StoredTag: UInt8 {
    case scalar = 0
    case embedded = 1
    /// An embedded object with states kept under other shapes (rule 8).
    case embeddedWithSides = 2
}

extension BinaryWriter {
    fileprivate mutating func stamp(_ stamp: Stamp, _ index: StampIndex) {
        varint(index.position(of: stamp))
    }

    fileprivate mutating func fields(_ fields: FieldTable, stamps: StampIndex, names: inout NameTable) {
        varint(fields.count)
        // The table keeps its fields sorted by name: the order the encoding stores.
        fields.forEachField { name, field in
            string(name)
            state(field, stamps: stamps, names: &names)
        }
    }

    fileprivate mutating func state(_ field: FieldState, stamps: StampIndex, names: inout NameTable) {
        switch field {
        case .register(let register):
            byte(FieldTag.register.rawValue)
            stored(register.value, stamps: stamps, names: &names)
            stamp(register.stamp, stamps)
            zigzag(register.addend)
        case .list(let list):
            byte(FieldTag.list.rawValue)
            varint(list.slots.count)
            for id in list.slots.keys.sorted() {
                let slot = list.slots[id]!
                elementID(slot.id)
                byte(slot.side.rawValue | (slot.parent == nil ? 0 : 2))
                if let parent = slot.parent { elementID(parent) }
                stamp(slot.stamp, stamps)
            }
            varint(list.elements.count)
            for id in list.elements.keys.sorted() {
                let element = list.elements[id]!
                elementID(element.id)
                // 1: the element holds a value. Records before replica format 3 also kept erased elements, flagged
                // 0; they are read as absent.
                byte(1)
                stored(element.value, stamps: stamps, names: &names)
                stamp(element.valueStamp, stamps)
                elementID(element.position)
                stamp(element.positionStamp, stamps)
            }
        case .dictionary(let dictionary):
            byte(FieldTag.dictionary.rawValue)
            stamp(dictionary.replaced, stamps)
            varint(dictionary.entries.count)
            // Sorted by the keys' UTF-8 bytes, as readers check: one state, one encoding.
            for key in dictionary.entries.keys.sorted(by: { $0.utf8Precedes($1) }) {
                let entry = dictionary.entries[key]!
                string(key)
                // 0: erased; 1: a value; 2: an embedded object instance, with its field states.
                switch entry.value {
                case nil:
                    byte(0)
                case .scalar(let value)?:
                    byte(1)
                    self.value(value, &names)
                case .embedded?:
                    byte(2)
                    stored(entry.value!, stamps: stamps, names: &names)
                }
                stamp(entry.stamp, stamps)
            }
        }
    }

    fileprivate mutating func stored(_ value: StoredValue, stamps: StampIndex, names: inout NameTable) {
        switch value {
        case .scalar(let scalar):
            byte(StoredTag.scalar.rawValue)
            self.value(scalar, &names)
        case .embedded(let child):
            let hasSides = !child.fields.sideFields.isEmpty
            byte(hasSides ? StoredTag.embeddedWithSides.rawValue : StoredTag.embedded.rawValue)
            elementID(child.id)
            string(child.type)
            fields(child.fields, stamps: stamps, names: &names)
            if hasSides { sides(child.fields, stamps: stamps, names: &names) }
        }
    }

    /// The states a table keeps under other shapes, sorted as the table keeps them.
    fileprivate mutating func sides(_ fields: FieldTable, stamps: StampIndex, names: inout NameTable) {
        varint(fields.sideFields.count)
        for side in fields.sideFields {
            string(side.name)
            shape(side.shape, &names)
            state(side.state, stamps: stamps, names: &names)
        }
    }
}

extension BinaryReader {
    fileprivate mutating func stamp(_ table: [Stamp]) throws(ChangesetDecodingError) -> Stamp {
        let index = try varint()
        guard index < UInt64(table.count) else {
            throw error(.invalidValue, "stamp index \(index) is out of range (\(table.count) stamps)")
        }
        return table[Int(index)]
    }

    fileprivate mutating func fields(stamps: [Stamp], depth: Int)
        throws(ChangesetDecodingError) -> FieldTable
    {
        guard depth <= limits.maximumDepth else {
            throw error(.limitExceeded, "embedded objects nest deeper than \(limits.maximumDepth) levels")
        }
        let count = try self.count("field", maximum: limits.maximumElements, minimumBytesEach: 3)
        var fields = FieldTable()
        // A damaged count can claim far more fields than follow: reserve only what a record usually holds.
        fields.reserveCapacity(min(count, 16))
        for _ in 0..<count {
            let name = try string("field name")
            // The encoder writes names sorted; a record written otherwise still reads, each name once.
            let inOrder = fields.lastName.map { $0 < name } ?? true
            if !inOrder, fields[name] != nil { throw error(.invalidValue, "field '\(name)' appears twice") }
            let state = try fieldState(stamps: stamps, depth: depth)
            if inOrder {
                _ = fields.appendInOrder(name, state)
            } else {
                fields[name] = state
            }
        }
        return fields
    }

    /// The states a table keeps under other shapes (rule 8): at least one, sorted by name and shape, each once.
    fileprivate mutating func sides(into fields: inout FieldTable, stamps: [Stamp], depth: Int)
        throws(ChangesetDecodingError)
    {
        let count = try self.count("side state", maximum: limits.maximumElements, minimumBytesEach: 5)
        guard count > 0 else { throw error(.invalidValue, "the side states flag is set, but there are none") }
        for _ in 0..<count {
            let name = try string("field name")
            let shape = try self.shape(.inline)
            let side = SideField(name: name, shape: shape, state: try fieldState(stamps: stamps, depth: depth))
            guard fields.appendSideInOrder(side) else {
                throw error(.invalidValue, "side state of '\(name)' as \(shape) is out of order or given twice")
            }
        }
    }

    /// One field's state, its stamps resolved in the record's table `stamps`.
    mutating func fieldState(stamps: [Stamp], depth: Int) throws(ChangesetDecodingError) -> FieldState {
        func stamp() throws(ChangesetDecodingError) -> Stamp { try self.stamp(stamps) }
        do {
            let tag = try byte()
            switch FieldTag(rawValue: tag) {
            case .register:
                let value = try stored(stamps: stamps, depth: depth)
                let registerStamp = try stamp()
                return .register(Register(value: value, stamp: registerStamp, addend: try zigzag()))
            case .list:
                var list = ListState()
                let slotCount = try self.count("list slot", maximum: limits.maximumElements, minimumBytesEach: 11)
                // Sized once: a list replaced many times holds thousands of slots, and growing the table step by step
                // rehashed every id again at each step.
                list.slots.reserveCapacity(slotCount)
                // Slots and elements are written sorted by id, each once: an id out of order is damage, and one
                // given twice would otherwise be read as whichever came last.
                var lastID: ElementID?
                for _ in 0..<slotCount {
                    let id = try elementID()
                    if let lastID, !(lastID < id) { throw error(.invalidValue, "list slot \(id) is out of order") }
                    lastID = id
                    let flags = try byte()
                    guard flags <= 3 else { throw error(.invalidValue, "bad slot flags \(flags)") }
                    let parent = flags & 2 == 0 ? nil : try elementID()
                    let slotStamp = try stamp()
                    list.slots[id] = Slot(
                        id: id, parent: parent, side: flags & 1 == 0 ? .left : .right, stamp: slotStamp)
                }
                let elementCount = try self.count("list element", maximum: limits.maximumElements, minimumBytesEach: 23)
                list.elements.reserveCapacity(elementCount)
                lastID = nil
                // The slots that live elements occupy. The merge rules give each slot at most one element (a slot is
                // made by the insert or move of one element, and only that element can take it), so two there are
                // damage: reading either would depend on the order a dictionary visits them.
                var occupied = Set<ElementID>(minimumCapacity: elementCount)
                for _ in 0..<elementCount {
                    let id = try elementID()
                    if let lastID, !(lastID < id) { throw error(.invalidValue, "list element \(id) is out of order") }
                    lastID = id
                    let present = try byte()
                    guard present <= 1 else { throw error(.invalidValue, "bad element flag \(present)") }
                    let value = present == 1 ? try stored(stamps: stamps, depth: depth) : nil
                    let valueStamp = try stamp()
                    let position = try elementID()
                    let positionStamp = try stamp()
                    // An erased element, as records before replica format 3 kept them: read as absent, as a record
                    // written today would be.
                    guard let value else { continue }
                    if !occupied.insert(position).inserted {
                        throw error(.invalidValue, "list elements \(id) and another both occupy slot \(position)")
                    }
                    list.elements[id] = ListElement(
                        id: id, value: value, valueStamp: valueStamp, position: position, positionStamp: positionStamp)
                }
                return .list(list)
            case .dictionary:
                var dictionary = DictionaryState(replaced: try stamp())
                let count = try self.count("dictionary entry", maximum: limits.maximumElements, minimumBytesEach: 3)
                var previous: String?
                for _ in 0..<count {
                    let key = try string("dictionary key")
                    if let previous, !previous.utf8Precedes(key) {
                        throw error(.invalidValue, "dictionary key '\(key.prefix(64))' is out of order or given twice")
                    }
                    previous = key
                    let present = try byte()
                    let value: StoredValue?
                    switch present {
                    case 0: value = nil
                    case 1: value = .scalar(try self.value(.inline, depth: depth + 1))
                    case 2:
                        value = try stored(stamps: stamps, depth: depth + 1)
                        guard case .embedded? = value else {
                            throw error(.invalidValue, "dictionary key '\(key.prefix(64))' holds no embedded object")
                        }
                    default: throw error(.invalidValue, "bad dictionary entry flag \(present)")
                    }
                    dictionary.entries[key] = DictionaryEntry(value: value, stamp: try stamp())
                }
                return .dictionary(dictionary)
            case nil:
                throw error(.invalidTag, "unknown field tag \(tag)")
            }
        }
    }

    fileprivate mutating func stored(stamps: [Stamp], depth: Int) throws(ChangesetDecodingError)
        -> StoredValue
    {
        let tag = try byte()
        switch StoredTag(rawValue: tag) {
        case .scalar: return .scalar(try value(.inline, depth: depth))
        case .embedded, .embeddedWithSides:
            let id = try elementID()
            let type = try string("embedded type")
            var fields = try self.fields(stamps: stamps, depth: depth + 1)
            if tag == StoredTag.embeddedWithSides.rawValue {
                try sides(into: &fields, stamps: stamps, depth: depth + 1)
            }
            return .embedded(EmbeddedState(id: id, type: type, fields: fields))
        case nil: throw error(.invalidTag, "unknown stored value tag \(tag)")
        }
    }
}

/// The distinct stamps of a record. Most records hold one to a few, so a small array beats a hash set; a record
/// with many (a long list) switches to a set.
struct StampCollector {
    private var small: [Stamp] = []
    private var large: Set<Stamp>?

    mutating func insert(_ stamp: Stamp) {
        if large != nil {
            large!.insert(stamp)
        } else if !small.contains(stamp) {
            small.append(stamp)
            if small.count > 16 { large = Set(small) }
        }
    }

    /// The stamps, sorted (in place: the collector is spent).
    mutating func sorted() -> [Stamp] {
        if let large { return large.sorted() }
        small.sort()
        return small
    }
}

/// Positions in a sorted stamp table.
struct StampIndex {
    let table: [Stamp]

    init(_ table: [Stamp]) { self.table = table }

    func position(of stamp: Stamp) -> Int {
        if table.count <= 8 { return table.firstIndex(of: stamp) ?? 0 }
        var low = 0
        var high = table.count
        while low < high {
            let middle = (low + high) / 2
            if table[middle] < stamp { low = middle + 1 } else { high = middle }
        }
        return low
    }
}

/// Checks on a stored record's bytes that the readers which skip parts of a record (``RecordProjector``,
/// ``ObjectRecord/positionalValues(decoding:of:in:wanted:limits:)``) make without decoding them, so that they accept
/// what the full decoder accepts.
enum RecordBytes {
    /// Whether a stamp table (16 bytes a stamp: time, then replica, each a little-endian word) holds each stamp once,
    /// in order, as the full decoder requires.
    @inline(__always)
    static func stampsAscending(_ table: UnsafeRawBufferPointer) -> Bool {
        func word(_ offset: Int) -> UInt64 {
            UInt64(littleEndian: table.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }
        guard table.count >= 32 else { return true }
        var previous = (word(0), word(8))
        var offset = 16
        while offset + 16 <= table.count {
            let stamp = (word(offset), word(offset + 8))
            guard previous < stamp else { return false }
            previous = stamp
            offset += 16
        }
        return true
    }

    /// Whether every byte is below 0x80, eight at a time.
    @inline(__always)
    static func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        var bits: UInt64 = 0
        while index + 8 <= bytes.count {
            bits |= bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < bytes.count {
            bits |= UInt64(bytes[index])
            index += 1
        }
        return bits & 0x8080_8080_8080_8080 == 0
    }

    /// Whether `a` sorts strictly before `b`, byte by byte (a prefix first): for ASCII names, the order in which
    /// `String` sorts them and the encoder writes them.
    @inline(__always)
    static func precedes(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        let common = min(a.count, b.count)
        var index = 0
        while index < common {
            if a[index] != b[index] { return a[index] < b[index] }
            index += 1
        }
        return a.count < b.count
    }
}

extension ChangesetDecodingError {
    /// This error, met reading the stored record of `object` (`Type[primaryKey]`), naming it: `object record of
    /// Task[42]: …`. Every reader of records by key names the object so, whichever reader met the damage.
    public func inRecord(of object: String) -> ChangesetDecodingError {
        let generic = "object record: "
        guard message.hasPrefix(generic) else { return self }
        return ChangesetDecodingError(
            code, "object record of \(object): " + message.dropFirst(generic.count), offset: offset)
    }

    /// ``inRecord(of:)`` for the object `key` names.
    public func inRecord(of key: RecordKey) -> ChangesetDecodingError { inRecord(of: key.description) }
}
