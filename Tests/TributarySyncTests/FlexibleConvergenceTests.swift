import Foundation
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Partial replicas (M4): two peer daemons, four apps with random subscription sets that change over time, random
/// writes and sessions going offline. At the end each app holds exactly the objects its set covers on its daemon,
/// each equal to the daemon's copy, and every replica's views equal a replay of its log.
@Suite("Flexible sync convergence")
struct FlexibleConvergenceTests {
    /// Steps per run (`TRIBUTARY_FLEXIBLE_STEPS`; a deep run uses 2,000) and the seed (`TRIBUTARY_SEED`).
    static let steps =
        Int(ProcessInfo.processInfo.environment["TRIBUTARY_FLEXIBLE_STEPS"] ?? "") ?? Deep.count(ci: 200, deep: 2_000)

    /// The queries subscriptions are drawn from: ranges and equalities on `count`, and a title.
    static func randomSubscription(_ random: inout SplitMix64) -> Subscription {
        let low = random.next() % 8
        switch random.next() % 4 {
        case 0: return Subscription(type: "Task", query: "count == \(low)")
        case 1: return Subscription(type: "Task", query: "count >= \(low) AND count < \(low + 3)")
        case 2: return Subscription(name: "titled", type: "Task", query: "title == 'title \(low % 3)'")
        default: return Subscription(type: "Task", query: "count IN {\(low), \(low + 2)}")
        }
    }

    @Test("2 daemons, 4 apps, random subscriptions and writes: each app holds exactly what its set covers")
    func partialReplicasConverge() async throws {
        try await run(goingOffline: false)
    }

    /// With sessions going offline at random: a compensating write whose connection dropped after the daemon committed
    /// the refused upload is sent again when the app reconnects.
    @Test("The same, with apps going offline and back at random")
    func partialReplicasConvergeThroughDisconnections() async throws {
        try await run(goingOffline: true)
    }

    func run(goingOffline: Bool) async throws {
        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 33))
        let directory = TemporaryDirectory("flexible-m4")
        let (first, firstEndpoint) = try await LoopbackSyncTests.daemon(directory, "daemon0")
        let (second, secondEndpoint) = try await LoopbackSyncTests.daemon(directory, "daemon1", peers: [firstEndpoint])
        let daemons = [first, second]
        let endpoints = [firstEndpoint, secondEndpoint]
        var apps: [Replica] = []
        var sessions: [SyncSession] = []
        for index in 0..<4 {
            let app = try LoopbackSyncTests.app(directory, "app\(index)")
            try app.subscriptions.commit { $0.append(Self.randomSubscription(&random)) }
            apps.append(app)
            sessions.append(app.connect(to: endpoints[index % 2], configuration: LoopbackSyncTests.fastBackoff))
        }

        var paused = Set<Int>()
        for step in 0..<Self.steps {
            let index = Int(random.next() % 4)
            let app = apps[index]
            let choice = random.next() % 20
            if choice < 2 {
                // A new set: add, replace or drop subscriptions.
                let added = Self.randomSubscription(&random)
                let drop = random.next() % 3 == 0
                try app.subscriptions.commit { subs in
                    if drop, let first = subs.subscriptions.first { subs.remove(first) }
                    subs.append(added)
                }
                continue
            }
            let latest = try app.subscriptions.latest
            guard latest.covers(type: "Task") else { continue }
            let count = Self.countMatching(latest, &random)
            let draws = (random.next(), random.next(), random.next(), random.next())
            try await app.write { txn in
                // Read in the transaction: a daemon's message may remove objects from the app at any time.
                let held = try txn.objects("Task")
                if choice < 10 || held.isEmpty {
                    // A new object in the view: its count matches one of the app's subscriptions where it can.
                    try txn.create(
                        "Task",
                        [
                            "_id": .string("a\(index)-\(step)"), "count": .int(count),
                            "title": .string("title \(draws.0 % 3)"),
                        ])
                } else {
                    let target = held[Int(draws.1 % UInt64(held.count))].primaryKey
                    switch draws.2 % 4 {
                    case 0: try txn.update("Task", primaryKey: target, ["count": .int(Int64(draws.3 % 10))])
                    case 1: try txn.update("Task", primaryKey: target, ["title": .string("title \(draws.3 % 3)")])
                    case 2: try txn.increment(["count"], of: "Task", primaryKey: target, by: 1)
                    default: _ = try txn.delete("Task", primaryKey: target)
                    }
                }
            }
            if goingOffline, random.next() % 25 == 0 {
                let target = Int(random.next() % 4)
                if paused.remove(target) != nil {
                    sessions[target].resume()
                } else {
                    paused.insert(target)
                    await sessions[target].pause()
                }
            }
            if random.next() % 10 == 0 { try await Task.sleep(for: .milliseconds(2)) }
        }
        for target in paused { sessions[target].resume() }
        let sessionsList = sessions

        // Heal: uploads, daemons converge, every set completes, every app downloads.
        try await LoopbackSyncTests.within(.seconds(180), "uploads") {
            for session in sessionsList { try await session.waitForUpload() }
        }
        try await LoopbackSyncTests.within(.seconds(180), "daemons converging") {
            while true {
                let digests = try daemons.map { try $0.replica.viewDigest(includeVersionVector: false) }
                if Set(digests).count == 1 && Set(daemons.map(\.replica.versionVector)).count == 1 { return }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        let appsList = apps
        try await LoopbackSyncTests.within(.seconds(180), "sets and downloads") {
            for (app, session) in zip(appsList, sessionsList) {
                try await app.subscriptions.waitForSync()
                try await session.waitForDownload()
            }
        }
        var heldInAll = 0
        for (index, app) in apps.enumerated() {
            let daemon = daemons[index % 2].replica
            let set = try app.subscriptions.active
            #expect(set.version == (try app.subscriptions.latest.version), "app \(index): \(set)")
            var expected: Set<PrimaryKey> = []
            for subscription in set.subscriptions {
                for object in try daemon.objects("Task", where: subscription.query) {
                    expected.insert(object.primaryKey)
                }
            }
            let held = try app.objects("Task")
            #expect(Set(held.map(\.primaryKey)) == expected, "app \(index) holds other objects than \(set) covers")
            let differing = try held.filter { object in
                try daemon.object("Task", primaryKey: object.primaryKey)?.values != object.values
            }
            let described = try differing.map { object in
                "\(object.primaryKey) is \(object.values) here, "
                    + "\(String(describing: try daemon.object("Task", primaryKey: object.primaryKey)?.values)) there"
            }
            #expect(differing.isEmpty, "app \(index): \(described)")
            heldInAll += held.count
        }
        for replica in apps + daemons.map(\.replica) {
            let report = try replica.verify()
            #expect(report.passed, "\(report)")
        }
        #expect(heldInAll > 0)
        for session in sessions { await session.close() }
        for daemon in daemons.reversed() { await daemon.stop() }
    }

    /// A count that one of `set`'s subscriptions covers, when one on `count` is there; otherwise a random one.
    static func countMatching(_ set: SubscriptionSet, _ random: inout SplitMix64) -> Int64 {
        for subscription in set.subscriptions {
            let words = subscription.query.split(separator: " ")
            if words.count >= 3, words[0] == "count", words[1] == "==" || words[1] == ">=", let value = Int64(words[2])
            {
                return value
            }
            if words.count >= 3, words[0] == "count", words[1] == "IN" {
                return Int64(words[2].trimmingCharacters(in: CharacterSet(charactersIn: "{,"))) ?? 0
            }
        }
        return Int64(random.next() % 10)
    }
}
