import Synchronization
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// The daemon's subscription index: a commit wakes the flexible-sync sessions whose subscriptions the changed objects
/// matched before or after it, and no other.
@Suite("Subscription index")
struct SubscriptionIndexTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(name: "User", properties: [.scalar("_id", .string), .scalar("name", .string, default: "")]),
            ObjectSchema(
                name: "Task",
                properties: [
                    .scalar("_id", .string), .scalar("owner", .string, default: ""), .scalar("count", .int, default: 0),
                    .scalar("title", .string, default: ""), Property("assignee", .link("User")),
                    .scalar("extra", .mixed),
                ]),
        ])

    /// Wakes per session, by name.
    final class Wakes: Sendable {
        private let counts = Mutex<[String: Int]>([:])

        func wake(_ name: String) -> @Sendable () -> Void {
            { self.counts.withLock { $0[name, default: 0] += 1 } }
        }

        /// The sessions woken since the last call, sorted.
        func take() -> [String] {
            counts.withLock { counts in
                defer { counts = [:] }
                return counts.keys.sorted()
            }
        }
    }

    /// Sessions on `replica` with these subscriptions, by name.
    static func sessions(
        _ replica: Replica, _ wakes: Wakes, _ subscriptions: [String: [String]]
    ) -> [String: FlexibleSessionView] {
        var views: [String: FlexibleSessionView] = [:]
        for (name, queries) in subscriptions {
            let view = replica.registerFlexibleSession(wake: wakes.wake(name))
            replica.subscriptionIndex.setSubscriptions(
                view.member!, queries.map { Subscription(type: "Task", query: $0) }, schema: replica.schema,
                head: replica.lastLocalSequence)
            views[name] = view
        }
        return views
    }

    @Test("A commit wakes the sessions whose subscriptions the object matched before or after it, and no other")
    func wakesOnlyConcernedSessions() throws {
        let directory = TemporaryDirectory("subscription-index")
        let replica = try Replica.open(directory: directory.appending("daemon"), schema: Self.schema)
        defer { replica.close() }
        let wakes = Wakes()
        let views = Self.sessions(
            replica, wakes,
            [
                "a": ["owner == 'a'"], "b": ["owner == 'b'"], "big": ["count >= 5"], "ad": ["owner IN {'a', 'd'}"],
                "titled": ["title == 'x' AND count == 1", "owner == 'nobody'"],
            ])
        _ = wakes.take()

        try replica.write { try $0.create("Task", ["_id": "t1", "owner": "a", "count": 1]) }
        #expect(wakes.take() == ["a", "ad"])
        try replica.write { try $0.update("Task", primaryKey: .string("t1"), ["owner": "b"]) }
        #expect(wakes.take() == ["a", "ad", "b"], "before the commit it matched a and ad, after it b")
        try replica.write { try $0.update("Task", primaryKey: .string("t1"), ["count": 7]) }
        #expect(wakes.take() == ["b", "big"])
        try replica.write { try $0.update("Task", primaryKey: .string("t1"), ["title": "x"]) }
        #expect(wakes.take() == ["b", "big"])
        try replica.write { try $0.update("Task", primaryKey: .string("t1"), ["count": 1]) }
        #expect(wakes.take() == ["b", "big", "titled"])
        let deleted = try replica.write { try $0.delete("Task", primaryKey: .string("t1")) }
        #expect(deleted)
        #expect(wakes.take() == ["b", "titled"], "an erase concerns those it matched before")
        try replica.write { try $0.create("User", ["_id": "u1", "name": "ann"]) }
        #expect(wakes.take() == [], "no subscription selects users")
        try replica.write { try $0.create("Task", ["_id": "t2", "owner": "c", "count": 2]) }
        #expect(wakes.take() == [])

        // The commits that woke a session are the ones it judges; the others it receives as skeletons.
        let head = replica.lastLocalSequence
        let judging = try #require(replica.subscriptionIndex.judging(views["b"]!.member!))
        #expect(judging.judges(head - 2), "the erase concerned b")
        #expect(!judging.judges(head - 1) && !judging.judges(head), "the user and t2 did not")
        #expect(judging.judges(head + 1), "a commit the index has not seen yet is judged")
        // Once sent, those commits are not noted any more.
        replica.subscriptionIndex.sent(views["b"]!.member!, through: head)
        #expect(replica.subscriptionIndex.judging(views["b"]!.member!)?.concerning.isEmpty == true)

        // A schema change concerns every session (their queries are compiled again).
        try replica.write { txn in
            try txn.addType(ObjectSchema(name: "Note", properties: [.scalar("_id", .string)]))
        }
        #expect(wakes.take() == ["a", "ad", "b", "big", "titled"])
        // A session that ended is not woken.
        replica.endFlexibleSession(views["a"]!)
        try replica.write { try $0.create("Task", ["_id": "t3", "owner": "a"]) }
        #expect(wakes.take() == ["ad"])
        #expect(replica.subscriptionIndex.memberCount == 4)
    }

    @Test("A query that reads through a link concerns its session on every change to its type")
    func linkQueriesConcernEveryChange() throws {
        let directory = TemporaryDirectory("subscription-index-links")
        let replica = try Replica.open(directory: directory.appending("daemon"), schema: Self.schema)
        defer { replica.close() }
        try replica.write { txn in
            try txn.create("User", ["_id": "u1", "name": "ann"])
            try txn.create("Task", ["_id": "t1", "assignee": .link(.string("u1"))])
        }
        let wakes = Wakes()
        _ = Self.sessions(replica, wakes, ["ann's": ["assignee.name == 'ann'"], "owned": ["owner == 'z'"]])
        try replica.write { try $0.update("Task", primaryKey: .string("t1"), ["count": 3]) }
        #expect(wakes.take() == ["ann's"])
        try replica.write { try $0.create("Task", ["_id": "t2"]) }
        #expect(wakes.take() == ["ann's"])
    }

    @Test("A query on a mixed value, which may hold a link, concerns its session on every change to its type")
    func mixedLinkQueriesConcernEveryChange() throws {
        let directory = TemporaryDirectory("subscription-index-mixed")
        let replica = try Replica.open(directory: directory.appending("daemon"), schema: Self.schema)
        defer { replica.close() }
        try replica.write { txn in
            try txn.create("User", ["_id": "u1", "name": "ann"])
            try txn.create("Task", ["_id": "t1", "extra": .typedLink(type: "User", key: .string("u1"))])
        }
        let wakes = Wakes()
        _ = Self.sessions(replica, wakes, ["ann's": ["extra == obj('User', 'u1')"], "owned": ["owner == 'z'"]])
        try replica.write { try $0.update("Task", primaryKey: .string("t1"), ["count": 3]) }
        #expect(wakes.take() == ["ann's"])
    }

    @Test("A commit that integrates several changesets notes every one of them for the sessions it concerns")
    func batchCommitsNoteEveryChangeset() throws {
        let directory = TemporaryDirectory("subscription-index-batch")
        let writer = try Replica.open(directory: directory.appending("writer"), schema: Self.schema)
        defer { writer.close() }
        let replica = try Replica.open(directory: directory.appending("daemon"), schema: Self.schema)
        defer { replica.close() }
        try replica.integrate(encoded: try writer.encodedChangesets(missingFrom: replica.versionVector))
        for index in 1...3 {
            try writer.write { try $0.create("Task", ["_id": .string("t\(index)"), "owner": "a"]) }
        }
        let wakes = Wakes()
        let views = Self.sessions(replica, wakes, ["a": ["owner == 'a'"], "b": ["owner == 'b'"]])
        let before = replica.lastLocalSequence
        try replica.integrate(encoded: try writer.encodedChangesets(missingFrom: replica.versionVector))
        #expect(replica.lastLocalSequence == before + 3)
        #expect(wakes.take() == ["a"], "one commit, one wake")
        let a = try #require(replica.subscriptionIndex.judging(views["a"]!.member!))
        let b = try #require(replica.subscriptionIndex.judging(views["b"]!.member!))
        for sequence in before + 1...before + 3 {
            #expect(a.judges(sequence))
            #expect(!b.judges(sequence))
        }
    }
}
