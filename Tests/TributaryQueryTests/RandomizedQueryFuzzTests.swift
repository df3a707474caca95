import Foundation
import Testing
import TributaryModel
import TributaryQuery
import TributaryTestTags

extension SplitMix64 {
    mutating func pick<T>(_ choices: [T]) -> T { choices[below(choices.count)] }
}

// MARK: The reference evaluator

/// A predicate as the generator builds it, evaluated by the simplest code that states the rules.
indirect enum ReferencePredicate {
    case and([ReferencePredicate])
    case or([ReferencePredicate])
    case not(ReferencePredicate)
    case constant(Bool)
    /// `field op value`: a scalar field, or (with a quantifier) each element of a list field.
    case compare(field: String, op: String, caseless: Bool, diacriticless: Bool, value: Value, quantifier: String?)
    /// `left op right`, two numeric fields.
    case fields(left: String, op: String, right: String)
    /// `field.@count op value`.
    case count(field: String, op: String, value: Int64)
    /// `value IN field` (a list field).
    case member(value: Value, field: String, caseless: Bool)
    /// `field IN {values}`.
    case oneOf(field: String, values: [Value], caseless: Bool)
    /// `field BETWEEN {lower, upper}`.
    case between(field: String, lower: Value, upper: Value)
    /// `[quantifier] left op [quantifier] right`, where each side is a scalar field, a list field or a `{...}` list.
    case quantified(
        left: ReferenceOperand, leftQuantifier: String?, op: String, right: ReferenceOperand, rightQuantifier: String?)
    /// `field arithmetic operand op value`.
    case arithmetic(field: String, arithmetic: String, operand: Value, op: String, value: Value)
    /// `field[selector] op value`: one element of a list field (`FIRST`, `LAST`, an index), or its `SIZE`.
    case element(field: String, selector: String, op: String, value: Value)

    func evaluate(_ object: [String: Value]) -> Bool {
        switch self {
        case .and(let terms): return terms.allSatisfy { $0.evaluate(object) }
        case .or(let terms): return terms.contains { $0.evaluate(object) }
        case .not(let term): return !term.evaluate(object)
        case .constant(let value): return value
        case .compare(let field, let op, let caseless, let diacriticless, let value, let quantifier):
            let fieldValue = object[field] ?? .null
            guard let quantifier else {
                return Reference.compare(fieldValue, op, value, caseless: caseless, diacriticless: diacriticless)
            }
            let elements = fieldValue.listValue ?? []
            let test = { (element: Value) in
                Reference.compare(element, op, value, caseless: caseless, diacriticless: diacriticless)
            }
            switch quantifier {
            case "ALL": return elements.allSatisfy(test)
            case "NONE": return !elements.contains(where: test)
            default: return elements.contains(where: test)
            }
        case .fields(let left, let op, let right):
            return Reference.compare(
                object[left] ?? .null, op, object[right] ?? .null, caseless: false, diacriticless: false)
        case .count(let field, let op, let value):
            let count = Int64((object[field]?.listValue ?? []).count)
            return Reference.compare(.int(count), op, .int(value), caseless: false, diacriticless: false)
        case .member(let value, let field, let caseless):
            return (object[field]?.listValue ?? []).contains {
                Reference.compare(value, "==", $0, caseless: caseless, diacriticless: false)
            }
        case .oneOf(let field, let values, let caseless):
            let fieldValue = object[field] ?? .null
            return values.contains { Reference.compare(fieldValue, "==", $0, caseless: caseless, diacriticless: false) }
        case .between(let field, let lower, let upper):
            let fieldValue = object[field] ?? .null
            return Reference.compare(fieldValue, ">=", lower, caseless: false, diacriticless: false)
                && Reference.compare(fieldValue, "<=", upper, caseless: false, diacriticless: false)
        case .quantified(let left, let leftQuantifier, let op, let right, let rightQuantifier):
            let op = op == "IN" ? "==" : op
            let compare = { (a: Value, b: Value) in Reference.compare(a, op, b, caseless: false, diacriticless: false) }
            let lefts = left.values(in: object)
            let rights = right.values(in: object)
            // Realm's rules: two lists without quantifiers compare element by element; otherwise a list without
            // one is ANY.
            if left.isMany && right.isMany && leftQuantifier == nil && rightQuantifier == nil {
                return lefts.count == rights.count && zip(lefts, rights).allSatisfy(compare)
            }
            func test(_ value: Value) -> Bool {
                guard right.isMany else { return compare(value, rights[0]) }
                switch rightQuantifier ?? "ANY" {
                case "ALL": return rights.allSatisfy { compare(value, $0) }
                case "NONE": return !rights.contains { compare(value, $0) }
                default: return rights.contains { compare(value, $0) }
                }
            }
            guard left.isMany else { return test(lefts[0]) }
            switch leftQuantifier ?? "ANY" {
            case "ALL": return lefts.allSatisfy(test)
            case "NONE": return !lefts.contains(where: test)
            default: return lefts.contains(where: test)
            }
        case .arithmetic(let field, let arithmetic, let operand, let op, let value):
            let result = Reference.arithmetic(object[field] ?? .null, arithmetic, operand)
            return Reference.compare(result, op, value, caseless: false, diacriticless: false)
        case .element(let field, let selector, let op, let value):
            let list = object[field]?.listValue ?? []
            let element: Value
            switch selector {
            case "SIZE": element = .int(Int64(list.count))
            case "FIRST": element = list.first ?? .null
            case "LAST": element = list.last ?? .null
            default: element = Int(selector).flatMap { $0 < list.count ? list[$0] : nil } ?? .null
            }
            return Reference.compare(element, op, value, caseless: false, diacriticless: false)
        }
    }
}

