import TributaryModel

/// Resolves a parsed query against a schema: key paths to property steps, arguments to values, and checks that
/// each comparison's sides fit together and fit its operator.
struct TypeChecker {
    let schema: Schema
    let root: ObjectSchema
    let arguments: [Value]
    let query: String
    /// Inside a SUBQUERY: its variable, with which a key path may start (`root` is then the list's element type).
    var variable: String? = nil

    /// What one value of an operand is, as far as the schema says.
    enum Base: Hashable {
        case scalar(ScalarType)
        /// A link: its target type (unknown for a link argument) and the target's primary key type.
        case link(type: String?, key: ScalarType?)
        case embedded(String)
        case null
    }

    /// One value an operand may yield, with how to name it in a message and where it is in the text.
    struct Element {
        var base: Base
        var label: String
        var position: Int
    }

    /// A checked operand and the elements to type-check against the other side.
    struct Typed {
        var operand: Operand
        var elements: [Element]
        var start: Int
        var label: String
    }

    func check(_ syntax: SyntaxQuery) throws(QueryError) -> (Predicate, [Descriptor]) {
        let predicate = try check(syntax.predicate)
        var descriptors: [Descriptor] = []
        for descriptor in syntax.descriptors {
            switch descriptor {
            case .sort(let keys):
                var checked: [SortKeyPath] = []
                for key in keys {
                    checked.append(
                        SortKeyPath(path: try orderingPath(key.path, clause: "SORT"), ascending: key.ascending))
                }
                descriptors.append(.sort(checked))
            case .distinct(let paths):
                var checked: [KeyPath] = []
                for path in paths { checked.append(try orderingPath(path, clause: "DISTINCT")) }
                descriptors.append(.distinct(checked))
            case .limit(let count):
                descriptors.append(.limit(count))
            }
        }
        return (predicate, descriptors)
    }

    func error(_ code: QueryError.Code, _ message: String, at position: Int) -> QueryError {
        QueryError(code, message, position: position, query: query)
    }

    /// Refuses `ANY`, `ALL` or `NONE` before `subject` when it is a single value.
    func checkQuantifier(_ quantifier: Quantifier?, before subject: String, isMany: Bool, at position: Int)
        throws(QueryError)
    {
        guard let quantifier, !isMany else { return }
        let word = quantifier == .allElements ? "ALL" : quantifier == .noElement ? "NONE" : "ANY"
        throw error(
            .typeMismatch, "\(word) needs a list or a to-many key path after it, but \(subject) is a single value",
            at: position)
    }

    // MARK: Predicates

    /// Checks a predicate (also a SUBQUERY's). Recursion follows the parser's, which bounds its depth.
    func check(_ predicate: SyntaxPredicate) throws(QueryError) -> Predicate {
        switch predicate {
        case .constant(let value): return .constant(value)
        case .not(let inner): return .not(try check(inner))
        case .and(let terms):
            var checked: [Predicate] = []
            for term in terms { checked.append(try check(term)) }
            return .and(checked)
        case .or(let terms):
            var checked: [Predicate] = []
            for term in terms { checked.append(try check(term)) }
            return .or(checked)
        case .comparison(let comparison) where comparison.op == .text:
            return .fullText(try checkFullText(comparison))
        case .comparison(let comparison):
            return .comparison(try check(comparison))
        case .geoWithin(let geo):
            return .geoWithin(try check(geo))
        }
    }

