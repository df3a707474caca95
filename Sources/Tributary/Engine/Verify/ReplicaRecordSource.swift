import TributaryLog
import TributaryMerge
import TributaryModel
import TributaryViews

/// The merge engine's view of a replica in a storage transaction: records from the views, adoptions from the log.
///
/// A class: the merge engine copies its source into a causal resolver for every instruction it applies, and copying
/// one reference costs a retain where copying this struct's fields would cost one each.
final class ReplicaRecordSource: RecordSource {
    let views: ViewStore
    let log: ChangesetLog
    let transaction: TributaryStorageReadTransaction

    init(views: ViewStore, log: ChangesetLog, transaction: TributaryStorageReadTransaction) {
        self.views = views
        self.log = log
        self.transaction = transaction
    }

    func loadRecord(type: String, primaryKey: PrimaryKey) throws -> ObjectRecord? {
        try views.record(type: type, primaryKey: primaryKey, in: transaction)
    }

    func loadPrimaryKeys(ofType type: String) throws -> [PrimaryKey] {
        try views.primaryKeys(ofType: type, in: transaction)
    }

    func causalDots(ofOrigin dot: Dot) throws -> [Dot] {
        try log.causalDots(ofOrigin: dot, in: transaction)
    }
}
