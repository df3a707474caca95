import Foundation
import TributaryModel

/// Splits query text into tokens. Works on UTF-8 bytes; every position it reports is a UTF-8 offset.
struct Lexer {
    private let bytes: [UInt8]
    private let query: String
    private var offset = 0

    init(_ query: String) {
        self.query = query
        self.bytes = Array(query.utf8)
    }

    /// All the tokens of the query, ending with ``Token/Kind/end``.
    static func tokenize(_ query: String) throws(QueryError) -> [Token] {
        var lexer = Lexer(query)
        var tokens: [Token] = []
        while true {
            let token = try lexer.next()
            tokens.append(token)
            if token.isEnd { return tokens }
        }
    }

    private func peek(_ distance: Int = 0) -> UInt8? {
        let index = offset + distance
        return index < bytes.count ? bytes[index] : nil
    }

    private func error(_ code: QueryError.Code, _ message: String, at position: Int) -> QueryError {
        QueryError(code, message, position: position, query: query)
    }

    private mutating func next() throws(QueryError) -> Token {
        while let byte = peek(), byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { offset += 1 }
        let start = offset
        guard let byte = peek() else { return Token(kind: .end, start: start, end: start) }
        let kind: Token.Kind
        switch byte {
        case UInt8(ascii: "'"), UInt8(ascii: "\""):
            kind = .string(try string(quote: byte))
        case UInt8(ascii: "0")...UInt8(ascii: "9"):
            kind = try numberOrDate()
        case UInt8(ascii: ".") where peek(1).map(isDigit) == true:
            kind = try numberOrDate()
        case UInt8(ascii: "T") where timestampFollows():
            kind = .date(try timestamp())
        case UInt8(ascii: "$") where peek(1).map(isIdentifierStart) == true:
            offset += 1
            kind = .variable("$" + identifierText())
        case UInt8(ascii: "$"):
            kind = .argument(try argument())
        case UInt8(ascii: "%"):
            kind = try placeholder()
        case UInt8(ascii: "@"):
            offset += 1
            let name = identifierText()
            guard !name.isEmpty else {
                throw error(.syntax, "expected an operator name after '@', such as @count", at: start)
            }
            kind = .atName(name)
        case _ where isIdentifierStart(byte):
            let name = identifierText()
            let lowered = name.lowercased()
            if lowered == "b64", let quote = peek(), quote == UInt8(ascii: "\"") || quote == UInt8(ascii: "'") {
                kind = .data(try base64(quote: quote, start: start))
            } else if (lowered == "oid" || lowered == "uuid") && peek() == UInt8(ascii: "(") {
                kind = try objectLiteral(lowered, start: start)
            } else {
                kind = .identifier(name)
            }
        default:
            kind = .symbol(try symbol(start: start))
        }
        return Token(kind: kind, start: start, end: offset)
    }

    // MARK: Names

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    /// Letters, `_`, and any non-ASCII byte (property names may be any Unicode letters).
    private func isIdentifierStart(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || byte == UInt8(ascii: "_") || byte >= 0x80
    }

    /// A name: letters, digits, `_`, `$`, and the escapes `\ ` (a space), `\t`, `\n` and `\r`, which let a property
    /// name hold those characters.
    private mutating func identifierText() -> String {
        var result: [UInt8] = []
        while let byte = peek() {
            if isIdentifierStart(byte) || isDigit(byte) || byte == UInt8(ascii: "$") {
                result.append(byte)
                offset += 1
                continue
            }
            guard byte == UInt8(ascii: "\\"), let escaped = peek(1) else { break }
            switch escaped {
            case UInt8(ascii: " "): result.append(0x20)
            case UInt8(ascii: "t"): result.append(0x09)
            case UInt8(ascii: "n"): result.append(0x0A)
            case UInt8(ascii: "r"): result.append(0x0D)
            default: return String(decoding: result, as: UTF8.self)
            }
            offset += 2
        }
        return String(decoding: result, as: UTF8.self)
    }

    // MARK: Symbols

