public import TributaryModel

/// A query's predicate compiled against one object type, testing an object's values by position in the type's
/// properties rather than by name: what a scan runs, without a dictionary per object.
///
/// Only predicates that compare scalar properties of the queried type with constants (`score > 900`,
/// `text CONTAINS[c] $0`, `kind IN {1, 2}`, `size BETWEEN {1, 5}`), joined by `AND`, `OR` and `NOT`, compile;
/// ``Query/positionalPredicate(for:)`` returns `nil` for the others, which ``Query/matches(_:source:)`` handles.
/// Where it compiles, it gives exactly what ``Query/matches(_:source:)`` gives on the same values.
///
/// A class: a scan holds one for every record it tests, and passing it around then retains one reference, not each
/// of its arrays.
public final class PositionalPredicate: Sendable {
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

    /// The tree in preorder, each step's payload free of references (the constants and lookups it names are kept
    /// apart, by index): evaluating it per object retains no node, where walking the tree of indirect cases retained
    /// each node and each list of terms it passed through.
    private let steps: [Step]
    private let constants: [Value]
    private let constantLists: [[Value]]
    private let lookups: [EqualityLookup]

    private enum Step {
        case constant(Bool)
        /// The terms are the steps from the next up to `end`.
        case and(end: Int)
        case or(end: Int)
        /// The negated term is the next step.
        case not
        case compare(position: Int, op: ComparisonOperator, options: StringOptions, constant: Int)
        case compareAny(position: Int, op: ComparisonOperator, options: StringOptions, constants: Int)
        case member(position: Int, lookup: Int)
        case between(position: Int, lower: Int, upper: Int)
    }

    init(root: Node) {
        var steps: [Step] = []
        var constants: [Value] = []
        var constantLists: [[Value]] = []
        var lookups: [EqualityLookup] = []
        func flatten(_ node: Node) {
            switch node {
            case .constant(let constant):
                steps.append(.constant(constant))
            case .and(let terms), .or(let terms):
                let start = steps.count
                steps.append(.constant(true))  // replaced once the terms' end is known
                for term in terms { flatten(term) }
                if case .and = node {
                    steps[start] = .and(end: steps.count)
                } else {
                    steps[start] = .or(end: steps.count)
                }
            case .not(let inner):
                steps.append(.not)
                flatten(inner)
            case .compare(let position, let op, let options, let constant):
                steps.append(.compare(position: position, op: op, options: options, constant: constants.count))
                constants.append(constant)
            case .compareAny(let position, let op, let options, let list):
                steps.append(.compareAny(position: position, op: op, options: options, constants: constantLists.count))
                constantLists.append(list)
            case .member(let position, let lookup):
                steps.append(.member(position: position, lookup: lookups.count))
                lookups.append(lookup)
            case .between(let position, let lower, let upper):
                steps.append(.between(position: position, lower: constants.count, upper: constants.count + 1))
                constants += [lower, upper]
            }
        }
        flatten(root)
        self.steps = steps
        self.constants = constants
        self.constantLists = constantLists
        self.lookups = lookups
    }

    /// Whether the object whose values (by position in the type's properties) are `values` matches. A position
    /// out of range reads as null.
    public func matches(_ values: [Value]) -> Bool {
        matches { values.indices.contains($0) ? values[$0] : .null }
    }

    /// Whether the object matches whose value at each position `value` gives. It is asked only for the positions the
    /// terms evaluated need (`a > 1 AND b == 2` asks for no `b` when `a` is 1), so a reader can decode values on
    /// demand.
    public func matches(_ value: (Int) -> Value) -> Bool {
        steps.withUnsafeBufferPointer { steps in
            var index = 0
            return evaluate(steps, &index, value)
        }
    }

    /// Evaluates the step at `index` and the terms under it, leaving `index` at the step after them.
    private func evaluate(_ steps: UnsafeBufferPointer<Step>, _ index: inout Int, _ value: (Int) -> Value) -> Bool {
        let step = steps[index]
        index += 1
        switch step {
        case .constant(let constant):
            return constant
        case .and(let end):
            while index < end {
                guard evaluate(steps, &index, value) else {
                    index = end
                    return false
                }
            }
            return true
        case .or(let end):
            while index < end {
                if evaluate(steps, &index, value) {
                    index = end
                    return true
                }
            }
            return false
        case .not:
            return !evaluate(steps, &index, value)
        case .compare(let position, let op, let options, let constant):
            return queryCompare(value(position), op, constants[constant], options: options)
        case .compareAny(let position, let op, let options, let list):
            let left = value(position)
            return constantLists[list].contains { queryCompare(left, op, $0, options: options) }
        case .member(let position, let lookup):
            return lookups[lookup].contains(value(position))
        case .between(let position, let lower, let upper):
            let left = value(position)
            return queryCompare(left, .greaterEqual, constants[lower], options: [])
                && queryCompare(left, .lessEqual, constants[upper], options: [])
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
