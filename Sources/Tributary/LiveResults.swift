public import TributaryModel
import Synchronization
import TributaryMerge

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
/// for try await change in replica.observe("ChatMessage", where: "conversationID == $0 SORT(timestamp)", arguments: ["c1"]) {
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
        Iterator(observation: self, registration: ObservationRegistration(replica: replica, types: relevantTypes))
    }

    var relevantTypes: Set<String> { replica.schema.typesReachable(from: type) }

    func fetch() throws -> [DynamicObject] {
        try replica.read { snapshot in
            if let query { return try snapshot.objects(type, where: query, arguments: arguments) }
            return try snapshot.objects(type)
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
                let results = try observation.fetch()
                let change = ResultsDiff(old: current, new: results)
                current = results
                previous = results
                if !change.isEmpty {
                    return .update(
                        try results.map(observation.transform), deletions: change.deletions, insertions: change.insertions,
                        modifications: change.modifications)
                }
            }
        }
    }
}

/// One object as it changes: yields it now, then after every commit that changes it; `nil` once it is deleted.
public struct ObjectObservation<Element: Sendable>: AsyncSequence, Sendable {
    let replica: Replica
    let type: String
    let primaryKey: PrimaryKey
    let transform: @Sendable (DynamicObject) throws -> Element

    public func makeAsyncIterator() -> Iterator {
        Iterator(
            observation: self,
            registration: ObservationRegistration(replica: replica, types: replica.schema.typesReachable(from: type)))
    }

    public struct Iterator: AsyncIteratorProtocol {
        let observation: ObjectObservation
        let registration: ObservationRegistration
        var started = false
        var previous: DynamicObject?

        public mutating func next() async throws -> Element?? {
            let fetch = { [observation] in try observation.replica.object(observation.type, primaryKey: observation.primaryKey) }
            if !started {
                started = true
                previous = try fetch()
                return .some(try previous.map(observation.transform))
            }
            while true {
                guard await registration.nextSignal(), !Task.isCancelled else { return nil }
                let current = try fetch()
                if current != previous {
                    previous = current
                    return .some(try current.map(observation.transform))
                }
            }
        }
    }
}

/// An observer's registration with its replica: a one-slot signal that commits to relevant types set. Releasing the
/// registration unregisters it.
public final class ObservationRegistration: Sendable {
    private let replica: Replica
    private let identifier: UInt64
    private let signals: AsyncStream<Void>
    /// How many commits woke this observer (for tests of "a commit that cannot change the result does not wake").
    let wakes = WakeCounter()

    init(replica: Replica, types: Set<String>) {
        self.replica = replica
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        signals = stream
        let wakes = self.wakes
        identifier = replica.observers.add(
            ObserverRegistry.Entry(
                onCommit: { keys, schemaChanged in
                    if schemaChanged || keys.contains(where: { types.contains($0.type) }) {
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
}

/// The change from one result array to the next, by primary key.
struct ResultsDiff {
    var deletions: [Int] = []
    var insertions: [Int] = []
    var modifications: [Int] = []

    var isEmpty: Bool { deletions.isEmpty && insertions.isEmpty && modifications.isEmpty }

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
    public func observe<M: Model>(_ type: M.Type, where query: String? = nil, arguments: [Value] = []) -> ResultsObservation<M> {
        ResultsObservation(replica: self, type: M.typeName, query: query, arguments: arguments) {
            try ModelCoding.model(M.self, from: $0)
        }
    }

    /// Observes one object: its value now, then after every commit that changes it (`nil` once deleted).
    public func observeObject(_ type: String, primaryKey: PrimaryKey) -> ObjectObservation<DynamicObject> {
        ObjectObservation(replica: self, type: type, primaryKey: primaryKey) { $0 }
    }

    /// Observes one object of a model type.
    public func observeObject<M: Model>(_ type: M.Type, id: some PrimaryKeyConvertible) -> ObjectObservation<M> {
        ObjectObservation(replica: self, type: M.typeName, primaryKey: id.primaryKey) { try ModelCoding.model(M.self, from: $0) }
    }
}

final class WakeCounter: Sendable {
    let count = Atomic<Int>(0)
}