    private mutating func symbol(start: Int) throws(QueryError) -> Token.Symbol {
        let byte = bytes[offset]
        let following = peek(1)
        func take(_ count: Int, _ symbol: Token.Symbol) -> Token.Symbol {
            offset += count
            return symbol
        }
        switch byte {
        case UInt8(ascii: "("): return take(1, .leftParen)
        case UInt8(ascii: ")"): return take(1, .rightParen)
        case UInt8(ascii: "{"): return take(1, .leftBrace)
        case UInt8(ascii: "}"): return take(1, .rightBrace)
        case UInt8(ascii: "["): return take(1, .leftBracket)
        case UInt8(ascii: "]"): return take(1, .rightBracket)
        case UInt8(ascii: ","): return take(1, .comma)
        case UInt8(ascii: "."): return take(1, .dot)
        case UInt8(ascii: "-"): return take(1, .minus)
        case UInt8(ascii: "+"): return take(1, .plus)
        case UInt8(ascii: "*"): return take(1, .star)
        case UInt8(ascii: "/"): return take(1, .slash)
        case UInt8(ascii: "="):
            switch following {
            case UInt8(ascii: "="): return take(2, .equal)
            case UInt8(ascii: "<"): return take(2, .lessEqual)
            case UInt8(ascii: ">"): return take(2, .greaterEqual)
            default: return take(1, .singleEqual)
            }
        case UInt8(ascii: "!"):
            return following == UInt8(ascii: "=") ? take(2, .notEqual) : take(1, .bang)
        case UInt8(ascii: "<"):
            switch following {
            case UInt8(ascii: "="): return take(2, .lessEqual)
            case UInt8(ascii: ">"): return take(2, .notEqual)
            default: return take(1, .less)
            }
        case UInt8(ascii: ">"):
            return following == UInt8(ascii: "=") ? take(2, .greaterEqual) : take(1, .greater)
        case UInt8(ascii: "&") where following == UInt8(ascii: "&"): return take(2, .and)
        case UInt8(ascii: "|") where following == UInt8(ascii: "|"): return take(2, .or)
        case UInt8(ascii: "&"): throw error(.syntax, "expected '&&', found a single '&'", at: start)
        case UInt8(ascii: "|"): throw error(.syntax, "expected '||', found a single '|'", at: start)
        default:
            let character = String(decoding: bytes[start..<min(bytes.count, start + 1)], as: UTF8.self)
            throw error(.syntax, "unexpected character '\(character)'", at: start)
        }
    }

    // MARK: Strings

    private mutating func string(quote: UInt8) throws(QueryError) -> String {
        let start = offset
        offset += 1
        var result: [UInt8] = []
        while true {
            guard let byte = peek() else {
                throw error(.syntax, "unterminated string: expected a closing \(quote == 0x22 ? "\"" : "'")", at: start)
            }
            offset += 1
            if byte == quote { break }
            guard byte == UInt8(ascii: "\\") else {
                result.append(byte)
                continue
            }
            let escapeStart = offset - 1
            guard let escaped = peek() else {
                throw error(.syntax, "unterminated string: expected a closing \(quote == 0x22 ? "\"" : "'")", at: start)
            }
            offset += 1
            switch escaped {
            case UInt8(ascii: "\\"), UInt8(ascii: "'"), UInt8(ascii: "\""), UInt8(ascii: "/"): result.append(escaped)
            case UInt8(ascii: "n"): result.append(0x0A)
            case UInt8(ascii: "r"): result.append(0x0D)
            case UInt8(ascii: "t"): result.append(0x09)
            case UInt8(ascii: "b"): result.append(0x08)
            case UInt8(ascii: "f"): result.append(0x0C)
            case UInt8(ascii: "0"): result.append(0x00)
            case UInt8(ascii: "u"):
                let scalar = try unicodeEscape(start: escapeStart)
                result.append(contentsOf: Array(String(Character(scalar)).utf8))
            default:
                throw error(
                    .syntax,
                    "unknown escape '\\\(Character(Unicode.Scalar(escaped)))'; use \\\\, \\', \\\", \\/, \\b, \\f, \\n, \\r, \\t, \\0 or \\u",
                    at: escapeStart)
            }
        }
        return String(decoding: result, as: UTF8.self)
    }

    /// `\uXXXX` or `\u{X...}` (the `\u` already read).
    private mutating func unicodeEscape(start: Int) throws(QueryError) -> Unicode.Scalar {
        var digits: [UInt8] = []
        if peek() == UInt8(ascii: "{") {
            offset += 1
            while let byte = peek(), byte != UInt8(ascii: "}"), digits.count <= 8 {
                digits.append(byte)
                offset += 1
            }
            guard peek() == UInt8(ascii: "}") else {
                throw error(.syntax, "expected '}' to end the \\u{...} escape", at: start)
            }
            offset += 1
        } else {
            while digits.count < 4, let byte = peek() {
                digits.append(byte)
                offset += 1
            }
        }
        let text = String(decoding: digits, as: UTF8.self)
        guard !digits.isEmpty, let value = UInt32(text, radix: 16), let scalar = Unicode.Scalar(value) else {
            throw error(.syntax, "'\\u\(text)' is not a Unicode scalar in hexadecimal", at: start)
        }
        return scalar
    }

