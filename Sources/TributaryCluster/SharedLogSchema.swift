import Foundation
import Logging
import PostgresNIO

/// The shared log's tables, created and migrated by the daemons themselves.
///
/// `tributary_schema` holds one row: the version of the tables. Each version's statements run in one transaction
/// under an advisory lock, so daemons that start together migrate once, and a build meets tables of a newer build
/// with a clear error instead of writing to them.
enum SharedLogSchema {
    /// The version of the tables this build writes.
    static let version: Int32 = 6

    /// The SQL state `tributary_append` raises when the log's epoch is not the one the appender names.
    static let retiredEpochState = "TRB01"

    /// The notification channel of appends; the payload is `log:head`.
    static let channel = "tributary_appended"

    /// The advisory lock key migrations take (the bytes of "tribmigr").
    private static let migrationLock: Int64 = 0x7472_6962_6D69_6772

    /// Each version's statements: `migrations[n]` takes the tables from version n to n + 1.
    private static let migrations: [[String]] = [
        [
            """
            CREATE TABLE tributary_logs (
                log text PRIMARY KEY,
                epoch uuid NOT NULL,
                head bigint NOT NULL DEFAULT 0,
                compacted_through bigint NOT NULL DEFAULT 0,
                created timestamptz NOT NULL DEFAULT now())
            """,
            """
            CREATE TABLE tributary_changesets (
                log text NOT NULL REFERENCES tributary_logs (log),
                seq bigint NOT NULL,
                origin bigint NOT NULL,
                origin_sequence bigint NOT NULL,
                body bytea NOT NULL,
                PRIMARY KEY (log, seq),
                UNIQUE (log, origin, origin_sequence))
            """,
        ],
        // An append in one statement: the head row is locked from the function's first statement to the commit, so
        // the fewer round trips an append takes, the shorter appenders to one log wait for each other.
        [
            """
            CREATE FUNCTION tributary_append(p_log text, p_origins bigint[], p_sequences bigint[], p_bodies bytea[])
            RETURNS bigint[] LANGUAGE plpgsql AS $$
            DECLARE
                v_head bigint;
                v_next bigint;
                v_found bigint;
                v_positions bigint[] := '{}';
            BEGIN
                SELECT head INTO v_head FROM tributary_logs WHERE log = p_log FOR UPDATE;
                IF v_head IS NULL THEN
                    RAISE EXCEPTION 'the log % has no row in tributary_logs', p_log;
                END IF;
                v_next := v_head;
                FOR i IN 1 .. coalesce(array_length(p_origins, 1), 0) LOOP
                    SELECT seq INTO v_found FROM tributary_changesets
                        WHERE log = p_log AND origin = p_origins[i] AND origin_sequence = p_sequences[i];
                    IF v_found IS NULL THEN
                        v_next := v_next + 1;
                        INSERT INTO tributary_changesets (log, seq, origin, origin_sequence, body)
                            VALUES (p_log, v_next, p_origins[i], p_sequences[i], p_bodies[i]);
                        v_found := v_next;
                    END IF;
                    v_positions := v_positions || v_found;
                END LOOP;
                IF v_next > v_head THEN
                    UPDATE tributary_logs SET head = v_next WHERE log = p_log;
                    PERFORM pg_notify('tributary_appended', p_log || ':' || v_next);
                END IF;
                RETURN v_positions;
            END
            $$
            """
        ],
        // Epochs a renewal retired (an app that synced under one is reset), the daemons following each log with how
        // far they applied it (what bounds a compaction of the log), and what every device reported to any daemon
        // (what bounds a compaction of each daemon's replica, with a retention).
        [
            "ALTER TABLE tributary_logs ADD COLUMN retired_epochs uuid[] NOT NULL DEFAULT '{}'",
            "ALTER TABLE tributary_logs ADD COLUMN reports_since bigint",
            "ALTER TABLE tributary_logs ADD COLUMN reports_round bigint",
            """
            CREATE TABLE tributary_followers (
                log text NOT NULL REFERENCES tributary_logs (log),
                follower uuid NOT NULL,
                applied bigint NOT NULL,
                seen bigint NOT NULL,
                host text NOT NULL DEFAULT '',
                PRIMARY KEY (log, follower))
            """,
            """
            CREATE TABLE tributary_sync_reports (
                log text NOT NULL REFERENCES tributary_logs (log),
                replica bigint NOT NULL,
                reported bigint NOT NULL,
                holds bytea NOT NULL,
                PRIMARY KEY (log, replica))
            """,
            // Appends name the epoch they were judged under: a daemon of a retired epoch appends nothing.
            "DROP FUNCTION tributary_append(text, bigint[], bigint[], bytea[])",
            """
            CREATE FUNCTION tributary_append(
                p_log text, p_epoch uuid, p_origins bigint[], p_sequences bigint[], p_bodies bytea[])
            RETURNS bigint[] LANGUAGE plpgsql AS $$
            DECLARE
                v_head bigint;
                v_epoch uuid;
                v_next bigint;
                v_found bigint;
                v_positions bigint[] := '{}';
            BEGIN
                SELECT head, epoch INTO v_head, v_epoch FROM tributary_logs WHERE log = p_log FOR UPDATE;
                IF v_head IS NULL THEN
                    RAISE EXCEPTION 'the log % has no row in tributary_logs', p_log;
                END IF;
                IF v_epoch <> p_epoch THEN
                    RAISE EXCEPTION USING ERRCODE = 'TRB01',
                        MESSAGE = format('the log %s is of epoch %s now, not %s', p_log, v_epoch, p_epoch);
                END IF;
                v_next := v_head;
                FOR i IN 1 .. coalesce(array_length(p_origins, 1), 0) LOOP
                    SELECT seq INTO v_found FROM tributary_changesets
                        WHERE log = p_log AND origin = p_origins[i] AND origin_sequence = p_sequences[i];
                    IF v_found IS NULL THEN
                        v_next := v_next + 1;
                        INSERT INTO tributary_changesets (log, seq, origin, origin_sequence, body)
                            VALUES (p_log, v_next, p_origins[i], p_sequences[i], p_bodies[i]);
                        v_found := v_next;
                    END IF;
                    v_positions := v_positions || v_found;
                END LOOP;
                IF v_next > v_head THEN
                    UPDATE tributary_logs SET head = v_next WHERE log = p_log;
                    PERFORM pg_notify('tributary_appended', p_log || ':' || v_next);
                END IF;
                RETURN v_positions;
            END
            $$
            """,
        ],
        // The durable head: the last position whose append returned to its appender, and so is on a synchronous
        // standby. PostgreSQL shows a commit to other sessions before the standby confirms it; a follower that
        // applied such an entry, and then saw the primary fail over to a standby without it, would hold a changeset
        // the log no longer has. Followers read no further than the durable head.
        [
            "ALTER TABLE tributary_logs ADD COLUMN durable_head bigint NOT NULL DEFAULT 0",
            "UPDATE tributary_logs SET durable_head = head",
        ],
        // What the new history holds of each retired epoch (beside `retired_epochs`): an epoch started from a daemon's
        // replica holds that replica's changesets of the retired epoch, and only an app that holds more of them is
        // reset. 0 for an epoch renewed from what the log holds.
        [
            "ALTER TABLE tributary_logs ADD COLUMN retired_through bigint[] NOT NULL DEFAULT '{}'",
            """
            UPDATE tributary_logs
            SET retired_through = array_fill(0::bigint, ARRAY[coalesce(array_length(retired_epochs, 1), 0)])
            """,
        ],
        // The writes of an app's changeset the appending daemon refused, stored with the changeset (device 0 and no
        // bytes when none were): every daemon that applies the entry keeps them, and sends the app their corrections
        // whichever daemon it syncs with next. A changeset appended again keeps its first refusal. The append of the
        // previous version stays, appending without refusals, for daemons not yet upgraded.
        [
            "ALTER TABLE tributary_changesets ADD COLUMN refused_by bigint NOT NULL DEFAULT 0",
            "ALTER TABLE tributary_changesets ADD COLUMN refused bytea NOT NULL DEFAULT ''",
            """
            CREATE FUNCTION tributary_append(
                p_log text, p_epoch uuid, p_origins bigint[], p_sequences bigint[], p_bodies bytea[],
                p_refused_by bigint[], p_refused bytea[])
            RETURNS bigint[] LANGUAGE plpgsql AS $$
            DECLARE
                v_head bigint;
                v_epoch uuid;
                v_next bigint;
                v_found bigint;
                v_positions bigint[] := '{}';
            BEGIN
                SELECT head, epoch INTO v_head, v_epoch FROM tributary_logs WHERE log = p_log FOR UPDATE;
                IF v_head IS NULL THEN
                    RAISE EXCEPTION 'the log % has no row in tributary_logs', p_log;
                END IF;
                IF v_epoch <> p_epoch THEN
                    RAISE EXCEPTION USING ERRCODE = 'TRB01',
                        MESSAGE = format('the log %s is of epoch %s now, not %s', p_log, v_epoch, p_epoch);
                END IF;
                v_next := v_head;
                FOR i IN 1 .. coalesce(array_length(p_origins, 1), 0) LOOP
                    SELECT seq INTO v_found FROM tributary_changesets
                        WHERE log = p_log AND origin = p_origins[i] AND origin_sequence = p_sequences[i];
                    IF v_found IS NULL THEN
                        v_next := v_next + 1;
                        INSERT INTO tributary_changesets (log, seq, origin, origin_sequence, body, refused_by, refused)
                            VALUES (p_log, v_next, p_origins[i], p_sequences[i], p_bodies[i], p_refused_by[i],
                                p_refused[i]);
                        v_found := v_next;
                    END IF;
                    v_positions := v_positions || v_found;
                END LOOP;
                IF v_next > v_head THEN
                    UPDATE tributary_logs SET head = v_next WHERE log = p_log;
                    PERFORM pg_notify('tributary_appended', p_log || ':' || v_next);
                END IF;
                RETURN v_positions;
            END
            $$
            """,
            """
            CREATE OR REPLACE FUNCTION tributary_append(
                p_log text, p_epoch uuid, p_origins bigint[], p_sequences bigint[], p_bodies bytea[])
            RETURNS bigint[] LANGUAGE sql AS $$
                SELECT tributary_append(p_log, p_epoch, p_origins, p_sequences, p_bodies,
                    array_fill(0::bigint, ARRAY[coalesce(array_length(p_origins, 1), 0)]),
                    array_fill(''::bytea, ARRAY[coalesce(array_length(p_origins, 1), 0)]))
            $$
            """,
        ],
    ]

