import Foundation
import TributaryModel

// How two values compare in a query. Every function here is total: values of kinds that cannot be compared
// (which the type checker refuses, but stored data may still hold) compare false, never trap.

/// The three-way comparison of two values for `<`, `<=`, `>`, `>=` and `BETWEEN`: negative, zero or positive;
/// `nil` when they cannot be ordered (a null, a NaN, or two kinds that do not compare).
///
/// Integers and doubles compare by their exact numeric values; strings by their UTF-8 bytes, which is the
/// order of their Unicode scalars; object ids and UUIDs by their bytes.
func queryOrder(_ left: Value, _ right: Value) -> Int? {
    switch (left, right) {
    case (.int(let a), .int(let b)): return a < b ? -1 : (a == b ? 0 : 1)
    case (.double(let a), .double(let b)): return compare(a, b)
    case (.int(let a), .double(let b)): return compare(a, b)
    case (.double(let a), .int(let b)): return compare(b, a).map { -$0 }
    case (.decimal, _), (_, .decimal): return compareDecimals(left, right)
    // A float holds a double exactly: compared as that double.
    case (.float(let a), _): return queryOrder(.double(Double(a)), right)
    case (_, .float(let b)): return queryOrder(left, .double(Double(b)))
    case (.string(let a), .string(let b)): return compareBytes(a.utf8, b.utf8)
    // As stored: a date read back can differ in its last bit from the one written (Foundation counts from 2001),
    // and both read the same seconds since 1970.
    case (.date(let a), .date(let b)): return compare(a.timeIntervalSince1970, b.timeIntervalSince1970)
    case (.objectId(let a), .objectId(let b)): return compareBytes(a.bytes, b.bytes)
    case (.uuid(let a), .uuid(let b)): return compareBytes(bytes(of: a), bytes(of: b))
    default: return nil
    }
}

/// Whether two values are equal for `==`, `!=` and `IN`: nulls equal only nulls, numbers compare by value,
/// strings by their UTF-8 bytes after folding for `[c]` and `[d]`.
func queryEqual(_ left: Value, _ right: Value, options: StringOptions) -> Bool {
    switch (left, right) {
    case (.null, .null): return true
    case (.null, _), (_, .null): return false
    case (.string(let a), .string(let b)):
        if options.isEmpty { return a.hasSameUTF8(as: b) }
        return fold(a, options).hasSameUTF8(as: fold(b, options))
    case (.int, .int), (.int, .double), (.double, .int), (.double, .double), (.date, .date), (.decimal, _),
        (_, .decimal), (.float, _), (_, .float):
        return queryOrder(left, right) == 0
    case (.link(.string(let a)), .link(.string(let b))): return a.hasSameUTF8(as: b)
    case (.link(let a), .link(let b)): return a == b
    case (.typedLink(let typeA, let a), .typedLink(let typeB, let b)):
        return typeA == typeB && queryEqual(.link(a), .link(b), options: [])
    case (.bool(let a), .bool(let b)): return a == b
    case (.data(let a), .data(let b)): return a == b
    case (.uuid(let a), .uuid(let b)): return a == b
    case (.objectId(let a), .objectId(let b)): return a == b
    case (.embedded(let a), .embedded(let b)): return a == b
    default: return false
    }
}

/// `left op right` for one pair of values (`BETWEEN` is evaluated as two ordering comparisons by the caller).
func queryCompare(_ left: Value, _ op: ComparisonOperator, _ right: Value, options: StringOptions) -> Bool {
    switch op {
    case .equal, .in: return queryEqual(left, right, options: options)
    case .notEqual: return !queryEqual(left, right, options: options)
    case .less: return queryOrder(left, right).map { $0 < 0 } ?? false
    case .lessEqual: return queryOrder(left, right).map { $0 <= 0 } ?? false
    case .greater: return queryOrder(left, right).map { $0 > 0 } ?? false
    case .greaterEqual: return queryOrder(left, right).map { $0 >= 0 } ?? false
    case .beginsWith, .endsWith, .contains, .like: return stringOperator(op, left, right, options: options)
    case .between: return false
    case .text:
        return false  // never asked: the type checker makes every TEXT comparison a ``FullTextSearch``
    }
}

