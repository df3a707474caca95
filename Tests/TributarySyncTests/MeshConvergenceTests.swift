import Foundation
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Three daemons in a mesh and six apps, two on each, writing at random while links are cut and restored: every
/// replica ends with the same objects, and every replica's views equal a replay of its log.
@Suite("Convergence of daemons and apps over loopback")
struct MeshConvergenceTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Task",
                properties: [
                    .scalar("_id", .string), .scalar("title", .string, default: ""), .scalar("count", .int, default: 0),
                    Property("tags", .scalar(.string), list: true),
                ])
        ])

    /// The operations per run (`TRIBUTARY_MESH_OPERATIONS` for a deep run) and the seed (`TRIBUTARY_SEED`).
    static let operations = Int(ProcessInfo.processInfo.environment["TRIBUTARY_MESH_OPERATIONS"] ?? "") ?? 240

    final class Mesh: @unchecked Sendable {
        let directory = TemporaryDirectory("mesh")
        var daemons: [SyncServer] = []
        var ports: [Int] = []
        var apps: [Replica] = []
        var sessions: [SyncSession] = []

        func daemonConfiguration(_ index: Int) -> SyncServer.Configuration {
            var configuration = SyncServer.Configuration()
            configuration.port = ports.count > index ? ports[index] : 0
            // Each pair of daemons is linked once: the later one dials the earlier ones.
            configuration.peers = (0..<index).map { SyncEndpoint(host: "127.0.0.1", port: ports[$0]) }
            configuration.peerBackoff = ReconnectBackoff(initial: .milliseconds(20), maximum: .milliseconds(200))
            return configuration
        }

        func startDaemon(_ index: Int) async throws {
            let replica = try Replica.open(directory: directory.appending("daemon\(index)"))
            let server = SyncServer(replica: replica, configuration: daemonConfiguration(index))
            let port = try await server.start()
            if ports.count > index {
                daemons[index] = server
            } else {
                ports.append(port)
                daemons.append(server)
            }
        }

        func stopDaemon(_ index: Int) async {
            await daemons[index].stop()
            daemons[index].replica.close()
        }

        func connect(_ app: Int) -> SyncSession {
            var configuration = SyncConfiguration()
            configuration.backoff = ReconnectBackoff(initial: .milliseconds(20), maximum: .milliseconds(200))
            return apps[app].connect(
                to: SyncEndpoint(host: "127.0.0.1", port: ports[app / 2]), configuration: configuration)
        }
    }

    @Test("3 daemons, 6 apps, random writes, cut links: all converge byte for byte and verify")
    func meshConverges() async throws {
        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 31))
        let mesh = Mesh()
        for index in 0..<3 { try await mesh.startDaemon(index) }
        for index in 0..<6 {
            mesh.apps.append(try Replica.open(directory: mesh.directory.appending("app\(index)"), schema: Self.schema))
        }
        for index in 0..<6 { mesh.sessions.append(mesh.connect(index)) }

        var paused = Set<Int>()
        for step in 0..<Self.operations {
            let app = Int(random.next() % 6)
            let key = PrimaryKey.string("t\(random.next() % 12)")
            let choice = random.next() % 10
            try await mesh.apps[app].write { txn in
                switch choice {
                case 0...3:
                    _ = try txn.upsert(
                        "Task", ["_id": key.value, "title": .string("app \(app) step \(step)")])
                case 4...5:
                    if try txn.object("Task", primaryKey: key) != nil {
                        try txn.increment(["count"], of: "Task", primaryKey: key, by: 1)
                    }
                case 6...7:
                    if try txn.object("Task", primaryKey: key) != nil {
                        try txn.append(.string("s\(step)"), to: ["tags"], of: "Task", primaryKey: key)
                    }
                default:
                    _ = try txn.delete("Task", primaryKey: key)
                }
            }
            // Faults: an app goes offline or comes back; now and then a daemon restarts.
            let fault = random.next() % 100
            if fault < 4 {
                let target = Int(random.next() % 6)
                if paused.remove(target) != nil {
                    mesh.sessions[target].resume()
                } else {
                    paused.insert(target)
                    await mesh.sessions[target].pause()
                }
            } else if fault < 5 {
                let target = Int(random.next() % 3)
                await mesh.stopDaemon(target)
                try await mesh.startDaemon(target)
            }
            if random.next() % 20 == 0 { try await Task.sleep(for: .milliseconds(5)) }
        }
        for target in paused { mesh.sessions[target].resume() }

        // Heal: every app uploads, the daemons converge, every app downloads.
        try await LoopbackSyncTests.within(.seconds(180), "uploads") {
            for session in mesh.sessions { try await session.waitForUpload() }
        }
        try await LoopbackSyncTests.within(.seconds(180), "daemons converging") {
            while true {
                let digests = try mesh.daemons.map { try $0.replica.viewDigest(includeVersionVector: false) }
                let vectors = mesh.daemons.map(\.replica.versionVector)
                if Set(digests).count == 1 && Set(vectors).count == 1 { return }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        try await LoopbackSyncTests.within(.seconds(180), "downloads") {
            for session in mesh.sessions { try await session.waitForDownload() }
        }
        let expected = try mesh.daemons[0].replica.viewDigest(includeVersionVector: false)
        for (index, app) in mesh.apps.enumerated() {
            #expect(try app.viewDigest(includeVersionVector: false) == expected, "app \(index) differs")
        }
        for replica in mesh.apps + mesh.daemons.map(\.replica) {
            let report = try replica.verify()
            #expect(report.passed, "\(report)")
        }
        let objects = try await mesh.daemons[0].replica.read { try $0.count("Task") }
        #expect(objects > 0)

        for session in mesh.sessions { await session.close() }
        for index in (0..<3).reversed() { await mesh.stopDaemon(index) }
    }
}
