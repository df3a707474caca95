import Foundation
public import TributaryModel

/// Reads the values of chosen properties straight from stored record bytes, in place: the path for queries and
/// primary-key reads, which read many records and keep few of their values.
///
/// Build one per query (or per type a snapshot reads) and use it for every record: it works out once what
/// ``ObjectRecord/positionalValues(decoding:of:in:wanted:limits:)`` works out per record (each property's default,
/// which positions to decode). A record whose fields are all scalars is read from the buffer without copying it
/// and without building anything but the values themselves; any other record (lists, embedded objects, links,
/// damaged bytes) is handed to ``ObjectRecord/positionalValues(decoding:of:in:wanted:limits:)``, so both give the
/// same values and the same errors.
///
/// A class, so that passing it around (into the closure a query's predicate reads through, say) copies no arrays.
public final class RecordProjector: Sendable {
    /// The type whose records this projector reads.
    public let type: ObjectSchema
    let schema: Schema
    let limits: DecodingLimits
    /// The positions to decode, or `nil` for all.
    let wanted: [Bool]?
    /// What each position holds before the stored fields replace it: the default of each decoded property,
    /// ``Value/null`` for the others and for the primary key.
    let initial: [Value]
    /// Positions whose stored fields the fast path may read: decoded and neither the primary key nor a list.
    let readable: [Bool]
    /// The type's property names in the order a record stores its fields: a record usually holds these fields in
    /// this order, so each stored name is compared with one expected name, not looked up. The names' UTF-8 bytes,
    /// one after another (flat, so that comparing one retains nothing), where each starts (and, last, where they
    /// end), and each one's position in `type.properties`.
    let storedNames: [UInt8]
    let storedNameStarts: [Int]
    let storedPositions: [Int]
    /// Each position's index in the stored order.
    let storedIndex: [Int]
    /// Whether the stored order's names are ASCII and strictly ascending byte by byte: a record whose names are these,
    /// one after another from the first, then has names as the encoder writes them, with no need to check each.
    let storedNamesAreOrdered: Bool

    /// - Parameter wanted: the positions in `type.properties` to decode, or `nil` for all of them.
    public init(type: ObjectSchema, schema: Schema, wanted: [Bool]? = nil, limits: DecodingLimits = .storedRecord) {
        self.type = type
        self.schema = schema
        self.limits = limits
        self.wanted = wanted
        let keyPosition = type.primaryKey.flatMap { type.position(ofProperty: $0) }
        var initial: [Value] = []
        var readable: [Bool] = []
        for position in type.properties.indices {
            let property = type.properties[position]
            let decoded = position != keyPosition && ObjectRecord.isWanted(position, in: wanted)
            initial.append(decoded ? ObjectRecord.value(nil, of: property, in: schema) : .null)
            readable.append(decoded && !property.isList)
        }
        self.initial = initial
        self.readable = readable
        // The record encoder sorts its fields by name as `String` orders them.
        let order = type.properties.indices.filter {
            $0 != keyPosition && type.position(ofProperty: type.properties[$0].name) == $0
        }.sorted {
            type.properties[$0].name < type.properties[$1].name
        }
        var names: [UInt8] = []
        var starts: [Int] = []
        for position in order {
            starts.append(names.count)
            names.append(contentsOf: type.properties[position].name.utf8)
        }
        starts.append(names.count)
        storedNames = names
        storedNameStarts = starts
        storedPositions = order
        var storedIndex = [Int](repeating: 0, count: type.properties.count)
        for (index, position) in order.enumerated() { storedIndex[position] = index }
        self.storedIndex = storedIndex
        storedNamesAreOrdered = names.withUnsafeBytes { names in
            RecordBytes.isASCII(names)
                && starts.indices.dropFirst().dropLast().allSatisfy { index in
                    RecordBytes.precedes(
                        UnsafeRawBufferPointer(rebasing: names[starts[index - 1]..<starts[index]]),
                        UnsafeRawBufferPointer(rebasing: names[starts[index]..<starts[index + 1]]))
                }
        }
    }