    private func check(_ syntax: SyntaxComparison) throws(QueryError) -> Comparison {
        let left = try typed(syntax.left)
        let right = try typed(syntax.right)
        let op = syntax.op
        let opName =
            syntax.op.isStringOperator || op == .in || op == .between ? syntax.opText.uppercased() : syntax.opText
        for (quantifier, side, position) in [
            (syntax.quantifier, left, syntax.quantifierPosition),
            (syntax.rightQuantifier, right, syntax.rightQuantifierPosition),
        ] {
            try checkQuantifier(quantifier, before: side.label, isMany: side.operand.isMany, at: position)
        }
        switch op {
        case .in:
            guard right.operand.isMany else {
                throw error(
                    .typeMismatch,
                    "IN needs a list on its right, such as {1, 2}, a list argument or a list property, "
                        + "but \(right.label) is a single value", at: right.start)
            }
        case .between:
            if left.operand.isMany && syntax.quantifier != .allElements {
                throw error(
                    .unsupported,
                    "BETWEEN on a list takes ALL (every element in the range), as in ALL \(sourceText(syntax.left.start, syntax.left.end)) "
                        + "BETWEEN {1, 10}; for some element, compare with >= and <=", at: left.start)
            }
        default:
            break
        }
        // A list of objects holds no nulls, and is never null itself (a list of values may hold nulls).
        for (side, other) in [(left, right), (right, left)] {
            if case .keyPath(let path) = side.operand, path.isToMany,
                let list = path.steps.first(where: { $0.yieldsMany && $0.target.objectType != nil }),
                case .constant(.null) = other.operand
            {
                throw error(
                    .typeMismatch,
                    "cannot compare \(side.label) with null: it goes through the list of objects '\(list.name)', "
                        + "which holds no nulls; write \(list.name).@count == 0 to find empty lists", at: other.start)
            }
        }
        // A link property's values name no type, and a mixed value's links do: they never compare equal.
        for (side, other) in [(left, right), (right, left)] {
            if case .keyPath = side.operand, case .keyPath = other.operand,
                side.elements.contains(where: { $0.base == .scalar(.mixed) }),
                let link = other.elements.first(where: { if case .link = $0.base { true } else { false } })
            {
                throw error(
                    .unsupported,
                    "cannot compare \(side.label) with the link property \(link.label): compare the mixed value with "
                        + "obj('Type', key) or a typed link argument", at: other.start)
            }
        }
        if !syntax.options.isEmpty {
            let modifier =
                "[" + (syntax.options.contains(.caseInsensitive) ? "c" : "")
                + (syntax.options.contains(.diacriticInsensitive) ? "d" : "") + "]"
            for element in left.elements + right.elements
            where element.base != .scalar(.string) && element.base != .scalar(.mixed) {
                throw error(
                    .typeMismatch, "'\(opName)\(modifier)' compares strings, but \(element.label) is not a string",
                    at: element.position)
            }
        }
        for leftElement in left.elements {
            for rightElement in right.elements {
                try checkPair(leftElement, rightElement, op: op, opName: opName, opPosition: syntax.opPosition)
            }
        }
        // Constants compared with a float property are taken as floats, as Realm does: `price == 0.1` finds the
        // float nearest 0.1, which no double equals.
        var (leftOperand, rightOperand) = (
            Self.asFloats(Self.links(left, against: right), against: right),
            Self.asFloats(Self.links(right, against: left), against: left)
        )
        var checkedOp = op
        var rightQuantifier = syntax.rightQuantifier ?? .anyElement
        // `@type == 'numeric'`: a type name stands for the names of the types it groups, in any case.
        if case .keyPath(let path) = leftOperand, path.operation == .type, op == .equal || op == .notEqual || op == .in
        {
            let names: [Value]
            switch rightOperand {
            case .constant(let value): names = [value]
            case .constants(let values): names = values
            default: names = []
            }
            var expanded: [Value] = []
            for case .string(let name) in names {
                guard let types = Self.typeNames[name.lowercased()] else {
                    throw error(
                        .invalidLiteral,
                        "'\(name)' is not a type @type knows: write one of "
                            + Self.typeNames.keys.sorted().joined(separator: ", "), at: right.start)
                }
                expanded += types.map(Value.string)
            }
            if !expanded.isEmpty {
                rightOperand = .constants(expanded)
                if op == .notEqual {
                    checkedOp = .equal
                    rightQuantifier = .noElement
                }
            }
        }
        let elementwise =
            op != .between && left.operand.isMany && right.operand.isMany && syntax.quantifier == nil
            && syntax.rightQuantifier == nil
        var lookup: EqualityLookup?
        if op == .equal || op == .in, rightQuantifier == .anyElement, !elementwise,
            case .constants(let values) = rightOperand,
            values.count >= EqualityLookup.minimumCount
        {
            lookup = EqualityLookup(values, options: syntax.options)
        }
        return Comparison(
            left: leftOperand, op: checkedOp, options: syntax.options, quantifier: syntax.quantifier ?? .anyElement,
            rightQuantifier: rightQuantifier, right: rightOperand, lookup: lookup, elementwise: elementwise)
    }

