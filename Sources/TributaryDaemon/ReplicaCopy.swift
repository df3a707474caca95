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
    /// Where in the target directory a copy is written until it is checked.
    static let stagingName = ".copying"
    /// What may be in a directory a copy goes into: a file system's own, and what a fetch that stopped left.
    static let ignoredEntries: Set<String> = ["lost+found", stagingName]
    /// How much of the copy is read or written at once.
    static let chunkBytes = 1 << 20

    /// What a fetch did.
    public struct Fetched: Sendable, Hashable {
        /// The size of the copy, in bytes.
        public var bytes: UInt64
        /// The id of the replica copied (a daemon of a cluster has the cluster's).
        public var replica: String
    }

    /// How long a fetch waits.
    public struct Timeouts: Sendable, Hashable {
        /// For the connection to open.
        public var connect: Duration = .seconds(30)
        /// For the answer to begin: the daemon takes the whole copy before it answers (minutes for a large replica).
        public var firstByte: Duration = .seconds(1_800)
        /// Between two pieces of the copy once it flows.
        public var idle: Duration = .seconds(60)

        public init() {}
    }

    /// Fetches a copy of the replica of the daemon at `endpoint` into `directory`, which must be missing or empty.
    ///
    /// The copy is written into `directory/.copying` first (replaced if a fetch that stopped left one), checked
    /// against the size and checksum the daemon gave, and only then moved into place: an interrupted or damaged
    /// transfer leaves no replica in `directory`.
    ///
    /// - Parameters:
    ///   - endpoint: the daemon, as apps dial it (`ws://HOST:PORT`, or `wss://` over TLS).
    ///   - authorization: an `Authorization` header's value: `Bearer` and one of the daemon's access tokens.
    ///   - tls: how a `wss://` daemon's certificate is checked (and this side's, for mutual TLS).
    ///   - expectedReplica: the replica id the copy must have (a cluster's); another is refused before anything is
    ///     written.
    ///   - progress: called with the bytes received so far and the copy's size, at most every megabyte.
    /// - Throws: ``ReplicaCopyError`` naming what went wrong: the daemon's refusal (with its reason), a connection
    ///   that failed, stalled or ended early, a checksum that does not match, another replica, or a directory that
    ///   is not empty.
    public static func fetch(
        from endpoint: SyncEndpoint, authorization: String?, tls: SyncTLS = SyncTLS(), into directory: String,
        expectedReplica: String? = nil, timeouts: Timeouts = Timeouts(),
        progress: @Sendable (UInt64, UInt64) -> Void = { _, _ in }
    ) async throws(ReplicaCopyError) -> Fetched {
        let files = FileManager.default
        var target = directory
        while target.count > 1, target.hasSuffix("/") { target.removeLast() }
        var isDirectory: ObjCBool = false
        let existed = files.fileExists(atPath: target, isDirectory: &isDirectory)
        if existed {
            guard isDirectory.boolValue else {
                throw ReplicaCopyError("\(target) is a file: a copy of a replica goes into a new or empty directory")
            }
            let existing: [String]
            do {
                existing = try files.contentsOfDirectory(atPath: target)
            } catch {
                throw ReplicaCopyError("cannot read \(target): \(error)")
            }
            let kept = existing.filter { !ignoredEntries.contains($0) }
            guard kept.isEmpty else {
                throw ReplicaCopyError(
                    "\(target) is not empty (it holds \(kept.sorted().prefix(3).joined(separator: ", "))): a copy of a "
                        + "replica goes into a new or empty directory")
            }
        }
        let staging = target + "/" + stagingName
        do {
            if files.fileExists(atPath: staging) { try files.removeItem(atPath: staging) }
            try files.createDirectory(atPath: staging, withIntermediateDirectories: true)
        } catch {
            throw ReplicaCopyError("cannot prepare \(staging) for the copy: \(error)")
        }
        var kept = false
        defer {
            try? files.removeItem(atPath: staging)
            // A directory made for a copy that failed goes too.
            if !kept, !existed { try? files.removeItem(atPath: target) }
        }
        let fetched = try await receive(
            from: endpoint, authorization: authorization, tls: tls, into: staging + "/" + dataFile,
            expectedReplica: expectedReplica, timeouts: timeouts, progress: progress)
        // Into place in one step, on the same file system.
        guard rename(staging + "/" + dataFile, target + "/" + dataFile) == 0 else {
            throw ReplicaCopyError("cannot move the copy into \(target): \(String(cString: strerror(errno)))")
        }
        kept = true
        return fetched
    }

    /// Receives the copy into the file `destination`, checking its size and checksum.
    private static func receive(
        from endpoint: SyncEndpoint, authorization: String?, tls: SyncTLS, into destination: String,
        expectedReplica: String?, timeouts: Timeouts, progress: @Sendable (UInt64, UInt64) -> Void
    ) async throws(ReplicaCopyError) -> Fetched {
        guard FileManager.default.createFile(atPath: destination, contents: nil),
            let output = FileHandle(forWritingAtPath: destination)
        else {
            throw ReplicaCopyError("cannot create \(destination)")
        }
        defer { try? output.close() }
        let channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>
        do {
            let context = endpoint.secure ? try tls.clientContext() : nil
            let serverName = (try? SocketAddress(ipAddress: endpoint.host, port: 0)) == nil ? endpoint.host : nil
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(TimeAmount(timeouts.connect))
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
        let watch = StallWatch(channel.channel, first: timeouts.firstByte, idle: timeouts.idle)
        defer { watch.stop() }
        let transfer = Transfer()
        do {
            return try await channel.executeThenClose { inbound, outbound in
                try await receive(
                    inbound, outbound, from: endpoint, authorization: authorization, into: output,
                    expectedReplica: expectedReplica, watch: watch, transfer: transfer, progress: progress)
            }
        } catch let error as ReplicaCopyError {
            throw error
        } catch {
            let (received, total) = transfer.figures
            let stalled = watch.stalled.map { ": nothing arrived for \($0.components.seconds) s" } ?? ""
            throw ReplicaCopyError(
                "the copy from \(endpoint) failed after \(received)"
                    + (total.map { " of \($0)" } ?? "") + " bytes\(stalled) (\(error))")
        }
    }

    /// What arrived so far, for the error of a transfer that broke.
    private final class Transfer: Sendable {
        private let state = Mutex<(received: UInt64, total: UInt64?)>((0, nil))
        var figures: (UInt64, UInt64?) { state.withLock { ($0.received, $0.total) } }
        func update(received: UInt64, total: UInt64?) { state.withLock { $0 = (received, total) } }
    }

    private static func receive(
        _ inbound: NIOAsyncChannelInboundStream<HTTPClientResponsePart>,
        _ outbound: NIOAsyncChannelOutboundWriter<HTTPClientRequestPart>, from endpoint: SyncEndpoint,
        authorization: String?, into output: FileHandle, expectedReplica: String?, watch: StallWatch,
        transfer: Transfer, progress: @Sendable (UInt64, UInt64) -> Void
    ) async throws -> Fetched {
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: "\(endpoint.host):\(endpoint.port)")
        headers.add(name: "Content-Length", value: "0")
        if let authorization { headers.add(name: "Authorization", value: authorization) }
        // The answer is read even if the request's write reports the connection closed: a daemon that answers and
        // closes at once may do so before that write's completion comes back.
        var requestFailure: (any Error)?
        do {
            try await outbound.write(
                .head(HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers)))
            try await outbound.write(.end(nil))
        } catch {
            requestFailure = error
        }

        var expected: (bytes: UInt64, checksum: UInt64, replica: String)?
        var refusal: (status: HTTPResponseStatus, text: [UInt8])?
        var received: UInt64 = 0
        var reported: UInt64 = 0
        var hash = XXHash64.State()
        var pending: [UInt8] = []
        pending.reserveCapacity(chunkBytes)
        func flush() async throws {
            guard !pending.isEmpty else { return }
            let bytes = pending
            pending.removeAll(keepingCapacity: true)
            try await offload { try output.write(contentsOf: bytes) }
        }
        for try await part in inbound {
            watch.note()
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
                        "\(endpoint) answered \(path) without the size and checksum of a replica copy (is a Tributary "
                            + "daemon listening there?)")
                }
                let replica = head.headers[replicaHeader].first ?? "unknown"
                if let expectedReplica, replica != expectedReplica {
                    throw ReplicaCopyError(
                        "\(endpoint) serves replica \(replica), not \(expectedReplica): it is a daemon of another "
                            + "cluster's log or epoch")
                }
                expected = (length, checksum, replica)
                transfer.update(received: 0, total: length)
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
                pending.append(contentsOf: buffer.readableBytesView)
                if pending.count >= chunkBytes { try await flush() }
                transfer.update(received: received, total: expected.bytes)
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
                guard let expected else { throw ReplicaCopyError("\(endpoint) ended its answer before any copy") }
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
                try await flush()
                try await offload { try output.synchronize() }
                return Fetched(bytes: received, replica: expected.replica)
            }
        }
        if let requestFailure, expected == nil, refusal == nil { throw requestFailure }
        throw ReplicaCopyError(
            "\(endpoint) closed the connection after \(received) bytes of the copy"
                + (expected.map { " (of \($0.bytes))" } ?? "")
                + (watch.stalled.map { ": nothing arrived for \($0.components.seconds) s" } ?? ""))
    }

    package static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: max(0, 16 - digits.count)) + digits
    }
}

