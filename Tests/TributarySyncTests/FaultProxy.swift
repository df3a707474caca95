import Foundation
import Synchronization
import TributaryModel

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A TCP proxy that listens on 127.0.0.1 and forwards each connection to a port on 127.0.0.1, and that damages the
/// traffic when told to: it cuts connections (closing both sides), holds their bytes for a while, partitions (refuses
/// new connections and cuts the open ones, or forwards nothing at all until healed), and corrupts the byte stream
/// by sending a chunk's tail twice or a chunk's two halves swapped.
///
/// Each connection is served by a thread of its own with non-blocking sockets and `poll` (10 ms), so nothing waits on
/// a peer that stopped reading (a process under SIGSTOP); ``stop()`` ends every thread. Decisions that need chance
/// (which connection is corrupted, where a chunk is split) come from a seeded generator.
final class FaultProxy: Sendable {
    /// How a chunk of the byte stream is damaged.
    enum Corruption: String, Sendable, CaseIterable {
        /// The chunk, then the whole of it or its tail (from a random offset) once more.
        case duplicate
        /// The chunk after the next one (when another comes within 1 s), or the chunk's second part before its
        /// first: bytes out of order.
        case reorder
    }

    /// What a partition does to connections.
    enum Partition: String, Sendable, CaseIterable {
        /// Open connections are cut; new ones are accepted and closed at once.
        case refuse
        /// Nothing is forwarded, in either direction, on open connections or new ones, until ``heal()``.
        case blackhole
    }

    /// What the proxy did, for the drill's figures.
    struct Counts: Sendable {
        var accepted = 0
        var refused = 0
        var corrupted = 0
        var bytes = 0
    }

    let name: String
    /// The port the proxy listens on.
    let port: Int
    /// The port it forwards to.
    let upstreamPort: Int
    private let listener: Int32
    private let state: Mutex<State>
    private let threads = Mutex(0)

    private struct State {
        var stopped = false
        var partition: Partition?
        var connections: [Connection] = []
        var random: SplitMix64
        var counts = Counts()
    }

    /// Listens on a free port of 127.0.0.1, forwarding to `upstreamPort` there.
    init(_ name: String, upstreamPort: Int, seed: UInt64) throws {
        self.name = name
        self.upstreamPort = upstreamPort
        let fd = try Socket.listening()
        listener = fd
        port = try Socket.localPort(fd)
        state = Mutex(State(random: SplitMix64(seed: seed)))
        threads.withLock { $0 += 1 }
        let thread = Thread { [self] in
            acceptLoop()
            threads.withLock { $0 -= 1 }
        }
        thread.start()
    }

    var counts: Counts { state.withLock { $0.counts } }

    // MARK: Faults

    /// Closes every open connection, both sides. Returns how many.
    @discardableResult
    func cut() -> Int {
        live().reduce(0) { count, connection in
            connection.control.withLock { $0.cut = true }
            return count + 1
        }
    }

    /// Holds the bytes of every open connection, both directions, for `duration` from now (bytes keep their order).
    @discardableResult
    func delay(_ duration: Duration) -> Int {
        let until = ContinuousClock.now + duration
        return live().reduce(0) { count, connection in
            connection.control.withLock { $0.holdUntil = until }
            return count + 1
        }
    }

    /// Starts a partition, which lasts until ``heal()``.
    func partition(_ mode: Partition) {
        state.withLock { $0.partition = mode }
        for connection in live() {
            connection.control.withLock { control in
                switch mode {
                case .refuse: control.cut = true
                case .blackhole: control.blackholed = true
                }
            }
        }
    }

    /// Ends a partition: new connections are forwarded, and blackholed ones flow again.
    func heal() {
        state.withLock { $0.partition = nil }
        for connection in live() { connection.control.withLock { $0.blackholed = false } }
    }

    /// Arms `corruption` on one direction of one open connection, chosen at random: the next chunk of at least two
    /// bytes read in that direction is damaged. Returns `false` when no connection is open.
    @discardableResult
    func corrupt(_ corruption: Corruption) -> Bool {
        let connections = live()
        guard !connections.isEmpty else { return false }
        let (index, direction, seed) = state.withLock { state in
            (
                Int(state.random.next() % UInt64(connections.count)), Int(state.random.next() % 2),
                state.random.next()
            )
        }
        connections[index].control.withLock { control in
            control.armed[direction] = corruption
            control.seed = seed
        }
        return true
    }

