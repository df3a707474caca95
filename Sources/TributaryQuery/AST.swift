import TributaryModel

// The checked tree: names resolved against the schema, arguments bound, types checked. The evaluator runs it
// as it is, with no schema at hand, so every step records what it leads to.

/// A checked predicate.
indirect enum Predicate: Hashable, Sendable {
    case constant(Bool)
    case and([Predicate])
    case or([Predicate])
    case not(Predicate)
    case comparison(Comparison)
}

/// A checked comparison.
///
/// When `left` yields many values (a to-many key path), `quantifier` says how many of them must compare true
/// (`ANY` unless written otherwise). When `right` yields many values (a list literal, a list argument or a
/// to-many key path), a left value compares true when it compares true with at least one of them, except for
/// `BETWEEN`, whose right side is its two bounds.
struct Comparison: Hashable, Sendable {
    var left: Operand
    var op: ComparisonOperator
    var options: StringOptions
    var quantifier: Quantifier
    var right: Operand
    /// For `==` and `IN` with a long list of constants on the right: the constants, hashed.
    var lookup: EqualityLookup? = nil
}

/// One side of a comparison.
enum Operand: Hashable, Sendable {
    /// A literal or an argument.
    case constant(Value)
    /// A `{...}` list literal, a list argument, or the two bounds of `BETWEEN`.
    case constants([Value])
    case keyPath(KeyPath)

    /// Whether the operand yields any number of values rather than exactly one.
    var isMany: Bool {
        switch self {
        case .constant: false
        case .constants: true
        case .keyPath(let path): path.isToMany
        }
    }
}

/// A key path resolved against the schema, from the queried type.
struct KeyPath: Hashable, Sendable {
    var steps: [PathStep]
    /// `@count`, `@size` or an aggregate applied to the last step.
    var operation: PathOperation?
    /// The key path as written, for messages and ``Query/ordering``.
    var text: String

    /// Whether the path yields any number of values: it goes through a list and ends without an aggregate.
    var isToMany: Bool { operation == nil && steps.contains { $0.isList } }
}

/// One property along a key path.
struct PathStep: Hashable, Sendable {
    enum Target: Hashable, Sendable {
        case scalar(ScalarType)
        /// A link to an object of the named type.
        case link(String)
        case embedded(String)
    }
    var name: String
    var target: Target
    var isList: Bool
}

enum PathOperation: Hashable, Sendable {
    /// `@count` or `@size` on a list: its number of elements (for a list of links, of links whose target
    /// exists).
    case count
    /// `@size` on a string or data value: its size in bytes (UTF-8 for strings, as Realm counts).
    case size
    /// `@min`, `@max`, `@sum` or `@avg` of a list, through the steps that follow it for a list of objects
    /// (`items.@sum.price`). Nulls are ignored.
    case aggregate(Aggregate, [PathStep])
}

enum Aggregate: String, Hashable, Sendable {
    case min, max, sum, avg
}

/// A checked SORT, DISTINCT or LIMIT clause.
enum Descriptor: Hashable, Sendable {
    case sort([SortKeyPath])
    case distinct([KeyPath])
    case limit(Int)
}

struct SortKeyPath: Hashable, Sendable {
    var path: KeyPath
    var ascending: Bool
}
