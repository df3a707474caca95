public import Foundation
public import Tributary

/// Applies a cluster's shared log to a daemon's replica, in log order, and remembers how far it got.
///
/// Every daemon of a cluster has the cluster's replica id and adopts the log's changesets in the log's order, so
/// daemons that applied the log to the same position hold the same replica (docs/design/Cluster.md). A follower
/// reads the entries after the replica's position and integrates them (adopted, as an app's upload) in one commit per
/// read, which also stores the new position with the changeset at it.
public actor LogFollower {
    /// The log followed.
    public nonisolated let log: SharedLog
    /// The replica the log is applied to.
    public nonisolated let replica: Replica
    /// This machine's name, as the log's list of followers shows it (read once: it may take a lookup).
    public static let host = ProcessInfo.processInfo.hostName
    /// This follower's id in the log's list of followers (``SharedLog/followers()``): a fresh one per process, so
    /// that a copy of a daemon's replica started elsewhere is a follower of its own.
    public nonisolated let id = UUID()
    /// The position last recorded in the log's list of followers, and when.
    private var recorded: (position: UInt64, at: ContinuousClock.Instant)?
    /// The last position applied.
    public private(set) var applied: UInt64
    /// The changeset at ``applied`` (its origin and origin sequence), when known: the log holds another there once it
    /// went back and grew again.
    private var lastApplied: Dot?
    /// The highest position of the log this follower has heard of (from a read or an announced append): with
    /// ``applied``, how far behind the log the replica is.
    public private(set) var knownHead: UInt64 = 0
    /// The most entries one commit applies.
    public let batchLimit: Int
    /// The catch-up running now: one at a time, so that two callers do not integrate the same entries twice over.
    private var running: Task<Void, any Error>?
    /// The changesets the replica refused as it applied them, with the reason, by dot (the latest
    /// ``rememberedRefusals``): what the daemon that appended one tells the app that uploaded it.
    private var refusals: [Dot: String] = [:]
    private var refusalOrder: [Dot] = []
    /// How many refusals ``refusal(of:)`` remembers.
    static let rememberedRefusals = 10_000

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
            lastApplied = nil
            return
        }
        guard stored.epoch == log.epoch else {
            throw SharedLogError(
                .incompatible,
                "the replica followed the shared log '\(log.configuration.log)' of epoch \(stored.epoch), and the "
                    + "log's epoch is now \(log.epoch) (its history was replaced): start this daemon from an empty "
                    + "directory so that it applies the log from its start, or, when the new epoch started from a "
                    + "daemon's replica, from a copy of that replica")
        }
        applied = stored.position
        lastApplied = stored.last
    }

    /// Applies every entry after ``applied``, a batch per commit, and returns the position reached. A call made
    /// while another runs waits for it, then applies what is left.
    @discardableResult
    public func catchUp() async throws -> UInt64 {
        while let running { _ = try? await running.value }
        // The task runs on this actor, so it starts only after `running` names it, and clears it when it ends.
        let task = Task {
            defer { running = nil }
            try await applyAvailable()
        }
        running = task
        try await task.value
        return applied
    }

    /// Returns once the replica has applied the log through `position`, catching up as needed.
    ///
    /// - Throws: what reading or applying the log throws; ``SharedLogError/Code/invalidArgument`` when the log ends
    ///   before `position`.
    public func waitUntilApplied(_ position: UInt64) async throws {
        while applied < position {
            // A catch-up under way may take the position with it: wait for it before starting another, so that
            // uploads waiting together share one commit.
            if let running {
                _ = try? await running.value
                continue
            }
            let before = applied
            try await catchUp()
            if applied == before && applied < position {
                throw SharedLogError(
                    .invalidArgument,
                    "the shared log '\(log.configuration.log)' ends at \(applied), before position \(position)")
            }
        }
    }

    /// An announced head. Announcements arrive after the commits they announce, and a read may have applied more
    /// meanwhile: an announced head behind ``applied`` says nothing about the log going back.
    private func heard(head: UInt64) { knownHead = max(knownHead, head) }

    /// How the log was found to have gone back, when it was: its head read behind ``applied``, or another changeset
    /// at ``applied`` than the one applied there. The log lost commits this replica applied (an asynchronous promotion,
    /// a restore from a backup), and the replica can no longer follow it: positions it passed are given to new
    /// changesets it would never apply.
    public private(set) var wentBack: String?

    /// Reads the log's entry at ``applied`` and throws if it is missing or another changeset than the one applied there
    /// (see ``wentBack``): what a daemon checks before it serves.
    ///
    /// - Throws: ``SharedLogError`` with ``SharedLogError/Code/incompatible`` when the log went back; what reading
    ///   the log throws.
    public func checkPosition() async throws {
        guard applied > 0 else { return }
        if try await log.compactedThrough() >= applied {
            // The entry at the position is compacted away: the head alone says whether the log went back.
            let head = try await log.head()
            if head < applied { noteWentBack("its head is \(head)") }
            try throwIfWentBack()
            return
        }
        let entry = try await log.entries(after: applied - 1, limit: 1).first
        if let entry, entry.sequence == applied {
            let found = Dot(origin: entry.origin, sequence: entry.originSequence)
            if let lastApplied, lastApplied != found {
                // The log went back and grew again past this replica's position, with other changesets.
                noteWentBack("it holds \(found) at position \(applied), where this replica applied \(lastApplied)")
            }
        } else {
            noteWentBack("its head is \(try await log.head())")
        }
        try throwIfWentBack()
    }

    /// Records that the log went back (`how`, for the error); catching up fails from then on.
    public func noteWentBack(_ how: String) {
        if wentBack == nil { wentBack = how }
    }

    /// Why the replica refused the changeset `dot` when it applied it from the log, or `nil` when it did not (or
    /// refused it too long ago to remember).
    public func refusal(of dot: Dot) -> String? { refusals[dot] }

    private func throwIfWentBack() throws(SharedLogError) {
        guard let wentBack else { return }
        throw SharedLogError(
            .incompatible,
            "the shared log '\(log.configuration.log)' went back: \(wentBack), and this replica applied it through "
                + "\(applied) (PostgreSQL lost commits: an asynchronous failover or a restore from a backup). It "
                + "cannot follow the log any more: give the log a new epoch (tributaryd --renew-epoch, with "
                + "--from-replica once the log was compacted), then start this daemon on an empty directory (or on "
                + "a copy of the new epoch's replica)")
    }

    private func applyAvailable() async throws {
        try throwIfWentBack()
        while true {
            let entries = try await log.entries(after: applied, limit: batchLimit)
            guard let last = entries.last else { return }
            guard entries[0].sequence == applied + 1 else {
                throw SharedLogError(
                    .incompatible,
                    "the shared log '\(log.configuration.log)' holds no entry \(applied + 1): its next is "
                        + "\(entries[0].sequence) (its tables are damaged)")
            }
            knownHead = max(knownHead, last.sequence)
            let replica = replica
            var batch = IncomingChangesets(entries.map(\.body), adopt: true)
            // The writes the appending daemon refused are kept here too: the app may sync with this daemon next.
            batch.refusals = entries.compactMap { entry in
                entry.refusal.map {
                    RefusalRecord(
                        device: $0.device, changeset: Dot(origin: entry.origin, sequence: entry.originSequence),
                        objects: $0.objects)
                }
            }
            let position = SharedLogPosition(
                epoch: log.epoch, position: last.sequence,
                last: Dot(origin: last.origin, sequence: last.originSequence))
            // The position is stored in the commit that applies the entries: a crash leaves both or neither.
            let results = try await offload { [batch] in
                try replica.integrate(batches: [batch], sharedLogPosition: position)
            }
            switch results.first {
            case .failure(let error): throw error
            case .success(let report): remember(report.rejected)
            case nil: break
            }
            applied = last.sequence
            lastApplied = position.last
        }
    }

    /// Records this daemon's position in the log's list of followers, which bounds compactions of the log: when it
    /// moved, at most once a second, and at least every 30 seconds; now when `force` is set. `host` names the daemon
    /// for operators.
    public func recordPosition(host: String = LogFollower.host, force: Bool = false) async throws {
        let now = ContinuousClock.now
        if !force, let recorded {
            let since = recorded.at.duration(to: now)
            guard (recorded.position != applied && since >= .seconds(1)) || since >= .seconds(30) else { return }
        }
        try await log.recordFollower(id, applied: applied, now: UInt64(Date().timeIntervalSince1970), host: host)
        recorded = (applied, now)
    }

    private func remember(_ rejected: [IntegrationReport.Rejection]) {
        for rejection in rejected where refusals.updateValue(rejection.reason, forKey: rejection.dot) == nil {
            refusalOrder.append(rejection.dot)
        }
        if refusalOrder.count > Self.rememberedRefusals {
            let dropped = refusalOrder.count - Self.rememberedRefusals
            for dot in refusalOrder.prefix(dropped) { refusals[dot] = nil }
            refusalOrder.removeFirst(dropped)
        }
    }

    /// Follows the log until the task is cancelled: catches up when an append is announced, and at least every
    /// `interval` (announcements made while the listening connection reconnects are lost). Errors are retried
    /// after `interval`; `failed` hears of each. It returns early, after telling `failed`, when following cannot go
    /// on without an operator (``SharedLogError/Code/incompatible``: the log went back, its epoch was renewed, its
    /// tables are damaged; ``SharedLogError/Code/compacted``: it was compacted past this replica's position).
    public func run(
        interval: Duration = .seconds(1), host: String = LogFollower.host,
        failed: @escaping @Sendable (any Error) -> Void = { _ in }
    ) async {
        let wakes = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let listener = Task { [log] in
            while !Task.isCancelled {
                do {
                    for try await head in log.appendNotifications() {
                        heard(head: head)
                        wakes.continuation.yield()
                    }
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
                try await recordPosition(host: host)
            } catch {
                failed(error)
                if let error = error as? SharedLogError, error.code == .incompatible || error.code == .compacted {
                    return
                }
            }
        } while await iterator.next() != nil && !Task.isCancelled
    }
}

