import Foundation
import Logging
import Synchronization
import Testing
import TributaryCluster
import TributaryModel
import TributaryTestSupport

/// The shared log against a real PostgreSQL of each test's own, on loopback.
@Suite(
    "The shared log on PostgreSQL", .serialized,
    .enabled(if: PostgresServer.isAvailable, Comment(rawValue: PostgresServer.unavailable)))
struct SharedLogTests {
    static func withServer<Result>(_ body: (PostgresServer) async throws -> Result) async throws -> Result {
        let server = try await PostgresServer.start()
        defer { server.stop() }
        return try await body(server)
    }

    static func open(_ server: PostgresServer, log: String = "chat", timeout: Duration = .seconds(120))
        async throws -> SharedLog
    {
        var configuration = try SharedLog.Configuration(url: server.url, log: log)
        configuration.timeout = timeout
        return try await SharedLog.open(configuration, logger: quiet)
    }

    // Timeouts are long: the whole suite runs at once on 2 cores, and a test may wait many seconds for a thread.

    /// PostgreSQL's client logs every failed connection attempt; the tests check the errors instead.
    static let quiet: Logger = {
        var logger = Logger(label: "tributary.cluster.tests")
        logger.logLevel = .critical
        return logger
    }()

    static func changeset(_ origin: UInt64, _ sequence: UInt64) -> SharedLog.Append {
        SharedLog.Append(
            origin: ReplicaID(rawValue: origin), originSequence: sequence,
            body: Array("changeset \(origin):\(sequence)".utf8) + [0, 255])
    }

    @Test("Concurrent appenders get gapless positions in commit order, and a reader never sees a gap")
    func concurrentAppends() async throws {
        try await Self.withServer { server in
            let log = try await Self.open(server)
            let writers = 6
            let batches = 20
            let writersDone = Atomic<Bool>(false)
            let reader = Task { () -> (read: [SharedLog.Entry], gaps: Int) in
                var read: [SharedLog.Entry] = []
                var gaps = 0
                let deadline = ContinuousClock.now + .seconds(300)
                while ContinuousClock.now < deadline {
                    let done = writersDone.load(ordering: .acquiring)
                    let entries = try await log.entries(after: UInt64(read.count), limit: 50)
                    for entry in entries {
                        if entry.sequence != UInt64(read.count) + 1 { gaps += 1 }
                        read.append(entry)
                    }
                    // Read once more after the writers finished, and stop when that found nothing.
                    if done && entries.isEmpty { break }
                    if entries.isEmpty { try await Task.sleep(for: .milliseconds(2)) }
                }
                return (read, gaps)
            }
            var expected: [SharedLog.Append: UInt64] = [:]
            try await withThrowingTaskGroup(of: [(SharedLog.Append, UInt64)].self) { group in
                for writer in 1...writers {
                    group.addTask {
                        var placed: [(SharedLog.Append, UInt64)] = []
                        var sequence: UInt64 = 0
                        for batch in 0..<batches {
                            let count = 1 + batch % 3
                            let changesets = (0..<count).map { _ in
                                sequence += 1
                                return Self.changeset(UInt64(writer), sequence)
                            }
                            let positions = try await log.append(changesets)
                            // One transaction's changesets are contiguous and in the order given.
                            #expect(positions == Array(positions[0]..<(positions[0] + UInt64(count))))
                            placed += zip(changesets, positions).map { ($0, $1) }
                        }
                        return placed
                    }
                }
                for try await placed in group { for (changeset, position) in placed { expected[changeset] = position } }
            }
            writersDone.store(true, ordering: .releasing)
            let (read, gaps) = try await reader.value
            let total = writers * (0..<batches).reduce(0) { $0 + 1 + $1 % 3 }
            #expect(expected.count == total)
            #expect(try await log.head() == UInt64(total))
            #expect(gaps == 0)
            #expect(read.count == total)
            #expect(read.map(\.sequence) == Array(1...UInt64(total)))
            for entry in read {
                let append = SharedLog.Append(
                    origin: entry.origin, originSequence: entry.originSequence, body: entry.body)
                #expect(expected[append] == entry.sequence)
            }
            // Each writer's changesets are in the log in the order that writer appended them.
            for writer in 1...writers {
                let sequences = read.filter { $0.origin.rawValue == UInt64(writer) }.map(\.originSequence)
                #expect(sequences == Array(1...UInt64(sequences.count)))
            }
            await log.close()
        }
    }