/// One side of a ``ReferencePredicate/quantified(left:leftQuantifier:op:right:rightQuantifier:)`` comparison.
enum ReferenceOperand {
    case field(String, isList: Bool)
    case constants([Value])

    var isMany: Bool {
        switch self {
        case .field(_, let isList): isList
        case .constants: true
        }
    }

    func values(in object: [String: Value]) -> [Value] {
        switch self {
        case .field(let name, let isList): isList ? (object[name]?.listValue ?? []) : [object[name] ?? .null]
        case .constants(let values): values
        }
    }
}

enum Reference {
    /// Realm's arithmetic: integers wrap and divide truncating, a division by zero gives the largest integer of the
    /// dividend's sign; with a double, doubles; with a null, null.
    static func arithmetic(_ left: Value, _ op: String, _ right: Value) -> Value {
        if case .int(let a) = left, case .int(let b) = right {
            switch op {
            case "+": return .int(a &+ b)
            case "-": return .int(a &- b)
            case "*": return .int(a &* b)
            default:
                if b == 0 { return .int(a < 0 ? Int64.min : Int64.max) }
                return .int(a == Int64.min && b == -1 ? Int64.min : a / b)
            }
        }
        guard let a = number(left), let b = number(right) else { return .null }
        switch op {
        case "+": return .double(a + b)
        case "-": return .double(a - b)
        case "*": return .double(a * b)
        default: return .double(a / b)
        }
    }

    static func number(_ value: Value) -> Double? {
        switch value {
        case .int(let int): Double(int)
        case .double(let double): double
        default: nil
        }
    }

    static func fold(_ string: String, caseless: Bool, diacriticless: Bool) -> [UInt8] {
        var result = string
        if caseless { result = result.lowercased() }
        if diacriticless { result = result.folding(options: .diacriticInsensitive, locale: nil) }
        return Array(result.utf8)
    }

    static func like(_ text: ArraySlice<Unicode.Scalar>, _ pattern: ArraySlice<Unicode.Scalar>) -> Bool {
        guard let first = pattern.first else { return text.isEmpty }
        if first == "*" { return like(text, pattern.dropFirst()) || (!text.isEmpty && like(text.dropFirst(), pattern)) }
        guard let character = text.first else { return false }
        return (first == "?" || first == character) && like(text.dropFirst(), pattern.dropFirst())
    }