/// `BEGINSWITH`, `ENDSWITH`, `CONTAINS` and `LIKE`. A null on either side never matches.
private func stringOperator(_ op: ComparisonOperator, _ left: Value, _ right: Value, options: StringOptions) -> Bool {
    switch (left, right) {
    case (.string(let text), .string(let pattern)):
        let text = options.isEmpty ? text : fold(text, options)
        let pattern = options.isEmpty ? pattern : fold(pattern, options)
        switch op {
        case .like: return wildcardMatch(Array(text.unicodeScalars), Array(pattern.unicodeScalars))
        default:
            var text = text
            var pattern = pattern
            return text.withUTF8 { text in pattern.withUTF8 { pattern in byteOperator(op, text, pattern) } }
        }
    case (.data(let data), .data(let pattern)):
        guard op != .like else { return false }
        return Array(data).withUnsafeBufferPointer { data in
            Array(pattern).withUnsafeBufferPointer { pattern in byteOperator(op, data, pattern) }
        }
    default:
        return false
    }
}

private func byteOperator(
    _ op: ComparisonOperator, _ text: UnsafeBufferPointer<UInt8>, _ pattern: UnsafeBufferPointer<UInt8>
)
    -> Bool
{
    guard pattern.count <= text.count else { return false }
    switch op {
    case .beginsWith: return text.starts(with: pattern)
    case .endsWith: return text[(text.count - pattern.count)...].elementsEqual(pattern)
    case .contains: return containsBytes(text, pattern)
    default: return false
    }
}

/// Substring search; UTF-8 is self-synchronising, so a byte match is a character-sequence match.
private func containsBytes(_ text: UnsafeBufferPointer<UInt8>, _ pattern: UnsafeBufferPointer<UInt8>) -> Bool {
    guard !pattern.isEmpty else { return true }
    guard pattern.count <= text.count, let haystack = text.baseAddress, let needle = pattern.baseAddress else {
        return false
    }
    // memchr finds each candidate start, memcmp checks it.
    var start = haystack
    var remaining = text.count
    while remaining >= pattern.count {
        guard let found = memchr(start, Int32(needle.pointee), remaining - pattern.count + 1) else { return false }
        let candidate = UnsafePointer(found.assumingMemoryBound(to: UInt8.self))
        if memcmp(candidate, needle, pattern.count) == 0 { return true }
        remaining -= (candidate - start) + 1
        start = candidate + 1
    }
    return false
}

/// `LIKE`: `*` matches any run of scalars (also none), `?` exactly one. Linear backtracking on the last `*`.
func wildcardMatch(_ text: [Unicode.Scalar], _ pattern: [Unicode.Scalar]) -> Bool {
    var t = 0
    var p = 0
    var star = -1
    var starText = 0
    while t < text.count {
        if p < pattern.count, pattern[p] == "*" {
            star = p
            starText = t
            p += 1
        } else if p < pattern.count, pattern[p] == "?" || pattern[p] == text[t] {
            t += 1
            p += 1
        } else if star >= 0 {
            p = star + 1
            starText += 1
            t = starText
        } else {
            return false
        }
    }
    while p < pattern.count, pattern[p] == "*" { p += 1 }
    return p == pattern.count
}

/// Folds a string for `[c]` (lowercase, full Unicode case mapping) and `[d]` (canonical decomposition, then
/// combining marks removed).
func fold(_ string: String, _ options: StringOptions) -> String {
    var result = string
    if options.contains(.diacriticInsensitive) { result = removingDiacritics(result) }
    if options.contains(.caseInsensitive) { result = result.lowercased() }
    return result
}

private func removingDiacritics(_ string: String) -> String {
    if string.utf8.allSatisfy({ $0 < 0x80 }) { return string }
    var scalars = String.UnicodeScalarView()
    for scalar in string.decomposedStringWithCanonicalMapping.unicodeScalars
    where scalar.properties.generalCategory != .nonspacingMark {
        scalars.append(scalar)
    }
    return String(scalars)
}

