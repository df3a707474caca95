import Testing

/// The full `--help` of the tool and of each subcommand, asserted whole, as its stdout and exit code are. A change
/// to an option or to the documented columns shows up here.
@Suite("tributary-log --help")
struct HelpTests {
    @Test("Help text", arguments: HelpText.all)
    func help(_ help: HelpText) throws {
        let run = try runTool(help.arguments)
        #expect(run.status == 0, "\(run)")
        #expect(run.stdout == help.text + "\n")
        #expect(run.stderr.isEmpty)
    }

    @Test func helpSubcommandPrintsTheSameAsDashDashHelp() throws {
        let viaHelp = try runTool(["help", "history"])
        #expect(viaHelp.status == 0)
        let expected = try #require(HelpText.all.first { $0.arguments == ["history", "--help"] })
        #expect(viaHelp.stdout == expected.text + "\n")
    }
}

struct HelpText: CustomTestStringConvertible, Sendable {
    var arguments: [String]
    var text: String

    var testDescription: String { (["tributary-log"] + arguments).joined(separator: " ") }

    static let all: [HelpText] = [
        HelpText(
            arguments: ["--help"],
            text: #"""
                OVERVIEW: Inspect and replay a replica's changeset log (read-only).

                Opens the replica read-only: it works while an app or a daemon writes to the same directory, and it
                never changes it. Data goes to stdout, as a table or, with --json, as JSON with stable keys (JSON
                lines for streams); progress (on a terminal) and errors go to stderr.

                Exit status:
                  0   success
                  1   verify found damage or a difference; diff found differences
                  64  bad usage: an unknown option, a bad number, primary key, type or query
                  65  a damaged log entry (checksum, chain or decoding)
                  66  no replica here, a newer or development replica format, or no such log entry
                  70  any other failure
                  73  replay or backup could not create its output
                  74  storage could not be read

                USAGE: tributary-log <subcommand>

                OPTIONS:
                  -h, --help              Show help information.

                SUBCOMMANDS:
                  info                    Show a replica's identity, schema, log size and objects.
                  list                    List changesets, one line each, in log order.
                  show                    Show one changeset: its header and decoded instructions.
                  replay                  Rebuild the state as of one changeset: print a summary, or write a new
                                          replica.
                  diff                    Show the objects created, erased and changed between two points of the
                                          log.
                  history                 List every changeset that touched one object, with what it did to it.
                  objects                 Print the objects of one type, as a table or JSON lines.
                  verify                  Check every log entry, then rebuild the views from the log and compare
                                          them.
                  export                  Stream every changeset with its decoded instructions.
                  backup                  Copy a replica into a new directory, consistently, while it is written to.

                  See 'tributary-log help <subcommand>' for detailed help.
                """#),
        HelpText(
            arguments: ["info", "--help"],
            text: #"""
                OVERVIEW: Show a replica's identity, schema, log size and objects.

                Prints the replica id, the format and schema versions (the highest any release declared; the schema
                version the app last opened this replica with and the one its history starts at; and the highest a
                migration reached), the schema conflicts, the number of changesets and instructions, whether the
                log was compacted (which entries a base state replaced, when, and the version vector it holds), for
                a daemon of a cluster the shared log's epoch and the position it applied (the daemon that applied
                the most is the one a new epoch starts from: tributaryd --renew-epoch --from-replica), the log's
                size as stored (headers and compressed payloads) and uncompressed, the compression ratio, the
                version vector, the storage file's used size, and the number of objects of each type. Every figure
                comes from one snapshot; reading the log checks every entry's checksum.

                Exit status:
                  0   success
                  1   verify found damage or a difference; diff found differences
                  64  bad usage: an unknown option, a bad number, primary key, type or query
                  65  a damaged log entry (checksum, chain or decoding)
                  66  no replica here, a newer or development replica format, or no such log entry
                  70  any other failure
                  73  replay or backup could not create its output
                  74  storage could not be read

                USAGE: tributary-log info <replica> [--json]

                ARGUMENTS:
                  <replica>               Path to the replica directory.

                OPTIONS:
                  --json                  Print JSON with stable keys (JSON lines for streams) instead of a table.
                  -h, --help              Show help information.

                """#),
        HelpText(
            arguments: ["list", "--help"],
            text: #"""
                OVERVIEW: List changesets, one line each, in log order.

                Columns, in this order and these widths:
                  SEQ         local sequence: the changeset's place in this replica's log (right-aligned, 8)
                  ORIGIN:SEQ  the replica that wrote it and that replica's sequence number for it (24)
                  TIME (UTC)  its stamp: the origin's hybrid clock reading, to the millisecond (24)
                  AUTHOR      the user recorded as its author, "-" when none (16, longer names cut with …)
                  INSTR       instruction count (right-aligned, 6)
                  BYTES       stored size: entry header and (compressed) changeset (right-aligned, 9)
                With --json, one JSON object per line with the keys localSequence, origin, originSequence, time,
                hybridTime, author, instructionCount, storedBytes, uncompressedBytes, compressed.

                Filters combine. Rows stream as the log is read, checking each entry's checksum and chain; a
                damaged entry stops the listing with its number. Progress shows on stderr when it is a terminal and
                stdout is not.

                Exit status:
                  0   success
                  1   verify found damage or a difference; diff found differences
                  64  bad usage: an unknown option, a bad number, primary key, type or query
                  65  a damaged log entry (checksum, chain or decoding)
                  66  no replica here, a newer or development replica format, or no such log entry
                  70  any other failure
                  73  replay or backup could not create its output
                  74  storage could not be read

                USAGE: tributary-log list <replica> [--json] [--from <from>] [--to <to>] [--origin <origin>] [--type <type>] [--author <author>] [--limit <limit>]

                ARGUMENTS:
                  <replica>               Path to the replica directory.

                OPTIONS:
                  --json                  Print JSON with stable keys (JSON lines for streams) instead of a table.
                  --from <from>           The first local sequence to list. (default: 1)
                  --to <to>               The last local sequence to list (default: the end of the log).
                  --origin <origin>       Only changesets written by this replica (its id: 16 hex digits).
                  --type <type>           Only changesets with an instruction on this type (objects or its
                                          definition).
                  --author <author>       Only changesets by this author.
                  --limit <limit>         List at most this many changesets.
                  -h, --help              Show help information.

                """#),
        HelpText(
            arguments: ["show", "--help"],
            text: #"""
                OVERVIEW: Show one changeset: its header and decoded instructions.

                Prints the changeset's origin and origin sequence, stamp, author, schema version, causal context
                and stored size, then its instructions, numbered from 0, one per line:
                  create Type[key] {fields} defaults {fields}     erase Type[key]
                  set Type[key].property = value                  add Type[key].property += delta (base stamp)
                  insert value into Type[key].list right of id    replace / remove / move Type[key].list<id>
                  clear Type[key].list                            add type / add property / remove type ...
                Embedded objects appear in paths as property<id>. A list element's or embedded object's id is
                origin:sequence/instruction.counter: the changeset, the instruction and the ordinal that made it.
                Strings are quoted and escaped; dates are UTC. With --json, one JSON object with the header keys of
                `list` plus schemaVersion, context and instructions.

                The entry's checksum is checked; a damaged entry fails with its number.

                Exit status:
                  0   success
                  1   verify found damage or a difference; diff found differences
                  64  bad usage: an unknown option, a bad number, primary key, type or query
                  65  a damaged log entry (checksum, chain or decoding)
                  66  no replica here, a newer or development replica format, or no such log entry
                  70  any other failure
                  73  replay or backup could not create its output
                  74  storage could not be read

                USAGE: tributary-log show <replica> <local-sequence> [--json]

                ARGUMENTS:
                  <replica>               Path to the replica directory.
                  <local-sequence>        The changeset's local sequence.

                OPTIONS:
                  --json                  Print JSON with stable keys (JSON lines for streams) instead of a table.
                  -h, --help              Show help information.

                """#),
        HelpText(
            arguments: ["replay", "--help"],
            text: #"""
                OVERVIEW: Rebuild the state as of one changeset: print a summary, or write a new replica.

                Replays the log from its start through local sequence --to (0 is the empty replica; without --to,
                the whole log), checking every entry, and prints the schema version, the version vector and the
                number of objects of each type as of that point. With --out, writes a new replica directory
                instead: the log through --to, copied byte for byte, and views rebuilt from it. The library opens
                it like any replica (it gets a replica id of its own); use `tributary-log objects` or `info` on it
                to look inside. The source replica is never changed.

                A replica written by a development build from before release 0.1.0 cannot be opened, but its log
                can be read: `tributary-log replay OLD --out NEW` rebuilds it into a new directory in today's
                format.

                Exit status:
                  0   success
                  1   verify found damage or a difference; diff found differences
                  64  bad usage: an unknown option, a bad number, primary key, type or query
                  65  a damaged log entry (checksum, chain or decoding)
                  66  no replica here, a newer or development replica format, or no such log entry
                  70  any other failure
                  73  replay or backup could not create its output
                  74  storage could not be read

                USAGE: tributary-log replay <replica> [--to <to>] [--out <out>] [--json]

                ARGUMENTS:
                  <replica>               Path to the replica directory.

                OPTIONS:
                  --to <to>               The local sequence to rebuild the state as of (0 for the empty replica;
                                          default: the last).
                  --out <out>             Write a new replica here (a directory that does not exist yet, or is
                                          empty).
                  --json                  Print JSON with stable keys (JSON lines for streams) instead of a table.
                  -h, --help              Show help information.

                """#),
        HelpText(
            arguments: ["diff", "--help"],
            text: #"""
                OVERVIEW: Show the objects created, erased and changed between two points of the log.

                Rebuilds the state as of both local sequences (0 is the empty replica) and compares them, type by
                type in name order and object by object in primary key order:
                  + Type[key]     created, then its fields, one per line
                  - Type[key]     erased, then the fields it had
                  ~ Type[key]     changed, then each changed field as `name: before -> after`
                Schema changes come first (`schema: ...`), and a last line counts the objects. With --json, one
                JSON object per line: {"change": "schema" | "created" | "erased" | "changed", ...}.

                Like diff(1), exits 1 when the two states differ and 0 when they are the same. Both states are
                rebuilt in memory.

                Exit status:
                  0   success
                  1   verify found damage or a difference; diff found differences
                  64  bad usage: an unknown option, a bad number, primary key, type or query
                  65  a damaged log entry (checksum, chain or decoding)
                  66  no replica here, a newer or development replica format, or no such log entry
                  70  any other failure
                  73  replay or backup could not create its output
                  74  storage could not be read

                USAGE: tributary-log diff <replica> <sequence-a> <sequence-b> [--json]

                ARGUMENTS:
                  <replica>               Path to the replica directory.
                  <sequence-a>            The first local sequence (0 for the empty replica).
                  <sequence-b>            The second local sequence.

                OPTIONS:
                  --json                  Print JSON with stable keys (JSON lines for streams) instead of a table.
                  -h, --help              Show help information.

                """#),
        HelpText(
            arguments: ["history", "--help"],
            text: #"""
                OVERVIEW: List every changeset that touched one object, with what it did to it.

                Reads the whole log and prints one line per changeset with an instruction on the object, in fixed
                columns:
                  SEQ         local sequence (right-aligned, 8)
                  ORIGIN:SEQ  the replica that wrote the changeset and its sequence number there (24)
                  TIME (UTC)  the changeset's stamp, to the millisecond (24)
                  AUTHOR      the changeset's author, "-" when none (16, longer names cut with …)
                  WHAT        the instructions on the object, joined by "; ", paths relative to the object:
                              create {fields}, set property = value, add property += delta,
                              insert value into list right of id, replace list<id> with value,
                              remove list<id>, move list<id> to ..., clear list, erase
                Removing the object's type counts as touching it. Embedded objects are part of their parent: their
                changes show as property<id>.field.

                The primary key is read as the schema says the type's key is: an int (digits), an ObjectID (24 hex
                digits), a UUID, or a string taken as is. With --json, one JSON object per line: the keys of `list`
                plus instructions (only those on the object).

