import Foundation
import TributaryModel

// SORT, DISTINCT and LIMIT, applied in the order the query writes them (as Realm does): a later SORT becomes
// the primary order and an earlier one breaks its ties, a LIMIT before a SORT limits before sorting.

extension Evaluator {
    func order(_ objects: [(PrimaryKey, [String: Value])], by descriptors: [Descriptor])
        -> [(PrimaryKey, [String: Value])]
    {
        var objects = objects
        for descriptor in descriptors {
            switch descriptor {
            case .sort(let keys): objects = sort(objects, by: keys)
            case .distinct(let paths): objects = distinct(objects, by: paths)
            case .limit(let count): objects = Array(objects.prefix(count))
            }
        }
        return objects
    }

    /// A stable sort: objects with equal keys keep their order.
    private func sort(_ objects: [(PrimaryKey, [String: Value])], by keys: [SortKeyPath])
        -> [(PrimaryKey, [String: Value])]
    {
        let sortValues = objects.map { object in keys.map { values(of: $0.path, in: object.1).first ?? .null } }
        let indices = objects.indices.sorted { a, b in
            for (position, key) in keys.enumerated() {
                let order = sortOrder(sortValues[a][position], sortValues[b][position])
                if order != 0 { return key.ascending ? order < 0 : order > 0 }
            }
            return a < b
        }
        return indices.map { objects[$0] }
    }

    /// Keeps the first object of each distinct combination of values.
    private func distinct(_ objects: [(PrimaryKey, [String: Value])], by paths: [KeyPath])
        -> [(PrimaryKey, [String: Value])]
    {
        var seen = Set<[DistinctKey]>()
        return objects.filter { object in
            let key = paths.map { DistinctKey(values(of: $0, in: object.1).first ?? .null) }
            return seen.insert(key).inserted
        }
    }
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
    case .int, .double: 2
    case .string: 3
    case .data: 4
    case .date: 5
    case .objectId: 6
    case .uuid: 7
    case .link: 8
    case .embedded: 9
    case .list: 10
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
