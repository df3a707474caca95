public import Foundation
import Logging
import PostgresNIO
package import Tributary
import TributaryLog
package import TributaryModel

// What keeps a cluster's history right and bounded: renewing the epoch after the log lost commits, the daemons'
// positions, the devices' reports, and compacting the log (docs/design/Cluster.md).
extension SharedLog {
    // MARK: Epochs

    /// Gives the log a new epoch, retiring this one: what an operator does after the database lost commits that
    /// daemons applied (an asynchronous failover, a restore from a backup), so that the log's history is a new one.
    ///
    /// Daemons of the old epoch stop following the log, and do not start again on their directories: each starts on
    /// an empty one and builds its replica from the log (keep the old directories: they hold the lost changesets).
    /// An app that synced under a retired epoch is reset, and recovers what it wrote that the log lost. The positions
    /// and reports the log kept for compaction are dropped with the epoch. This log handle keeps the old epoch: close
    /// it and open the log again.
    ///
    /// A log that was compacted cannot be renewed: the start of its history is gone from it, so a new history could not
    /// be built from what it holds.
    ///
    /// - Returns: the new epoch.
    /// - Throws: ``SharedLogError`` with ``SharedLogError/Code/incompatible`` when the log's epoch is no longer the one
    ///   this handle opened (another renewal came first); ``SharedLogError/Code/compacted`` when the log was
    ///   compacted; what PostgreSQL answers.
    public func renewEpoch() async throws(SharedLogError) -> UUID {
        let name = configuration.log
        let old = epoch
        let new = UUID()
        let client = client
        let logger = logger
        let renewed = try await operation { () -> Int64? in
            try await client.withTransaction(logger: logger) { connection in
                var compacted: Int64?
                let rows = try await connection.query(
                    """
                    UPDATE tributary_logs SET epoch = \(new), retired_epochs = retired_epochs || epoch,
                        retired_through = retired_through || 0::bigint, reports_since = NULL, reports_round = NULL
                    WHERE log = \(name) AND epoch = \(old) AND compacted_through = 0 RETURNING compacted_through
                    """, logger: logger)
                for try await value in rows.decode(Int64.self) { compacted = value }
                guard compacted != nil else {
                    // Not renewed: say why (another renewal, or a compaction).
                    for try await value in try await connection.query(
                        "SELECT compacted_through FROM tributary_logs WHERE log = \(name) AND epoch = \(old)",
                        logger: logger
                    ).decode(Int64.self) { return value }
                    return nil
                }
                try await connection.query("DELETE FROM tributary_followers WHERE log = \(name)", logger: logger)
                try await connection.query("DELETE FROM tributary_sync_reports WHERE log = \(name)", logger: logger)
                return 0
            }
        }
        guard let renewed else {
            throw SharedLogError(
                .incompatible,
                "the epoch of the shared log '\(name)' is no longer \(old): it was renewed already; open it again")
        }
        guard renewed == 0 else {
            throw SharedLogError(
                .compacted,
                "the shared log '\(name)' was compacted through position \(renewed): the start of its history is "
                    + "gone from it, so a new history cannot be built from it alone. Start the new epoch from the "
                    + "replica of the daemon that applied the most (tributaryd --renew-epoch --from-replica), or "
                    + "restore PostgreSQL from a backup that holds what the daemons applied (docs/Operating.md)")
        }
        logger.notice("renewed the epoch of the shared log '\(name)': \(old) retired, \(new) now")
        return new
    }

    /// What the transaction of ``renewEpoch(from:into:)`` found and did.
    private enum SeededRenewal: Sendable {
        /// Renewed, keeping `carried` entries after the base's position.
        case renewed(carried: Int64)
        /// The log's epoch was not the one this handle opened: another renewal came first.
        case renewedAlready
        /// The log was compacted past what the replica applied, meanwhile.
        case compactedPast(Int64)
    }

