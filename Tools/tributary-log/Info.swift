import ArgumentParser
import Foundation
import Tributary
import TributaryLog
import TributaryModel

struct Info: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show a replica's identity, schema, log size and objects.",
        discussion: """
            Prints the replica id, the format and schema versions (the highest any release declared; the schema \
            version the app last opened this replica with and the one its history starts at; and the highest a \
            migration reached), the schema conflicts, the number of changesets and instructions, whether the log \
            was compacted (which entries a base state replaced, when, and the version vector it holds), for a \
            daemon of a cluster the shared log's epoch and the position it applied (the daemon that applied the \
            most is the one a new epoch starts from: tributaryd --renew-epoch --from-replica), the \
            log's size as stored (headers and compressed payloads) and uncompressed, the compression ratio, the \
            version vector, the storage file's used size, and the number of objects of each type. Every figure \
            comes from one snapshot; reading the log checks every entry's checksum.

            \(ExitStatus.help)
            """)

    @OptionGroup var replica: ReplicaOptions
    @OptionGroup var output: OutputOptions

    func run() throws {
        try reportingFailures {
            let opened = try replica.open()
            defer { opened.close() }
            let summary = try opened.inspection.summary()
            let declared = try opened.declaredVersions()
            let compaction = try opened.logCompaction()
            let shared = try opened.sharedLogPosition()
            let ratio = (summary.log.compressionRatio * 100).rounded() / 100
            if output.json {
                emit(
                    JSON.object([
                        ("replica", .string(opened.replicaID.description)), ("directory", .string(replica.replica)),
                        ("formatVersion", .int(Int64(summary.formatVersion))),
                        ("schemaVersion", .uint(summary.schema.version)),
                        ("migratedSchemaVersion", .uint(summary.schema.migratedVersion)),
                        ("declaredSchemaVersion", declared.map { .uint($0.current) } ?? .null),
                        ("firstDeclaredSchemaVersion", declared?.first.map { .uint($0) } ?? .null),
                        ("types", .int(Int64(summary.schema.types.count))),
                        ("changesets", .int(Int64(summary.log.changesets))),
                        ("instructions", .int(Int64(summary.log.instructions))),
                        ("lastLocalSequence", .uint(summary.lastLocalSequence)),
                        (
                            "compaction",
                            compaction.map { compaction in
                                .object([
                                    ("through", .uint(compaction.through)), ("time", .uint(compaction.time)),
                                    ("versionVector", json(compaction.vector)),
                                ])
                            } ?? .null
                        ),
                        (
                            "sharedLog",
                            shared.map { shared in
                                .object([
                                    ("epoch", .string(shared.epoch.uuidString)),
                                    ("applied", .uint(shared.position)),
                                ])
                            } ?? .null
                        ),
                        ("logStoredBytes", .int(Int64(summary.log.storedBytes))),
                        ("logUncompressedBytes", .int(Int64(summary.log.uncompressedBytes))),
                        ("compressionRatio", .double(ratio)),
                        ("versionVector", json(summary.versionVector)),
                        ("storageUsedBytes", .int(Int64(summary.storage.usedBytes))),
                        (
                            "objects",
                            .array(
                                summary.objectCounts.map {
                                    .object([("type", .string($0.type)), ("count", .int(Int64($0.objects)))])
                                })
                        ),
                        (
                            "schemaConflicts",
                            .array(
                                summary.schemaConflicts.map { conflict in
                                    .object([
                                        ("type", .string(conflict.type)),
                                        ("property", .string(conflict.definition.name)),
                                        ("definition", .string(conflict.definition.typeDescription)),
                                        ("stamp", .string(conflict.stamp.description)),
                                        (
                                            "losing",
                                            .array(
                                                conflict.losing.map {
                                                    .object([
                                                        ("definition", .string($0.property.typeDescription)),
                                                        ("stamp", .string($0.stamp.description)),
                                                    ])
                                                })
                                        ),
                                        ("objectsWithValuesAside", .int(Int64(conflict.objectsWithValuesAside))),
                                    ])
                                })
                        ),
                    ]).rendered)
                return
            }
            let embedded = summary.schema.types.filter(\.isEmbedded).count
            let rows: [(String, String)] = [
                ("replica", opened.replicaID.description),
                ("directory", replica.replica),
                ("format", "\(summary.formatVersion)"),
                (
                    "schema",
                    "version \(summary.schema.version), \(summary.schema.types.count) types"
                        + (embedded > 0 ? " (\(embedded) embedded)" : "")
                ),
                (
                    "releases",
                    (declared.map { "app version \($0.current)" + ($0.first.map { " (history from \($0))" } ?? "") }
                        ?? "no app schema declared")
                        + (summary.schema.migratedVersion > 0
                            ? ", migrations reached version \(summary.schema.migratedVersion)" : ", no migration")
                ),
                ("changesets", grouped(summary.log.changesets) + " (last local sequence \(summary.lastLocalSequence))"),
                ("instructions", grouped(summary.log.instructions)),
                (
                    "compacted",
                    compaction.map { compaction in
                        (compaction.through > 0
                            ? "entries 1-\(compaction.through) replaced by a base state"
                            : "started from another replica's base state")
                            + " at \(Date(timeIntervalSince1970: TimeInterval(compaction.time)).formatted(.iso8601)),"
                            + " holding \(text(compaction.vector))"
                    } ?? "never"
                ),
                (
                    "shared log",
                    shared.map { "epoch \($0.epoch), applied through position \($0.position)" }
                        ?? "none (not a daemon of a cluster)"
                ),
                ("log stored", "\(grouped(summary.log.storedBytes)) bytes"),
                ("log uncompressed", "\(grouped(summary.log.uncompressedBytes)) bytes"),
                ("compression", String(format: "%.2fx", summary.log.compressionRatio)),
                ("version vector", text(summary.versionVector)),
                ("storage used", "\(grouped(summary.storage.usedBytes)) bytes"),
                ("objects", grouped(summary.objectCounts.reduce(0) { $0 + $1.objects })),
            ]
            for (label, value) in rows { emit(padded(label, 18) + value) }
            emitCounts(summary.objectCounts.map { ($0.type, $0.objects) })
            // Properties replicas defined differently: which definition shows, and which values are kept aside.
            for conflict in summary.schemaConflicts { emit(padded("schema conflict", 18) + conflict.description) }
        }
    }
}
