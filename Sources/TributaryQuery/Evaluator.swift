import Foundation
import TributaryModel

/// Runs a checked predicate against one object's fields, following links through a ``QueryObjectSource``.
///
/// Pure: it reads the object, the source and the checked tree, and nothing else. Recursion follows the
/// checked tree, whose depth the parser bounds.
struct Evaluator<Source: QueryObjectSource> {
    let source: Source

    func matches(_ predicate: Predicate, _ object: [String: Value]) -> Bool {
        switch predicate {
        case .constant(let value): return value
        case .and(let terms): return terms.allSatisfy { matches($0, object) }
        case .or(let terms): return terms.contains { matches($0, object) }
        case .not(let inner): return !matches(inner, object)
        case .comparison(let comparison): return evaluate(comparison, object)
        case .geoWithin(let geo):
            return test(geo.path, geo.quantifier, object) { GeoPoint(stored: $0).map(geo.region.contains) ?? false }
        case .fullText(let search):
            return test(search.path, search.quantifier, object) { value in
                guard case .string(let text) = value else { return false }
                return search.terms.matches(text)
            }
        }
    }

    /// Whether `holds` is true of the value `path` leads to, or for a to-many path, of as many of its values as
    /// `quantifier` says.
    private func test(
        _ path: KeyPath, _ quantifier: Quantifier, _ object: [String: Value], _ holds: (Value) -> Bool
    ) -> Bool {
        let values = values(of: path, in: object)
        guard path.isToMany else { return values.first.map(holds) ?? false }
        switch quantifier {
        case .anyElement: return values.contains(where: holds)
        case .allElements: return values.allSatisfy(holds)
        case .noElement: return !values.contains(where: holds)
        }
    }

    private func evaluate(_ comparison: Comparison, _ object: [String: Value]) -> Bool {
        // The common case, `property op constant` on a scalar property, without the arrays the general case builds
        // (a mixed value's links and subscripts are read by ``leafValues(_:in:)``).
        if case .keyPath(let path) = comparison.left, path.operation == nil, path.steps.count == 1,
            case .scalar(let scalarType) = path.steps[0].target, scalarType != .mixed, !path.steps[0].isList,
            !path.steps[0].isDictionary,
            case .constant(let constant) = comparison.right, comparison.op != .between
        {
            return queryCompare(
                object[path.steps[0].name] ?? .null, comparison.op, constant, options: comparison.options)
        }
        let right = values(of: comparison.right, in: object)
        let op = comparison.op
        let options = comparison.options
        let rightIsMany = comparison.right.isMany
        let rightQuantifier = comparison.rightQuantifier
        let lookup = comparison.lookup
        func test(_ left: Value) -> Bool {
            if let lookup { return lookup.contains(left) }
            if op == .between {
                guard right.count == 2 else { return false }
                return queryCompare(left, .greaterEqual, right[0], options: [])
                    && queryCompare(left, .lessEqual, right[1], options: [])
            }
            if rightIsMany {
                switch rightQuantifier {
                case .anyElement: return right.contains { queryCompare(left, op, $0, options: options) }
                case .allElements: return right.allSatisfy { queryCompare(left, op, $0, options: options) }
                case .noElement: return !right.contains { queryCompare(left, op, $0, options: options) }
                }
            }
            guard let value = right.first else { return false }
            return queryCompare(left, op, value, options: options)
        }
        let left = values(of: comparison.left, in: object)
        if comparison.elementwise {
            return left.count == right.count
                && zip(left, right).allSatisfy { queryCompare($0, op, $1, options: options) }
        }
        guard comparison.left.isMany else { return left.first.map(test) ?? false }
        switch comparison.quantifier {
        case .anyElement: return left.contains(where: test)
        case .allElements: return left.allSatisfy(test)
        case .noElement: return !left.contains(where: test)
        }
    }

