import Foundation
import TributaryModel

/// A recursive-descent parser from tokens to a ``SyntaxQuery``.
///
/// Grammar (keywords are case-insensitive):
///
/// ```
/// query       := predicate descriptor* END
/// predicate   := and (('OR' | '||') and)*
/// and         := not (('AND' | '&&') not)*
/// not         := ('NOT' | '!') not | atom
/// atom        := '(' predicate ')' | 'TRUEPREDICATE' | 'FALSEPREDICATE' | comparison
/// comparison  := quantifier? sum operator modifier? quantifier? sum
///              | quantifier? sum 'BETWEEN' '{' value ',' value '}'
///              | quantifier? keypath 'GEOWITHIN' (shape | '$' digits)
/// shape       := 'geoBox' '(' point ',' point ')' | 'geoCircle' '(' point ',' number ')'
///              | 'geoPolygon' '(' ring (',' ring)* ')'
/// ring        := '{' point (',' point)* '}'
/// point       := '[' number ',' number (',' number)? ']'
/// quantifier  := 'ANY' | 'SOME' | 'ALL' | 'NONE'
/// operator    := '==' | '=' | '!=' | '<>' | '<' | '<=' | '=<' | '>' | '>=' | '=>'
///              | 'BEGINSWITH' | 'ENDSWITH' | 'CONTAINS' | 'LIKE' | 'IN' | 'TEXT'
/// modifier    := '[' ('c' | 'd' | 'cd') ']'
/// sum         := product (('+' | '-') product)*
/// product     := value (('*' | '/') value)*
/// value       := '(' sum ')' | keypath | literal | '$' digits | '%@' | '{' (value (',' value)*)? '}'
///              | 'SUBQUERY' '(' keypath ',' '$' name ',' predicate ')' '.' ('@count' | '@size')
/// literal     := number | string | date | 'true' | 'false' | 'null' | 'nil' | oid(...) | uuid(...)
///              | 'B64"' base64 '"' | 'obj' '(' string ',' literal ')'
/// number      := ('-' | '+')? (digits | digits '.' digits? | '.' digits | '0x' hex | 'inf' | 'infinity' | 'nan')
/// keypath     := ('$' name | '@links' | element) ('.' (element | '@' name))*
/// element     := name ('[' ('FIRST' | 'LAST' | 'SIZE' | '*' | digits) ']')?
/// descriptor  := 'SORT' '(' keypath direction (',' keypath direction)* ')'
///              | 'DISTINCT' '(' keypath (',' keypath)* ')' | 'LIMIT' '(' digits ')'
/// direction   := 'ASC' | 'ASCENDING' | 'DESC' | 'DESCENDING'
/// ```
///
/// `AND` and `OR` chains are collected into flat lists, so a long chain does not deepen the recursion;
/// parentheses, `NOT` and SUBQUERY do, and are limited to ``Query/maximumNestingDepth`` levels. A `(` that starts a
/// predicate may open a parenthesized predicate or an arithmetic expression (`(age + 1) * 2 > 10`): the parser
/// reads it as a predicate first, and as the left side of a comparison when that does not fit.
struct Parser {
    private let tokens: [Token]
    private let query: String
    private var index = 0
    private var nextPlaceholder = 0
    private let maximumDepth: Int

    init(tokens: [Token], query: String, maximumDepth: Int) {
        self.tokens = tokens
        self.query = query
        self.maximumDepth = maximumDepth
    }

    static func parse(_ query: String, maximumDepth: Int) throws(QueryError) -> SyntaxQuery {
        var parser = Parser(tokens: try Lexer.tokenize(query), query: query, maximumDepth: maximumDepth)
        return try parser.parseQuery()
    }

    // MARK: Tokens

    /// The current token (the lexer always ends the list with `.end`, so this never runs off the end).
    private var current: Token { tokens[min(index, tokens.count - 1)] }

    private func token(at distance: Int) -> Token { tokens[max(0, min(index + distance, tokens.count - 1))] }

    private mutating func advance() -> Token {
        let token = current
        if index < tokens.count - 1 { index += 1 }
        return token
    }

    /// The text of the previous token, for messages such as "expected a value after '=='".
    private var previousText: String {
        guard index > 0 else { return "" }
        return text(tokens[index - 1].start, tokens[index - 1].end)
    }

