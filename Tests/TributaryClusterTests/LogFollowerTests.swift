import Foundation
import Testing
import Tributary
import TributaryCluster
import TributaryModel
import TributaryTestSupport

/// Daemons' replicas following one shared log: with the cluster's replica id and the log's order, they end equal.
@Suite(
    "Replicas following the shared log", .serialized,
    .enabled(if: PostgresServer.isAvailable, Comment(rawValue: PostgresServer.unavailable)))
struct LogFollowerTests {
    static let schema = Schema(types: [
        ObjectSchema(
            name: "Task",
            properties: [
                .scalar("_id", .string), .scalar("title", .string, optional: true), .scalar("count", .int),
                Property("tags", .scalar(.string), list: true),
            ])
    ])

    /// Three apps that write the same objects concurrently (no sync between them), as three devices offline: titles,
    /// increments, lists, and deletes of one object.
    static func apps(in directory: TemporaryDirectory, seed: UInt64) async throws -> [Replica] {
        var random = SplitMix64(seed: seed)
        var apps: [Replica] = []
        for index in 0..<3 {
            apps.append(try Replica.open(directory: directory.appending("app\(index)"), schema: schema))
        }
        for round in 0..<12 {
            for app in apps {
                let key = "t\(random.next() % 4)"
                let choice = random.next() % 4
                let title = "title \(round) \(random.next() % 100)"
                let tag = "tag\(random.next() % 5)"
                try await app.write { txn in
                    let key = PrimaryKey.string(key)
                    if try txn.object("Task", primaryKey: key) == nil {
                        _ = try txn.create("Task", ["_id": key.value, "count": 0])
                    }
                    switch choice {
                    case 0: try txn.update("Task", primaryKey: key, ["title": .string(title)])
                    case 1: try txn.increment(["count"], of: "Task", primaryKey: key, by: 1)
                    case 2: try txn.update("Task", primaryKey: key, ["tags": .list([.string(tag)])])
                    // An erase beats every concurrent write (rule 2): only t0 is ever deleted, so that the others
                    // survive the merge.
                    default: if key == .string("t0") { _ = try txn.delete("Task", primaryKey: key) }
                    }
                }
            }
        }
        return apps
    }

    /// Each app's changesets, as an upload carries them, with their identities.
    static func uploads(of app: Replica) throws -> [SharedLog.Append] {
        let export = try app.export(missingFrom: VersionVector(), limit: .max, maximumBytes: .max)
        return export.changesets.enumerated().map { index, bytes in
            SharedLog.Append(origin: app.replicaID, originSequence: UInt64(index + 1), body: bytes)
        }
    }