    /// The values an operand yields from an object: one for a single-valued operand, any number for a list.
    private func values(of operand: Operand, in object: [String: Value]) -> [Value] {
        switch operand {
        case .constant(let value): return [value]
        case .constants(let values): return values
        case .keyPath(let path): return values(of: path, in: object)
        case .arithmetic(let op, let leftOperand, let rightOperand):
            let left = values(of: leftOperand, in: object)
            let right = values(of: rightOperand, in: object)
            if leftOperand.isMany { return left.map { arithmetic(op, $0, right.first ?? .null) } }
            if rightOperand.isMany { return right.map { arithmetic(op, left.first ?? .null, $0) } }
            return [arithmetic(op, left.first ?? .null, right.first ?? .null)]
        case .subqueryCount(let path, let predicate):
            guard let last = path.steps.last, let holder = holder(of: path.steps, in: object) else { return [.int(0)] }
            var count: Int64 = 0
            for element in objects(following: last, in: holder) where matches(predicate, element) { count += 1 }
            return [.int(count)]
        }
    }

    // MARK: Key paths

    /// The values a key path yields from an object: exactly one for a to-one path (null when a link or
    /// embedded object along it is missing), any number for a to-many path.
    func values(of path: KeyPath, in object: [String: Value]) -> [Value] {
        guard let last = path.steps.last else { return [.null] }
        switch path.operation {
        case nil, .values:
            return walk(path.steps, from: object, toMany: path.isToMany)
        case .keys:
            guard let holder = holder(of: path.steps, in: object) else { return [] }
            let entries = (holder[last.name] ?? .null).dictionaryValue ?? [:]
            return entries.keys.sorted { $0.utf8Precedes($1) }.map(Value.string)
        case .count:
            guard let holder = holder(of: path.steps, in: object) else { return [.int(0)] }
            return [.int(Int64(leafValues(last, in: holder).count))]
        case .type:
            return walk(path.steps, from: object, toMany: path.isToMany).map { .string($0.queryTypeName) }
        case .size:
            switch walk(path.steps, from: object, toMany: false).first {
            case .string(let string): return [.int(Int64(string.utf8.count))]
            case .data(let data): return [.int(Int64(data.count))]
            case .list(let elements): return [.int(Int64(elements.count))]
            case .dictionary(let entries): return [.int(Int64(entries.count))]
            default: return [.null]
            }
        case .aggregate(let aggregate, let subSteps):
            guard let holder = holder(of: path.steps, in: object) else { return [reduce(aggregate, [])] }
            let elements: [Value]
            if subSteps.isEmpty {
                elements = leafValues(last, in: holder)
            } else {
                elements = objects(following: last, in: holder).map {
                    walk(subSteps, from: $0, toMany: false).first ?? .null
                }
            }
            return [reduce(aggregate, elements.filter { !$0.isNull })]
        }
    }

    /// The object holding the last step of a path whose other steps are all to-one, or `nil` when a link or
    /// embedded object along the way is missing.
    private func holder(of steps: [PathStep], in object: [String: Value]) -> [String: Value]? {
        var current = object
        for step in steps.dropLast() {
            guard let next = objects(following: step, in: current).first else { return nil }
            current = next
        }
        return current
    }

    private func walk(_ steps: [PathStep], from object: [String: Value], toMany: Bool) -> [Value] {
        guard let last = steps.last else { return [.null] }
        var current = [object]
        for step in steps.dropLast() {
            current = current.flatMap { objects(following: step, in: $0) }
        }
        guard toMany else {
            guard let holder = current.first else { return [.null] }
            return [leafValues(last, in: holder).first ?? .null]
        }
        return current.flatMap { leafValues(last, in: $0) }
    }

    /// The objects a link or embedded step leads to: one or none for a to-one step, the list's elements for
    /// a list (links whose target is missing left out).
    private func objects(following step: PathStep, in object: [String: Value]) -> [[String: Value]] {
        let value = object[step.name] ?? .null
        let objects: [[String: Value]]
        switch step.target {
        case .scalar:
            return []
        case .link(let type) where step.isDictionary:
            return dictionaryValues(step, value).compactMap { target(of: $0, type: type) }
        case .embedded where step.isDictionary:
            return dictionaryValues(step, value).compactMap { $0.embeddedValue?.fields }
        case .link(let type):
            guard step.isList else { return target(of: value, type: type).map { [$0] } ?? [] }
            objects = (value.listValue ?? []).compactMap { target(of: $0, type: type) }
        case .embedded:
            guard step.isList else { return value.embeddedValue.map { [$0.fields] } ?? [] }
            objects = (value.listValue ?? []).compactMap { $0.embeddedValue?.fields }
        case .backlinks(let sources, let keyProperty):
            objects = backlinks(sources, keyProperty: keyProperty, of: object).map(\.object)
        }
        guard let element = step.element else { return objects }
        return element.select(objects).map { [$0] } ?? []
    }

