import Synchronization
import TributaryModel
import TributaryStorage

/// Where a subscription set stands with the daemon.
public enum SubscriptionState: Sendable, Hashable, CustomStringConvertible {
    /// Committed on this device; the daemon has not sent everything it covers yet (or the device is offline).
    case pending
    /// The daemon sent everything the set covers; the device holds exactly its objects and keeps them up to date.
    case complete
    /// The daemon refused the set, with its reason (a field that is not queryable, a query it cannot parse). The
    /// device keeps holding what the last complete set covers.
    case error(String)
    /// A newer set was committed before this one completed; the newer one is the one synced.
    case superseded

    public var description: String {
        switch self {
        case .pending: "pending"
        case .complete: "complete"
        case .error(let message): "error: \(message)"
        case .superseded: "superseded"
        }
    }
}

/// One version of a replica's flexible-sync subscriptions: which objects the device holds.
///
/// Sets are values: ``Subscriptions/commit(_:)`` and ``Subscriptions/update(_:)`` commit a new version, and the old one is superseded.
public struct SubscriptionSet: Sendable, Hashable, CustomStringConvertible {
    /// 1, 2, 3, ... as sets are committed; 0 for the empty set of a replica that never subscribed.
    public internal(set) var version: UInt64
    /// The subscriptions, in the order they were added.
    public internal(set) var subscriptions: [Subscription]
    /// Where this version stands with the daemon.
    public internal(set) var state: SubscriptionState
    /// How many changesets this replica had written when the set was committed: those are judged by the daemon under
    /// the set before, and uploaded before this set is sent.
    var snapshot: UInt64

    init(
        version: UInt64 = 0, subscriptions: [Subscription] = [], state: SubscriptionState = .complete,
        snapshot: UInt64 = 0
    ) {
        self.version = version
        self.subscriptions = subscriptions
        self.state = state
        self.snapshot = snapshot
    }

    /// The subscription named `name`, if any.
    public subscript(named name: String) -> Subscription? { subscriptions.first { $0.name == name } }

    /// The number of subscriptions.
    public var count: Int { subscriptions.count }

    /// Whether the set holds no subscription.
    public var isEmpty: Bool { subscriptions.isEmpty }

    /// Whether some subscription selects objects of `type`.
    public func covers(type: String) -> Bool { subscriptions.contains { $0.type == type } }

    public var description: String {
        "subscription set \(version) (\(state)): "
            + (subscriptions.isEmpty ? "empty" : subscriptions.map(\.description).joined(separator: "; "))
    }
}

/// The subscriptions being edited in ``Subscriptions/update(_:)`` or ``Subscriptions/commit(_:)``.
public struct MutableSubscriptionSet: Sendable {
    /// The subscriptions as edited so far.
    public private(set) var subscriptions: [Subscription]

    init(_ subscriptions: [Subscription]) { self.subscriptions = subscriptions }

    /// Subscribes to the objects of `type` that match `query` (Realm Query Language, without SORT, DISTINCT or
    /// LIMIT; `TRUEPREDICATE` for all of them). A named subscription replaces the one of the same name; an anonymous
    /// one that is already in the set is not added twice.
    public mutating func append(_ type: String, where query: String = "TRUEPREDICATE", name: String? = nil) {
        append(Subscription(name: name, type: type, query: query))
    }

    /// Subscribes to the objects of a model type that match `query`.
    public mutating func append<M: Model>(_ type: M.Type, where query: String = "TRUEPREDICATE", name: String? = nil) {
        append(M.typeName, where: query, name: name)
    }

    /// Adds `subscription`: a named one replaces the one of the same name; an anonymous one already in the set is not
    /// added twice.
    public mutating func append(_ subscription: Subscription) {
        if let name = subscription.name, let index = subscriptions.firstIndex(where: { $0.name == name }) {
            subscriptions[index] = subscription
        } else if subscription.name != nil || !subscriptions.contains(subscription) {
            subscriptions.append(subscription)
        }
    }

    /// Removes the subscription named `name`; returns whether there was one.
    @discardableResult
    public mutating func remove(named name: String) -> Bool {
        let before = subscriptions.count
        subscriptions.removeAll { $0.name == name }
        return subscriptions.count < before
    }

    /// Removes every subscription equal to `subscription`; returns whether there was one.
    @discardableResult
    public mutating func remove(_ subscription: Subscription) -> Bool {
        let before = subscriptions.count
        subscriptions.removeAll { $0 == subscription }
        return subscriptions.count < before
    }

    /// Removes every subscription to `type`.
    public mutating func removeAll(ofType type: String) { subscriptions.removeAll { $0.type == type } }

    /// Removes every subscription: once the daemon completes the set, the device holds no synced object.
    public mutating func removeAll() { subscriptions.removeAll() }
}

