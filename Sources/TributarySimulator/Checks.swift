import Foundation
import Tributary
import TributaryMerge
import TributaryModel

extension Simulation {
    func fail(_ message: String) { result.failures.append(message) }

    func check() throws {
        let full = (0..<replicaCount).filter { !isPartial($0) }
        // 1. Byte-identical views on every full replica, and equal version vectors everywhere. The linked app's
        // changesets, which reach replicas both as written and adopted, are counted by origin where one came as
        // written first: vectors are compared without the apps' entries then.
        let linkedAppID = linkedApp.map { replicas[$0].replicaID }
        let digests = try full.map { try replicas[$0].viewDigest(includeVersionVector: linkedAppID == nil) }
        if Set(digests).count != 1 {
            fail("full replicas diverged: view digests \(zip(full, digests).map { "r\($0)=\(String($1, radix: 16))" })")
            for index in full.dropFirst() where digests[full.firstIndex(of: index)!] != digests[0] {
                try describeDifference(replicas[full[0]], replicas[index], names: ("r\(full[0])", "r\(index)"))
            }
        }
        // An app replica's vector also counts its own changesets by origin; without that entry, all are equal.
        let vectors = replicas.map { replica in
            VersionVector(
                replica.versionVector.entries.filter { entry in
                    entry.replica != linkedAppID
                        && (entry.replica != replica.replicaID
                            || !isPartial(replicas.firstIndex { $0 === replica } ?? 0))
                }.map { ($0.replica, $0.sequence) })
        }
        if Set(vectors).count != 1 {
            fail("version vectors differ: \(vectors)")
            for (index, replica) in replicas.enumerated() {
                for waiting in (try? replica.pendingChangesets()) ?? [] {
                    fail(
                        "replica \(index) holds \(waiting.dot) (causal \(waiting.causalDot)) pending: context \(waiting.context) extras \(waiting.contextExtras), its vector \(replica.versionVector)"
                    )
                }
            }
        }
        // Nothing is left to send: an export that only brings duplicates would be sent again on every sync.
        for index in links.indices {
            let unsent = try unsent(on: index)
            if !unsent.isEmpty {
                fail(
                    "after the exchange, replica \(links[index].source) would still send replica \(links[index].target) "
                        + "\(unsent.count) changesets: \(unsent.prefix(3).map(\.causalDot))")
            }
        }
        // Relays keep metadata bounded: no context names an app replica (but the linked app, whose peer names it).
        let appIDs = Set((0..<replicaCount).filter { isPartial($0) && $0 != linkedApp }.map { replicas[$0].replicaID })
        for changeset in try replicas[0].changesets(missingFrom: VersionVector()) {
            if changeset.context.entries.contains(where: { appIDs.contains($0.replica) })
                || changeset.contextExtras.contains(where: { appIDs.contains($0.origin) })
            {
                fail("changeset \(changeset.dot) names an app replica in its causal context")
                break
            }
        }

        // 2. Each replica's views equal a replay of its own log.
        for (index, replica) in replicas.enumerated() {
            let report = try replica.verify()
            if !report.passed { fail("replica \(index) failed verify: \(report)") }
        }
        // And a rebuild of one replica's views, writing its records out every few and loading them back, gives the
        // same views.
        let rebuilt = Int(configuration.seed % UInt64(replicaCount))
        let before = try replicas[rebuilt].viewDigest()
        let recordsInMemory = 1 + Int(configuration.seed % 61)
        try replicas[rebuilt].rebuildViews(recordsInMemory: recordsInMemory)
        if try replicas[rebuilt].viewDigest() != before {
            fail("replica \(rebuilt)'s views changed in a rebuild keeping \(recordsInMemory) records in memory")
        }

        // A replica that starts from a compacted replica's base, then takes the entries after it, equals it.
        for index in 1..<replicaCount where !isPartial(index) {
            guard let base = try replicas[index].baseState() else { continue }
            var configuration = replicaConfiguration(index)
            configuration.replicaID = ReplicaID(rawValue: 0xBA5E << 32 | (self.configuration.seed & 0xFFFF_FFFF))
            let fresh = try Replica.open(
                directory: (root as NSString).appendingPathComponent("from-base-\(index)"), configuration: configuration
            )
            defer { fresh.close() }
            try fresh.installBase(base)
            try fresh.integrate(try replicas[index].changesets(missingFrom: fresh.versionVector))
            if try fresh.viewDigest() != replicas[index].viewDigest() {
                fail("a replica started from replica \(index)'s base differs from it")
                try describeDifference(replicas[index], fresh, names: ("r\(index)", "from its base"))
            }
            let report = try fresh.verify()
            if !report.passed { fail("a replica started from replica \(index)'s base failed verify: \(report)") }
        }

        // 3. Partial replicas hold exactly the full replica's record for every object they hold.
        for index in 0..<replicaCount where isPartial(index) {
            for (type, key) in try replicas[index]._recordKeys() {
                if !Workload.partialHolds(type, key) {
                    fail("partial replica \(index) holds \(type)[\(key)], outside its subset")
                }
                if try replicas[index]._recordBytes(type: type, primaryKey: key)
                    != replicas[0]._recordBytes(type: type, primaryKey: key)
                {
                    fail("partial replica \(index) differs from replica 0 on \(type)[\(key)]")
                }
            }
            for (type, key) in try replicas[0]._recordKeys() where Workload.partialHolds(type, key) {
                if try replicas[index]._recordBytes(type: type, primaryKey: key) == nil {
                    fail("partial replica \(index) lacks \(type)[\(key)]")
                }
            }
        }

        // The app's changesets that both relays adopted (it uploaded them to each before it heard of either
        // adoption) are logged once per relay dot; the rest once.
        let logged = try replicas[0].changesets(missingFrom: VersionVector())
        var copies: [Dot: [Dot]] = [:]
        var changesets: [Changeset] = []
        for changeset in logged {
            if copies[changeset.dot] == nil { changesets.append(changeset) }
            copies[changeset.dot, default: []].append(changeset.causalDot)
        }
        result.changesets = changesets.count
        // The linked app's changesets may be logged as written besides the relays' copies: a relay that integrated
        // one from the peer before the app uploaded it.
        func relayCopies(_ dots: [Dot]) -> [Dot] { dots.filter { $0.origin != linkedAppID } }
        result.adoptedTwice = copies.values.filter { relayCopies($0).count > 1 }.count
        let twice = logged.filter { copies[$0.dot]!.count > 1 && $0.relay == nil && $0.origin != linkedAppID }.count
        if twice > 0 { fail("the log holds \(twice) changesets twice that no relay adopted") }
        // Each copy comes from another relay: a relay adopts a changeset once.
        let relayIDs = Set(Self.relays.map { replicas[$0].replicaID })
        for (dot, dots) in copies where relayCopies(dots).count > 1 {
            let relays = relayCopies(dots).map(\.origin)
            if Set(relays).count != relays.count || !Set(relays).isSubset(of: relayIDs) {
                fail("changeset \(dot) is logged under \(dots): not once per relay")
                break
            }
        }
        let causal = Set(logged.map(\.causalDot)).count
        if causal != logged.count { fail("two changesets share a causal dot") }

        // 4. The oracle: the same changesets, merged in random causal orders, give the same records.
        let expected = try replicas[0].recordsDigest()
        for order in 0..<configuration.oracleOrders {
            let digest = try oracleDigest(logged, order: order)
            if digest != expected { fail("oracle order \(order) gives records digest \(digest), replicas \(expected)") }
        }

        // 5. The reference model of rules 1-4 and 7, and the list checks.
        try checkReferenceModel(changesets, copies: copies)
        try checkLists()
    }

