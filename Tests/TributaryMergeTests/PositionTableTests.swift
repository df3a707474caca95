import Testing
import TributaryModel

@testable import TributaryMerge

/// The working set finds each key's entry through a `PositionTable`. Checked against a dictionary, with hashes drawn
/// from a few values so that keys share their hash bits (the table must then tell them apart by the key), and with
/// enough keys to make it grow several times.
@Suite struct PositionTableTests {
    /// Keys `0..<count` with hashes from `hashes`: key `k` has `hashes[k % hashes.count]`.
    static func run(count: Int, hashes: [Int], reserve: Int? = nil) {
        var table = PositionTable()
        if let reserve { table.reserveCapacity(reserve) }
        var keys: [Int] = []  // position -> key, as the working set's entries
        var expected: [Int: Int] = [:]
        var generator = SplitMix64(seed: UInt64(count))
        func hash(_ key: Int) -> Int { hashes[key % hashes.count] }
        func find(_ key: Int) -> Int? { table.position(hash: hash(key)) { keys[$0] == key } }
        for _ in 0..<count * 2 {
            let key = Int(generator.next() % UInt64(count))
            if let position = find(key) {
                #expect(expected[key] == position)
            } else {
                #expect(expected[key] == nil)
                let position = keys.count
                keys.append(key)
                table.insert(hash: hash(key), position: position)
                expected[key] = position
            }
        }
        #expect(table.count == expected.count)
        for key in 0..<count { #expect(find(key) == expected[key]) }
        #expect(find(count) == nil)
        // Emptied, as a working set empties it after taking its changes, and used again.
        table.removeAll()
        #expect(table.count == 0)
        #expect(find(0) == nil)
        keys = [count + 1, count + 2]
        table.insert(hash: hash(count + 1), position: 0)
        table.insert(hash: hash(count + 2), position: 1)
        #expect(find(count + 1) == 0 && find(count + 2) == 1 && find(0) == nil)
    }

    @Test func distinctHashes() {
        var generator = SplitMix64(seed: 11)
        Self.run(count: 5_000, hashes: (0..<5_000).map { _ in Int(bitPattern: UInt(generator.next())) })
    }

    @Test func sharedHashBits() {
        // Equal low 32 bits (what a slot keeps), different high bits: the keys collide in every way the table sees.
        Self.run(count: 600, hashes: [0x1234_5678, 0x7_1234_5678, -0x1234_5678_0000_0000 | 0x1234_5678])
        // Hashes whose low bits differ only above the table's mask: the same start slot, different kept bits.
        Self.run(count: 600, hashes: (0..<8).map { $0 << 20 })
        Self.run(count: 300, hashes: [0])
    }

    @Test func reservedCapacity() {
        var generator = SplitMix64(seed: 12)
        Self.run(count: 2_000, hashes: (0..<64).map { _ in Int(bitPattern: UInt(generator.next())) }, reserve: 2_000)
        Self.run(count: 2_000, hashes: (0..<64).map { _ in Int(bitPattern: UInt(generator.next())) }, reserve: 3)
    }

    /// Integer keys that differ only in their last three bits get neighbouring slots (what makes consecutive keys
    /// cheap to look up); keys are still told apart by type and by every other bit.
    @Test func workingSetHashes() {
        for group in [Int64.min >> 3, -2, -1, 0, 1, 12_345, Int64.max >> 3] {
            let hashes = (0..<8).map {
                WorkingSet.tableHash(RecordKey(type: "Item", primaryKey: .int(group << 3 | $0)))
            }
            #expect(Set(hashes.map { $0 >> 3 }).count == 1)
            #expect(hashes.map { $0 & 7 } == Array(0..<8))
            #expect(hashes[3] == WorkingSet.tableHash(RecordKey(type: "Other", primaryKey: .int(group << 3 | 3))))
        }
        let strings = (0..<100).map { WorkingSet.tableHash(RecordKey(type: "Item", primaryKey: .string("k\($0)"))) }
        #expect(Set(strings).count == 100)
        #expect(strings[7] == WorkingSet.tableHash(RecordKey(type: "Item", primaryKey: .string("k7"))))
    }
}