    /// Brings the tables to ``version``.
    static func migrate(_ client: PostgresClient, logger: Logger) async throws {
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(migrationLock))", logger: logger)
            try await connection.query(
                "CREATE TABLE IF NOT EXISTS tributary_schema (version integer NOT NULL)", logger: logger)
            var current: Int32?
            let rows = try await connection.query("SELECT version FROM tributary_schema", logger: logger)
            for try await value in rows.decode(Int32.self) { current = value }
            if current == nil {
                try await connection.query("INSERT INTO tributary_schema (version) VALUES (0)", logger: logger)
            }
            let found = current ?? 0
            guard found <= version else {
                throw SharedLogError(
                    .incompatible,
                    "the shared log's tables are at version \(found), written by a newer tributaryd; this one "
                        + "knows version \(version): upgrade it")
            }
            for step in Int(found)..<Int(version) {
                for statement in migrations[step] {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
            }
            if found < version {
                try await connection.query("UPDATE tributary_schema SET version = \(version)", logger: logger)
                logger.info("shared log tables migrated from version \(found) to \(version)")
            }
        }
    }

    /// Creates the log `name` (with a fresh epoch) unless it exists; returns its epoch, the epochs renewals retired,
    /// and what the new history holds of each (``SharedLog/RetiredEpoch``).
    static func createLog(_ name: String, _ client: PostgresClient, logger: Logger) async throws -> (
        UUID, [SharedLog.RetiredEpoch]
    ) {
        try await client.query(
            "INSERT INTO tributary_logs (log, epoch) VALUES (\(name), \(UUID())) ON CONFLICT (log) DO NOTHING",
            logger: logger)
        var found: (UUID, [SharedLog.RetiredEpoch])?
        let rows = try await client.query(
            "SELECT epoch, retired_epochs, retired_through FROM tributary_logs WHERE log = \(name)", logger: logger)
        for try await (epoch, retired, through) in rows.decode((UUID, [UUID], [Int64]).self) {
            found = (
                epoch,
                retired.enumerated().map { index, epoch in
                    SharedLog.RetiredEpoch(
                        epoch: epoch, heldThrough: index < through.count ? UInt64(max(0, through[index])) : 0)
                }
            )
        }
        guard let found else {
            throw SharedLogError(.incompatible, "the log '\(name)' was not found after it was created")
        }
        return found
    }
}