    // MARK: Numbers and dates

    /// A number (`12`, `1.5e3`, `10.`, `.5`, `0x1F`), or a `YYYY-MM-DD@HH:MM:SS[:nanoseconds]` date (also with `T`
    /// for `@`).
    private mutating func numberOrDate() throws(QueryError) -> Token.Kind {
        let start = offset
        if peek() == UInt8(ascii: "0"), let x = peek(1), x == UInt8(ascii: "x") || x == UInt8(ascii: "X") {
            offset += 2
            while let byte = peek(), isHexDigit(byte) { offset += 1 }
            return .number(String(decoding: bytes[start..<offset], as: UTF8.self))
        }
        let integerDigits = digitRun()
        if integerDigits > 0, peek() == UInt8(ascii: "-"), peek(1).map(isDigit) == true {
            offset = start
            return .date(try dateLiteral())
        }
        if peek() == UInt8(ascii: "."), peek(1).map(isDigit) == true {
            offset += 1
            _ = digitRun()
        } else if integerDigits > 0, peek() == UInt8(ascii: "."), peek(1).map(isIdentifierStart) != true {
            offset += 1  // `10.`: a double with nothing after the point
        }
        if let byte = peek(), byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") {
            var distance = 1
            if let sign = peek(1), sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") { distance = 2 }
            if peek(distance).map(isDigit) == true {
                offset += distance
                _ = digitRun()
            }
        }
        return .number(String(decoding: bytes[start..<offset], as: UTF8.self))
    }

    private func isHexDigit(_ byte: UInt8) -> Bool {
        isDigit(byte) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "F"))
    }

    private mutating func digitRun() -> Int {
        let start = offset
        while let byte = peek(), isDigit(byte) { offset += 1 }
        return offset - start
    }

    private mutating func integer(maximumDigits: Int, start: Int, what: String) throws(QueryError) -> Int64 {
        let digitsStart = offset
        let count = digitRun()
        guard count > 0 else { throw error(.invalidLiteral, "expected the \(what) of the date", at: start) }
        guard count <= maximumDigits, let value = Int64(String(decoding: bytes[digitsStart..<offset], as: UTF8.self))
        else { throw error(.invalidLiteral, "the \(what) of the date has too many digits", at: digitsStart) }
        return value
    }

    private mutating func expect(_ byte: UInt8, start: Int) throws(QueryError) {
        guard peek() == byte else {
            throw error(
                .invalidLiteral, "malformed date: expected YYYY-MM-DD@HH:MM:SS, optionally followed by :nanoseconds",
                at: start)
        }
        offset += 1
    }

    private mutating func dateLiteral() throws(QueryError) -> Date {
        let start = offset
        let year = try integer(maximumDigits: 6, start: start, what: "year")
        try expect(UInt8(ascii: "-"), start: start)
        let month = try integer(maximumDigits: 2, start: start, what: "month")
        try expect(UInt8(ascii: "-"), start: start)
        let day = try integer(maximumDigits: 2, start: start, what: "day")
        guard let separator = peek(), separator == UInt8(ascii: "@") || separator == UInt8(ascii: "T") else {
            throw error(.invalidLiteral, "a date needs a time: write YYYY-MM-DD@HH:MM:SS", at: start)
        }
        offset += 1
        let hour = try integer(maximumDigits: 2, start: start, what: "hour")
        try expect(UInt8(ascii: ":"), start: start)
        let minute = try integer(maximumDigits: 2, start: start, what: "minute")
        try expect(UInt8(ascii: ":"), start: start)
        let second = try integer(maximumDigits: 2, start: start, what: "second")
        var nanoseconds: Int64 = 0
        if peek() == UInt8(ascii: ":") {
            offset += 1
            nanoseconds = try integer(maximumDigits: 9, start: start, what: "nanoseconds")
        }
        guard (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day), (0...23).contains(hour),
            (0...59).contains(minute), (0...59).contains(second)
        else {
            let text = String(decoding: bytes[start..<offset], as: UTF8.self)
            throw error(.invalidLiteral, "'\(text)' is not a valid date and time", at: start)
        }
        let days = daysFromCivil(year: year, month: month, day: day)
        let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second
        return Date(timeIntervalSince1970: Double(seconds) + Double(nanoseconds) / 1e9)
    }

    /// Whether `T<seconds>:<nanoseconds>` starts here (rather than a name that starts with T).
    private func timestampFollows() -> Bool {
        var distance = 1
        if peek(distance) == UInt8(ascii: "-") { distance += 1 }
        guard peek(distance).map(isDigit) == true else { return false }
        while peek(distance).map(isDigit) == true { distance += 1 }
        return peek(distance) == UInt8(ascii: ":")
    }

    /// `T<seconds>:<nanoseconds>`, both with the same sign.
    private mutating func timestamp() throws(QueryError) -> Date {
        let start = offset
        offset += 1
        let secondsNegative = peek() == UInt8(ascii: "-")
        if secondsNegative { offset += 1 }
        let seconds = try integer(maximumDigits: 18, start: start, what: "seconds")
        offset += 1  // ':'
        let nanosecondsNegative = peek() == UInt8(ascii: "-")
        if nanosecondsNegative { offset += 1 }
        let nanoseconds = try integer(maximumDigits: 9, start: start, what: "nanoseconds")
        if seconds != 0 && nanoseconds != 0 && secondsNegative != nanosecondsNegative {
            throw error(
                .invalidLiteral, "the seconds and nanoseconds of a timestamp must have the same sign", at: start)
        }
        let total = Double(seconds) + Double(nanoseconds) / 1e9
        return Date(timeIntervalSince1970: secondsNegative || nanosecondsNegative ? -total : total)
    }

    // MARK: Arguments and object literals

    private mutating func argument() throws(QueryError) -> Int {
        let start = offset
        offset += 1
        let digitsStart = offset
        guard digitRun() > 0 else {
            throw error(.syntax, "expected an argument number after '$', as in $0", at: start)
        }
        guard let index = Int(String(decoding: bytes[digitsStart..<offset], as: UTF8.self)) else {
            throw error(.invalidLiteral, "argument number is too large", at: start)
        }
        return index
    }

    private mutating func placeholder() throws(QueryError) -> Token.Kind {
        let start = offset
        switch peek(1) {
        case UInt8(ascii: "@"):
            offset += 2
            return .placeholder
        case UInt8(ascii: "K"):
            throw error(.unsupported, "%K key path substitution is not supported; write the property name", at: start)
        default:
            throw error(.syntax, "expected '%@' (an argument placeholder)", at: start)
        }
    }

    /// `B64"..."` (the `B64` already read): the bytes the base64 text between the quotes stands for. (Realm reads it
    /// as a string; `bin(B64"...")` makes it data.)
    private mutating func base64(quote: UInt8, start: Int) throws(QueryError) -> Data {
        offset += 1
        let contentStart = offset
        while let byte = peek(), byte != quote { offset += 1 }
        guard peek() == quote else {
            throw error(
                .syntax, "unterminated B64 literal: expected a closing \(quote == 0x22 ? "\"" : "'")", at: start)
        }
        let content = String(decoding: bytes[contentStart..<offset], as: UTF8.self)
        offset += 1
        guard let data = Data(base64Encoded: content) else {
            throw error(
                .invalidLiteral, "'\(content)' is not base64: B64\"...\" takes base64 text, such as B64\"AQID\"",
                at: start)
        }
        return data
    }

    /// `oid(<24 hex digits>)` or `uuid(<8-4-4-4-12 hex digits>)`; the name is already read.
    private mutating func objectLiteral(_ name: String, start: Int) throws(QueryError) -> Token.Kind {
        offset += 1  // '('
        let contentStart = offset
        while let byte = peek(), byte != UInt8(ascii: ")") { offset += 1 }
        guard peek() == UInt8(ascii: ")") else {
            throw error(.syntax, "expected ')' to close '\(name)('", at: start)
        }
        let content = String(decoding: bytes[contentStart..<offset], as: UTF8.self)
            .trimmingCharacters(in: .whitespaces)
        offset += 1
        if name == "oid" {
            guard let id = ObjectID(hex: content) else {
                throw error(
                    .invalidLiteral, "'\(content)' is not an ObjectId: expected 24 hexadecimal digits", at: start)
            }
            return .objectId(id)
        }
        guard let uuid = UUID(uuidString: content) else {
            throw error(
                .invalidLiteral, "'\(content)' is not a UUID: expected 8-4-4-4-12 hexadecimal digits", at: start)
        }
        return .uuid(uuid)
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
private func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
    let shiftedYear = month <= 2 ? year - 1 : year
    let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
    let yearOfEra = shiftedYear - era * 400
    let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
    let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
    return era * 146_097 + dayOfEra - 719_468
}

private func daysIn(month: Int64, year: Int64) -> Int64 {
    switch month {
    case 2:
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
        return leap ? 29 : 28
    case 4, 6, 9, 11: return 30
    default: return 31
    }
}
