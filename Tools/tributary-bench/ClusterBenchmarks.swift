import Foundation
import Logging
import PostgresNIO
import Tributary
import TributaryCluster
import TributaryDaemon
import TributaryModel
import TributarySync
import TributaryTestSupport

/// Daemons of a cluster on PostgreSQL (a server of the run's own, on loopback), against a daemon on LMDB alone and
/// against raw PostgreSQL inserts of the same rows, in the same run.
struct ClusterBenchmarks {
    let context: BenchContext
    var network: NetworkBenchmarks { NetworkBenchmarks(context: context) }

    func run() async throws {
        guard context.wants("cluster") else { return }
        guard PostgresServer.isAvailable else {
            FileHandle.standardError.write(Data("cluster benchmarks skipped: \(PostgresServer.unavailable)\n".utf8))
            return
        }
        let postgres = try await PostgresServer.start()
        defer { postgres.stop() }
        if context.wants("cluster_upload") {
            try await uploads(postgres)
            try await scaling(postgres)
        }
        if context.wants("cluster_write_to_visible") { try await latency(postgres) }
    }

    static let quiet: Logger = {
        var logger = Logger(label: "tributary-bench.cluster")
        logger.logLevel = .critical
        return logger
    }()

    /// A daemon of the cluster of `log`, on a free loopback port.
    func clusterDaemon(_ name: String, log logName: String, on postgres: PostgresServer) async throws
        -> (SyncServer, SyncEndpoint, SharedLog)
    {
        let log = try await SharedLog.open(
            try SharedLog.Configuration(url: postgres.url, log: logName), logger: Self.quiet)
        let replica = try log.openReplica(directory: context.path(name))
        var configuration = SyncServer.Configuration()
        configuration.port = 0
        configuration.connectionsPerAddress = 4096
        let server = SyncServer(cluster: try LogFollower(log: log, replica: replica), configuration: configuration)
        let port = try await server.start()
        return (server, SyncEndpoint(host: "127.0.0.1", port: port), log)
    }

    /// Eight apps uploading one small changeset at a time, each waiting for the acknowledgement: through a daemon of
    /// a cluster (acknowledged once PostgreSQL committed the changeset and the daemon applied it), through a daemon on
    /// LMDB alone (acknowledged once its group commit is durable), and raw: the same changesets inserted into a
    /// PostgreSQL table by eight connections, one transaction each. The three alternate by rounds, so that each sees
    /// the same disk.
    func uploads(_ postgres: PostgresServer) async throws {
        let clients = 8
        let rounds = 3
        let perClient = max(60, context.commits)
        let uploads = try await network.preparedUploads("cluster-upload-app", clients: clients, perClient: perClient)
        let (single, singleEndpoint) = try await network.daemon("cluster-upload-lmdb")
        let (clustered, clusterEndpoint, log) = try await clusterDaemon(
            "cluster-upload-daemon", log: "uploads", on: postgres)
        var postgresConfiguration = PostgresClient.Configuration(
            host: "127.0.0.1", port: postgres.port, username: "tributary", password: nil, database: "postgres",
            tls: .disable)
        postgresConfiguration.options.maximumConnections = clients
        let raw = PostgresClient(configuration: postgresConfiguration, backgroundLogger: Self.quiet)
        let rawRunner = Task { await raw.run() }
        try await raw.query(
            "CREATE TABLE bench_changesets (id bigserial PRIMARY KEY, origin bigint, seq bigint, body bytea)",
            logger: Self.quiet)

        let singleGate = NetworkBenchmarks.RoundGate(clients: clients)
        let clusterGate = NetworkBenchmarks.RoundGate(clients: clients)
        var seconds = (single: 0.0, cluster: 0.0, raw: 0.0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (gate, endpoint) in [(singleGate, singleEndpoint), (clusterGate, clusterEndpoint)] {
                for (index, (replica, changesets)) in uploads.enumerated() {
                    group.addTask {
                        try await NetworkBenchmarks.upload(
                            changesets, in: NetworkBenchmarks.bounds(changesets, rounds: rounds), as: replica,
                            to: endpoint, waiting: gate.startStreams[index], finished: gate.finished)
                    }
                }
            }
            var singleFinished = singleGate.finishedStream.makeAsyncIterator()
            var clusterFinished = clusterGate.finishedStream.makeAsyncIterator()
            for round in 0..<rounds {
                var start = ContinuousClock.now
                for start in singleGate.starts { start.yield() }
                for _ in 0..<clients { _ = await singleFinished.next() }
                seconds.single += (ContinuousClock.now - start).seconds

                start = ContinuousClock.now
                for start in clusterGate.starts { start.yield() }
                for _ in 0..<clients { _ = await clusterFinished.next() }
                seconds.cluster += (ContinuousClock.now - start).seconds

                start = ContinuousClock.now
                try await withThrowingTaskGroup(of: Void.self) { inserts in
                    for (replica, changesets) in uploads {
                        let bounds = NetworkBenchmarks.bounds(changesets, rounds: rounds)
                        inserts.addTask {
                            for (offset, body) in changesets[bounds[round]..<bounds[round + 1]].enumerated() {
                                let origin = Int64(bitPattern: replica.rawValue)
                                let sequence = Int64(bounds[round] + offset + 1)
                                let bytes = ByteBuffer(bytes: body)
                                try await raw.query(
                                    "INSERT INTO bench_changesets (origin, seq, body) VALUES (\(origin), \(sequence), \(bytes))",
                                    logger: Self.quiet)
                            }
                        }
                    }
                    try await inserts.waitForAll()
                }
                seconds.raw += (ContinuousClock.now - start).seconds
            }
            try await group.waitForAll()
        }
        let acknowledged = Double(uploads.reduce(0) { $0 + $1.1.count })
        for server in [single, clustered] {
            let held = try await server.replica.read { try $0.count("Note") }
            precondition(held == clients * perClient, "a daemon holds \(held) notes, not \(clients * perClient)")
        }
        let stored = try await log.head()
        precondition(stored == UInt64(acknowledged), "the shared log holds \(stored) changesets, not \(acknowledged)")
        Measurement(
            name: "cluster_upload_8_clients_acknowledged", value: acknowledged / seconds.cluster, unit: "changesets/s",
            baseline: "raw PostgreSQL inserts of the same changesets, 8 connections, a transaction each (changesets/s)",
            baselineValue: acknowledged / seconds.raw
        ).print()
        Measurement(
            name: "cluster_upload_8_clients_against_lmdb_daemon", value: acknowledged / seconds.cluster,
            unit: "changesets/s", baseline: "the same uploads through one daemon on LMDB alone (changesets/s)",
            baselineValue: acknowledged / seconds.single
        ).print()
        rawRunner.cancel()
        await single.stop()
        await clustered.stop()
        await log.close()
    }

