import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization
import Tributary
import TributaryModel
import TributaryProtocol
public import TributarySync

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A copy of a daemon's replica over the network: how a new daemon of a cluster starts from a running one's replica
/// instead of the whole shared log (and, once the log was compacted, instead of an operator copying files).
///
/// The daemon answers `GET /replica` on its listening port with a consistent copy of its replica, taken while it
/// goes on serving (LMDB's compacting copy: free pages left out), to a caller that presents one of its access tokens
/// (or a peer certificate over TLS; anyone when the daemon takes every session). The body is the replica's data file;
/// the headers give its size and an XXH64 checksum of it, which the receiver checks before it keeps anything.
public enum ReplicaCopy {
    /// The path a daemon serves its replica's copy on.
    public static let path = "/replica"
    /// The header that carries the copy's checksum: `xxh64:` and 16 hexadecimal digits.
    static let checksumHeader = "Tributary-Replica-Checksum"
    /// The header that names the copied replica's id.
    static let replicaHeader = "Tributary-Replica"
    /// The file of a replica directory a copy holds (LMDB's data file; the lock file is made at open).
    static let dataFile = "data.mdb"
    /// How much of the copy is read or written at once.
    static let chunkBytes = 1 << 20

    /// What a fetch did.
    public struct Fetched: Sendable, Hashable {
        /// The size of the copy, in bytes.
        public var bytes: UInt64
        /// The id of the replica copied (a daemon of a cluster has the cluster's).
        public var replica: String
    }

    /// Fetches a copy of the replica of the daemon at `endpoint` into `directory`, which must be missing or empty.
    ///
    /// The copy is written beside it first (`DIRECTORY.copying`, replaced if a fetch that stopped left one), checked
    /// against the size and checksum the daemon gave, and only then moved into place: an interrupted or damaged
    /// transfer leaves `directory` as it was.
    ///
    /// - Parameters:
    ///   - endpoint: the daemon, as apps dial it (`ws://HOST:PORT`, or `wss://` over TLS).
    ///   - authorization: an `Authorization` header's value: `Bearer` and one of the daemon's access tokens.
    ///   - tls: how a `wss://` daemon's certificate is checked (and this side's, for mutual TLS).
    ///   - progress: called with the bytes received so far and the copy's size, at most every megabyte.
    /// - Throws: ``ReplicaCopyError`` naming what went wrong: the daemon's refusal (with its reason), a connection
    ///   that failed or ended early, a checksum that does not match, or a directory that is not empty.
    public static func fetch(
        from endpoint: SyncEndpoint, authorization: String?, tls: SyncTLS = SyncTLS(), into directory: String,
        timeout: Duration = .seconds(30), progress: @Sendable (UInt64, UInt64) -> Void = { _, _ in }
    ) async throws(ReplicaCopyError) -> Fetched {
        let files = FileManager.default
        if let existing = try? files.contentsOfDirectory(atPath: directory), !existing.isEmpty {
            throw ReplicaCopyError(
                "\(directory) is not empty: a copy of a replica goes into a new or empty directory")
        }
        let staging = directory + ".copying"
        do {
            if files.fileExists(atPath: staging) { try files.removeItem(atPath: staging) }
            try files.createDirectory(atPath: staging, withIntermediateDirectories: true)
        } catch {
            throw ReplicaCopyError("cannot prepare \(staging) for the copy: \(error)")
        }
        let fetched: Fetched
        do {
            fetched = try await receive(
                from: endpoint, authorization: authorization, tls: tls,
                into: staging + "/" + dataFile, timeout: timeout, progress: progress)
            // Into place in one step: an empty directory is replaced, a missing one created.
            if files.fileExists(atPath: directory) { try files.removeItem(atPath: directory) }
            guard rename(staging, directory) == 0 else {
                throw ReplicaCopyError(
                    "cannot move the copy from \(staging) to \(directory): \(String(cString: strerror(errno)))")
            }
        } catch let error as ReplicaCopyError {
            try? files.removeItem(atPath: staging)
            throw error
        } catch {
            try? files.removeItem(atPath: staging)
            throw ReplicaCopyError("cannot write the copy into \(directory): \(error)")
        }
        return fetched
    }