    /// Names the first thing two diverged replicas hold differently: a part of the schema, or a record.
    func describeDifference(_ a: Replica, _ b: Replica, names: (String, String)) throws {
        let (left, right) = (a.schema, b.schema)
        if left.types != right.types {
            for type in Set(left.types.map(\.name)).union(right.types.map(\.name)).sorted()
            where left[type: type] != right[type: type] {
                fail(
                    "\(names.0) has \(left[type: type].map(String.init(describing:)) ?? "no \(type)"); \(names.1) has \(right[type: type].map(String.init(describing:)) ?? "no \(type)")"
                )
            }
        }
        if left.definitionStamps != right.definitionStamps {
            for name in Set(left.definitionStamps.keys).union(right.definitionStamps.keys).sorted()
            where left.definitionStamps[name] != right.definitionStamps[name] {
                fail(
                    "definition stamp of \(name): \(names.0) \(left.definitionStamps[name].map(String.init(describing:)) ?? "none"), \(names.1) \(right.definitionStamps[name].map(String.init(describing:)) ?? "none")"
                )
            }
        }
        if left.propertyRemovals != right.propertyRemovals || left.typeRemovals != right.typeRemovals {
            fail(
                "removals: \(names.0) \(left.propertyRemovals) \(left.typeRemovals); \(names.1) \(right.propertyRemovals) \(right.typeRemovals)"
            )
        }
        if left.version != right.version {
            fail("schema version: \(names.0) \(left.version), \(names.1) \(right.version)")
        }
        let keys = try a._recordKeys().map { "\($0.type)[\($0.primaryKey)]" }
        let otherKeys = try b._recordKeys().map { "\($0.type)[\($0.primaryKey)]" }
        if keys != otherKeys {
            fail("record keys differ: \(Set(keys).symmetricDifference(otherKeys).sorted().prefix(5))")
        }
        for (type, key) in try a._recordKeys() {
            let bytes = try a._recordBytes(type: type, primaryKey: key)
            if try bytes != b._recordBytes(type: type, primaryKey: key) {
                fail(
                    "\(type)[\(key)] differs: \(names.0) \(String(describing: try a.object(type, primaryKey: key))), \(names.1) \(String(describing: try b.object(type, primaryKey: key)))"
                )
                break
            }
        }
    }