    static func follower(_ directory: TemporaryDirectory, _ name: String, id: ReplicaID) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.replicaID = id
        configuration.durability = .none
        return try Replica.open(directory: directory.appending(name), configuration: configuration)
    }

    @Test("Two daemons' replicas with the cluster's id, following one log at different paces, end byte for byte equal")
    func followersConverge() async throws {
        let server = try await PostgresServer.start()
        defer { server.stop() }
        let directory = TemporaryDirectory("follow")
        let log = try await SharedLogTests.open(server)
        let apps = try await Self.apps(in: directory, seed: SplitMix64.seedFromEnvironment(default: 11))
        // The apps' uploads reach the daemons interleaved: a batch of each in turn.
        var queues = try apps.map { try Self.uploads(of: $0) }
        var appended: [[SharedLog.Append]] = []
        while queues.contains(where: { !$0.isEmpty }) {
            for index in queues.indices where !queues[index].isEmpty {
                let count = min(queues[index].count, 1 + appended.count % 3)
                appended.append(Array(queues[index].prefix(count)))
                queues[index].removeFirst(count)
            }
        }
        let cluster = ReplicaID.random()
        let first = try Self.follower(directory, "daemon1", id: cluster)
        let second = try Self.follower(directory, "daemon2", id: cluster)
        let eager = try LogFollower(log: log, replica: first, batchLimit: 7)
        // The first daemon applies as the log grows; the second only at the end, in larger reads.
        for batch in appended {
            _ = try await log.append(batch)
            if batch.count == 2 { try await eager.catchUp() }
        }
        // An upload retried after its acknowledgement was lost is stored once.
        _ = try await log.append(appended[0])
        let head = try await log.head()
        #expect(head == UInt64(appended.reduce(0) { $0 + $1.count }))
        #expect(try await eager.catchUp() == head)
        let late = try LogFollower(log: log, replica: second, batchLimit: 1_000)
        #expect(try await late.catchUp() == head)

        #expect(first.versionVector == second.versionVector)
        #expect(try first.viewDigest(includeVersionVector: true) == second.viewDigest(includeVersionVector: true))
        let firstLog = try first.export(missingFrom: VersionVector(), limit: .max, maximumBytes: .max).changesets
        let secondLog = try second.export(missingFrom: VersionVector(), limit: .max, maximumBytes: .max).changesets
        #expect(firstLog.count == Int(head))
        #expect(firstLog == secondLog)
        for replica in [first, second] { #expect(try replica.verify().passed) }
        // What the daemons hold is what a replica holds that merged every app's changesets directly.
        let direct = try Replica.open(directory: directory.appending("direct"))
        for app in apps { _ = try direct.integrate(encoded: try Self.uploads(of: app).map(\.body)) }
        let held = try await first.read { try $0.objects("Task").map(\.values) }
        let merged = try await direct.read { try $0.objects("Task").map(\.values) }
        #expect(held == merged)
        #expect(!held.isEmpty)
        await log.close()
    }

    @Test("A follower resumes from the position its replica stored, and refuses a log of another epoch")
    func resumeAndEpoch() async throws {
        let server = try await PostgresServer.start()
        defer { server.stop() }
        let directory = TemporaryDirectory("follow-resume")
        let log = try await SharedLogTests.open(server)
        let apps = try await Self.apps(in: directory, seed: 5)
        let uploads = try Self.uploads(of: apps[0])
        _ = try await log.append(Array(uploads.prefix(5)))
        let cluster = ReplicaID.random()
        var replica = try Self.follower(directory, "daemon", id: cluster)
        #expect(try await LogFollower(log: log, replica: replica).catchUp() == 5)
        replica.close()
        _ = try await log.append(Array(uploads.dropFirst(5)))
        replica = try Self.follower(directory, "daemon", id: cluster)
        // The position is stored with the changeset applied there; a position stored without it (24 bytes, before
        // it was kept) still reads.
        let stored = try #require(try replica.sharedLogPosition())
        #expect(stored.position == 5 && stored.epoch == log.epoch)
        #expect(stored.last == Dot(origin: uploads[4].origin, sequence: uploads[4].originSequence))
        try replica.setSharedLogPosition(SharedLogPosition(epoch: log.epoch, position: 5, last: nil))
        #expect(try replica.sharedLogPosition() == SharedLogPosition(epoch: log.epoch, position: 5, last: nil))
        try replica.setSharedLogPosition(stored)
        let resumed = try LogFollower(log: log, replica: replica)
        #expect(await resumed.applied == 5)
        #expect(try await resumed.catchUp() == UInt64(uploads.count))
        #expect(try await replica.read { try $0.count("Task") } == apps[0].read { try $0.count("Task") })
        // The same replica against another log (another epoch) is refused: its state came from a history that log
        // does not have.
        let other = try await SharedLogTests.open(server, log: "another")
        #expect(throws: SharedLogError.self) { try LogFollower(log: other, replica: replica) }
        await log.close()
        await other.close()
    }

    @Test("A running follower applies appends as they are announced")
    func running() async throws {
        let server = try await PostgresServer.start()
        defer { server.stop() }
        let directory = TemporaryDirectory("follow-run")
        let log = try await SharedLogTests.open(server)
        let apps = try await Self.apps(in: directory, seed: 8)
        let uploads = try Self.uploads(of: apps[1])
        let replica = try Self.follower(directory, "daemon", id: ReplicaID.random())
        let follower = try LogFollower(log: log, replica: replica)
        // A long interval: what wakes it is the announcement.
        let running = Task { await follower.run(interval: .seconds(30)) }
        try await Task.sleep(for: .milliseconds(300))
        _ = try await log.append(uploads)
        let deadline = ContinuousClock.now + .seconds(120)
        while await follower.applied < UInt64(uploads.count) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(await follower.applied == UInt64(uploads.count))
        running.cancel()
        await running.value
        #expect(try await replica.read { try $0.count("Task") } == apps[1].read { try $0.count("Task") })
        await log.close()
    }
}