    /// Closes every connection and the listening socket, and waits (up to 10 s) for the proxy's threads to end.
    func stop() {
        state.withLock { $0.stopped = true }
        cut()
        let deadline = ContinuousClock.now + .seconds(10)
        while threads.withLock({ $0 }) > 0 && ContinuousClock.now < deadline { usleep(5_000) }
    }

    private func live() -> [Connection] {
        state.withLock { state in
            state.connections.removeAll { $0.control.withLock(\.finished) }
            return state.connections
        }
    }

    // MARK: Forwarding

    private func acceptLoop() {
        defer { close(listener) }
        while !state.withLock(\.stopped) {
            var descriptor = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 50) > 0 else { continue }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { continue }
            let partition = state.withLock { state in
                if state.partition == .refuse { state.counts.refused += 1 } else { state.counts.accepted += 1 }
                return state.partition
            }
            // Refused, or the upstream is down (then the client sees its connection closed, as it would see a
            // refused one).
            guard partition != .refuse, let upstream = Socket.dial(port: upstreamPort, timeout: 2) else {
                close(client)
                continue
            }
            Socket.prepare(client)
            Socket.prepare(upstream)
            let connection = Connection()
            if partition == .blackhole { connection.control.withLock { $0.blackholed = true } }
            let added = state.withLock { state in
                guard !state.stopped else { return false }
                state.connections.append(connection)
                return true
            }
            guard added else {
                close(client)
                close(upstream)
                continue
            }
            threads.withLock { $0 += 1 }
            let thread = Thread { [self] in
                forward(client, upstream, connection)
                connection.control.withLock { $0.finished = true }
                threads.withLock { $0 -= 1 }
            }
            thread.start()
        }
    }

    /// Moves bytes between `client` and `upstream` until either closes (or fails), the connection is cut, or the
    /// proxy stops; then closes both. Direction 0 is client to upstream, 1 upstream to client.
    private func forward(_ client: Int32, _ upstream: Int32, _ connection: Connection) {
        defer {
            close(client)
            close(upstream)
        }
        let ends = [client, upstream]
        var pending = [Outbound(), Outbound()]
        // A chunk held back to be sent after the next one, per direction.
        var heldBack: [(chunk: [UInt8], since: ContinuousClock.Instant)?] = [nil, nil]
        var ended = [false, false]
        var endedAt: ContinuousClock.Instant?
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let control = connection.control.withLock { $0 }
            if control.cut || state.withLock(\.stopped) { return }
            let now = ContinuousClock.now
            let held = control.blackholed || control.holdUntil.map { now < $0 } ?? false
            // A connection one side closed ends once what it sent has been passed on (or 5 s later).
            if let endedAt {
                let flushed = (0..<2).allSatisfy { !ended[$0] || pending[$0].isEmpty }
                if flushed || now - endedAt > .seconds(5) { return }
            }
            var descriptors = [pollfd(fd: client, events: 0, revents: 0), pollfd(fd: upstream, events: 0, revents: 0)]
            for direction in 0..<2 {
                let source = direction
                let destination = 1 - direction
                if !ended[direction] && !control.blackholed && pending[direction].count < 4 << 20 {
                    descriptors[source].events |= Int16(POLLIN)
                }
                if !pending[direction].isEmpty && !held { descriptors[destination].events |= Int16(POLLOUT) }
            }
            guard poll(&descriptors, 2, 10) >= 0 || errno == EINTR else { return }
            for direction in 0..<2 {
                let source = direction
                let readable = descriptors[source].revents & Int16(POLLIN | POLLHUP | POLLERR) != 0
                guard descriptors[source].events & Int16(POLLIN) != 0, readable else { continue }
                let count = read(ends[source], &buffer, buffer.count)
                if count > 0 {
                    var chunk = Array(buffer[0..<count])
                    state.withLock { $0.counts.bytes += count }
                    if let corruption = control.armed[direction], count >= 2 {
                        connection.control.withLock { $0.armed[direction] = nil }
                        state.withLock { $0.counts.corrupted += 1 }
                        var random = SplitMix64(seed: control.seed)
                        if corruption == .reorder && random.next() % 2 == 0 && heldBack[direction] == nil {
                            heldBack[direction] = (chunk, now)
                            continue
                        }
                        chunk = Self.damage(chunk, corruption, seed: random.next())
                    }
                    pending[direction].append(chunk)
                    if let held = heldBack[direction] {
                        pending[direction].append(held.chunk)
                        heldBack[direction] = nil
                    }
                } else if count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                    ended[direction] = true
                    if endedAt == nil { endedAt = now }
                }
            }
            // A chunk held back that no other followed goes on in order.
            for direction in 0..<2 {
                if let back = heldBack[direction], now - back.since > .seconds(1) || ended[direction] {
                    pending[direction].append(back.chunk)
                    heldBack[direction] = nil
                }
            }
            for direction in 0..<2 where !pending[direction].isEmpty && !held {
                let destination = 1 - direction
                guard descriptors[destination].revents & Int16(POLLOUT | POLLHUP | POLLERR) != 0 else { continue }
                let written = pending[direction].withBytes { bytes in
                    Socket.write(ends[destination], bytes)
                }
                if written > 0 {
                    pending[direction].consume(written)
                } else if written < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
                    return
                }
            }
        }
    }

    /// `chunk` damaged by `corruption`, at an offset drawn from `seed`.
    static func damage(_ chunk: [UInt8], _ corruption: Corruption, seed: UInt64) -> [UInt8] {
        var random = SplitMix64(seed: seed)
        let whole = random.next() % 2 == 0
        let split = 1 + Int(random.next() % UInt64(chunk.count - 1))
        switch corruption {
        case .duplicate: return chunk + chunk[(whole ? 0 : split)...]
        case .reorder: return Array(chunk[split...] + chunk[..<split])
        }
    }

    /// One proxied connection's instructions from the drill, and whether its thread has ended.
    final class Connection: Sendable {
        struct Control: Sendable {
            var cut = false
            var blackholed = false
            var holdUntil: ContinuousClock.Instant?
            /// The corruption armed per direction (0: client to upstream, 1: upstream to client).
            var armed: [Corruption?] = [nil, nil]
            var seed: UInt64 = 0
            var finished = false
        }
        let control = Mutex(Control())
    }

    /// Bytes waiting to be written, in order.
    private struct Outbound {
        private var bytes: [UInt8] = []
        private var start = 0

        var isEmpty: Bool { start == bytes.count }
        var count: Int { bytes.count - start }

        mutating func append(_ chunk: [UInt8]) {
            if start > 0 && start == bytes.count {
                bytes.removeAll(keepingCapacity: true)
                start = 0
            }
            bytes += chunk
        }

        mutating func consume(_ count: Int) {
            start += count
            if start > 1 << 20 {
                bytes.removeFirst(start)
                start = 0
            }
        }

        func withBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
            bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[start...])) }
        }
    }
}

