public import TributaryModel

// The bookkeeping of removals (rule 8): which removals of a property or type a changeset saw, which removals are
// copies of one another, and the renames onto a name that a removal saw. SchemaMerger.swift applies them.

/// A removal that a merged schema remembers, of a property or of a type: what the test for copies of one removal
/// reads.
protocol RememberedRemoval: Equatable {
    /// The origin dot of the changeset that removed it.
    var dot: Dot { get }
    /// For a rename, the new name; `nil` for a removal.
    var renamedTo: String? { get }
    /// The earlier removals of the same name that it saw.
    var removalsSeen: [Dot] { get }
}

extension PropertyRemoval: RememberedRemoval {}

extension TypeRemoval: RememberedRemoval {
    var renamedTo: String? { nil }
}

extension RememberedRemoval {
    /// Whether this removal saw `other`, a removal of the same name. One changeset may remove a name more than once
    /// (removed, added back, removed again): each of its removals lists the changeset's dot among those it saw, but saw
    /// only the earlier ones of the changeset, which saw fewer.
    func saw(_ other: Self) -> Bool {
        guard other.dot == dot else { return removalsSeen.contains(other.dot) }
        return other.removalsSeen.count < removalsSeen.count
    }
}

/// The removals of one name (of a property, or of a type), grouped into copies of one removal, as when one migration
/// runs on several replicas.
///
/// Two removals are copies when both are renames to the same new name, or both plain removals, made concurrently, that
/// saw the same earlier removals of the name up to copies: one that saw a copy of an earlier removal counts as having
/// seen that removal (each device ran the same earlier migration, and then the same later one). A removal of the name
/// that one of them saw and the other did not (nor a copy of it) means that the name was used again between them, so
/// they removed different properties (or types) of that name. Two removals of one changeset are never copies.
///
/// Whether two removals are copies depends only on the removals they saw, which every replica merged before them: so
/// every replica that holds both answers alike, whatever else it holds.
struct RemovalCopies<Removal: RememberedRemoval> {
    /// The removals, without repeats (by value: a changeset may remove a name twice, once before adding it again).
    private var removals: [Removal] = []
    /// Each removal's group: two removals are copies when their groups are equal.
    private var groups: [Int] = []

    init(_ list: [Removal]) {
        for removal in list where !removals.contains(removal) { removals.append(removal) }
        // A removal saw every removal that one it saw had seen, and itself too: it saw more than each of those. So in
        // this order, every removal comes after the ones it saw.
        let order = removals.indices.sorted {
            (removals[$0].removalsSeen.count, $0) < (removals[$1].removalsSeen.count, $1)
        }
        groups = Array(repeating: -1, count: removals.count)
        var seenGroups = Array(repeating: Set<Int>(), count: removals.count)
        var groupCount = 0
        for index in order {
            let removal = removals[index]
            var seen = Set<Int>()
            for other in removals.indices where groups[other] >= 0 && removal.saw(removals[other]) {
                seen.insert(groups[other])
            }
            seenGroups[index] = seen
            let copied = order.first { other in
                groups[other] >= 0 && removals[other].dot != removal.dot
                    && removals[other].renamedTo == removal.renamedTo
                    && !seen.contains(groups[other]) && seenGroups[other] == seen
            }
            if let copied {
                groups[index] = groups[copied]
            } else {
                groups[index] = groupCount
                groupCount += 1
            }
        }
    }

    /// Whether `removal` and `other`, two of the removals given, are copies of one removal.
    func isCopy(_ removal: Removal, of other: Removal) -> Bool {
        guard removal.dot != other.dot, let first = removals.firstIndex(of: removal),
            let second = removals.firstIndex(of: other)
        else { return false }
        return groups[first] == groups[second]
    }
}