    /// The values of the last step of a path: its value, or a list's elements. A link whose target is
    /// missing reads as null (to-one) or is left out (list).
    private func leafValues(_ step: PathStep, in object: [String: Value]) -> [Value] {
        var value = object[step.name] ?? .null
        if step.target == .scalar(.mixed) {
            value = value.resolvingTypedLinks { source.object(type: $0, primaryKey: $1) != nil }
            if !step.mixedSelectors.isEmpty { return MixedSelector.select(step.mixedSelectors, in: value) }
        }
        if step.isDictionary {
            let values = dictionaryValues(step, value)
            guard case .link(let type) = step.target else { return values }
            // A link whose target is missing reads as null (rule 7).
            return values.map { target(of: $0, type: type) == nil ? .null : $0 }
        }
        let elements: [Value]
        switch step.target {
        case .scalar, .embedded:
            guard step.isList else { return [value] }
            elements = value.listValue ?? []
        case .link(let type):
            guard step.isList else { return target(of: value, type: type) == nil ? [.null] : [value] }
            elements = (value.listValue ?? []).filter { target(of: $0, type: type) != nil }
        case .backlinks(let sources, let keyProperty):
            elements = backlinks(sources, keyProperty: keyProperty, of: object).map { .link($0.key) }
        }
        guard let element = step.element else { return elements }
        return [element.select(elements) ?? .null]
    }

    /// A dictionary's values in the order of their keys, or its one key's value (null without it).
    private func dictionaryValues(_ step: PathStep, _ value: Value) -> [Value] {
        let entries = value.dictionaryValue ?? [:]
        if let key = step.dictionaryKey { return [entries[key] ?? .null] }
        return entries.keys.sorted { $0.utf8Precedes($1) }.map { entries[$0] ?? .null }
    }

    /// The objects whose link properties among `sources` point at `object`, with their primary keys.
    private func backlinks(_ sources: [BacklinkSource], keyProperty: String, of object: [String: Value])
        -> [(key: PrimaryKey, object: [String: Value])]
    {
        guard let key = object[keyProperty].flatMap(PrimaryKey.init) else { return [] }
        var found: [(key: PrimaryKey, object: [String: Value])] = []
        for backlink in sources {
            for linking in source.objects(type: backlink.type, linkingTo: key, through: backlink.property) {
                guard let linkingKey = linking[backlink.keyProperty].flatMap(PrimaryKey.init) else { continue }
                found.append((linkingKey, linking))
            }
        }
        return found
    }

    private func target(of link: Value, type: String) -> [String: Value]? {
        guard case .link(let key) = link else { return nil }
        return source.object(type: type, primaryKey: key)
    }

    // MARK: Arithmetic

    /// `left op right` as Realm computes it: integers stay integers (wrapping on overflow, truncating division, a
    /// division by zero giving the largest integer of the dividend's sign); with a double, in doubles; with a null
    /// or a value that is not a number, null.
    private func arithmetic(_ op: ArithmeticOperator, _ left: Value, _ right: Value) -> Value {
        if case .int(let a) = left, case .int(let b) = right {
            switch op {
            case .add: return .int(a &+ b)
            case .subtract: return .int(a &- b)
            case .multiply: return .int(a &* b)
            case .divide:
                if b == 0 { return .int(a < 0 ? .min : .max) }
                return .int(a == .min && b == -1 ? .min : a / b)
            }
        }
        if left.decimalValue != nil || right.decimalValue != nil {
            guard let a = left.decimalOperand, let b = right.decimalOperand else { return .null }
            switch op {
            case .add: return .decimal(a + b)
            case .subtract: return .decimal(a - b)
            case .multiply: return .decimal(a * b)
            case .divide: return .decimal(b == 0 ? .nan : a / b)
            }
        }
        guard let a = left.numericValue, let b = right.numericValue else { return .null }
        switch op {
        case .add: return .double(a + b)
        case .subtract: return .double(a - b)
        case .multiply: return .double(a * b)
        case .divide: return .double(a / b)
        }
    }

