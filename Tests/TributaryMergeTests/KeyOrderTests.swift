import Testing
import TributaryModel

@testable import TributaryMerge

/// A commit writes its changed records in key order; `WorkingSet.keyOrder` sorts integer keys of one type as plain
/// integers and everything else through `RecordKey`'s own order. Both must give `RecordKey`'s order.
@Suite struct KeyOrderTests {
    static func check(_ keys: [RecordKey]) {
        let order = WorkingSet.keyOrder(keys)
        #expect(order.map { keys[$0] } == keys.sorted())
        #expect(Set(order) == Set(keys.indices))
    }

    @Test func integerKeysOfOneType() {
        var generator = SplitMix64(seed: 3)
        var values: Set<Int64> = [.min, .max, 0, -1, 1]
        while values.count < 2_000 {
            values.insert(Int64(bitPattern: generator.next()) >> Int64(generator.next() % 64))
        }
        Self.check(values.shuffled(using: &generator).map { RecordKey(type: "Item", primaryKey: .int($0)) })
    }

    @Test func mixedTypesAndKeyKinds() {
        var generator = SplitMix64(seed: 5)
        var keys: [RecordKey] = []
        for index in 0..<500 {
            let type = ["Item", "Author", "item"][Int(generator.next() % 3)]
            let key: PrimaryKey = generator.next() % 4 == 0 ? .string("k\(index)") : .int(Int64(index) - 250)
            keys.append(RecordKey(type: type, primaryKey: key))
        }
        Self.check(keys)
        Self.check(keys.filter { $0.type == "Item" })  // one type, integer and string keys
        Self.check([])
        Self.check([RecordKey(type: "Item", primaryKey: .int(1))])
    }
}
