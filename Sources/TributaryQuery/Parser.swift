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
/// comparison  := quantifier? value operator modifier? value
///              | quantifier? value 'BETWEEN' '{' value ',' value '}'
/// quantifier  := 'ANY' | 'SOME' | 'ALL' | 'NONE'
/// operator    := '==' | '=' | '!=' | '<>' | '<' | '<=' | '=<' | '>' | '>=' | '=>'
///              | 'BEGINSWITH' | 'ENDSWITH' | 'CONTAINS' | 'LIKE' | 'IN'
/// modifier    := '[' ('c' | 'd' | 'cd') ']'
/// value       := keypath | literal | '$' digits | '%@' | '{' (value (',' value)*)? '}'
/// keypath     := name ('.' (name | '@' name))*
/// descriptor  := 'SORT' '(' keypath direction? (',' keypath direction?)* ')'
///              | 'DISTINCT' '(' keypath (',' keypath)* ')' | 'LIMIT' '(' digits ')'
/// ```
///
/// `AND` and `OR` chains are collected into flat lists, so a long chain does not deepen the recursion;
/// parentheses and `NOT` do, and are limited to ``Query/maximumNestingDepth`` levels.
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
            let open = advance()
            let inner = try parsePredicate(depth: depth + 1)
            guard current.isSymbol(.rightParen) else {
                let column = QueryError(.syntax, "", position: open.start, query: query).column
                throw error("the '(' at column \(column) is not closed: expected ')'\(found)")
            }
            _ = advance()
            return inner
        }
        if current.isKeyword("TRUEPREDICATE") {
            _ = advance()
            return .constant(true)
        }
        if current.isKeyword("FALSEPREDICATE") {
            _ = advance()
            return .constant(false)
        }
        return .comparison(try parseComparison())
    }

    private mutating func parseComparison() throws(QueryError) -> SyntaxComparison {
        var quantifier: Quantifier?
        let quantifierPosition = current.start
        let next = token(at: 1)
        if case .identifier = next.kind {
            if current.isKeyword("ANY") || current.isKeyword("SOME") {
                quantifier = .anyElement
            } else if current.isKeyword("ALL") {
                quantifier = .allElements
            } else if current.isKeyword("NONE") {
                quantifier = .noElement
            }
            if quantifier != nil { _ = advance() }
        }
        let left = try parseValue(
            expected: quantifier == nil
                ? "expected a predicate: a property, a value, '(', NOT, TRUEPREDICATE or FALSEPREDICATE"
                : "expected a key path after '\(previousText)'")
        let leftText = text(left.start, left.end)
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
        if op == .between {
            right = try parseBetweenBounds()
        } else {
            right = try parseValue(expected: "expected a value after '\(opText)'")
        }
        return SyntaxComparison(
            quantifier: quantifier, quantifierPosition: quantifierPosition, left: left, op: op, opText: opText,
            opPosition: opToken.start, options: options, right: right)
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
        let lower = try parseValue(expected: "expected the lower bound after 'BETWEEN {'")
        try expect(.comma, "expected ',' between the two bounds of BETWEEN")
        let upper = try parseValue(expected: "expected the upper bound after ','")
        let end = current.end
        try expect(.rightBrace, "expected '}' after the upper bound of BETWEEN")
        return SyntaxExpression(kind: .list([lower, upper]), start: start, end: end)
    }

    // MARK: Values

    /// A key path, literal, argument or `{...}` list. `expected` is the message when none is here.
    private mutating func parseValue(expected: String) throws(QueryError) -> SyntaxExpression {
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
            case "truepredicate", "falsepredicate":
                throw error("\(expected)\(found) (a predicate, not a value)")
            case "and", "or", "not", "in", "between", "beginswith", "endswith", "contains", "like":
                // Reserved words: reading one as a property name would only move the error further away.
                throw error("\(expected)\(found)")
            default:
                let components = try parseKeyPath()
                return SyntaxExpression(kind: .keyPath(components), start: start, end: token(at: -1).end)
            }
        case .number(let digits):
            return literal(try number(digits, negative: false, at: start), advance())
        case .symbol(.minus):
            _ = advance()
            guard case .number(let digits) = current.kind else {
                throw error("expected a number after '-'\(found)")
            }
            let token = advance()
            return SyntaxExpression(
                kind: .literal(try number(digits, negative: true, at: start)), start: start, end: token.end)
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
        case .atName(let name):
            throw QueryError(
                .unsupported, "'@\(name)' must follow a key path, as in items.@\(name)", position: start, query: query)
        default:
            throw error("\(expected)\(found)")
        }
    }

    private func number(_ digits: String, negative: Bool, at position: Int) throws(QueryError) -> Literal {
        let text = negative ? "-" + digits : digits
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
                let element = try parseValue(expected: "expected a value in the list")
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
        guard case .identifier(let first) = current.kind else { throw error("expected a property name\(found)") }
        var components = [PathComponent(name: first, isOperator: false, position: current.start)]
        _ = advance()
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
        }
        // Modifiers such as [c] only follow operators, so '[' after a key path is a subscript.
        if current.isSymbol(.leftBracket) {
            throw QueryError(
                .unsupported, "subscripts such as list[FIRST] or dictionary['key'] are not supported",
                position: current.start, query: query)
        }
        return components
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
            guard case .identifier = current.kind else {
                throw error("expected a property name in \(isSort ? "SORT" : "DISTINCT")(...)\(found)")
            }
            let components = try parseKeyPath()
            let path = SyntaxPath(components: components, start: start, end: token(at: -1).end)
            if isSort {
                var ascending = true
                if current.isKeyword("ASC") || current.isKeyword("ASCENDING") {
                    _ = advance()
                } else if current.isKeyword("DESC") || current.isKeyword("DESCENDING") {
                    ascending = false
                    _ = advance()
                }
                sortKeys.append(SyntaxSortKey(path: path, ascending: ascending))
            } else {
                paths.append(path)
            }
        } while try consumeComma()
        try expect(
            .rightParen, isSort ? "expected ASC, DESC, ',' or ')' in SORT(...)" : "expected ',' or ')' in DISTINCT(...)"
        )
        return isSort ? .sort(sortKeys) : .distinct(paths)
    }
}
