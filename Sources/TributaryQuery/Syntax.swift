import Foundation
import TributaryModel

// The parse tree: what the text says, before names and types are checked against a schema. The type checker
// turns it into the checked tree of AST.swift.

/// A parsed query: a predicate and the SORT / DISTINCT / LIMIT clauses after it, in order.
struct SyntaxQuery: Hashable, Sendable {
    var predicate: SyntaxPredicate
    var descriptors: [SyntaxDescriptor]
}

indirect enum SyntaxPredicate: Hashable, Sendable {
    case constant(Bool)
    case and([SyntaxPredicate])
    case or([SyntaxPredicate])
    case not(SyntaxPredicate)
    case comparison(SyntaxComparison)
    case geoWithin(SyntaxGeoWithin)
}

/// `[ANY|ALL|NONE] keypath GEOWITHIN shape`.
struct SyntaxGeoWithin: Hashable, Sendable {
    var quantifier: Quantifier?
    var quantifierPosition: Int
    var path: SyntaxExpression
    var shape: SyntaxGeoShape
}

/// `geoBox(...)`, `geoCircle(...)` or `geoPolygon(...)`, its numbers as written (literals or arguments), or an
/// argument standing for a whole shape.
struct SyntaxGeoShape: Hashable, Sendable {
    enum Kind: Hashable, Sendable {
        /// The bottom-left and the top-right corners.
        case box(SyntaxGeoPoint, SyntaxGeoPoint)
        /// The center and the radius in radians.
        case circle(SyntaxGeoPoint, radius: SyntaxExpression)
        /// The outer ring, then the holes.
        case polygon([[SyntaxGeoPoint]])
        case argument(Int, placeholder: Bool)
    }
    var kind: Kind
    var start: Int
}

/// `[longitude, latitude]` or `[longitude, latitude, altitude]`.
struct SyntaxGeoPoint: Hashable, Sendable {
    var coordinates: [SyntaxExpression]
    var start: Int
}

/// `[ANY|ALL|NONE] left op[modifiers] [ANY|ALL|NONE] right`.
struct SyntaxComparison: Hashable, Sendable {
    var quantifier: Quantifier?
    var quantifierPosition: Int
    var left: SyntaxExpression
    var op: ComparisonOperator
    /// The operator as written, for messages.
    var opText: String
    var opPosition: Int
    var options: StringOptions
    var rightQuantifier: Quantifier?
    var rightQuantifierPosition: Int
    var right: SyntaxExpression
}

/// A value-producing expression and the UTF-8 range of its text.
struct SyntaxExpression: Hashable, Sendable {
    enum Kind: Hashable, Sendable {
        case keyPath([PathComponent])
        case literal(Literal)
        /// `$n`, or the n-th `%@` when `placeholder` is set.
        case argument(Int, placeholder: Bool)
        /// `{a, b, c}`.
        case list([SyntaxExpression])
        /// `a + b`, `a - b`, `a * b`, `a / b`.
        indirect case arithmetic(ArithmeticOperator, SyntaxExpression, SyntaxExpression)
        /// `SUBQUERY(list, $x, predicate).@count`.
        indirect case subquery(SyntaxSubquery)
    }
    var kind: Kind
    var start: Int
    var end: Int
}

/// One name of a key path: a property, a SUBQUERY's variable (`$x`, first only), or an `@` operator such as
/// `@count`; a property may be followed by a subscript (`[FIRST]`).
struct PathComponent: Hashable, Sendable {
    var name: String
    var isOperator: Bool
    var position: Int
    var isVariable = false
    var subscriptSelector: SyntaxSubscript? = nil
    /// Subscripts after the first (`payload[0]['key']`): only a mixed value, which may hold nested lists and
    /// dictionaries, takes them.
    var deeperSubscripts: [SyntaxSubscript] = []
}

/// `[FIRST]`, `[LAST]`, `[SIZE]`, `[*]` or `[n]` after a property of a key path.
struct SyntaxSubscript: Hashable, Sendable {
    enum Kind: Hashable, Sendable {
        case first, last, size, all
        case index(Int)
        /// `['key']`: one key of a dictionary.
        case key(String)
    }
    var kind: Kind
    var position: Int

    /// The element a `[FIRST]`, `[LAST]` or `[n]` takes; `nil` for `[*]` and `[SIZE]`, which take none.
    var element: ElementSelector? {
        switch kind {
        case .first: .first
        case .last: .last
        case .index(let index): .index(index)
        case .all, .size, .key: nil
        }
    }
}

/// `SUBQUERY(collection, $variable, predicate).@count`.
struct SyntaxSubquery: Hashable, Sendable {
    var collection: SyntaxPath
    var variable: String
    var variablePosition: Int
    var predicate: SyntaxPredicate
}

/// `+`, `-`, `*` and `/` between numbers.
enum ArithmeticOperator: String, Hashable, Sendable {
    case add = "+"
    case subtract = "-"
    case multiply = "*"
    case divide = "/"
}

enum Literal: Hashable, Sendable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case date(Date)
    case objectId(ObjectID)
    case uuid(UUID)
    case data(Data)
    /// `obj('Type', primaryKey)`: a link to the object of that type with that primary key.
    case link(type: String, key: PrimaryKey)

    var value: Value {
        switch self {
        case .null: .null
        case .bool(let value): .bool(value)
        case .int(let value): .int(value)
        case .double(let value): .double(value)
        case .string(let value): .string(value)
        case .date(let value): .date(value)
        case .objectId(let value): .objectId(value)
        case .uuid(let value): .uuid(value)
        case .data(let value): .data(value)
        case .link(let type, let key): .typedLink(type: type, key: key)
        }
    }
}

enum SyntaxDescriptor: Hashable, Sendable {
    case sort([SyntaxSortKey])
    case distinct([SyntaxPath])
    case limit(Int)
}

struct SyntaxPath: Hashable, Sendable {
    var components: [PathComponent]
    var start: Int
    var end: Int
}

struct SyntaxSortKey: Hashable, Sendable {
    var path: SyntaxPath
    var ascending: Bool
}

/// `ANY` (also `SOME`), `ALL` or `NONE`: how a comparison treats the many values of a to-many key path.
enum Quantifier: Hashable, Sendable {
    case anyElement, allElements, noElement
}

enum ComparisonOperator: Hashable, Sendable {
    case equal, notEqual, less, lessEqual, greater, greaterEqual
    case beginsWith, endsWith, contains, like
    case `in`, between
    /// `TEXT`: full-text search of a string's words.
    case text

    var isOrdering: Bool {
        switch self {
        case .less, .lessEqual, .greater, .greaterEqual, .between: true
        default: false
        }
    }

    var isStringOperator: Bool {
        switch self {
        case .beginsWith, .endsWith, .contains, .like: true
        default: false
        }
    }

    /// Whether `[c]` and `[d]` may follow the operator.
    var acceptsStringOptions: Bool {
        switch self {
        case .equal, .notEqual, .beginsWith, .endsWith, .contains, .like, .in: true
        default: false
        }
    }
}

/// The `[c]` and `[d]` modifiers of a string comparison.
struct StringOptions: OptionSet, Hashable, Sendable {
    var rawValue: UInt8
    static let caseInsensitive = StringOptions(rawValue: 1)
    static let diacriticInsensitive = StringOptions(rawValue: 2)
}
