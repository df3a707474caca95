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
    /// The query sorts by one indexed property (perhaps with a LIMIT after): its index is walked in the SORT's order,
    /// and each object it names is checked against the query, until the LIMIT is reached. Within `constraint` (a
    /// range on that property) when the query has one.
    case indexOrder(property: String, descending: Bool, constraint: String?)

    public var description: String {
        switch self {
        case .primaryKey(let count): "primary key lookup (\(count) key\(count == 1 ? "" : "s"))"
        case .index(let property, let constraint): "index on \(property): \(constraint)"
        case .noMatch: "no match (contradictory constraints)"
        case .fullScan: "full scan"
        case .indexOrder(let property, let descending, let constraint):
            "index on \(property) in \(descending ? "descending" : "ascending") order"
                + (constraint.map { ": \($0)" } ?? "")
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
    /// object; ``explain(_:where:arguments:)`` says which. A query sorted by one indexed integer, double or date
    /// property (`SORT(timestamp DESC) LIMIT(50)`) walks that index in order and reads only the objects up to its
    /// LIMIT; sorted by another property, a scan with a LIMIT of at most 1,000 keeps only the best matches as it goes.
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
        let planned = try plan(try schema.query(query, arguments: arguments, type: objectType), type: objectType)
        guard let order = planned.order else { return planned.plan }
        return .indexOrder(
            property: order.property, descending: !order.ascending, constraint: planned.constraint?.description)
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
        // A scan for one SORT and a small LIMIT keeps the best matches by their sort key alone (``TopMatches``).
        var top: TopMatches?
        if planned.plan == .fullScan, planned.order == nil, let sort = query.positionalClauses(for: type)?.singleSort,
            let limit = sort.limit, limit <= TopMatches.largestLimit, sort.position < type.properties.count,
            type.properties[sort.position].kind != .scalar(.mixed)
        {
            top = TopMatches(position: sort.position, ascending: sort.ascending, limit: limit)
        }
        let wanted = type.properties.indices.map { position in
            planned.plan != .fullScan || read.contains(type.properties[position].name) || top?.position == position
        }
        let readsAll = !wanted.contains(false)
        let reader = try typeReader(type.name)
        let projector = readsAll ? reader.projector : RecordProjector(type: type, schema: schema, wanted: wanted)
        var filter = CandidateFilter(
            query: query, type: type, materializer: materializer, source: source, projector: projector,
            whole: reader.projector, layout: reader.layout, wanted: readsAll ? nil : wanted)
        filter.top = top

        func consider(keys: [PrimaryKey]) throws {
            for key in keys {
                if let bytes = try storage.valueInPlace(replica.views.objects, key: reader.key(key)) {
                    try filter.consider(key, bytes)
                }
            }
        }

        if let order = planned.order,
            let ordered = try indexOrdered(order, type: type, reader: reader, filter: &filter)
        {
            return ordered
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
                    ) { key, _ in
                        keys.append(key)
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
        case .fullScan, .indexOrder:
            try scanStored(type) { try filter.consider(storedKey: $0, $1) }
        }
        if let top = filter.top {
            // The records of the best matches, read again whole.
            var results: [DynamicObject] = []
            results.reserveCapacity(top.kept.count)
            for (_, key) in top.kept {
                if let values = try storedValues(reader, key) {
                    results.append(try materializer.object(layout: reader.layout, primaryKey: key, positional: values))
                }
            }
            return results
        }
        if let clauses = filter.positionalClauses {
            var results: [DynamicObject] = []
            swap(&results, &filter.results)
            // Read in place: through the array's subscript, each read copied the object it read from.
            let order = results.withUnsafeBufferPointer { objects in
                clauses.order(count: objects.count) { objects[$0].value(atPosition: $1, of: type) }
            }
            Self.arrange(&results, in: order)
            return results
        }
        guard filter.hasClauses else { return filter.results }
        return query.applyClauses(to: filter.matched, source: source).map {
            DynamicObject(type: type.name, primaryKey: $0.0, values: $0.1)
        }
    }

    /// Rearranges `objects` into `order` (the positions of the objects to keep, in the order to keep them), by
    /// swapping them where they are: moving ten thousand sorted results copies none of them, where building a new
    /// array retains every reference each one holds and the old array then releases them all.
    static func arrange(_ objects: inout [DynamicObject], in order: [Int]) {
        // Each position at most once, as clauses give them; anything else is built by copying.
        var named = [Bool](repeating: false, count: objects.count)
        for position in order {
            guard objects.indices.contains(position), !named[position] else {
                objects = order.compactMap { objects.indices.contains($0) ? objects[$0] : nil }
                return
            }
            named[position] = true
        }
        // Where each object that started at a position is now, and which one each position holds now.
        var place = Array(objects.indices)
        var holder = Array(objects.indices)
        // The buffer's swap moves the two objects; the array's copies them.
        objects.withUnsafeMutableBufferPointer { objects in
            for (target, wanted) in order.enumerated() {
                // The positions before `target` hold earlier objects of `order`, so `wanted` is at `target` or after.
                let from = place[wanted]
                guard from != target else { continue }
                objects.swapAt(target, from)
                let displaced = holder[target]
                place[displaced] = from
                holder[from] = displaced
                place[wanted] = target
                holder[target] = wanted
            }
        }
        objects.removeSubrange(order.count...)
    }

    /// Carries out `order` (``PlannedQuery/order``): walks the index of the sorted property in the SORT's order and
    /// checks each object it names, until the LIMIT is reached. The index orders the objects of one value by primary
    /// key, as the stable SORT over candidates in stored primary key order leaves them; a descending walk meets them
    /// in reverse, so it takes each value's objects together and considers them the other way round. `nil` when the
    /// objects read turn out not to be in the SORT's order (an index that disagrees with the records), for the
    /// general path.
    private func indexOrdered(
        _ order: PlannedQuery.IndexOrder, type: ObjectSchema, reader: TypeReader, filter: inout CandidateFilter
    ) throws -> [DynamicObject]? {
        let limit = order.limit ?? .max
        guard limit > 0 else { return [] }
        var inOrder = true
        var previous: Value?
        /// Considers the object with `key`; returns whether to go on.
        func consider(_ key: PrimaryKey) throws -> Bool {
            let before = filter.results.count
            if let bytes = try storage.valueInPlace(replica.views.objects, key: reader.key(key)) {
                try filter.consider(key, bytes)
            }
            if filter.results.count > before, let last = filter.results.last {
                let value = last.value(atPosition: order.position, of: type)
                if let previous, TopMatches.precedes(value, previous, ascending: order.ascending) { inOrder = false }
                previous = value
            }
            return inOrder && filter.results.count < limit
        }
        var group: [PrimaryKey] = []
        var groupValue: [UInt8] = []
        var going = true
        try replica.views.indexScan(
            type: type.name, property: order.property, lower: order.lower, upper: order.upper,
            reverse: !order.ascending, in: storage
        ) { key, value in
            if order.ascending { return try consider(key) }
            if !value.elementsEqual(groupValue) {
                for earlier in group.reversed() where going { going = try consider(earlier) }
                group.removeAll(keepingCapacity: true)
                groupValue = Array(value)
            }
            group.append(key)
            return going
        }
        if !order.ascending {
            for earlier in group.reversed() where going { going = try consider(earlier) }
        }
        guard inOrder else {
            // The general path starts again from nothing.
            filter.results.removeAll()
            return nil
        }
        return filter.results
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
    /// With one SORT and a small LIMIT: the best matches so far, instead of ``results``.
    var top: TopMatches?

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
            let keyPosition = layout.keyPosition
            // `self` holds both for the whole call: reading them unretained saves two retains and releases per value
            // the predicate reads, most of a rejected record's cost besides locating its fields.
            unowned(unsafe) let projector = self.projector
            let matches = withExtendedLifetime(self.fields) { fields in
                positional.matches { position in
                    position == keyPosition
                        ? primaryKey?.value ?? .null : projector.value(at: position, in: bytes, fields)
                }
            }
            guard matches, let primaryKey = primaryKey ?? storedKey.flatMap({ KeyEncoding.primaryKey(from: $0) }) else {
                return .handled
            }
            if let position = top?.position {
                top?.offer(
                    position == keyPosition ? primaryKey.value : projector.value(at: position, in: bytes, fields),
                    primaryKey)
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
            guard try projector.project(bytes, into: &projected) else { return }
        }
        if let positional {
            if let keyPosition = layout.keyPosition { projected[keyPosition] = primaryKey.value }
            guard positional.matches(projected) else { return }
            if let position = top?.position {
                top?.offer(position < projected.count ? projected[position] : .null, primaryKey)
                return
            }
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

/// The best `limit` matches of a scan for one SORT with a LIMIT, by their sort key alone, in the SORT's order (ties in
/// the order they were offered, as the stable SORT leaves them): a scan then keeps the keys of a few objects instead
/// of every match's values, and reads the few again at the end.
struct TopMatches {
    /// The largest LIMIT kept this way: each match that enters moves the ones after it.
    static let largestLimit = 1_000
    let position: Int
    let ascending: Bool
    let limit: Int
    /// The sort key and primary key of the best matches so far, best first.
    private(set) var kept: [(value: Value, key: PrimaryKey)] = []

    init(position: Int, ascending: Bool, limit: Int) {
        self.position = position
        self.ascending = ascending
        self.limit = limit
        kept.reserveCapacity(limit + 1)
    }

    /// Whether `value` comes strictly before `other` in a SORT `ascending` as given.
    static func precedes(_ value: Value, _ other: Value, ascending: Bool) -> Bool {
        let order = PositionalClauses.sortOrder(value, other)
        return ascending ? order < 0 : order > 0
    }

    mutating func offer(_ value: Value, _ key: PrimaryKey) {
        guard limit > 0 else { return }
        if kept.count == limit, let last = kept.last, !Self.precedes(value, last.value, ascending: ascending) { return }
        // After every kept match it does not precede: a tie goes after the matches offered before it.
        var low = 0
        var high = kept.count
        while low < high {
            let middle = (low + high) / 2
            if Self.precedes(value, kept[middle].value, ascending: ascending) {
                high = middle
            } else {
                low = middle + 1
            }
        }
        kept.insert((value, key), at: low)
        if kept.count > limit { kept.removeLast() }
    }
}
