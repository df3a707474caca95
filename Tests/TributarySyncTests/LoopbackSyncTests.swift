import Foundation
import Synchronization
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Replicas that sync through daemons over real sockets on loopback.
@Suite("Sync over loopback")
struct LoopbackSyncTests {
    static let schema = Fixtures.taskSchema

    /// A daemon on a free loopback port, on a replica of its own.
    static func daemon(
        _ directory: TemporaryDirectory, _ name: String, peers: [SyncEndpoint] = [],
        configure: (inout SyncServer.Configuration) -> Void = { _ in }
    ) async throws -> (SyncServer, SyncEndpoint) {
        let replica = try Replica.open(directory: directory.appending(name))
        var configuration = SyncServer.Configuration()
        configuration.port = 0
        configuration.peers = peers
        configuration.peerBackoff = ReconnectBackoff(initial: .milliseconds(50), maximum: .milliseconds(500))
        // A test's own client may wait many seconds for a thread while the whole suite runs on 2 cores: the deadline
        // for a request's head is a bound here, not something under test (but where a test sets it).
        configuration.handshakeDeadline = .seconds(120)
        configure(&configuration)
        let server = SyncServer(replica: replica, configuration: configuration)
        let port = try await server.start()
        return (server, SyncEndpoint(host: "127.0.0.1", port: port))
    }

    static func app(_ directory: TemporaryDirectory, _ name: String) throws -> Replica {
        try Replica.open(directory: directory.appending(name), schema: schema)
    }

    static var fastBackoff: SyncConfiguration {
        var configuration = SyncConfiguration()
        configuration.backoff = ReconnectBackoff(initial: .milliseconds(50), maximum: .milliseconds(500))
        return configuration
    }

    /// Runs `body` with a deadline (``Deadline/within(_:_:_:)``): a sync test that hangs fails instead.
    static func within<T: Sendable>(
        _ limit: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        try await Deadline.within(limit, what, body)
    }

    /// The first error with `code` that `session` is disconnected with, or `nil` if it closes first.
    static func disconnection(_ session: SyncSession, code: SyncError.Code) async throws -> SyncError? {
        try await within(.seconds(120), "a disconnection with \(code)") { () -> SyncError? in
            for await state in session.states() {
                if case .disconnected(let error?) = state, error.code == code { return error }
                if case .closed = state { return nil }
            }
            return nil
        }
    }

    /// The error `session`'s upload ends with (a refusal that stops it), or `nil` if the upload completed.
    static func uploadError(_ session: SyncSession) async throws -> SyncError? {
        try await within(.seconds(120), "the upload's end") { () -> SyncError? in
            do {
                try await session.waitForUpload()
                return nil
            } catch let error as SyncError {
                return error
            }
        }
    }

    @Test("Two apps sync through a daemon: a write on one reaches the other")
    func twoAppsThroughADaemon() async throws {
        let directory = TemporaryDirectory("sync")
        let (server, endpoint) = try await Self.daemon(directory, "daemon")
        let a = try Self.app(directory, "a")
        let b = try Self.app(directory, "b")
        let sessionA = a.connect(to: endpoint, configuration: Self.fastBackoff)
        let sessionB = b.connect(to: endpoint, configuration: Self.fastBackoff)

        try await a.write { try $0.create("Task", ["_id": "t1", "title": "from a"]) }
        try await Self.within(.seconds(120), "upload") { try await sessionA.waitForUpload() }
        try await Self.within(.seconds(120), "download") { try await sessionB.waitForDownload() }
        #expect(try b.object("Task", primaryKey: .string("t1"))?["title"] == "from a")

        try await b.write { try $0.update("Task", primaryKey: .string("t1"), ["count": 5]) }
        try await Self.within(.seconds(120), "upload") { try await sessionB.waitForUpload() }
        try await Self.within(.seconds(120), "download") { try await sessionA.waitForDownload() }
        #expect(try a.object("Task", primaryKey: .string("t1"))?["count"] == 5)
        #expect(try a.viewDigest(includeVersionVector: false) == b.viewDigest(includeVersionVector: false))
        #expect(try a.verify().passed && b.verify().passed && server.replica.verify().passed)

        await sessionA.close()
        await sessionB.close()
        await server.stop()
    }