    /// The type names `@type` compares with (lowercased), and the names of the value types each stands for.
    static let typeNames: [String: [String]] = [
        "null": ["null"], "bool": ["bool"], "boolean": ["bool"], "int": ["int"], "integer": ["int"], "long": ["int"],
        "double": ["double"], "float": ["float"], "decimal": ["decimal"], "decimal128": ["decimal"],
        "numeric": ["int", "double", "float", "decimal"], "string": ["string"], "binary": ["binary"],
        "data": ["binary"], "date": ["date"], "timestamp": ["date"], "objectid": ["objectId"], "uuid": ["uuid"],
        "link": ["link"], "object": ["object"], "list": ["list"], "dictionary": ["dictionary"],
    ]

    /// `typed`'s links as the values `other` holds compare with them. A link constant (`obj('Dog', 5)`, a typed link
    /// argument) names its type, as a mixed value's links do (`obj('Dog', 5)` equals only a mixed value that links to
    /// Dog 5, not Cat 5); a link property's values are its key alone (the type checker has checked the type), so
    /// compared with one, a constant is its key. Otherwise `typed`'s operand.
    private static func links(_ typed: Typed, against other: Typed) -> Operand {
        guard !other.elements.isEmpty, other.elements.allSatisfy({ if case .link = $0.base { true } else { false } })
        else { return typed.operand }
        func key(_ value: Value) -> Value { if case .typedLink(_, let key) = value { .link(key) } else { value } }
        switch typed.operand {
        case .constant(let value): return .constant(key(value))
        case .constants(let values): return .constants(values.map(key))
        default: return typed.operand
        }
    }

    /// `operand`'s numbers as floats when `other` is a float property (every element of it a float), else `operand`.
    private static func asFloats(_ operand: Operand, against other: Typed) -> Operand {
        guard !other.elements.isEmpty, other.elements.allSatisfy({ $0.base == .scalar(.float) }) else { return operand }
        func convert(_ value: Value) -> Value {
            switch value {
            case .int(let int): .float(Float(int))
            case .double(let double): .float(Float(double))
            default: value
            }
        }
        switch operand {
        case .constant(let value): return .constant(convert(value))
        case .constants(let values): return .constants(values.map(convert))
        default: return operand
        }
    }

    private func checkPair(_ left: Element, _ right: Element, op: ComparisonOperator, opName: String, opPosition: Int)
        throws(QueryError)
    {
        if op.isStringOperator {
            for element in [left, right] {
                switch element.base {
                case .scalar(.string), .scalar(.mixed): continue
                case .scalar(.data) where op != .like: continue
                default:
                    let needs = op == .like ? "strings" : "strings or data"
                    throw error(
                        .typeMismatch, "\(opName) compares \(needs), but \(element.label) is not", at: element.position)
                }
            }
            guard left.base == right.base || compatible(left.base, right.base) else { throw mismatch(left, right) }
            return
        }
        if op.isOrdering {
            for element in [left, right] {
                switch element.base {
                case .scalar(.int), .scalar(.double), .scalar(.decimal), .scalar(.float), .scalar(.date),
                    .scalar(.string), .scalar(.mixed),
                    .scalar(.objectId), .scalar(.uuid):
                    continue
                default:
                    throw error(.typeMismatch, "cannot use '\(opName)' with \(element.label)", at: opPosition)
                }
            }
            guard compatible(left.base, right.base) else { throw mismatch(left, right) }
            return
        }
        // ==, != and IN.
        guard compatible(left.base, right.base) else { throw mismatch(left, right) }
    }