    // MARK: Aggregates

    /// `@min`, `@max`, `@sum` or `@avg` of non-null values: `@sum` of nothing is 0, the others null.
    private func reduce(_ aggregate: Aggregate, _ values: [Value]) -> Value {
        switch aggregate {
        case .min, .max:
            var best: Value?
            for value in values {
                guard let current = best else {
                    if queryOrder(value, value) != nil { best = value }
                    continue
                }
                guard let order = queryOrder(value, current) else { continue }
                if aggregate == .min ? order < 0 : order > 0 { best = value }
            }
            return best ?? .null
        case .sum:
            return sum(values) ?? .int(0)
        case .avg:
            if values.contains(where: { $0.decimalValue != nil }) {
                let decimals = values.compactMap(\.decimalOperand)
                guard !decimals.isEmpty else { return .null }
                return .decimal(decimals.reduce(0, +) / Decimal(decimals.count))
            }
            var total = 0.0
            var count = 0
            for value in values {
                switch value {
                case .int(let int): total += Double(int)
                case .double(let double): total += double
                case .float(let float): total += Double(float)
                default: continue
                }
                count += 1
            }
            return count == 0 ? .null : .double(total / Double(count))
        }
    }

    /// The sum of the numbers among `values`: an integer while every number is one and the sum fits in 64 bits,
    /// a double otherwise; `nil` when there are none.
    private func sum(_ values: [Value]) -> Value? {
        if values.contains(where: { $0.decimalValue != nil }) {
            let decimals = values.compactMap(\.decimalOperand)
            return decimals.isEmpty ? nil : .decimal(decimals.reduce(0, +))
        }
        var integer: Int64 = 0
        var double = 0.0
        var isInteger = true
        var any = false
        for value in values {
            switch value {
            case .int(let int):
                any = true
                double += Double(int)
                if isInteger {
                    let (result, overflow) = integer.addingReportingOverflow(int)
                    if overflow { isInteger = false } else { integer = result }
                }
            case .double(let value):
                any = true
                isInteger = false
                double += value
            case .float(let value):
                any = true
                isInteger = false
                double += Double(value)
            default:
                continue
            }
        }
        guard any else { return nil }
        return isInteger ? .int(integer) : .double(double)
    }
}

extension Value {
    /// The name `@type` gives the value's type, as Realm names it: `null`, `bool`, `int`, `double`, `float`,
    /// `decimal`, `string`, `binary`, `date`, `objectId`, `uuid`, `link`, `object` or `list`.
    var queryTypeName: String {
        switch self {
        case .null: "null"
        case .bool: "bool"
        case .int: "int"
        case .double: "double"
        case .float: "float"
        case .decimal: "decimal"
        case .string: "string"
        case .data: "binary"
        case .date: "date"
        case .objectId: "objectId"
        case .uuid: "uuid"
        case .link, .typedLink: "link"
        case .embedded: "object"
        case .list: "list"
        case .dictionary: "dictionary"
        }
    }

    /// The value as a decimal, for a decimal, an integer or a finite double (arithmetic with a decimal is in
    /// decimals, as Realm computes it).
    fileprivate var decimalOperand: Decimal? {
        switch self {
        case .decimal(let decimal): decimal
        case .int(let int): Decimal(int)
        case .double(let double): Decimal(nearest: double)
        case .float(let float): Decimal(nearest: Double(float))
        default: nil
        }
    }

    /// The value as a double, for an integer or a double.
    fileprivate var numericValue: Double? {
        switch self {
        case .int(let int): Double(int)
        case .double(let double): double
        case .float(let float): Double(float)
        default: nil
        }
    }
}