    /// What ``renewEpoch(from:into:)`` did.
    package struct RenewedEpoch: Sendable {
        /// The new epoch.
        package var epoch: UUID
        /// The new epoch's replica, which starts from the source's state: every daemon of the cluster starts from a
        /// copy of it.
        package var replica: Replica
        /// The position the new replica's base stands at: the log is compacted through it.
        package var position: UInt64
        /// The entries the log held whose changesets the source did not hold (appended after the loss, or beyond
        /// what the source applied): kept, in their order, after ``position``.
        package var carried: Int
        /// How many changesets of the retired epoch's replica id the new history holds.
        package var heldThrough: UInt64
    }

    /// Gives the log a new epoch that starts from the state of `source`, the replica of a daemon of this epoch: what
    /// an operator does after the database lost commits (an asynchronous failover, a restore from a backup) when the
    /// log was compacted, so that its entries alone no longer build a history (``renewEpoch()`` refuses then).
    ///
    /// The new epoch's replica is made in `directory` (``Replica/startingNewHistory(from:directory:replicaID:configuration:recordsInMemory:)``),
    /// with the new epoch's replica id and `source`'s records, schema and version vector as its base, and the log is
    /// compacted through the base's position. The log's entries whose changesets `source` does not hold (appends made
    /// after the loss by daemons that noticed nothing, or beyond what `source` applied) are kept after it, in their
    /// order, so nothing the log holds is lost either. Every daemon of the cluster then starts from a copy of
    /// `directory`. An app that holds no more of the retired epoch than `source` did syncs on without a reset; one
    /// that holds more (it synced through a daemon further along than `source`) is reset and recovers what it wrote.
    /// Pick the daemon that applied the most (`tributary-log info` shows a replica's position).
    ///
    /// - Throws: ``SharedLogError`` with ``SharedLogError/Code/invalidArgument`` when `source` did not follow this
    ///   log's current epoch, or applied less than the log's compacted position (it lacks entries the log no longer
    ///   holds); ``SharedLogError/Code/incompatible`` when another renewal came first; what PostgreSQL answers, or
    ///   what making the replica throws (the directory is then removed, except after a timeout or a lost
    ///   connection, when the renewal may have committed: the error says how to tell).
    package func renewEpoch(from source: Replica, into directory: String) async throws -> RenewedEpoch {
        let name = configuration.log
        let old = epoch
        guard let stored = try source.sharedLogPosition(), stored.epoch == old else {
            throw SharedLogError(
                .invalidArgument,
                "replica \(source.directory) is not a daemon's replica of epoch \(old) of the shared log '\(name)': "
                    + "start the new epoch from the replica of a daemon that followed it")
        }
        let compacted = try await compactedThrough()
        guard stored.position >= compacted else {
            throw SharedLogError(
                .invalidArgument,
                "replica \(source.directory) applied the shared log '\(name)' through position \(stored.position), and "
                    + "the log was compacted through \(compacted): it lacks entries the log no longer holds. Start the "
                    + "new epoch from a daemon that applied more")
        }
        let new = UUID()
        var replicaConfiguration = Replica.Configuration()
        replicaConfiguration.maximumClockSkew = .seconds(Int64.max)
        let replica = try Replica.startingNewHistory(
            from: source, directory: directory, replicaID: Self.replicaID(of: new),
            configuration: replicaConfiguration)
        let position = max(1, stored.position)
        let heldThrough = replica.versionVector[replicaID]
        do {
            guard let held = try replica.logCompaction()?.held else {
                throw SharedLogError(.invalidArgument, "the new replica in \(directory) has no base")
            }
            // Stored before the log names the new epoch: a daemon started on the directory if the renewal fails is
            // refused (another epoch), never started at another position.
            try replica.setSharedLogPosition(SharedLogPosition(epoch: new, position: position, last: nil))
            let origins = held.entries.map { Int64(bitPattern: $0.replica.rawValue) }
            let through = held.entries.map { Int64(bitPattern: $0.sequence) }
            let base = Int64(position)
            let client = client
            let logger = logger
            let outcome = try await operation { () -> SeededRenewal in
                try await client.withTransaction(logger: logger) { connection -> SeededRenewal in
                    var found: (UUID, Int64)?
                    for try await row in try await connection.query(
                        "SELECT epoch, compacted_through FROM tributary_logs WHERE log = \(name) FOR UPDATE",
                        logger: logger
                    ).decode((UUID, Int64).self) { found = row }
                    guard let found, found.0 == old else { return .renewedAlready }
                    guard found.1 <= base else { return .compactedPast(found.1) }
                    // A statement with parameters cannot create a table: the table first, then what it keeps.
                    try await connection.query(
                        """
                        CREATE TEMPORARY TABLE tributary_carried (
                            origin bigint, origin_sequence bigint, body bytea, refused_by bigint, refused bytea,
                            n bigint) ON COMMIT DROP
                        """, logger: logger)
                    try await connection.query(
                        """
                        INSERT INTO tributary_carried
                        SELECT c.origin, c.origin_sequence, c.body, c.refused_by, c.refused,
                            row_number() OVER (ORDER BY c.seq)
                        FROM tributary_changesets c
                        WHERE c.log = \(name) AND NOT EXISTS (
                            SELECT 1 FROM unnest(\(origins)::bigint[], \(through)::bigint[]) AS h(origin, through)
                            WHERE h.origin = c.origin AND c.origin_sequence <= h.through)
                        """, logger: logger)
                    try await connection.query("DELETE FROM tributary_changesets WHERE log = \(name)", logger: logger)
                    try await connection.query(
                        """
                        INSERT INTO tributary_changesets (log, seq, origin, origin_sequence, body, refused_by, refused)
                        SELECT \(name), \(base) + n, origin, origin_sequence, body, refused_by, refused
                        FROM tributary_carried
                        """, logger: logger)
                    var carried: Int64 = 0
                    for try await count in try await connection.query(
                        "SELECT count(*) FROM tributary_carried", logger: logger
                    ).decode(Int64.self) { carried = count }
                    try await connection.query(
                        """
                        UPDATE tributary_logs SET epoch = \(new), retired_epochs = retired_epochs || epoch,
                            retired_through = retired_through || \(Int64(bitPattern: heldThrough))::bigint,
                            head = \(base + carried), durable_head = \(base + carried), compacted_through = \(base),
                            reports_since = NULL, reports_round = NULL
                        WHERE log = \(name)
                        """, logger: logger)
                    try await connection.query("DELETE FROM tributary_followers WHERE log = \(name)", logger: logger)
                    try await connection.query(
                        "DELETE FROM tributary_sync_reports WHERE log = \(name)", logger: logger)
                    return .renewed(carried: carried)
                }
            }
            let carried: Int64
            switch outcome {
            case .renewed(let count):
                carried = count
            case .renewedAlready:
                throw SharedLogError(
                    .incompatible,
                    "the epoch of the shared log '\(name)' is no longer \(old): it was renewed already; open it again")
            case .compactedPast(let through):
                throw SharedLogError(
                    .invalidArgument,
                    "the shared log '\(name)' was compacted through \(through) meanwhile, past what replica "
                        + "\(source.directory) applied (\(stored.position)): start the new epoch from a daemon that "
                        + "applied more")
            }
            let renewal =
                "renewed the epoch of the shared log '\(name)' from replica \(source.directory): \(old) retired, "
                + "\(new) now, starting at position \(position) with \(carried) entries kept after it"
            logger.notice("\(renewal)")
            return RenewedEpoch(
                epoch: new, replica: replica, position: position, carried: Int(carried), heldThrough: heldThrough)
        } catch let error as SharedLogError where [.timedOut, .unreachable].contains(error.code) {
            // The commit may have happened, or may still: the new replica is kept, since the log may name it now.
            replica.close()
            throw SharedLogError(
                error.code,
                "the renewal of the shared log '\(name)' did not finish in time, and may have committed: "
                    + "\(error.message). If the log's epoch is \(new) when it is opened again, start the daemons from "
                    + "copies of \(directory); if it is still \(old), remove \(directory) and run the renewal again")
        } catch {
            replica.close()
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    // MARK: Daemons' positions

    /// Records that the daemon known as `follower` (a fresh id per process) applied the log through `applied`, at
    /// `now` (seconds since 1970): a compaction of the log keeps every entry a daemon seen within the retention has
    /// not applied. Records nothing when the log's epoch is no longer this handle's.
    package func recordFollower(_ follower: UUID, applied: UInt64, now: UInt64, host: String)
        async throws(SharedLogError)
    {
        let name = configuration.log
        let epoch = epoch
        let client = client
        let logger = logger
        _ = try await operation {
            try await client.query(
                """
                INSERT INTO tributary_followers (log, follower, applied, seen, host)
                SELECT \(name), \(follower), \(Int64(applied)), \(Int64(now)), \(host)
                WHERE EXISTS (SELECT 1 FROM tributary_logs WHERE log = \(name) AND epoch = \(epoch))
                ON CONFLICT (log, follower) DO UPDATE SET
                    applied = greatest(tributary_followers.applied, excluded.applied),
                    seen = greatest(tributary_followers.seen, excluded.seen)
                """, logger: logger)
        }
    }

    /// A daemon following the log, as ``followers()`` lists them.
    public struct Follower: Sendable, Hashable {
        /// The daemon's id for this process.
        public var id: UUID
        /// The last position it applied.
        public var applied: UInt64
        /// When it last said so, in seconds since 1970.
        public var seen: UInt64
        /// The host it runs on.
        public var host: String
    }

    /// The daemons that follow the log, or did, with how far each applied it.
    public func followers() async throws(SharedLogError) -> [Follower] {
        let name = configuration.log
        let client = client
        let logger = logger
        return try await operation {
            var followers: [Follower] = []
            let rows = try await client.query(
                "SELECT follower, applied, seen, host FROM tributary_followers WHERE log = \(name) ORDER BY seen",
                logger: logger)
            for try await (id, applied, seen, host) in rows.decode((UUID, Int64, Int64, String).self) {
                followers.append(
                    Follower(id: id, applied: UInt64(max(0, applied)), seen: UInt64(max(0, seen)), host: host))
            }
            return followers
        }
    }

    // MARK: Compaction

    /// The key of the advisory lock a compaction of this log takes: one daemon compacts a log at a time.
    private var compactionLock: (Int32, Int32) {
        // FNV-1a of the name, so that each log has its own lock.
        var hash: UInt32 = 2_166_136_261
        for byte in configuration.log.utf8 { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
        return (0x7472_6962, Int32(bitPattern: hash))  // "trib"
    }

    /// What one compaction of the log did.
    public struct Compaction: Sendable, Hashable {
        /// The log is compacted through this position now.
        public var through: UInt64
        /// The entries this compaction dropped.
        public var dropped: Int
    }

    /// Drops the entries every daemon seen within `window` seconds of `now` has applied, unless another daemon is
    /// compacting this log now (an advisory lock decides). A daemon that was away longer, or a new one, starts from a
    /// copy of another daemon's replica.
    ///
    /// - Returns: what was dropped, or `nil` when another daemon holds the lock or nothing can be dropped.
    package func compact(window: UInt64, now: UInt64) async throws(SharedLogError) -> Compaction? {
        let name = configuration.log
        let epoch = epoch
        let client = client
        let logger = logger
        let (high, low) = compactionLock
        return try await operation {
            try await client.withConnection { connection -> Compaction? in
                var locked = false
                for try await value in try await connection.query(
                    "SELECT pg_try_advisory_lock(\(high), \(low))", logger: logger
                ).decode(Bool.self) { locked = value }
                guard locked else { return nil }
                do {
                    let result = try await Self.compactLocked(
                        connection, name: name, epoch: epoch, oldest: now > window ? now - window : 0, logger: logger)
                    _ = try await connection.query("SELECT pg_advisory_unlock(\(high), \(low))", logger: logger)
                    return result
                } catch {
                    _ = try? await connection.query("SELECT pg_advisory_unlock(\(high), \(low))", logger: logger)
                    throw error
                }
            }
        }
    }

    private static func compactLocked(
        _ connection: PostgresConnection, name: String, epoch: UUID, oldest: UInt64, logger: Logger
    ) async throws -> Compaction? {
        var bound: Int64?
        for try await value in try await connection.query(
            "SELECT min(applied) FROM tributary_followers WHERE log = \(name) AND seen >= \(Int64(oldest))",
            logger: logger
        ).decode(Int64?.self) { bound = value }
        var found: (Int64, Int64)?
        for try await row in try await connection.query(
            "SELECT compacted_through, head FROM tributary_logs WHERE log = \(name) AND epoch = \(epoch)",
            logger: logger
        ).decode((Int64, Int64).self) { found = row }
        guard let bound, let (from, head) = found else { return nil }
        let through = min(bound, head)
        guard through > from else { return nil }
        // The mark first: a reader past it sees the entries it needs; one behind it is told the log was compacted,
        // even before the rows are gone. Then the rows, in short statements that do not hold appenders back.
        var marked = false
        for try await _ in try await connection.query(
            """
            UPDATE tributary_logs SET compacted_through = greatest(compacted_through, \(through))
            WHERE log = \(name) AND epoch = \(epoch) RETURNING compacted_through
            """, logger: logger
        ).decode(Int64.self) { marked = true }
        guard marked else { return nil }  // the epoch changed meanwhile: nothing is dropped
        // Every row at or below the mark goes, in batches, whatever an earlier compaction cut off left behind.
        var dropped = 0
        while true {
            var count = 0
            for try await _ in try await connection.query(
                """
                DELETE FROM tributary_changesets WHERE log = \(name) AND seq IN (
                    SELECT seq FROM tributary_changesets WHERE log = \(name) AND seq <= \(through)
                    ORDER BY seq LIMIT 10000)
                RETURNING seq
                """, logger: logger
            ).decode(Int64.self) { count += 1 }
            dropped += count
            if count < 10_000 { break }
        }
        return Compaction(through: UInt64(through), dropped: dropped)
    }

    /// The position through which the log is compacted: its entries up to it are gone (0 when none are).
    public func compactedThrough() async throws(SharedLogError) -> UInt64 {
        let name = configuration.log
        let client = client
        let logger = logger
        return try await operation {
            var through: Int64 = 0
            for try await value in try await client.query(
                "SELECT compacted_through FROM tributary_logs WHERE log = \(name)", logger: logger
            ).decode(Int64.self) { through = value }
            return UInt64(max(0, through))
        }
    }

    // MARK: Devices' reports

    /// Stores what devices reported to this daemon (the latest report of each wins), so that every daemon of the
    /// cluster compacts its replica only through what every device seen anywhere within the retention holds.
    /// With `onlyNew`, stores only the reports of devices the log has none of: a device's first report, published at
    /// once, must not replace a fuller one that a round published meanwhile within the same second.
    package func publishSyncReports(_ reports: [ReplicaID: SyncReport], onlyNew: Bool = false)
        async throws(SharedLogError)
    {
        guard !reports.isEmpty else { return }
        let name = configuration.log
        let epoch = epoch
        let client = client
        let logger = logger
        var replicas: [Int64] = []
        var times: [Int64] = []
        var vectors: [ByteBuffer] = []
        for (replica, report) in reports {
            var writer = BinaryWriter()
            writer.versionVector(report.vector)
            replicas.append(Int64(bitPattern: replica.rawValue))
            times.append(Int64(min(report.time, UInt64(Int64.max))))
            vectors.append(ByteBuffer(bytes: writer.bytes))
        }
        if onlyNew {
            _ = try await operation { [replicas, times, vectors] in
                try await client.query(
                    """
                    INSERT INTO tributary_sync_reports (log, replica, reported, holds)
                    SELECT \(name), r, t, h
                    FROM unnest(\(replicas)::bigint[], \(times)::bigint[], \(vectors)::bytea[]) AS u(r, t, h)
                    WHERE EXISTS (SELECT 1 FROM tributary_logs WHERE log = \(name) AND epoch = \(epoch))
                    ON CONFLICT (log, replica) DO NOTHING
                    """, logger: logger)
            }
            return
        }
        _ = try await operation { [replicas, times, vectors] in
            try await client.query(
                """
                INSERT INTO tributary_sync_reports (log, replica, reported, holds)
                SELECT \(name), r, t, h FROM unnest(\(replicas)::bigint[], \(times)::bigint[], \(vectors)::bytea[])
                    AS u(r, t, h)
                WHERE EXISTS (SELECT 1 FROM tributary_logs WHERE log = \(name) AND epoch = \(epoch))
                ON CONFLICT (log, replica) DO UPDATE SET
                    holds = CASE WHEN excluded.reported >= tributary_sync_reports.reported
                        THEN excluded.holds ELSE tributary_sync_reports.holds END,
                    reported = greatest(tributary_sync_reports.reported, excluded.reported)
                """, logger: logger)
        }
    }

    /// The reports devices made to any daemon of the cluster at `oldest` or later; older ones are forgotten. A
    /// damaged report reads as a device that holds nothing (it holds every compaction back).
    package func syncReports(since oldest: UInt64) async throws(SharedLogError) -> [ReplicaID: SyncReport] {
        let name = configuration.log
        let client = client
        let logger = logger
        return try await operation {
            try await client.query(
                "DELETE FROM tributary_sync_reports WHERE log = \(name) AND reported < \(Int64(oldest))",
                logger: logger)
            var reports: [ReplicaID: SyncReport] = [:]
            for try await (replica, time, holds) in try await client.query(
                "SELECT replica, reported, holds FROM tributary_sync_reports WHERE log = \(name)", logger: logger
            ).decode((Int64, Int64, ByteBuffer).self) {
                var reader = BinaryReader(Array(buffer: holds), subject: "sync report")
                let vector = (try? reader.versionVector()) ?? VersionVector()
                reports[ReplicaID(rawValue: UInt64(bitPattern: replica))] = SyncReport(
                    time: UInt64(max(0, time)), vector: vector)
            }
            return reports
        }
    }

    /// Since when the daemons of the cluster have kept reports without a gap (seconds since 1970), noting `now` as a
    /// round: a gap longer than `gap` (no daemon kept reports: all stopped, or ran without a retention) starts the
    /// coverage again at `now`, so that no device is taken for away because no daemon was listening.
    package func syncReportsCoverage(now: UInt64, gap: UInt64) async throws(SharedLogError) -> UInt64 {
        let name = configuration.log
        let epoch = epoch
        let client = client
        let logger = logger
        let now = Int64(min(now, UInt64(Int64.max)))
        let gap = Int64(min(gap, UInt64(Int64.max)))
        return try await operation {
            var since: Int64?
            for try await value in try await client.query(
                """
                UPDATE tributary_logs SET
                    reports_since = CASE
                        WHEN reports_since IS NULL OR reports_round IS NULL
                            OR (\(now) > reports_round AND \(now) - reports_round > \(gap)) THEN \(now)
                        ELSE reports_since END,
                    reports_round = greatest(coalesce(reports_round, 0), \(now))
                WHERE log = \(name) AND epoch = \(epoch) RETURNING reports_since
                """, logger: logger
            ).decode(Int64.self) { since = value }
            return UInt64(max(0, since ?? now))
        }
    }
}
