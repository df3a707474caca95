import Foundation
import Tributary
import TributaryLog
import TributaryMerge
import TributaryModel

/// Compaction figures on a daemon-sized log: every device within the retention window holds all but its last 1%, so
/// a compaction replaces the other 99% with a base state. Measured against the same replica before it compacted: the
/// bytes its log takes, a full verify, and a new device's first sync (which starts from the base instead of
/// integrating every changeset).
struct CompactionBenchmarks {
    let context: BenchContext

    func run() throws {
        guard context.wants("compaction") else { return }
        let count = context.compactionChangesets
        let source = try Replica.open(
            directory: context.path("compaction"), schema: StorageBenchmarks.schema,
            configuration: SyncBenchmarks(context: context).configuration(id: 5, durability: .none))
        // One-instruction changesets from one origin over 1,000 objects, integrated in large batches.
        let origin = ReplicaID(rawValue: 98)
        try SyncBenchmarks.integrateGenerated(count: count, origin: origin, property: "count", into: source)
        let logBefore = try source.inspection.summary().log.storedBytes

        // A new device's first sync before compaction: every changeset, integrated in batches as a session sends them.
        let everything = try source.encodedChangesets(missingFrom: VersionVector(), compressed: true)
        let fullSyncSeconds = try firstSync(
            named: "compaction-full-sync", base: nil, changesets: everything, of: source)
        let verifyBefore = try time {
            let passed = try source.verify().passed
            precondition(passed, "verify failed before compaction")
        }

        // Every device within the window holds all but the last 1%.
        var held = VersionVector()
        for entry in source.versionVector.entries {
            held.advance(entry.replica, to: entry.replica == origin ? UInt64(count - count / 100) : entry.sequence)
        }
        let cut = try source.compactionCut(coveredBy: held)
        let rebuildSeconds = try time { try source.rebuildViews() }
        var outcome: CompactionOutcome?
        let compactionSeconds = try time { outcome = try source.compact(through: cut) }
        precondition(outcome != nil, "nothing was compacted")
        let summary = try source.inspection.summary()
        let base = try source.baseState()!
        let baseBytes = base.records.reduce(0) { $0 + $1.record.count + $1.key.type.utf8.count + 10 }
        let logAfter = summary.log.storedBytes + baseBytes
        let verifyAfter = try time {
            let passed = try source.verify().passed
            precondition(passed, "verify failed after compaction")
        }

        Measurement(
            name: "compaction_\(count)_changesets_log_bytes", value: Double(logAfter), unit: "bytes",
            baseline: "the log before compaction (bytes)", baselineValue: Double(logBefore), higherIsBetter: false
        ).print()
        Measurement(
            name: "compaction_\(count)_changesets_seconds", value: compactionSeconds * 1000, unit: "ms",
            baseline: "a rebuild of the views from the whole log before compaction (ms)",
            baselineValue: rebuildSeconds * 1000, higherIsBetter: false
        ).print()
        Measurement(
            name: "compaction_\(count)_changesets_verify", value: verifyAfter * 1000, unit: "ms",
            baseline: "verify before compaction (ms)", baselineValue: verifyBefore * 1000, higherIsBetter: false
        ).print()
        let rest = try source.encodedChangesets(missingFrom: base.compaction.vector, compressed: true)
        let baseSyncSeconds = try firstSync(named: "compaction-base-sync", base: base, changesets: rest, of: source)
        Measurement(
            name: "compaction_\(count)_changesets_first_sync", value: baseSyncSeconds * 1000, unit: "ms",
            baseline: "a first sync that integrates every changeset, before compaction (ms)",
            baselineValue: fullSyncSeconds * 1000, higherIsBetter: false
        ).print()
    }

    /// Seconds a new replica takes to start from `base` (if any) and integrate `changesets`, 10,000 per commit.
    func firstSync(named name: String, base: BaseState?, changesets: [[UInt8]], of source: Replica) throws -> Double {
        let fresh = try Replica.open(
            directory: context.path(name),
            configuration: SyncBenchmarks(context: context).configuration(id: 6, durability: .none))
        defer { fresh.close() }
        let seconds = try time {
            if let base { try fresh.installBase(base) }
            var start = 0
            while start < changesets.count {
                let end = min(changesets.count, start + 10_000)
                try fresh.integrate(encoded: Array(changesets[start..<end]))
                start = end
            }
        }
        let converged = try fresh.inspection.recordsDigest() == source.inspection.recordsDigest()
        precondition(converged, "the new replica did not converge")
        return seconds
    }
}