    func oracleDigest(_ changesets: [Changeset], order: Int) throws -> UInt64 {
        var queues: [ReplicaID: [Changeset]] = [:]
        for changeset in changesets { queues[changeset.causalDot.origin, default: []].append(changeset) }
        for key in Array(queues.keys) { queues[key]!.sort { $0.causalDot.sequence < $1.causalDot.sequence } }
        var working = WorkingSet(source: EmptyRecordSource(), schema: Schema(types: []))
        var vector = VersionVector()
        var generator = SplitMix64(seed: configuration.seed &+ UInt64(order) &* 7919)
        var remaining = changesets.count
        var applied = Set<Dot>()
        // Held: counted by the vector, or applied through another copy (an app's changeset as written, held through
        // a relay's copy). A changeset held has its causal past held.
        func holds(_ dot: Dot) -> Bool { vector.includes(dot) || applied.contains(dot) }
        while remaining > 0 {
            let ready = queues.keys.sorted().filter { origin in
                guard let head = queues[origin]?.first else { return false }
                // A changeset as written, whose predecessor may have come only through a relay's copy.
                if head.relay == nil && head.originSequence > 1 && vector[origin] < head.originSequence - 1 {
                    guard holds(Dot(origin: origin, sequence: head.originSequence - 1)) else { return false }
                }
                return head.context.entries.allSatisfy {
                    $0.replica == origin || holds(Dot(origin: $0.replica, sequence: $0.sequence))
                }
                    && head.contextExtras.allSatisfy(holds)
            }
            guard !ready.isEmpty else {
                fail("oracle: no changeset is causally ready with \(remaining) left")
                return 0
            }
            let origin = ready[Int(generator.next() % UInt64(ready.count))]
            let changeset = queues[origin]!.removeFirst()
            if applied.insert(changeset.dot).inserted {
                try MergeEngine.apply(changeset, to: &working)
            } else if let relay = changeset.relay {
                // A second relay's copy: recorded, not applied again.
                working.recordAdoption(of: changeset.dot, as: relay)
            }
            vector.advance(changeset.causalDot.origin, to: changeset.causalDot.sequence)
            remaining -= 1
        }
        // The schema too: its definitions, definition stamps and removals must not depend on the order.
        if working.schema != replicas[0].schema {
            fail(
                "oracle order \(order) gives another schema than the replicas: \(working.schema) against \(replicas[0].schema)"
            )
        }
        let records = working.changes.compactMap { change in
            change.after.map { (type: change.key.type, primaryKey: change.key.primaryKey, bytes: $0.encoded()) }
        }
        return Replica.recordsDigest(of: records)
    }