/// The comparison of two doubles: negative, zero or positive; `nil` for NaN.
private func compare(_ a: Double, _ b: Double) -> Int? {
    if a.isNaN || b.isNaN { return nil }
    return a < b ? -1 : (a == b ? 0 : 1)
}

/// Whether a value is a NaN double or a date that is not a number: it equals nothing and orders with nothing.
func isNaN(_ value: Value) -> Bool {
    switch value {
    case .double(let double): double.isNaN
    case .decimal(let decimal): decimal.isNaN
    case .float(let float): float.isNaN
    case .date(let date): date.timeIntervalSince1970.isNaN
    default: false
    }
}

/// The exact comparison of an integer with a double: negative, zero or positive; `nil` for NaN.
private func compare(_ integer: Int64, _ double: Double) -> Int? {
    if double.isNaN { return nil }
    // 2^63 is exactly representable; every Int64 is below it and at or above -2^63.
    if double >= 9_223_372_036_854_775_808.0 { return -1 }
    if double < -9_223_372_036_854_775_808.0 { return 1 }
    let whole = double.rounded(.towardZero)
    guard let truncated = Int64(exactly: whole) else { return nil }
    if integer < truncated { return -1 }
    if integer > truncated { return 1 }
    let fraction = double - whole
    return fraction > 0 ? -1 : (fraction < 0 ? 1 : 0)
}

/// Lexicographic three-way comparison of byte sequences.
func compareBytes<A: Sequence, B: Sequence>(_ a: A, _ b: B) -> Int where A.Element == UInt8, B.Element == UInt8 {
    var left = a.makeIterator()
    var right = b.makeIterator()
    while true {
        switch (left.next(), right.next()) {
        case (nil, nil): return 0
        case (nil, _): return -1
        case (_, nil): return 1
        case (let x?, let y?): if x != y { return x < y ? -1 : 1 }
        }
    }
}

func bytes(of uuid: UUID) -> [UInt8] {
    withUnsafeBytes(of: uuid.uuid) { Array($0) }
}

/// A value as `==` and `IN` compare it (``queryEqual(_:_:options:)``), for finding it among many by hashing: two values
/// are equal exactly when their keys are. `nil` for values that equal nothing (a NaN, a list).
enum EqualityKey: Hashable, Sendable {
    case null
    case bool(Bool)
    /// An integer, or a double that is exactly one: `1` and `1.0` are one key, as `==` has them.
    case integer(Int64)
    case double(UInt64)
    /// The UTF-8 bytes, folded for `[c]` and `[d]`.
    case string([UInt8])
    /// Seconds since 1970, as stored; `0` for both zeros.
    case date(UInt64)
    /// A decimal that no integer or double equals, by its canonical text.
    case decimal(String)
    case link(PrimaryKey)
    /// Data, UUIDs, object ids and embedded objects, which `==` compares as values.
    case other(Value)

    init?(_ value: Value, options: StringOptions) {
        switch value {
        case .null: self = .null
        case .bool(let bool): self = .bool(bool)
        case .int(let int): self = .integer(int)
        case .double(let double):
            if double.isNaN { return nil }
            if let int = Int64(exactly: double) { self = .integer(int) } else { self = .double(double.bitPattern) }
        case .float(let float):
            self.init(.double(Double(float)), options: options)
        case .string(let string):
            self = .string(Array((options.isEmpty ? string : fold(string, options)).utf8))
        case .date(let date):
            let seconds = date.timeIntervalSince1970
            if seconds.isNaN { return nil }
            self = .date(seconds == 0 ? 0 : seconds.bitPattern)
        case .decimal(let decimal):
            if decimal.isNaN { return nil }
            // Equal to an integer or a double exactly when ``queryOrder`` says so: it compares them as decimals.
            if let int = Int64(exactly: decimal) {
                self = .integer(int)
            } else if let double = Double(exactlyComparing: decimal) {
                self = .double(double.bitPattern)
            } else {
                self = .decimal(decimal.canonicalText)
            }
        case .link(let key): self = .link(key)
        case .list, .dictionary: return nil
        case .data, .uuid, .objectId, .embedded, .typedLink: self = .other(value)
        }
    }
}

