import Foundation
import Testing
import TributaryLog
import TributaryModel
import TributaryStorage
import TributaryTestSupport
import TributaryViews

@testable import Tributary

/// App replicas that sync through a relay, which adopts their changesets into its own sequence
/// (docs/MergeSemantics.md, "Relays").
@Suite("Relays and bounded causal metadata")
struct RelayTests {
    /// What the app `app` wrote that `relay` lacks, uploaded to it and adopted there.
    static func upload(_ cluster: Cluster, app: Int, to relay: Int) throws {
        let uploads = try cluster[app].changesets(
            missingFrom: cluster[relay].versionVector, origins: [cluster[app].replicaID])
        try cluster[relay].adopt(uploads)
    }

    /// Replica 0 is the relay; the others are apps that talk to it only.
    func sync(_ cluster: Cluster, app: Int) throws {
        try Self.upload(cluster, app: app, to: 0)
        try cluster[app].integrate(try cluster[0].changesets(missingFrom: cluster[app].versionVector))
    }

    @Test("Adopted changesets keep their origin, stamp and author; contexts name the relay, not the apps")
    func adoptionRewritesIdentity() throws {
        let cluster = try Cluster(3, schema: MergeSemanticsTests.schema)
        try cluster[1].write { try $0.create("Task", ["_id": "t", "title": "from app 1"]) }
        try cluster[1].write { try $0.update("Task", primaryKey: .string("t"), ["notes": "offline edit"]) }
        try sync(cluster, app: 1)
        try sync(cluster, app: 2)
        try cluster[2].write { try $0.increment(["count"], of: "Task", primaryKey: .string("t"), by: 2) }
        try sync(cluster, app: 2)
        try sync(cluster, app: 1)

        let log = try cluster[0].changesets(missingFrom: VersionVector())
        let adopted = log.filter { $0.relay != nil }
        #expect(adopted.count == 5)  // app 1: schema, create, update; app 2: schema, increment
        let apps: Set<ReplicaID> = [cluster[1].replicaID, cluster[2].replicaID]
        for changeset in log {
            #expect(!changeset.context.entries.contains { apps.contains($0.replica) }, "\(changeset.dot) names an app")
            #expect(!changeset.contextExtras.contains { apps.contains($0.origin) })
        }
        #expect(Set(adopted.map(\.origin)) == apps)
        #expect(adopted.allSatisfy { $0.relay?.origin == cluster[0].replicaID })
        // The relay's vector counts only the relay; each app's counts the relay and itself.
        #expect(cluster[0].versionVector.entries.map(\.replica) == [cluster[0].replicaID])
        for app in 1...2 {
            #expect(
                Set(cluster[app].versionVector.entries.map(\.replica)) == [
                    cluster[0].replicaID, cluster[app].replicaID,
                ])
        }
        // Every replica holds the same object, each app applied its own changesets once (the counter is 2, not 4).
        for replica in cluster.replicas {
            let task = try #require(try replica.object("Task", primaryKey: .string("t")))
            #expect(task["notes"] == "offline edit")
            #expect(task["count"] == 2)
            #expect(try replica.verify().passed)
        }
        #expect(try Set(cluster.replicas.map { try $0.recordsDigest() }).count == 1)
    }

    @Test("Rule 2 through a relay: an erase by one app beats a concurrent edit by another")
    func eraseWinsAcrossApps() throws {
        let cluster = try Cluster(3, schema: MergeSemanticsTests.schema)
        try cluster[1].write { try $0.create("Task", ["_id": "t"]) }
        try sync(cluster, app: 1)
        try sync(cluster, app: 2)
        cluster.clocks[2].advance(byMilliseconds: 1000)
        try cluster[1].write { _ = try $0.delete("Task", primaryKey: .string("t")) }
        try cluster[2].write { try $0.update("Task", primaryKey: .string("t"), ["title": "edited later"]) }
        for _ in 0..<2 {
            try sync(cluster, app: 1)
            try sync(cluster, app: 2)
        }
        for replica in cluster.replicas { #expect(try replica.object("Task", primaryKey: .string("t")) == nil) }
        // And a create after seeing the erase revives it everywhere.
        try cluster[2].write { try $0.create("Task", ["_id": "t", "title": "again"]) }
        for _ in 0..<2 {
            try sync(cluster, app: 2)
            try sync(cluster, app: 1)
        }
        for replica in cluster.replicas {
            #expect(try replica.object("Task", primaryKey: .string("t"))?["title"] == "again")
        }
        #expect(try Set(cluster.replicas.map { try $0.recordsDigest() }).count == 1)
    }

    @Test("An app's offline run of changesets is adopted in order, with its earlier ones as extra context dots")
    func offlineRunsGetExtraDots() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        try sync(cluster, app: 1)
        for index in 0..<5 { try cluster[1].write { try $0.create("Person", ["_id": .string("p\(index)")]) } }
        // Uploaded out of order and in pieces: the relay adopts them in the app's order.
        let uploads = try cluster[1].changesets(missingFrom: cluster[0].versionVector, origins: [cluster[1].replicaID])
        #expect(uploads.count == 5)
        #expect(try cluster[0].adopt(Array(uploads.suffix(2))).waiting == 2)
        let report = try cluster[0].adopt(Array(uploads.prefix(3)))
        #expect(report.integrated.count == 5)
        let adopted = try cluster[0].changesets(missingFrom: VersionVector()).filter {
            $0.origin == cluster[1].replicaID
        }
        #expect(adopted.map(\.originSequence) == [1, 2, 3, 4, 5, 6])  // its schema changeset, then the five
        // The four before it were adopted after the app last downloaded; this relay's own sequence orders them first,
        // so no extra dot names them.
        #expect(adopted.allSatisfy { $0.contextExtras.isEmpty })
        try cluster[1].integrate(try cluster[0].changesets(missingFrom: cluster[1].versionVector))
        #expect(try cluster[1].recordsDigest() == cluster[0].recordsDigest())
        #expect(try cluster[1].verify().passed)
    }

    @Test("A long offline run costs one extra dot per changeset at most, and each relay adopts it in linear work")
    func longOfflineRunStaysSmall() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        try sync(cluster, app: 1)
        let count = 600
        for index in 0..<count { try cluster[1].write { try $0.create("Person", ["_id": .string("p\(index)")]) } }
        let before = try cluster[0].logStatistics()
        try sync(cluster, app: 1)
        let adopted = try cluster[0].changesets(missingFrom: VersionVector()).filter {
            $0.origin == cluster[1].replicaID
        }
        #expect(adopted.count == count + 1)
        #expect(adopted.allSatisfy { $0.contextExtras.isEmpty })
        // About 75 bytes each, encoded. Listing every earlier changeset of the run as an extra dot made them 1.8 MB.
        let added = try cluster[0].logStatistics().uncompressedBytes - before.uncompressedBytes
        #expect(added < 150 * count, "the relay's log grew by \(added) bytes for \(count) changesets")
        #expect(try cluster[1].recordsDigest() == cluster[0].recordsDigest())
    }

    @Test(
        "An app that moves to another relay mid-run: the second relay names the first's adoption, and peers wait for it"
    )
    func runAcrossTwoRelays() throws {
        // 0 and 1 are relays (peers of each other), 2 is a peer of both, 3 is an app.
        let cluster = try Cluster(4, schema: MergeSemanticsTests.schema)
        let app = cluster[3]
        func upload(to relay: Int) throws { try Self.upload(cluster, app: 3, to: relay) }
        try upload(to: 0)
        try app.integrate(try cluster[0].changesets(missingFrom: app.versionVector))
        // Peer 2 holds what the app last downloaded and relay 1's own first changeset, not the run that follows.
        try cluster.send(from: 0, to: 2)
        try cluster.send(from: 1, to: 2)
        for index in 0..<3 { try app.write { try $0.create("Person", ["_id": .string("a\(index)")]) } }
        try upload(to: 0)
        // Relay 1 gets relay 0's log, then the rest of the run, which the app uploads to it.
        try cluster.send(from: 0, to: 1)
        for index in 0..<3 {
            try app.write { try $0.update("Person", primaryKey: .string("a\(index)"), ["name": "moved"]) }
        }
        try upload(to: 1)
        let second = try cluster[1].changesets(missingFrom: cluster[0].versionVector).filter {
            $0.origin == app.replicaID
        }
        #expect(second.count == 3)
        // The first of them follows a changeset relay 0 adopted: it names that adoption, and only that one.
        let firstRun = try cluster[0].changesets(missingFrom: VersionVector()).filter { $0.origin == app.replicaID }
        let lastAtRelay0 = try #require(firstRun.last?.relay)
        if !second[0].context.includes(lastAtRelay0) { #expect(second[0].contextExtras == [lastAtRelay0]) }
        #expect(second.dropFirst().allSatisfy { $0.contextExtras.isEmpty })

        // Peer 2 hears from relay 1 first. The second run's context is met; its extra dot is not, so it waits for the
        // first run (its updates would otherwise find no objects), then both integrate.
        #expect(cluster[2].versionVector.includes(second[0].context))
        #expect(cluster[2].versionVector[cluster[1].replicaID] == second[0].causalDot.sequence - 1)
        let waiting = try cluster[2].integrate(second)
        #expect(waiting.integrated.isEmpty)
        #expect(waiting.waiting == 3)
        try cluster.send(from: 0, to: 2)
        try cluster.send(from: 1, to: 2)
        #expect(try cluster[2].pendingDots().isEmpty)
        try cluster.send(from: 1, to: 0)
        try app.integrate(try cluster[0].changesets(missingFrom: app.versionVector))
        for replica in cluster.replicas {
            #expect(try replica.object("Person", primaryKey: .string("a2"))?["name"] == "moved")
            #expect(try replica.verify().passed)
        }
        #expect(try Set(cluster.replicas.map { try $0.recordsDigest() }).count == 1)
    }

    @Test("A changeset an app uploaded to two relays is seen through either copy, on every replica alike")
    func oneChangesetAdoptedByTwoRelays() throws {
        // 0 and 1 are relays, 2 is a peer that writes, 3 is an app.
        let cluster = try Cluster(4, schema: MergeSemanticsTests.schema)
        let app = cluster[3]
        func upload(to relay: Int) throws { try Self.upload(cluster, app: 3, to: relay) }
        func exchange(_ pairs: [(Int, Int)]) throws {
            for (source, target) in pairs { try cluster.send(from: source, to: target) }
        }
        try upload(to: 0)
        try exchange([(0, 1), (1, 0)])
        try cluster[2].write { try $0.create("Task", ["_id": "t", "title": "first"]) }
        try exchange([(2, 0), (2, 1), (0, 2), (1, 2)])
        try app.integrate(try cluster[0].changesets(missingFrom: app.versionVector))
        cluster.advanceClocks(byMilliseconds: 1000)
        // The app erases t and uploads the erase to both relays before it hears of either adoption.
        try app.write { _ = try $0.delete("Task", primaryKey: .string("t")) }
        let erase = Dot(origin: app.replicaID, sequence: app.versionVector[app.replicaID])
        try upload(to: 0)
        try upload(to: 1)
        // The peer hears of the erase from relay 0 and creates t again, after it: t is revived (rule 3).
        try exchange([(0, 2)])
        cluster.advanceClocks(byMilliseconds: 1000)
        try cluster[2].write { try $0.create("Task", ["_id": "t", "title": "revived"]) }
        // Relay 0 records relay 1's copy of the erase before the peer's create arrives. It used to keep only the
        // latest copy, which the peer had not seen: the create counted as concurrent with the erase, and relay 0 alone
        // kept t erased, for good.
        try exchange([(1, 0), (2, 0)])
        for _ in 0..<3 { try exchange([(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)]) }
        try app.integrate(try cluster[0].changesets(missingFrom: app.versionVector))
        for relay in 0...1 {
            let copies = try cluster[relay].environment.read {
                try cluster[relay].log.causalDots(ofOrigin: erase, in: $0)
            }
            #expect(
                Set(copies.map(\.origin)) == [cluster[0].replicaID, cluster[1].replicaID],
                "relay \(relay) holds \(copies)")
        }
        for (index, replica) in cluster.replicas.enumerated() {
            #expect(try replica.object("Task", primaryKey: .string("t"))?["title"] == "revived", "replica \(index)")
            #expect(try replica.verify().passed, "replica \(index)")
        }
        #expect(try Set(cluster.replicas.map { try $0.recordsDigest() }).count == 1)
        let before = try cluster[0].viewDigest()
        try cluster[0].rebuildViews()
        #expect(try cluster[0].viewDigest() == before)
    }

    @Test(
        "Two relays that adopted two apps' uploads in opposite orders: a peer that hears the later copies first integrates all"
    )
    func crossedCopiesDoNotDeadlock() throws {
        // 0 and 1 are relays, 2 is a peer, 3 and 4 are apps.
        let cluster = try Cluster(5, schema: MergeSemanticsTests.schema)
        let peer = cluster[2]
        try cluster[3].write { try $0.create("Task", ["_id": "a", "title": "from app 3"]) }
        try cluster[4].write { try $0.create("Task", ["_id": "b", "title": "from app 4"]) }
        let (a, b) = (cluster[3].replicaID, cluster[4].replicaID)
        let creates = [
            "a": Dot(origin: a, sequence: try cluster[3].versionVector[a]),
            "b": Dot(origin: b, sequence: try cluster[4].versionVector[b]),
        ]
        // Neither app hears of an adoption: each uploads to both relays, which adopt them in opposite orders.
        try Self.upload(cluster, app: 3, to: 0)
        try Self.upload(cluster, app: 4, to: 0)
        try Self.upload(cluster, app: 4, to: 1)
        try Self.upload(cluster, app: 3, to: 1)
        let fromRelay0 = try cluster[0].changesets(missingFrom: peer.versionVector)
        let fromRelay1 = try cluster[1].changesets(missingFrom: peer.versionVector)
        // The later copies arrive first (messages reordered): each waits for its relay's earlier one, which is the
        // other app's changeset, waiting under the other relay's copy.
        #expect(try peer.integrate(fromRelay0.filter { $0.origin == b }).integrated.isEmpty)
        #expect(try peer.integrate(fromRelay1.filter { $0.origin == a }).integrated.isEmpty)
        // One full export of each relay, in either form, lets every copy in. The first copies used to be dropped as
        // duplicates of the waiting ones, which then waited for them for ever: both relays' lanes stalled, and
        // everything later from either relay with them.
        try peer.integrate(
            encoded: try cluster[0].encodedChangesets(
                missingFrom: peer.versionVector, excluding: try peer.pendingDots()))
        try peer.integrate(
            try cluster[1].changesets(missingFrom: peer.versionVector, excluding: try peer.pendingDots()))
        #expect(try peer.pendingDots().isEmpty)
        var both = try cluster[0].versionVector
        both.formUnion(try cluster[1].versionVector)
        let peerVector = try peer.versionVector
        #expect(peerVector.removing(peer.replicaID) == both, "\(peerVector) \(both)")
        for (key, relay) in [("a", 0), ("b", 1)] {
            #expect(try peer.object("Task", primaryKey: .string(key)) != nil, "\(key)")
            let copies = try peer.environment.read { try peer.log.causalDots(ofOrigin: creates[key]!, in: $0) }
            #expect(
                Set(copies.map(\.origin)) == [cluster[0].replicaID, cluster[1].replicaID],
                "\(key) via relay \(relay): \(copies)")
        }
        #expect(try peer.verify().passed)
        // The relays exchange, and the apps hear from them: every replica holds the same.
        try cluster.send(from: 0, to: 1)
        try cluster.send(from: 1, to: 0)
        for app in 3...4 {
            for relay in 0...1 {
                try cluster[app].integrate(try cluster[relay].changesets(missingFrom: cluster[app].versionVector))
            }
        }
        let digests = try cluster.replicas.map { try $0.recordsDigest() }
        #expect(Set(digests).count == 1, "\(digests)")
    }

    @Test("A relay whose app's upload waits takes another relay's copy of it, and does not adopt it again")
    func uploadWaitsBesideAnotherRelaysCopy() throws {
        // 0 and 1 are relays, 2 is an app.
        let cluster = try Cluster(3, schema: MergeSemanticsTests.schema)
        let app = cluster[2]
        try app.write { try $0.create("Task", ["_id": "t", "title": "1"]) }
        try app.write { try $0.update("Task", primaryKey: .string("t"), ["title": "2"]) }
        let last = Dot(origin: app.replicaID, sequence: app.versionVector[app.replicaID])
        // Relay 1 gets the app's last changeset alone: it waits for the one before.
        let uploads = try app.changesets(missingFrom: cluster[1].versionVector, origins: [app.replicaID])
        #expect(try cluster[1].adopt([uploads.last!]).waiting == 1)
        // Relay 0 adopts the whole run and sends it to relay 1: its copy of the last changeset waits beside the
        // upload until the one before is in, then comes in; the upload is then a duplicate.
        try Self.upload(cluster, app: 2, to: 0)
        let ownSequence = try cluster[1].versionVector[cluster[1].replicaID]
        try cluster.send(from: 0, to: 1)
        #expect(try cluster[1].pendingDots().isEmpty)
        #expect(try cluster[1].versionVector[cluster[1].replicaID] == ownSequence)
        let copies = try cluster[1].environment.read { try cluster[1].log.causalDots(ofOrigin: last, in: $0) }
        #expect(copies.map(\.origin) == [cluster[0].replicaID])
        #expect(try cluster[1].object("Task", primaryKey: .string("t"))?["title"] == "2")
        #expect(try cluster[1].verify().passed)
    }

    @Test("verify compares the log's adoptions and relay dots with what its entries hold, in memory and on disk")
    func verifyChecksAdoptions() throws {
        // 0 and 1 are relays, 2 an app whose changeset both adopt; relay 0 then holds both copies.
        let cluster = try Cluster(3, schema: MergeSemanticsTests.schema)
        let relay = cluster[0]
        try cluster[2].write { try $0.create("Task", ["_id": "t"]) }
        let written = Dot(origin: cluster[2].replicaID, sequence: try cluster[2].versionVector[cluster[2].replicaID])
        try Self.upload(cluster, app: 2, to: 0)
        try Self.upload(cluster, app: 2, to: 1)
        try cluster.send(from: 1, to: 0)
        let copies = try relay.environment.read { try relay.log.causalDots(ofOrigin: written, in: $0) }
        #expect(copies.count == 2)
        func problems() throws -> [String?] {
            [try relay.verify(recordsInMemory: .max).firstProblem, try relay.verify(recordsInMemory: 1).firstProblem]
        }
        #expect(try problems() == [nil, nil])
        let key = ChangesetLog.originKey(written)
        let damages: [(String, (WriteTransaction) throws -> Void)] = [
            (
                "are [\(copies[0])], but its entries hold the copies \(copies)",
                { txn in
                    try txn.put(relay.log.adoptions, key: key, value: ChangesetLog.originKey(copies[0]))
                }
            ),
            (
                "are \(Array(copies.reversed())), but its entries hold the copies \(copies)",
                { txn in
                    try txn.put(relay.log.adoptions, key: key, value: copies.reversed().flatMap(ChangesetLog.originKey))
                }
            ),
            (
                "name changeset \(Dot(origin: written.origin, sequence: 99)), of which no entry holds a relay's copy",
                { txn in
                    try txn.put(
                        relay.log.adoptions, key: ChangesetLog.originKey(Dot(origin: written.origin, sequence: 99)),
                        value: key)
                }
            ),
            (
                "the origin index gives relay dot \(copies[1]) no entry",
                { txn in
                    _ = try txn.delete(relay.log.origins, key: ChangesetLog.originKey(copies[1]))
                }
            ),
        ]
        for (words, damage) in damages {
            let saved = try relay.environment.read { txn in
                (
                    try txn.get(relay.log.adoptions, key: key),
                    try txn.get(relay.log.origins, key: ChangesetLog.originKey(copies[1]))
                )
            }
            try relay.environment.write { try damage($0) }
            for problem in try problems() {
                #expect(problem?.contains(words) == true, "\(String(describing: problem))")
            }
            try relay.environment.write { txn in
                _ = try txn.delete(
                    relay.log.adoptions, key: ChangesetLog.originKey(Dot(origin: written.origin, sequence: 99)))
                try txn.put(relay.log.adoptions, key: key, value: try #require(saved.0))
                try txn.put(relay.log.origins, key: ChangesetLog.originKey(copies[1]), value: try #require(saved.1))
            }
            #expect(try problems() == [nil, nil])
        }
    }

    /// A cluster where replica 3 holds app 1's changesets only through relay 0's copies, while peer 2 holds them as
    /// the app sent them (the app syncs with the relay and, directly, with the peer).
    static func heldThroughRelayAndPlainly() throws -> Cluster {
        // 0 is a relay, 1 an app, 2 a peer the app also syncs with directly, 3 and 4 peers.
        let cluster = try Cluster(5, schema: MergeSemanticsTests.schema)
        try cluster[1].write { try $0.create("Task", ["_id": "t", "title": "first"]) }
        try upload(cluster, app: 1, to: 0)
        try cluster.send(from: 0, to: 3)
        try cluster.send(from: 1, to: 2)
        #expect(try cluster[3].versionVector[cluster[1].replicaID] == 0)
        #expect(try cluster[3].object("Task", primaryKey: .string("t"))?["title"] == "first")
        return cluster
    }

    /// Syncs every pair, then expects nothing waiting, every replica verified, one state, and nothing left to send
    /// (what a replica holds through a relay's copy is not sent to it again as the app wrote it).
    static func expectInStepAfterSync(_ cluster: Cluster) throws {
        try cluster.syncAll()
        for (index, replica) in cluster.replicas.enumerated() {
            #expect(try replica.pendingDots().isEmpty, "replica \(index)")
            #expect(try replica.verify().passed, "replica \(index)")
        }
        #expect(try Set(cluster.replicas.map { try $0.recordsDigest() }).count == 1)
        #expect(try cluster.unsent() == [])
    }

    @Test("A changeset held through a relay's copy, then sent as its app wrote it, does not hold up the app's next one")
    func plainCopyAfterRelayCopy() throws {
        let cluster = try Self.heldThroughRelayAndPlainly()
        // The app writes again, and only the peer hears of it: the peer sends the app's earlier changesets too, which
        // replica 3 holds already (through the relay), and then the new one, which needs them.
        try cluster[1].write { try $0.update("Task", primaryKey: .string("t"), ["title": "second"]) }
        try cluster.send(from: 1, to: 2)
        try cluster.send(from: 2, to: 3)
        #expect(try cluster[3].pendingDots().isEmpty)
        #expect(try cluster[3].object("Task", primaryKey: .string("t"))?["title"] == "second")
        // And from replica 3 to one that syncs with it alone.
        try cluster.send(from: 3, to: 4)
        #expect(try cluster[4].pendingDots().isEmpty)
        #expect(try cluster[4].object("Task", primaryKey: .string("t"))?["title"] == "second")
        try Self.expectInStepAfterSync(cluster)
    }

    @Test(
        "A peer's changeset that names an app's changeset by its own dot is integrated where a relay's copy of it is held"
    )
    func contextNamesPlainDotHeldThroughRelay() throws {
        let cluster = try Self.heldThroughRelayAndPlainly()
        // The peer writes having seen the app's changesets as the app sent them: its context names them by their own
        // dots, which replica 3's vector does not count.
        cluster.advanceClocks(byMilliseconds: 1000)
        try cluster[2].write { try $0.update("Task", primaryKey: .string("t"), ["notes": "from the peer"]) }
        try cluster.send(from: 2, to: 3)
        #expect(try cluster[3].pendingDots().isEmpty)
        #expect(try cluster[3].object("Task", primaryKey: .string("t"))?["notes"] == "from the peer")
        try Self.expectInStepAfterSync(cluster)
    }

    @Test(
        "An app's upload whose context names another app's changeset by its own dot is adopted by the relay that adopted it"
    )
    func uploadNamesPlainDotTheRelayAdopted() throws {
        let cluster = try Self.heldThroughRelayAndPlainly()
        // Replica 2, the peer, is an app of the relay too: it writes having seen app 1's changesets by their own dots,
        // and uploads. The relay holds them as its own adoptions only.
        cluster.advanceClocks(byMilliseconds: 1000)
        try cluster[2].write { try $0.update("Task", primaryKey: .string("t"), ["notes": "uploaded"]) }
        let report = try cluster[0].adopt(
            try cluster[2].changesets(missingFrom: cluster[0].versionVector, origins: [cluster[2].replicaID]))
        #expect(report.waiting == 0)
        #expect(try cluster[0].pendingDots().isEmpty)
        #expect(try cluster[0].object("Task", primaryKey: .string("t"))?["notes"] == "uploaded")
        try Self.expectInStepAfterSync(cluster)
    }

    @Test("An export leaves out an app's changeset, as written, that the other replica holds pending as a relay's copy")
    func exportExcludesPendingRelayCopyOfPlainChangeset() throws {
        // 0 is a relay, 1 an app, 2 a peer the app syncs with directly, 3 a peer that hears from the relay first.
        let cluster = try Cluster(4, schema: MergeSemanticsTests.schema)
        try cluster[1].write { try $0.create("Task", ["_id": "t", "title": "first"]) }
        let last = Dot(origin: cluster[1].replicaID, sequence: try cluster[1].versionVector[cluster[1].replicaID])
        try cluster.send(from: 1, to: 2)
        try Self.upload(cluster, app: 1, to: 0)
        try cluster.send(from: 0, to: 2)  // the peer records the relay's adoptions of what it holds as written
        // Replica 3 gets the relay's copy of the app's last changeset alone: it waits for the relay's earlier ones.
        let copy = try #require(try cluster[0].changesets(missingFrom: cluster[3].versionVector).last)
        #expect(copy.dot == last && copy.relay != nil)
        #expect(try cluster[3].integrate([copy]).waiting == 1)
        let missing = try cluster[2].changesets(
            missingFrom: cluster[3].versionVector, excluding: try cluster[3].pendingDots())
        #expect(!missing.contains { $0.dot == last }, "\(missing.map(\.causalDot))")
        try cluster[3].integrate(missing)
        #expect(try cluster[3].pendingDots().isEmpty)
        #expect(try cluster[3].object("Task", primaryKey: .string("t"))?["title"] == "first")
        #expect(try cluster[3].verify().passed)
    }

    @Test("Damaged adoptions cost an export only duplicates: the changesets they would leave out are sent")
    func damagedAdoptionsExportDuplicates() throws {
        let cluster = try Self.heldThroughRelayAndPlainly()
        try cluster.send(from: 0, to: 2)  // the peer records the relay's adoptions of what it holds as written
        let app = cluster[1].replicaID
        let first = Dot(origin: app, sequence: 1)
        let peer = cluster[2]
        #expect(try peer.environment.read { try peer.log.causalDots(ofOrigin: first, in: $0) }.count == 1)
        #expect(try peer.changesets(missingFrom: cluster[3].versionVector).filter { $0.origin == app }.isEmpty)
        try peer.environment.write { try $0.put(peer.log.adoptions, key: ChangesetLog.originKey(first), value: [9]) }
        let missing = try peer.changesets(missingFrom: cluster[3].versionVector)
        #expect(missing.map(\.dot).contains(first), "\(missing.map(\.dot))")
        let report = try cluster[3].integrate(missing)
        // Replica 3 holds them through the relay's copies: duplicates, and nothing of the app's is applied twice.
        #expect(report.duplicates > 0 && !report.integrated.contains { $0.origin == app }, "\(report)")
        #expect(try peer.verify().firstProblem?.contains("adoptions of changeset \(first) are damaged") == true)
    }

    @Test("Damaged adoptions stop an integration that needs them, naming the damage, instead of merging as if unseen")
    func damagedAdoptionsStopTheMerge() throws {
        // 0 is a relay, 1 and 2 peers, 3 an app.
        let cluster = try Cluster(4, schema: MergeSemanticsTests.schema)
        try cluster[3].write { try $0.create("Task", ["_id": "t", "title": "first"]) }
        try Self.upload(cluster, app: 3, to: 0)
        try cluster.deliver([(3, [0]), (1, [0]), (2, [0])])
        cluster.advanceClocks(byMilliseconds: 1000)
        // The app erases t; the peers hold the erase through the relay's copy.
        try cluster[3].write { _ = try $0.delete("Task", primaryKey: .string("t")) }
        let erase = Dot(origin: cluster[3].replicaID, sequence: try cluster[3].versionVector[cluster[3].replicaID])
        try Self.upload(cluster, app: 3, to: 0)
        try cluster.deliver([(1, [0]), (2, [0])])
        // Peer 2 creates t again after the erase: its context names the relay's copy, so a replica finds that it saw
        // the erase through the adoptions, and revives t (rule 3).
        cluster.advanceClocks(byMilliseconds: 1000)
        try cluster[2].write { try $0.create("Task", ["_id": "t", "title": "revived"]) }
        let create = Dot(origin: cluster[2].replicaID, sequence: try cluster[2].versionVector[cluster[2].replicaID])
        let peer = cluster[1]
        let key = ChangesetLog.originKey(erase)
        let saved = try #require(try peer.environment.read { try $0.get(peer.log.adoptions, key: key) })
        try peer.environment.write { try $0.put(peer.log.adoptions, key: key, value: [1, 2, 3]) }
        let vector = try peer.versionVector
        // Read as "not adopted", the create counted as concurrent with the erase: t stayed erased here alone.
        do {
            try cluster.send(from: 2, to: 1)
            Issue.record("the integration merged past damaged adoptions")
        } catch let error as TributaryError {
            #expect(error.code == .corrupted, "\(error.code)")
            #expect(error.message.contains("adoptions of changeset \(erase) are damaged: 3 bytes"), "\(error.message)")
        }
        #expect(try peer.versionVector == vector)
        #expect(try peer.object("Task", primaryKey: .string("t")) == nil)
        // In memory, and replayed into scratch views as a large replica is.
        for problem in [
            try peer.verify(recordsInMemory: .max).firstProblem, try peer.verify(recordsInMemory: 1).firstProblem,
        ] {
            #expect(
                problem?.contains("adoptions of changeset \(erase) are damaged: 3 bytes") == true,
                "\(String(describing: problem))")
        }
        // Repaired (restored from a backup, say), the same changeset comes in and the replicas agree.
        try peer.environment.write { try $0.put(peer.log.adoptions, key: key, value: saved) }
        try cluster.syncAll()
        for (index, replica) in cluster.replicas.enumerated() {
            #expect(try replica.object("Task", primaryKey: .string("t"))?["title"] == "revived", "replica \(index)")
            #expect(try replica.verify().passed, "replica \(index)")
        }
        #expect(try Set(cluster.replicas.map { try $0.recordsDigest() }).count == 1)
        // Damaged again, now that the log holds the create: a replay decides with the adoptions of the entries it
        // replayed, not with the stored ones, so it replays the whole log, and the check of the stored adoptions that
        // follows names the damage, in memory and through scratch views alike.
        try peer.environment.write { try $0.put(peer.log.adoptions, key: key, value: [1, 2, 3]) }
        #expect(try peer.changesets(missingFrom: VersionVector()).contains { $0.dot == create })
        let changesets = try peer.inspection.logStatistics().changesets
        let scratch = TemporaryDirectory("verify")
        for report in [
            try peer.verify(recordsInMemory: .max),
            try peer.verify(rebuildingIn: scratch.appending("views"), recordsInMemory: 1),
        ] {
            #expect(
                report.firstProblem?.contains("adoptions of changeset \(erase) are damaged: 3 bytes") == true,
                "\(report)")
            #expect(report.changesetsChecked == changesets, "\(report)")
        }
    }

    @Test("Causal metadata per changeset stays bounded with 1,000 writing apps through one relay")
    func metadataStaysBounded() throws {
        let measured = try RelayTests.metadataBytes(apps: 1000)
        print(
            "1,000 apps: \(measured.adoptedBytes) bytes of causal metadata per changeset through a relay; "
                + "\(measured.directBytes) bytes when every app is a peer")
        #expect(measured.adoptedBytes <= 64)
        #expect(measured.directBytes >= 1000 * 9)
    }

    @Test(
        "A relay whose stored vector counts the last number of its own fails to adopt, naming the damage, without a trap"
    )
    func damagedVectorFailsAdoption() throws {
        let directory = TemporaryDirectory("relay-damaged")
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.replicaID = ReplicaID(rawValue: 1)
        let path = directory.appending("relay")
        do {
            let relay = try Replica.open(
                directory: path, schema: MergeSemanticsTests.schema, configuration: configuration)
            try relay.environment.write { txn in
                var writer = BinaryWriter()
                writer.varint(1)
                writer.fixed64(1)
                writer.varint(UInt64.max)
                try txn.put(relay.views.meta, key: Array("versionVector".utf8), value: writer.bytes)
            }
            relay.close()
        }
        let relay = try Replica.open(directory: path, schema: MergeSemanticsTests.schema, configuration: configuration)
        defer { relay.close() }
        let upload = Changeset(
            origin: ReplicaID(rawValue: 1_000), originSequence: 1, time: HybridTime(milliseconds: 1_700_000_000_000),
            context: VersionVector(), schemaVersion: 1,
            instructions: [.create(type: "Person", primaryKey: .string("p"), fields: [], defaults: [])])
        #expect {
            try relay.adopt([upload])
        } throws: { error in
            (error as? TributaryError)?.code == .corrupted
                && (error as? TributaryError)?.message.contains("version vector") == true
        }
        #expect(try relay.object("Person", primaryKey: .string("p")) == nil)
    }

    /// Encoded bytes of causal metadata (context and extras) of the last changeset, after `apps` apps each wrote one
    /// changeset: through a relay that adopts them, and integrated directly as peers.
    static func metadataBytes(apps: Int) throws -> (adoptedBytes: Int, directBytes: Int) {
        let directory = TemporaryDirectory("relay")
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.replicaID = ReplicaID(rawValue: 1)
        let relay = try Replica.open(
            directory: directory.appending("relay"), schema: MergeSemanticsTests.schema, configuration: configuration)
        configuration.replicaID = ReplicaID(rawValue: 2)
        let peer = try Replica.open(
            directory: directory.appending("peer"), schema: MergeSemanticsTests.schema, configuration: configuration)
        let base = HybridTime(milliseconds: 1_700_000_000_000)
        for app in 0..<apps {
            let id = ReplicaID(rawValue: 1_000 + UInt64(app))
            // Each app downloaded the relay's log, then wrote one changeset.
            let changeset = Changeset(
                origin: id, originSequence: 1, time: HybridTime(rawValue: base.rawValue + UInt64(app) << 16),
                context: relay.versionVector, schemaVersion: 1,
                instructions: [.create(type: "Person", primaryKey: .string("p\(app)"), fields: [], defaults: [])])
            try relay.adopt([changeset])
            var direct = changeset
            direct.context = peer.versionVector
            try peer.integrate([direct])
        }
        func metadata(_ changeset: Changeset) -> Int {
            9 * changeset.context.entries.count + 9 * changeset.contextExtras.count
        }
        // The next local write on each side carries the replica's whole vector as its context.
        try relay.write { try $0.create("Person", ["_id": "last"]) }
        try peer.write { try $0.create("Person", ["_id": "last"]) }
        let relayLast = try relay.changeset(at: relay.lastLocalSequence)
        let peerLast = try peer.changeset(at: peer.lastLocalSequence)
        return (metadata(relayLast), metadata(peerLast))
    }
}
