import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization
import Tributary
import TributaryCluster
import TributaryProtocol
import TributarySync

extension SyncServer {
    /// Whether the daemon is ready to serve its replica, as `GET /ready` reports it.
    public struct Readiness: Sendable, Hashable, CustomStringConvertible {
        /// What is not ready, one line each (`peer ws://10.0.0.2:7400/sync: disconnected: …`). Empty when ready.
        public var problems: [String]

        /// A readiness with these problems (none: ready).
        public init(problems: [String]) { self.problems = problems }

        /// Whether the replica is open and every configured peer link is connected and caught up.
        public var isReady: Bool { problems.isEmpty }

        /// `ready`, or the problems, one per line.
        public var description: String { isReady ? "ready" : problems.joined(separator: "\n") }
    }

    /// Whether the daemon is ready: its replica is open, and each configured peer link is connected and was caught
    /// up (nothing left to send, nothing known to receive) within ``Configuration/readinessBound``.
    public func readiness() async -> Readiness {
        var problems: [String] = []
        if replica.isClosed { problems.append("the replica is closed") }
        for peer in await peerSamples() where !peer.isReady {
            problems.append(peer.problem)
        }
        return Readiness(problems: problems)
    }

    /// The configured peer links now, in the order of ``Configuration/peers``.
    func peerSamples() async -> [PeerLinkSample] {
        let links = peerLinks
        let now = ContinuousClock.now
        var samples: [PeerLinkSample] = []
        for (index, endpoint) in configuration.peers.enumerated() {
            guard index < links.count else {
                samples.append(PeerLinkSample(endpoint: endpoint, state: nil, standing: nil, sinceCaughtUp: nil))
                continue
            }
            let link = links[index]
            let state = link.state
            let standing = await link.standing()
            let last = peerWatch.caughtUp(index, standing?.lastCaughtUp)
            samples.append(
                PeerLinkSample(
                    endpoint: endpoint, state: state, standing: standing, sinceCaughtUp: last.map { now - $0 },
                    bound: configuration.readinessBound))
        }
        return samples
    }

    /// Samples the state the gauges show, then renders the registry.
    package func metricsExposition() async -> [UInt8] {
        let replica = replica
        let storage: (pending: Int?, statistics: StorageStatistics?, readers: StorageReaders?) =
            replica.isClosed
            ? (nil, nil, nil)
            : (
                (try? await offload { try replica.pendingDots().count }), replica.storageStatistics,
                replica.storageReaders
            )
        let log = replica.isClosed ? nil : try? await offload { try replica.logFigures() }
        let started = peerWatch.started
        let now = ContinuousClock.now
        let peers = await peerSamples().map { peer in
            let since = peer.sinceCaughtUp ?? (now - started)
            return DaemonMetrics.PeerSample(
                connected: peer.standing != nil, standing: peer.standing,
                secondsSinceCaughtUp: Double(since.components.seconds)
                    + Double(since.components.attoseconds) / 1e18)
        }
        var clusterPosition: (applied: UInt64, knownHead: UInt64)?
        if let cluster { clusterPosition = (await cluster.applied, await cluster.knownHead) }
        // The storage figures are read again if the replica closed meanwhile: a closed one reports zeros.
        metrics.refresh(
            DaemonMetrics.Sample(
                pendingChangesets: storage.pending, storage: replica.isClosed ? nil : storage.statistics,
                readers: replica.isClosed ? nil : storage.readers, peers: peers, log: log, cluster: clusterPosition))
        return metrics.exposition()
    }

    // MARK: Plain HTTP

    /// The HTTP answer that refuses a session: the protocol's error in headers (code, action, retry delay) and its
    /// message as the plain-text body.
    static func refusalResponse(_ refusal: SyncError, status: HTTPResponseStatus) -> (HTTPResponseHead, String) {
        let body = refusal.message + "\n"
        var headers = HTTPHeaders()
        headers.add(name: SyncProtocol.errorCodeHeader, value: "\(refusal.code.rawValue)")
        headers.add(name: SyncProtocol.errorActionHeader, value: refusal.action.description)
        headers.add(name: "Retry-After", value: "\(refusal.retryAfterSeconds)")
        headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
        headers.add(name: "Content-Length", value: "\(body.utf8.count)")
        headers.add(name: "Connection", value: "close")
        return (HTTPResponseHead(version: .http1_1, status: status, headers: headers), body)
    }