    /// Receives the copy into the file `destination`, checking its size and checksum.
    private static func receive(
        from endpoint: SyncEndpoint, authorization: String?, tls: SyncTLS, into destination: String,
        timeout: Duration, progress: @Sendable (UInt64, UInt64) -> Void
    ) async throws -> Fetched {
        let context = endpoint.secure ? try tls.clientContext() : nil
        let serverName = (try? SocketAddress(ipAddress: endpoint.host, port: 0)) == nil ? endpoint.host : nil
        let channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000))
                .connect(host: endpoint.host, port: endpoint.port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        if let context {
                            try channel.pipeline.syncOperations.addHandler(
                                try NIOSSLClientHandler(context: context, serverHostname: serverName))
                        }
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(
                            wrappingChannelSynchronously: channel)
                    }
                }
        } catch {
            throw ReplicaCopyError("cannot connect to \(endpoint) for a copy of its replica: \(error)")
        }
        guard FileManager.default.createFile(atPath: destination, contents: nil),
            let output = FileHandle(forWritingAtPath: destination)
        else {
            throw ReplicaCopyError("cannot create \(destination)")
        }
        defer { try? output.close() }
        return try await channel.executeThenClose { inbound, outbound in
            var headers = HTTPHeaders()
            headers.add(name: "Host", value: "\(endpoint.host):\(endpoint.port)")
            headers.add(name: "Content-Length", value: "0")
            if let authorization { headers.add(name: "Authorization", value: authorization) }
            try await outbound.write(
                .head(HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers)))
            try await outbound.write(.end(nil))

            var expected: (bytes: UInt64, checksum: UInt64, replica: String)?
            var refusal: (status: HTTPResponseStatus, text: [UInt8])?
            var received: UInt64 = 0
            var reported: UInt64 = 0
            var hash = XXHash64.State()
            for try await part in inbound {
                switch part {
                case .head(let head):
                    guard head.status == .ok else {
                        refusal = (head.status, [])
                        continue
                    }
                    guard let length = head.headers["Content-Length"].first.flatMap({ UInt64($0) }),
                        let checksumText = head.headers[checksumHeader].first, checksumText.hasPrefix("xxh64:"),
                        let checksum = UInt64(checksumText.dropFirst("xxh64:".count), radix: 16)
                    else {
                        throw ReplicaCopyError(
                            "\(endpoint) answered \(path) without the size and checksum of a replica copy "
                                + "(is a Tributary daemon listening there?)")
                    }
                    expected = (length, checksum, head.headers[replicaHeader].first ?? "unknown")
                    progress(0, length)
                case .body(let buffer):
                    if refusal != nil {
                        if refusal!.text.count < 4096 { refusal!.text += Array(buffer: buffer).prefix(4096) }
                        continue
                    }
                    guard let expected else { continue }
                    received += UInt64(buffer.readableBytes)
                    guard received <= expected.bytes else {
                        throw ReplicaCopyError(
                            "\(endpoint) sent more than the \(expected.bytes) bytes it announced for its replica")
                    }
                    buffer.withUnsafeReadableBytes { hash.update($0) }
                    output.write(Data(buffer.readableBytesView))
                    if received - reported >= UInt64(chunkBytes) || received == expected.bytes {
                        reported = received
                        progress(received, expected.bytes)
                    }
                case .end:
                    if let refusal {
                        let text = String(decoding: refusal.text, as: UTF8.self)
                            .trimmingCharacters(in: .whitespacesAndNewlines)
                        throw ReplicaCopyError(
                            "\(endpoint) refused a copy of its replica (\(refusal.status.code) "
                                + "\(refusal.status.reasonPhrase)): \(text)")
                    }
                    guard let expected else {
                        throw ReplicaCopyError("\(endpoint) ended its answer before any copy")
                    }
                    guard received == expected.bytes else {
                        throw ReplicaCopyError(
                            "the copy from \(endpoint) ended after \(received) of \(expected.bytes) bytes")
                    }
                    let checksum = hash.finalize()
                    guard checksum == expected.checksum else {
                        throw ReplicaCopyError(
                            "the copy from \(endpoint) is damaged: its checksum is \(hex(checksum)), the daemon's "
                                + "\(hex(expected.checksum))")
                    }
                    try output.synchronize()
                    return Fetched(bytes: received, replica: expected.replica)
                }
            }
            throw ReplicaCopyError(
                "\(endpoint) closed the connection after \(received) bytes of the copy"
                    + (expected.map { " (of \($0.bytes))" } ?? ""))
        }
    }

    static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }
}

