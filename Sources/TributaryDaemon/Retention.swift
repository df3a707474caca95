import Foundation
import Logging
import Synchronization
import Tributary
import TributaryCluster
import TributaryLog
import TributaryModel
import TributarySync

/// Keeps a daemon's log to what the replicas it serves may still need (docs/design/Compaction.md).
///
/// Every session reports what its replica holds: its `hello`, then each acknowledgement. The daemon keeps the latest
/// report of each replica, with its time. A replica that reported within the retention window, or is connected now,
/// is still served; the log entries every one of those holds are replaced by a base state, once that drops at least a
/// tenth of the log, and once the daemon has kept reports for a whole window without a gap. A replica that comes back
/// after the window lacks them, and is reset; one that holds nothing yet starts from the base.
///
/// In a cluster, devices report to whichever daemon they connect to: each round publishes this daemon's reports to
/// the shared log's tables and takes in the others', so that every daemon compacts its replica only through what every
/// device seen by any daemon holds; then one daemon at a time drops the shared log's entries every daemon applied.
final class Retention: Sendable {
    let replica: Replica
    /// In a cluster: the follower of the shared log, whose tables hold the cluster's reports.
    let cluster: LogFollower?
    /// Replicas that reported within this long are still served.
    let window: Duration
    /// How often a round runs: reports are stored at each, so a longer gap means the daemon was not listening.
    let interval: Duration
    private let logger: Logger
    private let state: Mutex<State>

    struct State {
        var reports: [ReplicaID: SyncReport]
        /// Reports changed since they were last stored.
        var changed: Set<ReplicaID> = []
        var compactions = 0
        var logCompactions = 0
        /// In a cluster: the replicas whose report this daemon only learned from the log (another daemon serves
        /// them). It publishes only what it heard itself: republished, a report learned a while ago could replace a
        /// fuller one made within the same second.
        var learned: Set<ReplicaID> = []
        /// The sessions open now, by replica (accepted or dialled): those replicas count as reporting now.
        var open: [ReplicaID: Int] = [:]
        /// The stored reports could not be read: nothing is compacted by this process.
        var unreadable = false
    }

    init(replica: Replica, cluster: LogFollower? = nil, window: Duration, interval: Duration, logger: Logger) {
        self.replica = replica
        self.cluster = cluster
        self.window = window
        self.interval = interval
        self.logger = logger
        var reports: [ReplicaID: SyncReport] = [:]
        var unreadable = false
        do {
            reports = try replica.syncReports(now: Self.now())
        } catch {
            unreadable = true
            logger.error("could not read the stored sync reports; this process compacts nothing: \(error)")
        }
        state = Mutex(State(reports: reports, unreadable: unreadable))
    }

    /// Rounds further apart than this mean the daemon did not keep reports meanwhile.
    private var gapSeconds: UInt64 { 2 * UInt64(max(1, interval.components.seconds)) + 60 }

    static func now() -> UInt64 { UInt64(Date().timeIntervalSince1970) }

    /// A session with `other` opened, or ended: while one is open the replica counts as reporting now, and when the
    /// last one ends, it reported then (however long ago its last acknowledgement was).
    func session(with other: ReplicaID, open: Bool, now: UInt64 = now()) {
        state.withLock { state in
            if open {
                state.open[other, default: 0] += 1
                return
            }
            let left = (state.open[other] ?? 1) - 1
            state.open[other] = left > 0 ? left : nil
            state.learned.remove(other)
            if let report = state.reports[other] {
                state.reports[other] = SyncReport(time: max(report.time, now), vector: report.vector)
                state.changed.insert(other)
            }
        }
    }

    private func connected() -> Set<ReplicaID> { state.withLock { Set($0.open.keys) } }

    private var windowSeconds: UInt64 { UInt64(max(0, window.components.seconds)) }

    /// Replica `other` holds at least `vector` now. The first report of a replica is stored at once (the others at
    /// the next round): a daemon killed before that round still counts it.
    func holds(_ vector: VersionVector, replica other: ReplicaID, now: UInt64 = now()) {
        let first = state.withLock { state in
            let known = state.reports[other] != nil
            var report = state.reports[other] ?? SyncReport(time: now, vector: VersionVector())
            report.time = max(report.time, now)
            report.vector.formUnion(vector)
            state.reports[other] = report
            state.changed.insert(other)
            state.learned.remove(other)
            return known ? nil : report
        }
        if let first {
            let replica = replica
            let logger = logger
            let log = cluster?.log
            Task.detached {
                do {
                    try replica.storeSyncReports([other: first])
                    // In a cluster, at once too: another daemon's compaction must count a device that only this one
                    // has seen.
                    try await log?.publishSyncReports([other: first], onlyNew: true)
                } catch {
                    logger.error("could not store the first sync report of \(other): \(error)")
                }
            }
        }
    }

    /// The compactions run since the daemon started.
    var compactions: Int { state.withLock { $0.compactions } }

    /// The reports of the replicas still served (connected now, or reported within the window), and the replicas
    /// connected now.
    private func served(now: UInt64) -> (reports: [ReplicaID: SyncReport], connected: Set<ReplicaID>) {
        let connected = connected()
        let reports = state.withLock { state in
            state.reports.filter { replica, report in
                connected.contains(replica) || now <= report.time || now - report.time <= windowSeconds
            }
        }
        return (reports, connected)
    }

    /// The replicas still served: connected now, or reported within the window.
    func servedCount(now: UInt64 = now()) -> Int {
        let (reports, connected) = served(now: now)
        return Set(reports.keys).union(connected).count
    }