    /// The position of the property a stored field name names, if any, and whether the name was the one expected
    /// next. `next` is the index in the stored order of the name expected next; it moves past the name found.
    @inline(__always)
    private func position(of name: UnsafeRawBufferPointer, next: inout Int) -> (position: Int?, expected: Bool) {
        if next < storedPositions.count {
            let start = storedNameStarts[next]
            // Names are short: a loop beats a call to memcmp.
            var matches = storedNameStarts[next + 1] - start == name.count
            var index = 0
            while matches, index < name.count {
                matches = storedNames[start + index] == name[index]
                index += 1
            }
            if matches {
                next += 1
                return (storedPositions[next - 1], true)
            }
        }
        let position = type.propertyPosition(utf8: name.assumingMemoryBound(to: UInt8.self))
        if let position, position < storedIndex.count { next = storedIndex[position] + 1 }
        return (position, false)
    }

    /// Reads a record's values into `values`, one per position in `type.properties`, as
    /// ``ObjectRecord/positionalValues(decoding:of:in:wanted:limits:)`` gives them. `values` is reused: a caller that
    /// passes the same array for every record allocates it once. The values are decoded as the record's fields are
    /// walked and checked, in one pass.
    ///
    /// - Returns: `false` for a record whose object does not exist (a tombstone); `values` is then unspecified.
    /// - Throws: ``ChangesetDecodingError`` for damaged bytes.
    public func project(_ bytes: UnsafeRawBufferPointer, into values: inout [Value]) throws(ChangesetDecodingError)
        -> Bool
    {
        if values.count == initial.count {
            for position in initial.indices { values[position] = initial[position] }
        } else {
            values = initial
        }
        var next = 0
        // Whether every name so far was the stored order's next, from its first: the names then need no check.
        var inStoredOrder = storedNamesAreOrdered
        // The position whose value the walk decodes next, or -1 for a field it only checks.
        var decoding = -1
        let scanned = ObjectRecord.scanScalarFields(
            bytes, limits: limits,
            { name, _ in
                let (position, expected) = self.position(of: name, next: &next)
                inStoredOrder = inStoredOrder && expected
                decoding = -1
                if let position, readable[position] { decoding = position }
                return inStoredOrder
            },
            decodes: { decoding >= 0 },
            decoded: { value, stampIndex, addend, zeroStampFirst in
                values[decoding] = ObjectRecord.adding(
                    addend, to: value, zeroStamp: stampIndex == 0 && zeroStampFirst, unwritten: initial[decoding])
            })
        switch scanned {
        case .exists:
            return true
        case .tombstone:
            return false
        case .needsFullDecoder:
            guard let decoded = try fullDecode(bytes) else { return false }
            values = decoded
            return true
        }
    }

    /// A record's values as a new array, or `nil` for a tombstone.
    public func values(_ bytes: UnsafeRawBufferPointer) throws(ChangesetDecodingError) -> [Value]? {
        var values: [Value] = []
        return try project(bytes, into: &values) ? values : nil
    }

    /// What the full decoder reads from a record that ``locate(_:into:)`` leaves to it.
    public func fullDecode(_ bytes: UnsafeRawBufferPointer) throws(ChangesetDecodingError) -> [Value]? {
        try ObjectRecord.positionalValues(decoding: Array(bytes), of: type, in: schema, wanted: wanted, limits: limits)
    }

    /// Where a record's scalar fields are, found by ``locate(_:into:)``: enough to decode any one of them later, and
    /// only those a caller asks for (a query that tests one property and rejects the record decodes nothing else).
    /// Reuse one for every record: it allocates once.
    public struct Fields: Sendable {
        /// Each position's stored value, as the offset of its tag in the record; -1 where the record holds none.
        var offsets: [Int] = []
        /// Whether the record's stamp table starts with the zero stamp (stamp index 0 is then the zero stamp).
        var zeroStampFirst = false

        public init() {}
    }

    /// What ``locate(_:into:)`` found.
    public enum Located: Sendable {
        /// The object exists; its fields are located.
        case exists
        /// The record is a tombstone: its object does not exist.
        case tombstone
        /// The record holds a list or embedded object, or is damaged: ``fullDecode(_:)`` reads it (or names the
        /// fault).
        case needsFullDecoder
    }