                Exit status:
                  0   success
                  1   verify found damage or a difference; diff found differences
                  64  bad usage: an unknown option, a bad number, primary key, type or query
                  65  a damaged log entry (checksum, chain or decoding)
                  66  no replica here, a newer or development replica format, or no such log entry
                  70  any other failure
                  73  replay or backup could not create its output
                  74  storage could not be read

                USAGE: tributary-log history <replica> <type> <primary-key> [--json]

                ARGUMENTS:
                  <replica>               Path to the replica directory.
                  <type>                  The object's type.
                  <primary-key>           The object's primary key.

                OPTIONS:
                  --json                  Print JSON with stable keys (JSON lines for streams) instead of a table.
                  -h, --help              Show help information.

                """#),
        HelpText(
            arguments: ["objects", "--help"],
            text: #"""
                OVERVIEW: Print the objects of one type, as a table or JSON lines.

                Reads the replica's current state (its views, as of the last commit). --where takes a query in the
                Realm Query Language, with its SORT, DISTINCT and LIMIT clauses:
                  tributary-log objects DIR ChatMessage --where 'author == "ada" SORT(timestamp DESC) LIMIT(5)'
                The table has one column per property, the primary key first, then the schema's order; cells longer
                than 40 characters are cut with …. With --json, one JSON object per line with every value in full
                (dates, ObjectIDs, UUIDs, data and links tagged as {"$date": ...}, {"$oid": ...}, {"$uuid": ...},
                {"$binary": ...}, {"$link": ...}).

