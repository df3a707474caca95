import Foundation
import Tributary
import TributaryModel

/// Sync figures: integrating a remote log against writing the same locally; exporting what a peer lacks.
struct SyncBenchmarks {
    let context: BenchContext

    func configuration(id: UInt64, durability: Replica.Durability = .full) -> Replica.Configuration {
        var configuration = Replica.Configuration()
        configuration.durability = durability
        configuration.replicaID = ReplicaID(rawValue: id)
        return configuration
    }

    func run() throws {
        if context.wants("integrate") || context.wants("sync_bytes") { try integrate() }
        if context.wants("export") { try export() }
    }

    /// 100,000 instructions written locally (in transactions of 100) on one replica, then integrated by another one
    /// changeset at a time, from their encoded bytes as a sync layer receives them (`integrate(encoded:)`): the same number of commits on
    /// each side, and the values each side starts from built before its clock starts. Neither side flushes to disk,
    /// so the figures compare the work, not the disk.
    func integrate() throws {
        let instructions = 100_000
        let perTransaction = 100
        let created = (0..<(instructions / 2)).map(StorageBenchmarks.values)
        let local = try Replica.open(
            directory: context.path("integrate-local"), schema: StorageBenchmarks.schema,
            configuration: configuration(id: 1, durability: .none))
        let localSeconds = try time {
            var written = 0
            while written < instructions {
                try local.write { txn in
                    for index in written..<(written + perTransaction) {
                        if index % 2 == 0 {
                            try txn.create("Item", created[index / 2])
                        } else {
                            try txn.update("Item", primaryKey: .int(Int64(index / 2)), ["count": .int(Int64(index))])
                        }
                    }
                }
                written += perTransaction
            }
        }
        let changesets = try local.changesets(missingFrom: VersionVector()).filter { $0.origin == local.replicaID }
        let written = changesets.reduce(0) { $0 + $1.instructions.count { !$0.isSchemaInstruction } }
        precondition(written == instructions, "the local side wrote \(written) instructions, not \(instructions)")
        // In both forms a sync layer can send: as the log stores them (zstd frames where smaller), and plain encoded.
        let forms = [
            (
                "integrate_remote_log_100k_instructions",
                try local.encodedChangesets(missingFrom: VersionVector(), compressed: true)
            ),
            ("integrate_remote_log_100k_instructions_uncompressed", changesets.map(ChangesetCodec.encode)),
        ]
        Measurement(
            name: "sync_bytes_100k_instructions_stored_form", value: Double(forms[0].1.reduce(0) { $0 + $1.count }),
            unit: "bytes", baseline: "the same changesets plain encoded (bytes)",
            baselineValue: Double(forms[1].1.reduce(0) { $0 + $1.count }), higherIsBetter: false
        ).print()
        for (attempt, (name, encoded)) in forms.enumerated() {
            precondition(
                encoded.count == changesets.count, "exported \(encoded.count) changesets, not \(changesets.count)")
            let remote = try Replica.open(
                directory: context.path("integrate-remote-\(attempt)"), schema: StorageBenchmarks.schema,
                configuration: configuration(id: 2, durability: .none))
            let remoteSeconds = try time {
                for bytes in encoded { try remote.integrate(encoded: [bytes]) }
            }
            let converged = try remote.inspection.recordsDigest() == local.inspection.recordsDigest()
            precondition(converged, "integration did not converge")
            Measurement(
                name: name, value: Double(instructions) / remoteSeconds, unit: "instructions/s",
                baseline: "the same instructions written as local transactions (instructions/s)",
                baselineValue: Double(instructions) / localSeconds
            ).print()
        }
    }

    /// A log of many changesets; a peer lacks the last 1%.
    func export() throws {
        let count = context.exportChangesets
        let source = try Replica.open(
            directory: context.path("export"), schema: StorageBenchmarks.schema, configuration: configuration(id: 3))
        // Build the log fast: integrate generated one-instruction changesets from an origin, in large batches.
        let origin = ReplicaID(rawValue: 99)
        try Self.integrateGenerated(count: count, origin: origin, property: "count", into: source)
        var vector = VersionVector()
        vector.advance(origin, to: UInt64(count - count / 100))
        vector.advance(source.replicaID, to: source.versionVector[source.replicaID])  // the peer has the schema
        // Baseline: a scan of every log entry that decodes and checksums each one (header and payload), the way a
        // log without an origin index would find what a peer lacks. One untimed pass of each side first, then three
        // rounds each, alternating.
        // Exported as a sync layer sends them: encoded (`encodedChangesets(missingFrom:)`).
        var exported: [[UInt8]] = []
        var scanned = 0
        let scan = {
            scanned = 0
            try source.forEachLogEntry { entry in
                if entry.originSequence > vector[entry.origin] { scanned += 1 }
                return true
            }
        }
        exported = try source.encodedChangesets(missingFrom: vector)
        try scan()
        var seconds = 0.0
        var baseline = 0.0
        for _ in 0..<3 {
            seconds += try time { exported = try source.encodedChangesets(missingFrom: vector) }
            baseline += try time { try scan() }
        }
        precondition(exported.count == count / 100 && scanned == exported.count)
        Measurement(
            name: "export_missing_1pct_of_\(count)_changesets", value: seconds / 3 * 1000, unit: "ms",
            baseline: "a scan that decodes and checksums every log entry (ms)", baselineValue: baseline / 3 * 1000,
            higherIsBetter: false
        ).print()
        // As the log stores them (`compressed: true`), against the plain export just measured.
        var stored: [[UInt8]] = []
        var storedSeconds = 0.0
        for _ in 0..<3 {
            storedSeconds += try time { stored = try source.encodedChangesets(missingFrom: vector, compressed: true) }
        }
        precondition(stored.count == exported.count)
        Measurement(
            name: "export_missing_1pct_of_\(count)_changesets_stored_form", value: storedSeconds / 3 * 1000, unit: "ms",
            baseline: "the plain (decompressed) export of the same changesets (ms)", baselineValue: seconds / 3 * 1000,
            higherIsBetter: false
        ).print()
    }
}

extension SyncBenchmarks {
    /// Integrates `count` generated changesets of `origin` into `replica`, 20,000 per commit: each sets `property` of
    /// one of 1,000 `Item`s (created or overwritten) to its sequence; `first`, when given, is the first changeset's
    /// instructions instead (a schema for a replica that has none).
    static func integrateGenerated(
        count: Int, origin: ReplicaID, property: String, schemaVersion: UInt64 = 1, first: [Instruction]? = nil,
        into replica: Replica
    ) throws {
        var batch: [Changeset] = []
        for sequence in 1...UInt64(count) {
            let write = Instruction.create(
                type: "Item", primaryKey: .int(Int64(sequence % 1000)),
                fields: [FieldValue(property, .int(Int64(sequence)))], defaults: [])
            batch.append(
                Changeset(
                    origin: origin, originSequence: sequence,
                    time: HybridTime(milliseconds: 1_700_000_000_000, counter: 0).advanced(sequence),
                    context: VersionVector(), schemaVersion: schemaVersion,
                    instructions: sequence == 1 ? first ?? [write] : [write]))
            if batch.count == 20_000 {
                try replica.integrate(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        if !batch.isEmpty { try replica.integrate(batch) }
    }
}

extension HybridTime {
    func advanced(_ steps: UInt64) -> HybridTime { HybridTime(rawValue: rawValue + (steps << 16)) }
}
