public import TributaryModel

/// A query in the Realm Query Language, parsed and checked against a schema, ready to evaluate.
///
/// Creating a query parses its text, resolves its key paths against the queried type, binds its arguments and
/// checks the types of every comparison, so that a query that was created evaluates without errors. Evaluation
/// is pure: it reads the object's fields, and follows links through a ``QueryObjectSource``.
///
/// ```swift
/// let query = try Query(
///     "conversationID == $0 AND text CONTAINS[c] $1 SORT(timestamp ASC) LIMIT(50)",
///     arguments: [.string(conversation), .string("hello")], type: message, schema: schema)
/// let page = query.apply(to: messages, source: snapshot)
/// ```
///
/// The syntax is the Realm Query Language, with quantifiers, arithmetic, subscripts and SUBQUERY; see the module
/// documentation for the full list of operators and what is not supported.
///
/// ## Topics
///
/// ### Creating a query
/// - ``init(_:arguments:type:schema:)``
/// - ``maximumNestingDepth``
///
/// ### Evaluating
/// - ``matches(_:source:)``
/// - ``apply(to:source:)``
/// - ``applyClauses(to:source:)``
/// - ``predicateProperties``
///
/// ### Planning
/// - ``indexableConstraints``
/// - ``clauses``
public struct Query: Hashable, Sendable, CustomStringConvertible {
    /// How deeply parentheses and `NOT` may nest; deeper queries throw ``QueryError/Code/tooComplex``.
    ///
    /// The limit keeps parsing and evaluation from exhausting the stack on hostile input.
    public static let maximumNestingDepth = 100

    /// The query text, as given.
    public let text: String
    /// The arguments `$0`, `$1`, ... (and `%@`, in order), as given.
    public let arguments: [Value]
    /// The name of the queried type.
    public let typeName: String

    let predicate: Predicate
    let descriptors: [Descriptor]

    /// Parses `text` and checks it against `type`.
    ///
    /// - Parameters:
    ///   - text: The query: a predicate, then any number of `SORT(...)`, `DISTINCT(...)` and `LIMIT(n)`
    ///     clauses. Keywords are case-insensitive.
    ///   - arguments: The values of `$0`, `$1`, ...; `%@` placeholders take them in order. A
    ///     ``Value/list(_:)`` argument is a list, for `IN $0`.
    ///   - type: The queried type; key paths start at its properties.
    ///   - schema: The schema that link and embedded properties are resolved in.
    /// - Throws: ``QueryError`` with code ``QueryError/Code/syntax``, ``QueryError/Code/invalidLiteral``,
    ///   ``QueryError/Code/unknownProperty``, ``QueryError/Code/typeMismatch``,
    ///   ``QueryError/Code/argumentMissing``, ``QueryError/Code/unsupported`` or
    ///   ``QueryError/Code/tooComplex``, pointing at the place in `text` at fault.
    /// - Complexity: O(*n*) in the length of `text`.
    public init(_ text: String, arguments: [Value] = [], type: ObjectSchema, schema: Schema) throws(QueryError) {
        let syntax = try Parser.parse(text, maximumDepth: Self.maximumNestingDepth)
        let checker = TypeChecker(schema: schema, root: type, arguments: arguments, query: text)
        (predicate, descriptors) = try checker.check(syntax)
        self.text = text
        self.arguments = arguments
        self.typeName = type.name
    }

    /// Whether an object of the queried type matches the predicate. SORT, DISTINCT and LIMIT do not apply.
    ///
    /// - Parameters:
    ///   - values: The object's property values by name, its primary key property included. A missing
    ///     property reads as null.
    ///   - source: Where links lead.
    /// - Complexity: O(*n*) in the size of the query and of the values it reads.
    public func matches(_ values: [String: Value], source: some QueryObjectSource) -> Bool {
        Evaluator(source: source).matches(predicate, values)
    }

    /// The objects that match, then sorted, made distinct and limited by the query's clauses, in the order
    /// the clauses are written (as Realm applies them).
    ///
    /// Sorting is stable, puts nulls first when ascending (last when descending), orders integers and doubles
    /// by value and strings by their Unicode scalars. DISTINCT keeps the first object of each combination of
    /// values. Without clauses, the matching objects keep their order.
    ///
    /// - Parameters:
    ///   - objects: Objects of the queried type: primary key and property values.
    ///   - source: Where links lead.
    /// - Returns: The selected objects.
    /// - Complexity: O(*n* log *n*) in the number of objects, for a query with a SORT.
    public func apply(to objects: [(PrimaryKey, [String: Value])], source: some QueryObjectSource)
        -> [(PrimaryKey, [String: Value])]
    {
        let evaluator = Evaluator(source: source)
        let matching = objects.filter { evaluator.matches(predicate, $0.1) }
        return evaluator.order(matching, by: descriptors)
    }

