import TributaryMerge
public import TributaryModel
import TributaryQuery
import TributaryStorage
import TributaryViews

/// How a query finds its candidates, as ``Snapshot/explain(_:where:arguments:)`` reports it.
public enum QueryPlan: Hashable, Sendable, CustomStringConvertible {
    /// The query names primary keys: each is read directly.
    case primaryKey(count: Int)
    /// An index on `property` answers the constraint `constraint`; the candidates are then checked against the
    /// whole query.
    case index(property: String, constraint: String)
    /// The query's constraints cannot all hold: nothing is read.
    case noMatch
    /// Every object of the type is read and checked.
    case fullScan

    public var description: String {
        switch self {
        case .primaryKey(let count): "primary key lookup (\(count) key\(count == 1 ? "" : "s"))"
        case .index(let property, let constraint): "index on \(property): \(constraint)"
        case .noMatch: "no match (contradictory constraints)"
        case .fullScan: "full scan"
        }
    }
}

/// Reads link targets and backlinks for the query evaluator.
struct ReaderObjectSource: QueryObjectSource {
    let load: (String, PrimaryKey) -> [String: Value]?
    /// Every object of a type, read once per type and property that backlinks go through.
    let all: (String) -> [[String: Value]]
    private let backlinks = BacklinkIndex()

    init(load: @escaping (String, PrimaryKey) -> [String: Value]?, all: @escaping (String) -> [[String: Value]]) {
        self.load = load
        self.all = all
    }

    /// A source that reads through `reader`.
    init(_ reader: some ObjectReading) {
        self.init(
            load: { type, key in (try? reader.object(type, primaryKey: key))?.values },
            all: { type in (try? reader.objects(type))?.map(\.values) ?? [] })
    }

    func object(type: String, primaryKey: PrimaryKey) -> [String: Value]? { load(type, primaryKey) }

    func objects(type: String, linkingTo primaryKey: PrimaryKey, through property: String) -> [[String: Value]] {
        backlinks.objects(type: type, property: property, to: primaryKey, all: all)
    }
}

/// The objects of a type by the primary keys their link property points at, built on first use by reading the type
/// once, and kept for one query's evaluation.
private final class BacklinkIndex {
    private var targets: [String: [PrimaryKey: [[String: Value]]]] = [:]

    func objects(
        type: String, property: String, to primaryKey: PrimaryKey, all: (String) -> [[String: Value]]
    ) -> [[String: Value]] {
        let name = type + "." + property
        if let index = targets[name] { return index[primaryKey] ?? [] }
        var index: [PrimaryKey: [[String: Value]]] = [:]
        for object in all(type) {
            for key in linkedKeys(object[property] ?? .null) { index[key, default: []].append(object) }
        }
        targets[name] = index
        return index[primaryKey] ?? []
    }
}

extension Schema {
    func query(_ text: String, arguments: [Value], type: ObjectSchema) throws -> Query {
        do {
            return try Query(text, arguments: arguments, type: type, schema: self)
        } catch {
            throw TributaryError(.invalidQuery, error.description, underlying: error)
        }
    }

    /// The types whose changes can change the result of a query on `type`: itself and every type reachable through
    /// links, at any depth, including through embedded objects, the origin types of computed properties
    /// (``ObjectSchema/linkingObjects``), and every type when a mixed property (which may link to any) is reached.
    func typesReachable(from type: String) -> Set<String> {
        var reached: Set<String> = [type]
        var queue = [type]
        while let name = queue.popLast() {
            let type = self[type: name]
            // Computed properties read their origin type's objects.
            var targets =
                (type?.properties ?? []).compactMap(\.kind.objectType) + (type?.linkingObjects ?? []).map(\.originType)
            if type?.properties.contains(where: { $0.kind == .scalar(.mixed) }) == true {
                targets += types.map(\.name)
            }
            for target in targets where !reached.contains(target) {
                reached.insert(target)
                queue.append(target)
            }
        }
        return reached
    }
}

