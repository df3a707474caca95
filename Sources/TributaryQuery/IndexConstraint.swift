import Foundation
public import TributaryModel

/// What a query requires of one property, in a form an index can answer.
///
/// ``Query/indexableConstraints`` lists one constraint per property, for the properties of the queried type
/// that the query constrains at its top level (the whole predicate, or one of the terms of a top-level `AND`)
/// with `==`, `IN`, `<`, `<=`, `>`, `>=` or `BETWEEN` against constants, without `[c]` or `[d]`, on a scalar
/// property that is not a list. A storage layer picks one, reads its candidates from an index, and still runs
/// ``Query/matches(_:source:)`` on each: the constraint narrows, it does not decide.
///
/// Values are converted to the property's type: on an `int` property, `> 2.5` becomes `>= 3` and `== 2.5`
/// matches nothing. Ranges use the order of SORT (strings by UTF-8 bytes), and a null never falls in a range.
///
/// ```swift
/// let query = try Query("priority >= 2 AND priority < 5 AND done == false", type: task, schema: schema)
/// query.indexableConstraints
/// // [priority: range(lower: 2, lowerInclusive: true, upper: 5, upperInclusive: false), done: equal([false])]
/// ```
public struct IndexConstraint: Hashable, Sendable, CustomStringConvertible {
    /// The values a property may take.
    public enum Kind: Hashable, Sendable {
        /// One of these values (none: nothing matches). May contain ``Value/null``.
        case equal([Value])
        /// Between the bounds; a `nil` bound is unbounded.
        case range(lower: Value?, lowerInclusive: Bool, upper: Value?, upperInclusive: Bool)
    }

    /// The name of a property of the queried type.
    public var property: String
    /// The values the property may take.
    public var kind: Kind

    /// A constraint on the property named `property`.
    public init(property: String, kind: Kind) {
        self.property = property
        self.kind = kind
    }

    /// Whether no value satisfies the constraint, so the query matches nothing.
    public var isEmpty: Bool {
        switch kind {
        case .equal(let values): return values.isEmpty
        case .range(let lower?, let lowerInclusive, let upper?, let upperInclusive):
            guard let order = queryOrder(lower, upper) else { return false }
            return order > 0 || (order == 0 && !(lowerInclusive && upperInclusive))
        case .range: return false
        }
    }

    public var description: String {
        switch kind {
        case .equal(let values):
            return "\(property) IN {\(values.map(\.description).joined(separator: ", "))}"
        case .range(let lower, let lowerInclusive, let upper, let upperInclusive):
            let low = lower.map { "\(lowerInclusive ? "[" : "(")\($0)" } ?? "(-inf"
            let high = upper.map { "\($0)\(upperInclusive ? "]" : ")")" } ?? "+inf)"
            return "\(property) in \(low), \(high)"
        }
    }
}

// MARK: Extraction

extension IndexConstraint {
    /// The constraints of a checked predicate, merged per property, in the order properties first appear.
    static func extract(from predicate: Predicate) -> [IndexConstraint] {
        let terms: [Predicate]
        if case .and(let conjuncts) = predicate { terms = conjuncts } else { terms = [predicate] }
        var merged: [IndexConstraint] = []
        for case .comparison(let comparison) in terms {
            guard let constraint = constraint(comparison) else { continue }
            if let index = merged.firstIndex(where: { $0.property == constraint.property }) {
                merged[index].kind = intersect(merged[index].kind, constraint.kind)
            } else {
                merged.append(constraint)
            }
        }
        return merged
    }

    /// A one-step key path to a scalar, non-list property: its name and type.
    private static func indexableProperty(_ operand: Operand) -> (String, ScalarType)? {
        guard case .keyPath(let path) = operand, path.operation == nil, path.steps.count == 1 else { return nil }
        let step = path.steps[0]
        // A subscript into a mixed value (`payload[0]`) reads one of its elements, not the property's value.
        guard !step.isList, !step.isDictionary, step.mixedSelectors.isEmpty, case .scalar(let type) = step.target else {
            return nil
        }
        return (step.name, type)
    }

