import Synchronization
import TributaryLog
import TributaryMerge
public import TributaryModel
import TributaryQuery
import TributaryStorage
import TributaryViews

/// A change of a live query's results.
///
/// The index arrays are sorted in ascending order. Applying a change to the previous results gives the new ones:
/// remove the elements at `deletions` (indices in the previous results), then insert the new results' elements at
/// `insertions` (indices in the new results). `modifications` are indices in the new results of objects that
/// stayed but whose values changed. An object that moved (because a sort key changed) is reported as a deletion
/// and an insertion.
public enum ResultsChange<Element: Sendable>: Sendable {
    /// The results when observation started.
    case initial([Element])
    /// The results after a commit that changed them.
    case update([Element], deletions: [Int], insertions: [Int], modifications: [Int])

    /// The results, after this change.
    public var results: [Element] {
        switch self {
        case .initial(let results), .update(let results, _, _, _): results
        }
    }
}

/// The results of a query as they change: an `AsyncSequence` that yields the initial results, then fresh results
/// after every commit that changes them, whether the commit was a local write or an integration of changesets from
/// another replica.
///
/// ```swift
/// for try await change in replica.observe("ChatMessage", where: "conversationID == $0 SORT(timestamp ASC)", arguments: ["c1"]) {
///     render(change.results)
/// }
/// ```
/// Commits that come in a burst may be coalesced into one update. A commit that touches none of the types the query
/// reads does not wake the observer, nor does one that leaves the results unchanged. Cancelling the task that
/// iterates ends the sequence; closing the replica ends it too. Nothing is tied to a thread.
public struct ResultsObservation<Element: Sendable>: AsyncSequence, Sendable {
    let replica: Replica
    let type: String
    let query: String?
    let arguments: [Value]
    let transform: @Sendable (DynamicObject) throws -> Element

    public func makeAsyncIterator() -> Iterator {
        let (type, query, arguments) = (type, query, arguments)
        return Iterator(
            observation: self,
            registration: ObservationRegistration(replica: replica, observing: type) { schema in
                // Objects that link to the results change a query through backlinks without changing the results.
                guard let query, let queried = schema[type: type],
                    let parsed = try? schema.query(query, arguments: arguments, type: queried)
                else { return [] }
                return parsed.backlinkTypes
            })
    }

    func fetch() throws -> [DynamicObject] {
        try replica.read { try fetch(in: $0) }
    }

    func fetch(in snapshot: Snapshot) throws -> [DynamicObject] {
        let objects =
            if let query { try snapshot.objects(type, where: query, arguments: arguments) } else {
                try snapshot.objects(type)
            }
        // With their computed properties, which a commit to a linking object changes (and so the results).
        return snapshot.addingLinkingObjects(objects)
    }

    /// The results after the commits `registration` announced, with the change from `old`; `nil` when none of them
    /// touched the observed types. Where it can, it re-reads only the objects those commits changed (see
    /// ``Snapshot/incrementalResults(_:type:query:arguments:changed:)``); otherwise it runs the query again.
    func refresh(_ old: [DynamicObject], _ registration: ObservationRegistration) throws
        -> (results: [DynamicObject], change: ResultsDiff)?
    {
        try replica.read { snapshot in
            switch registration.takeChanges(through: try snapshot.logSequence()) {
            case .nothing:
                return nil
            case .keys(let keys):
                if let updated = try snapshot.incrementalResults(
                    old, type: type, query: query, arguments: arguments, changed: keys)
                {
                    registration.incrementalRefreshes.wrappingAdd(1, ordering: .relaxed)
                    return updated
                }
                let results = try fetch(in: snapshot)
                return (results, ResultsDiff(old: old, new: results))
            case .everything:
                let results = try fetch(in: snapshot)
                return (results, ResultsDiff(old: old, new: results))
            }
        }
    }

    public struct Iterator: AsyncIteratorProtocol {
        let observation: ResultsObservation
        let registration: ObservationRegistration
        var previous: [DynamicObject]?

