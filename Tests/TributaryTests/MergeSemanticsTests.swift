import Foundation
import Testing
import TributaryModel
import TributaryStorage
import TributaryTestSupport
import TributaryViews

@testable import Tributary

/// Each test sets up two or three replicas, makes concurrent writes (no sync in between), syncs, and checks that
/// every replica holds the state the rule says, byte for byte the same everywhere.
@Suite("Merge semantics (docs/MergeSemantics.md, rules 1-9)")
struct MergeSemanticsTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Task",
                properties: [
                    .scalar("_id", .string), .scalar("title", .string, default: "untitled"),
                    .scalar("notes", .string, optional: true), .scalar("count", .int, default: 0),
                    .scalar("done", .bool, default: false),
                    Property("tags", .scalar(.string), list: true),
                    Property("owner", .link("Person")),
                    Property("watchers", .link("Person"), list: true),
                    Property("location", .embedded("Location")),
                    Property("steps", .embedded("Step"), list: true),
                ]),
            ObjectSchema(
                name: "Person", properties: [.scalar("_id", .string), .scalar("name", .string, optional: true)]),
            .embedded(
                "Location",
                properties: [.scalar("city", .string, optional: true), .scalar("floor", .int, optional: true)]),
            .embedded(
                "Step", properties: [.scalar("text", .string, optional: true), .scalar("done", .bool, default: false)]),
        ])

    let task = PrimaryKey.string("t")

    func cluster(_ count: Int = 2) throws -> Cluster { try Cluster(count, schema: Self.schema) }

    func value(_ replica: Replica, _ property: String, type: String = "Task", key: PrimaryKey = .string("t")) throws
        -> Value?
    {
        try replica.object(type, primaryKey: key)?[property]
    }

    /// Creates the task on replica 0 and syncs it everywhere.
    func seed(_ cluster: Cluster, _ values: [String: Value] = [:]) throws {
        var fields = values
        fields["_id"] = "t"
        try cluster[0].write { try $0.create("Task", fields) }
        try cluster.syncAll()
        cluster.advanceClocks(byMilliseconds: 10)
    }

    @Test("Rule 1: concurrent sets of one field: the greatest stamp wins")
    func greatestStampWins() throws {
        let cluster = try cluster()
        try seed(cluster)
        cluster.clocks[1].advance(byMilliseconds: 5)  // replica 1 writes later
        try cluster[0].write { try $0.update("Task", primaryKey: task, ["title": "from 0"]) }
        try cluster[1].write { try $0.update("Task", primaryKey: task, ["title": "from 1"]) }
        try cluster.syncAll()
        #expect(try value(cluster[0], "title") == "from 1")
        #expect(try cluster.converged())
    }

    @Test("Rule 1: concurrent sets of different fields both survive")
    func differentFieldsBothSurvive() throws {
        let cluster = try cluster()
        try seed(cluster)
        try cluster[0].write { try $0.update("Task", primaryKey: task, ["title": "renamed"]) }
        try cluster[1].write { try $0.update("Task", primaryKey: task, ["notes": "a note", "done": true]) }
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(try value(replica, "title") == "renamed")
            #expect(try value(replica, "notes") == "a note")
            #expect(try value(replica, "done") == true)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 2: an erase beats a concurrent set, whatever the stamps")
    func eraseBeatsConcurrentSet() throws {
        let cluster = try cluster()
        try seed(cluster)
        cluster.clocks[1].advance(byMilliseconds: 1000)  // the set is stamped much later
        try cluster[0].write { _ = try $0.delete("Task", primaryKey: task) }
        try cluster[1].write { try $0.update("Task", primaryKey: task, ["title": "edited"]) }
        try cluster.syncAll()
        for replica in cluster.replicas { #expect(try replica.object("Task", primaryKey: task) == nil) }
        #expect(try cluster.converged())
    }

    @Test("Rule 2: an erase beats a concurrent create of the same key")
    func eraseBeatsConcurrentCreate() throws {
        let cluster = try cluster(3)
        try seed(cluster)
        cluster.clocks[2].advance(byMilliseconds: 1000)
        try cluster[0].write { _ = try $0.delete("Task", primaryKey: task) }
        // Replica 2 deletes and recreates without having seen replica 0's erase.
        try cluster[2].write { txn in
            _ = try txn.delete("Task", primaryKey: task)
            try txn.create("Task", ["_id": "t", "title": "recreated"])
        }
        try cluster.syncAll()
        for replica in cluster.replicas { #expect(try replica.object("Task", primaryKey: task) == nil) }
        #expect(try cluster.converged())
    }

    @Test("Rule 2: a create that happened after an erase revives the object")
    func createAfterEraseRevives() throws {
        let cluster = try cluster()
        try seed(cluster, ["title": "first"])
        try cluster[0].write { _ = try $0.delete("Task", primaryKey: task) }
        try cluster.syncAll()
        try cluster[1].write { try $0.create("Task", ["_id": "t", "title": "second life"]) }
        try cluster.syncAll()
        for replica in cluster.replicas { #expect(try value(replica, "title") == "second life") }
        #expect(try cluster.converged())
    }

    @Test("Rule 3: two replicas creating one primary key make one object, fields merged")
    func concurrentCreatesMakeOneObject() throws {
        let cluster = try cluster()
        cluster.clocks[0].advance(byMilliseconds: 50)  // replica 0's create is stamped later
        try cluster[0].write { try $0.create("Task", ["_id": "t", "notes": "from 0"]) }
        try cluster[1].write { try $0.create("Task", ["_id": "t", "title": "explicit", "notes": "from 1"]) }
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(try replica.read { try $0.count("Task") } == 1)
            // Replica 0 only defaulted the title: the explicit one wins although its stamp is earlier.
            #expect(try value(replica, "title") == "explicit")
            #expect(try value(replica, "notes") == "from 0")
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 4: concurrent increments both count")
    func concurrentIncrementsBothCount() throws {
        let cluster = try cluster(3)
        try seed(cluster)
        for (index, delta) in [(0, Int64(5)), (1, Int64(7)), (2, Int64(-2))] {
            try cluster[index].write { try $0.increment(["count"], of: "Task", primaryKey: task, by: delta) }
        }
        try cluster.syncAll()
        for replica in cluster.replicas { #expect(try value(replica, "count") == 10) }
        #expect(try cluster.converged())
    }

    @Test("Rule 4: increments count on top of the value they were made on")
    func incrementsApplyToTheValueTheyWereMadeOn() throws {
        let cluster = try cluster()
        try seed(cluster)
        try cluster[0].write { try $0.increment(["count"], of: "Task", primaryKey: task, by: 5) }
        try cluster.syncAll()
        // Concurrently: replica 1 sets the count to 100, replica 0 adds 3 to the 5 it sees.
        cluster.clocks[1].advance(byMilliseconds: 10)
        try cluster[1].write { try $0.update("Task", primaryKey: task, ["count": 100]) }
        try cluster[0].write { try $0.increment(["count"], of: "Task", primaryKey: task, by: 3) }
        try cluster.syncAll()
        // The later set wins, and an increment made on the value it replaced does not count on top of it.
        for replica in cluster.replicas { #expect(try value(replica, "count") == 100) }
        // An increment made after seeing the set counts.
        try cluster[0].write { try $0.increment(["count"], of: "Task", primaryKey: task, by: 1) }
        try cluster.syncAll()
        for replica in cluster.replicas { #expect(try value(replica, "count") == 101) }
        #expect(try cluster.converged())
    }

    /// Replica 0 runs `first` and replica 1 `second`, concurrently, from what they hold; replica 2 then merges 0's
    /// changesets before 1's and replica 3 the other way round. Returns the reasons of every refusal.
    func mergeConcurrently(
        _ cluster: Cluster, _ first: (Transaction) throws -> Void, _ second: (Transaction) throws -> Void
    ) throws -> [String] {
        try cluster[0].write(first)
        try cluster[1].write(second)
        return try cluster.deliver([(0, [1]), (1, [0]), (2, [0, 1]), (3, [1, 0])])
    }

    @Test(
        "Rule 4: increments of a property added after its object count from its default, whichever default a concurrent create brings, in any order",
        arguments: [Int64(0), 5])
    func incrementsOnAnAddedPropertyCountFromItsDefault(concurrentDefault: Int64) throws {
        let cluster = try cluster(4)
        try cluster.syncAll()
        let reasons = try mergeConcurrently(
            cluster,
            { txn in
                // An object of the app's first version, then a migration adds `likes`: the object holds no value for
                // it, reads the default, and an increment counts from there.
                try txn.create("Task", ["_id": "t"])
                try txn.addProperty(.scalar("likes", .int, default: 0), to: "Task")
                try txn.increment(["likes"], of: "Task", primaryKey: task, by: 1)
                #expect(try txn.object("Task", primaryKey: task)?["likes"] == 1)
            },
            { txn in
                // A new install of the later version creates the same task, its `likes` filled from its default.
                try txn.addProperty(.scalar("likes", .int, default: .int(concurrentDefault)), to: "Task")
                try txn.create("Task", ["_id": "t"])
            })
        #expect(reasons.isEmpty, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            // The increment counts on the default that stands (the greater, as a create orders two defaults).
            #expect(try value(replica, "likes") == .int(concurrentDefault + 1))
            #expect(
                try replica.objects("Task", where: "likes == $0", arguments: [.int(concurrentDefault + 1)]).count == 1)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 4: increments that cancel out on a property its object holds no value for leave its default")
    func cancellingIncrementsOnAnAddedPropertyLeaveItsDefault() throws {
        let cluster = try cluster(1)
        let replica = cluster[0]
        try replica.write { txn in
            try txn.create("Task", ["_id": "t"])
            try txn.addProperty(.scalar("likes", .int, optional: true, default: 7), to: "Task")
        }
        try replica.write { try $0.increment(["likes"], of: "Task", primaryKey: task, by: 3) }
        try replica.write { try $0.increment(["likes"], of: "Task", primaryKey: task, by: -3) }
        #expect(try value(replica, "likes") == 7)
        #expect(try replica.read { try $0.object("Task", primaryKey: task)?["likes"] } == 7)
        #expect(try replica.objects("Task", where: "likes == 7", arguments: []).count == 1)
        #expect(try replica.verify().passed)
    }

    @Test("Rule 8: a null default a create stored stays when the default changes")
    func storedNullDefaultStays() throws {
        let cluster = try cluster(1)
        let replica = cluster[0]
        try replica.write { txn in
            try txn.addProperty(.scalar("label", .string, optional: true, default: .null), to: "Task")
            try txn.create("Task", ["_id": "t"])
        }
        try replica.write {
            try $0.emit(.redefineProperty(type: "Task", .scalar("label", .string, optional: true, default: "n/a")))
        }
        try replica.write { try $0.create("Task", ["_id": "u"]) }
        #expect(try value(replica, "label") == .null)
        #expect(try replica.read { try $0.object("Task", primaryKey: task)?["label"] } == .null)
        #expect(try value(replica, "label", key: .string("u")) == "n/a")
        #expect(try replica.verify().passed)
    }

    @Test("Rule 4: a null someone wrote stays null under an increment made on it (by an earlier build)")
    func writtenNullStaysNullUnderAnIncrement() throws {
        let cluster = try cluster(1)
        let replica = cluster[0]
        try replica.write { txn in
            try txn.addProperty(.scalar("rank", .int, optional: true, default: 9), to: "Task")
            try txn.create("Task", ["_id": "t", "rank": 4])
        }
        try replica.write { try $0.update("Task", primaryKey: task, ["rank": .null]) }
        let stamp = try #require(try replica.changesets(missingFrom: VersionVector()).last).stamp
        // Earlier builds let an app increment a null; such a changeset still merges.
        try replica.write {
            try $0.emit(.addInteger(FieldPath(type: "Task", primaryKey: task, property: "rank"), delta: 2, base: stamp))
        }
        #expect(try value(replica, "rank") == .null)
        #expect(try replica.read { try $0.object("Task", primaryKey: task)?["rank"] } == .null)
        #expect(try replica.objects("Task", where: "rank == nil", arguments: []).count == 1)
        #expect(try replica.verify().passed)
    }

    @Test("Rule 4: an increment of a property that is null is refused, naming it")
    func incrementOfNullIsRefused() throws {
        let cluster = try cluster(1)
        try cluster[0].write { txn in
            try txn.addProperty(.scalar("rank", .int, optional: true), to: "Task")
            try txn.create("Task", ["_id": "t"])
        }
        #expect {
            try cluster[0].write { try $0.increment(["rank"], of: "Task", primaryKey: task, by: 1) }
        } throws: { error in
            (error as? TributaryError)?.code == .invalidValue && "\(error)".contains(".rank")
                && "\(error)".contains("null")
        }
        try cluster[0].write { try $0.update("Task", primaryKey: task, ["rank": 4]) }
        try cluster[0].write { try $0.increment(["rank"], of: "Task", primaryKey: task, by: 1) }
        #expect(try value(cluster[0], "rank") == 5)
    }

    @Test(
        "Rule 5: concurrent inserts at one place end in stamp order, runs not interleaved",
        arguments: [1, 0])
    func concurrentInsertsKeepRunsTogether(later: Int) throws {
        let cluster = try cluster()
        try seed(cluster, ["tags": ["start", "end"]])
        // The later run comes second, whether its replica's id sorts first or last.
        cluster.clocks[later].advance(byMilliseconds: 5)
        let (first, second) = later == 1 ? (["a1", "a2", "a3"], ["b1", "b2"]) : (["b1", "b2"], ["a1", "a2", "a3"])
        try cluster[1 - later].write { txn in
            for (offset, tag) in first.enumerated() {
                try txn.insert(.string(tag), at: 1 + offset, into: ["tags"], of: "Task", primaryKey: task)
            }
        }
        try cluster[later].write { txn in
            for (offset, tag) in second.enumerated() {
                try txn.insert(.string(tag), at: 1 + offset, into: ["tags"], of: "Task", primaryKey: task)
            }
        }
        try cluster.syncAll()
        let expected: Value = .list((["start"] + first + second + ["end"]).map { .string($0) })
        for replica in cluster.replicas {
            // Read from the stored record, from a snapshot, and in a transaction (whose positions the list API uses).
            #expect(try value(replica, "tags") == expected)
            #expect(try replica.read { try $0.object("Task", primaryKey: task)?["tags"] } == expected)
            let inTransaction = try replica.write { txn in try txn.object("Task", primaryKey: task)?["tags"] }
            #expect(inTransaction == expected)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 5: a null written to a list empties it like [], keeping concurrent inserts, in any order")
    func nullListIsAnEmptyList() throws {
        let cluster = try cluster(4)
        try seed(cluster, ["tags": ["a"]])
        let reasons = try mergeConcurrently(
            cluster,
            { try $0.set(.null, at: ["tags"], of: "Task", primaryKey: task) },
            { txn in
                try txn.append("x", to: ["tags"], of: "Task", primaryKey: task)
                try txn.create("Task", ["_id": "n", "tags": .null])
            })
        #expect(reasons.isEmpty, "\(reasons)")
        for replica in cluster.replicas {
            #expect(try value(replica, "tags") == ["x"])
            #expect(try value(replica, "tags", key: .string("n")) == [])
            let inTransaction = try replica.write { txn in try txn.object("Task", primaryKey: .string("n"))?["tags"] }
            #expect(inTransaction == [])
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 5: a null given for a list renamed concurrently is an empty list where it lands, in any order")
    func nullForARenamedListLandsAsAnEmptyList() throws {
        let cluster = try cluster(4)
        try cluster.syncAll()
        let reasons = try mergeConcurrently(
            cluster,
            { txn in
                try txn.emit(.renameProperty(type: "Task", from: "tags", to: "labels"))
                try txn.create("Task", ["_id": "n", "labels": ["x"]])
            },
            { try $0.create("Task", ["_id": "n", "tags": .null]) })
        #expect(reasons.isEmpty, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(try value(replica, "labels", key: .string("n")) == ["x"])
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 5: erasing a list element beats a concurrent set of it")
    func eraseElementBeatsSet() throws {
        let cluster = try cluster()
        try seed(cluster, ["tags": ["x", "y"]])
        cluster.clocks[1].advance(byMilliseconds: 100)
        try cluster[0].write { try $0.removeElement(at: 0, from: ["tags"], of: "Task", primaryKey: task) }
        try cluster[1].write { try $0.replaceElement(at: 0, with: "X", in: ["tags"], of: "Task", primaryKey: task) }
        try cluster.syncAll()
        for replica in cluster.replicas { #expect(try value(replica, "tags") == ["y"]) }
        #expect(try cluster.converged())
    }

    @Test("Rule 5: concurrent moves leave the element in exactly one place")
    func concurrentMovesLeaveOneCopy() throws {
        let cluster = try cluster()
        try seed(cluster, ["tags": ["a", "b", "c", "d"]])
        cluster.clocks[1].advance(byMilliseconds: 5)
        try cluster[0].write { try $0.moveElement(from: 0, to: 3, in: ["tags"], of: "Task", primaryKey: task) }
        try cluster[1].write { try $0.moveElement(from: 0, to: 1, in: ["tags"], of: "Task", primaryKey: task) }
        try cluster.syncAll()
        for replica in cluster.replicas {
            let tags = try #require(try value(replica, "tags")?.listValue)
            #expect(tags.filter { $0 == "a" }.count == 1)
            #expect(tags == ["b", "a", "c", "d"])  // the later move wins
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 5: clear removes what the clearing replica had seen; concurrent inserts survive")
    func clearKeepsConcurrentInserts() throws {
        let cluster = try cluster()
        try seed(cluster, ["tags": ["old1", "old2"]])
        try cluster[0].write { try $0.removeAllElements(in: ["tags"], of: "Task", primaryKey: task) }
        try cluster[1].write { try $0.append("new", to: ["tags"], of: "Task", primaryKey: task) }
        try cluster.syncAll()
        for replica in cluster.replicas { #expect(try value(replica, "tags") == ["new"]) }
        #expect(try cluster.converged())
    }

    @Test("Rule 6: embedded objects merge field by field while they are the same instance")
    func embeddedObjectsMergeByField() throws {
        let cluster = try cluster()
        try seed(
            cluster, ["location": .embedded(EmbeddedObject(type: "Location", fields: ["city": "Oslo", "floor": 1]))])
        try cluster[0].write { try $0.set("Bergen", at: ["location", "city"], of: "Task", primaryKey: task) }
        try cluster[1].write { try $0.set(.int(4), at: ["location", "floor"], of: "Task", primaryKey: task) }
        try cluster.syncAll()
        for replica in cluster.replicas {
            let location = try #require(try value(replica, "location")?.embeddedValue)
            #expect(location["city"] == "Bergen")
            #expect(location["floor"] == 4)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 6: replacing an embedded object is a set; edits of the replaced instance are dropped")
    func replacingAnEmbeddedObjectIsASet() throws {
        let cluster = try cluster()
        try seed(cluster, ["location": .embedded(EmbeddedObject(type: "Location", fields: ["city": "Oslo"]))])
        cluster.clocks[0].advance(byMilliseconds: 5)
        try cluster[0].write { txn in
            try txn.set(
                .embedded(EmbeddedObject(type: "Location", fields: ["city": "Rome"])), at: ["location"], of: "Task",
                primaryKey: task)
        }
        try cluster[1].write { try $0.set(.int(9), at: ["location", "floor"], of: "Task", primaryKey: task) }
        try cluster.syncAll()
        for replica in cluster.replicas {
            let location = try #require(try value(replica, "location")?.embeddedValue)
            #expect(location["city"] == "Rome")
            #expect(location["floor"] == .null)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 7: a link to an erased object becomes null, or leaves its list, on every replica")
    func linksToErasedObjects() throws {
        let cluster = try cluster()
        try cluster[0].write { txn in
            try txn.create("Person", ["_id": "p"])
            try txn.create("Person", ["_id": "q"])
        }
        try seed(cluster)
        try cluster[0].write { _ = try $0.delete("Person", primaryKey: .string("p")) }
        try cluster[1].write { txn in
            try txn.update(
                "Task", primaryKey: task,
                ["owner": .link(.string("p")), "watchers": [.link(.string("p")), .link(.string("q"))]])
        }
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(try value(replica, "owner") == .null)
            #expect(try value(replica, "watchers") == [.link(.string("q"))])
        }
        #expect(try cluster.converged())
    }

    func watchers(_ replica: Replica) throws -> [String] {
        try (value(replica, "watchers")?.listValue ?? []).map { element in
            guard case .link(.string(let key)) = element else { return "?" }
            return key
        }
    }

    func setUpWatchers(_ cluster: Cluster, _ keys: [String], hidden: [String]) throws {
        try cluster[0].write { txn in
            for key in keys { try txn.create("Person", ["_id": .string(key)]) }
        }
        try seed(cluster, ["watchers": .list(keys.map { .link(.string($0)) })])
        try cluster[0].write { txn in
            for key in hidden { _ = try txn.delete("Person", primaryKey: .string(key)) }
        }
        try cluster.syncAll()
    }

    @Test("Rule 7: positions in a list of links count the links as read, not the hidden ones")
    func listPositionsCountVisibleLinks() throws {
        let cluster = try cluster(1)
        try setUpWatchers(cluster, ["a", "b", "c", "d", "e"], hidden: ["b"])
        let replica = cluster[0]
        #expect(try watchers(replica) == ["a", "c", "d", "e"])
        let path: PropertyPath = ["watchers"]
        try replica.write { txn in
            try txn.create("Person", ["_id": "x"])
            try txn.insert(.link(.string("x")), at: 2, into: path, of: "Task", primaryKey: task)
        }
        #expect(try watchers(replica) == ["a", "c", "x", "d", "e"])
        try replica.write { txn in
            try txn.replaceElement(at: 1, with: .link(.string("x")), in: path, of: "Task", primaryKey: task)
        }
        #expect(try watchers(replica) == ["a", "x", "x", "d", "e"])
        try replica.write { try $0.moveElement(from: 0, to: 2, in: path, of: "Task", primaryKey: task) }
        #expect(try watchers(replica) == ["x", "x", "a", "d", "e"])
        try replica.write { try $0.removeElement(at: 4, from: path, of: "Task", primaryKey: task) }
        try replica.write { try $0.append(.link(.string("a")), to: path, of: "Task", primaryKey: task) }
        #expect(try watchers(replica) == ["x", "x", "a", "d", "a"])
        // The hidden link was never touched: it reads again once its target is back.
        try replica.write { try $0.create("Person", ["_id": "b"]) }
        #expect(try watchers(replica).filter { $0 == "b" }.count == 1)
        #expect(try replica.verify().passed)
    }

    @Test("Rule 7: an update of a list of links to objects created later keeps the order it was given")
    func updateWithLinksToObjectsCreatedLaterKeepsItsOrder() throws {
        let cluster = try cluster(1)
        try setUpWatchers(cluster, ["a", "b"], hidden: [])
        let replica = cluster[0]
        try replica.write { txn in
            try txn.create("Person", ["_id": "c"])
            // x does not exist yet when the list is written: its link is hidden until it does.
            try txn.update(
                "Task", primaryKey: task,
                ["watchers": [.link(.string("a")), .link(.string("x")), .link(.string("c")), .link(.string("b"))]])
            try txn.create("Person", ["_id": "x"])
        }
        #expect(try watchers(replica) == ["a", "x", "c", "b"])
        #expect(try replica.verify().passed)
    }

    @Test("Rule 7: an update of a list of links that holds hidden links edits it, keeping them and concurrent erases")
    func updateOfLinkListWithHiddenLinksEditsIt() throws {
        let cluster = try cluster()
        try setUpWatchers(cluster, ["a", "b", "c"], hidden: ["a"])
        // Replica 0 appends through an update of the list as it reads it; replica 1 removes c concurrently.
        try cluster[0].write { txn in
            try txn.create("Person", ["_id": "d"])
            try txn.update(
                "Task", primaryKey: task, ["watchers": [.link(.string("b")), .link(.string("c")), .link(.string("d"))]])
        }
        try cluster[1].write { try $0.removeElement(at: 1, from: ["watchers"], of: "Task", primaryKey: task) }
        try cluster.syncAll()
        for replica in cluster.replicas { #expect(try watchers(replica) == ["b", "d"]) }
        // The hidden link to a stayed where it was.
        try cluster[1].write { try $0.create("Person", ["_id": "a"]) }
        try cluster.syncAll()
        for replica in cluster.replicas { #expect(try watchers(replica) == ["a", "b", "d"]) }
        #expect(try cluster.converged())
    }

    @Test("Rule 8: additive schema changes merge as a union")
    func additiveSchemaChangesMerge() throws {
        let cluster = try cluster()
        try cluster[0].write { try $0.emit(.addProperty(type: "Task", .scalar("priority", .int, optional: true))) }
        try cluster[1].write { try $0.emit(.addType(ObjectSchema(name: "Tag", properties: [.scalar("_id", .string)]))) }
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "priority"] != nil)
            #expect(replica.schema[type: "Tag"] != nil)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 8: a replica that refused what a peer integrated converges again when reset from that peer")
    func resetFromPeerAfterOrderDependentRefusal() throws {
        // Replica 0 renames `notes` to `summary`; replica 1 renames it to `priority`, then removes that. The rename
        // merged second is refused: replica 2 refuses replica 1's, replica 3 replica 0's, the known order dependence
        // of rule 8 (docs/MergeSemantics.md). The documented way out: reset the replica that refused from its peer.
        let cluster = try cluster(4)
        try cluster[0].write { try $0.create("Task", ["_id": "t", "notes": "written before"]) }
        try cluster.syncAll()
        try cluster[0].write { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "summary")) }
        try cluster[1].write { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "priority")) }
        try cluster[1].write { try $0.emit(.removeProperty(type: "Task", name: "priority")) }
        let refused = Dot(origin: cluster[1].replicaID, sequence: 2)
        #expect(try cluster.send(from: 0, to: 2).rejected.isEmpty)
        let refusal = try cluster.send(from: 1, to: 2)
        #expect(refusal.rejected.map(\.dot) == [refused])
        #expect(refusal.waiting == 1)  // the removal depends on the refused rename
        #expect(try cluster.send(from: 1, to: 3).rejected.isEmpty)
        #expect(
            try cluster.send(from: 0, to: 3).rejected.map(\.dot) == [Dot(origin: cluster[0].replicaID, sequence: 3)])
        let (stuck, peer) = (cluster[2], cluster[3])
        try stuck.write { try $0.create("Task", ["_id": "written-while-stuck"]) }
        #expect(try !Cluster.converged([stuck, peer]))

        // The reset: what the stuck replica wrote that the peer lacks, kept aside for the app; a new replica (with a
        // new id, so that no changeset id is ever used twice) that integrates everything the peer holds.
        let unsynced = try stuck.changesets(missingFrom: peer.versionVector, origins: [stuck.replicaID])
        #expect(unsynced.count == 1)
        #expect(
            unsynced.first?.instructions.contains { $0.object?.primaryKey == .string("written-while-stuck") } == true)
        stuck.close()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.clock = cluster.clocks[2]
        // Opened with the app's schema, as a new install is: its first changeset declares that schema.
        let reset = try Replica.open(
            directory: cluster.directory.appending("reset"), schema: Self.schema, configuration: configuration)
        defer { reset.close() }
        let report = try reset.integrate(try peer.changesets(missingFrom: VersionVector()))
        #expect(report.rejected.isEmpty)
        #expect(report.waiting == 0)
        #expect(reset.replicaID != stuck.replicaID)
        // Integrated in the order the peer's log holds them (the batch's order), not origin by origin.
        func logOrder(_ replica: Replica) throws -> [Dot] {
            var dots: [Dot] = []
            try replica.forEachChangeset { _, changeset in
                dots.append(changeset.dot)
                return true
            }
            return dots
        }
        #expect(try logOrder(reset).dropFirst() == logOrder(peer)[...])
        // The peer takes the new replica's declaration of the schema; it refuses nothing, and changes nothing.
        #expect(try peer.integrate(try reset.changesets(missingFrom: peer.versionVector)).rejected.isEmpty)
        #expect(try Cluster.converged([reset, peer]))
        #expect(try reset.verify().passed)
        #expect(reset.schema[type: "Task"]?[property: "priority"] == nil)

        // The app writes again what it still wants; the two stay converged.
        try reset.write { try $0.create("Task", ["_id": "written-while-stuck"]) }
        #expect(try peer.integrate(try reset.changesets(missingFrom: peer.versionVector)).rejected.isEmpty)
        #expect(try Cluster.converged([reset, peer]))
    }

    @Test("Rule 8: concurrent changes of one property's index or default: the greatest stamp wins, in any order")
    func concurrentRedefinitionsConverge() throws {
        let cluster = try cluster(3)
        cluster.clocks[1].advance(byMilliseconds: 5)  // replica 1 redefines later
        try cluster[0].write {
            try $0.emit(.redefineProperty(type: "Task", .scalar("title", .string, indexed: true, default: "zero")))
        }
        try cluster[1].write { try $0.emit(.redefineProperty(type: "Task", .scalar("title", .string, default: "one"))) }
        // Replica 2 receives them in the other order than replica 0 does.
        _ = try cluster.send(from: 1, to: 2)
        _ = try cluster.send(from: 0, to: 2)
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "title"] == .scalar("title", .string, default: "one"))
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 8: a redefinition beats a concurrent addition of the old definition, whose data still arrives")
    func redefinitionBeatsConcurrentAddition() throws {
        let cluster = try cluster(2)
        // Replica 1 is new: its first changeset adds the old definition, stamped later than replica 0's migration.
        let late = try Cluster(1, schema: Self.schema, firstReplicaID: 9)
        late.clocks[0].advance(byMilliseconds: 60_000)
        try late[0].write { try $0.create("Task", ["_id": "from-new-replica", "title": "kept"]) }
        try cluster[0].write {
            try $0.emit(.redefineProperty(type: "Task", .scalar("title", .string, indexed: true, default: "untitled")))
        }
        let fromLate = try late[0].changesets(missingFrom: cluster[0].versionVector)
        let report = try cluster[0].integrate(fromLate)
        #expect(report.rejected.isEmpty)
        #expect(report.integrated.count == fromLate.count)
        _ = try cluster[1].integrate(fromLate)
        try cluster.syncAll()
        let indexed = Property.scalar("title", .string, indexed: true, default: "untitled")
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "title"] == indexed)
            #expect(try value(replica, "title", key: .string("from-new-replica")) == "kept")
            // The index answers the query: the object the new replica wrote is in it.
            let found = try replica.objects("Task", where: "title == 'kept'")
            #expect(found.map(\.primaryKey) == [.string("from-new-replica")])
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 8: concurrent additions that differ only in index or default merge (the later one wins), not refused")
    func concurrentAdditionsDifferingInDefaultMerge() throws {
        let cluster = try cluster(3)
        cluster.clocks[0].advance(byMilliseconds: 5)  // replica 0 adds later
        try cluster[0].write {
            try $0.emit(.addProperty(type: "Task", .scalar("priority", .int, indexed: true, default: 3)))
        }
        try cluster[1].write { try $0.emit(.addProperty(type: "Task", .scalar("priority", .int, default: 1))) }
        try cluster[1].write { try $0.create("Task", ["_id": "p", "priority": 7]) }
        _ = try cluster.send(from: 0, to: 2)
        _ = try cluster.send(from: 1, to: 2)
        let report = try cluster.send(from: 1, to: 0)
        #expect(report.rejected.isEmpty)
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(
                replica.schema[type: "Task"]?[property: "priority"]
                    == .scalar("priority", .int, indexed: true, default: 3))
            #expect(try value(replica, "priority", key: .string("p")) == 7)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 8: the definitions' stamps survive a reopen and a rebuild of the views")
    func definitionStampsArePersistent() throws {
        let cluster = try cluster(2)
        cluster.clocks[1].advance(byMilliseconds: 5)
        try cluster[1].write { try $0.emit(.redefineProperty(type: "Task", .scalar("title", .string, default: "one"))) }
        try cluster.syncAll()
        let stamp = cluster[0].schema.definitionStamp(of: "title", in: "Task")
        #expect(stamp.kind == .redefinition)
        #expect(stamp.stamp.replica == cluster[1].replicaID)
        try cluster[0].rebuildViews()
        #expect(cluster[0].schema.definitionStamp(of: "title", in: "Task") == stamp)
        #expect(try cluster[0].verify().passed)
        // An older, concurrent redefinition that arrives after the rebuild still loses.
        let older = try Cluster(1, schema: Self.schema, firstReplicaID: 9)
        try older[0].write { try $0.emit(.redefineProperty(type: "Task", .scalar("title", .string, default: "older"))) }
        _ = try cluster[0].integrate(try older[0].changesets(missingFrom: cluster[0].versionVector))
        #expect(cluster[0].schema[type: "Task"]?[property: "title"]?.defaultValue == "one")
    }

    @Test(
        "Rule 8: a removal of a property beats a concurrent addition of it (an old app version's first changeset), in any order"
    )
    func removalBeatsConcurrentAddition() throws {
        let cluster = try cluster(2)
        let old = try Cluster(1, schema: Self.schema, firstReplicaID: 9)  // a new replica of the old app version
        old.clocks[0].advance(byMilliseconds: 60_000)  // stamped later than the removal: stamps do not decide this
        try old[0].write { try $0.create("Task", ["_id": "o", "title": "kept", "notes": "from the old version"]) }
        let fromOld = try old[0].changesets(missingFrom: VersionVector())
        try cluster[0].write { try $0.emit(.removeProperty(type: "Task", name: "notes")) }
        _ = try cluster[1].integrate(fromOld)  // replica 1: the addition, then the removal
        try cluster.syncAll()
        let report = try cluster[0].integrate(fromOld)  // replica 0: the removal, then the addition
        #expect(report.rejected.isEmpty)
        try cluster.syncAll()
        _ = try old[0].integrate(try cluster[0].changesets(missingFrom: old[0].versionVector))
        for replica in cluster.replicas + old.replicas {
            #expect(replica.schema[type: "Task"]?[property: "notes"] == nil)
            #expect(try value(replica, "title", key: .string("o")) == "kept")
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
        #expect(try Cluster.converged(cluster.replicas + old.replicas))
    }

    @Test("Rule 8: a write that did not see a property's removal is dropped, even once the property is added back")
    func writeConcurrentWithRemovalIsDropped() throws {
        let cluster = try cluster(3)
        try seed(cluster, ["notes": "before"])
        cluster.clocks[1].advance(byMilliseconds: 5)  // the concurrent write is stamped later
        try cluster[0].write { try $0.emit(.removeProperty(type: "Task", name: "notes")) }
        try cluster[1].write { try $0.update("Task", primaryKey: task, ["notes": "concurrent"]) }
        // Replica 0 adds the property back, having seen its own removal only.
        try cluster[0].write { try $0.addProperty(.scalar("notes", .string, optional: true), to: "Task") }
        _ = try cluster.send(from: 0, to: 2)  // replica 2: removal, addition, then the write
        _ = try cluster.send(from: 1, to: 2)
        _ = try cluster.send(from: 1, to: 0)  // replica 0 likewise
        try cluster.syncAll()  // replica 1: the write, then removal and addition
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "notes"] != nil)
            #expect(try value(replica, "notes") == .null)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
        // A write that saw the removal counts.
        try cluster[1].write { try $0.update("Task", primaryKey: task, ["notes": "after"]) }
        try cluster.syncAll()
        #expect(try value(cluster[0], "notes") == "after")
    }

    @Test("Rule 8: a write that did not see a rename follows it to the new name, in any order")
    func writeConcurrentWithRenameFollowsIt() throws {
        let cluster = try cluster(3)
        try seed(cluster, ["notes": "before"])
        cluster.clocks[1].advance(byMilliseconds: 5)
        try cluster[0].write { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) }
        try cluster[1].write { try $0.update("Task", primaryKey: task, ["notes": "concurrent"]) }
        try cluster[1].write { try $0.create("Task", ["_id": "n", "notes": "new object"]) }
        _ = try cluster.send(from: 0, to: 2)  // replica 2: the rename first
        _ = try cluster.send(from: 1, to: 2)
        try cluster.syncAll()  // replica 1: its writes first
        for replica in cluster.replicas {
            let type = try #require(replica.schema[type: "Task"])
            #expect(type[property: "notes"] == nil)
            #expect(type[property: "details"] != nil)
            #expect(try value(replica, "details") == "concurrent")
            #expect(try value(replica, "details", key: .string("n")) == "new object")
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 8: a definition that did not see a rename follows it, like a write")
    func definitionConcurrentWithRenameFollowsIt() throws {
        let cluster = try cluster(3)
        try seed(cluster)
        cluster.clocks[1].advance(byMilliseconds: 5)
        try cluster[0].write { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) }
        // Replica 1 has not seen the rename: it indexes the old name, and a new replica adds the old name.
        try cluster[1].write {
            try $0.emit(.redefineProperty(type: "Task", .scalar("notes", .string, optional: true, indexed: true)))
        }
        let old = try Cluster(1, schema: Self.schema, firstReplicaID: 9)
        old.clocks[0].advance(byMilliseconds: 60_000)
        let fromOld = try old[0].changesets(missingFrom: VersionVector())
        _ = try cluster[1].integrate(fromOld)
        _ = try cluster.send(from: 0, to: 2)  // replica 2: the rename first
        _ = try cluster.send(from: 1, to: 2)
        try cluster.syncAll()  // replica 1: the redefinition and the addition first
        let indexed = Property.scalar("details", .string, optional: true, indexed: true)
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "details"] == indexed)
            #expect(replica.schema[type: "Task"]?[property: "notes"] == nil)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 8: one rename made on several replicas (each running the migration) is one rename, in any order")
    func concurrentIdenticalRenamesMerge() throws {
        let cluster = try cluster(3)
        try seed(cluster, ["notes": "before"])
        for index in 0..<2 {
            try cluster[index].write { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) }
        }
        // Replica 0 then uses the old name again, for a new property, and writes it.
        try cluster[0].write { try $0.addProperty(.scalar("notes", .string, optional: true), to: "Task") }
        try cluster[0].write { try $0.update("Task", primaryKey: task, ["notes": "new meaning"]) }
        _ = try cluster.send(from: 0, to: 2)
        let report = try cluster.send(from: 1, to: 2)  // replica 2: the other rename after the old name came back
        #expect(report.rejected.isEmpty)
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(try value(replica, "details") == "before")
            #expect(try value(replica, "notes") == "new meaning")
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 8: removals and renames of an embedded type's properties order the values that embedded objects carry")
    func embeddedPropertyRemovalOrdersCarriedValues() throws {
        let cluster = try cluster(3)
        try seed(cluster)
        try cluster[0].write { txn in
            try txn.emit(.removeProperty(type: "Location", name: "floor"))
            try txn.emit(.renameProperty(type: "Step", from: "text", to: "label"))
        }
        // Replica 1 has not seen the migration: it writes embedded objects with the old properties.
        try cluster[1].write { txn in
            try txn.update(
                "Task", primaryKey: task,
                ["location": .embedded(EmbeddedObject(type: "Location", fields: ["city": "Oslo", "floor": 3]))])
            try txn.insert(
                .embedded(EmbeddedObject(type: "Step", fields: ["text": "write it"])), at: 0, into: ["steps"],
                of: "Task", primaryKey: task)
        }
        _ = try cluster.send(from: 0, to: 2)  // replica 2: the migration first
        _ = try cluster.send(from: 1, to: 2)
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(
                try value(replica, "location") == .embedded(EmbeddedObject(type: "Location", fields: ["city": "Oslo"])))
            let steps = try #require(try value(replica, "steps")?.listValue)
            #expect(steps == [.embedded(EmbeddedObject(type: "Step", fields: ["done": false, "label": "write it"]))])
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 8: a write that missed a rename follows it even when the old name was used again and removed since")
    func writeFollowsRenameAcrossReuseOfTheOldName() throws {
        let cluster = try cluster(3)
        try seed(cluster, ["notes": "before"])
        cluster.clocks[1].advance(byMilliseconds: 5)
        // Three migrations in a row on replica 0: rename, a new property with the old name, and its removal.
        try cluster[0].write { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) }
        try cluster[0].write { try $0.addProperty(.scalar("notes", .string, optional: true), to: "Task") }
        try cluster[0].write { try $0.emit(.removeProperty(type: "Task", name: "notes")) }
        try cluster[1].write { try $0.update("Task", primaryKey: task, ["notes": "concurrent"]) }
        _ = try cluster.send(from: 0, to: 2)  // replica 2: the migrations first
        _ = try cluster.send(from: 1, to: 2)
        try cluster.syncAll()  // replica 1: its write first
        for replica in cluster.replicas {
            #expect(try value(replica, "details") == "concurrent")
            #expect(replica.schema[type: "Task"]?[property: "notes"] == nil)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test(
        "Rule 8: a rename back to the old name, and a copy of the first rename made elsewhere, keep a concurrent write")
    func renameBackWithConcurrentCopy() throws {
        let cluster = try cluster(4)
        try seed(cluster, ["notes": "before"])
        cluster.clocks[2].advance(byMilliseconds: 5)
        // Replicas 0 and 1 each run the migration that renames; replica 0 then runs one that renames back.
        try cluster[0].write { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) }
        try cluster[1].write { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) }
        try cluster[0].write { try $0.emit(.renameProperty(type: "Task", from: "details", to: "notes")) }
        try cluster[2].write { try $0.update("Task", primaryKey: task, ["notes": "concurrent"]) }
        _ = try cluster.send(from: 0, to: 3)  // replica 3: both of replica 0's, then replica 1's copy, then the write
        _ = try cluster.send(from: 1, to: 3)
        _ = try cluster.send(from: 2, to: 3)
        try cluster.syncAll()  // replica 2: the write first
        for replica in cluster.replicas {
            #expect(try value(replica, "notes") == "concurrent")
            #expect(replica.schema[type: "Task"]?[property: "details"] == nil)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    /// Makes `first` on replica 0 and `second` on replica 1 concurrently, then merges them in both orders: replica 2
    /// gets replica 0's changesets first, replica 3 replica 1's. Returns the reasons each replica gave for refusing.
    func mergeInBothOrders(
        _ first: (Transaction) throws -> Void, _ second: (Transaction) throws -> Void
    ) throws -> (cluster: Cluster, reasons: [[String]]) {
        let cluster = try cluster(4)
        try seed(cluster, ["notes": "before"])
        try cluster[0].write(first)
        try cluster[1].write(second)
        var reasons: [[String]] = Array(repeating: [], count: 4)
        for (target, sources) in [(0, [1]), (1, [0]), (2, [0, 1]), (3, [1, 0])] {
            for source in sources {
                reasons[target] += try cluster.send(from: source, to: target).rejected.map(\.reason)
            }
        }
        return (cluster, reasons)
    }

    @Test("Rule 8: a rename and a concurrent removal of one property are refused, in either order, naming both")
    func renameAgainstConcurrentRemovalIsRefused() throws {
        let (cluster, reasons) = try mergeInBothOrders(
            { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) },
            { try $0.emit(.removeProperty(type: "Task", name: "notes")) })
        func last(_ replica: Replica) -> Dot {
            Dot(origin: replica.replicaID, sequence: replica.versionVector[replica.replicaID])
        }
        let (rename, removal) = (last(cluster[0]), last(cluster[1]))
        // Every replica refuses whichever of the two it merged second, and says what both did.
        for (index, refused) in reasons.enumerated() {
            let reason = try #require(refused.first, "replica \(index) merged both")
            #expect(refused.count == 1)
            #expect(reason.contains("'Task.notes'"))
            #expect(reason.contains("renamed to 'details' by changeset \(rename)"))
            #expect(reason.contains("removed by changeset \(removal)"))
            #expect(try cluster[index].verify().passed)
        }
        // Each kept the one it merged first: nothing it held is lost.
        for index in [0, 2] { #expect(try value(cluster[index], "details") == "before") }
        for index in [1, 3] {
            #expect(cluster[index].schema[type: "Task"]?[property: "details"] == nil)
            #expect(cluster[index].schema[type: "Task"]?[property: "notes"] == nil)
            #expect(try cluster[index].object("Task", primaryKey: task)?.values["notes"] == nil)
        }
    }

    @Test("Rule 8: concurrent renames of one property to different names are refused, in either order, naming both")
    func concurrentRenamesToDifferentNamesAreRefused() throws {
        let (cluster, reasons) = try mergeInBothOrders(
            { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) },
            { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "remarks")) })
        for (index, refused) in reasons.enumerated() {
            let reason = try #require(refused.first, "replica \(index) merged both")
            #expect(reason.contains("renamed to 'details'") && reason.contains("renamed to 'remarks'"))
        }
        for index in [0, 2] { #expect(try value(cluster[index], "details") == "before") }
        for index in [1, 3] { #expect(try value(cluster[index], "remarks") == "before") }
    }

    @Test("Rule 8: a rename of a property added back after a removal agrees with a concurrent copy of that removal")
    func renameOfReAddedPropertyAgainstConcurrentCopyOfTheRemovalMerges() throws {
        // The concurrent removal is a copy of the first one (the same migration, run on another replica): it removes
        // the old property, not the one added back, so renaming that property does not disagree with it. (In earlier
        // builds the copy removed the property added back too, and the two were refused whichever merged second.)
        let (cluster, reasons) = try mergeInBothOrders(
            { txn in
                try txn.emit(.removeProperty(type: "Task", name: "notes"))
                try txn.addProperty(.scalar("notes", .string, optional: true), to: "Task")
                try txn.update("Task", primaryKey: task, ["notes": "added back"])
                try txn.emit(.renameProperty(type: "Task", from: "notes", to: "details"))
            },
            { try $0.emit(.removeProperty(type: "Task", name: "notes")) })
        #expect(reasons.allSatisfy { $0.isEmpty }, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "notes"] == nil)
            #expect(try value(replica, "details") == "added back")
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 8: concurrent removals of one property, and a copy of a rename against a later use of the name, agree")
    func agreeingConcurrentRemovalsAndRenamesMerge() throws {
        let removals = try mergeInBothOrders(
            { try $0.emit(.removeProperty(type: "Task", name: "notes")) },
            { try $0.emit(.removeProperty(type: "Task", name: "notes")) })
        #expect(removals.reasons.allSatisfy { $0.isEmpty })
        try removals.cluster.syncAll()
        #expect(try removals.cluster.converged())

        // Replica 0 renames, uses the old name again and removes it; replica 1 runs the same rename only.
        let renames = try mergeInBothOrders(
            { txn in
                try txn.emit(.renameProperty(type: "Task", from: "notes", to: "details"))
                try txn.addProperty(.scalar("notes", .int, optional: true), to: "Task")
                try txn.emit(.removeProperty(type: "Task", name: "notes"))
            },
            { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) })
        #expect(renames.reasons.allSatisfy { $0.isEmpty }, "\(renames.reasons)")
        try renames.cluster.syncAll()
        for replica in renames.cluster.replicas {
            #expect(try value(replica, "details") == "before")
            #expect(replica.schema[type: "Task"]?[property: "notes"] == nil)
            #expect(try replica.verify().passed)
        }
        #expect(try renames.cluster.converged())
    }

    @Test(
        "Rule 8: a property added concurrently under a rename's new name merges with the renamed one, in either order")
    func renameOntoConcurrentAdditionMerges() throws {
        let (cluster, reasons) = try mergeInBothOrders(
            { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) },
            { txn in
                // A replica of the new app version, which declares the new name without having seen the rename.
                try txn.addProperty(.scalar("details", .string, optional: true, indexed: true), to: "Task")
                try txn.update("Task", primaryKey: task, ["details": "from 1"])
                try txn.create("Task", ["_id": "n", "details": "new object"])
            })
        #expect(reasons.allSatisfy { $0.isEmpty }, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            let type = try #require(replica.schema[type: "Task"])
            #expect(type[property: "notes"] == nil)
            // The addition is the later definition: its index wins.
            #expect(type[property: "details"] == .scalar("details", .string, optional: true, indexed: true))
            // Both objects: the task's value by the greater stamp (replica 1 wrote after the seed), the new one as written.
            #expect(try value(replica, "details") == "from 1")
            #expect(try value(replica, "details", key: .string("n")) == "new object")
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test(
        "Rule 8: increments of a renamed property and of one added concurrently under its new name all count, in either order"
    )
    func incrementsOfARenamedAndAnAddedPropertyAllCount() throws {
        let cluster = try cluster(4)
        try cluster[0].write { txn in
            try txn.addProperty(.scalar("stars", .int, default: 0), to: "Task")
            try txn.create("Task", ["_id": "t"])
        }
        try cluster.syncAll()
        cluster.advanceClocks(byMilliseconds: 10)
        let reasons = try mergeConcurrently(
            cluster,
            { txn in
                try txn.increment(["stars"], of: "Task", primaryKey: task, by: 1)
                try txn.emit(.renameProperty(type: "Task", from: "stars", to: "likes"))
            },
            { txn in
                // The new version's name, declared before this replica has seen the rename; the task holds no value
                // for it yet.
                try txn.addProperty(.scalar("likes", .int, default: 0), to: "Task")
                try txn.increment(["likes"], of: "Task", primaryKey: task, by: 2)
            })
        #expect(reasons.isEmpty, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "stars"] == nil)
            #expect(try value(replica, "likes") == 3)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    /// Replica 0 removes type `Label`; replica 1, concurrently, adds type `Sticker` linking to it and writes links to
    /// labels (one it creates). Replica 2 merges the removal first, replica 3 the addition first, replica 4 both in one
    /// batch in its own order. Returns every refusal's reason.
    func removeLabelAgainstStickerLinkingToIt(_ cluster: Cluster) throws -> [String] {
        try cluster[0].write { txn in
            try txn.addType(ObjectSchema(name: "Label", properties: [.scalar("_id", .string)]))
            try txn.create("Label", ["_id": "l1"])
        }
        try cluster.syncAll()
        try cluster[0].write { try $0.emit(.removeType("Label")) }
        try cluster[1].write { txn in
            try txn.addType(
                ObjectSchema(
                    name: "Sticker",
                    properties: [
                        .scalar("_id", .string), Property("label", .link("Label")),
                        Property("labels", .link("Label"), list: true),
                    ]))
            try txn.create("Label", ["_id": "l2"])
            try txn.create(
                "Sticker",
                ["_id": "s", "label": .link(.string("l1")), "labels": [.link(.string("l1")), .link(.string("l2"))]])
        }
        var reasons = try cluster.deliver([(2, [0, 1]), (3, [1, 0])])
        var batch: [Changeset] = []
        for source in [1, 0] {
            batch += try cluster[source].changesets(
                missingFrom: cluster[4].versionVector, origins: [cluster[source].replicaID])
        }
        reasons += try cluster[4].integrate(batch).rejected.map(\.reason)
        reasons += try cluster.deliver([(0, [1]), (1, [0])])
        return reasons
    }

    @Test("Rule 8: a type linking to a type removed concurrently is kept in either order, its links reading as null")
    func linkToAConcurrentlyRemovedTypeReadsNull() throws {
        let cluster = try cluster(5)
        let reasons = try removeLabelAgainstStickerLinkingToIt(cluster)
        #expect(reasons.isEmpty, "\(reasons)")
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Label"] == nil)
            #expect(replica.schema[type: "Sticker"]?[property: "label"] == Property("label", .link("Label")))
            let sticker = try #require(try replica.object("Sticker", primaryKey: .string("s")))
            // As if every label were erased (rule 7): nothing to link to while the type is absent.
            #expect(sticker["label"] == .null)
            #expect(sticker["labels"] == .list([]))
            #expect(try replica.verify().passed)
        }
    }

    @Test(
        "Rule 8: links to a type removed concurrently are kept, and show again when a later changeset adds the type back"
    )
    func linksToARemovedTypeShowWhenItComesBack() throws {
        let cluster = try cluster(5)
        #expect(try removeLabelAgainstStickerLinkingToIt(cluster).isEmpty)
        // The merged schema holds a link to an absent type: a later migration of something else still commits.
        try cluster[3].write { try $0.addProperty(.scalar("color", .string, optional: true), to: "Sticker") }
        // A transaction may not link to a type the schema lacks that nothing linked to (a misspelt name), nor remove
        // a type that something still links to.
        let badge = ObjectSchema(
            name: "Badge", properties: [.scalar("_id", .string), Property("label", .link("Lable"))])
        for change in [{ (txn: Transaction) in try txn.addType(badge) }, { try $0.emit(.removeType("Person")) }] {
            let error = #expect(throws: TributaryError.self) { try cluster[3].write(change) }
            #expect(error?.code == .schemaMismatch)
            #expect(error?.message.contains("which the schema lacks") == true, "\(String(describing: error))")
        }
        // A changeset that saw the removal adds the type back and a label of the old key.
        try cluster[2].write { txn in
            try txn.addType(ObjectSchema(name: "Label", properties: [.scalar("_id", .string)]))
            try txn.create("Label", ["_id": "l1"])
        }
        try cluster.syncAll()
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            let sticker = try #require(try replica.object("Sticker", primaryKey: .string("s")))
            #expect(sticker["label"] == .link(.string("l1")))
            // The label created by a changeset that did not see the removal went with the type.
            #expect(sticker["labels"] == .list([.link(.string("l1"))]))
            #expect(try replica.object("Label", primaryKey: .string("l2")) == nil)
            #expect(try replica.verify().passed)
        }
    }

    /// Seeds the task with a location; then replica 0 drops locations (the property and the type), while replica 1,
    /// concurrently, moves them to a new property, `place`, gives the task one there, and changes its floor to 3.
    /// Nothing is sent.
    func removeLocationAgainstPlaceEmbeddingIt(_ cluster: Cluster) throws {
        try seed(cluster, ["location": .embedded(EmbeddedObject(type: "Location", fields: ["city": "Oslo"]))])
        try cluster[0].write { txn in
            try txn.emit(.removeProperty(type: "Task", name: "location"))
            try txn.emit(.removeType("Location"))
        }
        try cluster[1].write { txn in
            try txn.addProperty(Property("place", .embedded("Location")), to: "Task")
            try txn.update(
                "Task", primaryKey: task,
                ["place": .embedded(EmbeddedObject(type: "Location", fields: ["city": "Bergen", "floor": 2]))])
        }
        // A write into the object: where the removal merged first, it lands in an object of a type the schema lacks.
        try cluster[1].write { try $0.set(.int(3), at: ["place", "floor"], of: "Task", primaryKey: task) }
    }

    /// The embedded type `Location`, its city of type `city`.
    static func location(city: ScalarType) -> ObjectSchema {
        .embedded(
            "Location", properties: [.scalar("city", city, optional: true), .scalar("floor", .int, optional: true)])
    }

    @Test(
        "Rule 8: an embedded type removed concurrently with a property that embeds it is kept in either order, reading as null"
    )
    func embeddingAConcurrentlyRemovedTypeReadsNull() throws {
        let cluster = try cluster(4)
        try removeLocationAgainstPlaceEmbeddingIt(cluster)
        let reasons = try cluster.deliver([(2, [0, 1]), (3, [1, 0]), (0, [1]), (1, [0])])
        #expect(reasons.isEmpty, "\(reasons)")
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Location"] == nil)
            #expect(replica.schema[type: "Task"]?[property: "place"] != nil)
            #expect(try value(replica, "place") == .null)
            #expect(try replica.object("Task", primaryKey: task)?.values["location"] == nil)
            #expect(try replica.verify().passed)
        }
        // The release that embeds it declares the type again (a changeset that saw the removal): the object shows.
        try cluster[1].write { txn in
            try txn.addType(Self.location(city: .string))
        }
        try cluster.syncAll()
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            let place = try #require(try value(replica, "place")?.embeddedValue)
            #expect(place.fields["city"] == "Bergen")
            #expect(place.fields["floor"] == 3)
        }
    }

    @Test(
        "Rule 8: an embedded object kept while its type was absent hides the fields that do not fit the type defined again"
    )
    func embeddedObjectOfARemovedTypeHidesWhatNoLongerFits() throws {
        let cluster = try cluster(2)
        try removeLocationAgainstPlaceEmbeddingIt(cluster)
        try cluster.syncAll()
        // A later release defines the type again, its city a number.
        try cluster[0].write { txn in
            try txn.addType(Self.location(city: .int))
        }
        try cluster.syncAll()
        for replica in cluster.replicas {
            let place = try #require(try value(replica, "place")?.embeddedValue)
            #expect(place.fields["city"] == nil)
            #expect(place.fields["floor"] == 3)
        }
        try cluster[0].write { try $0.set(.int(4), at: ["place", "city"], of: "Task", primaryKey: task) }
        try cluster.syncAll()
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            #expect(try value(replica, "place")?.embeddedValue?.fields["city"] == 4)
            #expect(try replica.verify().passed)
        }
    }

    @Test(
        "Rule 8: a batch whose schema is invalid only in between (a malformed type its next changeset removes) is integrated whole"
    )
    func schemaInvalidOnlyInBetweenIsIntegrated() throws {
        let cluster = try cluster(2)
        // A peer's changesets, as no replica's transaction would write them: a type without its primary key.
        let broken = ObjectSchema(name: "Broken", properties: [.scalar("name", .string, optional: true)])
        let addition = HostileInputTests.changeset(origin: 900, sequence: 1, [.addType(broken)])
        let removal = HostileInputTests.changeset(origin: 900, sequence: 2, [.removeType("Broken")])
        let together = try cluster[0].integrate([addition, removal])
        #expect(together.rejected.isEmpty, "\(together)")
        #expect(together.integrated.count == 2)
        // Alone, the malformed one is refused, naming what is wrong.
        let alone = try cluster[1].integrate([addition])
        #expect(alone.rejected.map(\.dot) == [addition.dot], "\(alone)")
        #expect(alone.rejected.first?.reason.contains("'Broken'") == true)
        for replica in cluster.replicas { #expect(replica.schema[type: "Broken"] == nil) }
    }

    @Test("Rule 8: a list renamed onto a list added concurrently keeps the elements of both, in either order")
    func renamedListJoinsConcurrentlyAddedList() throws {
        let (cluster, reasons) = try mergeInBothOrders(
            { txn in
                try txn.insert("a", at: 0, into: ["tags"], of: "Task", primaryKey: task)
                try txn.emit(.renameProperty(type: "Task", from: "tags", to: "labels"))
            },
            { txn in
                try txn.addProperty(Property("labels", .scalar(.string), list: true), to: "Task")
                try txn.insert("b", at: 0, into: ["labels"], of: "Task", primaryKey: task)
            })
        #expect(reasons.allSatisfy { $0.isEmpty }, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            let labels = try #require(try value(replica, "labels")?.listValue)
            #expect(Set(labels) == ["a", "b"])
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test(
        "Rule 8: a property added concurrently under a rename's new name with another type is the later definition, in either order"
    )
    func renameOntoConcurrentConflictingAdditionResolves() throws {
        let (cluster, reasons) = try mergeInBothOrders(
            { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) },
            { try $0.addProperty(.scalar("details", .int, optional: true), to: "Task") })
        #expect(reasons.allSatisfy { $0.isEmpty }, "\(reasons)")
        try cluster.syncAll()
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            // The addition is later than the definition the renamed property carries.
            #expect(replica.schema[type: "Task"]?[property: "details"] == .scalar("details", .int, optional: true))
            #expect(
                replica.schema.losingDefinitions(of: "details", in: "Task").map(\.property)
                    == [.scalar("details", .string, optional: true)])
        }
    }

    @Test("Rule 8: a type added back without a property removed concurrently ends with its properties in one order")
    func typeAddedBackWithoutRemovedPropertyIsSorted() throws {
        let tag = ObjectSchema(
            name: "Tag",
            properties: [
                .scalar("_id", .string), .scalar("zeta", .int, optional: true), .scalar("alpha", .int, optional: true),
                .scalar("extra", .int, optional: true),
            ])
        let cluster = try Cluster(3, schema: Schema(version: 1, types: Self.schema.types + [tag]))
        try cluster[0].write { try $0.emit(.removeProperty(type: "Tag", name: "extra")) }
        try cluster[1].write { try $0.emit(.removeType("Tag")) }
        try cluster[1].write { try $0.addType(tag) }
        _ = try cluster.send(from: 0, to: 2)  // replica 2: the property's removal first
        _ = try cluster.send(from: 1, to: 2)
        try cluster.syncAll()  // replica 1: the type's removal and addition first
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Tag"]?.properties.map(\.name) == ["_id", "alpha", "zeta"])
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test(
        "Rule 8: a removal of a type beats a concurrent create in it, which an addition of the type does not bring back"
    )
    func typeRemovalBeatsConcurrentCreate() throws {
        let tagged = Schema(
            version: 1,
            types: Self.schema.types + [
                ObjectSchema(
                    name: "Tag", properties: [.scalar("_id", .string), .scalar("name", .string, optional: true)])
            ])
        let cluster = try Cluster(3, schema: tagged)
        try cluster[0].write { try $0.create("Tag", ["_id": "a", "name": "first"]) }
        try cluster.syncAll()
        cluster.clocks[1].advance(byMilliseconds: 5)
        try cluster[0].write { try $0.emit(.removeType("Tag")) }
        try cluster[1].write { try $0.create("Tag", ["_id": "b", "name": "concurrent"]) }
        try cluster[1].write { try $0.update("Tag", primaryKey: .string("a"), ["name": "edited"]) }
        // Replica 0 adds the type back, having seen its removal.
        try cluster[0].write {
            try $0.addType(
                ObjectSchema(
                    name: "Tag", properties: [.scalar("_id", .string), .scalar("name", .string, optional: true)]))
        }
        _ = try cluster.send(from: 0, to: 2)
        _ = try cluster.send(from: 1, to: 2)
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Tag"] != nil)
            #expect(try replica.objects("Tag").isEmpty)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 8: a change of a property's type is not refused because of a concurrent addition of the old definition")
    func typeChangeBeatsConcurrentOldAddition() throws {
        let cluster = try cluster(2)
        let old = try Cluster(1, schema: Self.schema, firstReplicaID: 9)
        try old[0].write { try $0.create("Task", ["_id": "o", "count": 4]) }
        let fromOld = try old[0].changesets(missingFrom: VersionVector())
        // A migration makes `count` a string: it removes the old property and adds the new one in one changeset.
        try cluster[0].write { txn in
            try txn.emit(.removeProperty(type: "Task", name: "count"))
            try txn.emit(.addProperty(type: "Task", .scalar("count", .string, default: "none")))
        }
        _ = try cluster[1].integrate(fromOld)
        try cluster.syncAll()
        let report = try cluster[0].integrate(fromOld)
        #expect(report.rejected.isEmpty)
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "count"] == .scalar("count", .string, default: "none"))
            #expect(try value(replica, "count", key: .string("o")) == "none")
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 9: a changeset stamped too far ahead waits until this replica's clock is near it")
    func futureStampsWait() throws {
        let cluster = try cluster()
        try seed(cluster)
        cluster.clocks[1].advance(byMilliseconds: 2 * 3_600_000)  // two hours ahead
        try cluster[1].write { try $0.update("Task", primaryKey: task, ["title": "from the future"]) }
        let report = try cluster.send(from: 1, to: 0)
        #expect(report.integrated.isEmpty)
        #expect(report.waiting == 1)
        #expect(try value(cluster[0], "title") == "untitled")
        cluster.clocks[0].advance(byMilliseconds: 2 * 3_600_000)
        let later = try cluster[0].integratePending()
        #expect(later.integrated.count == 1)
        #expect(try value(cluster[0], "title") == "from the future")
    }

    @Test func integrationIsIdempotentAndWaitsForPredecessors() throws {
        let cluster = try cluster()
        try cluster[0].write { try $0.create("Task", ["_id": "t", "title": "one"]) }
        try cluster[0].write { try $0.update("Task", primaryKey: task, ["title": "two"]) }
        try cluster[0].write { try $0.update("Task", primaryKey: task, ["title": "three"]) }
        let all = try cluster[0].changesets(missingFrom: VersionVector())
        #expect(all.count == 4)
        // The last two arrive first: they wait.
        let first = try cluster[1].integrate(Array(all.suffix(2)))
        #expect(first.integrated.isEmpty)
        #expect(first.waiting == 2)
        #expect(try cluster[1].pendingChangesets().count == 2)
        // The rest arrive, twice: everything integrates once.
        let second = try cluster[1].integrate(all + all)
        #expect(second.integrated.count == 4)  // the two that arrived, then the two that waited
        #expect(second.duplicates >= 4)
        #expect(try cluster[1].pendingChangesets().isEmpty)
        #expect(try value(cluster[1], "title") == "three")
        let again = try cluster[1].integrate(all)
        #expect(again.integrated.isEmpty)
        #expect(again.duplicates == 4)
        try cluster.syncAll()
        #expect(try cluster.converged())
        #expect(try cluster[1].verify().passed)
    }

    @Test func pendingChangesetsSurviveReopen() throws {
        let cluster = try cluster()
        try cluster[0].write { try $0.create("Task", ["_id": "t", "title": "one"]) }
        try cluster[0].write { try $0.update("Task", primaryKey: task, ["title": "two"]) }
        let all = try cluster[0].changesets(missingFrom: VersionVector())
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        do {
            let replica = try Replica.open(directory: directory.path, configuration: configuration)
            #expect(try replica.integrate([all[2]]).waiting == 1)
            replica.close()
        }
        let reopened = try Replica.open(directory: directory.path, configuration: configuration)
        let report = try reopened.integrate(Array(all.prefix(2)))
        #expect(report.integrated.count == 3)
        #expect(try reopened.object("Task", primaryKey: task)?["title"] == "two")
        #expect(try reopened.verify().passed)
    }
}