    /// Finds the fields of a record whose fields are all scalar registers, checking every byte the full decoder
    /// checks, so that a record located here decodes without error, to the same values. Anything else, or anything
    /// out of the ordinary (a limit reached, field names out of order or not ASCII, bytes that do not parse), is left
    /// to the full decoder, which reads it or names the fault.
    public func locate(_ bytes: UnsafeRawBufferPointer, into fields: inout Fields) -> Located {
        if fields.offsets.count == initial.count {
            for position in initial.indices { fields.offsets[position] = -1 }
        } else {
            fields.offsets = Array(repeating: -1, count: initial.count)
        }
        var next = 0
        // Whether every name so far was the stored order's next, from its first: the names then need no check.
        var inStoredOrder = storedNamesAreOrdered
        let scanned = ObjectRecord.scanScalarFields(bytes, limits: limits) { name, start in
            let (position, expected) = self.position(of: name, next: &next)
            inStoredOrder = inStoredOrder && expected
            if let position, readable[position] { fields.offsets[position] = start }
            return inStoredOrder
        }
        switch scanned {
        case .exists(let zeroStampFirst):
            fields.zeroStampFirst = zeroStampFirst
            return .exists
        case .tombstone:
            return .tombstone
        case .needsFullDecoder:
            return .needsFullDecoder
        }
    }

    /// The value of the property at `position` in a record ``locate(_:into:)`` located in `fields`, as
    /// ``ObjectRecord/positionalValues(decoding:of:in:wanted:limits:)`` gives it: the default where the record holds
    /// none, ``Value/null`` for the primary key and positions not decoded, an integer with its increments added.
    public func value(at position: Int, in bytes: UnsafeRawBufferPointer, _ fields: Fields) -> Value {
        guard initial.indices.contains(position) else { return .null }
        guard position < fields.offsets.count, fields.offsets[position] >= 0 else { return initial[position] }
        var reader = RawRecordReader(bytes)
        reader.offset = fields.offsets[position]
        // `locate` checked these bytes: the reads cannot fail.
        guard let value = reader.scalar(limits: limits), let stampIndex = reader.varint(),
            let addend = reader.zigzag()
        else { return initial[position] }
        return ObjectRecord.adding(
            addend, to: value, zeroStamp: stampIndex == 0 && fields.zeroStampFirst, unwritten: initial[position])
    }
}

/// What ``ObjectRecord/scanScalarFields(_:limits:_:)`` found.
enum ScalarScan {
    /// The object exists; stamp index 0 is the zero stamp when `zeroStampFirst`.
    case exists(zeroStampFirst: Bool)
    case tombstone
    /// The record holds a list, an embedded object or a value other than a plain scalar, its field names are out of
    /// order or not ASCII, or it is damaged.
    case needsFullDecoder
}

