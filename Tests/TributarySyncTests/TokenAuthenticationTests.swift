import Foundation
import JWTKit
import NIOCore
import Synchronization
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Apps authenticate with JWTs their backend signs: the daemon checks them before the WebSocket exists, holds each
/// session to its token's user, and ends a session whose token expires; the app's refresh callback resumes it.
@Suite("Token authentication")
struct TokenAuthenticationTests {
    static let secret = "a-shared-secret-of-at-least-thirty-two-bytes"

    /// The claims a test token carries.
    struct Claims: JWTPayload {
        var sub: String?
        var exp: Double?
        var nbf: Double?
        var iss: String?
        var aud: [String]?
        var team: String?

        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    static func claims(
        _ user: String? = "alice", expiresIn: TimeInterval = 3600, notBeforeIn: TimeInterval? = nil,
        issuer: String? = "https://auth.example.com", audience: [String]? = ["notes"]
    ) -> Claims {
        let now = Date().timeIntervalSince1970
        return Claims(
            sub: user, exp: now + expiresIn, nbf: notBeforeIn.map { now + $0 }, iss: issuer, aud: audience,
            team: "blue")
    }

    static func hs256(_ claims: Claims, secret: String = secret, kid: String? = nil) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        return try await keys.sign(claims, header: kid.map { ["kid": .string($0)] } ?? JWTHeader())
    }

    static var policy: TokenPolicy {
        TokenPolicy(
            keys: [TokenKey(algorithm: .hs256, material: secret)], issuer: "https://auth.example.com",
            audiences: ["notes"])
    }

    static func daemon(
        _ directory: TemporaryDirectory, policy: TokenPolicy = policy,
        configure: (inout SyncServer.Configuration) -> Void = { _ in }
    ) async throws -> (SyncServer, SyncEndpoint) {
        try await LoopbackSyncTests.daemon(directory, "daemon") {
            $0.tokenPolicy = policy
            $0.tickInterval = .milliseconds(100)
            configure(&$0)
        }
    }