/// A replica's flexible-sync subscriptions (``Replica/subscriptions``): which objects the device holds.
///
/// ```swift
/// try await replica.subscriptions.update { subs in
///     subs.append("ChatMessage", where: "conversationID == 'c1'", name: "messages-c1")
///     subs.append("User", where: "_id == 'ada'", name: "me")
/// }
/// ```
///
/// Sets are stored in the replica: they survive restarts, can be changed offline, and are sent to the daemon each
/// time a sync session opens. A replica becomes a flexible-sync replica when its first set is committed: from then
/// on the daemon sends it only what its subscriptions cover, and writes to a type no subscription covers fail with
/// ``TributaryError/Code-swift.struct/noSubscription``.
public struct Subscriptions: Sendable {
    let replica: Replica

    /// The newest set committed.
    public var latest: SubscriptionSet {
        get throws { try replica.subscriptionSets().latest }
    }

    /// The last set the daemon completed: what the device holds now.
    public var active: SubscriptionSet {
        get throws { try replica.subscriptionSets().held }
    }

    /// Commits a new version of the set, edited by `body`, and returns it (``SubscriptionState/pending``) without
    /// waiting for the daemon: the sync session sends it now, or when it next connects. Works offline.
    ///
    /// - Throws: what `body` throws (nothing is committed then); ``TributaryError`` with `.unknownType` or
    ///   `.invalidQuery` for a subscription whose type or query the schema cannot serve, or for storage failures.
    @discardableResult
    public func commit(_ body: (inout MutableSubscriptionSet) throws -> Void) throws -> SubscriptionSet {
        try replica.commitSubscriptions(body)
    }

    /// Commits a new version of the set, as ``commit(_:)`` does, then waits until the daemon has sent everything it
    /// covers.
    ///
    /// - Returns: the set once ``SubscriptionState/complete`` (or ``SubscriptionState/superseded``, when a newer set
    ///   was committed meanwhile).
    /// - Throws: ``TributaryError`` with `.invalidQuery` carrying the daemon's message when it refused the set, or
    ///   `.closed` when the replica closed first.
    @discardableResult
    public func update(_ body: (inout MutableSubscriptionSet) throws -> Void) async throws -> SubscriptionSet {
        let set = try replica.commitSubscriptions(body)
        return try await waitForSync(version: set.version)
    }

    /// Waits until the set of `version` (the latest by default) is complete, refused or superseded.
    ///
    /// - Throws: as ``update(_:)``.
    @discardableResult
    public func waitForSync(version: UInt64? = nil) async throws -> SubscriptionSet {
        let changes = replica.subscriptionWatchers.stream()
        let wanted = try version ?? latest.version
        func settled() throws -> SubscriptionSet? {
            let sets = try replica.subscriptionSets()
            if sets.latest.version > wanted {
                var superseded = sets.latest
                superseded.version = wanted
                superseded.state = .superseded
                return sets.held.version >= wanted ? sets.held : superseded
            }
            guard sets.latest.version == wanted else { return nil }
            switch sets.latest.state {
            case .pending: return nil
            case .error(let message):
                throw TributaryError(
                    .invalidQuery, "the daemon refused subscription set \(wanted): \(message)")
            case .complete, .superseded: return sets.latest
            }
        }
        if let done = try settled() { return done }
        for await _ in changes {
            if let done = try settled() { return done }
        }
        throw TributaryError(.closed, "replica \(replica.directory) closed before subscription set \(wanted) synced")
    }

    /// Every change of the subscription sets (a commit, the daemon completing or refusing one), as the newest set
    /// after it. Ends when the replica closes.
    public func changes() -> AsyncStream<SubscriptionSet> {
        let replica = replica
        let (stream, continuation) = AsyncStream<SubscriptionSet>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let task = Task {
            for await _ in replica.subscriptionWatchers.stream() {
                if let latest = try? replica.subscriptionSets().latest { continuation.yield(latest) }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
}

/// Wakes whoever waits on a replica's subscription sets.
final class SubscriptionWatchers: Sendable {
    private let continuations = Mutex<(next: Int, all: [Int: AsyncStream<Void>.Continuation], closed: Bool)>(
        (0, [:], false))

    /// A stream that yields after each change (coalesced), and ends when the replica closes.
    func stream() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let registered = continuations.withLock { state -> Int? in
            guard !state.closed else { return nil }
            state.next += 1
            state.all[state.next] = continuation
            return state.next
        }
        guard let registered else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.continuations.withLock { $0.all.removeValue(forKey: registered) }
        }
        return stream
    }

    func notify() {
        for continuation in continuations.withLock({ Array($0.all.values) }) { continuation.yield() }
    }

    func finish() {
        let all = continuations.withLock { state in
            state.closed = true
            defer { state.all.removeAll() }
            return Array(state.all.values)
        }
        for continuation in all { continuation.finish() }
    }
}
