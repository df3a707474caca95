import Foundation
import TributaryMerge
import TributaryModel
import TributaryQuery
import TributaryStorage
import TributaryViews

// Index planning: which index (if any) answers a query's constraints, and the key ranges to read. Query+Execution.swift
// carries the plan out.

extension Snapshot {
    /// A plan, with what carrying it out needs.
    struct PlannedQuery {
        var plan: QueryPlan
        var keys: [PrimaryKey] = []
        var constraint: IndexConstraint?
        /// The index key ranges `[lower, upper)` that hold the constraint's values (``indexBounds(_:budget:)``).
        var ranges: [([UInt8], [UInt8])] = []
        /// An index that gives the objects in the order of the query's SORT, tried before ``plan``.
        var order: IndexOrder?

        /// A walk of the index of the property a query sorts by (``QueryPlan/indexOrder(property:descending:constraint:)``).
        struct IndexOrder {
            var property: String
            /// The property's position in its type.
            var position: Int
            var ascending: Bool
            var limit: Int?
            /// The index key range to walk, `[lower, upper)`; open where `nil`.
            var lower: [UInt8]?
            var upper: [UInt8]?
        }
    }

    func plan(_ query: Query, type: ObjectSchema) throws -> PlannedQuery {
        let constraints = query.indexableConstraints
        if constraints.contains(where: \.isEmpty) { return PlannedQuery(plan: .noMatch) }
        if let keyName = type.primaryKey, let constraint = constraints.first(where: { $0.property == keyName }),
            case .equal(let values) = constraint.kind
        {
            let keys = values.compactMap(PrimaryKey.init)
            return PlannedQuery(plan: .primaryKey(count: keys.count), keys: keys)
        }
        // Whether an index answers for a property, and how its keys encode values: decided as its entries were
        // written.
        let usable: [(constraint: IndexConstraint, ranges: [([UInt8], [UInt8])])] = constraints.compactMap {
            constraint in
            guard let property = type[property: constraint.property],
                let budget = ViewStore.indexValueBudget(of: property, in: type),
                let ranges = Self.indexBounds(constraint, budget: budget)
            else { return nil }
            return (constraint, ranges)
        }
        // Equality first (fewest values first), then ranges.
        let best = usable.min { a, b in
            switch (a.constraint.kind, b.constraint.kind) {
            case (.equal(let x), .equal(let y)): x.count < y.count
            case (.equal, .range): true
            default: false
            }
        }
        var planned = PlannedQuery(plan: .fullScan)
        if let (best, ranges) = best {
            planned = PlannedQuery(
                plan: .index(property: best.property, constraint: best.description), constraint: best, ranges: ranges)
        }
        planned.order = try indexOrder(query, type: type, planned)
        return planned
    }

    /// An index walk that gives the objects in the order of the query's SORT (``PlannedQuery/IndexOrder``), when the
    /// query's clauses are one SORT on one indexed integer, double or date property (perhaps with a LIMIT after), and
    /// it reads no more than `planned` does: the query has no constraint an index answers, or only a range on that
    /// same property. Not when the property holds a value that is not a number (SORT puts NaN first, the index does
    /// not).
    func indexOrder(_ query: Query, type: ObjectSchema, _ planned: PlannedQuery) throws -> PlannedQuery.IndexOrder? {
        guard let sort = query.positionalClauses(for: type)?.singleSort, sort.position < type.properties.count else {
            return nil
        }
        let property = type.properties[sort.position]
        guard property.kind == .scalar(.int) || property.kind == .scalar(.double) || property.kind == .scalar(.date),
            ViewStore.indexValueBudget(of: property, in: type) != nil
        else { return nil }
        var order = PlannedQuery.IndexOrder(
            property: property.name, position: sort.position, ascending: sort.ascending, limit: sort.limit)
        switch planned.plan {
        case .fullScan:
            break
        case .index(let indexed, _):
            guard indexed == property.name, case .range? = planned.constraint?.kind, planned.ranges.count == 1 else {
                return nil
            }
            (order.lower, order.upper) = (planned.ranges[0].0, planned.ranges[0].1)
        default:
            return nil
        }
        if property.kind != .scalar(.int) {
            // Values that are not numbers sort at the ends of the property's numbers in the index (their tag's
            // range): its first and last entries there tell.
            var sample: [UInt8] = []
            let zero: Value = property.kind == .scalar(.date) ? .date(Date(timeIntervalSince1970: 0)) : .double(0)
            guard KeyEncoding.appendIndexValue(zero, budget: 0, to: &sample), let tag = sample.first, tag < 0xFF else {
                return nil
            }
            for reverse in [false, true] {
                var notANumber = false
                try replica.views.indexScan(
                    type: type.name, property: property.name, lower: [tag], upper: [tag + 1], reverse: reverse,
                    in: storage
                ) { _, value in
                    notANumber = KeyEncoding.isNaNIndexValue(value)
                    return false
                }
                if notANumber { return nil }
            }
        }
        return order
    }

    /// The encoded index ranges `[lower, upper)` that hold a constraint's values, whose property's values take at
    /// most `budget` bytes in its index keys, or `nil` when the index cannot answer it exactly enough: a range bound
    /// that the index keys cut (``KeyEncoding/isEncodedWhole(_:budget:)``), or on data. An equality's values are
    /// encoded as the index keys encode them, cut alike, so candidates include every match (and are checked after).
    static func indexBounds(_ constraint: IndexConstraint, budget: Int) -> [([UInt8], [UInt8])]? {
        func encode(_ value: Value) -> [UInt8]? {
            var bytes: [UInt8] = []
            return KeyEncoding.appendIndexValue(value, budget: budget, to: &bytes) ? bytes : nil
        }
        switch constraint.kind {
        case .equal(let values):
            var ranges: [([UInt8], [UInt8])] = []
            for value in values {
                guard let bytes = encode(value) else { return nil }
                ranges.append((bytes, successor(bytes)))
            }
            return ranges
        case .range(let lower, let lowerInclusive, let upper, let upperInclusive):
            for bound in [lower, upper].compactMap({ $0 }) {
                // Data has no order in queries: a range on it matches nothing, which the scan finds.
                if case .data = bound { return nil }
                if !KeyEncoding.isEncodedWhole(bound, budget: budget) { return nil }
            }
            guard let tagValue = lower ?? upper, let sample = encode(tagValue), let tag = sample.first else {
                return nil
            }
            var start: [UInt8] = [tag]
            if let lower, let bytes = encode(lower) { start = lowerInclusive ? bytes : successor(bytes) }
            var end: [UInt8] = [tag &+ 1]
            if let upper, let bytes = encode(upper) { end = upperInclusive ? successor(bytes) : bytes }
            return [(start, end)]
        }
    }

    /// The smallest byte string greater than every string that starts with `bytes`.
    static func successor(_ bytes: [UInt8]) -> [UInt8] {
        var result = bytes
        while let last = result.last, last == 0xFF { result.removeLast() }
        guard !result.isEmpty else { return [0xFF, 0xFF, 0xFF, 0xFF] }
        result[result.count - 1] += 1
        return result
    }
}