    private static func constraint(_ comparison: Comparison) -> IndexConstraint? {
        // `a == ALL {...}` and `a == NONE {...}` are not lookups of any one value.
        guard comparison.options.isEmpty, comparison.rightQuantifier == .anyElement else { return nil }
        var op = comparison.op
        let property: (String, ScalarType)
        let other: Operand
        if let found = indexableProperty(comparison.left) {
            property = found
            other = comparison.right
        } else if let found = indexableProperty(comparison.right), case .constant = comparison.left {
            property = found
            other = comparison.left
            // `5 < a` is `a > 5`.
            switch op {
            case .less: op = .greater
            case .lessEqual: op = .greaterEqual
            case .greater: op = .less
            case .greaterEqual: op = .lessEqual
            case .equal: break
            default: return nil
            }
        } else {
            return nil
        }
        let (name, type) = property
        let kind: Kind?
        switch (op, other) {
        case (.equal, .constant(let value)):
            kind = .equal(equalValues([value], type: type))
        case (.equal, .constants(let values)), (.in, .constants(let values)):
            kind = .equal(equalValues(values, type: type))
        case (.less, .constant(let value)), (.lessEqual, .constant(let value)):
            kind = upperBound(value, inclusive: op == .lessEqual, type: type)
        case (.greater, .constant(let value)), (.greaterEqual, .constant(let value)):
            kind = lowerBound(value, inclusive: op == .greaterEqual, type: type)
        case (.between, .constants(let bounds)) where bounds.count == 2:
            kind = lowerBound(bounds[0], inclusive: true, type: type)
                .flatMap { intersect($0, upperBound(bounds[1], inclusive: true, type: type) ?? $0) }
        default:
            kind = nil
        }
        return kind.map { IndexConstraint(property: name, kind: $0) }
    }

    // MARK: Converting constants to the property's type

    /// The values among `values` that a property of `type` can equal, converted to `type`.
    private static func equalValues(_ values: [Value], type: ScalarType) -> [Value] {
        var result: [Value] = []
        var seen = Set<EqualityKey>()
        for value in values {
            // No value equals NaN (nor a list), which have no key.
            guard let converted = convert(value, to: type), let key = EqualityKey(converted, options: []) else {
                continue
            }
            if seen.insert(key).inserted { result.append(converted) }
        }
        return result
    }

    /// `value` as a value of `type` when it is exactly one; `nil` when no value of `type` equals it.
    private static func convert(_ value: Value, to type: ScalarType) -> Value? {
        switch (value, type) {
        case (.double(let double), .int): return Int64(exactly: double).map(Value.int)
        case (.int(let int), .double): return Double(exactly: int).map(Value.double)
        case (.int, .decimal), (.double, .decimal): return decimalBound(value)
        case (.decimal(let decimal), .int): return Int64(exactly: decimal).map(Value.int)
        case (.decimal(let decimal), .double): return Double(exactlyComparing: decimal).map(Value.double)
        case (.decimal, let type) where type != .decimal: return nil
        case (.int(let int), .float): return Float(exactly: int).map(Value.float)
        case (.double(let double), .float): return Float(exactly: double).map(Value.float)
        case (.float(let float), .double): return .double(Double(float))
        case (.float(let float), .int): return Int64(exactly: float).map(Value.int)
        case (.float, let type) where type != .float: return nil
        default: return value
        }
    }

    /// An integer or finite double as the decimal ``queryOrder(_:_:)`` compares a decimal property's values with.
    private static func decimalBound(_ value: Value) -> Value? {
        switch value {
        case .int(let int): return .decimal(Decimal(int))
        case .double(let double): return Decimal(nearest: double).map(Value.decimal)
        default: return nil
        }
    }

    /// `property > value` (or `>=`); `nil` when it cannot be expressed exactly (then it is not indexable).
    private static func lowerBound(_ value: Value, inclusive: Bool, type: ScalarType) -> Kind? {
        switch (value, type) {
        case (.null, _): return .equal([])
        case (.double(let double), .int):
            if double.isNaN || double >= 9_223_372_036_854_775_808.0 { return .equal([]) }
            if double < -9_223_372_036_854_775_808.0 {
                return .range(lower: nil, lowerInclusive: false, upper: nil, upperInclusive: false)
            }
            let ceiling = double.rounded(.up)
            guard let int = Int64(exactly: ceiling) else { return nil }
            let stillInclusive = ceiling == double ? inclusive : true
            return .range(lower: .int(int), lowerInclusive: stillInclusive, upper: nil, upperInclusive: false)
        case (.int(let int), .double):
            guard let double = Double(exactly: int) else { return nil }
            return .range(lower: .double(double), lowerInclusive: inclusive, upper: nil, upperInclusive: false)
        case (.int, .decimal), (.double, .decimal):
            // A NaN or infinite double is left to a scan: the index holds decimals only.
            guard let bound = decimalBound(value) else { return isNaN(value) ? .equal([]) : nil }
            return .range(lower: bound, lowerInclusive: inclusive, upper: nil, upperInclusive: false)
        case (.decimal, let type) where type != .decimal:
            return nil
        case (.int, .float), (.double, .float), (.float, .int), (.float, .double), (.float, .decimal):
            // Left to a scan: the checker gives a float property float constants, so these are rare.
            return nil
        case _ where isNaN(value):
            return .equal([])
        default:
            return .range(lower: value, lowerInclusive: inclusive, upper: nil, upperInclusive: false)
        }
    }

