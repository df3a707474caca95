import Foundation
import Synchronization
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// A daemon with a retention window compacts its log: devices inside the window keep syncing, one away longer is
/// reset with its offline changes recovered, and a new device starts from the base state.
@Suite("Retention and log compaction on a daemon")
struct RetentionSyncTests {
    static let schema = ClientResetTests.schema

    static func within<T: Sendable>(_ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T
    {
        try await LoopbackSyncTests.within(.seconds(120), what, body)
    }

    /// Runs `daemon`'s compaction as of `now` until it compacts. A connected app reports what it holds in its
    /// acknowledgements, and the daemon holds back a compaction until it has them: the app's acknowledgement of the
    /// last changesets the daemon sent it (its own, adopted) may still be on its way when its upload is done.
    static func compacts(_ daemon: SyncServer, asOf now: UInt64, minimumFraction: Double = 0.1) async throws {
        try await within("a compaction") {
            while try await !daemon.compactHistory(asOf: now, minimumFraction: minimumFraction) {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    /// A daemon on loopback with `retention`, its compaction rounds an hour apart (the tests run them).
    static func daemon(
        _ directory: String, retention: Duration?, _ configure: (inout SyncServer.Configuration) -> Void = { _ in }
    ) async throws -> (SyncServer, Replica, SyncEndpoint) {
        let replica = try Replica.open(directory: directory)
        var configuration = SyncServer.Configuration()
        configuration.port = 0
        configuration.retention = retention
        configuration.compactionInterval = .seconds(3_600)
        configure(&configuration)
        let server = SyncServer(replica: replica, configuration: configuration)
        let port = try await server.start()
        return (server, replica, SyncEndpoint(host: "127.0.0.1", port: port))
    }

    static func counts(_ replica: Replica) throws -> [String: Int64] {
        var counts: [String: Int64] = [:]
        for object in try replica.objects("Task") {
            if case .string(let key) = object.primaryKey, case .int(let count) = object["count"] { counts[key] = count }
        }
        return counts
    }

    @Test("Devices within the window sync on, one away longer is reset and recovers, a new one starts from the base")
    func retentionWindow() async throws {
        let directory = TemporaryDirectory("retention")
        // Small parts, so that a base goes in many of them.
        let (server, daemonReplica, endpoint) = try await Self.daemon(
            directory.appending("daemon"), retention: .seconds(86_400)
        ) { $0.bootstrapMessageBytes = 300 }
        let configuration = ClientResetTests.configuration()

        let first = try Replica.open(directory: directory.appending("first"), schema: Self.schema)
        let second = try Replica.open(directory: directory.appending("second"), schema: Self.schema)
        let away = try Replica.open(directory: directory.appending("away"), schema: Self.schema)
        let firstSession = first.connect(to: endpoint, configuration: configuration)
        let secondSession = second.connect(to: endpoint, configuration: configuration)
        let awaySession = away.connect(to: endpoint, configuration: configuration)
        try await first.write { txn in
            for index in 0..<4 { _ = try txn.create("Task", ["_id": .string("t\(index)"), "title": "created"]) }
        }
        try await Self.within("the creates") {
            try await firstSession.waitForUpload()
            try await secondSession.waitForDownload()
        }
        for round in 0..<20 {
            try await first.write { txn in
                try txn.increment(["count"], of: "Task", primaryKey: .string("t\(round % 4)"), by: 1)
            }
            try await second.write { txn in
                try txn.append(.string("r\(round)"), to: ["tags"], of: "Task", primaryKey: .string("t0"))
            }
        }
        try await Self.within("everyone's first sync") {
            for session in [firstSession, secondSession, awaySession] { try await session.waitForUpload() }
            for session in [firstSession, secondSession, awaySession] { try await session.waitForDownload() }
        }
        // One device goes away and writes offline.
        await awaySession.close()
        try await away.write { txn in
            _ = try txn.create("Task", ["_id": "offline", "title": "written while away"])
            try txn.increment(["count"], of: "Task", primaryKey: .string("t1"), by: 100)
        }
        for round in 0..<10 {
            try await first.write { txn in
                try txn.update("Task", primaryKey: .string("t2"), ["title": .string("later \(round)")])
            }
        }
        try await Self.within("the later writes") {
            try await firstSession.waitForUpload()
            try await secondSession.waitForDownload()
        }
        let entriesBefore = try daemonReplica.logFigures().entries

        // Two days on: the device away is out of the window; the two connected ones are not.
        let later = UInt64(Date().timeIntervalSince1970) + 2 * 86_400
        try await Self.compacts(server, asOf: later)
        let figures = try daemonReplica.logFigures()
        #expect(figures.compactedThrough > 0)
        #expect(figures.entries < entriesBefore / 4, "\(figures.entries) of \(entriesBefore) entries left")
        #expect(try daemonReplica.verify().passed)

        // The connected devices keep syncing, over objects only the base holds.
        try await second.write { txn in
            try txn.increment(["count"], of: "Task", primaryKey: .string("t3"), by: 1_000)
        }
        try await Self.within("a write after the compaction") {
            try await secondSession.waitForUpload()
            try await firstSession.waitForDownload()
        }
        #expect(try Self.counts(first)["t3"] == 1_005)

        // The device away comes back: it is reset, and what it wrote offline is recovered.
        let returning = away.connect(to: endpoint, configuration: configuration)
        let report = try await ClientResetTests.firstReset(returning)
        #expect(report.reason.contains("compacted its history"), "\(report.reason)")
        #expect(report.recovered)
        try await Self.within("the recovered upload") { try await returning.waitForUpload() }
        try await Self.within("everyone catching up") {
            try await firstSession.waitForDownload()
            try await returning.waitForDownload()
        }
        #expect(try ClientResetTests.titles(first)["offline"] == "written while away")
        #expect(try Self.counts(first)["t1"] == 105)
        #expect(try Self.counts(returning.replica) == Self.counts(first))

        // A new device starts from the base, then takes what came after it.
        let newcomer = try Replica.open(directory: directory.appending("newcomer"), schema: Self.schema)
        let newcomerSession = newcomer.connect(to: endpoint, configuration: configuration)
        try await Self.within("the newcomer's download") { try await newcomerSession.waitForDownload() }
        #expect(try newcomer.logCompaction() != nil)
        #expect(try ClientResetTests.titles(newcomer) == ClientResetTests.titles(first))
        #expect(try Self.counts(newcomer) == Self.counts(first))
        #expect(
            try newcomer.object("Task", primaryKey: .string("t0"))?["tags"]
                == first.object("Task", primaryKey: .string("t0"))?["tags"])
        #expect(try newcomer.verify().passed)
        try await newcomer.write { txn in
            try txn.update("Task", primaryKey: .string("t0"), ["title": "from the newcomer"])
        }
        try await Self.within("the newcomer's write") {
            try await newcomerSession.waitForUpload()
            try await firstSession.waitForDownload()
        }
        #expect(try ClientResetTests.titles(first)["t0"] == "from the newcomer")

        // A new flexible-sync device starts from the base too, without its records: its subscription brings the
        // objects it asks for.
        let phone = try Replica.open(directory: directory.appending("phone"), schema: Self.schema)
        try phone.subscriptions.commit { $0.append("Task", where: "count >= 5") }
        let phoneSession = phone.connect(to: endpoint, configuration: configuration)
        try await Self.within("the phone's bootstrap") {
            _ = try await phone.subscriptions.waitForSync()
            try await phoneSession.waitForDownload()
        }
        #expect(try phone.logCompaction() != nil)
        let wanted = try Self.counts(first).filter { $0.value >= 5 }
        #expect(try Self.counts(phone) == wanted)
        #expect(try phone.verify().passed)
        try await phone.write { txn in try txn.increment(["count"], of: "Task", primaryKey: .string("t3"), by: 1) }
        try await Self.within("the phone's write") {
            try await phoneSession.waitForUpload()
            try await firstSession.waitForDownload()
        }
        #expect(try Self.counts(first)["t3"] == 1_006)
        await phoneSession.close()
        phone.close()

        // The reports survive a restart of the daemon.
        await server.stop()
        #expect(try daemonReplica.syncReports(now: 0).count >= 3)
        for session in [firstSession, secondSession, returning, newcomerSession] { await session.close() }
        for replica in [first, second, returning.replica, newcomer, daemonReplica] { replica.close() }
    }

    @Test("A new peer daemon starts from a compacted daemon's base, and serves its apps")
    func newPeerStartsFromBase() async throws {
        let directory = TemporaryDirectory("retention-peer")
        let (firstDaemon, firstReplica, firstEndpoint) = try await Self.daemon(
            directory.appending("first-daemon"), retention: .seconds(3_600))
        let configuration = ClientResetTests.configuration()

        let app = try Replica.open(directory: directory.appending("app"), schema: Self.schema)
        let appSession = app.connect(to: firstEndpoint, configuration: configuration)
        for index in 0..<30 {
            try await app.write { txn in
                _ = try txn.upsert("Task", ["_id": .string("t\(index % 6)"), "title": .string("v\(index)")])
                try txn.increment(["count"], of: "Task", primaryKey: .string("t\(index % 6)"), by: 1)
            }
        }
        try await Self.within("the app's upload") { try await appSession.waitForUpload() }
        // Not before the daemon kept reports for a whole retention; then, with the app connected, up to what it holds.
        #expect(try await !firstDaemon.compactHistory(minimumFraction: 0))
        let later = UInt64(Date().timeIntervalSince1970) + 2 * 3_600
        try await Self.compacts(firstDaemon, asOf: later, minimumFraction: 0)
        #expect(try firstReplica.logCompaction() != nil)

        // A second daemon, new and empty, dials the first as a peer.
        let (secondDaemon, secondReplica, secondEndpoint) = try await Self.daemon(
            directory.appending("second-daemon"), retention: nil
        ) { configuration in
            configuration.peers = [firstEndpoint]
            configuration.peerBackoff = ReconnectBackoff(initial: .milliseconds(50), maximum: .milliseconds(500))
        }
        try await Self.within("the second daemon starting from the first one's base") {
            while try secondReplica.logCompaction() == nil { try await Task.sleep(for: .milliseconds(20)) }
        }
        let reader = try Replica.open(directory: directory.appending("reader"), schema: Self.schema)
        let readerSession = reader.connect(to: secondEndpoint, configuration: configuration)
        try await Self.within("the data reaching the second daemon's app") {
            while try Self.counts(reader) != Self.counts(app) {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(try secondReplica.verify().passed)
        #expect(try ClientResetTests.titles(reader) == ClientResetTests.titles(app))

        // Writes flow both ways across the peers.
        try await reader.write { txn in try txn.update("Task", primaryKey: .string("t0"), ["title": "via the second"]) }
        try await Self.within("the write through the second daemon") {
            while try ClientResetTests.titles(app)["t0"] != "via the second" {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        await readerSession.close()
        await appSession.close()
        await secondDaemon.stop()
        await firstDaemon.stop()
        for replica in [reader, app, secondReplica, firstReplica] { replica.close() }
    }

    @Test("Two peered daemons with a retention compact while apps on each write: nothing is lost, everyone converges")
    func meshCompacting() async throws {
        let directory = TemporaryDirectory("retention-mesh")
        let (first, firstReplica, firstEndpoint) = try await Self.daemon(
            directory.appending("first"), retention: .seconds(3_600))
        let (second, secondReplica, secondEndpoint) = try await Self.daemon(
            directory.appending("second"), retention: .seconds(3_600)
        ) { configuration in
            configuration.peers = [firstEndpoint]
            configuration.peerBackoff = ReconnectBackoff(initial: .milliseconds(50), maximum: .milliseconds(500))
        }
        let configuration = ClientResetTests.configuration()
        var apps: [Replica] = []
        var sessions: [SyncSession] = []
        for index in 0..<4 {
            let app = try Replica.open(directory: directory.appending("app\(index)"), schema: Self.schema)
            apps.append(app)
            sessions.append(
                app.connect(to: index % 2 == 0 ? firstEndpoint : secondEndpoint, configuration: configuration))
        }
        try await apps[0].write { txn in
            for key in 0..<5 { _ = try txn.create("Task", ["_id": .string("t\(key)"), "title": "new"]) }
        }
        let openSessions = sessions
        try await Self.within("the creates reaching every app") {
            try await openSessions[0].waitForUpload()
            for session in openSessions { try await session.waitForDownload() }
        }
        // Two hours on, with a retention of one: only what is connected holds compaction back, the peer link too.
        let later = UInt64(Date().timeIntervalSince1970) + 2 * 3_600
        var random = SplitMix64(seed: 3)
        var expected: [String: Int64] = [:]
        for round in 0..<6 {
            for (index, app) in apps.enumerated() {
                for _ in 0..<5 {
                    let key = "t\(random.below(5))"
                    expected[key, default: 0] += Int64(index + 1)
                    try await app.write { txn in
                        try txn.increment(["count"], of: "Task", primaryKey: .string(key), by: Int64(index + 1))
                        try txn.append(
                            .string("r\(round)a\(index)"), to: ["tags"], of: "Task", primaryKey: .string(key))
                    }
                }
            }
            _ = try await first.compactHistory(asOf: later, minimumFraction: 0)
            _ = try await second.compactHistory(asOf: later, minimumFraction: 0)
        }
        let (allApps, counts) = (apps, expected)
        try await Self.within("every app holding every increment") {
            for session in openSessions { try await session.waitForUpload() }
            while try allApps.map({ try Self.counts($0) }).contains(where: { $0 != counts }) {
                for session in openSessions { try await session.waitForDownload() }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(try firstReplica.logCompaction() != nil)
        #expect(try secondReplica.logCompaction() != nil)
        let tags = try apps.map { app in
            "\(String(describing: try app.object("Task", primaryKey: .string("t0"))?["tags"]))"
        }
        #expect(Set(tags).count == 1)
        for (index, session) in sessions.enumerated() {
            #expect(session.clientResets.isEmpty, "app \(index) was reset")
        }
        #expect(try firstReplica.verify().passed)
        #expect(try secondReplica.verify().passed)
        for session in sessions { await session.close() }
        await second.stop()
        await first.stop()
        for replica in apps + [secondReplica, firstReplica] { replica.close() }
    }
}