    /// Checks what rules 1-4 and 7 say of existence, scalar fields, counters and links, computed from the changesets
    /// directly, without the merge engine.
    ///
    /// - Parameter copies: every causal dot each changeset was logged under (two when both relays adopted it).
    func checkReferenceModel(_ changesets: [Changeset], copies: [Dot: [Dot]]) throws {
        struct Key: Hashable {
            var type: String
            var primaryKey: PrimaryKey
        }
        struct Write {
            var changeset: Int
            var index: Int
            var value: Value
        }
        struct ObjectHistory {
            var erases: [(changeset: Int, index: Int)] = []
            var creates: [(changeset: Int, index: Int, explicit: [FieldValue], defaults: [FieldValue])] = []
            var sets: [String: [Write]] = [:]
            var adds: [String: [(changeset: Int, index: Int, delta: Int64, base: Stamp)]] = [:]
        }
        var histories: [Key: ObjectHistory] = [:]
        for (position, changeset) in changesets.enumerated() {
            for (index, instruction) in changeset.instructions.enumerated() {
                switch instruction {
                case .create(let type, let key, let explicit, let defaults):
                    histories[Key(type: type, primaryKey: key), default: .init()].creates.append(
                        (position, index, explicit, defaults))
                case .erase(let type, let key):
                    histories[Key(type: type, primaryKey: key), default: .init()].erases.append((position, index))
                case .set(let path, let value) where path.steps.isEmpty:
                    histories[Key(type: path.type, primaryKey: path.primaryKey), default: .init()].sets[
                        path.property, default: []
                    ]
                    .append(Write(changeset: position, index: index, value: value))
                case .addInteger(let path, let delta, let base) where path.steps.isEmpty:
                    histories[Key(type: path.type, primaryKey: path.primaryKey), default: .init()].adds[
                        path.property, default: []
                    ]
                    .append((position, index, delta, base))
                default:
                    break
                }
            }
        }
        func covers(_ changeset: Int, _ index: Int, _ erase: (changeset: Int, index: Int)) -> Bool {
            if changeset == erase.changeset { return index > erase.index }
            let writer = changesets[changeset]
            let erased = changesets[erase.changeset]
            // A writer has seen its own origin's earlier changesets; others through its context, by causal dot.
            if writer.origin == erased.origin { return erased.originSequence < writer.originSequence }
            return writer.contextIncludes(erased.dot)
                || (copies[erased.dot] ?? []).contains(where: writer.contextIncludes)
        }
        // Rule 8: Card's properties, removed, renamed and added concurrently. A removal or rename counts against
        // every addition of, and write to, the property that did not see it; one rename seen stands for the same rename
        // made elsewhere; a write that did not see a rename follows it.
        typealias Position = (changeset: Int, index: Int)
        typealias Removal = (changeset: Int, index: Int, renamedTo: String?)
        var removals: [String: [Removal]] = [:]
        var additions: [String: [Position]] = [:]
        // And whole types, removed and added back: a write to an object of a type, an erase, or an addition of the
        // type, counts only if it saw every removal of the type.
        var typeRemovals: [String: [Position]] = [:]
        var typeAdditions: [String: [Position]] = [:]
        for (position, changeset) in changesets.enumerated() {
            for (index, instruction) in changeset.instructions.enumerated() {
                switch instruction {
                case .removeType(let type):
                    typeRemovals[type, default: []].append((position, index))
                case .addType(let type):
                    typeAdditions[type.name, default: []].append((position, index))
                    if type.name == "Card" {
                        for property in type.properties {
                            additions[property.name, default: []].append((position, index))
                        }
                    }
                case .removeProperty(let type, let name) where type == "Card":
                    removals[name, default: []].append((position, index, nil))
                case .renameProperty(let type, let from, let to) where type == "Card":
                    removals[from, default: []].append((position, index, to))
                    additions[to, default: []].append((position, index))
                case .addProperty(let type, let property) where type == "Card":
                    additions[property.name, default: []].append((position, index))
                default:
                    break
                }
            }
        }
        // Copies of one removal (one migration run on several replicas): removals of a name, both renames to one new
        // name or both plain removals, made in different changesets that saw neither the other nor a copy of it, that
        // saw the same other removals of the name up to copies (one that saw a copy of a removal saw that removal).
        // Each removal's group, computed from the history: those a removal saw come before it in this order.
        func copyGroups(_ all: [Removal]) -> [Int] {
            func sees(_ a: Removal, _ b: Removal) -> Bool { covers(a.changeset, a.index, (b.changeset, b.index)) }
            let counts = all.map { removal in all.filter { sees(removal, $0) }.count }
            let order = all.indices.sorted { (counts[$0], $0) < (counts[$1], $1) }
            var groups = Array(repeating: -1, count: all.count)
            var seenGroups: [Int: Set<Int>] = [:]
            for index in order {
                let seen = Set(all.indices.filter { groups[$0] >= 0 && sees(all[index], all[$0]) }.map { groups[$0] })
                seenGroups[index] = seen
                let copied = all.indices.first { other in
                    groups[other] >= 0 && all[other].changeset != all[index].changeset
                        && all[other].renamedTo == all[index].renamedTo && !seen.contains(groups[other])
                        && seenGroups[other] == seen
                }
                groups[index] = copied.map { groups[$0] } ?? index
            }
            return groups
        }
        var removalGroups: [String: [Int]] = [:]
        for (name, all) in removals { removalGroups[name] = copyGroups(all) }
        // Where a write (or addition) lands, from the history itself: of the removals of its name it did not see, the
        // first ones (that saw no other of them) decide; a rename concurrent with a seen one to the same name is the
        // same rename; after following a rename, what that rename saw counts as seen.
        func target(of name: String, by writer: Position) -> String? {
            var name = name
            var viewer: [Position] = [writer]
            for _ in 0...removals.values.reduce(0, { $0 + $1.count }) {
                let all = removals[name] ?? []
                let isSeen = { (removal: Removal) in
                    viewer.contains { covers($0.changeset, $0.index, (removal.changeset, removal.index)) }
                }
                let groups = removalGroups[name] ?? []
                let seenGroups = Set(all.indices.filter { isSeen(all[$0]) }.map { groups[$0] })
                // Copies of a seen removal: the same rename, or the same plain removal, made elsewhere.
                let unseen = all.indices.filter { !isSeen(all[$0]) && !seenGroups.contains(groups[$0]) }.map { all[$0] }
                let first = unseen.filter { removal in
                    !unseen.contains { other in
                        (other.changeset, other.index) != (removal.changeset, removal.index)
                            && covers(removal.changeset, removal.index, (other.changeset, other.index))
                    }
                }
                guard let followed = first.first else { return name }
                guard let next = followed.renamedTo, first.allSatisfy({ $0.renamedTo == next }) else { return nil }
                name = next
                // From here on the renames' view decides, since they carry the value on.
                viewer = first.map { ($0.changeset, $0.index) }
            }
            return nil
        }
        if !removals.isEmpty {
            for (key, var history) in histories where key.type == "Card" {
                var sets: [String: [Write]] = [:]
                for (name, writes) in history.sets {
                    for write in writes {
                        if let landed = target(of: name, by: (write.changeset, write.index)) {
                            sets[landed, default: []].append(write)
                        }
                    }
                }
                history.sets = sets
                history.creates = history.creates.map { create in
                    func landed(_ fields: [FieldValue]) -> [FieldValue] {
                        fields.compactMap { field in
                            target(of: field.name, by: (create.changeset, create.index)).map {
                                FieldValue($0, field.value)
                            }
                        }
                    }
                    return (create.changeset, create.index, landed(create.explicit), landed(create.defaults))
                }
                var adds: [String: [(changeset: Int, index: Int, delta: Int64, base: Stamp)]] = [:]
                for (name, increments) in history.adds {
                    for increment in increments {
                        if let landed = target(of: name, by: (increment.changeset, increment.index)) {
                            adds[landed, default: []].append(increment)
                        }
                    }
                }
                history.adds = adds
                histories[key] = history
            }
        }
        // A removal of a type that the writer did not see counts as seen when it is a copy of one it saw: the same
        // migration run concurrently on another replica (each saw the same other removals of the type).
        var typeRemovalGroups: [String: [Int]] = [:]
        for (type, all) in typeRemovals {
            typeRemovalGroups[type] = copyGroups(all.map { ($0.changeset, $0.index, nil) })
        }
        func seesTypeRemovals(_ type: String, _ writer: Position) -> Bool {
            let all = typeRemovals[type] ?? []
            let groups = typeRemovalGroups[type] ?? []
            let seenGroups = Set(
                all.indices.filter { covers(writer.changeset, writer.index, all[$0]) }.map { groups[$0] })
            return groups.allSatisfy { seenGroups.contains($0) }
        }
        for (key, var history) in histories where typeRemovals[key.type] != nil {
            history.creates.removeAll { !seesTypeRemovals(key.type, ($0.changeset, $0.index)) }
            history.erases.removeAll { !seesTypeRemovals(key.type, $0) }
            for (name, writes) in history.sets {
                history.sets[name] = writes.filter { seesTypeRemovals(key.type, ($0.changeset, $0.index)) }
            }
            for (name, increments) in history.adds {
                history.adds[name] = increments.filter { seesTypeRemovals(key.type, ($0.changeset, $0.index)) }
            }
            histories[key] = history
        }
        let schema = replicas[0].schema
        for type in typeRemovals.keys.sorted() {
            let present = (typeAdditions[type] ?? []).contains { seesTypeRemovals(type, $0) }
            if present != (schema[type: type] != nil) {
                fail(
                    "reference model: type \(type) should be \(present ? "present" : "absent") (rule 8), replicas disagree"
                )
            }
        }
        if let card = schema[type: "Card"] {
            // An addition counts for the property it lands on, like a write.
            var landed: [String: Int] = [:]
            for (name, positions) in additions {
                for position in positions {
                    if let target = target(of: name, by: position) { landed[target, default: 0] += 1 }
                }
            }
            for name in Set(additions.keys).union(removals.keys).sorted() {
                let present = landed[name, default: 0] > 0
                if present != (card[property: name] != nil) {
                    fail(
                        "reference model: Card.\(name) should be \(present ? "present" : "absent") (rule 8), replicas disagree"
                    )
                }
            }
        }
        var exists: [Key: Bool] = [:]
        for (key, history) in histories {
            exists[key] = history.creates.contains { create in
                history.erases.allSatisfy { covers(create.changeset, create.index, $0) }
            }
        }
        for (key, history) in histories.sorted(by: {
            "\($0.key.type)\($0.key.primaryKey)" < "\($1.key.type)\($1.key.primaryKey)"
        }) {
            let stored =
                schema[type: key.type] == nil ? nil : try replicas[0].object(key.type, primaryKey: key.primaryKey)
            guard exists[key] == true else {
                if stored != nil {
                    fail("reference model: \(key.type)[\(key.primaryKey)] should be erased (rule 2), replicas hold it")
                }
                continue
            }
            guard let stored else {
                fail("reference model: \(key.type)[\(key.primaryKey)] should exist, replicas lack it")
                continue
            }
            guard let type = schema[type: key.type] else { continue }
            func alive(_ changeset: Int, _ index: Int) -> Bool {
                history.erases.allSatisfy { covers(changeset, index, $0) }
            }
            for property in type.properties where !property.isCollection && property.name != type.primaryKey {
                if case .embedded = property.kind { continue }
                var writes: [Write] = history.sets[property.name, default: []].filter { alive($0.changeset, $0.index) }
                for create in history.creates where alive(create.changeset, create.index) {
                    if let field = create.explicit.first(where: { $0.name == property.name }) {
                        writes.append(Write(changeset: create.changeset, index: create.index, value: field.value))
                    }
                }
                let winner = writes.max { a, b in
                    (changesets[a.changeset].stamp, a.index) < (changesets[b.changeset].stamp, b.index)
                }
                // What the property reads without a value.
                let unwritten =
                    property.defaultValue ?? (property.isOptional ? .null : ObjectRecord.zeroValue(property.kind))
                var value: Value
                var base = Stamp.zero
                if let winner {
                    value = winner.value
                    base = changesets[winner.changeset].stamp
                } else if let defaulted = history.creates.filter({ alive($0.changeset, $0.index) })
                    .compactMap({ $0.defaults.first { $0.name == property.name }?.value })
                    .max(by: { Self.encoding(of: $0).lexicographicallyPrecedes(Self.encoding(of: $1)) })
                {
                    // Two creates' defaults (the property was added with different defaults): the one whose encoding
                    // sorts last stands.
                    value = defaulted
                } else {
                    value = unwritten
                }
                // Increments count on the value they were made on; on a default, whichever default stands. Made on no
                // value at all (the object was created before the property was added), they count from the default.
                let sum = history.adds[property.name, default: []]
                    .filter { alive($0.changeset, $0.index) && $0.base == base }
                    .reduce(Int64(0)) { $0 &+ $1.delta }
                if case .int(let number) = value {
                    value = .int(number &+ sum)
                } else if value == .null, winner == nil, case .int(let number) = unwritten {
                    // No value written (a null default stored reads the same): the default, and the increments.
                    value = .int(number &+ sum)
                }
                if case .link(let target) = value, case .link(let targetType) = property.kind,
                    exists[Key(type: targetType, primaryKey: target)] != true
                {
                    value = .null  // rule 7
                }
                if property.kind == .scalar(.mixed) {
                    /// A mixed value's links to objects that do not exist read as null, at any depth (rule 7).
                    func resolved(_ value: Value) -> Value {
                        switch value {
                        case .typedLink(let type, let target):
                            exists[Key(type: type, primaryKey: target)] == true ? value : .null
                        case .list(let elements): .list(elements.map(resolved))
                        case .dictionary(let entries): .dictionary(entries.mapValues(resolved))
                        default: value
                        }
                    }
                    value = resolved(value)
                }
                if stored[property.name] != value {
                    fail(
                        "reference model: \(key.type)[\(key.primaryKey)].\(property.name) should be \(value), replicas hold \(stored[property.name])"
                    )
                }
            }
        }
    }

