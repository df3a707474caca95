import Tributary
import TributaryCluster
import TributaryModel
import TributarySync

/// Takes an app's upload the way a daemon of a cluster must (docs/design/Cluster.md): checks what depends on the
/// upload alone (it decodes, names the session's user as author, is not stamped too far ahead), appends it to the
/// shared log in PostgreSQL, then waits until this daemon's follower has applied the log through it, and answers
/// from what that application decided. Every daemon applies the same entries in the same order, so each reaches the
/// same decision; the app is acknowledged only after PostgreSQL committed its changesets.
struct ClusterCommitter: BatchIntegrator {
    let follower: LogFollower
    /// How far ahead of this machine's clock a changeset may be stamped (the replica's own bound is lifted in a
    /// cluster: daemons' clocks differ, and they must all apply what the log holds).
    let maximumClockSkew: Duration

    func integrate(_ changesets: [[UInt8]], adopt: Bool, author: String?) async throws -> IntegrationReport {
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
        let positions: [UInt64]
        do {
            positions = try await follower.log.append(
                uploads.map {
                    SharedLog.Append(origin: $0.dot.origin, originSequence: $0.dot.sequence, body: $0.body)
                })
        } catch {
            throw TributaryError(
                .storage,
                "the cluster's shared log did not take the upload (\(error.message)); nothing of it was stored: "
                    + "retry later")
        }
        do {
            try await follower.waitUntilApplied(positions.max() ?? 0)
        } catch {
            throw TributaryError(
                .storage,
                "the upload is stored in the cluster's shared log, but this daemon could not apply it yet ("
                    + "\(error)); retry later: the retried upload is recognised and stored once")
        }
        var report = IntegrationReport()
        for upload in uploads {
            report.received.append(upload.dot)
            if let reason = await follower.refusal(of: upload.dot) {
                report.rejected.append(IntegrationReport.Rejection(dot: upload.dot, reason: reason))
            }
        }
        return report
    }
}