    /// The least vector every replica still served holds: what a compaction may replace. `nil` when no replica is
    /// served (nothing constrains a compaction but the log's last entry).
    func stableVector(now: UInt64 = now()) -> VersionVector? {
        let served = served(now: now).reports.values.map(\.vector)
        guard var stable = served.first else { return nil }
        for vector in served.dropFirst() {
            var meet = VersionVector()
            for entry in stable.entries { meet.advance(entry.replica, to: min(entry.sequence, vector[entry.replica])) }
            stable = meet
        }
        return stable
    }

    /// Stores the reports that changed, and forgets those older than the window (they no longer hold anything back).
    func storeReports(now: UInt64 = now()) throws {
        let served = Set(served(now: now).reports.keys)
        let (changed, forgotten) = state.withLock { state in
            let forgotten = Set(state.reports.keys).subtracting(served)
            for replica in forgotten { state.reports.removeValue(forKey: replica) }
            let changed = state.reports.filter { state.changed.contains($0.key) }
            state.changed = []
            return (changed, forgotten)
        }
        try replica.storeSyncReports(changed, forgetting: forgotten)
    }

    /// One round: stores the reports, then compacts through what every replica still served holds, when that drops
    /// at least `minimumFraction` of the log's entries. Blocks for the compaction.
    ///
    /// Nothing is compacted before a whole retention has passed since the daemon began to keep reports (a daemon just
    /// given a retention does not know who synced before).
    ///
    /// `clusterSince` is since when the cluster's daemons have kept reports, in a cluster: it stands for this
    /// daemon's own coverage.
    @discardableResult
    func compactOnce(now: UInt64 = now(), minimumFraction: Double = 0.1, clusterSince: UInt64? = nil) throws
        -> CompactionOutcome?
    {
        try storeReports(now: now)
        let since = try clusterSince ?? replica.syncReportsCoverage(now: Self.now(), gap: gapSeconds)
        guard !state.withLock({ $0.unreadable }), now >= since, now - since >= windowSeconds else { return nil }
        // How far every replica still served holds the log.
        let servedCut = { [self] in
            try replica.compactionCut(coveredBy: stableVector(now: now) ?? replica.versionVector)
        }
        let cut = try servedCut()
        let from = try replica.logCompaction()?.through ?? 0
        let head = replica.lastLocalSequence
        guard cut > from, head > from, Double(cut - from) >= minimumFraction * Double(head - from) else { return nil }
        // Replicas that connected while the base was built count too: the cut must still hold for them.
        guard let outcome = try replica.compact(through: cut, now: now, stillAllowed: { try servedCut() >= $0 })
        else { return nil }
        state.withLock { $0.compactions += 1 }
        logger.notice(
            """
            compacted the log through entry \(outcome.compaction.through): \(outcome.droppedEntries) entries dropped, \
            the base holds \(outcome.baseRecords) records
            """)
        return outcome
    }

    /// The shared log's compactions this daemon made since it started.
    var logCompactions: Int { state.withLock { $0.logCompactions } }

    /// One round, in a cluster too: shares reports with the other daemons (in a cluster), compacts the replica
    /// (``compactOnce(now:minimumFraction:clusterSince:)``, on a thread of its own), then, in a cluster, compacts the
    /// shared log through what every daemon seen within the window applied, unless another daemon is doing so.
    @discardableResult
    func round(now: UInt64 = now(), minimumFraction: Double = 0.1) async throws -> CompactionOutcome? {
        guard let cluster else {
            return try await offload { [self] in try compactOnce(now: now, minimumFraction: minimumFraction) }
        }
        // A daemon whose log went back compacts nothing: its position no longer means what the log holds.
        guard await cluster.wentBack == nil else { return nil }
        let log = cluster.log
        let (reports, connected) = served(now: now)
        let learned = state.withLock { $0.learned }
        var published = reports.filter { !learned.contains($0.key) || connected.contains($0.key) }
        for replica in connected { published[replica]?.time = now }
        try await log.publishSyncReports(published)
        let shared = try await log.syncReports(since: now > windowSeconds ? now - windowSeconds : 0)
        state.withLock { state in
            // A device's holdings only grow (a reset device has a new id): what any daemon heard of it, it still
            // holds, so reports join, whichever is newer.
            for (replica, report) in shared {
                guard var known = state.reports[replica] else {
                    state.reports[replica] = report
                    state.learned.insert(replica)
                    continue
                }
                known.vector.formUnion(report.vector)
                known.time = max(known.time, report.time)
                state.reports[replica] = known
            }
        }
        let since = try await log.syncReportsCoverage(now: now, gap: gapSeconds)
        let outcome = try await offload { [self] in
            try compactOnce(now: now, minimumFraction: minimumFraction, clusterSince: since)
        }
        try await cluster.recordPosition(force: true)
        if let compaction = try await log.compact(window: windowSeconds, now: now) {
            state.withLock { $0.logCompactions += 1 }
            logger.notice(
                """
                compacted the shared log '\(log.configuration.log)' through position \(compaction.through): \
                \(compaction.dropped) entries dropped
                """)
        }
        return outcome
    }

    /// Runs ``round(now:minimumFraction:)`` now and every ``interval`` until the task is cancelled.
    func run() async {
        while !Task.isCancelled {
            do {
                _ = try await round()
            } catch {
                logger.error("compaction failed (the log is as it was, and is compacted again later): \(error)")
            }
            try? await Task.sleep(for: interval)
        }
    }
}