        public mutating func next() async throws -> ResultsChange<Element>? {
            guard let old = previous else {
                let results = try observation.fetch()
                previous = results
                return .initial(try results.map(observation.transform))
            }
            var current = old
            while true {
                guard await registration.nextSignal(), !Task.isCancelled else { return nil }
                guard let (results, change) = try observation.refresh(current, registration) else { continue }
                current = results
                previous = results
                if !change.isEmpty {
                    return .update(
                        try results.map(observation.transform), deletions: change.deletions,
                        insertions: change.insertions,
                        modifications: change.modifications)
                }
            }
        }
    }
}

/// One object's state, as ``ObjectObservation`` yields it.
public enum ObjectChange<Object: Sendable>: Sendable {
    /// The object as of a commit.
    case exists(Object)
    /// No object has the primary key: it was deleted, or was never created.
    case absent

    /// The object, or `nil` when it is absent.
    public var object: Object? {
        if case .exists(let object) = self { object } else { nil }
    }
}

extension ObjectChange: Equatable where Object: Equatable {}

/// One object as it changes: yields its state now, then after every commit that changes it (``ObjectChange/absent``
/// once it is deleted, and again ``ObjectChange/exists(_:)`` if it is created again).
///
/// ```swift
/// for try await change in replica.observeObject(ChatMessage.self, primaryKey: id) {
///     if let message = change.object { show(message) } else { dismiss() }
/// }
/// ```
public struct ObjectObservation<Object: Sendable>: AsyncSequence, Sendable {
    public typealias Element = ObjectChange<Object>
    let replica: Replica
    let type: String
    let primaryKey: PrimaryKey
    let transform: @Sendable (DynamicObject) throws -> Object

    public func makeAsyncIterator() -> Iterator {
        Iterator(
            observation: self,
            registration: ObservationRegistration(replica: replica, observing: type))
    }

    public struct Iterator: AsyncIteratorProtocol {
        let observation: ObjectObservation
        let registration: ObservationRegistration
        var started = false
        var previous: DynamicObject?

        public mutating func next() async throws -> ObjectChange<Object>? {
            let fetch = { [observation] in
                try observation.replica.read { snapshot in
                    try snapshot.object(observation.type, primaryKey: observation.primaryKey).map {
                        snapshot.addingLinkingObjects($0, ReaderObjectSource(snapshot))
                    }
                }
            }
            let change = { [observation] (object: DynamicObject?) throws -> ObjectChange<Object> in
                try object.map { .exists(try observation.transform($0)) } ?? .absent
            }
            if !started {
                started = true
                previous = try fetch()
                return try change(previous)
            }
            while true {
                guard await registration.nextSignal(), !Task.isCancelled else { return nil }
                _ = registration.takeChanges(through: .max)  // the object is read again whatever changed
                let current = try fetch()
                if current != previous {
                    previous = current
                    return try change(current)
                }
            }
        }
    }
}

/// An observer's registration with its replica: a one-slot signal that commits to relevant types set, and the keys
/// those commits changed. Releasing the registration unregisters it.
public final class ObservationRegistration: Sendable {
    private let replica: Replica
    private let identifier: UInt64
    private let signals: AsyncStream<Void>
    private let pending = PendingBox()
    /// How many commits woke this observer (for tests of "a commit that cannot change the result does not wake").
    let wakes = WakeCounter()
    /// How many refreshes read only the objects that changed (for tests that the path is taken).
    let incrementalRefreshes = Atomic<Int>(0)

    /// The commits an observer has not applied yet, shared with the closure that records them.
    final class PendingBox: Sendable {
        let changes = Mutex(PendingChanges())
    }

    /// The commits an observer has not applied yet.
    struct PendingChanges {
        /// The local log sequence of the last commit announced (relevant or not).
        var announced: UInt64 = 0
        /// Relevant commits not applied yet: each one's sequence and the keys (of the observed types) it changed.
        var commits: [(sequence: UInt64, keys: [RecordKey])] = []
        var keyCount = 0
        /// Commits through this sequence changed the schema, or more keys than are worth keeping: re-read everything.
        var rereadThrough: UInt64?
    }