extension Snapshot {
    /// The objects of `type` that match a query in the Realm Query Language, sorted, made distinct and limited by its
    /// clauses.
    ///
    /// ```swift
    /// let recent = try snapshot.objects("ChatMessage",
    ///     where: "conversationID == $0 SORT(timestamp DESC) LIMIT(50)", arguments: ["c1"])
    /// ```
    /// An index on a property constrained by equality, `IN` or a range answers the query without reading every
    /// object; ``explain(_:where:arguments:)`` says which.
    ///
    /// - Throws: ``TributaryError`` with `.invalidQuery` (its message points at the place in the query at fault), or
    ///   `.unknownType`.
    public func objects(_ type: String, where query: String, arguments: [Value] = []) throws -> [DynamicObject] {
        let objectType = try schema.requireType(type)
        let parsed = try schema.query(query, arguments: arguments, type: objectType)
        return try matchingObjects(parsed, try self.plan(parsed, type: objectType), type: objectType)
    }

    /// How ``objects(_:where:arguments:)`` would run a query.
    public func explain(_ type: String, where query: String, arguments: [Value] = []) throws -> QueryPlan {
        let objectType = try schema.requireType(type)
        return try plan(try schema.query(query, arguments: arguments, type: objectType), type: objectType).plan
    }

    /// The number of objects of `type` that match a query.
    public func count(_ type: String, where query: String, arguments: [Value] = []) throws -> Int {
        try objects(type, where: query, arguments: arguments).count
    }

    /// Carries out a plan: reads each candidate record it names, tests the predicate on just the properties the
    /// predicate reads, materializes the records that match, then applies SORT, DISTINCT and LIMIT. Candidates are
    /// taken in stored primary key order (``KeyEncoding/precedes(_:_:)``) whatever the plan, so results do not depend
    /// on it.
    func matchingObjects(_ query: Query, _ planned: PlannedQuery, type: ObjectSchema) throws -> [DynamicObject] {
        let materializer = self.materializer
        let source = ReaderObjectSource(self)
        // A full scan tests most records and keeps few: it decodes only what the predicate reads, and the rest of a
        // record that matches. The candidates an index or primary keys name mostly match: they are decoded whole.
        let read = query.predicateProperties
        let wanted = type.properties.map { planned.plan != .fullScan || read.contains($0.name) }
        let readsAll = !wanted.contains(false)
        let reader = try typeReader(type.name)
        let projector = readsAll ? reader.projector : RecordProjector(type: type, schema: schema, wanted: wanted)
        var filter = CandidateFilter(
            query: query, type: type, materializer: materializer, source: source, projector: projector,
            whole: reader.projector, layout: reader.layout, wanted: readsAll ? nil : wanted)

        func consider(keys: [PrimaryKey]) throws {
            for key in keys {
                try storage.withValue(replica.views.objects, key: reader.key(key)) { bytes in
                    if let bytes { try filter.consider(key, bytes) }
                }
            }
        }

        switch planned.plan {
        case .noMatch:
            return []
        case .primaryKey:
            try consider(keys: Self.storedOrder(planned.keys))
        case .index(let property, _):
            if let constraint = planned.constraint {
                var keys: [PrimaryKey] = []
                for (lower, upper) in planned.ranges {
                    try replica.views.indexScan(
                        type: type.name, property: property, lower: lower, upper: upper, in: storage
                    ) {
                        keys.append($0)
                        return true
                    }
                }
                // Index entries sort by value, then primary key: the entries of one value are in primary key order
                // already, and hold each object once.
                if case .equal(let values) = constraint.kind, values.count == 1 {
                    try consider(keys: keys)
                } else {
                    try consider(keys: Self.storedOrder(keys))
                }
            } else {
                try scanStored(type) { try filter.consider(storedKey: $0, $1) }
            }
        case .fullScan:
            try scanStored(type) { try filter.consider(storedKey: $0, $1) }
        }
        if let clauses = filter.positionalClauses {
            let results = filter.results
            return clauses.order(count: results.count) { results[$0].value(atPosition: $1, of: type) }.map {
                results[$0]
            }
        }
        guard filter.hasClauses else { return filter.results }
        return query.applyClauses(to: filter.matched, source: source).map {
            DynamicObject(type: type.name, primaryKey: $0.0, values: $0.1)
        }
    }

}