    static func compare(_ left: Value, _ op: String, _ right: Value, caseless: Bool, diacriticless: Bool) -> Bool {
        switch op {
        case "==": return equal(left, right, caseless: caseless, diacriticless: diacriticless)
        case "!=": return !equal(left, right, caseless: caseless, diacriticless: diacriticless)
        case "<", "<=", ">", ">=":
            if let a = number(left), let b = number(right) {
                switch op {
                case "<": return a < b
                case "<=": return a <= b
                case ">": return a > b
                default: return a >= b
                }
            }
            guard case .string(let a) = left, case .string(let b) = right else { return false }
            let x = Array(a.utf8)
            let y = Array(b.utf8)
            switch op {
            case "<": return x.lexicographicallyPrecedes(y)
            case "<=": return !y.lexicographicallyPrecedes(x)
            case ">": return y.lexicographicallyPrecedes(x)
            default: return !x.lexicographicallyPrecedes(y)
            }
        default:
            guard case .string(let a) = left, case .string(let b) = right else { return false }
            if op == "LIKE" {
                let text = String(decoding: fold(a, caseless: caseless, diacriticless: diacriticless), as: UTF8.self)
                let pattern = String(decoding: fold(b, caseless: caseless, diacriticless: diacriticless), as: UTF8.self)
                return like(Array(text.unicodeScalars)[...], Array(pattern.unicodeScalars)[...])
            }
            let text = fold(a, caseless: caseless, diacriticless: diacriticless)
            let part = fold(b, caseless: caseless, diacriticless: diacriticless)
            guard part.count <= text.count else { return false }
            switch op {
            case "BEGINSWITH": return Array(text.prefix(part.count)) == part
            case "ENDSWITH": return Array(text.suffix(part.count)) == part
            default: return (0...(text.count - part.count)).contains { Array(text[$0..<($0 + part.count)]) == part }
            }
        }
    }

    static func equal(_ left: Value, _ right: Value, caseless: Bool, diacriticless: Bool) -> Bool {
        if left.isNull || right.isNull { return left.isNull && right.isNull }
        if let a = number(left), let b = number(right) { return a == b }
        if case .string(let a) = left, case .string(let b) = right {
            return fold(a, caseless: caseless, diacriticless: diacriticless)
                == fold(b, caseless: caseless, diacriticless: diacriticless)
        }
        if case .bool(let a) = left, case .bool(let b) = right { return a == b }
        return false
    }

    /// The order SORT should give: null, NaN, numbers, strings by bytes; stable.
    static func sortKey(_ value: Value) -> (Int, Double, [UInt8]) {
        switch value {
        case .null: (0, 0, [])
        case .double(let double) where double.isNaN: (1, 0, [])
        case .int, .double: (2, number(value) ?? 0, [])
        case .string(let string): (3, 0, Array(string.utf8))
        default: (4, 0, [])
        }
    }

    static func precedes(_ a: Value, _ b: Value) -> Bool? {
        let x = sortKey(a)
        let y = sortKey(b)
        if x.0 != y.0 { return x.0 < y.0 }
        if x.1 != y.1 { return x.1 < y.1 }
        if x.2 != y.2 { return x.2.lexicographicallyPrecedes(y.2) }
        return nil
    }
}

// MARK: The generator

/// Builds random objects and predicates (as text and as a ``ReferencePredicate``), printing nothing but
/// what a failure needs to replay it.
struct QueryGenerator {
    var random: SplitMix64
    var arguments: [Value] = []
    /// Whether arguments are written `%@` (taken in order) rather than `$n`.
    var placeholders = false

    static let strings = ["", "a", "A", "ab", "Ab", "abc", "b", "ba", "é", "É", "e", "ée", "cab", "a*b"]
    static let patterns = ["*", "a*", "*b", "?", "a?", "*a*", "é*", "?b*", "", "A*", "*e", "a*b", "**"]
    static let doubles: [Double] = [-1.5, 0, -0.0, 0.5, 1, 2, 2.5, 3]

