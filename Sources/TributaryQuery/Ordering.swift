import Foundation
public import TributaryModel

// SORT, DISTINCT and LIMIT, applied in the order the query writes them (as Realm does): a later SORT becomes
// the primary order and an earlier one breaks its ties, a LIMIT before a SORT limits before sorting.

extension Evaluator {
    func order(_ objects: [(PrimaryKey, [String: Value])], by descriptors: [Descriptor])
        -> [(PrimaryKey, [String: Value])]
    {
        let steps: [ClauseStep<KeyPath>] = descriptors.map { descriptor in
            switch descriptor {
            case .sort(let keys): .sort(keys.map { ($0.path, $0.ascending) })
            case .distinct(let paths): .distinct(paths)
            case .limit(let count): .limit(count)
            }
        }
        return applyClauses(steps, count: objects.count) { object, path in
            values(of: path, in: objects[object].1).first ?? .null
        }.map { objects[$0] }
    }
}

/// A SORT, DISTINCT or LIMIT clause whose keys are read as `Key`s: key paths on values by name, or positions in the
/// queried type's properties (``PositionalClauses``).
enum ClauseStep<Key: Sendable>: Sendable {
    case sort([(key: Key, ascending: Bool)])
    case distinct([Key])
    case limit(Int)
}

/// The objects `steps` keep, as indices into the `count` objects given, in the order the clauses leave them.
/// `value(object, key)` is the value of `key` of object `object` (`Value/null` when it has none). SORT is stable:
/// objects with equal keys keep their order. DISTINCT keeps the first object of each combination of values.
func applyClauses<Key>(_ steps: [ClauseStep<Key>], count: Int, value: (_ object: Int, _ key: Key) -> Value) -> [Int] {
    var kept = Array(0..<count)
    for step in steps {
        switch step {
        case .sort(let keys):
            // Each key's values, read once per object: as numbers where they all are, else as they are.
            let columns = keys.map { key in SortColumn(kept.map { value($0, key.key) }) }
            let sorted = kept.indices.sorted { a, b in
                for (index, key) in keys.enumerated() {
                    let order = columns[index].order(a, b)
                    if order != 0 { return key.ascending ? order < 0 : order > 0 }
                }
                return a < b
            }
            kept = sorted.map { kept[$0] }
        case .distinct(let keys):
            var seen = Set<[DistinctKey]>()
            kept = kept.filter { object in seen.insert(keys.map { DistinctKey(value(object, $0)) }).inserted }
        case .limit(let count):
            kept = Array(kept.prefix(count))
        }
    }
    return kept
}

/// The total order SORT uses: null first, then numbers (NaN before all others, integers and doubles by value),
/// strings by their UTF-8 bytes (the order of their Unicode scalars), and other kinds by their natural order.
/// Values of different kinds, which a schema-checked property does not hold, order by kind.
func sortOrder(_ left: Value, _ right: Value) -> Int {
    let leftRank = rank(left)
    let rightRank = rank(right)
    if leftRank != rightRank { return leftRank < rightRank ? -1 : 1 }
    switch (left, right) {
    case (.bool(let a), .bool(let b)): return a == b ? 0 : (a ? 1 : -1)
    case (.data(let a), .data(let b)): return compareBytes(a, b)
    case (.link(let a), .link(let b)):
        if case .string(let x) = a, case .string(let y) = b { return compareBytes(x.utf8, y.utf8) }
        return a < b ? -1 : (a == b ? 0 : 1)
    default:
        if let order = queryOrder(left, right) { return order }
        // Only NaN, null and nested values are left: NaN equals NaN and comes before every number or date.
        let leftNaN = isNaN(left)
        let rightNaN = isNaN(right)
        if leftNaN != rightNaN { return leftNaN ? -1 : 1 }
        return 0
    }
}

private func rank(_ value: Value) -> Int {
    switch value {
    case .null: 0
    case .bool: 1
    case .int, .double, .decimal, .float: 2
    case .string: 3
    case .data: 4
    case .date: 5
    case .objectId: 6
    case .uuid: 7
    case .link, .typedLink: 8
    case .embedded: 9
    case .list: 10
    case .dictionary: 11
    }
}

/// A value as DISTINCT compares it: as `==` does (``EqualityKey``: numbers by value, strings by their bytes, dates by
/// their stored seconds), except that every NaN is one value, and so is each list.
private enum DistinctKey: Hashable {
    case equal(EqualityKey)
    case notANumber
    case other(Value)

    init(_ value: Value) {
        if let key = EqualityKey(value, options: []) {
            self = .equal(key)
        } else if isNaN(value) {
            self = .notANumber
        } else {
            self = .other(value)
        }
    }
}