    private func text(_ start: Int, _ end: Int) -> String {
        let utf8 = query.utf8
        let lower = utf8.index(utf8.startIndex, offsetBy: max(0, min(start, utf8.count)))
        let upper = utf8.index(utf8.startIndex, offsetBy: max(0, min(end, utf8.count)))
        return String(decoding: utf8[lower..<upper], as: UTF8.self)
    }

    /// What was found instead of what was expected, for the end of a message: `, found 'foo'`; nothing at the
    /// end of the query, where the caret already says so.
    private var found: String {
        current.isEnd ? "" : ", found '\(text(current.start, current.end))'"
    }

    private func error(_ message: String, at position: Int? = nil) -> QueryError {
        QueryError(.syntax, message, position: position ?? current.start, query: query)
    }

    private mutating func expect(_ symbol: Token.Symbol, _ message: @autoclosure () -> String) throws(QueryError) {
        guard current.isSymbol(symbol) else { throw error("\(message())\(found)") }
        _ = advance()
    }

    private func isDescriptorStart(_ token: Token, next: Token) -> Bool {
        (token.isKeyword("SORT") || token.isKeyword("DISTINCT") || token.isKeyword("LIMIT"))
            && next.isSymbol(.leftParen)
    }

    // MARK: Query

    private mutating func parseQuery() throws(QueryError) -> SyntaxQuery {
        if isDescriptorStart(current, next: token(at: 1)) {
            throw error(
                "expected a predicate before \(text(current.start, current.end).uppercased()); write TRUEPREDICATE \(text(current.start, current.end).uppercased())(...) to keep every object"
            )
        }
        let predicate = try parsePredicate(depth: 0)
        var descriptors: [SyntaxDescriptor] = []
        while isDescriptorStart(current, next: token(at: 1)) {
            descriptors.append(try parseDescriptor())
        }
        guard current.isEnd else {
            if descriptors.isEmpty {
                throw error("expected AND, OR, SORT, DISTINCT, LIMIT or the end of the query\(found)")
            }
            throw error("expected SORT, DISTINCT, LIMIT or the end of the query\(found)")
        }
        return SyntaxQuery(predicate: predicate, descriptors: descriptors)
    }

    // MARK: Predicates

    private mutating func parsePredicate(depth: Int) throws(QueryError) -> SyntaxPredicate {
        var terms = [try parseAnd(depth: depth)]
        while current.isKeyword("OR") || current.isSymbol(.or) {
            _ = advance()
            terms.append(try parseAnd(depth: depth))
        }
        return terms.count == 1 ? terms[0] : .or(terms)
    }

    private mutating func parseAnd(depth: Int) throws(QueryError) -> SyntaxPredicate {
        var terms = [try parseNot(depth: depth)]
        while current.isKeyword("AND") || current.isSymbol(.and) {
            _ = advance()
            terms.append(try parseNot(depth: depth))
        }
        return terms.count == 1 ? terms[0] : .and(terms)
    }

    private mutating func checkDepth(_ depth: Int) throws(QueryError) {
        guard depth < maximumDepth else {
            throw QueryError(
                .tooComplex, "the query nests deeper than \(maximumDepth) levels of parentheses and NOT",
                position: current.start, query: query)
        }
    }

    private mutating func parseNot(depth: Int) throws(QueryError) -> SyntaxPredicate {
        if current.isSymbol(.bang) || current.isKeyword("NOT") {
            try checkDepth(depth + 1)
            _ = advance()
            return .not(try parseNot(depth: depth + 1))
        }
        return try parseAtom(depth: depth)
    }

    private mutating func parseAtom(depth: Int) throws(QueryError) -> SyntaxPredicate {
        if current.isSymbol(.leftParen) {
            try checkDepth(depth + 1)
            let saved = (index, nextPlaceholder)
            let predicateError: QueryError
            do {
                let predicate = try parseParenthesizedPredicate(depth: depth)
                // `(a + b) * 2 > 1` and `(a) > 1` start with parentheses too: an operator after ')' says so.
                if !isArithmeticOperator(current) && comparisonOperator(current) == nil
                    && !current.isKeyword("GEOWITHIN")
                {
                    return predicate
                }
                predicateError = error("expected AND, OR or ')'")
            } catch {
                predicateError = error
            }
            (index, nextPlaceholder) = saved
            do {
                return try parseComparison(depth: depth)
            } catch {
                throw predicateError
            }
        }
        if current.isKeyword("TRUEPREDICATE") {
            _ = advance()
            return .constant(true)
        }
        if current.isKeyword("FALSEPREDICATE") {
            _ = advance()
            return .constant(false)
        }
        return try parseComparison(depth: depth)
    }

