public import Foundation
import Logging
import PostgresNIO
package import Tributary
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
                        reports_since = NULL, reports_round = NULL
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
                    + "gone from it, so a new history cannot be built from it. Restore PostgreSQL from a backup that "
                    + "holds what the daemons applied, or keep running the daemons read-only; run PostgreSQL with a "
                    + "synchronous standby so that a failover loses nothing (docs/Operating.md)")
        }
        logger.notice("renewed the epoch of the shared log '\(name)': \(old) retired, \(new) now")
        return new
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