    /// Applies the SORT, DISTINCT and LIMIT clauses alone, to objects already known to match: for callers that
    /// tested the predicate themselves with ``matches(_:source:)`` while reading.
    ///
    /// `apply(to: objects, source: source)` equals
    /// `applyClauses(to: objects.filter { matches($0.1, source: source) }, source: source)`.
    public func applyClauses(to objects: [(PrimaryKey, [String: Value])], source: some QueryObjectSource)
        -> [(PrimaryKey, [String: Value])]
    {
        Evaluator(source: source).order(objects, by: descriptors)
    }

    /// The queried type's properties that the predicate reads: the first step of each of its key paths. Whether
    /// an object matches depends on these properties alone (and on the objects their links lead to), so a
    /// reader may decode only them to test it.
    public var predicateProperties: Set<String> {
        var names = Set<String>()
        Self.forEachKeyPath(in: predicate, nested: false) { path in
            // A SUBQUERY's predicate reads the objects its list leads to, not the queried object (`nested: false`);
            // backlinks are found by the object's primary key.
            guard let first = path.steps.first else { return }
            if case .backlinks(_, let keyProperty) = first.target {
                names.insert(keyProperty)
            } else {
                names.insert(first.name)
            }
        }
        return names
    }

    /// The types whose objects the query reaches through backlinks (`@links.Project.items`, `@links.@count`): a
    /// change to an object of one of them can change which objects match, or their order, though it changes no
    /// object of the queried type.
    public var backlinkTypes: Set<String> {
        var types = Set<String>()
        func collect(_ path: KeyPath) {
            for step in path.steps {
                if case .backlinks(let sources, _) = step.target { types.formUnion(sources.map(\.type)) }
            }
            if case .aggregate(_, let steps) = path.operation {
                collect(KeyPath(steps: steps, operation: nil, text: ""))
            }
        }
        Self.forEachKeyPath(in: predicate, nested: true, collect)
        for descriptor in descriptors {
            switch descriptor {
            case .sort(let keys): for key in keys { collect(key.path) }
            case .distinct(let paths): for path in paths { collect(path) }
            case .limit: break
            }
        }
        return types
    }

    /// Calls `body` with the key path of every operand of `predicate`'s comparisons, inside arithmetic too, and with
    /// a SUBQUERY's list; with `nested`, also with those of a SUBQUERY's predicate (which start at the list's
    /// elements). Recursion follows the checked tree, whose depth the parser bounds.
    static func forEachKeyPath(in predicate: Predicate, nested: Bool, _ body: (KeyPath) -> Void) {
        func visit(_ operand: Operand) {
            switch operand {
            case .constant, .constants: break
            case .keyPath(let path): body(path)
            case .arithmetic(_, let left, let right):
                visit(left)
                visit(right)
            case .subqueryCount(let path, let inner):
                body(path)
                if nested { visit(inner) }
            }
        }
        func visit(_ predicate: Predicate) {
            switch predicate {
            case .constant: break
            case .and(let terms), .or(let terms): for term in terms { visit(term) }
            case .not(let inner): visit(inner)
            case .comparison(let comparison):
                visit(comparison.left)
                visit(comparison.right)
            case .geoWithin(let geo):
                body(geo.path)
            case .fullText(let search):
                body(search.path)
            }
        }
        visit(predicate)
    }

    /// Per-property constraints an index can answer, for the top-level `AND` terms on scalar properties of the
    /// queried type. See ``IndexConstraint``.
    public var indexableConstraints: [IndexConstraint] {
        IndexConstraint.extract(from: predicate)
    }

    /// The query's SORT, DISTINCT and LIMIT clauses, in the order they are written.
    public var clauses: [Clause] {
        descriptors.map { descriptor in
            switch descriptor {
            case .sort(let keys): .sort(keys.map { SortKey(keyPath: $0.path.text, ascending: $0.ascending) })
            case .distinct(let paths): .distinct(paths.map(\.text))
            case .limit(let count): .limit(count)
            }
        }
    }

    /// The query text.
    public var description: String { text }

    /// A SORT, DISTINCT or LIMIT clause.
    public enum Clause: Hashable, Sendable {
        /// `SORT(a ASC, b DESC)`: by the first key, then the next for ties.
        case sort([SortKey])
        /// `DISTINCT(a, b)`: the key paths.
        case distinct([String])
        /// `LIMIT(n)`.
        case limit(Int)
    }

    /// One key of a SORT clause.
    public struct SortKey: Hashable, Sendable {
        /// The key path, as written.
        public var keyPath: String
        /// `true` for ASC (the default), `false` for DESC.
        public var ascending: Bool

        /// A sort key on `keyPath`, ascending or descending.
        public init(keyPath: String, ascending: Bool) {
            self.keyPath = keyPath
            self.ascending = ascending
        }
    }
}