/// The values of a list constant, hashed as `==` and `IN` compare them: whether a value equals any of them takes one
/// lookup rather than one comparison per value (`_id IN $0` with 50,000 ids, for every object a query tests).
struct EqualityLookup: Hashable, Sendable {
    /// Lists shorter than this are compared value by value.
    static let minimumCount = 8

    private let keys: Set<EqualityKey>
    private let options: StringOptions

    init(_ values: [Value], options: StringOptions) {
        self.keys = Set(values.compactMap { EqualityKey($0, options: options) })
        self.options = options
    }

    /// Whether `value` equals one of the values, as `queryEqual` decides.
    func contains(_ value: Value) -> Bool {
        EqualityKey(value, options: options).map(keys.contains) ?? false
    }
}

/// A number as a decimal comparison sees it: a decimal, or where a double (or float) lies that no decimal holds.
private enum DecimalOperand {
    case value(Decimal)
    /// Beyond every decimal: -1 below, 1 above (an infinity, or a double past `Decimal`'s range).
    case beyond(Int)
    /// Nearer zero than every decimal but zero, with its sign (a double below `Decimal`'s smallest magnitude).
    case tiny(Int)

    init?(_ value: Value) {
        switch value {
        case .decimal(let decimal):
            if decimal.isNaN { return nil }
            self = .value(decimal)
        case .int(let int): self = .value(Decimal(int))
        case .float(let float): self.init(.double(Double(float)))
        case .double(let double):
            if double.isNaN { return nil }
            if let decimal = Decimal(nearest: double) {
                self = .value(decimal)
            } else if double.isInfinite || double.magnitude >= 1 {
                self = .beyond(double < 0 ? -1 : 1)
            } else {
                self = .tiny(double < 0 ? -1 : 1)
            }
        default: return nil
        }
    }
}

/// The comparison of two numbers of which one at least is a decimal, as decimals (Realm's rule): an integer converts
/// exactly, a double (or float) to the decimal its shortest form writes (`Decimal(nearest:)`); `nil` for a NaN, or a
/// value that is not a number. An infinite double, or one past `Decimal`'s range, is beyond every decimal; one nearer
/// zero than every decimal lies between zero and the decimals of its sign.
private func compareDecimals(_ left: Value, _ right: Value) -> Int? {
    guard let a = DecimalOperand(left), let b = DecimalOperand(right) else { return nil }
    switch (a, b) {
    case (.value(let x), .value(let y)): return x < y ? -1 : (x == y ? 0 : 1)
    case (.beyond(let x), .beyond(let y)), (.tiny(let x), .tiny(let y)): return x == y ? 0 : (x < y ? -1 : 1)
    case (.beyond(let x), _): return x
    case (_, .beyond(let y)): return -y
    case (.tiny(let sign), .value(let decimal)):
        if decimal == 0 { return sign }
        return decimal > 0 ? -1 : 1
    case (.value(let decimal), .tiny(let sign)):
        if decimal == 0 { return -sign }
        return decimal > 0 ? 1 : -1
    }
}

extension Int64 {
    /// The decimal's value when it is an integer in range, else `nil`.
    init?(exactly decimal: Decimal) {
        guard !decimal.isNaN, decimal >= Decimal(Int64.min), decimal <= Decimal(Int64.max) else { return nil }
        // In its normalized form (no trailing zeros), an integer has no negative exponent.
        let normalized = Decimal(canonicalText: decimal.canonicalText) ?? decimal
        guard normalized.exponent >= 0 else { return nil }
        let value = (normalized as NSDecimalNumber).int64Value
        guard Decimal(value) == decimal else { return nil }
        self = value
    }
}

extension Double {
    /// The double that ``queryOrder(_:_:)`` finds equal to `decimal`, when there is one: the double nearest the
    /// decimal, if converting it back gives the decimal.
    init?(exactlyComparing decimal: Decimal) {
        // Swift's parse is correctly rounded; Foundation's `doubleValue` is not on Linux.
        guard !decimal.isNaN, let double = Double(decimal.description), double.isFinite,
            Decimal(nearest: double) == decimal
        else { return nil }
        self = double
    }
}
