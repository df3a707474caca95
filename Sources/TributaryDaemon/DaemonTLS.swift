import NIOCore
import NIOHTTP1
import NIOSSL
import TributaryProtocol
public import TributarySync

extension SyncServer {
    /// How the daemon serves TLS (`wss://`): its certificate, and the authority whose certificates identify peer
    /// daemons (mutual TLS).
    public struct TLS: Sendable, Hashable {
        /// The daemon's certificate and key. The certificate must name the host apps dial (or its IP address).
        public var certificate: CertificateFiles
        /// A PEM file of the certificate authority whose client certificates identify peer daemons. With one, a
        /// connection that presents a certificate it signed may open peer sessions, and access tokens no longer
        /// allow peer sessions (only apps'); a certificate it did not sign fails the handshake. Without one, no
        /// client certificate is asked for.
        public var peerCertificateAuthority: String?

        public init(certificate: CertificateFiles, peerCertificateAuthority: String? = nil) {
            self.certificate = certificate
            self.peerCertificateAuthority = peerCertificateAuthority
        }

        /// The TLS server context these settings describe: TLS 1.2 or later.
        ///
        /// - Throws: ``SyncServerError`` naming a file that does not load, or a key that does not match.
        func serverContext() throws(SyncServerError) -> NIOSSLContext {
            do throws(SyncError) {
                let chain = try PEMFiles.certificates(certificate.certificateChain, "the daemon's certificate")
                let key = try PEMFiles.privateKey(certificate.privateKey)
                var configuration = TLSConfiguration.makeServerConfiguration(
                    certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
                configuration.minimumTLSVersion = .tlsv12
                if let peerCertificateAuthority {
                    let authority = try PEMFiles.certificates(
                        peerCertificateAuthority, "the peer certificate authority")
                    configuration.trustRoots = .certificates(authority)
                    // Apps present no certificate; one that is presented must be the peer authority's.
                    configuration.certificateVerification = .optionalVerification
                    configuration.sendCANameList = true
                }
                do {
                    return try NIOSSLContext(configuration: configuration)
                } catch {
                    throw SyncError(
                        .tls, .fatal,
                        "the daemon's certificate \(certificate.certificateChain) and key \(certificate.privateKey) "
                            + "cannot be used together: \(error)")
                }
            } catch {
                throw SyncServerError(error.message)
            }
        }
    }
}

/// First on a TLS listener's connections: lets a TLS handshake through, and answers a plain HTTP request (an app
/// dialling `ws://` at a `wss://` port) with an HTTP error that says so, instead of a TLS alert a client cannot read.
final class PlaintextRefusal: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = unwrapInboundIn(data)
        // Every TLS connection starts with a handshake record: content type 22.
        guard let first = bytes.getInteger(at: bytes.readerIndex, as: UInt8.self), first != 0x16 else {
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(self, promise: nil)
            return
        }
        let address = context.channel.localAddress
        let refusal = SyncError(
            .tls, .fatal,
            "this port serves sessions over TLS only: connect to wss://\(address?.ipAddress ?? "HOST"):"
                + "\(address?.port ?? 0)\(SyncProtocol.path)")
        // Written as bytes: this handler sits before TLS and HTTP, on the raw connection.
        let (head, body) = SyncServer.refusalResponse(refusal, status: .badRequest)
        let response =
            "HTTP/1.1 \(head.status.code) \(head.status.reasonPhrase)\r\n"
            + head.headers.map { "\($0.name): \($0.value)\r\n" }.joined() + "\r\n" + body
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: response))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}