extension PropertyRemoval {
    /// Of `removals` (all of one name's), the first of those that a view did not see (`isSeen` says which it saw): the
    /// unseen ones, less copies of seen ones (the same rename made elsewhere did nothing more), that saw none of the
    /// other unseen ones. Those that saw one came after a later addition of the name, and concern that property.
    static func firstUnseen(
        among removals: [PropertyRemoval], seen isSeen: (PropertyRemoval) throws -> Bool
    ) rethrows -> [PropertyRemoval] {
        var seen: [PropertyRemoval] = []
        var unseen: [PropertyRemoval] = []
        for removal in removals {
            if try isSeen(removal) { seen.append(removal) } else { unseen.append(removal) }
        }
        if !unseen.isEmpty && !seen.isEmpty {
            let copies = RemovalCopies(removals)
            unseen.removeAll { removal in seen.contains { copies.isCopy(removal, of: $0) } }
        }
        return unseen.filter { removal in !unseen.contains { removal.saw($0) } }
    }

}

extension ChangesetInfo {
    /// Whether the changeset saw every removal of the type `type`: only then do its additions of the type and its
    /// writes to objects of the type count (rule 8). A removal it did not see that is a copy of one it saw (the same
    /// migration run on another replica) counts as seen.
    func hasSeenRemovals(ofType type: String, in schema: Schema, causal: CausalResolver) throws -> Bool {
        let removals = schema.removals(ofType: type)
        guard try removals.contains(where: { try !covers($0.dot, causal: causal) }) else { return true }
        var seen: [TypeRemoval] = []
        var unseen: [TypeRemoval] = []
        for removal in removals {
            if try covers(removal.dot, causal: causal) { seen.append(removal) } else { unseen.append(removal) }
        }
        // Most often, each one it did not see is a plain copy of one it saw: concurrent, having seen the same earlier
        // removals (the same migration run on several devices). Only chains of copies need the groups.
        let plainCopies = unseen.allSatisfy { removal in
            seen.contains {
                $0.dot != removal.dot && $0.removalsSeen == removal.removalsSeen && !removal.saw($0) && !$0.saw(removal)
            }
        }
        if plainCopies { return true }
        let copies = RemovalCopies(removals)
        return unseen.allSatisfy { removal in seen.contains { copies.isCopy(removal, of: $0) } }
    }

    /// The property that a write, addition or redefinition of this changeset for `property` of `type` goes to (rule
    /// 8): the property itself when the changeset saw every removal and rename of it; the new name when the first
    /// ones it did not see are renames to one name (a write made before a rename is carried along by it, so one that
    /// arrives after it follows it); `nil` when the first one it did not see is a removal, so the write is dropped as
    /// that removal would have dropped it.
    ///
    /// "First" because a name can be used again: of the removals the changeset did not see, those that saw another
    /// of them came after a later addition of the name and concern that property, not the one written. A rename made
    /// concurrently with one that was seen, to the same name, is the same rename made elsewhere (each replica runs the
    /// migration): it did nothing where that one had been merged, so it is not followed either.
    ///
    /// Renames made concurrently can form a cycle (`c` renamed to `d` on one replica while `d` is renamed to `c` on
    /// another): following them comes back to a rename already followed. The property then lives at the new name of
    /// the rename in the cycle with the least dot, on every replica, whichever rename merged last.
    ///
    /// - Throws: what the resolver's record source throws when it cannot read the adoptions.
    public func writeTarget(of property: String, in type: String, schema: Schema, causal: CausalResolver) throws
        -> String?
    {
        guard !schema.propertyRemovals.isEmpty else { return property }
        var name = property
        // Whose view decides which removals of `name` count as seen: the writer's, until the write follows a rename;
        // from then on the rename's (the removals of its new name that it saw), since the rename carries the value
        // on, as it does when it merges after the write.
        var viewOfRename: [Dot]?
        // The renames followed so far, each step's by the name it renamed and the least dot of its copies (renames in
        // one changeset share a dot), with the name it led to.
        var path: [(from: String, dot: Dot, to: String)] = []
        // Bounded: each step follows a rename not followed before (a repeat is a cycle, resolved below), so there are
        // at most as many steps as removals.
        let steps = schema.propertyRemovals.values.reduce(0) { $0 + $1.count }
        for _ in 0...steps {
            let removals = schema.removals(of: name, in: type)
            guard !removals.isEmpty else { return name }
            let first = try PropertyRemoval.firstUnseen(among: removals) { removal in
                try viewOfRename.map { $0.contains(removal.dot) } ?? covers(removal.dot, causal: causal)
            }
            guard let followed = first.first else { return name }
            guard let next = followed.renamedTo, first.allSatisfy({ $0.renamedTo == next }) else { return nil }
            let dot = first.map(\.dot).min() ?? followed.dot
            if let start = path.firstIndex(where: { $0.from == name && $0.dot == dot }) {
                return path[start...].min { ($0.dot, $0.from) < ($1.dot, $1.from) }?.to
            }
            path.append((name, dot, next))
            name = next
            // Copies of one rename (made on several replicas) carry the value alike: what any of them saw.
            viewOfRename = first.flatMap(\.removalsOfNewNameSeen)
        }
        return nil
    }