/// The few socket calls the proxy makes, on 127.0.0.1 only.
private enum Socket {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    #if canImport(Darwin)
        static let stream = SOCK_STREAM
    #else
        static let stream = Int32(SOCK_STREAM.rawValue)
    #endif

    static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = in_addr_t(UInt32(0x7F00_0001).bigEndian)
        return address
    }

    /// A socket listening on 127.0.0.1, on a free port.
    static func listening() throws -> Int32 {
        let fd = socket(AF_INET, stream, 0)
        guard fd >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        var address = loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 128) == 0 else {
            let failure = Failure(description: "bind or listen on 127.0.0.1: errno \(errno)")
            close(fd)
            throw failure
        }
        return fd
    }

    static func localPort(_ fd: Int32) throws -> Int {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let result = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0 else { throw Failure(description: "getsockname: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    /// A connection to 127.0.0.1:`port`, or `nil` if none is made within `timeout` seconds.
    static func dial(port: Int, timeout: Int32) -> Int32? {
        let fd = socket(AF_INET, stream, 0)
        guard fd >= 0 else { return nil }
        setNonBlocking(fd)
        var address = loopback(port: port)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if result != 0 {
            var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            guard errno == EINPROGRESS, poll(&descriptor, 1, timeout * 1000) == 1,
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0, error == 0
            else {
                close(fd)
                return nil
            }
        }
        return fd
    }

    static func setNonBlocking(_ fd: Int32) {
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }

    /// Non-blocking, no Nagle delay.
    static func prepare(_ fd: Int32) {
        setNonBlocking(fd)
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// `send` without SIGPIPE on a closed peer.
    static func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Int {
        #if canImport(Darwin)
            return send(fd, bytes.baseAddress, bytes.count, 0)
        #else
            return send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
        #endif
    }
}
