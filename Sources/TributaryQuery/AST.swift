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
    case geoWithin(GeoWithin)
    case fullText(FullTextSearch)
}

/// `path TEXT 'words'`: whether the string at `path` holds every word of `terms` and none it excludes; for a to-many
/// path, `quantifier` says how many of its strings must.
struct FullTextSearch: Hashable, Sendable {
    var path: KeyPath
    var terms: FullTextTerms
    var quantifier: Quantifier
}

/// `path GEOWITHIN region`: whether the point an embedded object stores lies within `region`; for a to-many path,
/// `quantifier` says how many of its points must.
struct GeoWithin: Hashable, Sendable {
    var path: KeyPath
    var region: GeoRegion
    var quantifier: Quantifier
}

/// A checked comparison.
///
/// When `left` yields many values (a to-many key path or a list), `quantifier` says how many of them must compare
/// true (`ANY` unless written otherwise). When `right` yields many values (a list literal, a list argument or a
/// to-many key path), `rightQuantifier` says with how many of them a left value must compare true for it to count
/// (`ANY` unless written otherwise), except for `BETWEEN`, whose right side is its two bounds. So
/// `ALL {1, 2} IN ANY scores` holds when every one of 1 and 2 equals some element of `scores`.
struct Comparison: Hashable, Sendable {
    var left: Operand
    var op: ComparisonOperator
    var options: StringOptions
    var quantifier: Quantifier
    var rightQuantifier: Quantifier = .anyElement
    var right: Operand
    /// For `==` and `IN` with a long list of constants on the right: the constants, hashed.
    var lookup: EqualityLookup? = nil
    /// Both sides are lists and neither has a quantifier: they compare element by element, in order, and must have
    /// as many elements (`{5.5, 4.0} == items.price`).
    var elementwise = false
}

/// One side of a comparison.
indirect enum Operand: Hashable, Sendable {
    /// A literal or an argument.
    case constant(Value)
    /// A `{...}` list literal, a list argument, or the two bounds of `BETWEEN`.
    case constants([Value])
    case keyPath(KeyPath)
    /// `left op right` on numbers: null when either is null; on a list and a number, one result per element.
    case arithmetic(ArithmeticOperator, Operand, Operand)
    /// `SUBQUERY(collection, $x, predicate).@count`: how many objects of the list `collection` leads to match
    /// `predicate`, whose key paths start at such an object.
    case subqueryCount(KeyPath, Predicate)

    /// Whether the operand yields any number of values rather than exactly one.
    var isMany: Bool {
        switch self {
        case .constant, .subqueryCount: false
        case .constants: true
        case .arithmetic(_, let left, let right): left.isMany || right.isMany
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

    /// Whether the path yields any number of values: it goes through a list (not taken one element of by a
    /// subscript) and ends without an aggregate (`@type` keeps one value per element).
    var isToMany: Bool {
        (operation == nil || operation == .type || operation == .keys || operation == .values)
            && steps.contains { $0.yieldsMany }
    }
}

/// One property along a key path.
struct PathStep: Hashable, Sendable {
    enum Target: Hashable, Sendable {
        case scalar(ScalarType)
        /// A link to an object of the named type.
        case link(String)
        case embedded(String)
        /// `@links.Type.property` (one source): the objects of `Type` whose `property` links to the object, whose
        /// primary key is its `keyProperty`. `@links.@count` counts through every source in the schema.
        case backlinks([BacklinkSource], keyProperty: String)

        /// The type a link, embedded or backlink step leads to.
        var objectType: String? {
            switch self {
            case .scalar: nil
            case .link(let type), .embedded(let type): type
            case .backlinks(let sources, _): sources.count == 1 ? sources[0].type : nil
            }
        }
    }
    var name: String
    var target: Target
    /// Whether the property is a list (even when `element` takes one of its elements).
    var isList: Bool
    /// `[FIRST]`, `[LAST]` or `[n]` after a list property: the step leads to that one element (none when the list
    /// is shorter).
    var element: ElementSelector? = nil
    /// Whether the property is a dictionary: its values, in the order of their keys.
    var isDictionary = false
    /// `['key']` after a dictionary property: the step leads to that key's value (null without one).
    var dictionaryKey: String? = nil
    /// Subscripts after a mixed property, in order: into the list or dictionary the mixed value holds, and into the
    /// lists and dictionaries nested in it.
    var mixedSelectors: [MixedSelector] = []

    /// Whether the step leads to any number of values: a list not taken one element of, a dictionary not taken
    /// one key of, or every element of a mixed value's list or dictionary.
    var yieldsMany: Bool {
        (isList && element == nil) || (isDictionary && dictionaryKey == nil) || mixedSelectors.contains(.all)
    }
}

/// A link property that may point at an object: `property` of `type`, whose primary key is `keyProperty`.
struct BacklinkSource: Hashable, Sendable {
    var type: String
    var property: String
    var keyProperty: String
}

/// A subscript into the list or dictionary a mixed value holds: `['key']` (null unless it holds a dictionary with
/// that key), `[FIRST]`, `[LAST]` or `[n]` (null unless it holds a list with that element), or `[*]` (each element
/// of its list, or each value of its dictionary in the order of their keys; none for any other value).
enum MixedSelector: Hashable, Sendable {
    case key(String)
    case element(ElementSelector)
    case all

    /// The values `selectors` select in `value`, one after the other (`[*]` goes on from every element).
    static func select(_ selectors: [MixedSelector], in value: Value) -> [Value] {
        var values = [value]
        for selector in selectors { values = values.flatMap(selector.select) }
        return values
    }

    /// The values this selects in `value`.
    func select(_ value: Value) -> [Value] {
        switch (self, value) {
        case (.key(let key), .dictionary(let entries)): return [entries[key] ?? .null]
        case (.element(let element), .list(let elements)): return [element.select(elements) ?? .null]
        case (.all, .list(let elements)): return elements
        case (.all, .dictionary(let entries)):
            return entries.keys.sorted { $0.utf8Precedes($1) }.map { entries[$0] ?? .null }
        case (.all, _): return []
        default: return [.null]
        }
    }
}

/// Which element of a list a subscript takes.
enum ElementSelector: Hashable, Sendable {
    case first, last
    case index(Int)

    /// The element of `elements` this selects, if there is one.
    func select<Element>(_ elements: [Element]) -> Element? {
        switch self {
        case .first: elements.first
        case .last: elements.last
        case .index(let index): index < elements.count ? elements[index] : nil
        }
    }
}

enum PathOperation: Hashable, Sendable {
    /// `@count` or `@size` on a list: its number of elements (for a list of links, of links whose target
    /// exists).
    case count
    /// `@size` on a string or data value: its size in bytes (UTF-8 for strings, as Realm counts); on a mixed value,
    /// that, or the number of elements of the list or dictionary it holds.
    case size
    /// `@type`: the name of the type of the value (``Value/queryTypeName``), or of each element of a list.
    case type
    /// `@keys` after a dictionary: its keys.
    case keys
    /// `@values` after a dictionary: its values (what the dictionary's key path yields without it).
    case values
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
