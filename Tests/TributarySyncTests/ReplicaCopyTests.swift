import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributarySync
import TributaryTestSupport

/// A copy of a daemon's replica fetched over the network (`GET /replica`, `tributaryd --copy-from`): only for a
/// caller with one of the daemon's access tokens, consistent, checked, and written only into an empty directory.
@Suite("Copies of a daemon's replica over the network")
struct ReplicaCopyTests {
    typealias Tokens = TokenAuthenticationTests

    @Test(
        "An access token fetches a copy that opens as the daemon's replica; no token, a user's token or a full directory are refused"
    )
    func copies() async throws {
        let directory = TemporaryDirectory("replica-copy")
        let (server, endpoint) = try await Tokens.daemon(directory) { $0.accessTokens = ["peer-secret"] }
        let alice = try Tokens.app(directory, "alice", author: "alice")
        let aliceToken = try await Tokens.hs256(Tokens.claims("alice"))
        let session = alice.connect(
            to: endpoint, credentials: .token(aliceToken), configuration: LoopbackSyncTests.fastBackoff)
        try await alice.write { txn in
            for index in 0..<50 { try txn.create("Task", ["_id": .string("t\(index)"), "count": .int(Int64(index))]) }
        }
        try await LoopbackSyncTests.within(.seconds(120), "alice's upload") { try await session.waitForUpload() }

        // Refused: no token, a user's token (a copy holds every user's data), a token the daemon does not know.
        for (authorization, expected) in [
            (nil, ["401", "requires a token"]), ("Bearer \(aliceToken)", ["403", "access tokens"]),
            ("Bearer guess", ["401", "one of the daemon's access tokens"]),
        ] as [(String?, [String])] {
            let target = directory.appending("refused")
            let error = await #expect(throws: ReplicaCopyError.self) {
                _ = try await ReplicaCopy.fetch(from: endpoint, authorization: authorization, into: target)
            }
            for part in expected {
                #expect(error?.message.contains(part) == true, "\(String(describing: error))")
            }
            #expect(!FileManager.default.fileExists(atPath: target), "a refused copy left \(target)")
            #expect(!FileManager.default.fileExists(atPath: target + ".copying"))
        }

        // With an access token: the replica at one commit, which opens as the daemon's.
        let copy = directory.appending("copy")
        let fetched = try await ReplicaCopy.fetch(from: endpoint, authorization: "Bearer peer-secret", into: copy)
        #expect(fetched.bytes > 0)
        #expect(fetched.replica == "\(server.replica.replicaID)")
        #expect(!FileManager.default.fileExists(atPath: copy + ".copying"))
        let opened = try Replica.open(directory: copy)
        #expect(opened.replicaID == server.replica.replicaID)
        #expect(opened.versionVector == server.replica.versionVector)
        #expect(try opened.inspection.recordsDigest() == server.replica.inspection.recordsDigest())
        #expect(try opened.objects("Task").count == 50)
        #expect(try opened.verify().passed)
        opened.close()