    /// Answers a plain HTTP request (not a WebSocket upgrade to the sync path): `GET /health`, `GET /ready` and
    /// `GET /metrics` for operators, `GET /replica` for a new daemon (``ReplicaCopy``); anything else gets 426 and a
    /// line that says where sessions are served.
    func answerHTTP(
        _ channel: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, refusal: SyncError? = nil
    ) async {
        try? await channel.executeThenClose { inbound, outbound in
            if let refusal {
                // A refused upgrade: the upgrade handler consumed the request, so the answer goes out at once, with
                // the protocol's error in headers and its message as the body.
                let (head, body) = Self.refusalResponse(
                    refusal, status: refusal.code == .unavailable ? .serviceUnavailable : .unauthorized)
                try await outbound.write(.head(head))
                try await outbound.write(.body(.byteBuffer(ByteBuffer(string: body))))
                try await outbound.write(.end(nil))
                return
            }
            var request: HTTPRequestHead?
            for try await part in inbound {
                switch part {
                case .head(let head):
                    request = head
                case .body:
                    continue
                case .end:
                    if let request, request.uri.split(separator: "?").first == Substring(ReplicaCopy.path) {
                        // A client certificate only the peer authority's passes TLS: the caller is a peer daemon.
                        let connection = channel.channel
                        let certified =
                            (try? await connection.eventLoop.submit {
                                (try? connection.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self))?
                                    .peerCertificate != nil
                            }.get()) ?? false
                        try await sendReplicaCopy(
                            request, certified: certified, on: connection,
                            from: connection.remoteAddress?.ipAddress ?? "unknown", to: outbound)
                        return
                    }
                    let response = await response(to: request)
                    var headers = HTTPHeaders()
                    headers.add(name: "Content-Type", value: response.contentType)
                    headers.add(name: "Content-Length", value: "\(response.body.count)")
                    headers.add(name: "Connection", value: "close")
                    if response.status == .methodNotAllowed { headers.add(name: "Allow", value: "GET, HEAD") }
                    try await outbound.write(
                        .head(HTTPResponseHead(version: .http1_1, status: response.status, headers: headers)))
                    if request?.method != .HEAD {
                        try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: response.body))))
                    }
                    try await outbound.write(.end(nil))
                    return
                }
            }
        }
    }

    private struct Response {
        var status: HTTPResponseStatus
        var body: [UInt8]
        var contentType = "text/plain; charset=utf-8"

        init(_ status: HTTPResponseStatus, _ text: String) {
            self.status = status
            body = Array(text.utf8)
        }
    }

    private func response(to request: HTTPRequestHead?) async -> Response {
        let path = request.flatMap { $0.uri.split(separator: "?", omittingEmptySubsequences: false).first }
        let endpoints: Set<Substring> = ["/health", "/ready", "/metrics"]
        guard let request, let path, endpoints.contains(path) else {
            return Response(
                .upgradeRequired,
                "Tributary daemon: open a WebSocket to \(SyncProtocol.path) with the subprotocol "
                    + "\(SyncProtocol.subprotocol)\n")
        }
        guard request.method == .GET || request.method == .HEAD else {
            return Response(.methodNotAllowed, "\(path) answers GET\n")
        }
        switch path {
        case "/health":
            return Response(.ok, "ok\n")
        case "/ready":
            let readiness = await readiness()
            return readiness.isReady
                ? Response(.ok, "ready\n") : Response(.serviceUnavailable, "not ready:\n\(readiness)\n")
        default:
            var response = Response(.ok, "")
            response.body = await metricsExposition()
            response.contentType = "text/plain; version=0.0.4; charset=utf-8"
            return response
        }
    }
}

/// One configured peer link, as readiness and the metrics see it.
struct PeerLinkSample: Sendable {
    var endpoint: SyncEndpoint
    /// `nil` before the daemon started.
    var state: SyncSession.State?
    /// `nil` while the link is not open.
    var standing: SessionStanding?
    /// Since the link was last seen caught up; `nil` when it never was.
    var sinceCaughtUp: Duration?
    var bound: Duration = .zero

    var isReady: Bool {
        guard let standing else { return false }
        if standing.isCaughtUp { return true }
        return sinceCaughtUp.map { $0 <= bound } ?? false
    }

    /// Why the link is not ready, for an operator.
    var problem: String {
        let name = "peer \(endpoint)"
        guard let state else { return "\(name): the daemon has not started its link" }
        guard let standing else {
            switch state {
            case .active: return "\(name): connected, the session is opening"
            default: return "\(name): \(state)"
            }
        }
        var missing: [String] = []
        if standing.behind > 0 { missing.append("\(standing.behind) changesets it holds are not here yet") }
        if standing.receivingMore { missing.append("it is still sending") }
        if !standing.nothingToSend { missing.append("this daemon is still sending") }
        let since = sinceCaughtUp.map { "not caught up for \($0.components.seconds) s" } ?? "never caught up"
        return "\(name): connected, \(since) (bound \(bound.components.seconds) s): " + missing.joined(separator: ", ")
    }
}

/// Remembers when each configured peer link was last seen caught up, across its reconnections.
final class PeerWatch: Sendable {
    let started = ContinuousClock.now
    private let last = Mutex<[Int: ContinuousClock.Instant]>([:])

    /// Records `seen` for link `index` (when later than what is known) and returns the latest known.
    func caughtUp(_ index: Int, _ seen: ContinuousClock.Instant?) -> ContinuousClock.Instant? {
        last.withLock { last in
            if let seen, last[index].map({ $0 < seen }) ?? true { last[index] = seen }
            return last[index]
        }
    }
}