    private mutating func parseParenthesizedPredicate(depth: Int) throws(QueryError) -> SyntaxPredicate {
        let open = advance()
        let inner = try parsePredicate(depth: depth + 1)
        guard current.isSymbol(.rightParen) else {
            let column = QueryError(.syntax, "", position: open.start, query: query).column
            throw error("the '(' at column \(column) is not closed: expected ')'\(found)")
        }
        _ = advance()
        return inner
    }

    private func isArithmeticOperator(_ token: Token) -> Bool {
        token.isSymbol(.plus) || token.isSymbol(.minus) || token.isSymbol(.star) || token.isSymbol(.slash)
    }

    /// `ANY`, `SOME`, `ALL` or `NONE` when it is one here: followed by what a quantifier applies to (a key path, a
    /// list or an argument), not by an operator, which makes it a property's name.
    private mutating func parseQuantifier() -> Quantifier? {
        switch token(at: 1).kind {
        case .identifier, .variable, .argument, .placeholder, .symbol(.leftBrace): break
        case .atName(let name) where name.lowercased() == "links": break
        default: return nil
        }
        let quantifier: Quantifier
        if current.isKeyword("ANY") || current.isKeyword("SOME") {
            quantifier = .anyElement
        } else if current.isKeyword("ALL") {
            quantifier = .allElements
        } else if current.isKeyword("NONE") {
            quantifier = .noElement
        } else {
            return nil
        }
        _ = advance()
        return quantifier
    }

    private mutating func parseComparison(depth: Int) throws(QueryError) -> SyntaxPredicate {
        let quantifierPosition = current.start
        let quantifier = parseQuantifier()
        let left = try parseSum(
            depth: depth,
            expected: quantifier == nil
                ? "expected a predicate: a property, a value, '(', NOT, TRUEPREDICATE or FALSEPREDICATE"
                : "expected a key path or a list after '\(previousText)'")
        let leftText = text(left.start, left.end)
        if current.isKeyword("GEOWITHIN") {
            _ = advance()
            return .geoWithin(
                SyntaxGeoWithin(
                    quantifier: quantifier, quantifierPosition: quantifierPosition, path: left,
                    shape: try parseGeoShape()))
        }
        let opToken = current
        guard let op = comparisonOperator(opToken) else {
            throw error("expected a comparison operator after '\(leftText)'\(found)")
        }
        _ = advance()
        let opText = text(opToken.start, opToken.end)
        var options: StringOptions = []
        if current.isSymbol(.leftBracket) {
            options = try parseOptions(after: op, opText: opText)
        }
        let right: SyntaxExpression
        let rightQuantifierPosition = current.start
        var rightQuantifier: Quantifier?
        if op == .between {
            right = try parseBetweenBounds()
        } else {
            rightQuantifier = parseQuantifier()
            right = try parseSum(
                depth: depth,
                expected: rightQuantifier == nil
                    ? "expected a value after '\(opText)'" : "expected a key path or a list after '\(previousText)'")
        }
        return .comparison(
            SyntaxComparison(
                quantifier: quantifier, quantifierPosition: quantifierPosition, left: left, op: op, opText: opText,
                opPosition: opToken.start, options: options, rightQuantifier: rightQuantifier,
                rightQuantifierPosition: rightQuantifierPosition, right: right))
    }

    // MARK: Geospatial shapes