extension Snapshot {
    /// `keys` in stored primary key order (``KeyEncoding/precedes(_:_:)``), each once. Integer keys, the common case,
    /// sort as integers: sorting the enum costs a copy of each key per comparison.
    static func storedOrder(_ keys: [PrimaryKey]) -> [PrimaryKey] {
        var integers: [Int64] = []
        integers.reserveCapacity(keys.count)
        for key in keys {
            guard case .int(let value) = key else { return Set(keys).sorted(by: KeyEncoding.precedes) }
            integers.append(value)
        }
        integers.sort()
        var result: [PrimaryKey] = []
        result.reserveCapacity(integers.count)
        for (index, value) in integers.enumerated() where index == 0 || value != integers[index - 1] {
            result.append(.int(value))
        }
        return result
    }
}

extension ObjectReading {
    /// The candidates that match `query`, after its SORT, DISTINCT and LIMIT; links are followed through this reader.
    func evaluate(_ query: Query, on candidates: [DynamicObject], type: String) -> [DynamicObject] {
        let source = ReaderObjectSource(self)
        let selected = query.apply(to: candidates.map { ($0.primaryKey, $0.values) }, source: source)
        return selected.map { DynamicObject(type: type, primaryKey: $0.0, values: $0.1) }
    }
}

/// Tests candidate records against a query and keeps those that match. Its state is one value, so the per-record
/// work touches no captured variables (whose accesses Swift checks at run time).
private struct CandidateFilter {
    let query: Query
    let type: ObjectSchema
    let materializer: Materializer
    let source: ReaderObjectSource
    /// Reads what the predicate needs.
    let projector: RecordProjector
    /// Reads whole records.
    let whole: RecordProjector
    /// The positions `projector` reads, or `nil` for all.
    let wanted: [Bool]?
    /// A predicate on scalar properties alone, tested on the decoded values as they are, with no dictionary.
    let positional: PositionalPredicate?
    /// Where the primary key goes, and which values need links resolved.
    let layout: Materializer.PositionalLayout
    /// Whether the predicate reads the primary key: if not, a scan decodes the keys of matches only.
    let predicateReadsKey: Bool
    /// Without SORT, DISTINCT or LIMIT the matches are the result as they are: they stay positional, with no
    /// dictionary of values by name. So they do when the clauses read the type's own scalar properties alone
    /// (`positionalClauses`); other clauses work on values by name (`hasClauses`).
    let hasClauses: Bool
    let positionalClauses: PositionalClauses?
    /// Where a candidate's fields are, and its values when decoded whole: one of each for every candidate, so a
    /// candidate that fails the predicate costs no allocation.
    var fields = RecordProjector.Fields()
    var projected: [Value] = []
    /// The matches, when there are no clauses.
    var results: [DynamicObject] = []
    /// The matches by name, for the clauses.
    var matched: [(PrimaryKey, [String: Value])] = []

    init(
        query: Query, type: ObjectSchema, materializer: Materializer, source: ReaderObjectSource,
        projector: RecordProjector, whole: RecordProjector, layout: Materializer.PositionalLayout, wanted: [Bool]?
    ) {
        self.query = query
        self.type = type
        self.materializer = materializer
        self.source = source
        self.projector = projector
        self.whole = whole
        self.layout = layout
        self.wanted = wanted
        positional = query.positionalPredicate(for: type)
        predicateReadsKey = layout.keyPosition.map { wanted?[$0] ?? true } ?? false
        positionalClauses = query.positionalClauses(for: type)
        hasClauses = positionalClauses == nil && !query.clauses.isEmpty
    }

    /// Considers a scanned record, whose primary key is decoded only if the predicate reads it or the record matches.
    mutating func consider(storedKey: Slice<UnsafeRawBufferPointer>, _ bytes: UnsafeRawBufferPointer) throws {
        do {
            try considerScanned(storedKey: storedKey, bytes)
        } catch let error as ChangesetDecodingError {
            throw error.inRecord(of: Snapshot.describe(type: type.name, storedKey: storedKey))
        }
    }

