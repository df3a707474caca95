import ArgumentParser
import Tributary
import TributaryModel

struct History: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List every changeset that touched one object, with what it did to it.",
        discussion: """
            Reads the whole log and prints one line per changeset with an instruction on the object, in fixed \
            columns:
              SEQ         local sequence (right-aligned, 8)
              ORIGIN:SEQ  the replica that wrote the changeset and its sequence number there (24)
              TIME (UTC)  the changeset's stamp, to the millisecond (24)
              AUTHOR      the changeset's author, "-" when none (16, longer names cut with …)
              WHAT        the instructions on the object, joined by "; ", paths relative to the object:
                          create {fields}, set property = value, add property += delta,
                          insert value into list right of id, replace list<id> with value,
                          remove list<id>, move list<id> to ..., clear list, erase
            Removing the object's type counts as touching it. Embedded objects are part of their parent: their \
            changes show as property<id>.field.

            The primary key is read as the schema says the type's key is: an int (digits), an ObjectID (24 hex \
            digits), a UUID, or a string taken as is. With --json, one JSON object per line: the keys of `list` \
            plus instructions (only those on the object).

            \(ExitStatus.help)
            """)

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "The object's type.")
    var type: String

    @Argument(help: "The object's primary key.")
    var primaryKey: String

    @OptionGroup var output: OutputOptions

    static let header =
        padded("SEQ", 8, right: true) + "  " + padded("ORIGIN:SEQ", 24) + "  " + padded("TIME (UTC)", 24) + "  "
        + padded("AUTHOR", 16) + "  WHAT"

    func run() throws {
        try reportingFailures {
            let opened = try replica.open()
            defer { opened.close() }
            let key = try parsePrimaryKey(primaryKey, type: type, schema: opened.schema)
            if !output.json { emit(Self.header) }
            let progress = ProgressLine("reading", streamsRows: true)
            let total = Int(opened.lastLocalSequence)
            var scanned = 0
            var found = 0
            let trimmer = MappedPageTrimmer(every: 16_384)
            try opened.forEachChangeset { entry, changeset in
                scanned += 1
                progress.update(scanned, of: total)
                trimmer.tick()
                let touching = changeset.instructions.filter { instruction in
                    if case .removeType(let removed) = instruction { return removed == type }
                    guard let object = instruction.object else { return false }
                    return object.type == type && object.primaryKey == key
                }
                guard !touching.isEmpty else { return true }
                found += 1
                if output.json {
                    emit(
                        JSON.object(
                            entryMembers(entry, author: changeset.author) + [
                                ("instructions", .array(touching.map(json)))
                            ]
                        )
                        .rendered)
                } else {
                    emit(
                        padded(String(entry.localSequence), 8, right: true) + "  "
                            + padded("\(entry.origin):\(entry.originSequence)", 24) + "  "
                            + padded(readableTime(entry.time), 24) + "  "
                            + padded(truncated(changeset.author.isEmpty ? "-" : changeset.author, 16), 16) + "  "
                            + touching.map(relativeText).joined(separator: "; "))
                }
                return true
            }
            progress.finish()
            if found == 0 {
                writeStandardError("no changeset touched \(text(type: type, primaryKey: key))\n")
            }
        }
    }
}