                Where replicas defined a property with different types, the values written under the definition
                that lost are kept aside and do not show: the table lists them in a last column, "aside", and JSON
                under "$aside" (property, the type they were written as, value).

                Exit status:
                  0   success
                  1   verify found damage or a difference; diff found differences
                  64  bad usage: an unknown option, a bad number, primary key, type or query
                  65  a damaged log entry (checksum, chain or decoding)
                  66  no replica here, a newer or development replica format, or no such log entry
                  70  any other failure
                  73  replay or backup could not create its output
                  74  storage could not be read

                USAGE: tributary-log objects <replica> <type> [--where <where>] [--json]

                ARGUMENTS:
                  <replica>               Path to the replica directory.
                  <type>                  The object type.

                OPTIONS:
                  --where <where>         A query in the Realm Query Language.
                  --json                  Print JSON with stable keys (JSON lines for streams) instead of a table.
                  -h, --help              Show help information.

                """#),
        HelpText(
            arguments: ["verify", "--help"],
            text: #"""
                OVERVIEW: Check every log entry, then rebuild the views from the log and compare them.

                Checks each log entry's checksum and its chain to the entry before, replays the log into fresh
                views in a scratch directory (removed afterwards) and compares them, record by record and index
                entry by index entry, with the replica's views, all on one snapshot: it runs alongside a writer.
                Memory stays bounded however long the log is; --in-memory replays in memory instead (faster on
                small replicas, memory grows with the number of objects).

