import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A PostgreSQL server of a test's own: `initdb` in a temporary directory, started on a free loopback port, and
/// stopped (its directory removed) by ``stop()``. Runs Debian's `postgresql-15` binaries (or those
/// `TRIBUTARY_POSTGRES_BIN` names), as the `postgres` user when the tests run as root, since PostgreSQL refuses to.
package final class PostgresServer: Sendable {
    /// Where `initdb`, `pg_ctl` and `psql` are, or `nil` when PostgreSQL is not installed.
    package static let binaries: String? = {
        let manager = FileManager.default
        var candidates: [String] = []
        if let configured = ProcessInfo.processInfo.environment["TRIBUTARY_POSTGRES_BIN"] {
            candidates.append(configured)
        }
        let versions = (try? manager.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        candidates += versions.sorted(by: >).map { "/usr/lib/postgresql/\($0)/bin" }
        candidates += ["/usr/local/bin", "/usr/bin"]
        return candidates.first { directory in
            ["initdb", "pg_ctl", "postgres"].allSatisfy { manager.isExecutableFile(atPath: "\(directory)/\($0)") }
        }
    }()

    /// Whether a server can be started here.
    package static let isAvailable: Bool = binaries != nil && (geteuid() != 0 || getpwnam("postgres") != nil)

    /// Why the PostgreSQL tests are skipped where they are.
    package static let unavailable =
        "PostgreSQL is not installed here (apt-get install -y postgresql-15), or the tests run as root and there is "
        + "no postgres user to run it as"

    package let directory: String
    package let port: Int

    package var dataDirectory: String { directory + "/data" }
    /// The URL of the server's `postgres` database, as the `tributary` user (trusted on loopback).
    package var url: String { "postgres://tributary@127.0.0.1:\(port)/postgres" }

    private init(directory: String, port: Int) {
        self.directory = directory
        self.port = port
    }

    /// A directory of a server's own, which the server's user owns, and a free port.
    private static func makeServer() throws -> PostgresServer {
        var template = Array("/tmp/tributary-pg-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw Failure("cannot make a temporary directory") }
        let directory = String(cString: made)
        chmod(directory, 0o755)
        if geteuid() == 0, let user = getpwnam("postgres") {
            chown(directory, user.pointee.pw_uid, user.pointee.pw_gid)
        }
        return PostgresServer(directory: directory, port: try freePort())
    }

    /// A standby of this server (which must be running): a base backup streamed from it into a directory of its
    /// own, started on a port of its own, replicating from this server. Make it synchronous with
    /// ``requireSynchronousStandby()``.
    package func startStandby() async throws -> PostgresServer {
        guard let binaries = Self.binaries else { throw Failure(Self.unavailable) }
        let standby = try Self.makeServer()
        do {
            try await standby.run(
                "\(binaries)/pg_basebackup",
                [
                    "-D", standby.dataDirectory, "-h", "127.0.0.1", "-p", "\(port)", "-U", "tributary", "-R", "-X",
                    "stream", "--no-sync",
                ], asServer: true)
            try await standby.startServer()
            return standby
        } catch {
            try? FileManager.default.removeItem(atPath: standby.directory)
            throw error
        }
    }

    /// Makes every commit wait until a standby has it (`synchronous_standby_names = '*'`, reloaded now).
    package func requireSynchronousStandby() async throws {
        try await sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        try await sql("SELECT pg_reload_conf()")
    }

    /// Promotes this standby to a primary, and waits until it takes writes.
    package func promote() async throws {
        guard let binaries = Self.binaries else { throw Failure(Self.unavailable) }
        try await run("\(binaries)/pg_ctl", ["-D", dataDirectory, "-w", "-t", "60", "promote"], asServer: true)
    }

    /// A new server, initialized and started.
    package static func start() async throws -> PostgresServer {
        guard let binaries else { throw Failure(unavailable) }
        let server = try makeServer()
        let directory = server.directory
        do {
            try await server.run(
                "\(binaries)/initdb",
                [
                    "-D", server.dataDirectory, "-U", "tributary", "-A", "trust", "-E", "UTF8",
                    "--no-sync", "--no-instructions",
                ], asServer: true)
            try await server.startServer()
            return server
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    /// Starts the server again after ``kill()`` or a stop that kept the directory.
    package func startServer() async throws {
        guard let binaries = Self.binaries else { throw Failure(Self.unavailable) }
        do {
            try await startServer(binaries)
        } catch {
            let log = (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? ""
            throw Failure("\(error)\nserver log:\n\(log.suffix(2_000))")
        }
    }

    private func startServer(_ binaries: String) async throws {
        try await run(
            "\(binaries)/pg_ctl",
            [
                "-D", dataDirectory, "-l", directory + "/server.log", "-w", "-t", "60", "-o",
                "-p \(port) -c listen_addresses=127.0.0.1 -c unix_socket_directories=\(directory)", "start",
            ],
            asServer: true)
    }

    /// Stops the server at once, as a crash would (`pg_ctl -m immediate`); the directory stays.
    package func kill() {
        guard let binaries = Self.binaries else { return }
        _ = try? runBlocking(
            "\(binaries)/pg_ctl", ["-D", dataDirectory, "-m", "immediate", "-w", "stop"], asServer: true)
    }

    /// Stops the server and removes its directory.
    package func stop() {
        if let binaries = Self.binaries {
            _ = try? runBlocking(
                "\(binaries)/pg_ctl", ["-D", dataDirectory, "-m", "fast", "-w", "stop"], asServer: true)
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Runs one SQL statement through `psql` and returns what it printed (unaligned, tuples only).
    @discardableResult
    package func sql(_ statement: String) async throws -> String {
        guard let binaries = Self.binaries else { throw Failure(Self.unavailable) }
        let psql = FileManager.default.isExecutableFile(atPath: "\(binaries)/psql") ? "\(binaries)/psql" : "psql"
        return try await run(
            psql,
            [
                "-h", "127.0.0.1", "-p", "\(port)", "-U", "tributary", "-d", "postgres", "-At", "-v",
                "ON_ERROR_STOP=1", "-c", statement,
            ], asServer: false)
    }

    /// Runs a command to its end, its output in a file, and returns the output. Spawned and waited for with
    /// `posix_spawn` and `waitpid`, with no descriptor of the test process but its output file: the server
    /// `pg_ctl start` leaves running would hold a pipe open, or another test's socket.
    @discardableResult
    private func run(_ executable: String, _ arguments: [String], asServer: Bool) async throws -> String {
        // Waiting for a command (initdb, pg_basebackup, pg_ctl -w) takes seconds: on a thread of its own, not one of
        // the few the tests' tasks share, which every other test would wait for meanwhile.
        try await withCheckedThrowingContinuation { continuation in
            Self.commands.async {
                continuation.resume(with: Result { try self.runBlocking(executable, arguments, asServer: asServer) })
            }
        }
    }

    /// Where commands are waited for.
    private static let commands = DispatchQueue(label: "tributary.tests.postgres", attributes: .concurrent)

    /// ``run(_:_:asServer:)``, waiting on the caller's thread: for ``stop()`` and ``kill()``, which `defer` calls.
    @discardableResult
    private func runBlocking(_ executable: String, _ arguments: [String], asServer: Bool) throws -> String {
        var command = [executable] + arguments
        if asServer && geteuid() == 0 { command = ["/usr/sbin/runuser", "-u", "postgres", "--"] + command }
        let outputPath = directory + "/command-\(UUID().uuidString).out"
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Nothing else of the test process: a server that inherited another test's listening socket would keep its
        // port taken after that test closed it.
        guard let closeFrom = Self.addCloseFrom else {
            throw Failure("glibc lacks posix_spawn_file_actions_addclosefrom_np")
        }
        _ = closeFrom(&actions, 3)
        var argv: [UnsafeMutablePointer<CChar>?] = command.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, command[0], &actions, nil, &argv, environ)
        guard spawned == 0 else { throw Failure("cannot run \(command[0]): error \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        let exited = status & 0x7f == 0
        let code = (status >> 8) & 0xff
        guard exited && code == 0 else {
            let name = (executable as NSString).lastPathComponent
            throw Failure("\(name) failed (\(exited ? "exit \(code)" : "signal \(status & 0x7f)")): \(text)")
        }
        return text
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which Swift's Glibc module does not show.
    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private static let addCloseFrom: AddCloseFrom? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np")
        else { return nil }
        return unsafeBitCast(symbol, to: AddCloseFrom.self)
    }()

    /// A port on 127.0.0.1 that nothing uses now, below Linux's ephemeral range (32768 and up): a port the kernel
    /// gives to outgoing connections and `bind(0)` could be taken by another test between this check and the
    /// server's start, and a daemon another test restarts on its old port could find it taken by the server.
    private static func freePort() throws -> Int {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let port = Int.random(in: 20_000..<32_000, using: &generator)
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard descriptor >= 0 else { throw Failure("socket() failed") }
            defer { close(descriptor) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            let bound = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
            if bound { return port }
        }
        throw Failure("no free port on 127.0.0.1 between 20000 and 32000")
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        package init(_ description: String) { self.description = description }
    }
}
