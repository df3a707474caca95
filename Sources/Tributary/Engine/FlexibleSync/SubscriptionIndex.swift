import Synchronization
import TributaryMerge
import TributaryModel
import TributaryQuery

/// Which flexible-sync sessions a commit concerns, so that a commit costs work in proportion to them and not to every
/// session: a daemon with a thousand devices connected wakes the one whose subscriptions an object matched before or
/// after the commit, and no other.
///
/// Each member (a session) lists its subscriptions. They are indexed by type and, where a query requires one value of
/// a property at its top level (`conversationID == 'c1'`, `owner IN {'a', 'b'}`), by that property's value: a
/// changed object looks up the members wanting its values before and after the commit, and only those run their
/// queries on it. A query no value narrows runs on every changed object of its type; one that reads through links
/// concerns its member on every change to its type (the object's own states cannot decide it).
///
/// A commit that concerns no subscription of a member cannot change what its device holds: the device receives it
/// later, as a changeset whose instructions are all `omitted` (a skeleton, made once and shared by every member), in
/// the next batch its session sends for another reason: a commit that concerns it, a download mark, or an idle
/// catch-up. The index keeps, per member, which commits concerned it (``Judging``), so that its session judges those
/// and only those against the daemon's state.
///
/// Why skipping is safe: a device holds an object only if it matched the member's subscriptions when the session last
/// judged it, and the next change that makes it stop matching matched before it, so it concerns the member. A change
/// of subscriptions is judged in full for what was committed before it (``Judging/through``).
final class SubscriptionIndex: Sendable {
    /// A session's place in the index.
    package struct Member: Sendable, Hashable {
        let id: UInt64
    }

    /// Which changesets a member's export judges against the daemon's state; the others are sent as skeletons.
    struct Judging: Sendable {
        /// Changesets committed at or before this local sequence are judged: they were committed before the member's
        /// current subscriptions were indexed, or were sent before.
        var through: UInt64
        /// The commits after `through` that concern the member: the local sequences of the changesets each appended.
        var concerning: [ClosedRange<UInt64>]
        /// The last commit the index has seen: a later one is judged (the index has not looked at it yet).
        var seen: UInt64

        func judges(_ sequence: UInt64) -> Bool {
            sequence <= through || sequence > seen || concerning.contains { $0.contains(sequence) }
        }
    }

    private struct CompiledQuery {
        var query: Query
        /// The query reads a link, an embedded object or a mixed value: whether an object matches may change without a change to the
        /// object itself, so every change to the type concerns the member.
        var followsLinks: Bool
        /// One property's values the query requires, when it requires any: `nil` when no value lookup narrows it.
        var required: (property: String, values: [Value])?
    }

    private struct Entry {
        var wake: @Sendable () -> Void
        var subscriptions: [Subscription] = []
        var queries: [String: [CompiledQuery]] = [:]
        var judgedThrough: UInt64
        /// The commits that concerned the member and are not sent yet, in commit order: the local sequences of the
        /// changesets each appended.
        var concerning: [ClosedRange<UInt64>] = []
        var sentThrough: UInt64
    }

    private struct TypeEntry {
        /// Per property, per value: the members with a query on the type that requires that value.
        var byValue: [String: [Value: Set<UInt64>]] = [:]
        /// The members with a query on the type that no value narrows.
        var always: Set<UInt64> = []

        var isEmpty: Bool { byValue.isEmpty && always.isEmpty }
    }

    private struct State {
        var entries: [UInt64: Entry] = [:]
        var types: [String: TypeEntry] = [:]
        var seen: UInt64 = 0
        var nextID: UInt64 = 1
    }

    private let state = Mutex(State())
    private let skeletons = Mutex(SkeletonCache())