    /// `geoBox([lng, lat], [lng, lat])`, `geoCircle([lng, lat], radians)`, `geoPolygon({[lng, lat], ...}, ...)`,
    /// or an argument.
    private mutating func parseGeoShape() throws(QueryError) -> SyntaxGeoShape {
        let start = current.start
        switch current.kind {
        case .argument(let number):
            _ = advance()
            return SyntaxGeoShape(kind: .argument(number, placeholder: false), start: start)
        case .placeholder:
            _ = advance()
            defer { nextPlaceholder += 1 }
            return SyntaxGeoShape(kind: .argument(nextPlaceholder, placeholder: true), start: start)
        case .identifier(let name) where token(at: 1).isSymbol(.leftParen):
            let shape = name.lowercased()
            guard ["geobox", "geocircle", "geopolygon"].contains(shape) else { break }
            _ = advance()
            _ = advance()
            let kind: SyntaxGeoShape.Kind
            switch shape {
            case "geobox":
                let bottomLeft = try parseGeoPoint("the bottom-left corner, as in geoBox([-1, -1], [1, 1])")
                try expect(.comma, "expected ',' and the top-right corner after the bottom-left one")
                kind = .box(bottomLeft, try parseGeoPoint("the top-right corner, as in geoBox([-1, -1], [1, 1])"))
            case "geocircle":
                let center = try parseGeoPoint("the center, as in geoCircle([12.5, 55.7], 0.01)")
                try expect(.comma, "expected ',' and the radius in radians after the center")
                kind = .circle(center, radius: try parseGeoNumber("the radius in radians"))
            default:
                var rings: [[SyntaxGeoPoint]] = []
                repeat {
                    try expect(
                        .leftBrace, "expected '{' to start a ring, as in geoPolygon({[0, 0], [1, 0], [1, 1], [0, 0]})")
                    var ring: [SyntaxGeoPoint] = []
                    repeat {
                        ring.append(try parseGeoPoint("a vertex [longitude, latitude]"))
                    } while try consumeComma()
                    try expect(.rightBrace, "expected ',' or '}' in the ring")
                    rings.append(ring)
                } while try consumeComma()
                kind = .polygon(rings)
            }
            try expect(.rightParen, "expected ')' to end the shape")
            return SyntaxGeoShape(kind: kind, start: start)
        default:
            break
        }
        throw error("expected geoBox(...), geoCircle(...), geoPolygon(...) or an argument after GEOWITHIN\(found)")
    }

    /// `[longitude, latitude]` or `[longitude, latitude, altitude]`.
    private mutating func parseGeoPoint(_ what: String) throws(QueryError) -> SyntaxGeoPoint {
        let start = current.start
        try expect(.leftBracket, "expected \(what)")
        var coordinates: [SyntaxExpression] = []
        repeat {
            coordinates.append(try parseGeoNumber("a coordinate"))
        } while try consumeComma()
        guard coordinates.count == 2 || coordinates.count == 3 else {
            throw error("a point is [longitude, latitude] or [longitude, latitude, altitude]", at: start)
        }
        try expect(.rightBracket, "expected ']' after the point's coordinates")
        return SyntaxGeoPoint(coordinates: coordinates, start: start)
    }

    /// A number or an argument.
    private mutating func parseGeoNumber(_ what: String) throws(QueryError) -> SyntaxExpression {
        let value = try parseSimpleValue(expected: "expected \(what)")
        switch value.kind {
        case .literal(.int), .literal(.double), .argument: return value
        default: throw error("expected \(what): a number or an argument such as $0", at: value.start)
        }
    }

    private func comparisonOperator(_ token: Token) -> ComparisonOperator? {
        switch token.kind {
        case .symbol(.equal), .symbol(.singleEqual): return .equal
        case .symbol(.notEqual): return .notEqual
        case .symbol(.less): return .less
        case .symbol(.lessEqual): return .lessEqual
        case .symbol(.greater): return .greater
        case .symbol(.greaterEqual): return .greaterEqual
        case .identifier:
            if token.isKeyword("BEGINSWITH") { return .beginsWith }
            if token.isKeyword("ENDSWITH") { return .endsWith }
            if token.isKeyword("CONTAINS") { return .contains }
            if token.isKeyword("LIKE") { return .like }
            if token.isKeyword("IN") { return .in }
            if token.isKeyword("BETWEEN") { return .between }
            if token.isKeyword("TEXT") { return .text }
            return nil
        default: return nil
        }
    }

    /// `[c]`, `[d]` or `[cd]` after an operator.
    private mutating func parseOptions(after op: ComparisonOperator, opText: String) throws(QueryError)
        -> StringOptions
    {
        let open = advance()
        guard op.acceptsStringOptions else {
            throw error(
                "a '[...]' modifier can only follow ==, !=, BEGINSWITH, ENDSWITH, CONTAINS, LIKE or IN, not '\(opText)'",
                at: open.start)
        }
        var options: StringOptions = []
        guard case .identifier(let letters) = current.kind else {
            throw error("expected c, d or cd inside '[...]'\(found)")
        }
        for letter in letters.lowercased() {
            switch letter {
            case "c": options.insert(.caseInsensitive)
            case "d": options.insert(.diacriticInsensitive)
            default: throw error("unknown modifier '[\(letters)]': expected [c], [d] or [cd]")
            }
        }
        _ = advance()
        try expect(.rightBracket, "expected ']' to end the modifier")
        return options
    }

