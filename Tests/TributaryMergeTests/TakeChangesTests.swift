import Testing
import TributaryMerge
import TributaryModel
import TributaryTestSupport

/// `WorkingSet.takeChanges()` moves the changed records out instead of copying them (commits, replays and integrations
/// use it): it must hand back exactly what `changes` lists, in the same key order, and leave nothing behind.
@Suite struct TakeChangesTests {
    /// Records "stored" before the working set starts.
    struct StoredRecords: RecordSource {
        var records: [RecordKey: ObjectRecord]

        func loadRecord(type: String, primaryKey: PrimaryKey) throws -> ObjectRecord? {
            records[RecordKey(type: type, primaryKey: primaryKey)]
        }

        func loadPrimaryKeys(ofType type: String) throws -> [PrimaryKey] {
            records.keys.filter { $0.type == type }.sorted().map(\.primaryKey)
        }
    }

    static func record(_ value: Int64, _ stamp: UInt64) -> ObjectRecord {
        let register = Register(
            value: .scalar(.int(value)),
            stamp: Stamp(time: HybridTime(rawValue: stamp), replica: ReplicaID(rawValue: 1)))
        return ObjectRecord(exists: true, fields: ["n": .register(register)])
    }

    @Test("takeChanges hands back what changes lists, in key order, and empties the working set", arguments: 1...20)
    func takeChangesEqualsChanges(seed: UInt64) throws {
        var generator = SplitMix64(seed: seed)
        var stored: [RecordKey: ObjectRecord] = [:]
        for index in 0..<40 where generator.next() % 2 == 0 {
            let type = index % 3 == 0 ? "A" : "B"
            stored[RecordKey(type: type, primaryKey: .int(Int64(index)))] = Self.record(Int64(index), 1)
        }
        let schema = Schema(types: [])
        var working = WorkingSet(source: StoredRecords(records: stored), schema: schema)
        for step in 0..<120 {
            let index = Int64(generator.next() % 40)
            let key = RecordKey(
                type: index % 3 == 0 ? "A" : "B",
                primaryKey: generator.next() % 4 == 0 ? .string("k\(index)") : .int(index))
            switch generator.next() % 4 {
            case 0: _ = try working.record(key)  // read only: not a change
            case 1: try working.setRecord(Self.record(Int64(step), UInt64(step) + 2), for: key)
            case 2: try working.setRecord(nil, for: key)
            default:
                try working.withRecord(key) { record in
                    guard record != nil else { return false }
                    record = Self.record(-Int64(step), UInt64(step) + 2)
                    return true
                }
            }
        }
        let copied = working.changes
        #expect(!copied.isEmpty)
        // The changes cover every case a move must carry: records that were stored and were not, kept and removed.
        #expect(copied.contains { $0.before != nil } && copied.contains { $0.before == nil })
        #expect(copied.contains { $0.after != nil } && copied.contains { $0.after == nil })
        #expect(copied.map(\.key) == copied.map(\.key).sorted())
        let taken = working.takeChanges()
        #expect(taken.map(\.key) == copied.map(\.key))
        #expect(taken.map(\.before) == copied.map(\.before))
        #expect(taken.map(\.after) == copied.map(\.after))
        // Every change's `before` is what the source holds.
        for change in taken { #expect(change.before == stored[change.key]) }
        // Nothing is left: no changes, and a record is loaded from the source again.
        #expect(working.changes.isEmpty)
        #expect(!working.hasChanges)
        #expect(working.takeChanges().isEmpty)
        #expect(working.schema == schema)
        for change in taken { #expect(try working.record(change.key) == stored[change.key]) }
    }
}
