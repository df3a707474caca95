import Foundation
import Logging
import NIOCore
import NIOPosix
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// What an operator reads from a daemon on its sync port: `/health`, `/ready`, `/metrics`, and its log lines.
@Suite("Daemon observability")
struct DaemonObservabilityTests {
    typealias Loopback = LoopbackSyncTests

    @Test("GET /metrics after an app's upload: one app session, the changesets received, a commit timed")
    func metricsAfterAnUpload() async throws {
        let directory = TemporaryDirectory("observe")
        let (server, endpoint) = try await Loopback.daemon(directory, "daemon")
        let app = try Loopback.app(directory, "app")
        let session = app.connect(to: endpoint, configuration: Loopback.fastBackoff)
        try await cleaningUp(sessions: [session], servers: [server]) {
            for index in 0..<5 {
                try await app.write { try $0.create("Task", ["_id": .string("t\(index)"), "title": "observed"]) }
            }
            try await Loopback.within(.seconds(120), "upload") { try await session.waitForUpload() }
            let uploaded = Double(app.versionVector[app.replicaID])
            #expect(uploaded >= 6)  // the schema and five writes

            let health = try await Self.get("/health", endpoint)
            #expect(health.status == 200 && health.body == "ok\n")
            let ready = try await Self.get("/ready", endpoint)
            #expect(ready.status == 200, "\(ready.body)")

            let response = try await Self.get("/metrics", endpoint)
            #expect(response.status == 200)
            #expect(response.headers.contains("text/plain; version=0.0.4"))
            let metrics = Self.samples(response.body)
            #expect(metrics[#"tributary_sessions_open{role="app"}"#] == 1)
            #expect(metrics[#"tributary_sessions_open{role="peer"}"#] == 0)
            #expect(metrics[#"tributary_sessions_refused_total{code="unauthorized"}"#] == 0)
            #expect((metrics["tributary_received_changesets_total"] ?? 0) >= uploaded)
            #expect((metrics["tributary_received_bytes_total"] ?? 0) > 0)
            #expect((metrics["tributary_sent_bytes_total"] ?? 0) > 0)
            #expect((metrics["tributary_group_commit_duration_seconds_count"] ?? 0) >= 1)
            #expect((metrics["tributary_group_commit_duration_seconds_sum"] ?? 0) > 0)
            #expect((metrics["tributary_group_commit_batches_sum"] ?? 0) >= 1)
            #expect(metrics["tributary_pending_changesets"] == 0)
            let mapSize = try #require(metrics["tributary_storage_map_size_bytes"])
            let used = try #require(metrics["tributary_storage_used_bytes"])
            #expect(used > 0 && used <= mapSize)
            #expect(metrics["tributary_storage_readers_active"] != nil)
            #expect(metrics["tributary_storage_oldest_reader_lag_transactions"] != nil)

            // The session's end is counted too.
            await session.close()
            try await Loopback.within(.seconds(60), "the app session to end at the daemon") {
                while try await Self.samples(Self.get("/metrics", endpoint).body)[
                    #"tributary_sessions_open{role="app"}"#] != 0
                {
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
        }
    }

    @Test("Other plain requests keep the 426 that says where sessions are served; other methods get 405")
    func otherRequests() async throws {
        let directory = TemporaryDirectory("observe")
        let (server, endpoint) = try await Loopback.daemon(directory, "daemon")
        try await cleaningUp(servers: [server]) {
            for path in ["/sync", "/", "/metrics-not"] {
                let response = try await Self.get(path, endpoint)
                #expect(response.status == 426, "\(path)")
                #expect(response.body.contains("open a WebSocket to /sync"), "\(path)")
            }
            let post = try await Self.request("POST /ready HTTP/1.1", endpoint)
            #expect(post.status == 405)
        }
    }

    @Test("GET /ready answers 503 naming a configured peer that cannot be reached")
    func notReadyWithAnUnreachablePeer() async throws {
        let port = try await Self.unusedPort()
        let peer = SyncEndpoint(host: "127.0.0.1", port: port)
        let directory = TemporaryDirectory("observe")
        let (server, endpoint) = try await Loopback.daemon(directory, "daemon", peers: [peer])
        try await cleaningUp(servers: [server]) {
            // Its first attempt may still be under way: the answer names the peer either way.
            let response = try await Self.get("/ready", endpoint)
            #expect(response.status == 503)
            #expect(response.body.contains("peer \(peer)"), "\(response.body)")
            let reason = try await Loopback.within(.seconds(60), "the link to fail") {
                while true {
                    let response = try await Self.get("/ready", endpoint)
                    if response.body.contains("disconnected") { return response }
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            #expect(reason.status == 503)
            #expect(reason.body.contains("peer \(peer): disconnected"), "\(reason.body)")
            #expect(await !server.readiness().isReady)
            let metrics = Self.samples(try await Self.get("/metrics", endpoint).body)
            #expect(metrics[#"tributary_peer_connected{peer="\#(peer)"}"#] == 0)
            #expect((metrics[#"tributary_peer_seconds_since_caught_up{peer="\#(peer)"}"#] ?? -1) >= 0)
        }
    }

    @Test("A daemon peered with another is ready once the link is caught up; each side counts the peer session")
    func readyWhenPeerCaughtUp() async throws {
        let directory = TemporaryDirectory("observe")
        let (first, firstEndpoint) = try await Loopback.daemon(directory, "d1")
        let app = try Loopback.app(directory, "app")
        let session = app.connect(to: firstEndpoint, configuration: Loopback.fastBackoff)
        try await cleaningUp(sessions: [session], servers: [first]) {
            for index in 0..<3 {
                try await app.write { try $0.create("Task", ["_id": .string("t\(index)")]) }
            }
            try await Loopback.within(.seconds(120), "upload") { try await session.waitForUpload() }
            // The second daemon starts behind: its link learns at the handshake what the first holds.
            let (second, secondEndpoint) = try await Loopback.daemon(directory, "d2", peers: [firstEndpoint])
            try await cleaningUp(servers: [second]) {
                try await Loopback.within(.seconds(120), "the second daemon to be ready") {
                    while try await Self.get("/ready", secondEndpoint).status != 200 {
                        try await Task.sleep(for: .milliseconds(20))
                    }
                }
                // Ready means caught up: the second daemon holds everything the first did.
                #expect(second.replica.versionVector.includes(first.replica.versionVector))
                let metrics = Self.samples(try await Self.get("/metrics", secondEndpoint).body)
                #expect(metrics[#"tributary_peer_connected{peer="\#(firstEndpoint)"}"#] == 1)
                #expect(metrics[#"tributary_peer_behind_changesets{peer="\#(firstEndpoint)"}"#] == 0)
                let uploaded = Double(app.versionVector[app.replicaID])
                #expect((metrics["tributary_received_changesets_total"] ?? 0) >= uploaded)
                let firstMetrics = Self.samples(try await Self.get("/metrics", firstEndpoint).body)
                #expect(firstMetrics[#"tributary_sessions_open{role="peer"}"#] == 1)
                #expect((firstMetrics["tributary_sent_changesets_total"] ?? 0) >= uploaded)
            }
        }
    }

    @Test("Session log lines carry the session's id, and its replica and role once known")
    func sessionLogMetadata() async throws {
        let capture = LogCapture()
        let directory = TemporaryDirectory("observe")
        let (server, endpoint) = try await Loopback.daemon(directory, "daemon") { $0.logger = capture.logger }
        let app = try Loopback.app(directory, "app")
        let session = app.connect(to: endpoint, configuration: Loopback.fastBackoff)
        try await cleaningUp(sessions: [session], servers: [server]) {
            try await app.write { try $0.create("Task", ["_id": "t1"]) }
            try await Loopback.within(.seconds(120), "upload") { try await session.waitForUpload() }
            await session.close()
            let ended = try await Loopback.within(.seconds(60), "the session-ended line") {
                while true {
                    if let line = capture.all.first(where: { $0.message.hasPrefix("session ended: ") }) { return line }
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            let opened = try #require(capture.all.first { $0.message.hasPrefix("session opened: app ") })
            #expect(opened.message == "session opened: app \(app.replicaID)")
            let id = try #require(opened.metadata["session"])
            #expect(!id.isEmpty)
            #expect(opened.metadata["replica"] == "\(app.replicaID)")
            #expect(opened.metadata["role"] == "app")
            #expect(ended.metadata["session"] == id)
            #expect(ended.metadata["replica"] == "\(app.replicaID)")
        }
    }

    @Test("A refused session is logged as refused, with its own session id")
    func refusedSessionLogged() async throws {
        let capture = LogCapture()
        let directory = TemporaryDirectory("observe")
        let (server, endpoint) = try await Loopback.daemon(directory, "daemon") {
            $0.logger = capture.logger
            $0.accessTokens = ["the-right-token"]
        }
        let app = try Loopback.app(directory, "app")
        let session = app.connect(to: endpoint, credentials: .token("a-wrong-token"))
        try await cleaningUp(sessions: [session], servers: [server]) {
            let refused = try await Loopback.within(.seconds(60), "the refusal line") {
                while true {
                    if let line = capture.all.first(where: { $0.message.hasPrefix("session refused") }) { return line }
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
            #expect(refused.level == .warning)
            #expect(refused.metadata["session"] != nil)
            #expect(refused.metadata["error"] == "unauthorized")
        }
    }

    // MARK: Support

    /// Runs `body`, then closes `sessions` and stops `servers` whether it threw or not.
    func cleaningUp(
        sessions: [SyncSession] = [], servers: [SyncServer], _ body: () async throws -> Void
    ) async throws {
        let outcome: Result<Void, any Error>
        do {
            try await body()
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        for session in sessions { await session.close() }
        for server in servers { await server.stop() }
        try outcome.get()
    }

    struct HTTPResponse: Sendable {
        var status: Int
        var headers: String
        var body: String
    }

    static func get(_ path: String, _ endpoint: SyncEndpoint) async throws -> HTTPResponse {
        try await request("GET \(path) HTTP/1.1", endpoint)
    }

    /// Sends one request over a plain loopback connection and reads the answer until the daemon closes it.
    static func request(_ line: String, _ endpoint: SyncEndpoint) async throws -> HTTPResponse {
        try await Loopback.within(.seconds(60), line) {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: endpoint.host, port: endpoint.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                    }
                }
            let raw = try await channel.executeThenClose { inbound, outbound in
                try await outbound.write(
                    ByteBuffer(
                        string: "\(line)\r\nHost: \(endpoint.host):\(endpoint.port)\r\nContent-Length: 0\r\n\r\n"))
                var received: [UInt8] = []
                for try await buffer in inbound { received += buffer.readableBytesView }
                return String(decoding: received, as: UTF8.self)
            }
            guard let split = raw.range(of: "\r\n\r\n") else {
                throw SyncError(.protocolViolation, .fatal, "no complete HTTP answer to \(line): \(raw)")
            }
            let head = raw[..<split.lowerBound]
            let status = head.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            return HTTPResponse(status: status, headers: String(head), body: String(raw[split.upperBound...]))
        }
    }

    /// The samples of a Prometheus text exposition, by series (`name{labels}`).
    static func samples(_ text: String) -> [String: Double] {
        var samples: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                continue
            }
            samples[String(line[..<space])] = value
        }
        return samples
    }

    /// A loopback port nothing listens on: bound, then closed.
    static func unusedPort() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
        let port = try #require(channel.localAddress?.port)
        try await channel.close().get()
        return port
    }
}