    static let schema = Schema(types: [
        ObjectSchema(
            name: "R",
            properties: [
                .scalar("_id", .int), .scalar("i", .int, optional: true), .scalar("d", .double, optional: true),
                .scalar("s", .string, optional: true), .scalar("b", .bool),
                Property("tags", .scalar(.string), list: true), Property("nums", .scalar(.int), list: true),
            ])
    ])

    mutating func object(id: Int64) -> [String: Value] {
        var object: [String: Value] = ["_id": .int(id), "b": .bool(random.chance(50))]
        object["i"] = random.chance(20) ? .null : .int(Int64(random.below(7) - 3))
        if random.chance(20) {
            object["d"] = .null
        } else {
            object["d"] = random.chance(5) ? .double(.nan) : .double(random.pick(Self.doubles))
        }
        object["s"] = random.chance(15) ? .null : .string(random.pick(Self.strings))
        object["tags"] = .list((0..<random.below(4)).map { _ in .string(random.pick(Self.strings)) })
        object["nums"] = .list((0..<random.below(4)).map { _ in .int(Int64(random.below(7) - 3)) })
        if random.chance(10) { object["s"] = nil }  // a missing field reads as null
        return object
    }

    /// A constant for a query: a literal, or an argument.
    mutating func constant(_ value: Value, literal: String) -> String {
        guard random.chance(30) || literal.isEmpty else { return literal }
        arguments.append(value)
        return placeholders ? "%@" : "$\(arguments.count - 1)"
    }

    mutating func numberConstant() -> (Value, String) {
        if random.chance(50) {
            let int = Int64(random.below(9) - 4)
            return (.int(int), constant(.int(int), literal: "\(int)"))
        }
        if random.chance(5) { return (.double(.nan), constant(.double(.nan), literal: "")) }
        let double = random.pick(Self.doubles)
        return (.double(double), constant(.double(double), literal: "\(double)"))
    }

    mutating func stringConstant(_ pool: [String]) -> (Value, String) {
        let string = random.pick(pool)
        return (
            .string(string), constant(.string(string), literal: random.chance(50) ? "'\(string)'" : "\"\(string)\"")
        )
    }

    mutating func modifiers() -> (String, Bool, Bool) {
        switch random.below(5) {
        case 0: return ("[c]", true, false)
        case 1: return ("[d]", false, true)
        case 2: return ("[cd]", true, true)
        default: return ("", false, false)
        }
    }

    mutating func keyword(_ word: String) -> String {
        random.chance(50) ? word : word.lowercased()
    }

    mutating func predicate(depth: Int) -> (String, ReferencePredicate) {
        if depth > 0, random.chance(40) {
            switch random.below(3) {
            case 0, 1:
                let isAnd = random.below(2) == 0
                let joiner = isAnd ? random.pick([" AND ", " && ", " and "]) : random.pick([" OR ", " || ", " or "])
                var texts: [String] = []
                var terms: [ReferencePredicate] = []
                for _ in 0..<(2 + random.below(2)) {
                    let (text, term) = predicate(depth: depth - 1)
                    texts.append(text)
                    terms.append(term)
                }
                return ("(" + texts.joined(separator: joiner) + ")", isAnd ? .and(terms) : .or(terms))
            default:
                let not = random.pick(["NOT ", "!", "not "])
                let (text, term) = predicate(depth: depth - 1)
                return ("\(not)(\(text))", .not(term))
            }
        }
        return comparison()
    }