    private mutating func parseBetweenBounds() throws(QueryError) -> SyntaxExpression {
        let start = current.start
        try expect(.leftBrace, "expected '{' after BETWEEN, as in BETWEEN {1, 10}")
        let lower = try parseSimpleValue(expected: "expected the lower bound after 'BETWEEN {'")
        try expect(.comma, "expected ',' between the two bounds of BETWEEN")
        let upper = try parseSimpleValue(expected: "expected the upper bound after ','")
        let end = current.end
        try expect(.rightBrace, "expected '}' after the upper bound of BETWEEN")
        return SyntaxExpression(kind: .list([lower, upper]), start: start, end: end)
    }

    // MARK: Values

    /// Values joined by `+` and `-`, each a product.
    private mutating func parseSum(depth: Int, expected: String) throws(QueryError) -> SyntaxExpression {
        var result = try parseProduct(depth: depth, expected: expected)
        while current.isSymbol(.plus) || current.isSymbol(.minus) {
            let op: ArithmeticOperator = advance().isSymbol(.plus) ? .add : .subtract
            let right = try parseProduct(depth: depth, expected: "expected a value after '\(op.rawValue)'")
            result = SyntaxExpression(kind: .arithmetic(op, result, right), start: result.start, end: right.end)
        }
        return result
    }

    /// Values joined by `*` and `/`.
    private mutating func parseProduct(depth: Int, expected: String) throws(QueryError) -> SyntaxExpression {
        var result = try parseValue(depth: depth, expected: expected)
        while current.isSymbol(.star) || current.isSymbol(.slash) {
            let op: ArithmeticOperator = advance().isSymbol(.star) ? .multiply : .divide
            let right = try parseValue(depth: depth, expected: "expected a value after '\(op.rawValue)'")
            result = SyntaxExpression(kind: .arithmetic(op, result, right), start: result.start, end: right.end)
        }
        return result
    }

    /// A parenthesized sum, key path, literal, argument, `{...}` list or SUBQUERY. `expected` is the message when
    /// none is here.
    private mutating func parseValue(depth: Int, expected: String) throws(QueryError) -> SyntaxExpression {
        if current.isSymbol(.leftParen) {
            try checkDepth(depth + 1)
            let open = advance()
            let inner = try parseSum(depth: depth + 1, expected: "expected a value after '('")
            guard current.isSymbol(.rightParen) else {
                let column = QueryError(.syntax, "", position: open.start, query: query).column
                throw error("the '(' at column \(column) is not closed: expected ')'\(found)")
            }
            let close = advance()
            return SyntaxExpression(kind: inner.kind, start: open.start, end: close.end)
        }
        if current.isKeyword("SUBQUERY") && token(at: 1).isSymbol(.leftParen) {
            return try parseSubquery(depth: depth)
        }
        return try parseSimpleValue(expected: expected)
    }