    /// Considers a record whose primary key is known (an index or the query named it).
    mutating func consider(_ primaryKey: PrimaryKey, _ bytes: UnsafeRawBufferPointer) throws {
        do {
            let located = try considerLocated(bytes, primaryKey: primaryKey, storedKey: nil)
            guard located != .handled else { return }
            try considerDecoded(primaryKey, bytes, fullDecoder: located == .needsFullDecoder)
        } catch let error as ChangesetDecodingError {
            throw error.inRecord(of: RecordKey(type: type.name, primaryKey: primaryKey))
        }
    }

    private mutating func considerScanned(storedKey: Slice<UnsafeRawBufferPointer>, _ bytes: UnsafeRawBufferPointer)
        throws
    {
        var primaryKey: PrimaryKey?
        if predicateReadsKey {
            guard let key = KeyEncoding.primaryKey(from: storedKey) else { return }
            primaryKey = key
        }
        let located = try considerLocated(bytes, primaryKey: primaryKey, storedKey: storedKey)
        guard located != .handled, let primaryKey = primaryKey ?? KeyEncoding.primaryKey(from: storedKey) else {
            return
        }
        try considerDecoded(primaryKey, bytes, fullDecoder: located == .needsFullDecoder)
    }

    private enum LocatedOutcome {
        /// Tested, and kept if it matched.
        case handled
        /// Not tried: the query needs more than located fields.
        case notTried
        /// Tried: the record needs the full decoder.
        case needsFullDecoder
    }

    /// A scan's path, which rejects most records: the record's fields are located, and only the values the predicate
    /// asks for are decoded. (The candidates an index names mostly match, and are decoded whole.) The primary key is
    /// `primaryKey`, or else decoded from `storedKey` if the record matches.
    private mutating func considerLocated(
        _ bytes: UnsafeRawBufferPointer, primaryKey: PrimaryKey?, storedKey: Slice<UnsafeRawBufferPointer>?
    ) throws -> LocatedOutcome {
        guard let positional, wanted != nil else { return .notTried }
        switch projector.locate(bytes, into: &fields) {
        case .tombstone:
            return .handled
        case .needsFullDecoder:
            return .needsFullDecoder
        case .exists:
            let projector = self.projector
            let fields = self.fields
            let keyPosition = layout.keyPosition
            let matches = positional.matches { position in
                position == keyPosition ? primaryKey?.value ?? .null : projector.value(at: position, in: bytes, fields)
            }
            guard matches, let primaryKey = primaryKey ?? storedKey.flatMap({ KeyEncoding.primaryKey(from: $0) }) else {
                return .handled
            }
            try keep(primaryKey, positional: whole.values(bytes) ?? [])
            return .handled
        }
    }

    /// The path for records decoded whole (or, with `fullDecoder`, by the full decoder, which the located path found
    /// they need), and for predicates that are not positional.
    private mutating func considerDecoded(_ primaryKey: PrimaryKey, _ bytes: UnsafeRawBufferPointer, fullDecoder: Bool)
        throws
    {
        if fullDecoder {
            guard let decoded = try projector.fullDecode(bytes) else { return }
            projected = decoded
        } else {
            guard try projector.project(bytes, into: &projected, using: &fields) else { return }
        }
        if let positional {
            if let keyPosition = layout.keyPosition { projected[keyPosition] = primaryKey.value }
            guard positional.matches(projected) else { return }
        } else {
            let fields = try materializer.fields(
                type: type, primaryKey: primaryKey, positional: projected, wanted: wanted)
            guard query.matches(fields, source: source) else { return }
            if wanted == nil && hasClauses {
                matched.append((primaryKey, fields))
                return
            }
        }
        try keep(primaryKey, positional: wanted == nil ? projected : try whole.values(bytes) ?? projected)
    }

    private mutating func keep(_ primaryKey: PrimaryKey, positional values: [Value]) throws {
        if hasClauses {
            matched.append(
                (primaryKey, try materializer.fields(type: type, primaryKey: primaryKey, positional: values)))
        } else {
            results.append(
                try materializer.object(layout: layout, primaryKey: primaryKey, positional: values))
        }
    }
}
