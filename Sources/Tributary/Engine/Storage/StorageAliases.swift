import TributaryStorage

// The storage layer's transaction and snapshot types, under names that do not clash with this module's own
// `Transaction` and `Snapshot`. Internal: storage types never reach app developers.
typealias TributaryStorageReadTransaction = TributaryStorage.ReadTransaction
typealias TributaryStorageWriteTransaction = TributaryStorage.WriteTransaction
typealias TributaryStorageSnapshot = TributaryStorage.Snapshot
