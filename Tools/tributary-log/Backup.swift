import ArgumentParser
import Foundation
import Tributary

struct Backup: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Copy a replica into a new directory, consistently, while it is written to.",
        discussion: """
            Writes the replica as of one commit into OUT (created; it must be new or empty), without stopping the \
            app or daemon that writes to it and without changing it. The copy opens as the same replica. Use it \
            to back up a daemon, or to start a new daemon of a cluster from another daemon's replica: the new \
            daemon then applies only the shared log's entries after the copy.

            \(ExitStatus.help)
            """)

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "The directory to write the copy into (new or empty).", completion: .directory)
    var out: String

    func run() throws {
        try reportingFailures {
            let opened = try replica.open()
            defer { opened.close() }
            do {
                try opened.backUp(to: out)
            } catch let error as TributaryError where error.code != .invalidValue {
                throw ToolFailure(error.message, status: ExitStatus.cannotCreate)
            }
            print("copied replica \(opened.replicaID) to \(out)")
        }
    }
}
