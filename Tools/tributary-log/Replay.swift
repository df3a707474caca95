import ArgumentParser
import Foundation
import Tributary
import TributaryLog
import TributaryModel

struct Replay: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Rebuild the state as of one changeset: print a summary, or write a new replica.",
        discussion: """
            Replays the log from its start through local sequence --to (0 is the empty replica; without --to, the \
            whole log), checking every entry, and prints the schema version, the version vector and the number of objects of each type as of \
            that point. With --out, writes a new replica directory instead: the log through --to, copied byte for \
            byte, and views rebuilt from it. The library opens it like any replica (it gets a replica id of its \
            own); use `tributary-log objects` or `info` on it to look inside. The source replica is never changed.

            A replica written by a development build from before release 0.1.0 cannot be opened, but its log can \
            be read: `tributary-log replay OLD --out NEW` rebuilds it into a new directory in today's format.

            \(ExitStatus.help)
            """)

    @OptionGroup var replica: ReplicaOptions

    @Option(help: "The local sequence to rebuild the state as of (0 for the empty replica; default: the last).")
    var to: UInt64?

    @Option(
        help: "Write a new replica here (a directory that does not exist yet, or is empty).", completion: .directory)
    var out: String?

    @OptionGroup var output: OutputOptions

    func run() throws {
        try reportingFailures {
            let opened: Replica
            do {
                opened = try replica.open()
            } catch let error as TributaryError where error.code == .developmentFormat && out != nil {
                // Only the log of such a replica is read.
                try write(to: out!) { try Replica.rebuild(fromLogOf: replica.replica, into: $0, through: self.to) }
                return
            }
            defer { opened.close() }
            let to = self.to ?? opened.lastLocalSequence
            try requireEntry(to, in: opened)
            if let out {
                try write(to: out) { try opened.inspection.replay(through: to, into: $0) }
                return
            }
            let progress = ProgressLine("replaying", streamsRows: false)
            let state = try opened.inspection.objects(asOf: to) { progress.update($0, of: Int(to)) }
            progress.finish()
            var counts: [String: Int] = [:]
            for object in state.objects { counts[object.type, default: 0] += 1 }
            let types = state.schema.types.filter { !$0.isEmbedded }.map(\.name)
            if output.json {
                emit(
                    JSON.object([
                        ("localSequence", .uint(to)), ("schemaVersion", .uint(state.schema.version)),
                        ("versionVector", json(state.versionVector)), ("objectCount", .int(Int64(state.objects.count))),
                        (
                            "objects",
                            .array(
                                types.map { .object([("type", .string($0)), ("count", .int(Int64(counts[$0] ?? 0)))]) })
                        ),
                    ]).rendered)
                return
            }
            emit("state as of local sequence \(to) (the log holds \(opened.lastLocalSequence))")
            emit(padded("schema", 16) + "version \(state.schema.version), \(state.schema.types.count) types")
            emit(padded("version vector", 16) + text(state.versionVector))
            emit(padded("objects", 16) + grouped(state.objects.count))
            emitCounts(types.map { ($0, counts[$0] ?? 0) })
        }
    }

    private func write(to directory: String, _ replay: (String) throws -> Replica) throws {
        let copy: Replica
        do {
            copy = try replay(directory)
        } catch let error as TributaryError where error.code == .invalidValue || error.code == .storage {
            throw ToolFailure(error.message, status: ExitStatus.cannotCreate)
        }
        defer { copy.close() }
        let summary = try copy.inspection.summary()
        let objects = summary.objectCounts.reduce(0) { $0 + $1.objects }
        if output.json {
            emit(
                JSON.object([
                    ("localSequence", .uint(copy.lastLocalSequence)), ("out", .string(directory)),
                    ("replica", .string(copy.replicaID.description)),
                    ("changesets", .int(Int64(summary.log.changesets))), ("objectCount", .int(Int64(objects))),
                ]).rendered)
            return
        }
        emit(
            "wrote replica \(copy.replicaID) to \(directory): \(summary.log.changesets) changesets, \(objects) objects")
    }
}

/// Fails unless the log has an entry at `localSequence` (0, the empty replica, always exists).
func requireEntry(_ localSequence: UInt64, in replica: Replica) throws {
    guard localSequence > 0 else { return }
    guard try replica.inspection.logEntry(at: localSequence) != nil else {
        throw try missingEntry(localSequence, in: replica)
    }
}

/// The first local sequence the log holds: 1, or the one after the entries a compaction replaced.
func firstEntry(of replica: Replica) throws -> UInt64 { (try replica.logCompaction()?.through ?? 0) + 1 }

/// The failure for a log entry `localSequence` the log does not hold, saying which it holds.
func missingEntry(_ localSequence: UInt64, in replica: Replica) throws -> ToolFailure {
    let first = try firstEntry(of: replica)
    let held = "it holds local sequences \(first) through \(replica.lastLocalSequence)"
    if localSequence < first {
        return ToolFailure(
            "log entry \(localSequence) was replaced by a base state when the log was compacted; \(held)",
            status: ExitStatus.noInput)
    }
    return ToolFailure("the log has no entry \(localSequence): \(held)", status: ExitStatus.noInput)
}

/// `  Type  count` lines, counts right-aligned.
func emitCounts(_ counts: [(String, Int)]) {
    let nameWidth = counts.map(\.0.count).max() ?? 0
    let countWidth = counts.map { grouped($0.1).count }.max() ?? 0
    for (type, count) in counts {
        emit("  " + padded(type, nameWidth) + "  " + padded(grouped(count), countWidth, right: true))
    }
}
