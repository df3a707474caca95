import Tributary
import TributaryCluster
import TributaryModel
import TributarySync

/// Takes an app's upload the way a daemon of a cluster must (docs/design/Cluster.md): checks what depends on the
/// upload alone (it decodes, names the session's user as author, is not stamped too far ahead), appends it to the
/// shared log in PostgreSQL, then waits until this daemon's follower has applied the log through it, and answers
/// from what that application decided. Every daemon applies the same entries in the same order, so each reaches the
/// same decision; the app is acknowledged only after PostgreSQL committed its changesets.
///
/// Appends are grouped: the uploads that arrive while an append runs go to PostgreSQL together in the next one. An
/// append holds the log's head row until it commits, so appends to one log run one after another, and one commit per
/// upload would bound a daemon to one upload per disk sync.
actor ClusterCommitter: BatchIntegrator {
    let follower: LogFollower
    /// How far ahead of this machine's clock a changeset may be stamped (the replica's own bound is lifted in a
    /// cluster: daemons' clocks differ, and they must all apply what the log holds).
    let maximumClockSkew: Duration
    /// The most bytes of changesets one append takes; the rest wait for the next.
    private let maximumGroupBytes: Int

    private var queue: [(appends: [SharedLog.Append], bytes: Int, waiter: CheckedContinuation<[UInt64], any Error>)] =
        []
    private var running = false

    init(follower: LogFollower, maximumClockSkew: Duration, maximumGroupBytes: Int = 16 << 20) {
        self.follower = follower
        self.maximumClockSkew = maximumClockSkew
        self.maximumGroupBytes = maximumGroupBytes
    }

    nonisolated func integrate(_ changesets: [[UInt8]], adopt: Bool, author: String?, refusals: [RefusalRecord])
        async throws -> IntegrationReport
    {
        guard adopt else {
            throw TributaryError(
                .permissionDenied,
                "a daemon of a cluster takes uploads from apps only: its peers share the cluster's log in PostgreSQL, "
                    + "not peer links")
        }
        let replica = follower.replica
        let skew = maximumClockSkew
        let uploads = try await offload {
            try replica.checkUpload(changesets, requiredAuthor: author, maximumClockSkew: skew)
        }
        guard !uploads.isEmpty else { return IntegrationReport() }
        // Each refusal goes into the log with its changeset: every daemon that applies the entry keeps it.
        let refused = Dictionary(refusals.map { ($0.changeset, $0) }) { first, _ in first }
        let positions = try await append(
            uploads.map { upload in
                SharedLog.Append(
                    origin: upload.dot.origin, originSequence: upload.dot.sequence, body: upload.body,
                    refusal: refused[upload.dot].map { SharedLog.Refusal(device: $0.device, objects: $0.objects) })
            })
        do {
            try await follower.waitUntilApplied(positions.max() ?? 0)
        } catch {
            throw TributaryError(
                .storage,
                "the upload is stored in the cluster's shared log, but this daemon could not apply it yet ("
                    + "\(error)); retry later: the retried upload is recognised and stored once")
        }
        var report = IntegrationReport()
        var unaccounted: [SharedLogUpload] = []
        for upload in uploads {
            report.received.append(upload.dot)
            if let reason = await follower.refusal(of: upload.dot) {
                report.rejected.append(IntegrationReport.Rejection(dot: upload.dot, reason: reason))
            } else {
                unaccounted.append(upload)
            }
        }
        try await checkApplied(unaccounted, into: &report)
        return report
    }

    /// Checks that the replica holds (or keeps waiting, for a changeset it depends on) each of `uploads`, which the
    /// follower applied without refusing. One it lacks means the log gave positions the follower had passed already:
    /// the log went back (PostgreSQL lost commits), and acknowledging would tell the app its write is kept where this
    /// daemon never applied it. Otherwise it was refused when it was first uploaded, longer ago than the follower
    /// remembers.
    private func checkApplied(_ uploads: [SharedLogUpload], into report: inout IntegrationReport) async throws {
        guard !uploads.isEmpty else { return }
        let replica = follower.replica
        let missing = try await offload {
            let pending = try replica.pendingDots()
            return try uploads.filter { upload in
                try replica.heldSequence(of: upload.dot.origin) < upload.dot.sequence && !pending.contains(upload.dot)
            }
        }
        guard !missing.isEmpty else { return }
        let applied = await follower.applied
        if let head = try? await follower.log.head(), head < applied {
            await follower.noteWentBack("its head is \(head)")
            throw TributaryError(
                .storage,
                "the cluster's shared log went back: its head is \(head), and this daemon applied it through "
                    + "\(applied) (PostgreSQL lost commits: an asynchronous failover or a restore from a backup); this "
                    + "daemon takes no upload until the log is given a new epoch and it is started again on an empty "
                    + "directory (or a copy of the new epoch's replica)")
        }
        for upload in missing {
            report.rejected.append(
                IntegrationReport.Rejection(dot: upload.dot, reason: "refused when it was first uploaded"))
        }
    }

    /// Appends `appends` to the log with the others that wait, and returns their positions.
    private func append(_ appends: [SharedLog.Append]) async throws -> [UInt64] {
        try await withCheckedThrowingContinuation { continuation in
            queue.append(
                (appends, appends.reduce(0) { $0 + $1.body.count + ($1.refusal?.objects.count ?? 0) }, continuation))
            if !running {
                running = true
                Task { await drain() }
            }
        }
    }

    private func drain() async {
        while !queue.isEmpty {
            let group = takeGroup(from: &queue, maximumBytes: maximumGroupBytes) { $0.bytes }
            // A changeset uploaded twice in one group (an app that reconnected and sent it again meanwhile) is stored
            // once, and both get its position: the append recognises a changeset it stored earlier in the same call.
            let appends = group.flatMap(\.appends)
            do {
                // One position per changeset given, in order (the append checks it).
                let positions = try await follower.log.append(appends)
                var offset = 0
                for entry in group {
                    entry.waiter.resume(returning: Array(positions[offset..<offset + entry.appends.count]))
                    offset += entry.appends.count
                }
            } catch {
                let failure = TributaryError(
                    .storage,
                    "the cluster's shared log did not take the upload (\(error.message)); nothing of it was stored: "
                        + "retry later")
                for entry in group { entry.waiter.resume(throwing: failure) }
            }
        }
        running = false
    }
}
