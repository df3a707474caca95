import Foundation
import Testing
import Tributary
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// `tributaryd` stopped with SIGTERM in the middle of an app's upload: it exits 0, tells the session when to come
/// back, leaves a replica that verifies and holds every acknowledged upload once, and a restart resumes the rest.
@Suite("tributaryd stopped with SIGTERM")
struct DaemonShutdownTests {
    @Test("SIGTERM mid-upload: exit 0, the app told to retry in 1 to 5 s, nothing acknowledged lost, the rest resumed")
    func sigtermDuringAnUpload() async throws {
        typealias Drill = DaemonKillDrillTests
        let children = Drill.Children()
        defer { children.killAll() }
        let directory = TemporaryDirectory("sigterm")
        let daemonDirectory = directory.appending("daemon")
        let (daemon, port) = try await Drill.startDaemon(
            daemonDirectory, log: directory.appending("daemon-0.log"), children: children)
        let endpoint = SyncEndpoint(host: "127.0.0.1", port: port)

        var replicaConfiguration = Replica.Configuration()
        replicaConfiguration.durability = .none
        let app = try Replica.open(
            directory: directory.appending("app"), schema: Drill.schema, configuration: replicaConfiguration)
        defer { app.close() }
        let session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        let acknowledged = Drill.Gauge()
        let follower = acknowledged.follow(session.uploadProgress())
        defer { follower.cancel() }
        // Subscribed now, so that no state is missed however late the task below starts.
        let states = session.states()
        let told = Task { () -> (SyncError?, [SyncSession.State]) in
            var seen: [SyncSession.State] = []
            for await state in states {
                seen.append(state)
                if case .disconnected(let error?) = state, error.code == .unavailable { return (error, seen) }
            }
            return (nil, seen)
        }

        let total = 1_000
        let writer = Task {
            for index in 0..<total {
                try await app.write { try $0.create("Task", ["_id": .string("t\(index)")]) }
            }
        }
        try await LoopbackSyncTests.within(.seconds(180), "100 acknowledged uploads") {
            while acknowledged.value < 100 { try await Task.sleep(for: .milliseconds(2)) }
        }
        daemon.send(SIGTERM)
        let exit = try await Drill.ended(daemon, timeout: 60)
        #expect(exit == .exited(0), "\(daemon.standardError)")
        #expect(daemon.standardError.contains("stopped"))
        let (first, seen) = try await LoopbackSyncTests.within(.seconds(60), "the session told to come back") {
            await told.value
        }
        let error = try #require(first, "the session's states: \(seen)")
        #expect(error.action == .retry)
        #expect((1...5).contains(error.retryAfterSeconds), "the session's states: \(seen)")
        #expect(error.message.contains("shutting down"))
        let acknowledgedAtStop = await Drill.current(session.uploadProgress()).transferred

        do {
            let left = try Drill.openReadOnly(daemonDirectory)
            defer { left.close() }
            let held = try left.heldSequence(of: app.replicaID)
            #expect(held >= acknowledgedAtStop, "\(acknowledgedAtStop) acknowledged, \(held) held after SIGTERM")
            try Drill.expectDaemonLog(left, app: app.replicaID, held: held)
            #expect(try left.verify().passed)
            print("sigterm: \(acknowledgedAtStop) acknowledged when the daemon stopped, \(held) held on disk")
        }

        let (restarted, _) = try await Drill.startDaemon(
            daemonDirectory, port: port, log: directory.appending("daemon-1.log"), children: children)
        try await LoopbackSyncTests.within(.seconds(180), "the app's writes") { try await writer.value }
        try await LoopbackSyncTests.within(.seconds(180), "the upload after the restart") {
            try await session.waitForUpload()
        }
        await session.close()
        restarted.send(SIGTERM)
        #expect(try await Drill.ended(restarted, timeout: 60) == .exited(0))
        let server = try Drill.openReadOnly(daemonDirectory)
        defer { server.close() }
        #expect(try Drill.objects(server, "Task") == total)
        #expect(try server.heldSequence(of: app.replicaID) == app.versionVector[app.replicaID])
        try Drill.expectSameLogs(app: app, daemon: server, appID: app.replicaID)
    }
}