    /// What a refresh at one snapshot must look at.
    enum Refresh {
        /// Nothing that changed the observed types.
        case nothing
        /// These keys changed.
        case keys(Set<RecordKey>)
        /// Anything may have changed: re-read the results.
        case everything
    }

    /// Keys kept for an observer that is not iterating, before it falls back to re-reading everything.
    static let maximumPendingKeys = 10_000

    /// Registers for commits that touch `type` or a type its objects reach (by links or embedding), or one of the
    /// types `through` names for a schema (a query's backlinks) and the types those reach, as the schema has them at
    /// each commit: a schema change (a link added) widens the set.
    init(
        replica: Replica, observing type: String,
        through: @escaping @Sendable (Schema) -> Set<String> = { _ in [] }
    ) {
        let observedTypes: @Sendable (Schema) -> Set<String> = { schema in
            ([type] + through(schema)).reduce(into: Set<String>()) { $0.formUnion(schema.typesReachable(from: $1)) }
        }
        let types = Mutex(observedTypes(replica.schema))
        self.replica = replica
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        signals = stream
        let wakes = self.wakes
        let pending = self.pending
        identifier = replica.observers.add(
            ObserverRegistry.Entry(
                onCommit: { [weak replica] keys, schemaChanged, sequence in
                    if schemaChanged, let replica {
                        let reachable = observedTypes(replica.schema)
                        types.withLock { $0 = reachable }
                    }
                    let observed = types.withLock { $0 }
                    let relevant = keys.filter { observed.contains($0.type) }
                    pending.changes.withLock { pending in
                        pending.announced = max(pending.announced, sequence)
                        if schemaChanged || pending.keyCount + relevant.count > Self.maximumPendingKeys {
                            pending.rereadThrough = sequence
                            pending.commits.removeAll()
                            pending.keyCount = 0
                        } else if !relevant.isEmpty {
                            pending.commits.append((sequence, relevant))
                            pending.keyCount += relevant.count
                        }
                    }
                    if schemaChanged || !relevant.isEmpty {
                        wakes.count.wrappingAdd(1, ordering: .relaxed)
                        continuation.yield()
                    }
                },
                onFinish: { continuation.finish() }))
    }

    deinit { replica.observers.remove(identifier) }

    /// Waits for the next relevant commit; `false` when observation ended (replica closed, task cancelled).
    func nextSignal() async -> Bool {
        var iterator = signals.makeAsyncIterator()
        return await iterator.next() != nil
    }

    /// Takes what a refresh at a snapshot that ends at log sequence `snapshot` must look at. Commits after the
    /// snapshot stay pending (a later refresh applies them); a commit the snapshot holds but that was not announced
    /// yet (announcements follow commits) makes its keys unknown, so the refresh re-reads everything.
    func takeChanges(through snapshot: UInt64) -> Refresh {
        pending.changes.withLock { pending in
            let covered = pending.commits.filter { $0.sequence <= snapshot }
            pending.commits.removeAll { $0.sequence <= snapshot }
            pending.keyCount = pending.commits.reduce(0) { $0 + $1.keys.count }
            if let through = pending.rereadThrough {
                if through <= snapshot { pending.rereadThrough = nil }
                return .everything
            }
            if pending.announced < snapshot { return .everything }
            if covered.isEmpty { return .nothing }
            return .keys(Set(covered.flatMap(\.keys)))
        }
    }
}

/// The change from one result array to the next, by primary key.
struct ResultsDiff {
    var deletions: [Int] = []
    var insertions: [Int] = []
    var modifications: [Int] = []

    var isEmpty: Bool { deletions.isEmpty && insertions.isEmpty && modifications.isEmpty }

    init(deletions: [Int], insertions: [Int], modifications: [Int]) {
        self.deletions = deletions
        self.insertions = insertions
        self.modifications = modifications
    }

