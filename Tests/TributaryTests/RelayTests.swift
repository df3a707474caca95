import Foundation
import Testing
@testable import Tributary
import TributaryLog
import TributaryModel
import TributaryStorage
import TributaryTestSupport
import TributaryViews

/// App replicas that sync through a relay, which adopts their changesets into its own sequence (DESIGN.md).
@Suite("Relays and bounded causal metadata")
struct RelayTests {
    /// What the app `app` wrote that `relay` lacks, uploaded to it and adopted there.
    static func upload(_ cluster: Cluster, app: Int, to relay: Int) throws {
        let uploads = try cluster[app].changesets(missingFrom: cluster[relay].versionVector, origins: [cluster[app].replicaID])
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
            #expect(Set(cluster[app].versionVector.entries.map(\.replica)) == [cluster[0].replicaID, cluster[app].replicaID])
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
        for replica in cluster.replicas { #expect(try replica.object("Task", primaryKey: .string("t"))?["title"] == "again") }
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
        let adopted = try cluster[0].changesets(missingFrom: VersionVector()).filter { $0.origin == cluster[1].replicaID }
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
        let adopted = try cluster[0].changesets(missingFrom: VersionVector()).filter { $0.origin == cluster[1].replicaID }
        #expect(adopted.count == count + 1)
        #expect(adopted.allSatisfy { $0.contextExtras.isEmpty })
        // About 75 bytes each, encoded. Listing every earlier changeset of the run as an extra dot made them 1.8 MB.
        let added = try cluster[0].logStatistics().uncompressedBytes - before.uncompressedBytes
        #expect(added < 150 * count, "the relay's log grew by \(added) bytes for \(count) changesets")
        #expect(try cluster[1].recordsDigest() == cluster[0].recordsDigest())
    }

    @Test("An app that moves to another relay mid-run: the second relay names the first's adoption, and peers wait for it")
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
        for index in 0..<3 { try app.write { try $0.update("Person", primaryKey: .string("a\(index)"), ["name": "moved"]) } }
        try upload(to: 1)
        let second = try cluster[1].changesets(missingFrom: cluster[0].versionVector).filter { $0.origin == app.replicaID }
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

    /// How a relay's log could look when written by an earlier build.
    enum EarlierAdoptions: CaseIterable {
        /// Format 2: the copy recorded last, alone.
        case lastCopyOnly
        /// A copy of a log made before copies indexed relay dots: no adoptions, no relay dots in the origin index.
        case none
    }

    @Test("A replica of format 2 gets every copy of a changeset adopted twice when raised, and its views rebuilt",
        arguments: EarlierAdoptions.allCases)
    func adoptionsRebuiltWhenRaised(_ earlier: EarlierAdoptions) throws {
        let cluster = try Cluster(3, schema: MergeSemanticsTests.schema)
        let app = cluster[2]
        for relay in 0...1 { try Self.upload(cluster, app: 2, to: relay) }
        try app.write { try $0.create("Person", ["_id": "p"]) }
        let written = Dot(origin: app.replicaID, sequence: app.versionVector[app.replicaID])
        for relay in 0...1 { try Self.upload(cluster, app: 2, to: relay) }
        try cluster.send(from: 1, to: 0)
        let relay = cluster[0]
        let copies = try relay.environment.read { try relay.log.causalDots(ofOrigin: written, in: $0) }
        #expect(copies.count == 2)
        let digest = try relay.viewDigest()
        try relay.environment.write { txn in
            switch earlier {
            case .lastCopyOnly:
                try txn.put(relay.log.adoptions, key: ChangesetLog.originKey(written), value: ChangesetLog.originKey(copies[1]))
            case .none:
                try txn.removeAll(relay.log.adoptions)
                for copy in copies { _ = try txn.delete(relay.log.origins, key: ChangesetLog.originKey(copy)) }
            }
            // Views an earlier build's merge left: here, the object's record gone, which only a rebuild brings back.
            _ = try txn.delete(relay.views.objects, key: ViewStore.objectKey(type: "Person", primaryKey: .string("p")))
            try txn.put(relay.identity, key: Replica.formatKey, value: [2])
        }
        let directory = relay.directory
        relay.close()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let reopened = try Replica.open(directory: directory, schema: MergeSemanticsTests.schema, configuration: configuration)
        #expect(try reopened.summary().formatVersion == Replica.formatVersion)
        #expect(try reopened.environment.read { try reopened.log.causalDots(ofOrigin: written, in: $0) } == copies)
        for copy in copies {
            #expect(try reopened.environment.read { try reopened.log.localSequence(of: copy, in: $0) } != nil)
        }
        #expect(try reopened.object("Person", primaryKey: .string("p")) != nil)
        #expect(try reopened.viewDigest() == digest)
        #expect(try reopened.verify().passed)
    }

    @Test("A changeset an app uploaded to two relays is seen through either copy, on every replica alike")
    func oneChangesetAdoptedByTwoRelays() throws {
        // 0 and 1 are relays, 2 is a peer that writes, 3 is an app.
        let cluster = try Cluster(4, schema: MergeSemanticsTests.schema)
        let app = cluster[3]
        func upload(to relay: Int) throws { try Self.upload(cluster, app: 3, to: relay) }
        func exchange(_ pairs: [(Int, Int)]) throws { for (source, target) in pairs { try cluster.send(from: source, to: target) } }
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
            let copies = try cluster[relay].environment.read { try cluster[relay].log.causalDots(ofOrigin: erase, in: $0) }
            #expect(Set(copies.map(\.origin)) == [cluster[0].replicaID, cluster[1].replicaID], "relay \(relay) holds \(copies)")
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

    @Test("Causal metadata per changeset stays bounded with 1,000 writing apps through one relay")
    func metadataStaysBounded() throws {
        let measured = try RelayTests.metadataBytes(apps: 1000)
        print("1,000 apps: \(measured.adoptedBytes) bytes of causal metadata per changeset through a relay; "
            + "\(measured.directBytes) bytes when every app is a peer")
        #expect(measured.adoptedBytes <= 64)
        #expect(measured.directBytes >= 1000 * 9)
    }

    /// Encoded bytes of causal metadata (context and extras) of the last changeset, after `apps` apps each wrote one
    /// changeset: through a relay that adopts them, and integrated directly as peers.
    static func metadataBytes(apps: Int) throws -> (adoptedBytes: Int, directBytes: Int) {
        let directory = TemporaryDirectory("relay")
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.replicaID = ReplicaID(rawValue: 1)
        let relay = try Replica.open(directory: directory.appending("relay"), schema: MergeSemanticsTests.schema, configuration: configuration)
        configuration.replicaID = ReplicaID(rawValue: 2)
        let peer = try Replica.open(directory: directory.appending("peer"), schema: MergeSemanticsTests.schema, configuration: configuration)
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
