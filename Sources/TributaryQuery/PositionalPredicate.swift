public import TributaryModel

/// A query's predicate compiled against one object type, testing an object's values by position in the type's
/// properties rather than by name: what a scan runs, without a dictionary per object.
///
/// Only predicates that compare scalar properties of the queried type with constants (`score > 900`,
/// `text CONTAINS[c] $0`, `kind IN {1, 2}`, `size BETWEEN {1, 5}`), joined by `AND`, `OR` and `NOT`, compile;
/// ``Query/positionalPredicate(for:)`` returns `nil` for the others, which ``Query/matches(_:source:)`` handles.
/// Where it compiles, it gives exactly what ``Query/matches(_:source:)`` gives on the same values.
public struct PositionalPredicate: Sendable {
    indirect enum Node: Sendable {
        case constant(Bool)
        case and([Node])
        case or([Node])
        case not(Node)
        /// `values[position] op constant`.
        case compare(position: Int, op: ComparisonOperator, options: StringOptions, constant: Value)
        /// `values[position] op` any of `constants` (`IN`, or a list argument).
        case compareAny(position: Int, op: ComparisonOperator, options: StringOptions, constants: [Value])
        /// `values[position]` equal to any of many constants, found by hashing.
        case member(position: Int, lookup: EqualityLookup)
        /// `values[position] BETWEEN {lower, upper}`.
        case between(position: Int, lower: Value, upper: Value)
    }

    let root: Node

    /// Whether the object whose values (by position in the type's properties) are `values` matches. A position
    /// out of range reads as null.
    public func matches(_ values: [Value]) -> Bool {
        matches { values.indices.contains($0) ? values[$0] : .null }
    }

    /// Whether the object matches whose value at each position `value` gives. It is asked only for the positions the
    /// terms evaluated need (`a > 1 AND b == 2` asks for no `b` when `a` is 1), so a reader can decode values on
    /// demand.
    public func matches(_ value: (Int) -> Value) -> Bool {
        Self.evaluate(root, value)
    }

    private static func evaluate(_ node: Node, _ value: (Int) -> Value) -> Bool {
        switch node {
        case .constant(let constant):
            return constant
        case .and(let terms):
            return terms.allSatisfy { evaluate($0, value) }
        case .or(let terms):
            return terms.contains { evaluate($0, value) }
        case .not(let inner):
            return !evaluate(inner, value)
        case .compare(let position, let op, let options, let constant):
            return queryCompare(value(position), op, constant, options: options)
        case .compareAny(let position, let op, let options, let constants):
            let left = value(position)
            return constants.contains { queryCompare(left, op, $0, options: options) }
        case .member(let position, let lookup):
            return lookup.contains(value(position))
        case .between(let position, let lower, let upper):
            let left = value(position)
            return queryCompare(left, .greaterEqual, lower, options: [])
                && queryCompare(left, .lessEqual, upper, options: [])
        }
    }
}

extension Query {
    /// The predicate compiled against `type`, the queried type, when it only compares scalar properties with
    /// constants; `nil` otherwise (mixed values, key paths through links, embedded objects or lists, aggregates, comparisons
    /// between two properties).
    public func positionalPredicate(for type: ObjectSchema) -> PositionalPredicate? {
        guard type.name == typeName else { return nil }
        /// Every term compiled, or `nil` when one does not compile.
        func compileAll(_ terms: [Predicate]) -> [PositionalPredicate.Node]? {
            var nodes: [PositionalPredicate.Node] = []
            for term in terms {
                guard let node = compile(term) else { return nil }
                nodes.append(node)
            }
            return nodes
        }
        func compile(_ predicate: Predicate) -> PositionalPredicate.Node? {
            switch predicate {
            case .constant(let value):
                return .constant(value)
            case .and(let terms):
                return compileAll(terms).map { .and($0) }
            case .or(let terms):
                return compileAll(terms).map { .or($0) }
            case .not(let inner):
                return compile(inner).map { .not($0) }
            case .comparison(let comparison):
                guard case .keyPath(let path) = comparison.left, path.operation == nil, path.steps.count == 1,
                    case .scalar(let scalarType) = path.steps[0].target, scalarType != .mixed, !path.steps[0].isList,
                    !path.steps[0].isDictionary,
                    comparison.rightQuantifier == .anyElement,
                    let position = type.properties.firstIndex(where: { $0.name == path.steps[0].name })
                else { return nil }
                // As the evaluator reads a comparison whose left side yields one value.
                switch (comparison.right, comparison.op) {
                case (.constant, .between):
                    return .constant(false)
                case (.constant(let constant), let op):
                    return .compare(position: position, op: op, options: comparison.options, constant: constant)
                case (.constants(let bounds), .between):
                    guard bounds.count == 2 else { return .constant(false) }
                    return .between(position: position, lower: bounds[0], upper: bounds[1])
                case (.constants, _) where comparison.lookup != nil:
                    return comparison.lookup.map { .member(position: position, lookup: $0) }
                case (.constants(let constants), let op):
                    return .compareAny(position: position, op: op, options: comparison.options, constants: constants)
                case (.keyPath, _), (.arithmetic, _), (.subqueryCount, _):
                    return nil
                }
            case .geoWithin, .fullText:
                return nil
            }
        }
        guard let root = compile(predicate) else { return nil }
        return PositionalPredicate(root: root)
    }
}

/// A query's SORT compiled against one object type: compares two objects by their values at positions in the type's
/// properties, as the SORT clause orders them. Objects it finds equal keep the order they came in (stored primary
/// key order, for a query's candidates).
public struct PositionalOrder: Sendable {
    let keys: [(position: Int, ascending: Bool)]

    /// Negative when the object whose values `left` gives sorts first, positive when the other does, 0 when the
    /// sort keys tie.
    public func compare(_ left: (Int) -> Value, _ right: (Int) -> Value) -> Int {
        for key in keys {
            let order = sortOrder(left(key.position), right(key.position))
            if order != 0 { return key.ascending ? order : -order }
        }
        return 0
    }
}

extension Query {
    /// The order of a query whose clauses are exactly one SORT, on scalar properties of the queried type itself;
    /// `nil` for any other clauses (DISTINCT, LIMIT, several SORTs) or key paths (through links, embedded objects or
    /// lists, or with `@count` and the like).
    public func positionalOrder(for type: ObjectSchema) -> PositionalOrder? {
        guard type.name == typeName, descriptors.count == 1, case .sort(let sortKeys) = descriptors[0] else {
            return nil
        }
        var keys: [(position: Int, ascending: Bool)] = []
        for key in sortKeys {
            guard let position = Self.scalarPosition(of: key.path, in: type) else { return nil }
            keys.append((position, key.ascending))
        }
        return PositionalOrder(keys: keys)
    }

    /// The position in `type` of the property `path` names, when it names one scalar property of the type itself (no
    /// link followed, no list, no aggregate): a value read by position is then the value the path gives.
    static func scalarPosition(of path: KeyPath, in type: ObjectSchema) -> Int? {
        guard path.operation == nil, path.steps.count == 1, let step = path.steps.first, !step.isList,
            !step.isDictionary,
            // A mixed value's links read as null once their target is erased: the evaluator looks that up.
            case .scalar(let scalarType) = step.target, scalarType != .mixed
        else { return nil }
        return type.position(ofProperty: step.name)
    }
}