    @Test("Two daemons replicate: an app on each sees the other's writes, both ways")
    func twoDaemonsAsPeers() async throws {
        let directory = TemporaryDirectory("sync")
        let (first, firstEndpoint) = try await Self.daemon(directory, "d1")
        let (second, secondEndpoint) = try await Self.daemon(directory, "d2", peers: [firstEndpoint])
        let a = try Self.app(directory, "a")
        let b = try Self.app(directory, "b")
        let sessionA = a.connect(to: firstEndpoint, configuration: Self.fastBackoff)
        let sessionB = b.connect(to: secondEndpoint, configuration: Self.fastBackoff)

        for index in 0..<20 {
            try await a.write { try $0.create("Task", ["_id": .string("a\(index)"), "count": .int(Int64(index))]) }
            try await b.write { try $0.create("Task", ["_id": .string("b\(index)"), "count": .int(Int64(index))]) }
        }
        try await Self.within(.seconds(120), "uploads") {
            try await sessionA.waitForUpload()
            try await sessionB.waitForUpload()
        }
        // The daemons hold both apps' writes once they converge; then each app downloads.
        try await Self.within(.seconds(120), "peer replication") {
            while try first.replica.viewDigest() != second.replica.viewDigest() {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        try await Self.within(.seconds(120), "downloads") {
            try await sessionA.waitForDownload()
            try await sessionB.waitForDownload()
        }
        #expect(try await a.read { try $0.count("Task") } == 40)
        #expect(try a.viewDigest(includeVersionVector: false) == b.viewDigest(includeVersionVector: false))
        for replica in [a, b, first.replica, second.replica] { #expect(try replica.verify().passed) }

        await sessionA.close()
        await sessionB.close()
        await second.stop()
        await first.stop()
    }

    @Test("Offline writes are uploaded when the daemon comes back; nothing is sent or applied twice")
    func offlineWritesAndRestart() async throws {
        let directory = TemporaryDirectory("sync")
        var (server, endpoint) = try await Self.daemon(directory, "daemon")
        let a = try Self.app(directory, "a")
        let session = a.connect(to: endpoint, configuration: Self.fastBackoff)
        try await a.write { try $0.create("Task", ["_id": "before"]) }
        try await Self.within(.seconds(120), "upload") { try await session.waitForUpload() }

        // The daemon goes away; the app writes offline.
        await server.stop()
        server.replica.close()
        for index in 0..<10 { try await a.write { try $0.create("Task", ["_id": .string("offline\(index)")]) } }
        try await Self.within(.seconds(120), "disconnection") {
            for await state in session.states() {
                if case .disconnected = state { return }
            }
        }

        // It comes back on the same port and directory: the app reconnects and uploads the rest.
        (server, _) = try await Self.daemon(directory, "daemon") { $0.port = endpoint.port }
        try await Self.within(.seconds(120), "upload after reconnecting") { try await session.waitForUpload() }
        #expect(try await server.replica.read { try $0.count("Task") } == 11)
        // Each of the app's 12 changesets (schema, 11 writes) is logged once at the daemon.
        #expect(try server.replica.inspection.summary().lastLocalSequence == 12)
        #expect(try server.replica.verify().passed)
        await session.close()
        await server.stop()
    }

    @Test("A daemon with access tokens refuses other credentials, and the app's session stops with the reason")
    func refusedCredentials() async throws {
        let directory = TemporaryDirectory("sync")
        let (server, endpoint) = try await Self.daemon(directory, "daemon") { $0.accessTokens = ["secret"] }
        let a = try Self.app(directory, "a")
        let refused = a.connect(to: endpoint, credentials: .token("wrong"), configuration: Self.fastBackoff)
        try await a.write { try $0.create("Task", ["_id": "t"]) }
        let error = try await Self.uploadError(refused)
        #expect(error?.code == .unauthorized)
        #expect(refused.state == .disconnected(error))
        await refused.close()

        let accepted = a.connect(to: endpoint, credentials: .token("secret"), configuration: Self.fastBackoff)
        try await Self.within(.seconds(120), "upload") { try await accepted.waitForUpload() }
        #expect(try await server.replica.read { try $0.count("Task") } == 1)
        await accepted.close()
        await server.stop()
    }

    @Test("An app's small receive window keeps each batch it is sent near that size")
    func smallWindowSmallBatches() async throws {
        let directory = TemporaryDirectory("sync")
        let (server, endpoint) = try await Self.daemon(directory, "daemon")
        let seed = try Self.app(directory, "seed")
        // Titles that do not compress: some 300 bytes each in the log.
        var random = SplitMix64(seed: 7)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        for index in 0..<300 {
            let title = String((0..<400).map { _ in alphabet[Int(random.next() % 64)] })
            try await seed.write { try $0.create("Task", ["_id": .string("t\(index)"), "title": .string(title)]) }
        }
        let seeding = seed.connect(to: endpoint, configuration: Self.fastBackoff)
        try await Self.within(.seconds(120), "seeding") { try await seeding.waitForUpload() }
        await seeding.close()

        var configuration = Self.fastBackoff
        configuration.window = 16 << 10
        let app = try Self.app(directory, "app")
        let session = app.connect(to: endpoint, configuration: configuration)
        let batches = Task {
            var sizes: [UInt64] = []
            var last: UInt64 = 0
            for await progress in session.downloadProgress() {
                if progress.transferred > last { sizes.append(progress.transferred - last) }
                last = progress.transferred
                if last >= 301 { break }
            }
            return sizes
        }
        try await Self.within(.seconds(120), "download") { try await session.waitForDownload() }
        let sizes = await batches.value
        // Some 300-400 bytes a changeset: a 16 KiB window takes about 50 of them, not the 301 one batch could hold.
        #expect(sizes.count > 3)
        #expect(sizes.allSatisfy { $0 <= 80 }, "batch sizes \(sizes)")
        #expect(try await app.read { try $0.count("Task") } == 300)
        await session.close()
        await server.stop()
    }

    @Test("Live results on one app see another app's write through the daemon, without a wait call")
    func liveResultsSeeRemoteWrites() async throws {
        let directory = TemporaryDirectory("sync")
        let (server, endpoint) = try await Self.daemon(directory, "daemon")
        let a = try Self.app(directory, "a")
        let b = try Self.app(directory, "b")
        let sessionA = a.connect(to: endpoint, configuration: Self.fastBackoff)
        let sessionB = b.connect(to: endpoint, configuration: Self.fastBackoff)
        let seen = Task { () -> PrimaryKey? in
            for try await change in b.observe("Task", where: "title == $0", arguments: ["live"]) {
                if let task = change.results.first { return task.primaryKey }
            }
            return nil
        }
        try await a.write { try $0.create("Task", ["_id": "remote", "title": "live"]) }
        let key = try await Self.within(.seconds(120), "the live update") { try await seen.value }
        #expect(key == .string("remote"))
        await sessionA.close()
        await sessionB.close()
        await server.stop()
    }

    @Test("Download marks asked for at once, while writes arrive, are all answered")
    func marksAskedAtOnceAreAllAnswered() async throws {
        let directory = TemporaryDirectory("sync-marks")
        let (server, endpoint) = try await Self.daemon(directory, "daemon")
        let writer = try Self.app(directory, "writer")
        let reader = try Self.app(directory, "reader")
        let writerSession = writer.connect(to: endpoint, configuration: Self.fastBackoff)
        let readerSession = reader.connect(to: endpoint, configuration: Self.fastBackoff)
        try await Self.within(.seconds(120), "the first download") { try await readerSession.waitForDownload() }
        // A mark that arrives while the daemon writes the reply to another must not be lost.
        try await Self.within(.seconds(120), "every mark's reply") {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for index in 0..<100 {
                        try await writer.write { try $0.create("Task", ["_id": .string("t\(index)")]) }
                    }
                }
                for _ in 0..<8 {
                    group.addTask { for _ in 0..<25 { try await readerSession.waitForDownload() } }
                }
                try await group.waitForAll()
            }
        }
        try await Self.within(.seconds(120), "the writes") { try await writerSession.waitForUpload() }
        try await Self.within(.seconds(120), "the last download") { try await readerSession.waitForDownload() }
        #expect(try reader.objects("Task").count == 100)
        await writerSession.close()
        await readerSession.close()
        await server.stop()
    }
}
