import Tributary
import TributarySync

/// Commits the batches sessions receive in groups: the batches that arrive while a commit is running are committed
/// together in the next one, so one disk sync serves every session that uploaded meanwhile (group commit). A
/// session acknowledges its batch only after the commit that holds it returned.
actor Committer: BatchIntegrator {
    private let replica: Replica
    private var queue:
        [(batch: IncomingChangesets, bytes: Int, waiter: CheckedContinuation<IntegrationReport, any Error>)] =
            []
    private var running = false
    /// The most bytes of changesets one group commit takes; the rest wait for the next.
    private let maximumGroupBytes: Int

    /// The batches the last commit held.
    private var lastGroup = 0
    /// How long a commit waits for the rest of the last group's sessions.
    static let gatherDelay: Duration = .microseconds(250)

    /// Commits so far, and batches they held: their ratio is the grouping achieved.
    private(set) var commits = 0
    private(set) var batches = 0

    /// Where each commit's duration and batch count are recorded.
    private let metrics: DaemonMetrics?

    init(replica: Replica, maximumGroupBytes: Int = 64 << 20, metrics: DaemonMetrics? = nil) {
        self.replica = replica
        self.metrics = metrics
        self.maximumGroupBytes = maximumGroupBytes
    }

    nonisolated func integrate(_ changesets: [[UInt8]], adopt: Bool, author: String?, refusals: [RefusalRecord])
        async throws -> IntegrationReport
    {
        var batch = IncomingChangesets(changesets, adopt: adopt, requiredAuthor: author)
        batch.refusals = refusals
        return try await submit(batch)
    }

    private func submit(_ batch: IncomingChangesets) async throws -> IntegrationReport {
        try await withCheckedThrowingContinuation { continuation in
            queue.append((batch, batch.changesets.reduce(0) { $0 + $1.count }, continuation))
            if !running {
                running = true
                Task { await drain() }
            }
        }
    }

    private func drain() async {
        while !queue.isEmpty {
            // Fewer batches wait than the last group held: the rest of that group's sessions are likely sending
            // their next ones now (they were acknowledged together). A short wait lets one commit serve them too.
            if queue.count < lastGroup {
                try? await Task.sleep(for: Self.gatherDelay)
            }
            let group = takeGroup(from: &queue, maximumBytes: maximumGroupBytes) { $0.bytes }
            let replica = replica
            let batches = group.map(\.batch)
            let started = ContinuousClock.now
            do {
                let results = try await offload { try replica.integrate(batches: batches) }
                metrics?.committed(duration: .now - started, batches: group.count)
                for (index, result) in results.enumerated() {
                    group[index].waiter.resume(with: result.mapError { $0 as any Error })
                }
            } catch {
                for entry in group { entry.waiter.resume(throwing: error) }
            }
            commits += 1
            self.batches += group.count
            lastGroup = group.count
        }
        running = false
    }
}