    /// A write on an app connected to one daemon of a cluster to the change in the live results of an app connected
    /// to another: median and 99th percentile, against the same two apps on one daemon on LMDB alone.
    func latency(_ postgres: PostgresServer) async throws {
        let samples = 200
        let (first, firstEndpoint, firstLog) = try await clusterDaemon(
            "cluster-latency-1", log: "latency", on: postgres)
        let (second, secondEndpoint, secondLog) = try await clusterDaemon(
            "cluster-latency-2", log: "latency", on: postgres)
        let across = try await network.appToAppLatencies(
            "cluster-latency", writingTo: firstEndpoint, readingFrom: secondEndpoint, samples: samples)
        let (single, singleEndpoint) = try await network.daemon("cluster-latency-lmdb")
        let alone = try await network.appToAppLatencies(
            "cluster-latency-lmdb", writingTo: singleEndpoint, readingFrom: singleEndpoint, samples: samples)
        Measurement(
            name: "cluster_write_to_visible_across_daemons_median", value: across[samples / 2], unit: "ms",
            baseline: "the same through one daemon on LMDB alone, median (ms)", baselineValue: alone[samples / 2],
            higherIsBetter: false
        ).print()
        Measurement(
            name: "cluster_write_to_visible_across_daemons_p99", value: across[samples * 99 / 100], unit: "ms",
            baseline: "the same through one daemon on LMDB alone, p99 (ms)", baselineValue: alone[samples * 99 / 100],
            higherIsBetter: false
        ).print()
        await first.stop()
        await second.stop()
        await single.stop()
        await firstLog.close()
        await secondLog.close()
    }

    /// 24 clients uploading as above, spread over three daemons of one cluster, against the same clients on one
    /// daemon of another cluster (another log in the same PostgreSQL), in alternating rounds. On one machine the three
    /// daemons share its cores and its PostgreSQL: the figure says what the shared log costs when daemons are added,
    /// not what three machines would do.
    func scaling(_ postgres: PostgresServer) async throws {
        let clients = 24
        let rounds = 3
        let perClient = max(30, context.commits / 4)
        let uploads = try await network.preparedUploads("cluster-scaling-app", clients: clients, perClient: perClient)
        var three: [(SyncServer, SyncEndpoint, SharedLog)] = []
        for index in 0..<3 {
            three.append(try await clusterDaemon("cluster-scaling-\(index)", log: "scaling-three", on: postgres))
        }
        let one = try await clusterDaemon("cluster-scaling-one", log: "scaling-one", on: postgres)
        let threeGate = NetworkBenchmarks.RoundGate(clients: clients)
        let oneGate = NetworkBenchmarks.RoundGate(clients: clients)
        var seconds = (three: 0.0, one: 0.0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, (replica, changesets)) in uploads.enumerated() {
                let bounds = NetworkBenchmarks.bounds(changesets, rounds: rounds)
                let spread = three[index % three.count].1
                group.addTask {
                    try await NetworkBenchmarks.upload(
                        changesets, in: bounds, as: replica, to: spread, waiting: threeGate.startStreams[index],
                        finished: threeGate.finished)
                }
                group.addTask {
                    try await NetworkBenchmarks.upload(
                        changesets, in: bounds, as: replica, to: one.1, waiting: oneGate.startStreams[index],
                        finished: oneGate.finished)
                }
            }
            var threeFinished = threeGate.finishedStream.makeAsyncIterator()
            var oneFinished = oneGate.finishedStream.makeAsyncIterator()
            for _ in 0..<rounds {
                var start = ContinuousClock.now
                for start in threeGate.starts { start.yield() }
                for _ in 0..<clients { _ = await threeFinished.next() }
                seconds.three += (ContinuousClock.now - start).seconds
                start = ContinuousClock.now
                for start in oneGate.starts { start.yield() }
                for _ in 0..<clients { _ = await oneFinished.next() }
                seconds.one += (ContinuousClock.now - start).seconds
            }
            try await group.waitForAll()
        }
        let acknowledged = Double(uploads.reduce(0) { $0 + $1.1.count })
        for (server, _, log) in three + [one] {
            let stored = try await log.head()
            precondition(stored == UInt64(acknowledged), "a log holds \(stored) changesets, not \(acknowledged)")
            await server.stop()
        }
        Measurement(
            name: "cluster_upload_24_clients_three_daemons", value: acknowledged / seconds.three, unit: "changesets/s",
            baseline: "the same 24 clients on one daemon of a cluster (changesets/s)",
            baselineValue: acknowledged / seconds.one
        ).print()
        for (_, _, log) in three + [one] { await log.close() }
    }
}