    private func mismatch(_ left: Element, _ right: Element) -> QueryError {
        error(.typeMismatch, "cannot compare \(left.label) with \(right.label)", at: right.position)
    }

    private func compatible(_ left: Base, _ right: Base) -> Bool {
        switch (left, right) {
        case (.null, _), (_, .null): return true
        // A mixed value may hold any scalar: a comparison with one of another type is false, not an error.
        case (.scalar(.mixed), .scalar), (.scalar, .scalar(.mixed)): return true
        // A mixed value may hold a link to an object of any type: compared with one that names its type (`obj()`, a
        // typed link argument, a link property), not with a bare key, which names none.
        case (.scalar(.mixed), .link(let type, _)), (.link(let type, _), .scalar(.mixed)): return type != nil
        case (.scalar(let a), .scalar(let b)):
            return a == b || (isNumeric(a) && isNumeric(b))
        case (.link(let typeA, let keyA), .link(let typeB, let keyB)):
            if let typeA, let typeB, typeA != typeB { return false }
            if let keyA, let keyB, keyA != keyB { return false }
            return true
        default:
            return false
        }
    }

    private func isNumeric(_ type: ScalarType) -> Bool {
        type == .int || type == .double || type == .decimal || type == .float
    }

    // MARK: Operands

    private func typed(_ expression: SyntaxExpression) throws(QueryError) -> Typed {
        let source = sourceText(expression.start, expression.end)
        switch expression.kind {
        case .literal(.link(let typeName, let key)):
            guard let target = schema[type: typeName] else {
                throw error(
                    .unknownProperty, "obj('\(typeName)', ...) names a type the schema lacks", at: expression.start)
            }
            guard case .scalar(let keyType) = target.primaryKeyProperty?.kind, keyType == key.type else {
                let expected =
                    target.primaryKeyProperty.map { "its primary key is \($0.kind)" } ?? "it has no primary key"
                throw error(
                    .typeMismatch, "\(source) does not fit '\(typeName)': \(expected)",
                    at: expression.start)
            }
            let label = "link \(source)"
            let element = Element(base: .link(type: typeName, key: keyType), label: label, position: expression.start)
            return Typed(
                operand: .constant(.typedLink(type: typeName, key: key)), elements: [element], start: expression.start,
                label: label)
        case .literal(let literal):
            let value = literal.value
            let label = literal == .null ? "null" : "\(value.kindName) \(source)"
            let element = Element(base: base(of: value), label: label, position: expression.start)
            return Typed(operand: .constant(value), elements: [element], start: expression.start, label: label)
        case .arithmetic(let op, let leftExpression, let rightExpression):
            let left = try typed(leftExpression)
            let right = try typed(rightExpression)
            if left.operand.isMany && right.operand.isMany {
                throw error(
                    .unsupported, "'\(op.rawValue)' between two lists is not supported: one side must be one number",
                    at: right.start)
            }
            var result = ScalarType.int
            for side in [left, right] {
                for element in side.elements {
                    switch element.base {
                    case .scalar(.int), .null: break
                    case .scalar(.double), .scalar(.float): if result == .int { result = .double }
                    case .scalar(.decimal): result = .decimal
                    default:
                        throw error(
                            .typeMismatch, "'\(op.rawValue)' needs numbers, but \(element.label) is not a number",
                            at: element.position)
                    }
                }
            }
            let label = "'\(source)' (\(result))"
            let element = Element(base: .scalar(result), label: label, position: expression.start)
            return Typed(
                operand: .arithmetic(op, left.operand, right.operand), elements: [element], start: expression.start,
                label: label)
        case .subquery(let subquery):
            return try typedSubquery(subquery, source: source, start: expression.start)
        case .argument(let index, let placeholder):
            let value = try argument(index, placeholder: placeholder, at: expression.start)
            let name = placeholder ? "%@ (argument \(index))" : source
            if case .list(let values) = value {
                var elements: [Element] = []
                for (offset, element) in values.enumerated() {
                    let label = "element \(offset) of \(name) (\(element.kindName))"
                    if case .list = element {
                        throw error(
                            .typeMismatch, "\(label) is a list; lists inside lists are not supported",
                            at: expression.start)
                    }
                    elements.append(Element(base: base(of: element), label: label, position: expression.start))
                }
                return Typed(
                    operand: .constants(values), elements: elements, start: expression.start, label: "\(name) (list)")
            }
            let label = value.isNull ? "null \(name)" : "\(value.kindName) \(name)"
            let element = Element(base: base(of: value), label: label, position: expression.start)
            return Typed(operand: .constant(value), elements: [element], start: expression.start, label: label)
        case .list(let items):
            var values: [Value] = []
            var elements: [Element] = []
            for item in items {
                let typedItem = try typed(item)
                guard case .constant(let value) = typedItem.operand else {
                    throw error(.unsupported, "lists inside lists are not supported", at: item.start)
                }
                values.append(value)
                elements.append(contentsOf: typedItem.elements)
            }
            return Typed(
                operand: .constants(values), elements: elements, start: expression.start, label: "list \(source)")
        case .keyPath(let components):
            let (path, base) = try resolve(components, text: source)
            let label =
                variable == nil
                ? "'\(root.name).\(source)' (\(describe(base, path: path)))"
                : "'\(source)' (\(describe(base, path: path)))"
            let element = Element(base: base, label: label, position: expression.start)
            return Typed(operand: .keyPath(path), elements: [element], start: expression.start, label: label)
        }
    }