/// A copy of a replica that could not be fetched or sent, with what went wrong.
public struct ReplicaCopyError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension SyncServer {
    /// Answers `GET /replica` (``ReplicaCopy``): authorizes the caller, takes a consistent copy of the replica beside
    /// its directory, and sends it with its size and checksum. One copy is sent at a time; another caller meanwhile
    /// is told to retry.
    func sendReplicaCopy(
        _ request: HTTPRequestHead, certified: Bool, from address: String,
        to outbound: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>
    ) async throws {
        func answer(_ status: HTTPResponseStatus, _ text: String, retryAfter: Int? = nil) async throws {
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
            headers.add(name: "Content-Length", value: "\(text.utf8.count + 1)")
            headers.add(name: "Connection", value: "close")
            if let retryAfter { headers.add(name: "Retry-After", value: "\(retryAfter)") }
            try await outbound.write(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers)))
            try await outbound.write(.body(.byteBuffer(ByteBuffer(string: text + "\n"))))
            try await outbound.write(.end(nil))
        }
        guard request.method == .GET else {
            try await answer(.methodNotAllowed, "\(ReplicaCopy.path) answers GET")
            return
        }
        if !certified {
            guard let authenticator else {
                try await answer(.serviceUnavailable, "the daemon is stopping", retryAfter: 1)
                return
            }
            switch await authenticator.authenticate(request.headers["Authorization"].first) {
            case .failure(let refusal):
                try await answer(.unauthorized, refusal.message)
                return
            case .success(let identity) where identity.user != nil:
                try await answer(
                    .forbidden,
                    "a copy of the replica holds every user's data: present one of the daemon's access tokens "
                        + "(--token), not a user's token")
                return
            case .success:
                break
            }
        }
        guard replicaCopies.begin() else {
            try await answer(
                .serviceUnavailable, "another copy of the replica is being sent: retry later", retryAfter: 5)
            return
        }
        defer { replicaCopies.end() }
        let replica = replica
        let staging = replica.directory + ".sending-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: staging) }
        let started = ContinuousClock.now
        let file = staging + "/" + ReplicaCopy.dataFile
        let measured: (bytes: UInt64, checksum: UInt64)
        do {
            measured = try await offload {
                try replica.backUp(to: staging)
                return try ReplicaCopy.measure(file)
            }
        } catch {
            configuration.logger.error("a copy of the replica for \(address) could not be taken: \(error)")
            try await answer(.internalServerError, "the daemon could not take a copy of its replica: \(error)")
            return
        }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/octet-stream")
        headers.add(name: "Content-Length", value: "\(measured.bytes)")
        headers.add(name: ReplicaCopy.checksumHeader, value: "xxh64:\(ReplicaCopy.hex(measured.checksum))")
        headers.add(name: ReplicaCopy.replicaHeader, value: "\(replica.replicaID)")
        headers.add(name: "Connection", value: "close")
        try await outbound.write(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers)))
        guard let handle = FileHandle(forReadingAtPath: file) else {
            throw ReplicaCopyError("cannot read the copy at \(file)")
        }
        defer { try? handle.close() }
        while true {
            let chunk = try handle.read(upToCount: ReplicaCopy.chunkBytes) ?? Data()
            if chunk.isEmpty { break }
            try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: chunk))))
        }
        try await outbound.write(.end(nil))
        let took = started.duration(to: .now)
        configuration.logger.notice(
            "sent a copy of the replica to \(address): \(measured.bytes) bytes in \(took.components.seconds) s")
    }
}

extension ReplicaCopy {
    /// The size and XXH64 checksum of the file at `path`, read once.
    static func measure(_ path: String) throws -> (bytes: UInt64, checksum: UInt64) {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw ReplicaCopyError("cannot read the copy at \(path)")
        }
        defer { try? handle.close() }
        var hash = XXHash64.State()
        var bytes: UInt64 = 0
        while let chunk = try handle.read(upToCount: chunkBytes), !chunk.isEmpty {
            bytes += UInt64(chunk.count)
            chunk.withUnsafeBytes { hash.update($0) }
        }
        return (bytes, hash.finalize())
    }
}

/// Whether a copy of the replica is being sent: one at a time.
final class ReplicaCopies: Sendable {
    private let sending = Atomic<Bool>(false)

    /// Whether this caller may send one now (none is being sent).
    func begin() -> Bool {
        sending.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
    }

    func end() { sending.store(false, ordering: .releasing) }
}
