/// A query could not be parsed, or does not fit the schema it was checked against.
///
/// The error points at the place in the query text that is at fault: ``position`` is a UTF-8 offset,
/// ``line`` and ``column`` the same place as a person counts it, and ``description`` draws the offending line
/// with a caret under that place:
///
/// ```
/// expected a value after '==' at column 10
///   title == AND done == false
///            ^
/// ```
///
/// Messages name properties, types and the query's own text; they never show argument values.
///
/// ## Topics
///
/// ### Inspecting the error
/// - ``code``
/// - ``message``
/// - ``position``
/// - ``line``
/// - ``column``
/// - ``query``
public struct QueryError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What kind of problem the query has.
    ///
    /// Codes are extensible: new codes may be added without breaking source, so switch over them with a
    /// `default` case, or compare with `==`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Wrapped: Hashable, Sendable {
            case syntax, invalidLiteral, unknownProperty, typeMismatch, argumentMissing, unsupported, tooComplex
        }
        private var wrapped: Wrapped

        /// The text is not a query: a token is missing or out of place.
        public static var syntax: Self { Self(wrapped: .syntax) }
        /// A literal is malformed: a date with no such day, an `oid(...)` that is not 24 hexadecimal digits,
        /// an integer that does not fit in 64 bits.
        public static var invalidLiteral: Self { Self(wrapped: .invalidLiteral) }
        /// A key path names a property its type lacks, or an unknown `@` operator.
        public static var unknownProperty: Self { Self(wrapped: .unknownProperty) }
        /// The two sides of a comparison, or an operator and its operand, do not fit together.
        public static var typeMismatch: Self { Self(wrapped: .typeMismatch) }
        /// The query uses `$n` or `%@` but fewer arguments were given.
        public static var argumentMissing: Self { Self(wrapped: .argumentMissing) }
        /// The query uses a part of the Realm Query Language that Tributary does not implement.
        public static var unsupported: Self { Self(wrapped: .unsupported) }
        /// The query nests deeper than ``Query/maximumNestingDepth``.
        public static var tooComplex: Self { Self(wrapped: .tooComplex) }

        public var description: String { "\(wrapped)" }
    }

    /// What kind of problem the query has.
    public var code: Code
    /// What is wrong, and where it helps, what was expected instead.
    public var message: String
    /// The UTF-8 offset in ``query`` where the problem is.
    public var position: Int
    /// The query text.
    public var query: String

    /// Creates an error at a UTF-8 offset of `query`.
    public init(_ code: Code, _ message: String, position: Int, query: String) {
        self.code = code
        self.message = message
        self.position = max(0, min(position, query.utf8.count))
        self.query = query
    }

    /// The 1-based line of ``position``.
    public var line: Int { location.line }

    /// The 1-based column of ``position``, counted in characters from the start of its line.
    public var column: Int { location.column }

    /// The message, the place, and the offending line with a caret under the place.
    public var description: String {
        let (line, column, text, prefix) = location
        let place = query.contains(where: \.isNewline) ? "line \(line), column \(column)" : "column \(column)"
        // Keep tabs in the caret line so the caret lines up under the text.
        let padding = String(prefix.map { $0 == "\t" ? "\t" : " " })
        return "\(message) at \(place)\n  \(text)\n  \(padding)^"
    }

    /// Line, column, the text of the line, and the characters of the line before the position.
    private var location: (line: Int, column: Int, text: String, prefix: Substring) {
        let utf8 = query.utf8
        // `position` is public and mutable: clamp it again rather than trust it.
        let index = utf8.index(utf8.startIndex, offsetBy: max(0, min(position, utf8.count)))
        // Positions fall on token boundaries; `String(decoding:)` keeps any other offset from trapping.
        let before = String(decoding: utf8[utf8.startIndex..<index], as: UTF8.self)
        let lineNumber = before.reduce(1) { $1.isNewline ? $0 + 1 : $0 }
        let lineStart = before.lastIndex(where: \.isNewline).map { before.index(after: $0) } ?? before.startIndex
        let prefix = before[lineStart...]
        let after = String(decoding: utf8[index...], as: UTF8.self)
        let rest = after.firstIndex(where: \.isNewline).map { after[..<$0] } ?? after[...]
        let text = String(prefix) + rest
        return (lineNumber, prefix.count + 1, text, prefix)
    }
}

extension QueryError {
    static func syntax(_ message: String, at position: Int, in query: String) -> QueryError {
        QueryError(.syntax, message, position: position, query: query)
    }
}
