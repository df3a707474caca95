import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// Rule 8 for whole types: one migration that replaces a type (a removal and an addition of it, as a change of its
/// primary key makes), run on several replicas before they sync, removes one type: each removal is a copy of the
/// others, and what each replica's migration wrote stays, in any order of merging.
@Suite("Copies of a type's removal")
struct TypeRemovalCopiesTests {
    static func people(_ version: UInt64, key: ScalarType) -> Schema {
        Schema(
            version: version,
            types: [
                ObjectSchema(
                    name: "Person", properties: [.scalar("_id", key), .scalar("name", .string, optional: true)]),
                ObjectSchema(
                    name: "Team",
                    properties: [.scalar("_id", .string), Property("members", .link("Person"), list: true)]),
            ])
    }

    /// The app's next release: Person's primary key becomes a string, so its migration re-creates every person and
    /// points the teams at the new keys.
    static let newKeys = Migration { migration in
        try migration.enumerateObjects("Person") { old, new in
            guard let new, case .int(let id) = old.primaryKey else { return }
            migration.delete(new)
            try migration.create("Person", ["_id": .string("p\(id)"), "name": old["name"]])
        }
        try migration.enumerateObjects("Team") { _, new in
            new?["members"] = .list([.link(.string("p1")), .link(.string("p2"))])
        }
    }

    final class Device {
        let directory = TemporaryDirectory("device")
        let configuration: Replica.Configuration
        var replica: Replica

        init(_ id: UInt64, schema: Schema) throws {
            var configuration = Replica.Configuration()
            configuration.durability = .none
            configuration.replicaID = ReplicaID(rawValue: id)
            configuration.clock = ManualClock(milliseconds: 1_700_000_000_000 + id)
            self.configuration = configuration
            replica = try Replica.open(directory: directory.path, schema: schema, configuration: configuration)
        }

        /// Reopens with the app's next release, running its migration.
        func update(to schema: Schema, migration: Migration) throws {
            replica.close()
            replica = try Replica.open(
                directory: directory.path, schema: schema, configuration: configuration, migration: migration)
        }

        /// Integrates what `other` has that this one lacks; returns the refusals' reasons.
        func receive(from other: Device) throws -> [String] {
            try replica.integrate(try other.replica.changesets(missingFrom: replica.versionVector)).rejected.map(
                \.reason)
        }
    }

