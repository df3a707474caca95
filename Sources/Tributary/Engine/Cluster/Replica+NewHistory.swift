import Foundation
import TributaryLog
import TributaryModel

extension Replica {
    /// Makes a replica in `directory`, with the id `replicaID`, whose history starts from everything `source` holds:
    /// how a cluster whose shared log lost commits and was compacted starts its new epoch from the daemon that applied
    /// the most (docs/design/Cluster.md).
    ///
    /// `source` is copied (``backUp(to:)``) into the system's temporary directory, the copy's whole log is compacted
    /// into a base state, and the new replica starts from that base (as an empty replica starts from a compacted
    /// daemon's base): the same records, schema, adoptions and version vector, its clock past every stamp the base
    /// holds, and an empty log of its own. `source` is only read. A replica whose version vector does not include
    /// the base's cannot be sent what it lacks (``TributaryError/Code/historyCompacted``): it is reset.
    ///
    /// - Parameters:
    ///   - source: the replica the new history starts from.
    ///   - directory: a new or empty directory.
    ///   - replicaID: the new replica's id.
    ///   - configuration: how the new replica is opened; its `replicaID` is set to `replicaID`.
    ///   - recordsInMemory: how many records the compaction of the copy holds in memory at a time.
    /// - Returns: the new replica, open.
    /// - Throws: ``TributaryError`` with `.invalidValue` when `directory` is not empty or `source` holds nothing;
    ///   what copying, compacting or writing throws (the new directory is then removed).
    package static func startingNewHistory(
        from source: Replica, directory: String, replicaID: ReplicaID,
        configuration: Configuration = Configuration(), recordsInMemory: Int = rebuildRecordsInMemory
    ) throws -> Replica {
        let files = FileManager.default
        if let existing = try? files.contentsOfDirectory(atPath: directory), !existing.isEmpty {
            throw TributaryError(
                .invalidValue, "\(directory) is not empty: a new history starts in a new or empty directory")
        }
        let nothingHeld = TributaryError(
            .invalidValue, "replica \(source.directory) holds no changeset: there is nothing to start a history from")
        guard !source.versionVector.entries.isEmpty else { throw nothingHeld }
        let scratch = files.temporaryDirectory.appendingPathComponent("tributary-history-\(UUID().uuidString)").path
        defer { try? files.removeItem(atPath: scratch) }
        try source.backUp(to: scratch)
        var copyConfiguration = Configuration()
        copyConfiguration.durability = .none
        let copy = try Replica.open(directory: scratch, configuration: copyConfiguration)
        defer { copy.close() }
        try copy.compact(through: .max, recordsInMemory: recordsInMemory, includingLastEntry: true)
        guard let reader = try copy.baseReader() else { throw nothingHeld }

        var configuration = configuration
        configuration.replicaID = replicaID
        let replica = try Replica.open(directory: directory, configuration: configuration)
        do {
            var first = true
            while let part = try reader.next(maximumBytes: 8 << 20) {
                try replica.stageBasePart(records: part.records, adoptions: part.adoptions, first: first)
                first = false
            }
            try replica.finishBase(
                schema: reader.schema, vector: reader.compaction.vector, held: reader.compaction.held,
                latest: reader.compaction.latest)
            return replica
        } catch {
            replica.close()
            try? files.removeItem(atPath: directory)
            throw TributaryError.wrap(error)
        }
    }
}