    /// A key path, literal, argument or `{...}` list.
    private mutating func parseSimpleValue(expected: String) throws(QueryError) -> SyntaxExpression {
        let start = current.start
        func literal(_ literal: Literal, _ token: Token) -> SyntaxExpression {
            SyntaxExpression(kind: .literal(literal), start: token.start, end: token.end)
        }
        switch current.kind {
        case .identifier(let name):
            switch name.lowercased() {
            case "true": return literal(.bool(true), advance())
            case "false": return literal(.bool(false), advance())
            case "nil", "null": return literal(.null, advance())
            case "inf", "infinity": return literal(.double(.infinity), advance())
            case "nan": return literal(.double(.nan), advance())
            case "obj" where token(at: 1).isSymbol(.leftParen): return try parseObjectLink()
            case "bin" where token(at: 1).isSymbol(.leftParen),
                "binary" where token(at: 1).isSymbol(.leftParen):
                return try parseBinary()
            case "truepredicate", "falsepredicate":
                throw error("\(expected)\(found) (a predicate, not a value)")
            case "and", "or", "not", "subquery":
                throw error("\(expected)\(found)")
            case "in", "between", "beginswith", "endswith", "contains", "like":
                // Operators, and property names only where one is expected (`in == 5`, `like.count > 1`): anywhere
                // else, reading one as a name would only move the error further away.
                let next = token(at: 1)
                guard comparisonOperator(next) != nil || next.isSymbol(.dot) || next.isSymbol(.leftBracket) else {
                    throw error("\(expected)\(found)")
                }
                let components = try parseKeyPath()
                return SyntaxExpression(kind: .keyPath(components), start: start, end: token(at: -1).end)
            default:
                let components = try parseKeyPath()
                return SyntaxExpression(kind: .keyPath(components), start: start, end: token(at: -1).end)
            }
        case .variable:
            let components = try parseKeyPath()
            return SyntaxExpression(kind: .keyPath(components), start: start, end: token(at: -1).end)
        case .number(let digits):
            return literal(try number(digits, negative: false, at: start), advance())
        case .symbol(.minus), .symbol(.plus):
            let negative = advance().isSymbol(.minus)
            let sign = negative ? "-" : "+"
            switch current.kind {
            case .number(let digits):
                let token = advance()
                return SyntaxExpression(
                    kind: .literal(try number(digits, negative: negative, at: start)), start: start, end: token.end)
            case .identifier(let word) where ["inf", "infinity"].contains(word.lowercased()):
                let token = advance()
                return SyntaxExpression(
                    kind: .literal(.double(negative ? -.infinity : .infinity)), start: start, end: token.end)
            case .identifier(let word) where word.lowercased() == "nan":
                let token = advance()
                return SyntaxExpression(kind: .literal(.double(.nan)), start: start, end: token.end)
            default:
                throw error("expected a number after '\(sign)'\(found)")
            }
        case .data(let data):
            guard let string = String(validating: data, as: UTF8.self) else {
                throw QueryError(
                    .invalidLiteral,
                    "B64\"...\" stands for a string, and these bytes are not UTF-8 text; write bin(B64\"...\") for data",
                    position: start, query: query)
            }
            return literal(.string(string), advance())
        case .string(let string): return literal(.string(string), advance())
        case .date(let date): return literal(.date(date), advance())
        case .objectId(let id): return literal(.objectId(id), advance())
        case .uuid(let uuid): return literal(.uuid(uuid), advance())
        case .argument(let number):
            let token = advance()
            return SyntaxExpression(kind: .argument(number, placeholder: false), start: token.start, end: token.end)
        case .placeholder:
            let token = advance()
            defer { nextPlaceholder += 1 }
            return SyntaxExpression(
                kind: .argument(nextPlaceholder, placeholder: true), start: token.start, end: token.end)
        case .symbol(.leftBrace):
            return try parseList()
        case .atName(let name) where name.lowercased() == "links":
            let components = try parseKeyPath()
            return SyntaxExpression(kind: .keyPath(components), start: start, end: token(at: -1).end)
        case .atName(let name):
            throw QueryError(
                .unsupported, "'@\(name)' must follow a key path, as in items.@\(name)", position: start, query: query)
        default:
            throw error("\(expected)\(found)")
        }
    }