    @Test(
        "A primary-key change run on two devices before they sync keeps the type, the new objects and the links to them, in any order"
    )
    func primaryKeyChangeOnTwoDevices() throws {
        let devices = try (1...4).map { try Device(UInt64($0), schema: Self.people(1, key: .int)) }
        defer { for device in devices { device.replica.close() } }
        try devices[0].replica.write { txn in
            try txn.create("Person", ["_id": 1, "name": "Ada"])
            try txn.create("Person", ["_id": 2, "name": "Grace"])
            try txn.create("Team", ["_id": "t", "members": .list([.link(.int(1)), .link(.int(2))])])
        }
        for device in devices.dropFirst() { #expect(try device.receive(from: devices[0]).isEmpty) }
        // Both phones update the app and migrate before either syncs.
        try devices[0].update(to: Self.people(2, key: .string), migration: Self.newKeys)
        try devices[1].update(to: Self.people(2, key: .string), migration: Self.newKeys)
        try devices[1].replica.write { try $0.create("Person", ["_id": "p3", "name": "Edsger"]) }
        // Each phone hears of the other's; devices 2 and 3 (still on the old release) hear of both, in both orders.
        var reasons: [String] = []
        for (target, sources) in [(0, [1]), (1, [0]), (2, [0, 1]), (3, [1, 0])] {
            for source in sources { reasons += try devices[target].receive(from: devices[source]) }
        }
        // Then everything everywhere (devices 2 and 3 declared their schema in changesets of their own).
        for target in devices {
            for source in devices where source !== target { reasons += try target.receive(from: source) }
        }
        #expect(reasons.isEmpty, "\(reasons)")
        for device in devices {
            let replica = device.replica
            #expect(replica.schema[type: "Person"]?.primaryKeyProperty == .scalar("_id", .string))
            #expect(try replica.objects("Person").map(\.primaryKey) == [.string("p1"), .string("p2"), .string("p3")])
            #expect(try replica.object("Person", primaryKey: .string("p2"))?["name"] == "Grace")
            // Both migrations set the team's list: concurrent sets of a list keep both sets' elements (rule 5: a clear keeps concurrent inserts).
            let members = try #require(try replica.object("Team", primaryKey: .string("t"))?["members"].listValue)
            #expect(members.count == 4 && Set(members) == [.link(.string("p1")), .link(.string("p2"))])
            #expect(try replica.verify().passed)
        }
        #expect(try Cluster.converged(devices.map(\.replica)))
    }

    static let tagged = Schema(
        version: 1,
        types: [
            ObjectSchema(name: "Tag", properties: [.scalar("_id", .string), .scalar("name", .string, optional: true)])
        ])

    /// `count` replicas that all hold one tag, "old".
    static func taggedCluster(_ count: Int) throws -> Cluster {
        let cluster = try Cluster(count, schema: tagged)
        try cluster[0].write { try $0.create("Tag", ["_id": "old", "name": "before"]) }
        try cluster.syncAll()
        return cluster
    }

    /// What a migration replacing Tag emits, then the objects it writes.
    static func replaceTag(creating key: String) -> (Transaction) throws -> Void {
        { txn in
            try txn.emit(.removeType("Tag"))
            try txn.addType(tagged.types[0])
            try txn.create("Tag", ["_id": .string(key), "name": "new"])
        }
    }

    @Test("A write that saw one copy of a type's removal counts, whichever copy merges first")
    func writeThatSawOneCopyCounts() throws {
        let cluster = try Self.taggedCluster(5)
        try cluster[0].write(Self.replaceTag(creating: "a"))
        try cluster[1].write(Self.replaceTag(creating: "b"))
        // Replica 2 hears of replica 1's migration only, then writes to the replaced type.
        #expect(try cluster.send(from: 1, to: 2).rejected.isEmpty)
        try cluster[2].write { txn in
            try txn.update("Tag", primaryKey: .string("b"), ["name": "edited"])
            try txn.create("Tag", ["_id": "c", "name": "after"])
        }
        let reasons = try cluster.deliver([(3, [0, 1, 2]), (4, [2, 0]), (0, [2]), (1, [0, 2]), (2, [0])])
        #expect(reasons.isEmpty, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(try replica.objects("Tag").map(\.primaryKey) == [.string("a"), .string("b"), .string("c")])
            #expect(try replica.object("Tag", primaryKey: .string("b"))?["name"] == "edited")
            #expect(replica.schema.removals(ofType: "Tag").count == 2)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test(
        "Two successive replacements of a type, each run on two devices, keep the type and what the later ones wrote, in any order",
        arguments: [false, true])
    func successiveReplacementsOnTwoDevices(secondSawBothFirst: Bool) throws {
        let cluster = try Self.taggedCluster(4)
        // Release 2 replaces Tag on both devices; release 3 replaces it again. Device 1 may have heard of device 0's
        // first replacement before its second (then its second saw both first ones).
        try cluster[0].write(Self.replaceTag(creating: "a2"))
        try cluster[1].write(Self.replaceTag(creating: "b2"))
        if secondSawBothFirst { #expect(try cluster.send(from: 0, to: 1).rejected.isEmpty) }
        try cluster[0].write(Self.replaceTag(creating: "a3"))
        try cluster[1].write(Self.replaceTag(creating: "b3"))
        let reasons = try cluster.deliver([(0, [1]), (1, [0]), (2, [0, 1]), (3, [1, 0])])
        #expect(reasons.isEmpty, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(try replica.objects("Tag").map(\.primaryKey) == [.string("a3"), .string("b3")])
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("A removal of a type added back after an earlier removal is no copy of a concurrent one that did not see it")
    func removalAfterAnotherIsNoCopy() throws {
        let cluster = try Self.taggedCluster(4)
        // Replica 0 replaces the type and replica 2 hears of it and writes; replica 0 then removes the new type for
        // good, having seen that write. Replica 1, meanwhile, removes the type it knew (concurrent with both removals,
        // having seen neither).
        try cluster[0].write(Self.replaceTag(creating: "a"))
        #expect(try cluster.send(from: 0, to: 2).rejected.isEmpty)
        try cluster[2].write { try $0.create("Tag", ["_id": "c", "name": "later"]) }
        #expect(try cluster.send(from: 2, to: 0).rejected.isEmpty)
        try cluster[0].write { try $0.emit(.removeType("Tag")) }
        try cluster[1].write { try $0.emit(.removeType("Tag")) }
        // Replica 1's removal is a copy of replica 0's first one (both saw no removal), not of its second (which saw
        // the first): the type stays removed, whatever the order.
        let reasons = try cluster.deliver([(3, [1, 0]), (2, [1, 0]), (1, [0]), (0, [1])])
        #expect(reasons.isEmpty, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Tag"] == nil)
            #expect(replica.schema.removals(ofType: "Tag").count == 3)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }
}