    @Test("A changeset appended again is stored once and keeps its position")
    func idempotentAppends() async throws {
        try await Self.withServer { server in
            let log = try await Self.open(server)
            let (a, b, c) = (Self.changeset(7, 1), Self.changeset(7, 2), Self.changeset(9, 1))
            #expect(try await log.append([a, b]) == [1, 2])
            #expect(try await log.append([b, c]) == [2, 3])
            #expect(try await log.append([a, a, c]) == [1, 1, 3])
            let d = Self.changeset(9, 2)
            #expect(try await log.append([d, d]) == [4, 4])
            #expect(try await log.append([]) == [])
            #expect(try await log.head() == 4)
            let entries = try await log.entries(after: 0, limit: 10)
            #expect(entries.map(\.sequence) == [1, 2, 3, 4])
            #expect(entries.map(\.body) == [a.body, b.body, c.body, d.body])
            #expect(try await log.entries(after: 2, limit: 1).map(\.sequence) == [3])
            #expect(try await log.entries(after: 4, limit: 10).isEmpty)
            await log.close()
        }
    }

    @Test("A changeset's refusal is stored with it; appended again, it keeps its first refusal")
    func refusalsAreStoredWithTheirChangeset() async throws {
        try await Self.withServer { server in
            let log = try await Self.open(server)
            let device = ReplicaID(rawValue: 0xA11CE)
            var refused = Self.changeset(7, 1)
            refused.refusal = SharedLog.Refusal(device: device, objects: [1, 2, 3])
            #expect(try await log.append([refused, Self.changeset(7, 2)]) == [1, 2])
            // Judged again by another daemon, which allowed it this time: the stored body is the first judgement's,
            // and so is the refusal.
            var again = refused
            again.refusal = nil
            var other = Self.changeset(7, 2)
            other.refusal = SharedLog.Refusal(device: device, objects: [9])
            #expect(try await log.append([again, other]) == [1, 2])
            // A daemon of the previous version, not yet upgraded, appends with the previous version's call.
            let epoch = log.epoch.uuidString
            #expect(
                try await server.sql(
                    "SELECT tributary_append('\(log.configuration.log)', '\(epoch)', '{7}', '{3}', "
                        + "ARRAY['\\x01'::bytea])"
                ).trimmingCharacters(in: .whitespacesAndNewlines) == "{3}")
            // As that daemon does after its append: followers may read the entry.
            try await server.sql("UPDATE tributary_logs SET durable_head = 3")
            let entries = try await log.entries(after: 0, limit: 10)
            #expect(entries.map(\.refusal) == [SharedLog.Refusal(device: device, objects: [1, 2, 3]), nil, nil])
            #expect(entries.last?.body == [1])
            await log.close()
        }
    }

    @Test("Logs are independent, each with its own epoch, kept when the log is opened again")
    func logsAndEpochs() async throws {
        try await Self.withServer { server in
            let chat = try await Self.open(server, log: "chat")
            let tasks = try await Self.open(server, log: "tasks")
            #expect(chat.epoch != tasks.epoch)
            #expect(try await chat.append([Self.changeset(1, 1), Self.changeset(1, 2)]) == [1, 2])
            #expect(try await tasks.append([Self.changeset(1, 1)]) == [1])
            #expect(try await tasks.head() == 1)
            let again = try await Self.open(server, log: "chat")
            #expect(again.epoch == chat.epoch)
            #expect(try await again.head() == 2)
            // Opening migrates nothing twice.
            #expect(
                try await server.sql("SELECT version FROM tributary_schema").trimmingCharacters(
                    in: .whitespacesAndNewlines)
                    == "6")
            for log in [chat, tasks, again] { await log.close() }
            await #expect(throws: SharedLogError.self) { try await chat.head() }
        }
    }

    @Test(
        "With a synchronous standby, a reader never gets an entry the standby lacks, though the primary shows it after a cancelled wait"
    )
    func readersGetDurableEntriesOnly() async throws {
        let primary = try await PostgresServer.start()
        defer { primary.stop() }
        let standby = try await primary.startStandby()
        defer { standby.stop() }
        try await primary.requireSynchronousStandby()
        let reader = try await Self.open(primary)
        // Impatient enough that the stuck append below gives up in a test's time, patient enough for a loaded machine
        // (a CI run once took more than 3 s for the first append).
        let writer = try await Self.open(primary, timeout: .seconds(20))
        #expect(try await writer.append([Self.changeset(8, 1)]) == [1])
        #expect(try await reader.entries(after: 0, limit: 10).map(\.sequence) == [1])

        // The standby gone, a commit waits for it. Cancelled (a timeout, an operator), the wait ends and PostgreSQL
        // shows the row to other sessions, though no standby has it.
        standby.stop()
        let stuck = await #expect(throws: SharedLogError.self) { try await writer.append([Self.changeset(8, 2)]) }
        #expect(stuck?.code == .timedOut)
        _ = try await primary.sql("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
        #expect(
            try await primary.sql("SELECT count(*) FROM tributary_changesets").trimmingCharacters(
                in: .whitespacesAndNewlines)
                == "2")
        // A follower reading now would apply a changeset a promoted standby would not have: the reader does not get it.
        #expect(try await reader.entries(after: 0, limit: 10).map(\.sequence) == [1])
        await reader.close()
        await writer.close()
    }

    @Test("An append wakes a listener on another connection")
    func notifications() async throws {
        try await Self.withServer { server in
            let follower = try await Self.open(server)
            let writer = try await Self.open(server)
            let heads = Task { () -> [UInt64] in
                var seen: [UInt64] = []
                for try await head in follower.appendNotifications() {
                    // An append announces its head twice: as it commits, and once it is durable (readable).
                    if seen.last != head { seen.append(head) }
                    if head == 0 {
                        _ = try await writer.append([Self.changeset(3, 1)])
                        _ = try await writer.append([Self.changeset(3, 2), Self.changeset(3, 3)])
                    }
                    if head == 3 { break }
                }
                return seen
            }
            let timeout = Task {
                try await Task.sleep(for: .seconds(120))
                heads.cancel()
            }
            let seen = try await heads.value
            timeout.cancel()
            #expect(seen == [0, 1, 3])
            await follower.close()
            await writer.close()
        }
    }

    @Test("Tables written by a newer build are refused with a clear error")
    func newerTables() async throws {
        try await Self.withServer { server in
            let log = try await Self.open(server)
            await log.close()
            try await server.sql("UPDATE tributary_schema SET version = 99")
            let error = await #expect(throws: SharedLogError.self) { try await Self.open(server) }
            #expect(error?.code == .incompatible)
            #expect(error?.message.contains("version 99") == true)
        }
    }

    @Test(
        "Tables of the first version are migrated: the append function and the upkeep tables are added, and the log appends as before"
    )
    func firstVersionTablesAreMigrated() async throws {
        try await Self.withServer { server in
            let log = try await Self.open(server)
            #expect(try await log.append([Self.changeset(5, 1)]) == [1])
            await log.close()
            // The tables as the first version left them.
            try await server.sql(
                "DROP FUNCTION tributary_append(text, uuid, bigint[], bigint[], bytea[]), "
                    + "tributary_append(text, uuid, bigint[], bigint[], bytea[], bigint[], bytea[])")
            try await server.sql("DROP TABLE tributary_followers, tributary_sync_reports")
            try await server.sql("ALTER TABLE tributary_changesets DROP COLUMN refused_by, DROP COLUMN refused")
            try await server.sql(
                "ALTER TABLE tributary_logs DROP COLUMN retired_epochs, DROP COLUMN reports_since, "
                    + "DROP COLUMN reports_round, DROP COLUMN durable_head, DROP COLUMN retired_through")
            try await server.sql("UPDATE tributary_schema SET version = 1")
            let again = try await Self.open(server)
            #expect(
                try await server.sql("SELECT version FROM tributary_schema").trimmingCharacters(
                    in: .whitespacesAndNewlines)
                    == "6")
            #expect(try await again.append([Self.changeset(5, 1), Self.changeset(5, 2)]) == [1, 2])
            // A changeset given twice in one append is stored once; both get its position.
            #expect(try await again.append([Self.changeset(6, 1), Self.changeset(6, 1)]) == [3, 3])
            #expect(try await again.head() == 3)
            #expect(again.retiredEpochs.isEmpty)
            #expect(try await again.followers().isEmpty)
            await again.close()
        }
    }

    @Test("An append while the server is down lands once it is back, after everything committed before")
    func serverDown() async throws {
        try await Self.withServer { server in
            let log = try await Self.open(server)
            #expect(try await log.append([Self.changeset(5, 1), Self.changeset(5, 2)]) == [1, 2])
            server.kill()
            // The append waits for a connection (or fails: unreachable, timed out); either way, appending again is
            // safe.
            let pending = Task { try await log.append([Self.changeset(5, 3)]) }
            try await Task.sleep(for: .seconds(1))
            try await server.startServer()
            var positions = (try? await pending.value) ?? []
            let deadline = ContinuousClock.now + .seconds(120)
            while positions.isEmpty && ContinuousClock.now < deadline {
                do {
                    positions = try await log.append([Self.changeset(5, 3)])
                } catch {
                    #expect(
                        [.unreachable, .timedOut].contains((error as? SharedLogError)?.code), "\(error)")
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
            #expect(positions == [3])
            #expect(try await log.entries(after: 0, limit: 10).map(\.originSequence) == [1, 2, 3])
            await log.close()
        }
    }
}

