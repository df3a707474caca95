import TributaryCompression
import TributaryLog
import TributaryMerge
import TributaryModel
import TributaryQuery
import TributaryStorage
import TributaryViews

/// What a daemon knows of the objects one flexible-sync device holds, for the length of a session: the device's
/// subscriptions, and the objects whose holding this session decided.
///
/// An object this session did not decide is held by the device exactly when it matched the device's subscriptions
/// at the device's vector (or, for an object the device wrote under a set it sent since, that set: see `skipped` in
/// ``Replica/flexibleBootstrap(holding:wanting:skipped:view:device:)``). Until a changeset the device lacks touches
/// it, its state is the same now, so the daemon judges it on its current state; once one touches it, the export
/// decides it again (``Replica/flexibleExport``).
/// Nothing here needs storing: a new session starts with nothing decided and reaches the same holdings.
package struct FlexibleSessionView: Sendable {
    /// The subscriptions the device's current set holds.
    package internal(set) var subscriptions: [Subscription] = []
    /// Whether this session bootstrapped a set: ``subscriptions`` is then what the device holds, even when it is empty
    /// (before, the set the device names as held is).
    package internal(set) var bootstrapped = false
    /// The types the device may hold objects of: those of every set it held during the session.
    package internal(set) var possibleTypes: Set<String> = []
    /// Objects the device holds, by this session's decision.
    private(set) var held: Set<RecordKey> = []
    /// Objects removed from the device by this session's decision.
    private(set) var evicted: Set<RecordKey> = []
    /// Objects sent as their full state, with the daemon's vector when they were read: changesets it counts are in
    /// the state already, so their instructions on the object are not sent.
    private(set) var installedAt: [RecordKey: VersionVector] = [:]
    /// The session's place in the replica's subscription index, when it has one
    /// (``Replica/registerFlexibleSession(wake:)``): the changesets no subscription of its concerned are sent as
    /// skeletons, unjudged. Without one, every changeset is judged.
    var member: SubscriptionIndex.Member?
    /// The session's roles under the daemon's permission rules, for their field-level rules: the fields a role may
    /// not read are left out of every record and instruction sent.
    private(set) var permissions: SessionPermissions?
    /// Types whose held objects are sent whole again at the next bootstrap: their readable fields changed.
    private(set) var resend: Set<String> = []

    package init() {}

    /// The session's roles changed (or were first given): objects of the types whose field-level rules changed are
    /// sent again, whole, when the device's holdings are next decided (``Replica/flexibleBootstrap``).
    package mutating func setPermissions(_ permissions: SessionPermissions?) {
        for type in possibleTypes {
            let before = self.permissions?[type]?.fields ?? .unrestricted
            let after = permissions?[type]?.fields ?? .unrestricted
            if before != after, before.hidesFields || after.hidesFields { resend.insert(type) }
        }
        self.permissions = permissions
    }

    mutating func resent() { resend = [] }

    /// The field-level rules of `type`, when they hide some field.
    private func hiding(_ type: String) -> FieldPermissions? {
        guard let fields = permissions?[type]?.fields, fields.hidesFields else { return nil }
        return fields
    }

    /// `record` (an object of `type`, as stored) without the fields the session may not read.
    func redacted(_ record: [UInt8], of type: String) throws -> [UInt8] {
        guard let fields = hiding(type) else { return record }
        var decoded = try ObjectRecord(decoding: record)
        var hidden: [String] = []
        for (name, _) in decoded.fields where !fields[name].read { hidden.append(name) }
        guard !hidden.isEmpty else { return record }
        for name in hidden { decoded.fields.removeStates(of: name) }
        return decoded.encoded()
    }

    /// Whether `instruction` writes a field the session may not read.
    func hides(_ instruction: Instruction) -> Bool {
        guard let object = instruction.object, let fields = hiding(object.type) else { return false }
        switch instruction {
        case .create(_, _, let explicit, let defaults):
            return explicit.contains { !fields[$0.name].read } || defaults.contains { !fields[$0.name].read }
        case .set(let path, _), .addInteger(let path, _, _), .listInsert(let path, _, _), .listSet(let path, _, _),
            .listErase(let path, _), .listMove(let path, _, _), .listClear(let path), .dictionarySet(let path, _, _),
            .dictionaryErase(let path, _):
            return !fields[path.steps.first?.property ?? path.property].read
        default:
            return false
        }
    }

    mutating func install(_ key: RecordKey, at vector: VersionVector) {
        held.insert(key)
        evicted.remove(key)
        installedAt[key] = vector
    }

    mutating func evict(_ key: RecordKey) {
        held.remove(key)
        evicted.insert(key)
        installedAt[key] = nil
    }

    /// Forgets install vectors the device's progress has passed.
    mutating func prune(progress: VersionVector) {
        installedAt = installedAt.filter { !progress.includes($0.value) }
    }
}

