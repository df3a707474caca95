import Foundation
import Testing
import Tributary
import TributaryDaemon
import TributaryModel
import TributaryProtocol
import TributarySync
import TributaryTestSupport

/// Sessions over TLS (`wss://`), with the certificates in `Certificates/` (generate.py there says what each is):
/// the right authority succeeds; a self-signed, expired or wrong-host certificate fails with a TLS error; plain
/// WebSocket to the TLS port fails at once with an error that says to use `wss://`; peer daemons prove themselves with
/// client certificates. The daemon stays up and serves honest sessions in every case.
@Suite("TLS")
struct TLSTests {
    /// A file of `Certificates/`.
    static func certificate(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Certificates")
            .appendingPathComponent(name).path
    }

    /// The daemon's TLS settings with the certificate `name` (and its key), and the peer authority when asked.
    static func serverTLS(_ name: String = "daemon", peers: Bool = false) -> SyncServer.TLS {
        SyncServer.TLS(
            certificate: CertificateFiles(
                certificateChain: certificate("\(name).pem"), privateKey: certificate("\(name)-key.pem")),
            peerCertificateAuthority: peers ? certificate("peer-ca.pem") : nil)
    }

    /// A daemon serving `wss://` with the certificate `name`, and its address.
    static func daemon(
        _ directory: TemporaryDirectory, _ name: String, certificate: String = "daemon", peers: Bool = false,
        configure: (inout SyncServer.Configuration) -> Void = { _ in }
    ) async throws -> (SyncServer, SyncEndpoint) {
        var (server, endpoint) = try await LoopbackSyncTests.daemon(directory, name) {
            $0.tls = serverTLS(certificate, peers: peers)
            configure(&$0)
        }
        endpoint.secure = true
        return (server, endpoint)
    }

    /// An app's settings that trust the test authority only.
    static var trustingTestAuthority: SyncConfiguration {
        var configuration = LoopbackSyncTests.fastBackoff
        configuration.tls.certificateAuthorityFiles = [certificate("ca.pem")]
        configuration.tls.trustsSystemRoots = false
        return configuration
    }

    /// Writes an object on a new app and waits for the daemon to hold it.
    static func upload(_ directory: TemporaryDirectory, _ name: String, to endpoint: SyncEndpoint) async throws {
        let app = try LoopbackSyncTests.app(directory, name)
        defer { app.close() }
        let session = app.connect(to: endpoint, configuration: trustingTestAuthority)
        try await app.write { try $0.create("Task", ["_id": .string(name)]) }
        try await LoopbackSyncTests.within(.seconds(120), "\(name)'s upload") { try await session.waitForUpload() }
        await session.close()
    }