/// Closes a connection on which nothing moved for a while (`first` until the first progress, then `idle`): a copy
/// whose other side stopped reading or sending does not hold on for ever.
final class StallWatch: Sendable {
    private final class Progress: Sendable {
        let state = Mutex<(last: ContinuousClock.Instant, began: Bool, stalled: Duration?)>((.now, false, nil))
    }
    private let progress: Progress
    private let task: Task<Void, Never>

    init(_ channel: any Channel, first: Duration, idle: Duration) {
        let progress = Progress()
        self.progress = progress
        task = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(min(1_000, Int64(idle.components.seconds) * 250 + 10)))
                let closing = progress.state.withLock { state -> Bool in
                    let quiet = state.last.duration(to: .now)
                    guard quiet > (state.began ? idle : first) else { return false }
                    state.stalled = quiet
                    return true
                }
                if closing {
                    channel.close(promise: nil)
                    return
                }
            }
        }
    }

    /// Something moved.
    func note() { progress.state.withLock { $0 = (.now, true, $0.stalled) } }

    /// How long nothing had moved when the connection was closed for it; `nil` if it was not.
    var stalled: Duration? { progress.state.withLock { $0.stalled } }

    func stop() { task.cancel() }
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
    /// is told to retry. A caller that stops reading for ``Configuration/sendDeadline`` is disconnected.
    func sendReplicaCopy(
        _ request: HTTPRequestHead, certified: Bool, on channel: any Channel, from address: String,
        to outbound: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>
    ) async throws {
        func answer(_ status: HTTPResponseStatus, _ text: String, retryAfter: Int? = nil) async throws {
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
            headers.add(name: "Content-Length", value: "\(text.utf8.count + 1)")
            headers.add(name: "Connection", value: "close")
            if status == .methodNotAllowed { headers.add(name: "Allow", value: "GET") }
            if let retryAfter { headers.add(name: "Retry-After", value: "\(retryAfter)") }
            try await outbound.write(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers)))
            if request.method != .HEAD { try await outbound.write(.body(.byteBuffer(ByteBuffer(string: text + "\n")))) }
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
            case .success(let identity) where !identity.roles.contains(.peer):
                // A user's token, or an access token where tokens open app sessions only (peers present
                // certificates): a copy holds every user's data, so it goes to what may open a peer session.
                try await answer(
                    .forbidden,
                    "a copy of the replica holds every user's data: it is sent to peer daemons only, which present "
                        + (authenticator.peersByCertificate
                            ? "a client certificate of the peer authority (--peer-ca)"
                            : "one of the daemon's access tokens (--token), not a user's token"))
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
        // One name: one copy is sent at a time, and one a stopped daemon left is replaced.
        let staging = replica.directory + ".sending"
        defer { try? FileManager.default.removeItem(atPath: staging) }
        let started = ContinuousClock.now
        let file = staging + "/" + ReplicaCopy.dataFile
        let copy: (bytes: UInt64, checksum: UInt64, handle: FileHandle)
        do {
            copy = try await offload {
                if FileManager.default.fileExists(atPath: staging) {
                    try FileManager.default.removeItem(atPath: staging)
                }
                try replica.backUp(to: staging)
                let (bytes, checksum) = try ReplicaCopy.measure(file)
                guard let handle = FileHandle(forReadingAtPath: file) else {
                    throw ReplicaCopyError("cannot read the copy at \(file)")
                }
                return (bytes, checksum, handle)
            }
        } catch {
            configuration.logger.error("a copy of the replica for \(address) could not be taken: \(error)")
            try await answer(.internalServerError, "the daemon could not take a copy of its replica: \(error)")
            return
        }
        defer { try? copy.handle.close() }
        let watch = StallWatch(channel, first: configuration.sendDeadline, idle: configuration.sendDeadline)
        defer { watch.stop() }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/octet-stream")
        headers.add(name: "Content-Length", value: "\(copy.bytes)")
        headers.add(name: ReplicaCopy.checksumHeader, value: "xxh64:\(ReplicaCopy.hex(copy.checksum))")
        headers.add(name: ReplicaCopy.replicaHeader, value: "\(replica.replicaID)")
        headers.add(name: "Connection", value: "close")
        do {
            try await outbound.write(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers)))
            let handle = copy.handle
            while true {
                let chunk = try await offload { try handle.read(upToCount: ReplicaCopy.chunkBytes) ?? Data() }
                if chunk.isEmpty { break }
                try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: chunk))))
                watch.note()
            }
            try await outbound.write(.end(nil))
        } catch {
            let stalled = watch.stalled.map { ": it read nothing for \($0.components.seconds) s" } ?? ""
            configuration.logger.warning("the copy of the replica for \(address) was cut off\(stalled) (\(error))")
            throw error
        }
        let took = started.duration(to: .now)
        configuration.logger.notice(
            "sent a copy of the replica to \(address): \(copy.bytes) bytes in \(took.components.seconds) s")
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