    /// A side of a quantified comparison: a number field, the list field `nums`, or a `{...}` list of integers.
    mutating func quantifiedSide(allowQuantifier: Bool) -> (String, ReferenceOperand, String?) {
        switch random.below(3) {
        case 0:
            let field = random.pick(["i", "d"])
            return (field, .field(field, isList: false), nil)
        default:
            let quantifier = allowQuantifier ? random.pick(["ANY", "ALL", "NONE", "SOME", nil, nil]) : nil
            let prefix = quantifier.map { keyword($0) + " " } ?? ""
            let written = quantifier == "SOME" ? "ANY" : quantifier
            if random.chance(50) { return (prefix + "nums", .field("nums", isList: true), written) }
            let values = (0..<random.below(4)).map { _ in Value.int(Int64(random.below(7) - 3)) }
            let texts = values.map { value -> String in
                guard case .int(let int) = value else { return "" }
                return "\(int)"
            }
            return (prefix + "{\(texts.joined(separator: ", "))}", .constants(values), written)
        }
    }

    mutating func comparison() -> (String, ReferencePredicate) {
        let orderOps = ["==", "!=", "<", "<=", ">", ">="]
        switch random.below(16) {
        case 12, 13:
            var (leftText, left, leftQuantifier) = quantifiedSide(allowQuantifier: true)
            var (rightText, right, rightQuantifier) = quantifiedSide(allowQuantifier: true)
            let op = random.pick(orderOps + ["IN"])
            if op == "IN" && !right.isMany {
                (rightText, right, rightQuantifier) = ("{1, 2}", .constants([.int(1), .int(2)]), nil)
            }
            if case .constants = left, case .constants = right {
                (leftText, left, leftQuantifier) = ("i", .field("i", isList: false), nil)
            }
            return (
                "\(leftText) \(op) \(rightText)",
                .quantified(
                    left: left, leftQuantifier: leftQuantifier, op: op, right: right, rightQuantifier: rightQuantifier)
            )
        case 14:
            let field = random.pick(["i", "d"])
            let arithmetic = random.pick(["+", "-", "*", "/"])
            let (operand, operandText) = numberConstant()
            let op = random.pick(orderOps)
            let (value, valueText) = numberConstant()
            let text =
                random.chance(50)
                ? "\(field) \(arithmetic) \(operandText) \(op) \(valueText)"
                : "(\(field) \(arithmetic) \(operandText)) \(op) \(valueText)"
            return (text, .arithmetic(field: field, arithmetic: arithmetic, operand: operand, op: op, value: value))
        case 15:
            let field = random.pick(["tags", "nums"])
            let selector = random.pick(["FIRST", "LAST", "0", "1", "SIZE"])
            let op = field == "tags" && selector != "SIZE" ? random.pick(["==", "!="]) : random.pick(orderOps)
            let (value, text): (Value, String)
            if field == "tags" && selector != "SIZE" {
                (value, text) = random.chance(20) ? (.null, "nil") : stringConstant(Self.strings)
            } else {
                let int = Int64(random.below(5) - 2)
                (value, text) = (.int(int), "\(int)")
            }
            let written = Int(selector) == nil && random.chance(30) ? selector.lowercased() : selector
            return (
                "\(field)[\(written)] \(op) \(text)", .element(field: field, selector: selector, op: op, value: value)
            )
        case 0, 1:
            let field = random.pick(["i", "d"])
            let op = random.pick(orderOps)
            let (value, text) = numberConstant()
            return (
                "\(field) \(op) \(text)",
                .compare(field: field, op: op, caseless: false, diacriticless: false, value: value, quantifier: nil)
            )
        case 2, 3:
            let op = random.pick(orderOps + ["BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE"])
            let (modifier, caseless, diacriticless) =
                ["==", "!=", "BEGINSWITH", "ENDSWITH", "CONTAINS", "LIKE"].contains(op)
                ? modifiers() : ("", false, false)
            let (value, text) = stringConstant(op == "LIKE" ? Self.patterns : Self.strings)
            let written = op.count > 2 ? keyword(op) : op
            return (
                "s \(written)\(modifier) \(text)",
                .compare(
                    field: "s", op: op, caseless: caseless, diacriticless: diacriticless, value: value, quantifier: nil)
            )
        case 4:
            let op = random.pick(["==", "!="])
            let value = random.chance(50)
            return (
                "b \(op) \(keyword(value ? "TRUE" : "FALSE"))",
                .compare(
                    field: "b", op: op, caseless: false, diacriticless: false, value: .bool(value), quantifier: nil)
            )
        case 5:
            let field = random.pick(["i", "d", "s"])
            let op = random.pick(["==", "!="])
            let null = random.pick(["nil", "NULL", "null"])
            return (
                "\(field) \(op) \(null)",
                .compare(field: field, op: op, caseless: false, diacriticless: false, value: .null, quantifier: nil)
            )
        case 6:
            let quantifier = random.pick(["ANY", "ALL", "NONE", "SOME", ""])
            let op = random.pick(orderOps)
            let (value, text) = numberConstant()
            let prefix = quantifier.isEmpty ? "" : keyword(quantifier) + " "
            return (
                "\(prefix)nums \(op) \(text)",
                .compare(
                    field: "nums", op: op, caseless: false, diacriticless: false, value: value,
                    quantifier: quantifier == "SOME" || quantifier.isEmpty ? "ANY" : quantifier)
            )
        case 7:
            let quantifier = random.pick(["ANY", "ALL", "NONE", ""])
            let op = random.pick(["==", "!=", "BEGINSWITH", "CONTAINS", "LIKE"])
            let (modifier, caseless, diacriticless) = modifiers()
            let (value, text) = stringConstant(op == "LIKE" ? Self.patterns : Self.strings)
            let prefix = quantifier.isEmpty ? "" : quantifier + " "
            return (
                "\(prefix)tags \(op)\(modifier) \(text)",
                .compare(
                    field: "tags", op: op, caseless: caseless, diacriticless: diacriticless, value: value,
                    quantifier: quantifier.isEmpty ? "ANY" : quantifier)
            )
        case 8:
            let field = random.pick(["tags", "nums"])
            let op = random.pick(orderOps)
            let count = Int64(random.below(4))
            return (
                "\(field).\(random.pick(["@count", "@size"])) \(op) \(count)",
                .count(field: field, op: op, value: count)
            )
        case 9:
            if random.chance(50) {
                let caseless = random.chance(30)
                let (value, text) = stringConstant(Self.strings)
                return (
                    "\(text) \(keyword("IN"))\(caseless ? "[c]" : "") tags",
                    .member(value: value, field: "tags", caseless: caseless)
                )
            }
            let field = random.pick(["i", "d"])
            var values: [Value] = []
            var texts: [String] = []
            // Short lists are compared value by value, lists of EqualityLookup.minimumCount or more through a hash.
            for _ in 0..<(random.chance(25) ? 8 + random.below(12) : random.below(4)) {
                let int = Int64(random.below(7) - 3)
                values.append(.int(int))
                texts.append("\(int)")
            }
            if random.chance(30) {
                arguments.append(.list(values))
                return (
                    "\(field) IN \(placeholders ? "%@" : "$\(arguments.count - 1)")",
                    .oneOf(field: field, values: values, caseless: false)
                )
            }
            return (
                "\(field) IN {\(texts.joined(separator: ", "))}", .oneOf(field: field, values: values, caseless: false)
            )
        case 10:
            let field = random.pick(["i", "d"])
            let (lower, lowerText) = numberConstant()
            let (upper, upperText) = numberConstant()
            return (
                "\(field) \(keyword("BETWEEN")) {\(lowerText), \(upperText)}",
                .between(field: field, lower: lower, upper: upper)
            )
        default:
            let op = random.pick(orderOps)
            let (left, right) = random.chance(50) ? ("i", "d") : ("d", "i")
            if random.chance(10) { return (keyword("TRUEPREDICATE"), .constant(true)) }
            return ("\(left) \(op) \(right)", .fields(left: left, op: op, right: right))
        }
    }
}

