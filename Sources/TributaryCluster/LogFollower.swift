public import Tributary

/// Applies a cluster's shared log to a daemon's replica, in log order, and remembers how far it got.
///
/// Every daemon of a cluster has the cluster's replica id and adopts the log's changesets in the log's order, so
/// daemons that applied the log to the same position hold the same replica (docs/design/Cluster.md). A follower
/// reads the entries after the replica's position, integrates them (adopted, as an app's upload) in one commit per
/// read, then stores the new position. A crash between the two applies those entries again, which integrates
/// nothing twice.
public actor LogFollower {
    /// The log followed.
    public nonisolated let log: SharedLog
    /// The replica the log is applied to.
    public nonisolated let replica: Replica
    /// The last position applied.
    public private(set) var applied: UInt64
    /// The most entries one commit applies.
    public let batchLimit: Int

    /// A follower of `log` for `replica`, which resumes where the replica's stored position says.
    ///
    /// - Throws: ``SharedLogError`` with ``SharedLogError/Code/incompatible`` when the replica followed a log of
    ///   another epoch (restored from a backup, or another log): its state cannot be continued from this log, and
    ///   the daemon's replica must be made again from it.
    public init(log: SharedLog, replica: Replica, batchLimit: Int = 1_000) throws {
        self.log = log
        self.replica = replica
        self.batchLimit = max(1, batchLimit)
        guard let stored = try replica.sharedLogPosition() else {
            applied = 0
            return
        }
        guard stored.epoch == log.epoch else {
            throw SharedLogError(
                .incompatible,
                "the replica followed the shared log '\(log.configuration.log)' of epoch \(stored.epoch), and the "
                    + "log's epoch is now \(log.epoch) (its history was replaced): start this daemon from an empty "
                    + "directory so that it applies the log from its start")
        }
        applied = stored.position
    }

    /// Applies every entry after ``applied``, a batch per commit, and returns the position reached.
    @discardableResult
    public func catchUp() async throws -> UInt64 {
        while true {
            let entries = try await log.entries(after: applied, limit: batchLimit)
            guard let last = entries.last else { return applied }
            let replica = replica
            let bodies = entries.map(\.body)
            let results = try await offload {
                try replica.integrate(batches: [IncomingChangesets(bodies, adopt: true)])
            }
            if case .failure(let error) = results.first {
                throw error
            }
            applied = last.sequence
            let (epoch, position) = (log.epoch, applied)
            try await offload { try replica.setSharedLogPosition(epoch: epoch, position: position) }
        }
    }

    /// Follows the log until the task is cancelled: catches up when an append is announced, and at least every
    /// `interval` (announcements made while the listening connection reconnects are lost). Errors are retried
    /// after `interval`; `failed` hears of each.
    public func run(
        interval: Duration = .seconds(1), failed: @escaping @Sendable (any Error) -> Void = { _ in }
    ) async {
        let wakes = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let listener = Task { [log] in
            while !Task.isCancelled {
                do {
                    for try await _ in log.appendNotifications() { wakes.continuation.yield() }
                } catch {
                    failed(error)
                }
                try? await Task.sleep(for: interval)
            }
        }
        let ticker = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                wakes.continuation.yield()
            }
        }
        defer {
            listener.cancel()
            ticker.cancel()
            wakes.continuation.finish()
        }
        var iterator = wakes.stream.makeAsyncIterator()
        repeat {
            do {
                try await catchUp()
            } catch {
                failed(error)
            }
        } while await iterator.next() != nil && !Task.isCancelled
    }
}
