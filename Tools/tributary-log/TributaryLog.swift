// tributary-log: inspect and replay a replica's changeset log, read-only.
import ArgumentParser

@main
struct TributaryLog: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tributary-log",
        abstract: "Inspect and replay a replica's changeset log (read-only).",
        discussion: """
            Opens the replica read-only: it works while an app or a daemon writes to the same directory, and it \
            never changes it. Data goes to stdout, as a table or, with --json, as JSON with stable keys (JSON lines \
            for streams); progress (on a terminal) and errors go to stderr.

            \(ExitStatus.help)
            """,
        subcommands: [
            Info.self, List.self, Show.self, Replay.self, Diff.self, History.self, Objects.self, Verify.self,
            Export.self, Backup.self,
        ])
}