    init(old: [DynamicObject], new: [DynamicObject]) {
        var newIndex: [PrimaryKey: Int] = [:]
        for (index, object) in new.enumerated() { newIndex[object.primaryKey] = index }
        // Objects in both, in the old order, with their new positions. The longest increasing run of new positions
        // stays in place; the rest moved and count as deleted and inserted.
        var common: [(old: Int, new: Int)] = []
        for (index, object) in old.enumerated() {
            if let position = newIndex[object.primaryKey] { common.append((index, position)) }
        }
        let staying = Set(Self.longestIncreasingSubsequence(common.map(\.new)).map { common[$0].old })
        var kept = Set<Int>()
        for (index, object) in old.enumerated() {
            if staying.contains(index), let position = newIndex[object.primaryKey] {
                kept.insert(position)
                if new[position] != object { modifications.append(position) }
            } else {
                deletions.append(index)
            }
        }
        insertions = new.indices.filter { !kept.contains($0) }
        modifications.sort()
    }

    /// Indices (into `values`) of a longest strictly increasing subsequence. O(n log n).
    static func longestIncreasingSubsequence(_ values: [Int]) -> [Int] {
        var tails: [Int] = []  // indices into values
        var parents = [Int](repeating: -1, count: values.count)
        for (index, value) in values.enumerated() {
            var low = 0
            var high = tails.count
            while low < high {
                let middle = (low + high) / 2
                if values[tails[middle]] < value { low = middle + 1 } else { high = middle }
            }
            if low > 0 { parents[index] = tails[low - 1] }
            if low == tails.count { tails.append(index) } else { tails[low] = index }
        }
        var result: [Int] = []
        var cursor = tails.last ?? -1
        while cursor >= 0 {
            result.append(cursor)
            cursor = parents[cursor]
        }
        return result.reversed()
    }
}

extension Replica {
    /// Observes every object of `type`, or those that match a query (with its SORT, DISTINCT and LIMIT).
    public func observe(_ type: String, where query: String? = nil, arguments: [Value] = [])
        -> ResultsObservation<DynamicObject>
    {
        ResultsObservation(replica: self, type: type, query: query, arguments: arguments) { $0 }
    }

    /// Observes the objects of a model type, or those that match a query.
    public func observe<M: Model>(_ type: M.Type, where query: String? = nil, arguments: [Value] = [])
        -> ResultsObservation<M>
    {
        ResultsObservation(replica: self, type: M.typeName, query: query, arguments: arguments) {
            try self.modelValue(M.self, $0)
        }
    }

    /// Observes one object: its state now, then after every commit that changes it (``ObjectChange/absent`` once
    /// deleted).
    public func observeObject(_ type: String, primaryKey: PrimaryKey) -> ObjectObservation<DynamicObject> {
        ObjectObservation(replica: self, type: type, primaryKey: primaryKey) { $0 }
    }

    /// Observes one object of a model type.
    public func observeObject<M: Model>(_ type: M.Type, primaryKey id: some PrimaryKeyConvertible) -> ObjectObservation<
        M
    > {
        ObjectObservation(replica: self, type: M.typeName, primaryKey: id.primaryKey) {
            try self.modelValue(M.self, $0)
        }
    }
}

final class WakeCounter: Sendable {
    let count = Atomic<Int>(0)
}

extension Snapshot {
    /// The local log sequence this snapshot ends at: which commits it holds.
    func logSequence() throws -> UInt64 {
        checkValid()
        return try replica.log.headUnverified(in: storage).localSequence
    }