extension ObjectRecord {
    /// Walks a stored record whose fields are all registers holding plain scalars, names in ascending order, checking
    /// every byte the full decoder checks: what it accepts, the full decoder reads, to the same values. Calls `field`
    /// with each field's name and the offset of its value (a tombstone's fields too), before the name is checked:
    /// `field` returns `true` to vouch that the name is ASCII and follows the previous field's (a projector knows
    /// this of its type's names, ``RecordProjector/storedNamesAreOrdered``), and other names are checked here.
    /// Anything else is for the full decoder.
    ///
    /// Where `decodes` answers `true` (asked after `field` vouched for or checked the name), the field's value is
    /// decoded instead of only checked, and given to `decoded` with its stamp index, its addend and whether stamp
    /// index 0 is the zero stamp: a record's values in the same walk that checks it.
    @inline(__always)
    static func scanScalarFields(
        _ bytes: UnsafeRawBufferPointer, limits: DecodingLimits, _ field: (UnsafeRawBufferPointer, Int) -> Bool,
        decodes: () -> Bool = { false }, decoded: (Value, UInt64, Int64, Bool) -> Void = { _, _, _, _ in }
    ) -> ScalarScan {
        var reader = RawRecordReader(bytes)
        guard reader.byte() == formatVersion, let flags = reader.byte(), flags <= 1 else { return .needsFullDecoder }
        // Stamps and erasures are merge metadata: skip them, checking what the full decoder checks.
        guard let stampCount = reader.count(maximum: limits.maximumElements),
            case let tableStart = reader.offset, reader.skip(stampCount * 16),
            RecordBytes.stampsAscending(UnsafeRawBufferPointer(rebasing: bytes[tableStart..<reader.offset])),
            let erasureCount = reader.count(maximum: limits.maximumElements)
        else { return .needsFullDecoder }
        let zeroStampFirst = stampCount > 0 && (tableStart..<tableStart + 16).allSatisfy { bytes[$0] == 0 }
        for _ in 0..<erasureCount {
            guard reader.skip(8), reader.varint() != nil else { return .needsFullDecoder }
        }
        guard let fieldCount = reader.count(maximum: limits.maximumElements) else { return .needsFullDecoder }
        var previous: UnsafeRawBufferPointer?
        for _ in 0..<fieldCount {
            // Names ASCII and ascending, as the encoder writes them: each is then given once, as `String` compares
            // names too. Others are for the full decoder.
            guard let name = reader.lengthPrefixed(maximum: limits.maximumValueBytes) else { return .needsFullDecoder }
            // A register (0) holding a scalar (0); lists and embedded objects take the full decoder.
            guard reader.byte() == 0, reader.byte() == 0 else { return .needsFullDecoder }
            let start = reader.offset
            guard
                field(name, start)
                    || RecordBytes.isASCII(name) && (previous.map({ RecordBytes.precedes($0, name) }) ?? true)
            else { return .needsFullDecoder }
            previous = name
            if decodes() {
                // `scalar` accepts exactly what `skipScalar` does.
                guard let value = reader.scalar(limits: limits), let stampIndex = reader.varint(),
                    stampIndex < UInt64(stampCount), let addend = reader.zigzag()
                else { return .needsFullDecoder }
                decoded(value, stampIndex, addend, zeroStampFirst)
            } else {
                guard reader.skipScalar(limits: limits), let stampIndex = reader.varint(),
                    stampIndex < UInt64(stampCount), reader.zigzag() != nil
                else { return .needsFullDecoder }
            }
        }
        guard reader.remaining == 0 else { return .needsFullDecoder }
        guard flags == 1 else { return .tombstone }
        return .exists(zeroStampFirst: zeroStampFirst)
    }

    /// Whether the object a stored record belongs to exists (the record is not a tombstone): what a check of a link's
    /// target needs. The whole record is checked, as the full decoder checks it: a damaged record is an error here
    /// too, never read as an answer.
    ///
    /// - Throws: ``ChangesetDecodingError`` for damaged or unknown bytes, as ``init(decoding:limits:)`` does.
    public static func exists(inStored bytes: UnsafeRawBufferPointer) throws(ChangesetDecodingError) -> Bool {
        switch scanScalarFields(bytes, limits: .storedRecord, { _, _ in false }) {
        case .exists: return true
        case .tombstone: return false
        case .needsFullDecoder: return try ObjectRecord(decoding: Array(bytes)).exists
        }
    }
}

/// A bounds-checked reader over borrowed bytes that answers `nil` instead of throwing: the fast path gives up on
/// anything unexpected and lets the full decoder report it.
private struct RawRecordReader {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    var remaining: Int { bytes.count - offset }