    @Test("Apps sync through a wss:// daemon whose certificate the authority they trust signed, by address and by name")
    func rightAuthoritySucceeds() async throws {
        let directory = TemporaryDirectory("tls")
        let (server, endpoint) = try await Self.daemon(directory, "daemon")
        try await Self.upload(directory, "alice", to: endpoint)

        // By host name: the certificate names localhost too, and the name is what is checked (and sent as SNI).
        let bob = try LoopbackSyncTests.app(directory, "bob")
        let named = SyncEndpoint(host: "localhost", port: endpoint.port, secure: true)
        let session = bob.connect(to: named, configuration: Self.trustingTestAuthority)
        try await LoopbackSyncTests.within(.seconds(120), "alice's object at bob") {
            while try bob.object("Task", primaryKey: .string("alice")) == nil {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(session.state == .active)
        await session.close()
        bob.close()
        await server.stop()
    }

    @Test(
        "A self-signed, an expired or a wrong-host certificate fails with a TLS error; the daemon serves honest apps on",
        arguments: ["self-signed", "expired", "wrong-host"])
    func untrustedCertificatesFail(_ name: String) async throws {
        let directory = TemporaryDirectory("tls-\(name)")
        let (bad, badEndpoint) = try await Self.daemon(directory, "bad", certificate: name)
        let app = try LoopbackSyncTests.app(directory, "app")
        let session = app.connect(to: badEndpoint, configuration: Self.trustingTestAuthority)
        try await app.write { try $0.create("Task", ["_id": "secret"]) }
        let error = try #require(try await LoopbackSyncTests.disconnection(session, code: .tls))
        #expect(error.message.contains("TLS handshake with \(badEndpoint) failed"))
        if name == "wrong-host" {
            #expect(error.message.contains("is not for 127.0.0.1"), "\(error.message)")
        } else {
            #expect(error.message.contains("not trusted or has expired"), "\(error.message)")
            #expect(error.message.contains("CERTIFICATE_VERIFY_FAILED"), "\(error.message)")
        }
        // Nothing was sent to the daemon the app does not trust.
        #expect(bad.replica.versionVector.entries.isEmpty)
        await session.close()
        app.close()

        // The same daemon, with a good certificate in the same run, serves an honest app.
        await bad.stop()
        bad.replica.close()
        let (good, endpoint) = try await Self.daemon(directory, "good")
        try await Self.upload(directory, "honest", to: endpoint)
        await good.stop()
    }

    @Test("The system's roots alone do not trust the test authority's certificate")
    func systemRootsAloneFail() async throws {
        let directory = TemporaryDirectory("tls-system")
        let (server, endpoint) = try await Self.daemon(directory, "daemon")
        let app = try LoopbackSyncTests.app(directory, "app")
        let session = app.connect(to: endpoint, configuration: LoopbackSyncTests.fastBackoff)
        let error = try await LoopbackSyncTests.disconnection(session, code: .tls)
        #expect(error?.action == .retry)
        await session.close()
        app.close()
        await server.stop()
    }

    @Test("Plain ws:// to the TLS port fails at once, saying to use wss://; wss:// to a plain port fails as TLS")
    func plaintextToTheTLSPortFailsFast() async throws {
        let directory = TemporaryDirectory("tls-plain")
        let (server, secure) = try await Self.daemon(directory, "daemon")
        var plain = secure
        plain.secure = false
        let app = try LoopbackSyncTests.app(directory, "app")
        let session = app.connect(to: plain, configuration: Self.trustingTestAuthority)
        try await app.write { try $0.create("Task", ["_id": "t"]) }
        let error = try #require(try await LoopbackSyncTests.uploadError(session))
        #expect(error.code == .tls)
        #expect(error.action == .fatal)
        #expect(error.message.contains("wss://127.0.0.1:\(secure.port)/sync"))
        await session.close()
        app.close()

        // The other way round: TLS to a daemon that serves plain WebSocket.
        let (plainServer, plainEndpoint) = try await LoopbackSyncTests.daemon(directory, "plain")
        let other = try LoopbackSyncTests.app(directory, "other")
        var wrong = plainEndpoint
        wrong.secure = true
        let otherSession = other.connect(to: wrong, configuration: Self.trustingTestAuthority)
        #expect(try await LoopbackSyncTests.disconnection(otherSession, code: .tls) != nil)
        await otherSession.close()
        other.close()

        try await Self.upload(directory, "honest", to: secure)
        await plainServer.stop()
        await server.stop()
    }

    @Test("Peer daemons prove themselves with a certificate from the peer authority and replicate over wss://")
    func peersByCertificate() async throws {
        let directory = TemporaryDirectory("tls-peers")
        let (hub, hubEndpoint) = try await Self.daemon(directory, "hub", peers: true) {
            $0.accessTokens = ["app-token"]
        }
        let (edge, _) = try await LoopbackSyncTests.daemon(directory, "edge", peers: [hubEndpoint]) {
            $0.peerTLS.certificateAuthorityFiles = [Self.certificate("ca.pem")]
            $0.peerTLS.trustsSystemRoots = false
            $0.peerTLS.clientCertificate = CertificateFiles(
                certificateChain: Self.certificate("peer.pem"), privateKey: Self.certificate("peer-key.pem"))
        }
        let app = try LoopbackSyncTests.app(directory, "app")
        let session = app.connect(
            to: hubEndpoint, credentials: .token("app-token"), configuration: Self.trustingTestAuthority)
        try await app.write { try $0.create("Task", ["_id": "through-the-hub"]) }
        try await LoopbackSyncTests.within(.seconds(120), "the object at the edge") {
            // The edge's replica learns the type with the first changeset it integrates.
            while (try? edge.replica.object("Task", primaryKey: .string("through-the-hub"))) == nil {
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        #expect(hub.sessions.contains { $0.role == .peer && $0.replica == edge.replica.replicaID })
        await session.close()
        app.close()
        await edge.stop()
        await hub.stop()
    }

    @Test(
        "With a peer authority, a shared token no longer opens a peer session, and a certificate it did not sign fails")
    func peersWithoutTheAuthoritysCertificateAreRefused() async throws {
        let directory = TemporaryDirectory("tls-rogue")
        let (hub, hubEndpoint) = try await Self.daemon(directory, "hub", peers: true) {
            $0.accessTokens = ["shared"]
        }
        var configuration = Self.trustingTestAuthority
        let replica = try Replica.open(directory: directory.appending("rogue"))
        let byToken = SyncSession(
            replica: replica, endpoint: hubEndpoint, credentials: .token("shared"), configuration: configuration,
            role: .peer, integrator: DirectIntegrator(replica: replica))
        let refused = try #require(try await LoopbackSyncTests.disconnection(byToken, code: .roleRefused))
        #expect(refused.message.contains("a certificate from the peer certificate authority"))
        await byToken.close()

        // A certificate from another authority (the daemon's own, say) fails the handshake.
        configuration.tls.clientCertificate = CertificateFiles(
            certificateChain: Self.certificate("daemon.pem"), privateKey: Self.certificate("daemon-key.pem"))
        let byWrongCertificate = SyncSession(
            replica: replica, endpoint: hubEndpoint, credentials: .token("shared"), configuration: configuration,
            role: .peer, integrator: DirectIntegrator(replica: replica))
        #expect(try await LoopbackSyncTests.disconnection(byWrongCertificate, code: .tls) != nil)
        await byWrongCertificate.close()
        #expect(hub.sessions.isEmpty)
        replica.close()
        await hub.stop()
    }

    @Test("A renewed certificate is served after reloadCertificates; a file that does not load keeps the old one")
    func certificatesReload() async throws {
        let directory = TemporaryDirectory("tls-reload")
        let files = directory.appending("certificates")
        try FileManager.default.createDirectory(atPath: files, withIntermediateDirectories: true)
        let chain = files + "/served.pem"
        let key = files + "/served-key.pem"
        func serve(_ name: String) throws {
            for (from, to) in [("\(name).pem", chain), ("\(name)-key.pem", key)] {
                try? FileManager.default.removeItem(atPath: to)
                try FileManager.default.copyItem(atPath: Self.certificate(from), toPath: to)
            }
        }
        try serve("expired")
        var (server, endpoint) = try await LoopbackSyncTests.daemon(directory, "daemon") {
            $0.tls = SyncServer.TLS(certificate: CertificateFiles(certificateChain: chain, privateKey: key))
        }
        endpoint.secure = true
        let app = try LoopbackSyncTests.app(directory, "app")
        let session = app.connect(to: endpoint, configuration: Self.trustingTestAuthority)
        #expect(try await LoopbackSyncTests.disconnection(session, code: .tls) != nil)
        await session.close()
        app.close()

        try serve("daemon")
        try server.reloadCertificates()
        try await Self.upload(directory, "after-renewal", to: endpoint)

        try "not a certificate".write(toFile: chain, atomically: true, encoding: .utf8)
        #expect(throws: SyncServerError.self) { try server.reloadCertificates() }
        try await Self.upload(directory, "after-failed-reload", to: endpoint)
        await server.stop()
    }

    @Test("A daemon refuses TLS files it cannot use, naming the file")
    func unusableFilesAreNamed() async throws {
        let directory = TemporaryDirectory("tls-files")
        let cases: [(SyncServer.TLS, String)] = [
            (
                SyncServer.TLS(
                    certificate: CertificateFiles(
                        certificateChain: directory.appending("missing.pem"),
                        privateKey: Self.certificate("daemon-key.pem"))), "cannot read"
            ),
            (
                SyncServer.TLS(
                    certificate: CertificateFiles(
                        certificateChain: Self.certificate("daemon-key.pem"),
                        privateKey: Self.certificate("daemon-key.pem"))), "given as the daemon's certificate"
            ),
            (
                SyncServer.TLS(
                    certificate: CertificateFiles(
                        certificateChain: Self.certificate("daemon.pem"), privateKey: Self.certificate("ca.pem"))),
                "does not hold an unencrypted PEM key"
            ),
            (
                SyncServer.TLS(
                    certificate: CertificateFiles(
                        certificateChain: Self.certificate("daemon.pem"), privateKey: Self.certificate("daemon-key.pem")
                    ),
                    peerCertificateAuthority: directory.appending("no-authority.pem")), "no-authority.pem"
            ),
        ]
        for (index, (tls, expected)) in cases.enumerated() {
            let replica = try Replica.open(directory: directory.appending("daemon\(index)"))
            var configuration = SyncServer.Configuration()
            configuration.port = 0
            configuration.tls = tls
            let server = SyncServer(replica: replica, configuration: configuration)
            do {
                try await server.start()
                Issue.record("a daemon started with unusable TLS files (\(expected))")
                await server.stop()
            } catch let error as SyncServerError {
                #expect(error.message.contains(expected), "\(error.message)")
            }
            replica.close()
        }
    }
}
