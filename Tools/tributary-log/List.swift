import ArgumentParser
import Tributary
import TributaryModel

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List changesets, one line each, in log order.",
        discussion: """
            Columns, in this order and these widths:
              SEQ         local sequence: the changeset's place in this replica's log (right-aligned, 8)
              ORIGIN:SEQ  the replica that wrote it and that replica's sequence number for it (24)
              TIME (UTC)  its stamp: the origin's hybrid clock reading, to the millisecond (24)
              AUTHOR      the user recorded as its author, "-" when none (16, longer names cut with …)
              INSTR       instruction count (right-aligned, 6)
              BYTES       stored size: entry header and (compressed) changeset (right-aligned, 9)
            With --json, one JSON object per line with the keys localSequence, origin, originSequence, time, \
            hybridTime, author, instructionCount, storedBytes, uncompressedBytes, compressed.

            Filters combine. Rows stream as the log is read, checking each entry's checksum and chain; a damaged \
            entry stops the listing with its number. Progress shows on stderr when it is a terminal and stdout is not.

            \(ExitStatus.help)
            """)

    @OptionGroup var replica: ReplicaOptions
    @OptionGroup var output: OutputOptions

    @Option(help: "The first local sequence to list.")
    var from: UInt64 = 1

    @Option(help: "The last local sequence to list (default: the end of the log).")
    var to: UInt64?

    @Option(help: "Only changesets written by this replica (its id: 16 hex digits).")
    var origin: String?

    @Option(help: "Only changesets with an instruction on this type (objects or its definition).")
    var type: String?

    @Option(help: "Only changesets by this author.")
    var author: String?

    @Option(help: "List at most this many changesets.")
    var limit: Int?

    func validate() throws {
        guard from >= 1 else { throw ValidationError("--from must be 1 or more (local sequences start at 1).") }
        if let to, to < from { throw ValidationError("--to \(to) is before --from \(from).") }
        if let origin, ReplicaID(hex: origin) == nil {
            throw ValidationError("--origin must be a replica id of up to 16 hex digits, got '\(origin)'.")
        }
        if let limit, limit < 0 { throw ValidationError("--limit must be 0 or more, got \(limit).") }
    }

    static let header =
        padded("SEQ", 8, right: true) + "  " + padded("ORIGIN:SEQ", 24) + "  " + padded("TIME (UTC)", 24) + "  "
        + padded("AUTHOR", 16) + "  " + padded("INSTR", 6, right: true) + "  " + padded("BYTES", 9, right: true)

    static func row(_ entry: LogEntrySummary, author: String) -> String {
        padded(String(entry.localSequence), 8, right: true) + "  "
            + padded("\(entry.origin):\(entry.originSequence)", 24) + "  " + padded(readableTime(entry.time), 24) + "  "
            + padded(truncated(author.isEmpty ? "-" : author, 16), 16) + "  "
            + padded(String(entry.instructionCount), 6, right: true) + "  "
            + padded(String(entry.storedBytes), 9, right: true)
    }

    func run() throws {
        try reportingFailures {
            let opened = try replica.open()
            defer { opened.close() }
            let originID = origin.flatMap { ReplicaID(hex: $0) }
            if !output.json { emit(Self.header) }
            if limit == 0 { return }
            // Scanning from `from` checks the chain from the entry before it; an empty range lists nothing.
            // A compacted log starts after the entries its base replaced.
            let first = try firstEntry(of: opened)
            let from = max(from, first)
            if from > first, try opened.inspection.logEntry(at: from - 1) == nil { return }
            let progress = ProgressLine("listing", streamsRows: true)
            let last = min(to ?? opened.lastLocalSequence, opened.lastLocalSequence)
            let total = last >= from ? Int(last - from + 1) : 0
            let trimmer = MappedPageTrimmer(every: 16_384)
            var listed = 0
            var scanned = 0
            try opened.inspection.forEachChangeset(from: from, through: to) { entry, changeset in
                scanned += 1
                progress.update(scanned, of: total)
                trimmer.tick()
                if let originID, entry.origin != originID { return true }
                if let author, changeset.author != author { return true }
                if let type, !changeset.instructions.contains(where: { touchedType($0) == type }) { return true }
                if output.json {
                    emit(JSON.object(entryMembers(entry, author: changeset.author)).rendered)
                } else {
                    emit(Self.row(entry, author: changeset.author))
                }
                listed += 1
                return limit.map { listed < $0 } ?? true
            }
            progress.finish()
        }
    }
}

/// The type an instruction acts on: its object's type, or the type a schema instruction defines.
func touchedType(_ instruction: Instruction) -> String? {
    switch instruction {
    case .addType(let type): type.name
    case .addProperty(let type, _), .removeProperty(let type, _), .renameProperty(let type, _, _),
        .redefineProperty(let type, _), .removeType(let type):
        type
    default: instruction.object?.type
    }
}
