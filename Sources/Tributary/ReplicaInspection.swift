import TributaryModel

extension Replica {
    /// What debugging tools read of a replica: its summary, log entries, decoded changesets, past states, and a
    /// verification that writes no memory-bound state. `tributary-log` is built on it. Apps rarely need it.
    public var inspection: ReplicaInspection { ReplicaInspection(replica: self) }
}

/// Read-only views of a replica's log and state for debugging tools (``Replica/inspection``). Every call reads one
/// snapshot; none changes the replica, except ``replay(through:into:configuration:)``, which writes a new one.
public struct ReplicaInspection: Sendable {
    let replica: Replica

    /// A summary of the replica: format, schema, version vector, log statistics, object counts and storage.
    ///
    /// - Complexity: O(n + m) for n log entries (each checksum is checked) and m objects.
    /// - Throws: ``TributaryError`` with `.corrupted` naming the first damaged log entry, or a storage code.
    public func summary() throws -> ReplicaSummary { try replica.summary() }

    /// Counts and sizes of the log, from a scan of its entries that checks every checksum.
    public func logStatistics() throws -> LogStatistics { try replica.logStatistics() }

    /// The header of the log entry at `localSequence`, its checksum checked, or `nil` when the log has no such entry.
    /// It does not check the chain to the entry before, so one damaged entry does not hide the next.
    ///
    /// - Throws: ``TributaryError`` with `.corrupted` when the entry is damaged.
    public func logEntry(at localSequence: UInt64) throws -> LogEntrySummary? {
        try replica.logEntry(at: localSequence)
    }

    /// Visits the log's entries from `start` through `end` (inclusive) in order, checking each checksum and the
    /// chain, until `body` returns `false`.
    ///
    /// - Throws: ``TributaryError`` with `.corrupted` naming the first damaged entry.
    public func forEachLogEntry(
        from start: UInt64 = 1, through end: UInt64? = nil, _ body: (LogEntrySummary) throws -> Bool
    ) throws {
        try replica.forEachLogEntry(from: start, through: end, body)
    }

    /// Visits the decoded changesets from `start` through `end` in log order, until `body` returns `false`.
    public func forEachChangeset(
        from start: UInt64 = 1, through end: UInt64? = nil, _ body: (LogEntrySummary, Changeset) throws -> Bool
    ) throws {
        try replica.forEachChangeset(from: start, through: end, body)
    }

    /// The changeset at `localSequence`, decoded.
    ///
    /// - Throws: ``TributaryError`` with `.corrupted` when the entry is damaged or missing.
    public func changeset(at localSequence: UInt64) throws -> Changeset { try replica.changeset(at: localSequence) }

    /// The state as of local sequence `localSequence`, rebuilt by replaying the log from its start.
    ///
    /// - Complexity: O(n) in the changesets replayed; memory in proportion to the objects.
    public func objects(asOf localSequence: UInt64, progress: ((Int) -> Void)? = nil) throws -> ReplayedObjects {
        try replica.objects(asOf: localSequence, progress: progress)
    }

    /// Writes a new replica directory holding the log through `localSequence` (entries copied byte for byte) and
    /// views rebuilt from it, with a replica id of its own.
    ///
    /// - Parameters:
    ///   - localSequence: the last entry to copy.
    ///   - directory: a directory that does not exist yet, or is empty.
    ///   - configuration: how to open the new replica (its `readOnly` and `replicaID` are ignored).
    /// - Returns: the new replica, open.
    /// - Throws: ``TributaryError`` with `.invalidValue` when `directory` holds anything, `.corrupted` for a damaged
    ///   entry in the copied range.
    @discardableResult
    public func replay(
        through localSequence: UInt64, into directory: String,
        configuration: Replica.Configuration = Replica.Configuration()
    ) throws -> Replica {
        try replica.replay(through: localSequence, into: directory, configuration: configuration)
    }

    /// ``Replica/verify(progress:)`` that replays into scratch views in `scratchDirectory`, whatever the replica's
    /// size, keeping at most 131,072 records in memory as ``Replica/rebuildViews()`` does, so that memory stays
    /// bounded. The scratch views are written without flushing; the caller removes `scratchDirectory` afterwards.
    ///
    /// - Parameters:
    ///   - scratchDirectory: a directory that does not exist yet, or is empty.
    ///   - progress: called every 1,024 changesets replayed with the number replayed so far and the total, and now
    ///     and then during the comparison that follows (with the same figures).
    /// - Throws: ``TributaryError`` when storage cannot be read, or the scratch directory cannot be written
    ///   (`.invalidValue` when it is not empty).
    public func verify(
        rebuildingIn scratchDirectory: String, progress: ((Int, Int) -> Void)? = nil
    ) throws -> VerificationReport {
        try replica.verify(rebuildingIn: scratchDirectory, progress: progress)
    }

    /// A digest of the object records, in key order: replicas that hold byte-identical records have equal digests.
    public func recordsDigest() throws -> UInt64 { try replica.recordsDigest() }
}