    func sourceText(_ start: Int, _ end: Int) -> String {
        let utf8 = query.utf8
        let lower = utf8.index(utf8.startIndex, offsetBy: max(0, min(start, utf8.count)))
        let upper = utf8.index(utf8.startIndex, offsetBy: max(0, min(end, utf8.count)))
        return String(decoding: utf8[lower..<upper], as: UTF8.self)
    }

    func argument(_ index: Int, placeholder: Bool, at position: Int) throws(QueryError) -> Value {
        guard index < arguments.count else {
            let given = arguments.count == 1 ? "1 argument was given" : "\(arguments.count) arguments were given"
            let message =
                placeholder
                ? "the query has more %@ placeholders than arguments: \(given)"
                : "the query uses $\(index) but \(given)"
            throw error(.argumentMissing, message, at: position)
        }
        return arguments[index]
    }

    func base(of value: Value) -> Base {
        switch value {
        case .null: .null
        case .bool: .scalar(.bool)
        case .int: .scalar(.int)
        case .double: .scalar(.double)
        case .string: .scalar(.string)
        case .data: .scalar(.data)
        case .date: .scalar(.date)
        case .uuid: .scalar(.uuid)
        case .objectId: .scalar(.objectId)
        case .decimal: .scalar(.decimal)
        case .float: .scalar(.float)
        case .link(let key): .link(type: nil, key: key.type)
        case .typedLink(let type, let key): .link(type: type, key: key.type)
        case .embedded(let object): .embedded(object.type)
        // Lists are taken apart by the caller; a list element that is itself a list was refused there. A dictionary
        // is no constant of the language.
        case .list, .dictionary: .null
        }
    }

    private func describe(_ base: Base, path: KeyPath) -> String {
        let element: String
        switch base {
        case .scalar(let type): element = type.description
        case .link(let type, _): element = "link<\(type ?? "?")>"
        case .embedded(let type): element = "embedded<\(type)>"
        case .null: element = "null"
        }
        if path.operation == nil, let last = path.steps.last, last.yieldsMany { return "list<\(element)>" }
        return path.isToMany ? "\(element), to-many" : element
    }
}