                Prints `verified: ...` and exits 0, or `FAILED: <the first problem> (...)` and exits 1, the problem
                naming the damaged entry ("checksum mismatch in log entry 812 ...") or the differing object.
                Progress shows on stderr when it is a terminal. With --json: {"passed", "changesetsChecked",
                "objectsCompared", "indexEntriesCompared", "firstProblem"}.

                Exit status:
                  0   success
                  1   verify found damage or a difference; diff found differences
                  64  bad usage: an unknown option, a bad number, primary key, type or query
                  65  a damaged log entry (checksum, chain or decoding)
                  66  no replica here, a newer or development replica format, or no such log entry
                  70  any other failure
                  73  replay or backup could not create its output
                  74  storage could not be read

                USAGE: tributary-log verify <replica> [--scratch <scratch>] [--in-memory] [--json]

                ARGUMENTS:
                  <replica>               Path to the replica directory.

                OPTIONS:
                  --scratch <scratch>     Rebuild in this directory (default: a new one in the temporary directory;
                                          must be empty).
                  --in-memory             Replay in memory instead of a scratch directory.
                  --json                  Print JSON with stable keys (JSON lines for streams) instead of a table.
                  -h, --help              Show help information.

                """#),
        HelpText(
            arguments: ["export", "--help"],
            text: #"""
                OVERVIEW: Stream every changeset with its decoded instructions.

                Writes one JSON object per changeset, per line, in log order, as the log is read (memory stays
                bounded however long the log is). Keys: localSequence, origin, originSequence, time (UTC),
                hybridTime, author, instructionCount, storedBytes, uncompressedBytes, compressed, schemaVersion,
                context (the causal context: [{"replica", "originSequence"}]), instructions ([{"op": ...,
                operands}]). Values JSON has no type for are tagged: {"$date"}, {"$oid"}, {"$uuid"}, {"$binary"},
                {"$link"}.

                Each entry's checksum and chain are checked; a damaged entry stops the export with its number.
                Progress shows on stderr when it is a terminal and stdout is not.

                Exit status:
                  0   success
                  1   verify found damage or a difference; diff found differences
                  64  bad usage: an unknown option, a bad number, primary key, type or query
                  65  a damaged log entry (checksum, chain or decoding)
                  66  no replica here, a newer or development replica format, or no such log entry
                  70  any other failure
                  73  replay or backup could not create its output
                  74  storage could not be read

                USAGE: tributary-log export <replica> [--format <format>] [--from <from>] [--to <to>]

                ARGUMENTS:
                  <replica>               Path to the replica directory.

                OPTIONS:
                  --format <format>       The output format. (values: jsonl; default: jsonl)
                  --from <from>           The first local sequence to export. (default: 1)
                  --to <to>               The last local sequence to export (default: the end of the log).
                  -h, --help              Show help information.

                """#),
        HelpText(
            arguments: ["backup", "--help"],
            text: #"""
                OVERVIEW: Copy a replica into a new directory, consistently, while it is written to.

                Writes the replica as of one commit into OUT (created; it must be new or empty), without stopping
                the app or daemon that writes to it and without changing it. The copy opens as the same replica.
                Use it to back up a daemon, or to start a new daemon of a cluster from another daemon's replica:
                the new daemon then applies only the shared log's entries after the copy.

                Exit status:
                  0   success
                  1   verify found damage or a difference; diff found differences
                  64  bad usage: an unknown option, a bad number, primary key, type or query
                  65  a damaged log entry (checksum, chain or decoding)
                  66  no replica here, a newer or development replica format, or no such log entry
                  70  any other failure
                  73  replay or backup could not create its output
                  74  storage could not be read

                USAGE: tributary-log backup <replica> <out>

                ARGUMENTS:
                  <replica>               Path to the replica directory.
                  <out>                   The directory to write the copy into (new or empty).

                OPTIONS:
                  -h, --help              Show help information.

                """#),
    ]
}
