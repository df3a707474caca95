import Foundation
import TributaryModel

/// One token of a query, with the UTF-8 range of the text it came from.
struct Token: Hashable, Sendable {
    enum Kind: Hashable, Sendable {
        /// A name: a property, or a keyword (keywords are recognised by the parser, case-insensitively).
        case identifier(String)
        /// `@count`, `@size`, `@min`, ... (the name without the `@`).
        case atName(String)
        /// The digits of a number, exactly as written (sign excluded): `12`, `1.5e3`.
        case number(String)
        case string(String)
        /// `$0`, `$1`, ...
        case argument(Int)
        /// `$x`: a SUBQUERY's variable (the name with its `$`).
        case variable(String)
        /// `B64"..."`: data written in base64.
        case data(Data)
        /// `%@`, which takes the next argument in order.
        case placeholder
        case date(Date)
        case objectId(ObjectID)
        case uuid(UUID)
        case symbol(Symbol)
        case end
    }

    enum Symbol: String, Hashable, Sendable {
        case leftParen = "("
        case rightParen = ")"
        case leftBrace = "{"
        case rightBrace = "}"
        case leftBracket = "["
        case rightBracket = "]"
        case comma = ","
        case dot = "."
        case minus = "-"
        case plus = "+"
        case star = "*"
        case slash = "/"
        case equal = "=="
        case singleEqual = "="
        case notEqual = "!="
        case less = "<"
        case lessEqual = "<="
        case greater = ">"
        case greaterEqual = ">="
        case and = "&&"
        case or = "||"
        case bang = "!"
    }

    var kind: Kind
    /// UTF-8 offset of the first byte.
    var start: Int
    /// UTF-8 offset just past the last byte.
    var end: Int

    var isEnd: Bool { if case .end = kind { true } else { false } }

    func isSymbol(_ symbol: Symbol) -> Bool {
        if case .symbol(let found) = kind { found == symbol } else { false }
    }

    /// Whether the token is the identifier `keyword`, ignoring case.
    func isKeyword(_ keyword: String) -> Bool {
        if case .identifier(let name) = kind {
            name.utf8.count == keyword.utf8.count && name.uppercased() == keyword
        } else {
            false
        }
    }
}
