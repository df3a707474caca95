import ArgumentParser
import Tributary
import TributaryModel

struct Show: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show one changeset: its header and decoded instructions.",
        discussion: """
            Prints the changeset's origin and origin sequence, stamp, author, schema version, causal context and \
            stored size, then its instructions, numbered from 0, one per line:
              create Type[key] {fields} defaults {fields}     erase Type[key]
              set Type[key].property = value                  add Type[key].property += delta (base stamp)
              insert value into Type[key].list right of id    replace / remove / move Type[key].list<id>
              clear Type[key].list                            add type / add property / remove type ...
            Embedded objects appear in paths as property<id>. A list element's or embedded object's id is \
            origin:sequence/instruction.counter: the changeset, the instruction and the ordinal that made it. \
            Strings are quoted and escaped; dates are UTC. With --json, one JSON object with the header keys of \
            `list` plus schemaVersion, context and instructions.

            The entry's checksum is checked; a damaged entry fails with its number.

            \(ExitStatus.help)
            """)

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "The changeset's local sequence.")
    var localSequence: UInt64

    @OptionGroup var output: OutputOptions

    func run() throws {
        try reportingFailures {
            let opened = try replica.open()
            defer { opened.close() }
            guard let entry = try opened.inspection.logEntry(at: localSequence) else {
                throw try missingEntry(localSequence, in: opened)
            }
            let changeset = try opened.inspection.changeset(at: localSequence)
            if output.json {
                emit(json(entry, changeset).rendered)
                return
            }
            let size =
                entry.isCompressed
                ? "\(entry.storedBytes) bytes (changeset \(entry.uncompressedBytes) bytes, compressed)"
                : "\(entry.storedBytes) bytes (changeset \(entry.uncompressedBytes) bytes, not compressed)"
            let rows: [(String, String)] = [
                ("origin", "\(entry.origin):\(entry.originSequence)"),
                ("time", "\(readableTime(entry.time)) (hybrid \(entry.time))"),
                ("author", changeset.author.isEmpty ? "-" : quoted(changeset.author)),
                ("schema version", String(changeset.schemaVersion)),
                ("context", text(changeset.context)),
                ("stored", size),
                ("instructions", String(changeset.instructions.count)),
            ]
            emit("changeset \(entry.localSequence)")
            for (label, value) in rows { emit("  " + padded(label, 16) + value) }
            let width = String(max(changeset.instructions.count - 1, 0)).count
            for (index, instruction) in changeset.instructions.enumerated() {
                emit("  " + padded(String(index), width, right: true) + "  " + text(instruction))
            }
        }
    }
}
