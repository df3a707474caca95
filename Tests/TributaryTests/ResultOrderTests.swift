import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// Sorted, distinct and limited results are rearranged where they are (`Snapshot.arrange`), and objects read from a
/// replica find their properties by name through their type's index: both must give exactly what copying and
/// looking up by name give.
@Suite("Result order and reads by name")
struct ResultOrderTests {
    static func objects(_ count: Int) -> [DynamicObject] {
        (0..<count).map { DynamicObject(type: "T", primaryKey: .int(Int64($0)), values: ["n": .int(Int64($0))]) }
    }

    @Test(arguments: [UInt64(1), 2, 3, 4])
    func rearrangingInPlaceGivesWhatCopyingGives(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        for _ in 0..<200 {
            let count = Int(random.next() % 40)
            let objects = Self.objects(count)
            // A SORT's permutation, cut short as DISTINCT and LIMIT cut it.
            var order = Array(0..<count)
            for index in order.indices.reversed() { order.swapAt(index, Int(random.next() % UInt64(index + 1))) }
            order.removeLast(count == 0 ? 0 : Int(random.next() % UInt64(count + 1)))
            var arranged = objects
            Snapshot.arrange(&arranged, in: order)
            #expect(arranged == order.map { objects[$0] }, "seed \(seed): \(order)")
        }
    }

    @Test func anOrderThatNamesAnObjectTwiceOrNoneIsCopied() {
        let objects = Self.objects(5)
        var repeated = objects
        Snapshot.arrange(&repeated, in: [3, 1, 3])
        #expect(repeated == [objects[3], objects[1], objects[3]])
        var outside = objects
        Snapshot.arrange(&outside, in: [4, 7, 0])
        #expect(outside == [objects[4], objects[0]])
        var none = objects
        Snapshot.arrange(&none, in: [])
        #expect(none.isEmpty)
    }

    @Test func sortedLimitedAndDistinctResultsFromAReplica() throws {
        let directory = try TemporaryDirectory()
        let schema = Schema(types: [
            ObjectSchema(
                name: "Item", properties: [.scalar("_id", .int), .scalar("group", .int), .scalar("name", .string)])
        ])
        let replica = try Replica.open(directory: directory.path, schema: schema)
        var expected: [(id: Int64, group: Int64, name: String)] = []
        try replica.write { txn in
            for id in Int64(0)..<300 {
                let item = (id: id, group: (id * 7919) % 13, name: "item \((id * 31) % 17)")
                expected.append(item)
                try txn.create("Item", ["_id": .int(id), "group": .int(item.group), "name": .string(item.name)])
            }
        }
        let sorted = expected.sorted { ($0.group, -$0.id) < ($1.group, -$1.id) }
        let read = try replica.read { try $0.objects("Item", where: "group < 10 SORT(group ASC, _id DESC) LIMIT(50)") }
        #expect(read.map(\.primaryKey) == sorted.filter { $0.group < 10 }.prefix(50).map { .int($0.id) })
        #expect(read.map { $0["name"] } == sorted.filter { $0.group < 10 }.prefix(50).map { .string($0.name) })
        // DISTINCT keeps the first object of each group in the SORT's order.
        let distinct = try replica.read {
            try $0.objects("Item", where: "TRUEPREDICATE SORT(_id DESC) DISTINCT(group)")
        }
        var seen: Set<Int64> = []
        let firstOfEach = expected.reversed().filter { seen.insert($0.group).inserted }
        #expect(distinct.map(\.primaryKey) == firstOfEach.map { .int($0.id) })
    }

    @Test func anObjectReadByPositionAnswersByNameAsOneMadeByName() throws {
        let directory = try TemporaryDirectory()
        // More properties than are searched one by one, so that names are found through the index's table too.
        let names = (0..<20).map { "p\($0)" }
        let schema = Schema(types: [
            ObjectSchema(name: "Wide", properties: [.scalar("_id", .int)] + names.map { .scalar($0, .int) })
        ])
        let replica = try Replica.open(directory: directory.path, schema: schema)
        var values: [String: Value] = ["_id": .int(1)]
        for (index, name) in names.enumerated() { values[name] = .int(Int64(index * 10)) }
        try replica.write { txn in try txn.create("Wide", values) }
        let read = try #require(try replica.object("Wide", primaryKey: .int(1)))
        let byName = DynamicObject(type: "Wide", primaryKey: .int(1), values: values)
        for name in ["_id"] + names { #expect(read[name] == values[name], "\(name)") }
        #expect(read["missing"] == .null)
        #expect(byName["missing"] == .null)
        #expect(read.values == values)
        #expect(read == byName)
        #expect(read.hashValue == byName.hashValue)
    }
}
