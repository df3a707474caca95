import CoreMetrics
import Prometheus
import Tributary
import TributaryModel
import TributaryProtocol
import TributarySync

/// The daemon's metrics, recorded through swift-metrics into the Prometheus registry the server exposes at
/// `/metrics`. docs/Operating.md lists each with its meaning.
///
/// Counters and histograms move as the daemon works; the gauges that describe state (storage, pending area, peer
/// links) are sampled when the registry is scraped (``refresh(_:)``).
final class DaemonMetrics: SessionMeter {
    let registry: PrometheusCollectorRegistry

    private let appSessions: CoreMetrics.Gauge
    private let peerSessions: CoreMetrics.Gauge
    private let receivedBytes: CoreMetrics.Counter
    private let sentBytes: CoreMetrics.Counter
    private let receivedChangesets: CoreMetrics.Counter
    private let sentChangesets: CoreMetrics.Counter
    private let commitDuration: CoreMetrics.Timer
    private let commitBatches: CoreMetrics.Recorder
    private let pendingChangesets: CoreMetrics.Gauge
    private let mapSize: CoreMetrics.Gauge
    private let usedBytes: CoreMetrics.Gauge
    private let readerSlotsHeld: CoreMetrics.Gauge
    private let readersActive: CoreMetrics.Gauge
    private let oldestReaderLag: CoreMetrics.Gauge
    private let peers: [PeerGauges]
    /// Sessions refused before they opened, by the error code they were refused with.
    private let refusals: [SyncError.Code: CoreMetrics.Counter]
    /// The codes a session can be refused with at its handshake, each counted from zero.
    static let refusalCodes: [SyncError.Code] = [
        .unsupportedVersion, .unauthorized, .roleRefused, .resetRequired, .tokenExpired, .schemaVersionTooOld,
        .unavailable, .protocolViolation, .storage,
    ]

    /// The gauges of one link to a configured peer.
    struct PeerGauges {
        let connected: CoreMetrics.Gauge
        let behind: CoreMetrics.Gauge
        let sinceCaughtUp: CoreMetrics.Gauge
    }

    /// The label of the group commit timer, whose buckets are set for disk syncs.
    static let commitDurationLabel = "tributary_group_commit_duration_seconds"
    static let commitBatchesLabel = "tributary_group_commit_batches"

    /// Where what sessions hold is reported, with a retention window.
    private let retention: Retention?
    private let logEntries: CoreMetrics.Gauge
    private let compactedThrough: CoreMetrics.Gauge
    private let compactions: CoreMetrics.Gauge
    private let servedReplicas: CoreMetrics.Gauge
    /// In a cluster: the last shared-log position applied, and how far behind the log's known head that is.
    private let cluster: (applied: CoreMetrics.Gauge, lag: CoreMetrics.Gauge)?