    /// `property < value` (or `<=`); `nil` when it cannot be expressed exactly.
    private static func upperBound(_ value: Value, inclusive: Bool, type: ScalarType) -> Kind? {
        switch (value, type) {
        case (.null, _): return .equal([])
        case (.double(let double), .int):
            if double.isNaN || double < -9_223_372_036_854_775_808.0 { return .equal([]) }
            if double >= 9_223_372_036_854_775_808.0 {
                return .range(lower: nil, lowerInclusive: false, upper: nil, upperInclusive: false)
            }
            let floor = double.rounded(.down)
            guard let int = Int64(exactly: floor) else { return nil }
            let stillInclusive = floor == double ? inclusive : true
            return .range(lower: nil, lowerInclusive: false, upper: .int(int), upperInclusive: stillInclusive)
        case (.int(let int), .double):
            guard let double = Double(exactly: int) else { return nil }
            return .range(lower: nil, lowerInclusive: false, upper: .double(double), upperInclusive: inclusive)
        case (.int, .decimal), (.double, .decimal):
            guard let bound = decimalBound(value) else { return isNaN(value) ? .equal([]) : nil }
            return .range(lower: nil, lowerInclusive: false, upper: bound, upperInclusive: inclusive)
        case (.decimal, let type) where type != .decimal:
            return nil
        case (.int, .float), (.double, .float), (.float, .int), (.float, .double), (.float, .decimal):
            // Left to a scan: the checker gives a float property float constants, so these are rare.
            return nil
        case _ where isNaN(value):
            return .equal([])
        default:
            return .range(lower: nil, lowerInclusive: false, upper: value, upperInclusive: inclusive)
        }
    }

    // MARK: Merging

    /// The values both constraints allow. Bounds that cannot be ordered (which checked queries do not produce)
    /// keep the first constraint.
    private static func intersect(_ first: Kind, _ second: Kind) -> Kind {
        switch (first, second) {
        case (.equal(let a), .equal(let b)):
            let lookup = EqualityLookup(b, options: [])
            return .equal(a.filter(lookup.contains))
        case (.equal(let values), .range), (.range, .equal(let values)):
            let range = first.isRange ? first : second
            return .equal(values.filter { range.contains($0) })
        case (
            .range(let lowA, let lowAIn, let highA, let highAIn), .range(let lowB, let lowBIn, let highB, let highBIn)
        ):
            let (low, lowIn) = tighter(lowA, lowAIn, lowB, lowBIn, preferGreater: true)
            let (high, highIn) = tighter(highA, highAIn, highB, highBIn, preferGreater: false)
            return .range(lower: low, lowerInclusive: lowIn, upper: high, upperInclusive: highIn)
        }
    }

    private static func tighter(_ a: Value?, _ aInclusive: Bool, _ b: Value?, _ bInclusive: Bool, preferGreater: Bool)
        -> (Value?, Bool)
    {
        guard let a else { return (b, bInclusive) }
        guard let b else { return (a, aInclusive) }
        guard let order = queryOrder(a, b) else { return (a, aInclusive) }
        if order == 0 { return (a, aInclusive && bInclusive) }
        return (order > 0) == preferGreater ? (a, aInclusive) : (b, bInclusive)
    }
}

extension IndexConstraint.Kind {
    fileprivate var isRange: Bool { if case .range = self { true } else { false } }

    /// Whether `value` is within a range (always false for `.equal`, which the caller does not ask).
    fileprivate func contains(_ value: Value) -> Bool {
        guard case .range(let lower, let lowerInclusive, let upper, let upperInclusive) = self else { return false }
        if let lower {
            guard let order = queryOrder(value, lower), order > 0 || (order == 0 && lowerInclusive) else {
                return false
            }
        }
        if let upper {
            guard let order = queryOrder(value, upper), order < 0 || (order == 0 && upperInclusive) else {
                return false
            }
        }
        return true
    }
}