/// The next thing a daemon sends a flexible-sync device: object states, then changesets projected on its view.
package struct FlexibleExport: Sendable {
    /// Objects entering (with their stored record) or leaving the device's view, to apply before the changesets.
    package var objects: [ReceivedObjectState] = []
    /// The highest sequence of the device's own changesets the daemon held when it read the records.
    package var yours: UInt64 = 0
    /// The changesets, each with the instructions on objects outside the view replaced by `omitted`.
    package var changesets: ChangesetExport
}

/// A flexible-sync device's subscriptions, parsed against a schema.
struct CompiledSubscriptions {
    var byType: [String: [Query]] = [:]

    init(_ subscriptions: [Subscription], schema: Schema) {
        for subscription in subscriptions {
            // A set whose query does not parse any more (the schema changed) selects nothing of that type.
            guard let type = schema[type: subscription.type],
                let query = try? Query(subscription.query, type: type, schema: schema)
            else { continue }
            byType[type.name, default: []].append(query)
        }
    }

    func matches(_ key: RecordKey, in snapshot: Snapshot) throws -> Bool {
        guard let queries = byType[key.type], !queries.isEmpty,
            let object = try snapshot.object(key.type, primaryKey: key.primaryKey)
        else { return false }
        let source = ReaderObjectSource(snapshot)
        return queries.contains { $0.matches(object.values, source: source) }
    }

    /// Whether an object in the state `record` (not stored: the state an upload would leave) matches.
    func matches(_ key: RecordKey, record: ObjectRecord, in snapshot: Snapshot) throws -> Bool {
        guard record.exists, let queries = byType[key.type], !queries.isEmpty,
            let type = snapshot.schema[type: key.type]
        else { return false }
        let object = try snapshot.materializer.object(type: type, primaryKey: key.primaryKey, record: record)
        let source = ReaderObjectSource(snapshot)
        return queries.contains { $0.matches(object.values, source: source) }
    }

    /// Every object that matches, by type.
    func matching(in snapshot: Snapshot) throws -> Set<RecordKey> {
        var keys: Set<RecordKey> = []
        for (type, queries) in byType {
            for query in queries {
                for object in try snapshot.objects(type, where: query.text) {
                    keys.insert(RecordKey(type: type, primaryKey: object.primaryKey))
                }
            }
        }
        return keys
    }
}

extension Replica {
    /// Checks a device's subscriptions as a daemon takes them (``checkSubscription(_:schema:queryable:)``).
    package func checkSubscriptions(_ subscriptions: [Subscription], queryable: [String: Set<String>]?) throws {
        let schema = self.schema
        for subscription in subscriptions {
            try Self.checkSubscription(subscription, schema: schema, queryable: queryable)
        }
    }