extension SharedLog {
    /// Opens (or creates) the replica in `directory` as a daemon of this log's cluster holds it: with the cluster's
    /// replica id (``replicaID``) and no clock bound of its own, since every daemon must apply what the log holds
    /// whatever its clock says (the daemon that takes an upload checks the upload's clock before appending it).
    ///
    /// - Throws: ``SharedLogError`` with ``SharedLogError/Code/incompatible`` when the directory holds another
    ///   replica (a daemon of a cluster builds its replica from the log: start it on an empty directory); what
    ///   `Replica.open` throws.
    public func openReplica(directory: String, configuration: Replica.Configuration = Replica.Configuration()) throws
        -> Replica
    {
        var configuration = configuration
        configuration.replicaID = replicaID
        configuration.maximumClockSkew = .seconds(Int64.max)
        let replica = try Replica.open(directory: directory, configuration: configuration)
        guard replica.replicaID == replicaID else {
            replica.close()
            throw SharedLogError(
                .incompatible,
                "\(directory) holds replica \(replica.replicaID), not replica \(replicaID) of the cluster of log "
                    + "'\(self.configuration.log)': a daemon of a cluster builds its replica from the log; start it on "
                    + "an empty directory (or on a copy of another daemon's replica of this epoch, which a compacted "
                    + "log needs)")
        }
        return replica
    }
}
