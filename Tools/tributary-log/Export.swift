import ArgumentParser
import Tributary

struct Export: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stream every changeset with its decoded instructions.",
        discussion: """
            Writes one JSON object per changeset, per line, in log order, as the log is read (memory stays bounded \
            however long the log is). Keys: localSequence, origin, originSequence, time (UTC), hybridTime, author, \
            instructionCount, storedBytes, uncompressedBytes, compressed, schemaVersion, context (the causal \
            context: [{"replica", "originSequence"}]), instructions ([{"op": ..., operands}]). Values JSON has no \
            type for are tagged: {"$date"}, {"$oid"}, {"$uuid"}, {"$binary"}, {"$link"}.

            Each entry's checksum and chain are checked; a damaged entry stops the export with its number. Progress \
            shows on stderr when it is a terminal and stdout is not.

            \(ExitStatus.help)
            """)

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case jsonl
    }

    @OptionGroup var replica: ReplicaOptions

    @Option(help: "The output format.")
    var format: Format = .jsonl

    @Option(help: "The first local sequence to export.")
    var from: UInt64 = 1

    @Option(help: "The last local sequence to export (default: the end of the log).")
    var to: UInt64?

    func validate() throws {
        guard from >= 1 else { throw ValidationError("--from must be 1 or more (local sequences start at 1).") }
        if let to, to < from { throw ValidationError("--to \(to) is before --from \(from).") }
    }

    func run() throws {
        try reportingFailures {
            let opened = try replica.open()
            defer { opened.close() }
            // A compacted log starts after the entries its base replaced.
            let first = try firstEntry(of: opened)
            let from = max(from, first)
            if from > first, try opened.inspection.logEntry(at: from - 1) == nil { return }
            let progress = ProgressLine("exporting", streamsRows: true)
            let last = min(to ?? opened.lastLocalSequence, opened.lastLocalSequence)
            let total = last >= from ? Int(last - from + 1) : 0
            let trimmer = MappedPageTrimmer(every: 16_384)
            var exported = 0
            try opened.inspection.forEachChangeset(from: from, through: to) { entry, changeset in
                emit(json(entry, changeset).rendered)
                exported += 1
                progress.update(exported, of: total)
                trimmer.tick()
                return true
            }
            progress.finish()
        }
    }
}