    static func app(_ directory: TemporaryDirectory, _ name: String, author: String) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.author = author
        return try Replica.open(
            directory: directory.appending(name), schema: LoopbackSyncTests.schema, configuration: configuration)
    }

    /// The error a connection presenting `authorization` is refused with before its upgrade, or `nil` if it was
    /// upgraded.
    static func refusal(_ endpoint: SyncEndpoint, _ authorization: String?) async throws -> SyncError? {
        // A connection that takes long, or that an overloaded daemon closes before its verdict (`unavailable`), is
        // not what these tests are about: under the whole suite, long synchronous drills can hold every thread of the
        // concurrency pool for minutes. Tried again, within a bound; the verdict is what is checked.
        let deadline = ContinuousClock.now + .seconds(900)
        while true {
            do {
                let channel = try await WebSocketDialer.connect(
                    to: endpoint, authorization: authorization, timeout: .seconds(120))
                try await channel.executeThenClose { _, _ in }
                return nil
            } catch let error as SyncError {
                guard error.code == .unavailable, ContinuousClock.now < deadline else { return error }
                try await Task.sleep(for: .seconds(1))
            }
        }
    }

    @Test("An app with a token signed by the daemon's key syncs, and the session is its user's")
    func validTokenSyncs() async throws {
        let directory = TemporaryDirectory("auth")
        let (server, endpoint) = try await Self.daemon(directory)
        let app = try Self.app(directory, "alice", author: "alice")
        let token = try await Self.hs256(Self.claims())
        let session = app.connect(
            to: endpoint, credentials: .token(token), configuration: LoopbackSyncTests.fastBackoff)
        try await app.write { try $0.create("Task", ["_id": "t1", "title": "mine"]) }
        try await LoopbackSyncTests.within(.seconds(120), "upload") { try await session.waitForUpload() }
        #expect(try await server.replica.read { try $0.count("Task") } == 1)
        #expect(server.sessions.map(\.role) == [.app])
        await session.close()
        await server.stop()
    }

    @Test("Every kind of bad token is refused before the upgrade, with a reason that names it")
    func badTokensRefused() async throws {
        let directory = TemporaryDirectory("auth")
        let (server, endpoint) = try await Self.daemon(directory)
        let valid = try await Self.hs256(Self.claims())
        let parts = valid.split(separator: ".")
        func base64URL(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let cases: [(String, String?, SyncError.Code, String)] = [
            ("no token", nil, .unauthorized, "requires a token"),
            ("not a bearer token", "Basic YWxpY2U6c2VjcmV0", .unauthorized, "requires a token"),
            ("not a JWT", "Bearer abc", .unauthorized, "nor a JWT"),
            ("three parts of garbage", "Bearer a.b.c", .unauthorized, "nor a JWT"),
            (
                "signed with another secret",
                "Bearer " + (try await Self.hs256(Self.claims(), secret: String(repeating: "x", count: 40))),
                .unauthorized, "signature does not verify"
            ),
            (
                "a tampered payload",
                "Bearer \(parts[0]).\(base64URL(#"{"sub":"mallory","exp":9999999999}"#)).\(parts[2])",
                .unauthorized, "signature does not verify"
            ),
            (
                "alg none", "Bearer \(base64URL(#"{"alg":"none","typ":"JWT"}"#)).\(parts[1]).",
                .unauthorized, "signed with none"
            ),
            (
                "expired", "Bearer " + (try await Self.hs256(Self.claims(expiresIn: -120))), .tokenExpired,
                "expired"
            ),
            (
                "not valid yet", "Bearer " + (try await Self.hs256(Self.claims(notBeforeIn: 600))), .unauthorized,
                "not valid before"
            ),
            (
                "another issuer", "Bearer " + (try await Self.hs256(Self.claims(issuer: "https://evil.example.com"))),
                .unauthorized, "issuer"
            ),
            (
                "another audience", "Bearer " + (try await Self.hs256(Self.claims(audience: ["billing"]))),
                .unauthorized, "audience"
            ),
            ("no user", "Bearer " + (try await Self.hs256(Self.claims(nil))), .unauthorized, "names no user"),
            (
                "an unknown key id", "Bearer " + (try await Self.hs256(Self.claims(), kid: "old-key")),
                .unauthorized, "old-key"
            ),
        ]
        for (name, authorization, code, words) in cases {
            let error = try await LoopbackSyncTests.within(.seconds(60), name) {
                try await Self.refusal(endpoint, authorization)
            }
            #expect(error?.code == code, "\(name): \(String(describing: error))")
            #expect(error?.message.contains(words) == true, "\(name): \(String(describing: error))")
        }
        #expect(server.sessions.isEmpty)
        // The daemon still serves: a good token is upgraded.
        #expect(try await Self.refusal(endpoint, "Bearer \(valid)") == nil)
        await server.stop()
    }

    @Test("RS256 and ES256 keys verify their own tokens, and refuse an HS256 token signed with the public key")
    func publicKeyAlgorithms() async throws {
        let directory = TemporaryDirectory("auth")
        let rsa = try Insecure.RSA.PrivateKey(pem: Self.rsaTestKey)
        let ecdsa = ES256PrivateKey()
        let policy = TokenPolicy(
            keys: [
                TokenKey(id: "rsa", algorithm: .rs256, material: rsa.publicKey.pemRepresentation),
                TokenKey(id: "ec", algorithm: .es256, material: ecdsa.publicKey.pemRepresentation),
            ], issuer: "https://auth.example.com", audiences: ["notes"])
        let (server, endpoint) = try await Self.daemon(directory, policy: policy)
        let signers = JWTKeyCollection()
        await signers.add(rsa: rsa, digestAlgorithm: .sha256, kid: "rsa")
        await signers.add(ecdsa: ecdsa, kid: "ec")
        for kid in ["rsa", "ec"] {
            let token = try await signers.sign(Self.claims(), kid: JWKIdentifier(string: kid))
            #expect(try await Self.refusal(endpoint, "Bearer \(token)") == nil, "\(kid)")
        }
        // The classic confusion: an HS256 token whose secret is the RSA public key, naming the RSA key.
        let forged = try await Self.hs256(Self.claims(), secret: rsa.publicKey.pemRepresentation, kid: "rsa")
        let error = try await Self.refusal(endpoint, "Bearer \(forged)")
        #expect(error?.code == .unauthorized)
        #expect(error?.message.contains("signed with HS256") == true)
        await server.stop()
    }

    @Test("A daemon refuses key configurations it cannot use, naming the key")
    func badKeyConfiguration() async throws {
        let directory = TemporaryDirectory("auth")
        let cases: [(TokenPolicy, String)] = [
            (TokenPolicy(keys: [TokenKey(algorithm: .hs256, material: "short")]), "at least 32 bytes"),
            (TokenPolicy(keys: [TokenKey(id: "k", algorithm: .rs256, material: "not a key")]), "key 'k' (RS256)"),
            (
                TokenPolicy(keys: [
                    TokenKey(algorithm: .hs256, material: Self.secret),
                    TokenKey(id: "b", algorithm: .hs256, material: Self.secret),
                ]), "give each an id"
            ),
        ]
        for (index, (policy, words)) in cases.enumerated() {
            let replica = try Replica.open(directory: directory.appending("daemon-\(index)"))
            var configuration = SyncServer.Configuration()
            configuration.port = 0
            configuration.tokenPolicy = policy
            let server = SyncServer(replica: replica, configuration: configuration)
            do {
                try await server.start()
                Issue.record("a daemon started with \(policy)")
                await server.stop()
            } catch let error as SyncServerError {
                #expect(error.message.contains(words), "\(error)")
            }
            replica.close()
        }
    }

    @Test("Reloaded keys apply to new connections at once; a reload with a key that does not load keeps the old")
    func reloadKeys() async throws {
        let directory = TemporaryDirectory("auth")
        let (server, endpoint) = try await Self.daemon(directory)
        let old = try await Self.hs256(Self.claims())
        let newSecret = String(repeating: "n", count: 40)
        let new = try await Self.hs256(Self.claims(), secret: newSecret)
        #expect(try await Self.refusal(endpoint, "Bearer \(old)") == nil)
        #expect(try await Self.refusal(endpoint, "Bearer \(new)")?.code == .unauthorized)

        var policy = Self.policy
        policy.keys = [TokenKey(algorithm: .hs256, material: newSecret)]
        try await server.reloadAuthentication(accessTokens: [], tokenPolicy: policy)
        #expect(try await Self.refusal(endpoint, "Bearer \(new)") == nil)
        #expect(try await Self.refusal(endpoint, "Bearer \(old)")?.code == .unauthorized)

        policy.keys = [TokenKey(algorithm: .es256, material: "not a key")]
        await #expect(throws: SyncServerError.self) {
            try await server.reloadAuthentication(accessTokens: [], tokenPolicy: policy)
        }
        #expect(try await Self.refusal(endpoint, "Bearer \(new)") == nil)
        await server.stop()
    }

    @Test("An upload written by another author is refused as forbidden, and none of it is integrated")
    func uploadByAnotherAuthorRefused() async throws {
        let directory = TemporaryDirectory("auth")
        let (server, endpoint) = try await Self.daemon(directory)
        let app = try Self.app(directory, "mallory", author: "mallory")
        try await app.write { try $0.create("Task", ["_id": "t1", "title": "as alice?"]) }
        let token = try await Self.hs256(Self.claims("alice"))
        let session = app.connect(
            to: endpoint, credentials: .token(token), configuration: LoopbackSyncTests.fastBackoff)
        let error = try await LoopbackSyncTests.uploadError(session)
        #expect(error?.code == .forbidden)
        #expect(error?.message.contains("\"mallory\"") == true)
        #expect(error?.message.contains("\"alice\"") == true)
        // Nothing of the upload reached the daemon's log (it holds no schema either).
        #expect(try server.replica.inspection.summary().lastLocalSequence == 0)
        #expect(try server.replica.verify().passed)
        await session.close()
        await server.stop()
    }

    @Test("A token that expires mid-session ends it; the app's refresh callback resumes it and nothing is lost")
    func expiryMidSessionRefreshes() async throws {
        let directory = TemporaryDirectory("auth")
        let policy = TokenPolicy(
            keys: [TokenKey(algorithm: .hs256, material: Self.secret)], issuer: "https://auth.example.com",
            audiences: ["notes"], leewaySeconds: 0)
        let (server, endpoint) = try await Self.daemon(directory, policy: policy)
        let app = try Self.app(directory, "alice", author: "alice")
        let fetches = Counter()
        // The first token lives 2 seconds; the ones the callback fetches live an hour.
        let short = try await Self.hs256(Self.claims(expiresIn: 2))
        let session = app.connect(
            to: endpoint,
            credentials: .refreshing(initial: short) {
                fetches.increment()
                return try await Self.hs256(Self.claims())
            }, configuration: LoopbackSyncTests.fastBackoff)
        try await app.write { try $0.create("Task", ["_id": "before", "title": "written before expiry"]) }
        try await LoopbackSyncTests.within(.seconds(120), "first upload") { try await session.waitForUpload() }
        // Past the first token's expiry: the daemon ends the session, the callback gives a fresh token. (On a busy
        // machine the first upload may itself outlast the token; the callback is then asked earlier.)
        try await Task.sleep(for: .seconds(3))
        try await app.write { try $0.create("Task", ["_id": "after", "title": "written after expiry"]) }
        try await LoopbackSyncTests.within(.seconds(120), "upload after refresh") { try await session.waitForUpload() }
        // The session was given a token, so only the daemon's refusal of it made it ask for another.
        #expect(fetches.value >= 1)
        #expect(try await server.replica.read { try $0.count("Task") } == 2)
        #expect(session.state == .active)
        await session.close()
        await server.stop()
    }

    @Test("A session whose token expires with no way to refresh stops, saying so")
    func expiryWithoutRefreshStops() async throws {
        let directory = TemporaryDirectory("auth")
        let (server, endpoint) = try await Self.daemon(directory)
        let app = try Self.app(directory, "alice", author: "alice")
        let expired = try await Self.hs256(Self.claims(expiresIn: -3600))
        let session = app.connect(
            to: endpoint, credentials: .token(expired), configuration: LoopbackSyncTests.fastBackoff)
        try await app.write { try $0.create("Task", ["_id": "t"]) }
        let error = try await LoopbackSyncTests.uploadError(session)
        #expect(error?.code == .tokenExpired)
        #expect(error?.action == .fatal)
        #expect(error?.message.contains("SyncCredentials.refreshing") == true)
        await session.close()
        await server.stop()
    }

    @Test("A JWT allows app sessions only; a peer presents a shared access token")
    func jwtCannotOpenAPeerSession() async throws {
        let directory = TemporaryDirectory("auth")
        let (server, endpoint) = try await Self.daemon(directory) { $0.accessTokens = ["peer-secret"] }
        let token = try await Self.hs256(Self.claims())
        let replica = try Replica.open(directory: directory.appending("peer-as-app"))
        let asPeer = SyncSession(
            replica: replica, endpoint: endpoint, credentials: .token(token),
            configuration: LoopbackSyncTests.fastBackoff, role: .peer, integrator: DirectIntegrator(replica: replica))
        let error = try await LoopbackSyncTests.disconnection(asPeer, code: .roleRefused)
        #expect(error?.message.contains("app sessions only") == true)
        await asPeer.close()
        await server.stop()
    }

    /// An RSA key made for these tests only.
    static let rsaTestKey = """
        -----BEGIN PRIVATE KEY-----
        MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQDYoZ4WImt2ge+a
        53ayRE34uJks+a38sF5URQzA5kq1U1duKivSXRFIeT6mnHdCISj7ntU17pRxFwrm
        /J4UD7PcIo87PnGnBIYjMufwr+mTiB/S07Ag1QP15cENVXdC85LB6lb6qnnHmGvR
        OHxWVrHfLD8GA53RPHTfOlqHSc1RjFVWec9WPXUVkNc5/UlaRhJd2Ju7/fPRpNBA
        sump8snyPBvQvhs0Z+jdR4h0jbgLRrs6Eg6b7ZFl5MaL5JjrEbMfYRcey3Q7juXJ
        ivhIPqvfDVmGSw5vJep8o62ZZzU4xXqePIs4V08jSylrqelbHps+74W3zavF8Odp
        YRLtSzL5AgMBAAECggEAF13PbHnH959qVd4TmoTtmB9pPkWsM65ebl6IUqJEeqyD
        qLlZwrYRMC0LyfLkljh3cDSgsNGMJ2qh3WpwLp/G+b6sjmpc3fQJ9+/8vqRq4GP1
        csssm03+wF5I5YRLeehF8y6wtRcATbwuHQInvzRYuUbPgXmQY0pPHOjxbNhUEjCL
        A6qODW+AXwqs4umaVKeMn46C7XKjGXjevvhlz+k73RJPJClFm7SGEc7oHUSItJpR
        0/dK1Ng4q8NyXdgnEr7eUPu/eLISusPBYFwyXK38VZxpB/O0/PR38Ad37XODP4LB
        CVrGeqZ/ABRFOeD0CQMgkgeLiGN3+mOMT9+R8KQ5UQKBgQD29e1rwS24aQnMH3/H
        9BJPFHQZAjbosqpDDWjgCTzKYLlm8wpEGioJRZ9tnyYyfWMDunwiGGCD5sz4LqHc
        0ZN/sFqu8pbRiQTkgS82y3VtgaLkI1irQyTIRbqfzxnVX/EyWxM78ZqSWGDOaygH
        2gRRx6zQg31k3E57cW7jSPzkhQKBgQDgj394enXCl+t3+qPZB2WoA2vhgBqIvrjH
        OMCckypBQBgeoaTbFkDZ5Qw9l9pABH2vYEF6ppGGTvWv+EamHv/rOjjWUizC+GpZ
        NQkNUzMGiWz4ZbVnh6WNGf8cK5g0UP0cw81LdVid/VDwonz1dbByfb0g6JbPOqCM
        p6mxB0Yo5QKBgQDsh7TC3L3efvP8RjsLls+mYA+mGEHg86YxHHnTAeXwa12HpcWy
        XmDeiolc4+4gs4kO/CCCQ1jFXFv6ZCdxKGUeChmAsCYVQCeod7Zxw8KPhHcwDE6T
        kXZ8PpS1FRVIEWEg+qvcYNXLzsvBSE6J3pz+esEg4J9L59lfT9CF7dURRQKBgQCw
        yQenR3Ex0vvzJoSbNTGYhakGjB1Xjh5V6J3qJglb+SOD6emo+OnxIFr0mnmdcGuq
        B3NFJaDnRX4yHJkx6rG688kPIP5QN9UxiYkozlkbSlFZdGjNqoJwhQjLmp5mgWPi
        o1sZjrZHGsf/yUvqyc4xNEASikk/t33xfYUf8wQO6QKBgFX4hOX++S6vMNedA79r
        TzoEZinyR5h0aSsQsv1r+4j1GlRg9Jh68tNSeQ7xX+lJuRDMPFOj38N+wvieeWxY
        JrYt8OfQKbWrL72aF1N4ujJf+OJQ/I7UWSeU58GJOxBKxZLWXzXrOcq7RG8wVa8b
        aWv1BGf8WzaofR65mNy9nqmw
        -----END PRIVATE KEY-----
        """
}

/// A count shared with a callback.
final class Counter: Sendable {
    private let count = Mutex(0)
    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
