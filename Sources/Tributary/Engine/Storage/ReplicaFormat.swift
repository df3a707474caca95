import TributaryStorage

/// The on-disk format of a replica directory, and the one place that raises an older format to the current one.
///
/// The format is stored in the replica's identity database under ``key``. It names how the log, the views and the
/// identity are laid out and which merge rules built the views; a build reads the formats up to ``current``.
///
/// - 1: the format of release 0.1.0.
/// - 2: a format-1 replica whose log was compacted, or that started from another replica's base state: its log
///   starts after a base (``compacted``). Only the commit that stores the first compaction marker raises a replica to
///   it, so replicas never compacted stay readable by release 0.1.0, and that release refuses a compacted one as
///   newer instead of reading its log as damaged.
/// - 3: records keep no erased list elements (earlier formats kept each as a tombstone), whether the log was
///   compacted or not; the compaction marker says whether the log starts after a base. Format 1 and 2 replicas are
///   raised to it at their first open for writing, which rewrites the records that held erased elements.
/// - 4: the version vector is stored with the local sequence of the log entry it is whole through, and a commit whose
///   only change to the vector is the dot of the entry it appends last does not store it (a local commit, nearly
///   always): the replica's vector is the stored one advanced by the dot of the log's last entry when that entry is
///   a later one. A build of format 3 would read the stored vector alone and give a new changeset a dot already
///   used, so format 4 is refused there as newer. A vector stored by format 3 (without its entry) reads as whole, and
///   the first commit stores it with its entry, so the step changes nothing.
///
/// A change to what a replica stores raises ``current`` and registers one ``Upgrade`` in ``upgrades`` that turns
/// a directory of the previous format into the new one, with a test that opens a directory of the previous format.
/// Opening a replica of an older format for writing runs every step from its format on, in order, and stores the new
/// format, all in one write transaction: an interrupted upgrade leaves the replica as it was, and runs again at the
/// next open. Opened read-only, a replica of an older format is read as it is when every step from its format rewrites
/// nothing (``Upgrade/readsAsItIs``), and refused otherwise, since its views are not what this build reads.
///
/// Development builds before 0.1.0 stored their format under another key (``developmentKey``); their replicas are
/// refused with ``TributaryError/Code/developmentFormat`` and rebuilt from their logs
/// (``Replica/rebuild(fromLogOf:into:through:configuration:)``), whose entries every build reads alike.
package enum ReplicaFormat {
    /// The replica format this build writes for a new replica, and raises older ones to.
    package static let current: UInt8 = 4

    /// The highest format this build reads.
    package static let newest: UInt8 = current

    /// Where the identity database keeps the format: one byte.
    package static let key = Array("replicaFormat".utf8)

    /// Where development builds before 0.1.0 kept their own format numbers (1 to 7).
    package static let developmentKey = Array("format".utf8)

    /// One step that raises a replica of format `from` to `from + 1`, inside the write transaction that stores the
    /// new format.
    struct Upgrade: Sendable {
        /// The format this step reads.
        var from: UInt8
        /// What the step changes, for errors and logs.
        var summary: String
        /// Whether this build reads a replica of format `from` correctly as it is (the step rewrites nothing): a
        /// read-only open of one that only such steps separate from the current format reads it without raising it.
        var readsAsItIs = false
        /// Rewrites what differs, in `transaction`.
        var apply: @Sendable (Replica, TributaryStorageWriteTransaction) throws -> Void
    }

    /// The registered steps, by ascending `from`.
    static let upgrades: [Upgrade] = [
        Upgrade(
            from: 1,
            summary: "nothing to rewrite: format 2 marked a compacted log, which the compaction marker records too",
            readsAsItIs: true, apply: { _, _ in }),
        Upgrade(
            from: 2, summary: "erased list elements are dropped from the stored records",
            apply: { replica, txn in try replica.rewriteRecordsInCurrentEncoding(in: txn) }),
        Upgrade(
            from: 3,
            summary: "nothing to rewrite: format 4 stores the version vector only when a commit changes it otherwise "
                + "than by the dot of its last log entry, and reads a vector stored by format 3 as whole",
            readsAsItIs: true, apply: { _, _ in }),
    ]

    /// The steps that raise a replica of format `stored` to `target`, or `nil` when some step is missing.
    static func steps(from stored: UInt8, to target: UInt8, in upgrades: [Upgrade]) -> [Upgrade]? {
        var steps: [Upgrade] = []
        var format = stored
        while format < target {
            guard let step = upgrades.first(where: { $0.from == format }) else { return nil }
            steps.append(step)
            format += 1
        }
        return steps
    }

    /// The message for a replica that a development build before 0.1.0 wrote in its format `developmentFormat`.
    static func developmentFormatMessage(directory: String, developmentFormat: UInt8?) -> String {
        let which = developmentFormat.map { " (development format \($0))" } ?? ""
        return "\(directory) was written by a development build of Tributary from before release 0.1.0\(which), "
            + "which this build does not open. Its log can still be read: rebuild the replica into a new directory "
            + "with `tributary-log replay \(directory) --out NEW-DIRECTORY` (every changeset is kept; the new replica "
            + "gets its own replica id), or delete the directory and sync it again from a peer"
    }
}