/// SORT, DISTINCT and LIMIT clauses whose key paths each name one scalar property of the queried type (no link
/// followed, no list, no aggregate), resolved to the properties' positions: applied to values held by position, with
/// no dictionary per object and each sort key read once per object. ``Query/positionalClauses(for:)`` makes them.
public struct PositionalClauses: Sendable {
    let steps: [ClauseStep<Int>]

    /// The objects the clauses keep, as indices into the `count` objects given, in the order the clauses leave them:
    /// the same objects, in the same order, as ``Query/applyClauses(to:source:)`` gives. `value(object, position)` is
    /// the value of the property at `position` of object `object` (`Value/null` when it has none).
    public func order(count: Int, value: (_ object: Int, _ position: Int) -> Value) -> [Int] {
        applyClauses(steps, count: count, value: value)
    }

    /// How an ascending SORT orders two values: negative when `left` comes first, positive when `right` does, 0 when
    /// they tie.
    public static func sortOrder(_ left: Value, _ right: Value) -> Int { TributaryQuery.sortOrder(left, right) }

    /// When the clauses are one SORT on one property, perhaps followed by a LIMIT: the property's position, the
    /// direction and the limit. Objects taken in that property's order (ties in the order they were given) are then
    /// the result as they come, up to the limit: an index on the property gives them so.
    public var singleSort: (position: Int, ascending: Bool, limit: Int?)? {
        guard case .sort(let keys)? = steps.first, keys.count == 1 else { return nil }
        switch steps.count {
        case 1:
            return (keys[0].key, keys[0].ascending, nil)
        case 2:
            guard case .limit(let count) = steps[1] else { return nil }
            return (keys[0].key, keys[0].ascending, count)
        default:
            return nil
        }
    }
}

/// One sort key's values, one per object being sorted, compared as ``sortOrder(_:_:)`` orders them. When every value
/// is null or a number that a `Double` holds exactly (an integer of at most 2^53 in magnitude, a double that is not
/// NaN), or every value is null or a date (not NaN), the numbers (a date's seconds since 1970, as ``queryOrder(_:_:)``
/// compares dates) are compared directly, which gives the same order without looking at each value's kind.
private struct SortColumn {
    private let values: [Value]
    private let numbers: [Double]?
    /// Which values are null, when some are and the others are numbers.
    private let nulls: [Bool]?

    init(_ values: [Value]) {
        var numbers: [Double] = []
        numbers.reserveCapacity(values.count)
        var nulls: [Bool]?
        // Numbers and dates each order among themselves by their `Double`, but not with each other (by kind first).
        var dates: Bool?
        for (index, value) in values.enumerated() {
            switch value {
            case .double(let number) where !number.isNaN && dates != true:
                numbers.append(number)
                dates = false
            case .int(let integer) where integer.magnitude <= 1 << 53 && dates != true:
                numbers.append(Double(integer))
                dates = false
            case .date(let date) where !date.timeIntervalSince1970.isNaN && dates != false:
                numbers.append(date.timeIntervalSince1970)
                dates = true
            case .null:
                if nulls == nil { nulls = Array(repeating: false, count: values.count) }
                nulls?[index] = true
                numbers.append(0)
            default:
                self.values = values
                self.numbers = nil
                self.nulls = nil
                return
            }
        }
        self.values = []
        self.numbers = numbers
        self.nulls = nulls
    }

    /// The order of the values of objects `a` and `b`: negative, zero or positive.
    func order(_ a: Int, _ b: Int) -> Int {
        guard let numbers else { return sortOrder(values[a], values[b]) }
        if let nulls, nulls[a] || nulls[b] {
            // Null comes first.
            return nulls[a] == nulls[b] ? 0 : (nulls[a] ? -1 : 1)
        }
        let (x, y) = (numbers[a], numbers[b])
        return x < y ? -1 : (x > y ? 1 : 0)
    }
}

extension Query {
    /// The query's clauses resolved to positions in `type` (the queried type), when every SORT and DISTINCT key path
    /// names one scalar property of it; `nil` when one follows a link, reads a list or an aggregate, or when there are
    /// no clauses.
    public func positionalClauses(for type: ObjectSchema) -> PositionalClauses? {
        guard type.name == typeName, !descriptors.isEmpty else { return nil }
        func position(_ path: KeyPath) -> Int? { Self.scalarPosition(of: path, in: type) }
        var steps: [ClauseStep<Int>] = []
        for descriptor in descriptors {
            switch descriptor {
            case .sort(let keys):
                var resolved: [(key: Int, ascending: Bool)] = []
                for key in keys {
                    guard let found = position(key.path) else { return nil }
                    resolved.append((found, key.ascending))
                }
                steps.append(.sort(resolved))
            case .distinct(let paths):
                var resolved: [Int] = []
                for path in paths {
                    guard let found = position(path) else { return nil }
                    resolved.append(found)
                }
                steps.append(.distinct(resolved))
            case .limit(let count):
                steps.append(.limit(count))
            }
        }
        return PositionalClauses(steps: steps)
    }
}
