import Foundation
import TributaryStorage

extension Replica {
    /// Writes a consistent copy of this replica into `directory`, while it is being written to: a hot backup, and
    /// how a new daemon of a cluster starts from another's replica instead of the whole shared log.
    ///
    /// The copy is the replica at one commit, compacted (free pages left out), and opens as this replica: the same
    /// replica id, log and views. Writers are not blocked while it is taken.
    ///
    /// - Throws: ``TributaryError`` with ``TributaryError/Code/invalidValue`` when `directory` exists and is not
    ///   empty; ``TributaryError/Code/storage`` (or ``TributaryError/Code/diskFull``) when the copy cannot be written.
    public func backUp(to directory: String) throws {
        let files = FileManager.default
        if let existing = try? files.contentsOfDirectory(atPath: directory), !existing.isEmpty {
            throw TributaryError(
                .invalidValue, "\(directory) is not empty: a backup goes into a new or empty directory")
        }
        do {
            try files.createDirectory(atPath: directory, withIntermediateDirectories: true)
            try environment.copy(to: directory)
        } catch {
            throw TributaryError.wrap(error, context: "backing up \(self.directory) to \(directory)")
        }
    }
}