    init(
        registry: PrometheusCollectorRegistry, peers: [SyncEndpoint], retention: Retention? = nil,
        cluster: Bool = false
    ) {
        self.registry = registry
        self.retention = retention
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets[Self.commitDurationLabel] = [
            .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
            .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
            .milliseconds(500), .seconds(1), .seconds(5),
        ]
        factory.valueHistogramBuckets[Self.commitBatchesLabel] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024]
        appSessions = CoreMetrics.Gauge(
            label: "tributary_sessions_open", dimensions: [("role", "app")], factory: factory)
        peerSessions = CoreMetrics.Gauge(
            label: "tributary_sessions_open", dimensions: [("role", "peer")], factory: factory)
        receivedBytes = CoreMetrics.Counter(label: "tributary_received_bytes_total", factory: factory)
        sentBytes = CoreMetrics.Counter(label: "tributary_sent_bytes_total", factory: factory)
        receivedChangesets = CoreMetrics.Counter(label: "tributary_received_changesets_total", factory: factory)
        sentChangesets = CoreMetrics.Counter(label: "tributary_sent_changesets_total", factory: factory)
        commitDuration = CoreMetrics.Timer(label: Self.commitDurationLabel, factory: factory)
        commitBatches = CoreMetrics.Recorder(label: Self.commitBatchesLabel, aggregate: true, factory: factory)
        pendingChangesets = CoreMetrics.Gauge(label: "tributary_pending_changesets", factory: factory)
        mapSize = CoreMetrics.Gauge(label: "tributary_storage_map_size_bytes", factory: factory)
        usedBytes = CoreMetrics.Gauge(label: "tributary_storage_used_bytes", factory: factory)
        readerSlotsHeld = CoreMetrics.Gauge(label: "tributary_storage_reader_slots_held", factory: factory)
        readersActive = CoreMetrics.Gauge(label: "tributary_storage_readers_active", factory: factory)
        oldestReaderLag = CoreMetrics.Gauge(label: "tributary_storage_oldest_reader_lag_transactions", factory: factory)
        self.peers = peers.map { peer in
            let labels = [("peer", peer.description)]
            return PeerGauges(
                connected: CoreMetrics.Gauge(label: "tributary_peer_connected", dimensions: labels, factory: factory),
                behind: CoreMetrics.Gauge(
                    label: "tributary_peer_behind_changesets", dimensions: labels, factory: factory),
                sinceCaughtUp: CoreMetrics.Gauge(
                    label: "tributary_peer_seconds_since_caught_up", dimensions: labels, factory: factory))
        }
        var refusals: [SyncError.Code: CoreMetrics.Counter] = [:]
        for code in Self.refusalCodes {
            refusals[code] = CoreMetrics.Counter(
                label: "tributary_sessions_refused_total", dimensions: [("code", code.description)], factory: factory)
        }
        self.refusals = refusals
        logEntries = CoreMetrics.Gauge(label: "tributary_log_entries", factory: factory)
        compactedThrough = CoreMetrics.Gauge(label: "tributary_log_compacted_through", factory: factory)
        compactions = CoreMetrics.Gauge(label: "tributary_compactions", factory: factory)
        servedReplicas = CoreMetrics.Gauge(label: "tributary_retention_replicas", factory: factory)
        self.cluster =
            cluster
            ? (
                CoreMetrics.Gauge(label: "tributary_cluster_applied_position", factory: factory),
                CoreMetrics.Gauge(label: "tributary_cluster_lag_entries", factory: factory)
            ) : nil
        appSessions.record(0)
        peerSessions.record(0)
    }

    // MARK: Sessions

    func sessionsOpen(apps: Int, peers: Int) {
        appSessions.record(apps)
        peerSessions.record(peers)
    }

    /// A session refused before it opened, with `code`; codes not counted alone are not counted.
    func sessionRefused(_ code: SyncError.Code) { refusals[code]?.increment() }

    func received(bytes: Int) { receivedBytes.increment(by: bytes) }
    func sent(bytes: Int) { sentBytes.increment(by: bytes) }
    func received(changesets: Int) { receivedChangesets.increment(by: changesets) }
    func sent(changesets: Int) { sentChangesets.increment(by: changesets) }
    func holds(_ vector: VersionVector, replica: ReplicaID) { retention?.holds(vector, replica: replica) }
    func session(with replica: ReplicaID, open: Bool) { retention?.session(with: replica, open: open) }

    // MARK: Group commits

    func committed(duration: Duration, batches: Int) {
        let (seconds, attoseconds) = duration.components
        commitDuration.recordNanoseconds(seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000)
        commitBatches.record(batches)
    }

    // MARK: Sampled state

    /// What the gauges sampled at a scrape show.
    struct Sample: Sendable {
        var pendingChangesets: Int?
        var storage: StorageStatistics?
        var readers: StorageReaders?
        var peers: [PeerSample]
        /// The log's entries, and the last entry a compaction replaced (0 for none).
        var log: (entries: Int, compactedThrough: UInt64)?
        /// In a cluster: the shared-log position applied, and the highest position heard of.
        var cluster: (applied: UInt64, knownHead: UInt64)?
    }

    /// One configured peer link at a scrape.
    struct PeerSample: Sendable {
        var connected: Bool
        /// `nil` while the link is down.
        var standing: SessionStanding?
        /// Seconds since the link was last seen caught up (since the daemon started, when it never was).
        var secondsSinceCaughtUp: Double
    }

    /// Sets the sampled gauges. A figure that could not be read (a closed replica) leaves its gauge as it was.
    func refresh(_ sample: Sample) {
        if let pending = sample.pendingChangesets { pendingChangesets.record(pending) }
        if let storage = sample.storage {
            mapSize.record(storage.mapSize)
            usedBytes.record(storage.usedBytes)
        }
        if let readers = sample.readers {
            readerSlotsHeld.record(readers.slotsHeld)
            readersActive.record(readers.active)
            oldestReaderLag.record(readers.oldestLagTransactions ?? 0)
        }
        if let log = sample.log {
            logEntries.record(log.entries)
            compactedThrough.record(Double(log.compactedThrough))
        }
        if let cluster, let position = sample.cluster {
            cluster.applied.record(Double(position.applied))
            cluster.lag.record(Double(position.knownHead &- min(position.knownHead, position.applied)))
        }
        if let retention {
            compactions.record(retention.compactions)
            servedReplicas.record(retention.servedCount())
        }
        for (gauges, peer) in zip(peers, sample.peers) {
            gauges.connected.record(peer.connected ? 1 : 0)
            if let standing = peer.standing { gauges.behind.record(Double(standing.behind)) }
            gauges.sinceCaughtUp.record(peer.secondsSinceCaughtUp)
        }
    }

    /// The registry in the Prometheus text exposition format.
    func exposition() -> [UInt8] {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return buffer
    }
}
