import TributaryLog
import TributaryMerge
import TributaryModel
import TributaryViews

/// The merge engine's view of a replica in a storage transaction: records from the views, adoptions from the log.
struct ReplicaRecordSource: RecordSource {
    let views: ViewStore
    let log: ChangesetLog
    let transaction: TributaryStorageReadTransaction
    /// Where the log is read, when not in `transaction` (a rebuild into scratch views reads the replica's log).
    var logTransaction: TributaryStorageReadTransaction?

    func loadRecord(type: String, primaryKey: PrimaryKey) throws -> ObjectRecord? {
        try views.record(type: type, primaryKey: primaryKey, in: transaction)
    }

    func loadPrimaryKeys(ofType type: String) throws -> [PrimaryKey] {
        try views.primaryKeys(ofType: type, in: transaction)
    }

    func causalDot(ofOrigin dot: Dot) -> Dot? {
        try? log.causalDot(ofOrigin: dot, in: logTransaction ?? transaction)
    }
}