    /// The results of a query after the objects `changed` names changed, computed from the previous results `old` by
    /// reading only those objects, with the change from `old`: what running the query again would give, at the cost
    /// of the objects that changed instead of the objects that match.
    ///
    /// `nil` where that would not be exactly what running the query again gives, or would cost more: a query with
    /// DISTINCT, LIMIT or more than one SORT (whether an object shows depends on the others), a SORT or predicate
    /// that follows links or reads lists, a type with links or mixed values (a link's target changing changes the
    /// linking object's values), changed objects of other types, or more changed objects than the results hold when an index answers
    /// the query.
    func incrementalResults(
        _ old: [DynamicObject], type typeName: String, query text: String?, arguments: [Value], changed: Set<RecordKey>
    ) throws -> (results: [DynamicObject], change: ResultsDiff)? {
        // Links show up in the types reachable from the type: its own (a link to itself) or its embedded types'.
        let reachable = schema.typesReachable(from: typeName)
        guard changed.allSatisfy({ $0.type == typeName }), let type = schema[type: typeName], !type.isEmbedded,
            type.linkingObjects.isEmpty,
            !reachable.contains(where: { name in
                // A mixed value may hold a link.
                schema[type: name]?.properties.contains {
                    if case .link = $0.kind { true } else { $0.kind == .scalar(.mixed) }
                } ?? false
            })
        else { return nil }
        var predicate: PositionalPredicate?
        var order: PositionalOrder?
        if let text {
            let parsed = try schema.query(text, arguments: arguments, type: type)
            guard let compiled = parsed.positionalPredicate(for: type) else { return nil }
            if !parsed.clauses.isEmpty {
                guard let sort = parsed.positionalOrder(for: type) else { return nil }
                order = sort
            }
            if try plan(parsed, type: type).plan != .fullScan, changed.count > old.count + 64 { return nil }
            predicate = compiled
        }
        let reader = try typeReader(typeName)
        let keys = changed.map(\.primaryKey).sorted { KeyEncoding.precedes($0, $1) }
        if let order {
            // Sorted: the changed objects leave their places, and those that match take the place their sort keys
            // (then their stored keys, as the query's stable sort leaves ties) give them.
            let properties = type.properties
            func precedes(_ a: DynamicObject, _ b: DynamicObject) -> Bool {
                let order = order.compare({ a[properties[$0].name] }, { b[properties[$0].name] })
                return order != 0 ? order < 0 : KeyEncoding.precedes(a.primaryKey, b.primaryKey)
            }
            let leaving = Set(keys)
            var results = old.filter { !leaving.contains($0.primaryKey) }
            for key in keys {
                guard let object = try matchingObject(reader, key, predicate) else { continue }
                var low = 0
                var high = results.count
                while low < high {
                    let middle = (low + high) / 2
                    if precedes(results[middle], object) { low = middle + 1 } else { high = middle }
                }
                results.insert(object, at: low)
            }
            return (results, ResultsDiff(old: old, new: results))
        }
        var results: [DynamicObject] = []
        results.reserveCapacity(old.count + keys.count)
        var deletions: [Int] = []
        var insertions: [Int] = []
        var modifications: [Int] = []
        var index = 0
        for key in keys {
            let object = try matchingObject(reader, key, predicate)
            // The old results before `key` stay, in place (both arrays are in stored key order).
            var low = index
            var high = old.count
            while low < high {
                let middle = (low + high) / 2
                if KeyEncoding.precedes(old[middle].primaryKey, key) { low = middle + 1 } else { high = middle }
            }
            results.append(contentsOf: old[index..<low])
            index = low
            if index < old.count, old[index].primaryKey == key {
                if let object {
                    if object != old[index] { modifications.append(results.count) }
                    results.append(object)
                } else {
                    deletions.append(index)
                }
                index += 1
            } else if let object {
                insertions.append(results.count)
                results.append(object)
            }
        }
        results.append(contentsOf: old[index...])
        return (results, ResultsDiff(deletions: deletions, insertions: insertions, modifications: modifications))
    }

    /// The object of the reader's type with `primaryKey`, if it exists and matches `predicate`.
    private func matchingObject(_ reader: TypeReader, _ primaryKey: PrimaryKey, _ predicate: PositionalPredicate?)
        throws
        -> DynamicObject?
    {
        guard var values = try storedValues(reader, primaryKey) else { return nil }
        if let predicate {
            if let keyPosition = reader.layout.keyPosition, keyPosition < values.count {
                values[keyPosition] = primaryKey.value
            }
            guard predicate.matches(values) else { return nil }
        }
        return try materializer.object(layout: reader.layout, primaryKey: primaryKey, positional: values)
    }
}
