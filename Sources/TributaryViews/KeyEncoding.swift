package import Foundation
public import TributaryModel

/// Byte encodings for LMDB keys that sort the way the values do, so that cursor ranges answer range queries.
public enum KeyEncoding {
    /// The longest primary key string, in UTF-8 bytes: keys must fit LMDB's 511-byte key limit with room to spare.
    public static let maximumPrimaryKeyBytes = 256
    /// Index keys keep at most this many bytes of a string or data value (fewer when the key's budget says so:
    /// ``indexValueBudget(type:property:primaryKey:)``); longer values share a prefix key and are told apart by
    /// evaluating the query on the candidates.
    public static let maximumIndexedValueBytes = 200

    /// LMDB's limit on the length of a key (`mdb_env_get_maxkeysize` of a default build).
    public static let maximumKeyBytes = 511

    /// The longest encoding of a value of fixed size in an index key (``appendIndexValue(_:budget:to:)``): a UUID's,
    /// a tag and 16 bytes. Nulls, bools, numbers, dates and object ids take fewer.
    static let largestFixedIndexValueBytes = 17

    /// The most a string, data or link value's escaped bytes can take in an index key: 200 bytes, each escaped to 2.
    /// A budget this large leaves every value as replica formats before 4 encoded it.
    public static let unboundedIndexValueBudget = 2 * maximumIndexedValueBytes

    /// The length of the longest encoded primary key of a type whose primary key property is of type `type`
    /// (``append(_:to:)``: a tag, then the bytes); the longest of any kind when `type` is `nil` or not a key type.
    public static func maximumEncodedBytes(ofPrimaryKey type: ScalarType?) -> Int {
        switch type {
        case .int: 1 + 8
        case .uuid: 1 + 16
        case .objectId: 1 + 12
        default: 1 + maximumPrimaryKeyBytes
        }
    }

    /// The budget of an indexed property's string, data and link values in its index keys: how many bytes their
    /// escaped bytes may take (an escaped zero byte counts 2), between the value's tag and its 2-byte terminator.
    /// `nil` when the key has no room for some value of any type, so that the property gets no index entries and
    /// queries read every object instead.
    ///
    /// An index key is `type ‖ 00 ‖ property ‖ 00 ‖ value ‖ primary key`, and must fit ``maximumKeyBytes``. The
    /// room left for the value is what the names and the longest primary key of the type's kind leave: the budget is
    /// that room less the tag and terminator, at most ``unboundedIndexValueBudget``; and when that room is less than
    /// the longest fixed-size value (a UUID, 17 bytes), the property is not indexable. Fixed-size values are not
    /// checked against the property's type, so a value of another type stored under it (which the merge rules do
    /// not let in) still fits.
    ///
    /// The budget depends on the schema alone, so every replica writes the same index keys, and a query encodes its
    /// values with the same one.
    ///
    /// - Parameters:
    ///   - type: the type's name.
    ///   - property: the property's name.
    ///   - primaryKey: the type of the type's primary key property, `nil` when unknown.
    public static func indexValueBudget(type: String, property: String, primaryKey: ScalarType?) -> Int? {
        let prefix = type.utf8.count + 1 + property.utf8.count + 1
        let room = maximumKeyBytes - prefix - maximumEncodedBytes(ofPrimaryKey: primaryKey)
        guard room >= largestFixedIndexValueBytes else { return nil }
        return min(room - 3, unboundedIndexValueBudget)
    }

    /// Why an object of `type` with primary key `key` cannot be stored (its key is too long), or `nil`.
    public static func problem(storing key: PrimaryKey, of type: String) -> String? {
        guard case .string(let string) = key, string.utf8.count > maximumPrimaryKeyBytes else { return nil }
        return "primary key of \(type) is \(string.utf8.count) bytes long; the limit is \(maximumPrimaryKeyBytes)"
    }

    /// Appends an order-preserving, self-delimiting encoding of a primary key.
    public static func append(_ key: PrimaryKey, to bytes: inout [UInt8]) {
        bytes.append(tag(key))
        switch key {
        case .string(let string): bytes.append(contentsOf: string.utf8)
        case .int(let int): appendOrdered(int, to: &bytes)
        case .uuid(let uuid): withUnsafeBytes(of: uuid.uuid) { bytes.append(contentsOf: $0) }
        case .objectId(let id): bytes.append(contentsOf: id.bytes)
        }
    }