    /// `value` as it lands (rule 8): in its embedded objects, at any depth, values written to properties removed since
    /// the writer's view are dropped and values written to renamed ones move to the new name, as ``writeTarget(of:in:schema:causal:)``
    /// says. What a replica checks against its schema.
    func landed(_ value: Value, schema: Schema, causal: CausalResolver) throws -> Value {
        guard !schema.propertyRemovals.isEmpty else { return value }
        switch value {
        case .embedded(let object):
            let fields = try landed(object.fields, of: object.type, schema: schema, causal: causal) {
                try landed($0, schema: schema, causal: causal)
            } join: {
                SchemaMerger.join($0, $1)
            }
            return .embedded(EmbeddedObject(type: object.type, fields: fields))
        case .list(let elements):
            return .list(try elements.map { try landed($0, schema: schema, causal: causal) })
        case .dictionary(let entries):
            return .dictionary(try entries.mapValues { try landed($0, schema: schema, causal: causal) })
        default:
            return value
        }
    }

    /// A converted field state as it lands: the same as ``landed(_:schema:causal:)-(Value,_,_)`` for the value it
    /// was converted from. The ids were drawn from the value as written, so they are the same on every replica.
    func landed(_ state: FieldState, schema: Schema, causal: CausalResolver) throws -> FieldState {
        guard !schema.propertyRemovals.isEmpty else { return state }
        var state = state
        try state.updateEmbedded { $0 = try landed($0, schema: schema, causal: causal) }
        return state
    }

    func landed(_ value: StoredValue, schema: Schema, causal: CausalResolver) throws -> StoredValue {
        guard !schema.propertyRemovals.isEmpty, case .embedded(var child) = value else { return value }
        // Rare (a schema that remembers removals): through a dictionary, as embedded values land.
        let fields = Dictionary(uniqueKeysWithValues: child.fields.lazy.map { ($0.key, $0.value) })
        child.fields = FieldTable(
            try landed(fields, of: child.type, schema: schema, causal: causal) {
                try landed($0, schema: schema, causal: causal)
            } join: {
                SchemaMerger.join($0, $1)
            })
        return .embedded(child)
    }

    /// An embedded object's fields, each under the name it lands on (or left out), and its value landed by `land`;
    /// two that land on one name joined by `join` (see ``SchemaMerger/Landing``).
    private func landed<Field>(
        _ fields: [String: Field], of type: String, schema: Schema, causal: CausalResolver,
        _ land: (Field) throws -> Field,
        join: (_ moved: Field, _ added: Field) -> Field
    ) throws -> [String: Field] {
        var result: [String: SchemaMerger.Landing<Field>] = [:]
        for name in fields.keys.sorted() {
            guard let field = fields[name],
                let target = try writeTarget(of: name, in: type, schema: schema, causal: causal)
            else { continue }
            result[target] = SchemaMerger.Landing(
                try land(field), direct: name == target, onto: result[target], join: join)
        }
        return result.mapValues(\.field)
    }
}