    /// A device asks for the subscriptions `wanted`, holding what `held` covers (at its vector): the objects to send
    /// (those entering its view, with their full state) and to remove (those leaving it), read in one snapshot.
    /// `view` then holds `wanted`.
    ///
    /// `skipped` are the sets the device sent after the one it holds and before `wanted`, which the daemon did not
    /// bootstrap (a newer one came first): the device may hold objects they cover, those it wrote under them. Those
    /// objects are removed unless `wanted` covers them, and sent, like any other, when `wanted` does.
    package func flexibleBootstrap(
        holding held: [Subscription], wanting wanted: [Subscription], skipped: [Subscription] = [],
        view: inout FlexibleSessionView, device: ReplicaID
    ) throws -> (objects: [ReceivedObjectState], yours: UInt64) {
        let holding = view.bootstrapped ? view.subscriptions : held
        // While the objects are read, commits concern the device under every set: under those it may hold until the
        // bootstrap replaces them, under the new one from then on.
        if let member = view.member {
            var concerning = holding
            for subscription in skipped + wanted where !concerning.contains(subscription) {
                concerning.append(subscription)
            }
            subscriptionIndex.setSubscriptions(member, concerning, schema: schema, head: lastLocalSequence)
        }
        defer {
            if let member = view.member {
                subscriptionIndex.setSubscriptions(member, wanted, schema: schema, head: lastLocalSequence)
            }
        }
        do {
            return try environment.read { txn in
                let snapshot = Snapshot(replica: self, storage: txn)
                defer { snapshot.invalidate() }
                let schema = snapshot.schema
                let vector = try versionVector(in: txn)
                let newMatches = try CompiledSubscriptions(wanted, schema: schema).matching(in: snapshot)
                let oldMatches = try CompiledSubscriptions(held, schema: schema).matching(in: snapshot)
                // Objects the device may hold, not known to: removed when `wanted` does not cover them, never assumed
                // held when it does.
                let maybeHeld =
                    skipped.isEmpty
                    ? [] : try CompiledSubscriptions(skipped, schema: schema).matching(in: snapshot)
                var objects: [ReceivedObjectState] = []
                for key in newMatches.sorted() {
                    let decided = view.held.contains(key) || view.evicted.contains(key)
                    if !view.resend.contains(key.type),
                        view.held.contains(key) || (!decided && oldMatches.contains(key))
                    {
                        continue
                    }
                    guard let record = try storedRecord(key, in: txn) else { continue }
                    objects.append(
                        ReceivedObjectState(
                            type: key.type, primaryKey: key.primaryKey, record: try view.redacted(record, of: key.type))
                    )
                    view.install(key, at: vector)
                }
                view.resent()
                let undecidedOld = oldMatches.union(maybeHeld).filter {
                    !view.held.contains($0) && !view.evicted.contains($0)
                }
                for key in view.held.union(undecidedOld).subtracting(newMatches).sorted() {
                    objects.append(ReceivedObjectState(type: key.type, primaryKey: key.primaryKey, record: nil))
                    view.evict(key)
                }
                view.subscriptions = wanted
                view.bootstrapped = true
                view.possibleTypes.formUnion(held.map(\.type))
                view.possibleTypes.formUnion(skipped.map(\.type))
                view.possibleTypes.formUnion(wanted.map(\.type))
                return (objects, try heldSequence(of: device, vector: vector, in: txn))
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The next batch a flexible-sync device lacks (as ``export(missingFrom:excluding:origins:limit:maximumBytes:)``
    /// reads it), projected on its view: every object a changeset touches is judged on its current state; one that
    /// enters the view is sent whole (its instructions then left out), one that leaves it is removed from the device,
    /// and the instructions on objects outside the view are replaced by `omitted`. The changesets keep their identity,
    /// so the device's version vector stays complete.
    package func flexibleExport(
        missingFrom vector: VersionVector, excluding: Set<Dot>, view: inout FlexibleSessionView, device: ReplicaID,
        limit: Int, maximumBytes: Int
    ) throws -> FlexibleExport {
        let head = lastLocalSequence
        let judging = view.member.flatMap { subscriptionIndex.judging($0) }
        let plain = try export(missingFrom: vector, excluding: excluding, limit: limit, maximumBytes: maximumBytes)
        var result = FlexibleExport(changesets: plain)
        guard !plain.changesets.isEmpty else {
            // Nothing committed up to `head` is missing.
            if let member = view.member { subscriptionIndex.sent(member, through: head) }
            return result
        }
        do {
            let context = ZstdContext()
            // The changesets to judge, decoded; the others (nil) concern no subscription of the device.
            var decoded: [Changeset?] = []
            decoded.reserveCapacity(plain.changesets.count)
            for (bytes, sequence) in zip(plain.changesets, plain.localSequences) {
                if let judging, !judging.judges(sequence) {
                    decoded.append(nil)
                } else {
                    decoded.append(try log.received(bytes, context: context).changeset)
                }
            }
            var touched: [RecordKey] = []
            var seen: Set<RecordKey> = []
            // Held objects a create gives fields the device may not read: sent whole again instead (leaving the fields
            // out of the create would change the ids of the elements the create's later fields hold).
            var reinstall: Set<RecordKey> = []
            for case let changeset? in decoded {
                for instruction in changeset.instructions {
                    guard let object = instruction.object else { continue }
                    let key = RecordKey(type: object.type, primaryKey: object.primaryKey)
                    if seen.insert(key).inserted { touched.append(key) }
                    if case .create = instruction, view.held.contains(key), view.hides(instruction) {
                        reinstall.insert(key)
                    }
                }
            }
            try environment.read { txn in
                let snapshot = Snapshot(replica: self, storage: txn)
                defer { snapshot.invalidate() }
                let now = try versionVector(in: txn)
                let compiled = CompiledSubscriptions(view.subscriptions, schema: snapshot.schema)
                for key in touched {
                    if try compiled.matches(key, in: snapshot) {
                        guard !view.held.contains(key) || reinstall.contains(key),
                            let record = try storedRecord(key, in: txn)
                        else { continue }
                        result.objects.append(
                            ReceivedObjectState(
                                type: key.type, primaryKey: key.primaryKey,
                                record: try view.redacted(record, of: key.type)))
                        view.install(key, at: now)
                    } else if view.held.contains(key)
                        || (!view.evicted.contains(key) && view.possibleTypes.contains(key.type))
                    {
                        result.objects.append(
                            ReceivedObjectState(type: key.type, primaryKey: key.primaryKey, record: nil))
                        view.evict(key)
                    }
                }
                if !result.objects.isEmpty { result.yours = try heldSequence(of: device, vector: now, in: txn) }
            }
            var projected: [[UInt8]] = []
            projected.reserveCapacity(decoded.count)
            for (index, changeset) in decoded.enumerated() {
                guard var changeset else {
                    projected.append(
                        try subscriptionIndex.skeleton(at: plain.localSequences[index]) {
                            ChangesetCodec.encode(
                                try Self.skeleton(of: log.received(plain.changesets[index], context: context).changeset)
                            )
                        })
                    continue
                }
                var omitted = false
                changeset.instructions = changeset.instructions.map { instruction in
                    guard let object = instruction.object else { return instruction }
                    let key = RecordKey(type: object.type, primaryKey: object.primaryKey)
                    if view.held.contains(key), !(view.installedAt[key]?.includes(changeset.causalDot) ?? false),
                        !view.hides(instruction)
                    {
                        return instruction
                    }
                    omitted = true
                    return .omitted
                }
                projected.append(omitted ? ChangesetCodec.encode(changeset) : plain.changesets[index])
            }
            result.changesets.changesets = projected
            result.changesets.bytes = projected.reduce(0) { $0 + $1.count }
            view.prune(progress: plain.progress)
            if let member = view.member, let last = plain.localSequences.last, !plain.more {
                subscriptionIndex.sent(member, through: max(last, head))
            } else if let member = view.member, let last = plain.localSequences.last {
                subscriptionIndex.sent(member, through: last)
            }
            return result
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// `changeset` with its instructions on objects replaced by `omitted`: what a device receives of a changeset
    /// that touched none of the objects it holds or may hold.
    static func skeleton(of changeset: Changeset) -> Changeset {
        var changeset = changeset
        changeset.instructions = changeset.instructions.map { $0.object == nil ? $0 : .omitted }
        return changeset
    }

    /// A flexible-sync session's view of what its device holds, registered in this replica's subscription index:
    /// `wake` is called after each commit that concerns the device's subscriptions (and only those; see
    /// ``isBehind(_:)`` for the others). End it with ``endFlexibleSession(_:)``.
    package func registerFlexibleSession(wake: @escaping @Sendable () -> Void) -> FlexibleSessionView {
        var view = FlexibleSessionView()
        view.member = subscriptionIndex.register(head: lastLocalSequence, wake: wake)
        return view
    }

    /// Removes a session's view from the subscription index.
    package func endFlexibleSession(_ view: FlexibleSessionView) {
        if let member = view.member { subscriptionIndex.unregister(member) }
    }

    /// Whether commits were made since the session last sent everything it lacked: commits that concerned none of
    /// its subscriptions do not wake it, and it sends them (as skeletons) now and then, so that its device's progress
    /// does not fall far behind.
    package func isBehind(_ view: FlexibleSessionView) -> Bool {
        view.member.map { subscriptionIndex.isBehind($0) } ?? false
    }

    /// Judges an upload of a flexible-sync device against its view, before it is adopted: a write that leaves an
    /// object outside the view (created or changed so that no subscription matches it), or erases one outside it, is
    /// refused. Such instructions are left out of the changeset (replaced by `omitted`; the rest of it is adopted),
    /// and the device is sent the daemon's state of the object at the next export (a compensating write).
    ///
    /// `subscriptions` is the newest set the device sent and the daemon took (its bootstrap may still be on its way:
    /// the writes that follow a set were made under it), limited to what the session may read. Before the device's
    /// first set arrives (`judging` is `false`), no write is refused for being outside the view.
    ///
    /// With `permissions` (the session's roles under the daemon's permission rules), every write is also checked
    /// against its role: a create needs `insert` and an object the role may write; a change, an object the role may
    /// write before and after it; an erase, `delete` and an object the role may write. A denied write is refused the
    /// same way.
    ///
    /// - Returns: the changesets to adopt, per refused changeset its dot and the reason (naming each object), and
    ///   the objects to send back (``compensation(for:view:device:)``) once the adopted ones are committed.
    package func judgeUpload(
        _ changesets: [[UInt8]], under subscriptions: [Subscription], judging: Bool,
        permissions: SessionPermissions? = nil
    ) throws -> (
        changesets: [[UInt8]], rejections: [(dot: Dot, reason: String)],
        compensate: [(type: String, primaryKey: PrimaryKey, refused: [Dot])]
    ) {
        guard judging || permissions != nil else { return (changesets, [], []) }
        do {
            return try environment.read { txn in
                let snapshot = Snapshot(replica: self, storage: txn)
                defer { snapshot.invalidate() }
                let compiled = CompiledSubscriptions(subscriptions, schema: snapshot.schema)
                var roles = permissions.map { CompiledPermissions($0, schema: snapshot.schema) }
                let context = ZstdContext()
                var working = WorkingSet(
                    source: ReplicaRecordSource(views: views, log: log, transaction: txn), schema: snapshot.schema)
                var adopted: [[UInt8]] = []
                var rejections: [(dot: Dot, reason: String)] = []
                var compensate: [RecordKey: [Dot]] = [:]
                for bytes in changesets {
                    // What does not decode or apply is left for the integration to refuse, with its own message.
                    guard var changeset = try? log.received(bytes, context: context).changeset else {
                        adopted.append(bytes)
                        continue
                    }
                    var touched: [RecordKey] = []
                    for instruction in changeset.instructions {
                        guard let object = instruction.object else { continue }
                        let key = RecordKey(type: object.type, primaryKey: object.primaryKey)
                        if !touched.contains(key) { touched.append(key) }
                    }
                    var trial = working
                    guard !touched.isEmpty, (try? MergeEngine.apply(changeset, to: &trial)) != nil else {
                        adopted.append(bytes)
                        if !touched.isEmpty { try? MergeEngine.apply(changeset, to: &working) }
                        continue
                    }
                    var denied: [RecordKey: String] = [:]
                    for key in touched {
                        let before = try working.record(key)
                        let after = try trial.record(key)
                        if let reason = try roles?.denial(key, before: before, after: after, in: snapshot) {
                            denied[key] = reason
                            continue
                        }
                        guard judging else { continue }
                        if let after, after.exists {
                            if try !compiled.matches(key, record: after, in: snapshot) {
                                denied[key] = "the object is outside of the session's subscriptions after the write"
                            }
                        } else if let before, before.exists, try !compiled.matches(key, record: before, in: snapshot) {
                            denied[key] = "the object erased is outside of the session's subscriptions"
                        }
                    }
                    if denied.isEmpty {
                        working = trial
                        adopted.append(bytes)
                        continue
                    }
                    changeset.instructions = changeset.instructions.map { instruction in
                        guard let object = instruction.object,
                            denied[RecordKey(type: object.type, primaryKey: object.primaryKey)] != nil
                        else { return instruction }
                        return .omitted
                    }
                    try? MergeEngine.apply(changeset, to: &working)
                    adopted.append(ChangesetCodec.encode(changeset))
                    for key in denied.keys { compensate[key, default: []].append(changeset.dot) }
                    let named = denied.sorted { $0.key < $1.key }.map { "write to \($0.key) reverted: \($0.value)" }
                    rejections.append((changeset.dot, named.joined(separator: "; ")))
                }
                return (
                    adopted, rejections,
                    compensate.sorted { $0.key < $1.key }.map { ($0.key.type, $0.key.primaryKey, $0.value) }
                )
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The daemon's state of objects whose write by the device it refused (a compensating write): each object's
    /// record when it is in the view, or `nil` to remove it from the device. Read after the refused upload was
    /// committed, so that `yours` counts it: the device does not apply the refused write again.
    package func compensation(
        for keys: [(type: String, primaryKey: PrimaryKey, refused: [Dot])], under subscriptions: [Subscription],
        view: inout FlexibleSessionView, device: ReplicaID
    ) throws -> (objects: [ReceivedObjectState], yours: UInt64) {
        do {
            return try environment.read { txn in
                let snapshot = Snapshot(replica: self, storage: txn)
                defer { snapshot.invalidate() }
                let now = try versionVector(in: txn)
                let compiled = CompiledSubscriptions(subscriptions, schema: snapshot.schema)
                var objects: [ReceivedObjectState] = []
                for (type, primaryKey, refused) in keys {
                    let key = RecordKey(type: type, primaryKey: primaryKey)
                    if try compiled.matches(key, in: snapshot), let record = try storedRecord(key, in: txn) {
                        objects.append(
                            ReceivedObjectState(
                                type: type, primaryKey: primaryKey, record: try view.redacted(record, of: type),
                                refused: refused))
                        view.install(key, at: now)
                    } else {
                        objects.append(
                            ReceivedObjectState(type: type, primaryKey: primaryKey, record: nil, refused: refused))
                        view.evict(key)
                    }
                }
                return (objects, try heldSequence(of: device, vector: now, in: txn))
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// The stored bytes of an object's record, or `nil`.
    private func storedRecord(_ key: RecordKey, in txn: TributaryStorageReadTransaction) throws -> [UInt8]? {
        try txn.get(views.objects, key: ViewStore.objectKey(type: key.type, primaryKey: key.primaryKey))
    }

}

/// A session's permissions, with each role's write filter compiled against a schema (once per type).
struct CompiledPermissions {
    let permissions: SessionPermissions
    let schema: Schema
    /// Per type, the role's write filter compiled, or `nil` when it does not compile.
    private var writeFilters: [String: Query?] = [:]

    init(_ permissions: SessionPermissions, schema: Schema) {
        self.permissions = permissions
        self.schema = schema
    }

    /// Why the session may not make the change of `key` from `before` to `after`, or `nil` when its role allows it.
    mutating func denial(_ key: RecordKey, before: ObjectRecord?, after: ObjectRecord?, in snapshot: Snapshot) throws
        -> String?
    {
        let existed = before?.exists == true
        let exists = after?.exists == true
        guard existed || exists else { return nil }
        guard let role = permissions[key.type] else { return "no role of the permission rules applies to \(key.type)" }
        let name = "role \"\(role.role)\""
        if !existed {
            guard role.insert else { return "\(name) may not create \(key.type) objects" }
            guard try mayWrite(key, after!, role, in: snapshot) else {
                return "the object created is outside what \(name) may write"
            }
        } else if !exists {
            guard role.delete else { return "\(name) may not delete \(key.type) objects" }
            guard try mayWrite(key, before!, role, in: snapshot) else {
                return "the object erased is outside what \(name) may write"
            }
        } else {
            guard try mayWrite(key, before!, role, in: snapshot) else {
                return "\(name) may not write this object"
            }
            guard try mayWrite(key, after!, role, in: snapshot) else {
                return "after the write the object is outside what \(name) may write"
            }
        }
        if exists, role.fields.protectsFields, let type = schema[type: key.type] {
            // A field the role may not write keeps its value: a create leaves it as it reads without one.
            for property in type.properties where property.name != type.primaryKey {
                guard !role.fields[property.name].write else { continue }
                let old = ObjectRecord.value(existed ? before!.fields[property.name] : nil, of: property, in: schema)
                let new = ObjectRecord.value(after!.fields[property.name], of: property, in: schema)
                if old != new { return "\(name) may not write \(key.type).\(property.name)" }
            }
        }
        return nil
    }

    private mutating func mayWrite(
        _ key: RecordKey, _ record: ObjectRecord, _ role: TypePermissions, in snapshot: Snapshot
    ) throws -> Bool {
        switch role.write {
        case .all: return true
        case .none: return false
        case .matching(let predicate):
            guard let type = schema[type: key.type] else { return false }
            if writeFilters[key.type] == nil {
                writeFilters[key.type] = .some(try? schema.query(predicate, arguments: [], type: type))
            }
            // A filter that does not apply to the type (a field it lacks) lets nothing through.
            guard let query = writeFilters[key.type] ?? nil else { return false }
            let object = try snapshot.materializer.object(type: type, primaryKey: key.primaryKey, record: record)
            let source = ReaderObjectSource(snapshot)
            return query.matches(object.values, source: source)
        }
    }
}