@Suite("Randomized queries against a reference evaluator", .tags(.fuzz)) struct RandomizedQueryFuzzTests {
    @Test("matches agrees with the reference evaluator", arguments: [1, 2, 3, 0xDEAD_BEEF, 0x5EED] as [UInt64])
    func matchesAgreesWithReference(seed: UInt64) throws {
        print("RandomizedQueryFuzzTests seed \(seed)")
        var generator = QueryGenerator(random: SplitMix64(seed: seed))
        let type = try #require(QueryGenerator.schema[type: "R"])
        let objects = (0..<60).map { generator.object(id: Int64($0)) }
        let source = InMemoryObjectSource()
        var failures = 0
        var compiled = 0
        defer { #expect(compiled > 10, "seed \(seed): only \(compiled) predicates had a positional form") }
        for round in 0..<300 {
            generator.arguments = []
            generator.placeholders = generator.random.chance(30)
            let (text, reference) = generator.predicate(depth: 3)
            let query: Query
            do {
                query = try Query(text, arguments: generator.arguments, type: type, schema: QueryGenerator.schema)
            } catch {
                Issue.record("seed \(seed) round \(round): \(text) \(generator.arguments) failed to parse: \(error)")
                failures += 1
                continue
            }
            if let positional = query.positionalPredicate(for: type) {
                compiled += 1
                for object in objects {
                    let values = type.properties.map { object[$0.name] ?? .null }
                    if positional.matches(values) != query.matches(object, source: source) {
                        Issue.record(
                            "seed \(seed) round \(round): \(text) with \(generator.arguments): positional form differs")
                        failures += 1
                        break
                    }
                }
            }
            for object in objects where query.matches(object, source: source) != reference.evaluate(object) {
                let fields = object.keys.sorted().map { "\($0): \(object[$0] ?? .null)" }.joined(separator: ", ")
                let actual = query.matches(object, source: source)
                Issue.record(
                    "seed \(seed) round \(round): \(text) with \(generator.arguments) on {\(fields)}: matches \(actual)"
                )
                failures += 1
                break
            }
            if failures > 5 { return }
        }
    }

    @Test("SORT agrees with a reference stable sort", arguments: [7, 8, 9] as [UInt64])
    func sortAgreesWithReference(seed: UInt64) throws {
        print("RandomizedQueryFuzzTests sort seed \(seed)")
        var generator = QueryGenerator(random: SplitMix64(seed: seed))
        let type = try #require(QueryGenerator.schema[type: "R"])
        let objects = (0..<80).map { (PrimaryKey.int(Int64($0)), generator.object(id: Int64($0))) }
        for _ in 0..<30 {
            let keys = (0..<(1 + generator.random.below(2))).map { _ in
                (generator.random.pick(["i", "d", "s", "b"]), generator.random.chance(50))
            }
            let clause = keys.map { "\($0.0) \($0.1 ? "ASC" : "DESC")" }.joined(separator: ", ")
            let query = try Query("TRUEPREDICATE SORT(\(clause))", type: type, schema: QueryGenerator.schema)
            let expected = objects.enumerated().sorted { a, b in
                for (field, ascending) in keys {
                    let x = Self.sortable(a.element.1[field] ?? .null)
                    let y = Self.sortable(b.element.1[field] ?? .null)
                    if let precedes = Reference.precedes(x, y) { return ascending ? precedes : !precedes }
                }
                return a.offset < b.offset
            }.map(\.element.0)
            let actual = query.apply(to: objects, source: InMemoryObjectSource()).map(\.0)
            #expect(actual == expected, "seed \(seed): SORT(\(clause))")
        }
    }

    @Test(
        "SORT, DISTINCT and LIMIT on values by position agree with the same clauses on values by name",
        arguments: [21, 22, 23] as [UInt64])
    func positionalClausesAgree(seed: UInt64) throws {
        var generator = QueryGenerator(random: SplitMix64(seed: seed))
        let type = try #require(QueryGenerator.schema[type: "R"])
        let objects = (0..<120).map { (PrimaryKey.int(Int64($0)), generator.object(id: Int64($0))) }
        for _ in 0..<40 {
            var clauses: [String] = []
            for _ in 0..<(1 + generator.random.below(3)) {
                switch generator.random.below(3) {
                case 0:
                    let keys = (0..<(1 + generator.random.below(3))).map { _ in
                        "\(generator.random.pick(["_id", "i", "d", "s", "b"])) \(generator.random.chance(50) ? "ASC" : "DESC")"
                    }
                    clauses.append("SORT(\(keys.joined(separator: ", ")))")
                case 1:
                    let paths = (0..<(1 + generator.random.below(2))).map { _ in
                        generator.random.pick(["i", "d", "s", "b"])
                    }
                    clauses.append("DISTINCT(\(paths.joined(separator: ", ")))")
                default:
                    clauses.append("LIMIT(\(generator.random.below(130)))")
                }
            }
            let text = "TRUEPREDICATE " + clauses.joined(separator: " ")
            let query = try Query(text, type: type, schema: QueryGenerator.schema)
            let positional = try #require(query.positionalClauses(for: type), "\(text)")
            let expected = query.applyClauses(to: objects, source: InMemoryObjectSource()).map(\.0)
            let actual = positional.order(count: objects.count) { object, position in
                objects[object].1[type.properties[position].name] ?? .null
            }.map { objects[$0].0 }
            #expect(actual == expected, "seed \(seed): \(text)")
        }
        // Clauses that read a list, or none at all, are left to the general path.
        #expect(
            try Query("TRUEPREDICATE SORT(tags.@count ASC)", type: type, schema: QueryGenerator.schema)
                .positionalClauses(for: type) == nil)
        #expect(
            try Query("TRUEPREDICATE", type: type, schema: QueryGenerator.schema).positionalClauses(for: type) == nil)
    }

    /// Booleans sort false before true; the reference orders them as the numbers 0 and 1.
    private static func sortable(_ value: Value) -> Value {
        if case .bool(let bool) = value { return .int(bool ? 1 : 0) }
        return value
    }

    @Test("Arbitrary text never traps: it parses or throws a QueryError", arguments: [11, 12, 13] as [UInt64])
    func arbitraryTextNeverTraps(seed: UInt64) throws {
        print("RandomizedQueryFuzzTests fuzz seed \(seed)")
        var random = SplitMix64(seed: seed)
        let vocabulary = [
            "priority", "title", "tags", "author", ".", "name", "@count", "@sum", "@avg", "@min", "@size", "==", "=",
            "!=", "<", ">=", "<>", "=<", "AND", "OR", "NOT", "!", "&&", "||", "(", ")", "{", "}", "[c]", "[", "]",
            "IN", "BETWEEN", "BEGINSWITH", "LIKE", "ANY", "ALL", "NONE", "$0", "$1", "%@", "'x'", "\"y", "'\\", "1",
            "-", "2.5", "1e", "nil", "true", "T1:2", "2024-01-01@00:00:00", "2024-13-01@00:00:00", "oid(", ")",
            "uuid(x)", "SORT(", "DISTINCT(", "LIMIT(", "ASC", ",", "TRUEPREDICATE", "steps", "minutes", "\u{0}",
            "é", "\n", "\r\n", "\t", "@", "$", "%", "#", "🙂", "reviewers", "friends", "meta", "label", "SUBQUERY",
        ]
        let arguments: [Value] = ["a", [1, 2]]
        for _ in 0..<3_000 {
            var text = ""
            for _ in 0..<(1 + random.below(12)) {
                let word: String = random.pick(vocabulary)
                text += word
                if random.chance(70) { text += " " }
            }
            do {
                let query = try Fixture.query(text, arguments)
                for (_, fields) in Fixture.tasks { _ = query.matches(fields, source: Fixture.source) }
                _ = query.apply(to: Fixture.tasks, source: Fixture.source)
                _ = query.indexableConstraints
            } catch {
                #expect(!error.message.isEmpty)
                #expect(error.position >= 0 && error.position <= text.utf8.count)
                _ = error.description
            }
        }
    }
}