        // A directory that holds anything is left alone.
        let error = await #expect(throws: ReplicaCopyError.self) {
            _ = try await ReplicaCopy.fetch(from: endpoint, authorization: "Bearer peer-secret", into: copy)
        }
        #expect(error?.message.contains("not empty") == true, "\(String(describing: error))")
        #expect(try Replica.open(directory: copy).objects("Task").count == 50)

        // Nothing listening: the error names the address.
        await server.stop()
        let gone = await #expect(throws: ReplicaCopyError.self) {
            _ = try await ReplicaCopy.fetch(
                from: endpoint, authorization: "Bearer peer-secret", into: directory.appending("gone"))
        }
        #expect(gone?.message.contains("\(endpoint)") == true, "\(String(describing: gone))")
        await session.close()
    }

    @Test("With a peer authority, a copy goes to a peer's certificate, not to an access token that opens app sessions")
    func peersByCertificate() async throws {
        let directory = TemporaryDirectory("replica-copy-tls")
        let (hub, endpoint) = try await TLSTests.daemon(directory, "hub", peers: true) {
            $0.accessTokens = ["app-token"]
        }
        var tls = SyncTLS()
        tls.certificateAuthorityFiles = [TLSTests.certificate("ca.pem")]
        tls.trustsSystemRoots = false
        let refused = await #expect(throws: ReplicaCopyError.self) {
            _ = try await ReplicaCopy.fetch(
                from: endpoint, authorization: "Bearer app-token", tls: tls, into: directory.appending("by-token"))
        }
        #expect(refused?.message.contains("403") == true, "\(String(describing: refused))")
        #expect(refused?.message.contains("client certificate") == true, "\(String(describing: refused))")

        tls.clientCertificate = CertificateFiles(
            certificateChain: TLSTests.certificate("peer.pem"), privateKey: TLSTests.certificate("peer-key.pem"))
        let copy = directory.appending("by-certificate")
        let fetched = try await ReplicaCopy.fetch(from: endpoint, authorization: nil, tls: tls, into: copy)
        #expect(fetched.replica == "\(hub.replica.replicaID)")
        #expect(try Replica.open(directory: copy).replicaID == hub.replica.replicaID)
        await hub.stop()
    }

    /// A server on loopback answering every request with `head` and `body`, then, unless `hold`, closing.
    static func cannedServer(
        _ headers: [(String, String)], _ body: [UInt8], hold: Bool = false
    ) async throws -> (any Channel, SyncEndpoint) {
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(
                        CannedAnswer(headers: headers, body: body, hold: hold))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return (server, SyncEndpoint(host: "127.0.0.1", port: server.localAddress?.port ?? 0))
    }

    final class CannedAnswer: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let headers: [(String, String)]
        let body: [UInt8]
        let hold: Bool

        init(headers: [(String, String)], body: [UInt8], hold: Bool) {
            self.headers = headers
            self.body = body
            self.hold = hold
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard case .end = unwrapInboundIn(data) else { return }
            let head = HTTPResponseHead(version: .http1_1, status: .ok, headers: HTTPHeaders(headers))
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
            context.flush()
            if !hold { context.close(promise: nil) }
        }
    }

    @Test("A copy that is damaged, cut short or stalled is refused, and leaves no replica behind")
    func damagedCopies() async throws {
        let directory = TemporaryDirectory("replica-copy-damaged")
        let body = Array(repeating: UInt8(7), count: 100)
        let right = ReplicaCopy.hex(XXHash64.hash(body))
        let wrong = ReplicaCopy.hex(XXHash64.hash(body) ^ 1)
        var timeouts = ReplicaCopy.Timeouts()
        timeouts.firstByte = .seconds(5)
        timeouts.idle = .milliseconds(300)
        let cases: [(name: String, headers: [(String, String)], body: [UInt8], hold: Bool, expected: [String])] = [
            (
                "damaged", [("Content-Length", "100"), ("Tributary-Replica-Checksum", "xxh64:\(wrong)")], body, false,
                ["damaged", right]
            ),
            (
                "short", [("Content-Length", "200"), ("Tributary-Replica-Checksum", "xxh64:\(right)")], body, false,
                ["100", "200"]
            ),
            (
                "stalled", [("Content-Length", "200"), ("Tributary-Replica-Checksum", "xxh64:\(right)")], body, true,
                ["100", "200", "nothing arrived"]
            ),
            ("not a daemon", [("Content-Length", "100")], body, false, ["without the size and checksum"]),
        ]
        for test in cases {
            let (server, endpoint) = try await Self.cannedServer(test.headers, test.body, hold: test.hold)
            let target = directory.appending(test.name)
            let error = await #expect(throws: ReplicaCopyError.self, "\(test.name)") {
                _ = try await ReplicaCopy.fetch(
                    from: endpoint, authorization: nil, into: target, timeouts: timeouts)
            }
            for part in test.expected {
                #expect(error?.message.contains(part) == true, "\(test.name): \(String(describing: error))")
            }
            #expect(!FileManager.default.fileExists(atPath: target + "/data.mdb"), "\(test.name)")
            #expect(!FileManager.default.fileExists(atPath: target + "/.copying"), "\(test.name)")
            try await server.close()
        }
    }
}
