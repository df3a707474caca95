import Foundation
import Tributary
import TributaryModel

/// The figures of issue 3: integrating a remote log against writing the same locally; exporting what a peer lacks.
struct SyncBenchmarks {
    let context: BenchContext

    func configuration(id: UInt64, durability: Replica.Durability = .full) -> Replica.Configuration {
        var configuration = Replica.Configuration()
        configuration.durability = durability
        configuration.replicaID = ReplicaID(rawValue: id)
        return configuration
    }

    func run() throws {
        if context.wants("integrate") { try integrate() }
        if context.wants("export") { try export() }
    }

    /// 100,000 instructions written locally (in transactions of 100) on one replica, then integrated by another in
    /// batches of 100 changesets. Neither side flushes to disk, so the figures compare the work, not the disk.
    func integrate() throws {
        let instructions = 100_000
        let perTransaction = 100
        let local = try Replica.open(directory: context.path("integrate-local"), schema: StorageBenchmarks.schema, configuration: configuration(id: 1, durability: .none))
        let localSeconds = try time {
            var written = 0
            while written < instructions {
                try local.write { txn in
                    for index in written..<(written + perTransaction) {
                        if index % 2 == 0 {
                            try txn.create("Item", StorageBenchmarks.values(index / 2))
                        } else {
                            try txn.update("Item", primaryKey: .int(Int64(index / 2)), ["count": .int(Int64(index))])
                        }
                    }
                }
                written += perTransaction
            }
        }
        let changesets = try local.changesets(missingFrom: VersionVector()).filter { $0.origin == local.replicaID }
        let total = changesets.reduce(0) { $0 + $1.instructions.count }
        let remote = try Replica.open(directory: context.path("integrate-remote"), schema: StorageBenchmarks.schema, configuration: configuration(id: 2, durability: .none))
        let remoteSeconds = try time {
            var start = 0
            while start < changesets.count {
                let end = min(changesets.count, start + 100)
                try remote.integrate(Array(changesets[start..<end]))
                start = end
            }
        }
        let converged = try remote.recordsDigest() == local.recordsDigest()
        precondition(converged, "integration did not converge")
        Measurement(
            name: "integrate_remote_log_100k_instructions", value: Double(total) / remoteSeconds, unit: "instructions/s",
            baseline: "the same instructions written as local transactions (instructions/s)",
            baselineValue: Double(instructions) / localSeconds
        ).print()
    }

    /// A log of many changesets; a peer lacks the last 1%.
    func export() throws {
        let count = context.exportChangesets
        let source = try Replica.open(directory: context.path("export"), schema: StorageBenchmarks.schema, configuration: configuration(id: 3))
        // Build the log fast: integrate generated one-instruction changesets from an origin, in large batches.
        let origin = ReplicaID(rawValue: 99)
        var batch: [Changeset] = []
        var vector = VersionVector()
        for sequence in 1...UInt64(count) {
            batch.append(Changeset(
                origin: origin, originSequence: sequence, time: HybridTime(milliseconds: 1_700_000_000_000, counter: 0).advanced(sequence),
                context: VersionVector(), schemaVersion: 1,
                instructions: [.create(type: "Item", primaryKey: .int(Int64(sequence % 1000)), fields: [FieldValue("count", .int(Int64(sequence)))], defaults: [])]))
            if batch.count == 20_000 {
                try source.integrate(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        if !batch.isEmpty { try source.integrate(batch) }
        vector.advance(origin, to: UInt64(count - count / 100))
        vector.advance(source.replicaID, to: source.versionVector[source.replicaID])  // the peer has the schema
        var exported: [Changeset] = []
        let seconds = try time { exported = try source.changesets(missingFrom: vector) }
        precondition(exported.count == count / 100)
        // Baseline: scanning every entry header, the way an index-less log would have to.
        var scanned = 0
        let scan = try time {
            try source.forEachLogEntry { entry in
                if entry.originSequence > vector[entry.origin] { scanned += 1 }
                return true
            }
        }
        precondition(scanned == exported.count)
        Measurement(
            name: "export_missing_1pct_of_\(count)_changesets", value: seconds * 1000, unit: "ms",
            baseline: "a scan of every log entry's header (ms)", baselineValue: scan * 1000, higherIsBetter: false
        ).print()
    }
}

extension HybridTime {
    func advanced(_ steps: UInt64) -> HybridTime { HybridTime(rawValue: rawValue + (steps << 16)) }
}