    /// Registers a session, whose subscriptions ``setSubscriptions(_:_:schema:head:)`` gives; `wake` is called
    /// (after the commit, outside any lock) whenever a commit concerns it. `head` is the replica's last local
    /// sequence: what is committed up to it is judged.
    func register(head: UInt64, wake: @escaping @Sendable () -> Void) -> Member {
        state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            let through = max(head, state.seen)
            state.entries[id] = Entry(wake: wake, judgedThrough: through, sentThrough: through)
            return Member(id: id)
        }
    }

    /// Removes a session's subscriptions from the index.
    func unregister(_ member: Member) {
        state.withLock { state in
            Self.unindex(member.id, in: &state)
            state.entries[member.id] = nil
        }
    }

    /// Indexes `subscriptions` for `member`, in place of those it had. What was committed up to now (`head`, or a
    /// later commit the index saw) is judged against the daemon's state, whatever it concerned.
    func setSubscriptions(_ member: Member, _ subscriptions: [Subscription], schema: Schema, head: UInt64) {
        state.withLock { state in
            guard var entry = state.entries[member.id] else { return }
            Self.unindex(member.id, in: &state)
            entry.subscriptions = subscriptions
            entry.queries = Self.compile(subscriptions, schema: schema)
            entry.judgedThrough = max(entry.judgedThrough, head, state.seen)
            entry.concerning.removeAll { $0.upperBound <= entry.judgedThrough }
            state.entries[member.id] = entry
            Self.index(member.id, entry.queries, in: &state)
        }
    }

    /// What `member`'s export judges.
    func judging(_ member: Member) -> Judging? {
        state.withLock { state in
            guard let entry = state.entries[member.id] else { return nil }
            return Judging(
                through: max(entry.judgedThrough, entry.sentThrough), concerning: entry.concerning,
                seen: state.seen)
        }
    }

    /// Notes that `member`'s session sent everything committed up to the local sequence `sequence`.
    func sent(_ member: Member, through sequence: UInt64) {
        state.withLock { state in
            guard var entry = state.entries[member.id] else { return }
            entry.sentThrough = max(entry.sentThrough, sequence)
            entry.concerning.removeAll { $0.upperBound <= sequence }
            state.entries[member.id] = entry
        }
    }

    /// Whether commits were made since `member`'s session last sent everything: an idle session catches up now and
    /// then, so that its device's progress does not fall far behind.
    func isBehind(_ member: Member) -> Bool {
        state.withLock { state in state.entries[member.id].map { $0.sentThrough < state.seen } ?? false }
    }

    /// The number of sessions registered.
    var memberCount: Int { state.withLock { $0.entries.count } }

    /// Looks at a commit: notes it for every member it concerns, and wakes them. Called after each commit, in commit
    /// order, with the records it changed before and after and the local sequences of the changesets it appended (one
    /// commit integrates a batch of them).
    func committed(
        _ changes: [RecordChange], schemaChanged: Bool, schema: Schema, sequences: ClosedRange<UInt64>
    ) {
        let wakes = state.withLock { state -> [@Sendable () -> Void] in
            state.seen = max(state.seen, sequences.upperBound)
            guard !state.entries.isEmpty else { return [] }
            var concerned = Set<UInt64>()
            if schemaChanged {
                // Queries are compiled against the schema: again, and every member judges the commit.
                state.types = [:]
                for id in state.entries.keys.sorted() {
                    state.entries[id]!.queries = Self.compile(state.entries[id]!.subscriptions, schema: schema)
                    Self.index(id, state.entries[id]!.queries, in: &state)
                }
                concerned = Set(state.entries.keys)
            } else {
                let noLinks = ReaderObjectSource(load: { _, _ in nil }, all: { _ in [] })
                for change in changes {
                    guard let typeEntry = state.types[change.key.type], let type = schema[type: change.key.type]
                    else { continue }
                    let states = [change.before, change.after].compactMap { record in
                        record.flatMap { $0.exists ? $0.values(of: type, in: schema) : nil }
                    }
                    var candidates = typeEntry.always
                    for (property, members) in typeEntry.byValue {
                        for values in states {
                            if let found = members[values[property] ?? .null] { candidates.formUnion(found) }
                        }
                    }
                    for id in candidates where !concerned.contains(id) {
                        guard let queries = state.entries[id]?.queries[type.name] else { continue }
                        let matches = queries.contains { compiled in
                            compiled.followsLinks
                                || states.contains { compiled.query.matches($0, source: noLinks) }
                        }
                        if matches { concerned.insert(id) }
                    }
                }
            }
            var wakes: [@Sendable () -> Void] = []
            for id in concerned {
                guard var entry = state.entries[id] else { continue }
                entry.concerning.append(sequences)
                wakes.append(entry.wake)
                state.entries[id] = entry
            }
            return wakes
        }
        for wake in wakes { wake() }
    }

    /// The changeset stored at `sequence` with the instructions on every object replaced by `omitted`: what a
    /// member the commit did not concern receives. Made once (`make`) and shared by every member.
    func skeleton(at sequence: UInt64, make: () throws -> [UInt8]) rethrows -> [UInt8] {
        if let made = skeletons.withLock({ $0.bytes[sequence] }) { return made }
        let made = try make()
        skeletons.withLock { $0.insert(made, at: sequence) }
        return made
    }

    // MARK: Compiling and indexing

    private static func compile(_ subscriptions: [Subscription], schema: Schema) -> [String: [CompiledQuery]] {
        var result: [String: [CompiledQuery]] = [:]
        for subscription in subscriptions {
            // A query that does not parse any more (the schema changed) selects nothing.
            guard let type = schema[type: subscription.type],
                let query = try? Query(subscription.query, type: type, schema: schema)
            else { continue }
            // A mixed value may hold a link too.
            let followsLinks = query.predicateProperties.contains { name in
                type.properties.first { $0.name == name }?.holdsLinks == true
            }
            var required: (String, [Value])?
            for constraint in query.indexableConstraints {
                if case .equal(let values) = constraint.kind {
                    required = (constraint.property, values)
                    break
                }
            }
            result[type.name, default: []].append(
                CompiledQuery(query: query, followsLinks: followsLinks, required: followsLinks ? nil : required))
        }
        return result
    }

    private static func index(_ id: UInt64, _ queries: [String: [CompiledQuery]], in state: inout State) {
        for (type, compiled) in queries {
            var entry = state.types[type] ?? TypeEntry()
            for query in compiled {
                if let (property, values) = query.required {
                    // No values: the query matches nothing.
                    for value in values { entry.byValue[property, default: [:]][value, default: []].insert(id) }
                } else {
                    entry.always.insert(id)
                }
            }
            state.types[type] = entry
        }
    }

    private static func unindex(_ id: UInt64, in state: inout State) {
        guard let queries = state.entries[id]?.queries else { return }
        for (type, compiled) in queries {
            guard var entry = state.types[type] else { continue }
            for query in compiled {
                if let (property, values) = query.required {
                    for value in values {
                        entry.byValue[property]?[value]?.remove(id)
                        if entry.byValue[property]?[value]?.isEmpty == true { entry.byValue[property]?[value] = nil }
                    }
                    if entry.byValue[property]?.isEmpty == true { entry.byValue[property] = nil }
                } else {
                    entry.always.remove(id)
                }
            }
            state.types[type] = entry.isEmpty ? nil : entry
        }
    }
}

/// Skeletons of recent changesets, by local sequence: the members an idle catch-up brings forward read the same ones.
private struct SkeletonCache {
    static let capacity = 8_192
    var bytes: [UInt64: [UInt8]] = [:]

    mutating func insert(_ skeleton: [UInt8], at sequence: UInt64) {
        bytes[sequence] = skeleton
        if bytes.count > Self.capacity {
            // The oldest half goes: catch-ups read forward, and the newest are the ones most members still lack.
            let oldestKept = bytes.keys.sorted()[bytes.count - Self.capacity / 2]
            bytes = bytes.filter { $0.key >= oldestKept }
        }
    }
}
