import Foundation
package import NIOCore
package import NIOSSL
import Synchronization
package import TributaryProtocol

/// A certificate chain and its private key, as PEM files.
public struct CertificateFiles: Sendable, Hashable {
    /// The certificate, followed by any intermediates, in PEM.
    public var certificateChain: String
    /// The certificate's private key, in PEM (unencrypted).
    public var privateKey: String

    public init(certificateChain: String, privateKey: String) {
        self.certificateChain = certificateChain
        self.privateKey = privateKey
    }
}

/// How a session reaches a daemon over TLS (a `wss://` address): which certificate authorities it trusts, and the
/// certificate it presents, if any. TLS 1.2 is the oldest version spoken; the daemon's certificate must name the host
/// dialled (or its IP address, for an address like `wss://10.0.0.5:7400`).
public struct SyncTLS: Sendable, Hashable {
    /// PEM files of certificate authorities to trust for the daemon's certificate, besides the system's.
    public var certificateAuthorityFiles: [String] = []
    /// Whether the system's trusted roots (Debian's ca-certificates, say) are trusted too. Default: true.
    public var trustsSystemRoots = true
    /// A certificate presented to the daemon: how a peer daemon proves it is one (mutual TLS). Apps present none.
    public var clientCertificate: CertificateFiles?

    public init() {}

    /// The TLS client context these settings describe.
    ///
    /// - Throws: ``SyncError`` with ``SyncError/Code/tls`` naming a file that does not load.
    package func clientContext() throws(SyncError) -> NIOSSLContext {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        var authorities: [NIOSSLCertificate] = []
        for file in certificateAuthorityFiles {
            authorities += try PEMFiles.certificates(file, "a certificate authority")
        }
        if trustsSystemRoots {
            configuration.trustRoots = .default
            configuration.additionalTrustRoots = authorities.isEmpty ? [] : [.certificates(authorities)]
        } else {
            guard !authorities.isEmpty else {
                throw SyncError(
                    .tls, .fatal, "TLS settings trust no certificate authority: give one, or trust the system's roots")
            }
            configuration.trustRoots = .certificates(authorities)
        }
        if let clientCertificate {
            configuration.certificateChain = try PEMFiles.certificates(
                clientCertificate.certificateChain, "a certificate chain"
            ).map { .certificate($0) }
            configuration.privateKey = .privateKey(try PEMFiles.privateKey(clientCertificate.privateKey))
        }
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw SyncError(.tls, .fatal, "the TLS settings cannot be used: \(error)")
        }
    }
}

/// Reads PEM certificates and keys, with errors that name the file.
package enum PEMFiles {
    /// The certificates in the PEM file at `path`; `what` names it in errors ("a certificate authority").
    package static func certificates(_ path: String, _ what: String) throws(SyncError) -> [NIOSSLCertificate] {
        let bytes = try read(path, what)
        let certificates: [NIOSSLCertificate]
        do {
            certificates = try NIOSSLCertificate.fromPEMBytes(bytes)
        } catch {
            throw SyncError(.tls, .fatal, "\(path), given as \(what), does not hold PEM certificates: \(error)")
        }
        guard !certificates.isEmpty else {
            throw SyncError(.tls, .fatal, "\(path), given as \(what), holds no PEM certificate")
        }
        return certificates
    }

    /// The private key in the PEM file at `path`.
    package static func privateKey(_ path: String) throws(SyncError) -> NIOSSLPrivateKey {
        let bytes = try read(path, "a private key")
        do {
            return try NIOSSLPrivateKey(bytes: bytes, format: .pem)
        } catch {
            throw SyncError(
                .tls, .fatal, "\(path), given as a private key, does not hold an unencrypted PEM key: \(error)")
        }
    }

    private static func read(_ path: String, _ what: String) throws(SyncError) -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SyncError(.tls, .fatal, "cannot read \(path), given as \(what)")
        }
        return Array(data)
    }
}

/// Notes the first TLS error a connection's handler reports, so that a failed handshake is reported as what it was
/// rather than as a closed connection.
package final class TLSFailureRecorder: ChannelInboundHandler, Sendable {
    package typealias InboundIn = ByteBuffer
    private let failure = Mutex<(any Error)?>(nil)

    package init() {}

    /// The TLS error seen, if any.
    package var error: (any Error)? { failure.withLock { $0 } }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError {
            failure.withLock { if $0 == nil { $0 = error } }
        }
        context.fireErrorCaught(error)
    }
}