@Suite("Shared log configuration") struct SharedLogConfigurationTests {
    @Test("A server nobody listens on, and malformed URLs, fail with errors that say what is wrong")
    func badConfigurations() async throws {
        var configuration = try SharedLog.Configuration(url: "postgres://tributary@127.0.0.1:1/postgres", log: "x")
        configuration.timeout = .seconds(5)
        let error = await #expect(throws: SharedLogError.self) {
            try await SharedLog.open(configuration, logger: SharedLogTests.quiet)
        }
        #expect(error?.code == .unreachable || error?.code == .timedOut, "\(String(describing: error))")
        #expect(error?.message.contains("127.0.0.1:1") == true, "\(String(describing: error))")
        // Several servers, none of which answers: the error names each.
        var unreachable = try SharedLog.Configuration(
            url: "postgres://tributary@127.0.0.1:1,127.0.0.2:1/postgres", log: "x")
        unreachable.timeout = .seconds(5)
        let none = await #expect(throws: SharedLogError.self) {
            try await SharedLog.open(unreachable, logger: SharedLogTests.quiet)
        }
        #expect(
            none?.message.contains("none of the PostgreSQL servers takes writes") == true, "\(String(describing: none))"
        )
        #expect(none?.message.contains("127.0.0.2:1") == true, "\(String(describing: none))")
        for (url, expected) in [
            ("http://host/db", "is not a PostgreSQL URL"), ("postgres://host/db", "names no user"),
            ("postgres://u@host", "names no database"), ("postgres://u@host/db?sslmode=maybe", "sslmode 'maybe'"),
        ] {
            #expect(throws: SharedLogError.self) { try SharedLog.Configuration(url: url, log: "x") }
            do {
                _ = try SharedLog.Configuration(url: url, log: "x")
            } catch {
                #expect(error.message.contains(expected), "\(error)")
            }
        }
        let parsed = try SharedLog.Configuration(
            url: "postgresql://ann:secret@db.local:6543/prod?sslmode=require", log: "l")
        #expect(parsed.servers == [SharedLog.Server(host: "db.local", port: 6543)])
        #expect(parsed.username == "ann")
        #expect(parsed.password == "secret")
        #expect(parsed.database == "prod")
        #expect(parsed.tls == .require)

        // Several hosts, libpq's way: a primary and its standbys, tried in order; escapes in the user and password.
        let several = try SharedLog.Configuration(
            url: "postgres://ann%40corp:p%2Fw@db1,10.0.0.2:5433,[::1]:6000/my%20db", log: "l")
        #expect(
            several.servers == [
                .init(host: "db1", port: 5432), .init(host: "10.0.0.2", port: 5433), .init(host: "::1", port: 6000),
            ])
        #expect(several.username == "ann@corp")
        #expect(several.password == "p/w")
        #expect(several.database == "my db")
        #expect(several.tls == .disable)
        #expect(several.servers.map(\.description) == ["db1:5432", "10.0.0.2:5433", "[::1]:6000"])
        for (url, expected) in [
            ("postgres://u@db1,,db2/db", "names no host"), ("postgres://u@db1:99999/db", "port '99999'"),
            ("postgres://u@[::1/db", "closing ']'"), ("postgres://u@db:x/db", "port 'x'"),
        ] {
            do {
                _ = try SharedLog.Configuration(url: url, log: "x")
                Issue.record("\(url) was accepted")
            } catch {
                #expect(error.message.contains(expected), "\(error)")
            }
        }
    }
}