    /// A value's encoding, by which two defaults are ordered.
    static func encoding(of value: Value) -> [UInt8] {
        var writer = BinaryWriter()
        var names = NameTable.inline
        writer.value(value, &names)
        return writer.bytes
    }

    /// Jepsen-style list checks: no element appears twice, a list that never shrank holds every value inserted, and a
    /// set holds each value once and every value added to it and never removed.
    func checkLists() throws {
        for type in ["Card", "Board"] {
            for object in try replicas[0].objects(type) {
                let name = "\(type)[\(object.primaryKey)]"
                for property in ["tags", "labels"] {
                    guard let values = object[property].listValue else { continue }
                    let strings = values.compactMap(\.stringValue)
                    if Set(strings).count != strings.count {
                        fail("\(name).\(property) holds an element twice: \(strings)")
                    }
                    if !journal.mayHaveShrunk(name, property) {
                        let missing = (journal.listValues[name] ?? []).subtracting(strings)
                        // Values go to tags on cards and labels on boards; each list is checked for its own.
                        let relevant = missing.filter { _ in (type == "Card") == (property == "tags") }
                        if !relevant.isEmpty { fail("\(name).\(property) lost inserted values \(relevant.sorted())") }
                    }
                }
            }
        }
        // Sets: each value once; a value added and never removed, to an object never erased, is there.
        for object in try replicas[0].objects("Card") {
            let name = "Card[\(object.primaryKey)]"
            let flags = object["flags"].listValue?.compactMap(\.stringValue) ?? []
            if Set(flags).count != flags.count { fail("\(name).flags holds a value twice: \(flags)") }
            guard !journal.listsShrunk.contains(name) else { continue }
            let kept = (journal.setAdds[name] ?? []).filter { !journal.setRemovals.contains("\(name).flags.\($0)") }
            let missing = kept.subtracting(flags)
            if !missing.isEmpty { fail("\(name).flags lost values added and never removed: \(missing.sorted())") }
            // Dictionaries: a key set and never erased is there.
            for property in ["counts", "places"] {
                let keys = Set(object[property].dictionaryValue?.keys.map { $0 } ?? [])
                let setKeys = (journal.dictionarySets["\(name).\(property)"] ?? []).filter {
                    !journal.dictionaryErasures.contains("\(name).\(property).\($0)")
                }
                let lost = setKeys.subtracting(keys)
                if !lost.isEmpty { fail("\(name).\(property) lost keys set and never erased: \(lost.sorted())") }
            }
        }
    }
}
