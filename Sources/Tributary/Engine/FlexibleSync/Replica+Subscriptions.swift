import Foundation
import Synchronization
import TributaryLog
package import TributaryMerge
import TributaryModel
import TributaryQuery
import TributaryStorage
import TributaryViews

// The device's side of flexible sync: its subscription sets, stored in the replica's identity database, and the
// object states the daemon sends (objects entering the device's view with their full merge state, or leaving it).

extension Replica {
    /// The replica's flexible-sync subscriptions.
    public var subscriptions: Subscriptions { Subscriptions(replica: self) }

    static let latestSubscriptionsKey = Array("subscriptions.latest".utf8)
    static let heldSubscriptionsKey = Array("subscriptions.held".utf8)
    /// Sets committed and not yet complete, by version (big-endian after this prefix), sent to the daemon in order.
    static let pendingSubscriptionsPrefix = Array("subscriptions.pending/".utf8)

    static func pendingSubscriptionsKey(_ version: UInt64) -> [UInt8] {
        pendingSubscriptionsPrefix + withUnsafeBytes(of: version.bigEndian) { Array($0) }
    }

    /// The newest set committed, and the last one completed (what the device holds).
    func subscriptionSets() throws -> (latest: SubscriptionSet, held: SubscriptionSet) {
        do {
            return try environment.read { txn in try subscriptionSets(in: txn) }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    func subscriptionSets(in txn: TributaryStorageReadTransaction) throws -> (
        latest: SubscriptionSet, held: SubscriptionSet
    ) {
        let held = try storedSubscriptionSet(Self.heldSubscriptionsKey, in: txn) ?? SubscriptionSet()
        let latest = try storedSubscriptionSet(Self.latestSubscriptionsKey, in: txn) ?? held
        return (latest, held)
    }

    /// Whether the replica is a flexible-sync replica: it committed a subscription set.
    func isFlexible(in txn: TributaryStorageReadTransaction) throws -> Bool {
        try txn.get(identity, key: Self.latestSubscriptionsKey) != nil
    }

    private func storedSubscriptionSet(_ key: [UInt8], in txn: TributaryStorageReadTransaction) throws
        -> SubscriptionSet?
    {
        guard let bytes = try txn.get(identity, key: key) else { return nil }
        var reader = BinaryReader(bytes, subject: "stored subscription set")
        do {
            let version = try reader.varint()
            let stateByte = try reader.byte()
            let message = try reader.string("error message")
            let subscriptions = try reader.subscriptions(maximum: .max, maximumText: .max)
            let snapshot = try reader.varint()
            let state: SubscriptionState =
                switch stateByte {
                case 1: .pending
                case 2: .complete
                case 3: .error(message)
                default: throw reader.error(.invalidValue, "unknown subscription state \(stateByte)")
                }
            return SubscriptionSet(version: version, subscriptions: subscriptions, state: state, snapshot: snapshot)
        } catch {
            throw TributaryError(
                .corrupted, "replica \(directory): its stored subscription set is damaged (\(error))")
        }
    }

    private func storeSubscriptionSet(_ set: SubscriptionSet, _ key: [UInt8], in txn: WriteTransaction) throws {
        var writer = BinaryWriter()
        writer.varint(set.version)
        switch set.state {
        case .pending, .superseded: writer.byte(1)
        case .complete: writer.byte(2)
        case .error: writer.byte(3)
        }
        if case .error(let message) = set.state { writer.string(message) } else { writer.string("") }
        writer.subscriptions(set.subscriptions)
        writer.varint(set.snapshot)
        try txn.put(identity, key: key, value: writer.bytes)
    }

    /// Commits a new subscription set edited by `body`.
    func commitSubscriptions(_ body: (inout MutableSubscriptionSet) throws -> Void) throws -> SubscriptionSet {
        guard !configuration.readOnly else {
            throw TributaryError(.readOnly, "replica \(directory) was opened read-only")
        }
        let current = try subscriptionSets().latest
        var editing = MutableSubscriptionSet(current.subscriptions)
        try body(&editing)
        let schema = self.schema
        for subscription in editing.subscriptions {
            try Self.checkSubscription(subscription, schema: schema, queryable: nil)
        }
        let committed = try writeLock.withLock {
            do {
                return try environment.write { txn -> SubscriptionSet in
                    let latest = try subscriptionSets(in: txn).latest
                    let set = SubscriptionSet(
                        version: latest.version + 1, subscriptions: editing.subscriptions, state: .pending,
                        snapshot: try versionVector(in: txn)[replicaID])
                    try storeSubscriptionSet(set, Self.latestSubscriptionsKey, in: txn)
                    try storeSubscriptionSet(set, Self.pendingSubscriptionsKey(set.version), in: txn)
                    return set
                }
            } catch {
                throw TributaryError.wrap(error)
            }
        }
        subscriptionWatchers.notify()
        return committed
    }

    /// Checks a subscription against `schema`: its type exists, its query parses, uses no SORT, DISTINCT, LIMIT or
    /// aggregate, and reads only `queryable` properties (by type; every property when `nil`; the primary key always).
    ///
    /// - Throws: ``TributaryError`` with `.unknownType` or `.invalidQuery`, naming the subscription and the field.
    package static func checkSubscription(
        _ subscription: Subscription, schema: Schema, queryable: [String: Set<String>]?
    ) throws {
        guard let type = schema[type: subscription.type], !type.isEmbedded else {
            throw TributaryError(
                .unknownType,
                "subscription \(subscription): \(subscription.type) is not a top-level object type of the schema")
        }
        let query = try schema.query(subscription.query, arguments: [], type: type)
        if !query.clauses.isEmpty {
            throw TributaryError(
                .invalidQuery,
                "subscription \(subscription): a flexible sync query cannot use SORT, DISTINCT or LIMIT; sort and "
                    + "limit the results on the device instead")
        }
        if !query.backlinkTypes.isEmpty {
            throw TributaryError(
                .invalidQuery,
                "subscription \(subscription): a flexible sync query cannot use backlinks (@links, or a "
                    + "LinkingObjects property); subscribe to the linking type instead")
        }
        for aggregate in ["@count", "@sum", "@avg", "@min", "@max", "@size"]
        where subscription.query.range(of: aggregate, options: .caseInsensitive) != nil {
            throw TributaryError(
                .invalidQuery,
                "subscription \(subscription): a flexible sync query cannot use \(aggregate); query the held objects "
                    + "on the device instead")
        }
        if let queryable {
            let allowed = (queryable[type.name] ?? []).union(type.primaryKey.map { [$0] } ?? [])
            for field in query.predicateProperties.sorted() where !allowed.contains(field) {
                throw TributaryError(
                    .invalidQuery,
                    "Invalid query: \"\(type.name)\": key \"\(field)\" is not a queryable field (subscription "
                        + "\(subscription)); the daemon's queryableFields names the fields subscriptions may use")
            }
        }
    }

    /// The flexible-sync query a sync session sends next: the oldest set committed after version `sent` that is not
    /// complete (sets are sent in order, so that each write is judged under the set it was made under), with the set
    /// the device holds; `nil` for a replica that never subscribed (it syncs everything).
    ///
    /// `snapshot` is how many changesets this replica had written when that set was committed: a session uploads
    /// those first (the daemon judges them under the set before), then sends the set. `version` is 0 when no set is
    /// left to send.
    package func flexibleSyncQuery(after sent: UInt64 = 0) throws -> (
        version: UInt64, subscriptions: [Subscription], heldVersion: UInt64, held: [Subscription], snapshot: UInt64
    )? {
        do {
            return try environment.read { txn in
                guard try isFlexible(in: txn) else { return nil }
                let sets = try subscriptionSets(in: txn)
                var next: SubscriptionSet?
                let start = Self.pendingSubscriptionsKey(max(sent, sets.held.version) + 1)
                try txn.scan(
                    identity, from: start, to: ViewStore.prefixEnd(Self.pendingSubscriptionsPrefix)
                ) { key, _ in
                    next = try storedSubscriptionSet(Array(key), in: txn)
                    return false
                }
                let wanted = next ?? SubscriptionSet(version: 0)
                return (
                    wanted.version, wanted.subscriptions, sets.held.version, sets.held.subscriptions, wanted.snapshot
                )
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The daemon refused subscription set `version`: it goes to the error state with `message` (if it is still
    /// the newest).
    package func refuseSubscriptionSet(version: UInt64, message: String) throws {
        try writeLock.withLock {
            do {
                try environment.write { txn in
                    var latest = try subscriptionSets(in: txn).latest
                    guard latest.version == version else { return }
                    latest.state = .error(message)
                    try storeSubscriptionSet(latest, Self.latestSubscriptionsKey, in: txn)
                }
            } catch {
                throw TributaryError.wrap(error)
            }
        }
        subscriptionWatchers.notify()
    }

    /// Refuses a local write to a type that no subscription covers, on a flexible-sync replica.
    /// `types` are those the write's instructions write, in the order they first do.
    func checkWritesCovered(_ types: [String], in txn: TributaryStorageReadTransaction) throws {
        guard try isFlexible(in: txn) else { return }
        let latest = try subscriptionSets(in: txn).latest
        for type in types where !latest.covers(type: type) {
            throw TributaryError(
                .noSubscription,
                "Cannot write to class \(type) when no flexible sync subscription has been created for it: "
                    + "nothing was written. Subscribe first: replica.subscriptions.update { "
                    + "$0.append(\"\(type)\", where: \"...\") }")
        }
    }
}

/// One object of a daemon's ``Replica/applyObjectStates(_:yours:completing:)``: its stored record, or `nil` when it
/// leaves the device.
package struct ReceivedObjectState: Sendable, Hashable {
    package var type: String
    package var primaryKey: PrimaryKey
    package var record: [UInt8]?
    /// This replica's own changesets whose writes to the object the daemon refused.
    package var refused: [Dot]

    package init(type: String, primaryKey: PrimaryKey, record: [UInt8]?, refused: [Dot] = []) {
        self.type = type
        self.primaryKey = primaryKey
        self.record = record
        self.refused = refused
    }
}

extension Replica {
    static let objectStatesPrefix = Array("objectStates/".utf8)
    static let objectStatesCountKey = Array("objectStatesCount".utf8)
    /// Own changesets whose writes to some objects a daemon refused: the dot's origin key after this prefix, the
    /// objects as the value.
    static let refusedWritesPrefix = Array("refusedWrites/".utf8)

    /// Applies messages of object states a daemon sent (a bootstrap, and what arrived while it was received), in order,
    /// in one atomic commit: each record replaces the device's copy of its object (then this replica's own changesets
    /// after the message's `yours`, which the daemon's record does not hold yet, are applied on top of it again), each
    /// `nil` removes the object from this device only. When `completing` is set,
    /// the subscription set of that version becomes complete in the same commit (a bootstrap).
    ///
    /// The change is stored beside the log, at the log's current position, so that replay and ``verify(progress:)``
    /// rebuild the same views.
    ///
    /// - Throws: ``TributaryError`` with `.invalidChangeset` when a record does not decode (nothing is applied), or
    ///   for storage failures.
    package func applyObjectStates(
        _ groups: [(objects: [ReceivedObjectState], yours: UInt64)], completing: UInt64?
    ) throws {
        guard !configuration.readOnly else {
            throw TributaryError(.readOnly, "replica \(directory) was opened read-only")
        }
        try writeLock.withLock {
            var changed: [RecordKey] = []
            var head: UInt64 = 0
            do {
                try environment.write { txn in
                    let fresh = try freshState(state.withLock { $0 }, in: txn)
                    head = fresh.head.localSequence
                    let source = ReplicaRecordSource(views: views, log: log, transaction: txn)
                    var working = WorkingSet(source: source, schema: fresh.schema)
                    for (objects, yours) in groups {
                        var installed: Set<RecordKey> = []
                        try storeRefusedWrites(objects, in: txn)
                        for object in objects {
                            let key = RecordKey(type: object.type, primaryKey: object.primaryKey)
                            if let bytes = object.record {
                                let record: ObjectRecord
                                do {
                                    record = try ObjectRecord(decoding: bytes)
                                } catch {
                                    throw TributaryError(
                                        .invalidChangeset,
                                        "the daemon sent a record for \(key) that does not decode (\(error)); nothing "
                                            + "was applied")
                                }
                                try working.setRecord(record, for: key)
                                installed.insert(key)
                            } else {
                                try working.setRecord(nil, for: key)
                                installed.remove(key)
                            }
                        }
                        if !installed.isEmpty {
                            for (dot, sequence) in try log.originEntries(from: replicaID, after: yours, in: txn) {
                                var changeset = try log.changeset(
                                    of: try log.entry(sequence, in: txn), context: compressionContext)
                                let refused = try refusedWrites(of: dot, in: txn)
                                changeset.instructions = changeset.instructions.map { instruction in
                                    guard let object = instruction.object else { return .omitted }
                                    let key = RecordKey(type: object.type, primaryKey: object.primaryKey)
                                    guard installed.contains(key), !refused.contains(key) else { return .omitted }
                                    return instruction
                                }
                                try MergeEngine.apply(changeset, to: &working)
                            }
                        }
                    }
                    let changes = working.takeChanges()
                    changed = changes.map(\.key)
                    try views.write(changes, schema: fresh.schema, in: txn)
                    try storeObjectStates(changes, at: head, in: txn)
                    if let completing { try completeSubscriptionSet(completing, in: txn) }
                }
            } catch {
                throw TributaryError.wrap(error)
            }
            // Not tied to a new log entry: observers re-read what they show.
            observers.notify(changedKeys: changed, schemaChanged: true, sequence: head)
        }
        if completing != nil { subscriptionWatchers.notify() }
    }

    /// Set `version` is complete: the device holds it. Older pending sets are superseded; the latest, if it is this
    /// one, is complete.
    private func completeSubscriptionSet(_ version: UInt64, in txn: WriteTransaction) throws {
        var sets = try subscriptionSets(in: txn)
        guard var completed = try storedSubscriptionSet(Self.pendingSubscriptionsKey(version), in: txn),
            version > sets.held.version
        else { return }
        completed.state = .complete
        try storeSubscriptionSet(completed, Self.heldSubscriptionsKey, in: txn)
        if sets.latest.version == version {
            sets.latest.state = .complete
            try storeSubscriptionSet(sets.latest, Self.latestSubscriptionsKey, in: txn)
        }
        var done: [[UInt8]] = []
        try txn.scan(identity, from: Self.pendingSubscriptionsPrefix, to: Self.pendingSubscriptionsKey(version + 1)) {
            key, _ in
            done.append(Array(key))
            return true
        }
        for key in done { _ = try txn.delete(identity, key: key) }
    }

    /// Remembers the own writes a daemon refused, per changeset: applying own changesets again on top of a daemon's
    /// record (``applyObjectStates(_:yours:completing:)``) leaves them out, whenever that record was read.
    private func storeRefusedWrites(_ objects: [ReceivedObjectState], in txn: WriteTransaction) throws {
        var byDot: [Dot: [RecordKey]] = [:]
        for object in objects {
            for dot in object.refused where dot.origin == replicaID {
                byDot[dot, default: []].append(RecordKey(type: object.type, primaryKey: object.primaryKey))
            }
        }
        for (dot, keys) in byDot {
            let key = Self.refusedWritesPrefix + ChangesetLog.originKey(dot)
            let all = try refusedWrites(of: dot, in: txn).union(keys)
            var writer = BinaryWriter()
            writer.varint(all.count)
            for each in all.sorted() {
                writer.string(each.type)
                writer.primaryKey(each.primaryKey)
            }
            try txn.put(identity, key: key, value: writer.bytes)
        }
    }

    private func refusedWrites(of dot: Dot, in txn: TributaryStorageReadTransaction) throws -> Set<RecordKey> {
        guard let bytes = try txn.get(identity, key: Self.refusedWritesPrefix + ChangesetLog.originKey(dot)) else {
            return []
        }
        var reader = BinaryReader(bytes, subject: "refused writes of \(dot)")
        do {
            var keys: Set<RecordKey> = []
            let count = try reader.count("refused writes", maximum: .max, minimumBytesEach: 3)
            for _ in 0..<count {
                keys.insert(RecordKey(type: try reader.string("type"), primaryKey: try reader.primaryKey()))
            }
            return keys
        } catch {
            throw TributaryError(
                .corrupted, "replica \(directory): its record of refused writes of \(dot) is damaged (\(error))")
        }
    }

    /// Keeps an applied set of object states for replay: under the log position it followed, numbered in order.
    private func storeObjectStates(_ changes: [RecordChange], at head: UInt64, in txn: WriteTransaction) throws {
        guard !changes.isEmpty else { return }
        let count = try txn.get(identity, key: Self.objectStatesCountKey).flatMap(Self.identityNumber) ?? 0
        var key = Self.objectStatesPrefix
        key += withUnsafeBytes(of: head.bigEndian) { Array($0) }
        key += withUnsafeBytes(of: (count + 1).bigEndian) { Array($0) }
        var writer = BinaryWriter()
        writer.varint(changes.count)
        for change in changes {
            writer.string(change.key.type)
            writer.primaryKey(change.key.primaryKey)
            if let encoded = change.encodedAfter() {
                writer.byte(1)
                writer.lengthPrefixed(encoded)
            } else {
                writer.byte(0)
            }
        }
        try txn.put(identity, key: key, value: writer.bytes)
        try txn.put(identity, key: Self.objectStatesCountKey, value: Self.identityBytes(count + 1))
    }

    /// Every object state this replica applied, in order: what its daemon sent whole (bootstraps, objects entering
    /// its view, corrections), each record as it landed, or `nil` for an object removed from the device.
    package func receivedObjectStates() throws -> [(key: RecordKey, record: ObjectRecord?)] {
        do {
            return try environment.read { txn in try storedObjectStates(in: txn).flatMap(\.records) }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The object states applied so far, in order, each with the log position it followed, for replay.
    func storedObjectStates(in txn: TributaryStorageReadTransaction) throws -> [(
        after: UInt64, records: [(RecordKey, ObjectRecord?)]
    )] {
        var result: [(after: UInt64, records: [(RecordKey, ObjectRecord?)])] = []
        try txn.scan(identity, from: Self.objectStatesPrefix, to: ViewStore.prefixEnd(Self.objectStatesPrefix)) {
            key, value in
            guard key.count == Self.objectStatesPrefix.count + 16 else { return true }
            let after = key.loadUnaligned(fromByteOffset: Self.objectStatesPrefix.count, as: UInt64.self).bigEndian
            var reader = BinaryReader(Array(value), subject: "stored object states")
            do {
                var records: [(RecordKey, ObjectRecord?)] = []
                let count = try reader.count("object states", maximum: .max, minimumBytesEach: 3)
                for _ in 0..<count {
                    let type = try reader.string("type")
                    let primaryKey = try reader.primaryKey()
                    let record =
                        try reader.byte() == 1
                        ? try ObjectRecord(decoding: Array(try reader.lengthPrefixed("record"))) : nil
                    records.append((RecordKey(type: type, primaryKey: primaryKey), record))
                }
                result.append((after, records))
            } catch {
                throw TributaryError(
                    .corrupted,
                    "replica \(directory): the object states the daemon sent after log entry \(after) are damaged "
                        + "(\(error))")
            }
            return true
        }
        return result
    }
}