    /// Whether `a` sorts before `b` in stored order (the order of their encodings, which scans return), without
    /// encoding them.
    public static func precedes(_ a: PrimaryKey, _ b: PrimaryKey) -> Bool {
        switch (a, b) {
        case (.string(let x), .string(let y)): return x.utf8Precedes(y)
        case (.int(let x), .int(let y)): return x < y
        case (.uuid(let x), .uuid(let y)):
            return withUnsafeBytes(of: x.uuid) { x in
                withUnsafeBytes(of: y.uuid) { y in x.lexicographicallyPrecedes(y) }
            }
        case (.objectId(let x), .objectId(let y)): return x.bytes.lexicographicallyPrecedes(y.bytes)
        default: return tag(a) < tag(b)
        }
    }

    /// The first byte of a key's encoding: keys of different primary key types sort by it.
    private static func tag(_ key: PrimaryKey) -> UInt8 {
        switch key {
        case .string: 1
        case .int: 2
        case .uuid: 3
        case .objectId: 4
        }
    }

    /// Decodes a primary key from `bytes` (which must hold exactly one).
    public static func primaryKey(from bytes: some Collection<UInt8>) -> PrimaryKey? {
        Array(bytes).withUnsafeBytes { primaryKey(from: $0[...]) }
    }

    /// Decodes a primary key from part of a stored key: the form scans use, which copies nothing for integer keys.
    public static func primaryKey(from bytes: Slice<UnsafeRawBufferPointer>) -> PrimaryKey? {
        guard let tag = bytes.first else { return nil }
        if tag == 2 {
            guard bytes.count == 9 else { return nil }
            var raw: UInt64 = 0
            for byte in bytes.dropFirst() { raw = raw << 8 | UInt64(byte) }
            return .int(Int64(bitPattern: raw ^ (1 << 63)))
        }
        let payload = Array(bytes.dropFirst())
        switch tag {
        case 1: return String(validating: payload, as: UTF8.self).map(PrimaryKey.string)
        case 3:
            guard payload.count == 16 else { return nil }
            var tuple: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &tuple) { target in
                for (index, byte) in payload.enumerated() { target[index] = byte }
            }
            return .uuid(UUID(uuid: tuple))
        case 4: return ObjectID(bytes: payload).map(PrimaryKey.objectId)
        default: return nil
        }
    }

    static func appendOrdered(_ value: Int64, to bytes: inout [UInt8]) {
        let flipped = UInt64(bitPattern: value) ^ (1 << 63)
        withUnsafeBytes(of: flipped.bigEndian) { bytes.append(contentsOf: $0) }
    }

    static func appendOrdered(_ value: Double, to bytes: inout [UInt8]) {
        // IEEE 754 bits sort like the numbers once negative values have every bit flipped and positive values
        // their sign bit. -0.0 and 0.0 are made equal, as a query compares them.
        let bits = (value == 0 ? 0.0 : value).bitPattern
        let ordered = bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63)
        withUnsafeBytes(of: ordered.bigEndian) { bytes.append(contentsOf: $0) }
    }

    /// Whether an index value (``appendIndexValue(_:budget:to:)``) is a double, date or float that is not a number.
    public static func isNaNIndexValue(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count == 9, let tag = bytes.first, tag == 3 || tag == 5 || tag == 11 else { return false }
        var ordered: UInt64 = 0
        for byte in bytes.dropFirst() { ordered = ordered << 8 | UInt64(byte) }
        let bits = ordered & (1 << 63) != 0 ? ordered & ~(1 << 63) : ~ordered
        return Double(bitPattern: bits).isNaN
    }

    /// Appends a zero-escaped, zero-terminated, possibly truncated byte string: `00` becomes `00 FF`, and `00 00`
    /// ends it, so shorter strings sort first and the encoding delimits itself. It keeps the longest prefix of
    /// `value` of at most ``maximumIndexedValueBytes`` bytes whose escaped bytes take at most `budget` (an escaped
    /// pair is never split). Truncation keeps the order: `a <= b` gives `encoding(a) <= encoding(b)`.
    static func appendTerminated(_ value: some Collection<UInt8>, budget: Int, to bytes: inout [UInt8]) {
        var written = 0
        var output = 0
        for byte in value {
            let cost = byte == 0 ? 2 : 1
            if written >= maximumIndexedValueBytes || output + cost > budget { break }
            bytes.append(byte)
            if byte == 0 { bytes.append(0xFF) }
            written += 1
            output += cost
        }
        bytes.append(0)
        bytes.append(0)
    }

    /// Whether `value` is encoded whole, and no longer value shares its encoding
    /// (``appendIndexValue(_:budget:to:)``): whether a range bound of `value` can be answered from the index. Always
    /// `true` for values of fixed size.
    public static func isEncodedWhole(_ value: Value, budget: Int) -> Bool {
        func fits(_ bytes: some Collection<UInt8>) -> Bool {
            // One more byte of any kind (a zero takes 2) must still fit, or a longer value would share the encoding.
            guard bytes.count < maximumIndexedValueBytes else { return false }
            var output = 0
            for byte in bytes { output += byte == 0 ? 2 : 1 }
            return output + 2 <= budget
        }
        switch value {
        case .string(let string): return fits(string.utf8)
        case .data(let data): return fits(data)
        case .link(let key):
            var inner: [UInt8] = []
            append(key, to: &inner)
            return fits(inner)
        case .decimal(let decimal): return fits(orderedBytes(decimal))
        default: return true
        }
    }

    /// Appends the order-preserving encoding of an indexed value, whose string, data and link values take at most
    /// `budget` bytes between their tag and terminator (``indexValueBudget(type:property:primaryKey:)``); longer
    /// ones are cut, so that equal values always encode alike but different ones may too. Returns `false` for values
    /// that are not indexed (lists and embedded objects).
    @discardableResult
    public static func appendIndexValue(_ value: Value, budget: Int, to bytes: inout [UInt8]) -> Bool {
        switch value {
        case .null: bytes.append(0)
        case .bool(let bool): bytes.append(contentsOf: [1, bool ? 1 : 0])
        case .int(let int):
            bytes.append(2)
            appendOrdered(int, to: &bytes)
        case .double(let double):
            bytes.append(3)
            appendOrdered(double, to: &bytes)
        case .string(let string):
            bytes.append(4)
            appendTerminated(string.utf8, budget: budget, to: &bytes)
        case .date(let date):
            bytes.append(5)
            appendOrdered(date.timeIntervalSince1970, to: &bytes)
        case .uuid(let uuid):
            bytes.append(6)
            withUnsafeBytes(of: uuid.uuid) { bytes.append(contentsOf: $0) }
        case .objectId(let id):
            bytes.append(7)
            bytes.append(contentsOf: id.bytes)
        case .link(let key):
            bytes.append(8)
            var inner: [UInt8] = []
            append(key, to: &inner)
            appendTerminated(inner, budget: budget, to: &bytes)
        case .data(let data):
            bytes.append(9)
            appendTerminated(data, budget: budget, to: &bytes)
        case .decimal(let decimal):
            bytes.append(10)
            appendTerminated(orderedBytes(decimal), budget: budget, to: &bytes)
        case .float(let float):
            // As the double holding it exactly: the same order.
            bytes.append(11)
            appendOrdered(Double(float), to: &bytes)
        case .embedded, .list, .dictionary, .typedLink:
            return false  // a typed link is held only by a mixed value, which is never indexed
        }
        return true
    }

    /// Bytes that sort as decimals do: NaN first, then negatives, zero, positives. A number is its normalized digits
    /// (no trailing zeros) and adjusted exponent (that of its first digit), so that the exponent orders first and the
    /// digits, as a string, next; a negative number's bytes are complemented, and end in 0xFF so that a longer one
    /// (further from zero) sorts first.
    package static func orderedBytes(_ decimal: Decimal) -> [UInt8] {
        if decimal.isNaN { return [0] }
        if decimal == 0 { return [2] }
        let normalized = Decimal(canonicalText: decimal.canonicalText) ?? decimal
        let digits = Array(normalized.significand.magnitude.description.utf8).map { $0 &- 48 &+ 1 }
        let adjusted = normalized.exponent + digits.count - 1
        let biased = UInt16(clamping: adjusted + 32_768)
        var bytes = [UInt8(biased >> 8), UInt8(biased & 0xFF)] + digits
        if normalized.sign == .minus {
            bytes = bytes.map { ~$0 }
            return [1] + bytes + [0xFF]
        }
        return [3] + bytes
    }

    /// The length of the index value encoding at the start of `bytes`, or `nil` when it is malformed.
    static func indexValueLength(_ bytes: Slice<UnsafeRawBufferPointer>) -> Int? {
        guard let tag = bytes.first else { return nil }
        let start = bytes.startIndex
        switch tag {
        case 0: return 1
        case 1: return 2
        case 2, 3, 5, 11: return 9
        case 6: return 17
        case 7: return 13
        case 4, 8, 9, 10:
            var index = start + 1
            while index + 1 < bytes.endIndex {
                if bytes[index] == 0 {
                    if bytes[index + 1] == 0 { return index + 2 - start }
                    index += 2
                } else {
                    index += 1
                }
            }
            return nil
        default: return nil
        }
    }
}