    @inline(__always)
    mutating func byte() -> UInt8? {
        guard offset < bytes.count else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    @inline(__always)
    mutating func skip(_ count: Int) -> Bool {
        guard count >= 0, count <= remaining else { return false }
        offset += count
        return true
    }

    @inline(__always)
    mutating func varint() -> UInt64? {
        // Most varints here (stamp indices, lengths, small numbers) are one byte.
        if offset < bytes.count, bytes[offset] < 0x80 {
            defer { offset += 1 }
            return UInt64(bytes[offset])
        }
        return longVarint()
    }

    mutating func longVarint() -> UInt64? {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while offset < bytes.count {
            let byte = bytes[offset]
            offset += 1
            if shift == 63 && byte > 1 { return nil }
            result |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 { return result }
            shift += 7
            if shift > 63 { return nil }
        }
        return nil
    }

    @inline(__always)
    mutating func zigzag() -> Int64? {
        guard let raw = varint() else { return nil }
        return Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
    }

    @inline(__always)
    mutating func count(maximum: Int) -> Int? {
        guard let raw = varint(), raw <= UInt64(maximum), raw <= UInt64(remaining) else { return nil }
        return Int(raw)
    }

    @inline(__always)
    mutating func fixed64() -> UInt64? {
        guard remaining >= 8 else { return nil }
        defer { offset += 8 }
        return bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self).littleEndian
    }

    @inline(__always)
    mutating func lengthPrefixed(maximum: Int) -> UnsafeRawBufferPointer? {
        guard let length = count(maximum: maximum) else { return nil }
        defer { offset += length }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length])
    }

    /// Skips a scalar value, checking it as ``scalar(limits:)`` does (strings are valid UTF-8, as the full decoder
    /// checks even of values it does not keep); `false` where that gives `nil`.
    mutating func skipScalar(limits: DecodingLimits) -> Bool {
        guard let tag = byte() else { return false }
        switch tag {
        case 0, 1, 2: return true
        case 3: return varint() != nil
        case 4, 7: return skip(8)
        case 5:
            guard let utf8 = lengthPrefixed(maximum: limits.maximumValueBytes) else { return false }
            return RecordBytes.isASCII(utf8)
                || String(validating: utf8.assumingMemoryBound(to: UInt8.self), as: UTF8.self) != nil
        case 6: return lengthPrefixed(maximum: limits.maximumValueBytes) != nil
        case 8: return skip(16)
        case 9: return skip(12)
        case 13:
            guard let text = lengthPrefixed(maximum: limits.maximumValueBytes) else { return false }
            return Decimal(canonicalText: String(decoding: text, as: UTF8.self)) != nil
        case 14: return skip(4)
        default: return false
        }
    }

    /// A scalar value (the tags of ``Value``'s encoding). Links, lists and embedded values give `nil`.
    mutating func scalar(limits: DecodingLimits) -> Value? {
        guard let tag = byte() else { return nil }
        switch tag {
        case 0: return .null
        case 1: return .bool(false)
        case 2: return .bool(true)
        case 3: return zigzag().map { .int($0) }
        case 4: return fixed64().map { .double(Double(bitPattern: $0)) }
        case 5:
            guard let utf8 = lengthPrefixed(maximum: limits.maximumValueBytes) else { return nil }
            let buffer = utf8.assumingMemoryBound(to: UInt8.self)
            // ASCII is valid UTF-8 as it is; anything else is validated.
            if RecordBytes.isASCII(utf8) { return .string(String(decoding: buffer, as: UTF8.self)) }
            return String(validating: buffer, as: UTF8.self).map { .string($0) }
        case 6:
            return lengthPrefixed(maximum: limits.maximumValueBytes).map { .data(Data($0)) }
        case 7: return fixed64().map { .date(Date(timeIntervalSince1970: Double(bitPattern: $0))) }
        case 8:
            guard remaining >= 16 else { return nil }
            defer { offset += 16 }
            var tuple: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &tuple) {
                $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + 16]))
            }
            return .uuid(UUID(uuid: tuple))
        case 9:
            guard remaining >= 12 else { return nil }
            defer { offset += 12 }
            return ObjectID(bytes: Array(bytes[offset..<offset + 12])).map { .objectId($0) }
        case 13:
            // A decimal, as its canonical text.
            guard let text = lengthPrefixed(maximum: limits.maximumValueBytes) else { return nil }
            return Decimal(canonicalText: String(decoding: text, as: UTF8.self)).map { .decimal($0) }
        case 14:
            guard remaining >= 4 else { return nil }
            defer { offset += 4 }
            return .float(Float(bitPattern: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self).littleEndian))
        default:
            return nil
        }
    }
}
