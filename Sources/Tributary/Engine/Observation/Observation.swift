import Synchronization
import TributaryMerge

/// The live observers of a replica, woken after each commit.
final class ObserverRegistry: Sendable {
    struct Entry: Sendable {
        /// The keys a commit changed, whether it changed the schema, and the local log sequence it ends at.
        var onCommit: @Sendable ([RecordKey], Bool, UInt64) -> Void
        var onFinish: @Sendable () -> Void
    }
    private let entries = Mutex<[UInt64: Entry]>([:])
    private let nextID = Atomic<UInt64>(1)

    func add(_ entry: Entry) -> UInt64 {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        entries.withLock { $0[id] = entry }
        return id
    }

    func remove(_ id: UInt64) {
        entries.withLock { _ = $0.removeValue(forKey: id) }
    }

    /// Called after each commit, in commit order (under the replica's write lock).
    func notify(changedKeys: [RecordKey], schemaChanged: Bool, sequence: UInt64) {
        let current = entries.withLock { Array($0.values) }
        for entry in current { entry.onCommit(changedKeys, schemaChanged, sequence) }
    }

    func finishAll() {
        let current = entries.withLock { entries in
            defer { entries.removeAll() }
            return Array(entries.values)
        }
        for entry in current { entry.onFinish() }
    }
}