    private func number(_ digits: String, negative: Bool, at position: Int) throws(QueryError) -> Literal {
        let text = negative ? "-" + digits : digits
        if digits.hasPrefix("0x") || digits.hasPrefix("0X") {
            let hex = String(digits.dropFirst(2))
            guard !hex.isEmpty else {
                throw QueryError(
                    .invalidLiteral, "'\(text)' is not a hexadecimal integer: write 0x and hexadecimal digits",
                    position: position, query: query)
            }
            let limit = negative ? UInt64(Int64.max) + 1 : UInt64(Int64.max)
            guard let magnitude = UInt64(hex, radix: 16), magnitude <= limit else {
                throw QueryError(
                    .invalidLiteral, "integer \(text) does not fit in 64 bits", position: position, query: query)
            }
            return .int(negative ? Int64(truncatingIfNeeded: 0 &- magnitude) : Int64(magnitude))
        }
        if digits.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }) {
            guard let value = Double(text), value.isFinite else {
                throw QueryError(.invalidLiteral, "'\(text)' is not a finite number", position: position, query: query)
            }
            return .double(value)
        }
        guard let value = Int64(text) else {
            throw QueryError(
                .invalidLiteral, "integer \(text) does not fit in 64 bits", position: position, query: query)
        }
        return .int(value)
    }

    /// `{a, b, ...}`: literals and arguments only.
    private mutating func parseList() throws(QueryError) -> SyntaxExpression {
        let open = advance()
        var elements: [SyntaxExpression] = []
        if !current.isSymbol(.rightBrace) {
            repeat {
                if current.isSymbol(.leftBrace) {
                    throw QueryError(
                        .unsupported, "lists inside lists are not supported", position: current.start, query: query)
                }
                let element = try parseSimpleValue(expected: "expected a value in the list")
                if case .keyPath = element.kind {
                    throw QueryError(
                        .unsupported, "a '{...}' list can only hold literals and arguments, not key paths",
                        position: element.start, query: query)
                }
                elements.append(element)
            } while try consumeComma()
        }
        let close = current
        try expect(.rightBrace, "expected ',' or '}' in the list")
        return SyntaxExpression(kind: .list(elements), start: open.start, end: close.end)
    }

    private mutating func consumeComma() throws(QueryError) -> Bool {
        guard current.isSymbol(.comma) else { return false }
        _ = advance()
        return true
    }

    private mutating func parseKeyPath() throws(QueryError) -> [PathComponent] {
        var components: [PathComponent]
        switch current.kind {
        case .identifier(let first):
            components = [PathComponent(name: first, isOperator: false, position: current.start)]
        case .variable(let name):
            components = [PathComponent(name: name, isOperator: false, position: current.start, isVariable: true)]
        case .atName(let name) where name.lowercased() == "links":
            components = [PathComponent(name: name, isOperator: true, position: current.start)]
        default:
            throw error("expected a property name\(found)")
        }
        _ = advance()
        try parseSubscript(into: &components)
        while current.isSymbol(.dot) {
            _ = advance()
            switch current.kind {
            case .identifier(let name):
                components.append(PathComponent(name: name, isOperator: false, position: current.start))
            case .atName(let name):
                components.append(PathComponent(name: name, isOperator: true, position: current.start))
            default:
                throw error("expected a property name or @count, @size, @min, @max, @sum, @avg after '.'\(found)")
            }
            _ = advance()
            try parseSubscript(into: &components)
        }
        return components
    }

    /// `[FIRST]`, `[LAST]`, `[SIZE]`, `[*]`, `[n]` or `['key']` after the last of `components`, as many as follow.
    /// (Modifiers such as `[c]` only follow operators, so a '[' after a key path is a subscript.)
    private mutating func parseSubscript(into components: inout [PathComponent]) throws(QueryError) {
        while current.isSymbol(.leftBracket) { try parseOneSubscript(into: &components) }
    }

    private mutating func parseOneSubscript(into components: inout [PathComponent]) throws(QueryError) {
        let open = advance()
        let kind: SyntaxSubscript.Kind
        switch current.kind {
        case .identifier(let word) where word.uppercased() == "FIRST": kind = .first
        case .identifier(let word) where word.uppercased() == "LAST": kind = .last
        case .identifier(let word) where word.uppercased() == "SIZE": kind = .size
        case .symbol(.star): kind = .all
        case .number(let digits):
            guard let index = Int(digits) else {
                throw error("expected a list index: a non-negative integer that fits in 64 bits, not \(digits)")
            }
            kind = .index(index)
        case .string(let key): kind = .key(key)
        default:
            throw error("expected FIRST, LAST, SIZE, *, an index or a 'key' inside '[...]'\(found)")
        }
        _ = advance()
        try expect(.rightBracket, "expected ']' after the subscript")
        guard let last = components.indices.last, !components[last].isOperator else {
            throw error("a subscript must follow a property name", at: open.start)
        }
        let selector = SyntaxSubscript(kind: kind, position: open.start)
        if components[last].subscriptSelector == nil {
            components[last].subscriptSelector = selector
        } else {
            components[last].deeperSubscripts.append(selector)
        }
    }

    /// `SUBQUERY(collection, $variable, predicate).@count` (also `.@size`).
    private mutating func parseSubquery(depth: Int) throws(QueryError) -> SyntaxExpression {
        try checkDepth(depth + 1)
        let start = advance().start
        _ = advance()  // '('
        let pathStart = current.start
        let components = try parseKeyPath()
        let collection = SyntaxPath(components: components, start: pathStart, end: token(at: -1).end)
        try expect(.comma, "expected ',' after SUBQUERY's list, as in SUBQUERY(items, $item, $item.price > 5)")
        guard case .variable(let variable) = current.kind else {
            throw error("expected a variable such as $item after SUBQUERY's list\(found)")
        }
        let variablePosition = advance().start
        try expect(.comma, "expected ',' and a predicate after SUBQUERY's variable")
        let predicate = try parsePredicate(depth: depth + 1)
        try expect(.rightParen, "expected ')' to end the SUBQUERY")
        guard current.isSymbol(.dot), case .atName(let name) = token(at: 1).kind,
            ["count", "size"].contains(name.lowercased())
        else {
            throw error("a SUBQUERY must be followed by .@count, as in SUBQUERY(...).@count > 0")
        }
        _ = advance()
        let end = advance().end
        let subquery = SyntaxSubquery(
            collection: collection, variable: variable, variablePosition: variablePosition, predicate: predicate)
        return SyntaxExpression(kind: .subquery(subquery), start: start, end: end)
    }

    /// `bin('bytes')` or `bin(B64"...")` (also `binary(...)`): a data literal, of the string's UTF-8 bytes or of the
    /// base64 text's.
    private mutating func parseBinary() throws(QueryError) -> SyntaxExpression {
        let start = advance().start
        _ = advance()  // '('
        let data: Data
        switch current.kind {
        case .string(let string): data = Data(string.utf8)
        case .data(let bytes): data = bytes
        default: throw error("expected a string or B64\"...\" inside bin(...)\(found)")
        }
        _ = advance()
        let end = current.end
        try expect(.rightParen, "expected ')' to end bin(...)")
        return SyntaxExpression(kind: .literal(.data(data)), start: start, end: end)
    }

    /// `obj('Type', primaryKey)`: a link literal.
    private mutating func parseObjectLink() throws(QueryError) -> SyntaxExpression {
        let start = advance().start
        _ = advance()  // '('
        guard case .string(let type) = current.kind else {
            throw error("expected the type name as a string in obj('Type', primaryKey)\(found)")
        }
        _ = advance()
        try expect(.comma, "expected ',' and a primary key after obj('\(type)'")
        let keyStart = current.start
        guard
            case .literal(let literal) = try parseSimpleValue(expected: "expected a primary key after obj('\(type)',")
                .kind,
            let key = PrimaryKey(literal.value)
        else {
            throw QueryError(
                .invalidLiteral, "a primary key in obj(...) is an integer, a string, an oid(...) or a uuid(...)",
                position: keyStart, query: query)
        }
        let end = current.end
        try expect(.rightParen, "expected ')' to end obj('\(type)', ...)")
        return SyntaxExpression(kind: .literal(.link(type: type, key: key)), start: start, end: end)
    }

    // MARK: Descriptors

    private mutating func parseDescriptor() throws(QueryError) -> SyntaxDescriptor {
        let keyword = advance()
        _ = advance()  // '('
        if keyword.isKeyword("LIMIT") {
            guard case .number(let digits) = current.kind else {
                throw error("expected a non-negative integer in LIMIT(...)\(found)")
            }
            guard let limit = Int(digits) else {
                throw QueryError(
                    .invalidLiteral, "LIMIT needs a non-negative integer that fits in 64 bits, not \(digits)",
                    position: current.start, query: query)
            }
            _ = advance()
            try expect(.rightParen, "expected ')' after the LIMIT count")
            return .limit(limit)
        }
        let isSort = keyword.isKeyword("SORT")
        var sortKeys: [SyntaxSortKey] = []
        var paths: [SyntaxPath] = []
        repeat {
            let start = current.start
            switch current.kind {
            case .identifier: break
            case .atName(let name) where name.lowercased() == "links": break
            default: throw error("expected a property name in \(isSort ? "SORT" : "DISTINCT")(...)\(found)")
            }
            let components = try parseKeyPath()
            let path = SyntaxPath(components: components, start: start, end: token(at: -1).end)
            if isSort {
                let ascending: Bool
                if current.isKeyword("ASC") || current.isKeyword("ASCENDING") {
                    ascending = true
                } else if current.isKeyword("DESC") || current.isKeyword("DESCENDING") {
                    ascending = false
                } else {
                    let written = text(path.start, path.end)
                    throw error(
                        "expected ASC or DESC after '\(written)' in SORT(...), as in SORT(\(written) ASC)\(found)")
                }
                _ = advance()
                sortKeys.append(SyntaxSortKey(path: path, ascending: ascending))
            } else {
                paths.append(path)
            }
        } while try consumeComma()
        try expect(
            .rightParen, isSort ? "expected ',' or ')' in SORT(...)" : "expected ',' or ')' in DISTINCT(...)"
        )
        return isSort ? .sort(sortKeys) : .distinct(paths)
    }
}
