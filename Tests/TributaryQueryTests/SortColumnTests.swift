import Foundation
import Testing
import TributaryModel

@testable import TributaryQuery

@Suite("SORT's order") struct SortOrderTests {
    /// Values a sort key may hold: null, numbers (integers past 2^53 included, NaN), dates (the same seconds as some
    /// numbers, and NaN), strings and booleans, so that columns of one kind, of numbers and dates, and of every kind
    /// at once all occur.
    static func value(_ random: inout SplitMix64, kinds: [Int]) -> Value {
        let seconds = [-1.5, 0, 0.25, 3, 3, 1e9, 1e9 + 0.5]
        switch kinds[Int(random.next() % UInt64(kinds.count))] {
        case 0: return .null
        case 1: return .int([Int64(-2), 0, 3, 3, 1 << 53, (1 << 53) + 1, .max][Int(random.next() % 7)])
        case 2: return .double([-1.5, 0, 0.25, 3, .nan, .infinity][Int(random.next() % 6)])
        case 3: return .date(Date(timeIntervalSince1970: seconds[Int(random.next() % UInt64(seconds.count))]))
        case 4: return .date(Date(timeIntervalSince1970: .nan))
        case 5: return .string(["", "a", "B", "é"][Int(random.next() % 4)])
        default: return .bool(random.next() % 2 == 0)
        }
    }

    @Test(
        "A sort over two keys orders as sortOrder does, stably, whatever kinds the columns hold (numbers and dates compared as numbers)"
    )
    func sortMatchesSortOrder() {
        var random = SplitMix64(seed: 41)
        let mixes = [[0, 1, 2], [0, 3], [3], [1, 3], [0, 3, 4], [2, 3], [0, 1, 2, 3, 4, 5, 6], [5, 0], [1]]
        for round in 0..<400 {
            let count = Int(random.next() % 40)
            let first = mixes[round % mixes.count]
            let second = mixes[(round / mixes.count) % mixes.count]
            let rows = (0..<count).map { _ in
                [Self.value(&random, kinds: first), Self.value(&random, kinds: second)]
            }
            let ascending = (random.next() % 2 == 0, random.next() % 2 == 0)
            let sorted = applyClauses(
                [ClauseStep<Int>.sort([(0, ascending.0), (1, ascending.1)])], count: count
            ) { rows[$0][$1] }
            let expected = Array(0..<count).sorted { a, b in
                for (key, up) in [(0, ascending.0), (1, ascending.1)] {
                    let order = TributaryQuery.sortOrder(rows[a][key], rows[b][key])
                    if order != 0 { return up ? order < 0 : order > 0 }
                }
                return a < b
            }
            #expect(sorted == expected, "round \(round): \(rows)")
        }
        // Numbers come before dates, whatever their values, and whichever kind comes first in the column.
        let later = Value.date(Date(timeIntervalSince1970: 6))
        let column: [Value] = [.date(Date(timeIntervalSince1970: 5)), later, .int(10), .double(7.5)]
        #expect(
            applyClauses([ClauseStep<Int>.sort([(0, true)])], count: 4) { object, _ in column[object] } == [3, 2, 0, 1])
        let reversed = Array(column.reversed())
        #expect(
            applyClauses([ClauseStep<Int>.sort([(0, true)])], count: 4) { object, _ in reversed[object] } == [
                0, 1, 3, 2,
            ])
    }
}
