import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// Dates are stored as seconds since 1970, and Foundation keeps them as seconds since 2001: a date read back can differ
/// from the one written in its last bit. Queries must still find a date by the value it was written with, through an
/// index and through a full scan alike.
@Suite("Dates in queries and writes")
struct DateQueryTests {
    static let schema = Schema(types: [
        ObjectSchema(
            name: "Event",
            properties: [
                .scalar("_id", .int), .scalar("at", .date, indexed: true), .scalar("plain", .date),
                Property("days", .scalar(.date), list: true),
            ])
    ])

    func open(_ directory: TemporaryDirectory) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(directory: directory.path, schema: Self.schema, configuration: configuration)
    }

    /// Current dates with sub-second parts: about half of them do not survive the trip through seconds since 1970
    /// unchanged in their last bit.
    static let dates: [Date] = (0..<200).map { index in
        Date(timeIntervalSinceReferenceDate: 785_000_000 + Double(index) * 1_234.567_891_3)
    }

    /// A replica holding an event for each of ``dates``, keyed by its index.
    func openWithDates(_ directory: TemporaryDirectory) throws -> Replica {
        let replica = try open(directory)
        try replica.write { txn in
            for (index, date) in Self.dates.enumerated() {
                try txn.create("Event", ["_id": .int(Int64(index)), "at": .date(date), "plain": .date(date)])
            }
        }
        return replica
    }

    @Test("== finds each date it was written with, through the index and through a scan")
    func equalityFindsWrittenDates() throws {
        let directory = TemporaryDirectory("dates")
        let replica = try openWithDates(directory)
        // The premise: some dates read back differently from how they were written.
        let changed = try Self.dates.indices.filter { index in
            try replica.object("Event", primaryKey: .int(Int64(index)))?["plain"] != .date(Self.dates[index])
        }
        #expect(!changed.isEmpty, "every date survived the trip: this test no longer tests anything")
        for (index, date) in Self.dates.enumerated() {
            for property in ["at", "plain"] {
                let found = try replica.objects("Event", where: "\(property) == $0", arguments: [.date(date)])
                #expect(found.map(\.primaryKey) == [.int(Int64(index))], "\(property) == date \(index)")
                let range = try replica.objects(
                    "Event", where: "\(property) BETWEEN {$0, $0}", arguments: [.date(date)])
                #expect(range.map(\.primaryKey) == [.int(Int64(index))], "\(property) BETWEEN date \(index)")
                let before = try replica.objects("Event", where: "\(property) < $0", arguments: [.date(date)]).count
                #expect(before == index, "\(property) < date \(index)")
            }
        }
        let list = try replica.objects("Event", where: "plain IN $0", arguments: [.list(Self.dates.map(Value.date))])
        #expect(list.count == Self.dates.count)
    }

    @Test("A date read back finds its object, and sorts as it was written")
    func readBackDatesFindTheirObjects() throws {
        let directory = TemporaryDirectory("dates-read-back")
        let replica = try openWithDates(directory)
        for object in try replica.objects("Event") {
            for property in ["at", "plain"] {
                let found = try replica.objects("Event", where: "\(property) == $0", arguments: [object[property]])
                #expect(found.map(\.primaryKey) == [object.primaryKey], "\(property) of \(object.primaryKey)")
            }
        }
        let sorted = try replica.objects("Event", where: "TRUEPREDICATE SORT(plain DESC)").map(\.primaryKey)
        #expect(sorted == Self.dates.indices.reversed().map { .int(Int64($0)) })
    }

    /// Queries compare dates by their seconds since 1970; that is sound only if a date read back has the same seconds
    /// as the one written.
    @Test("A date read back has the seconds since 1970 it was written with, across 3,000 years")
    func storedSecondsSurviveTheTrip() {
        var random = SplitMix64(seed: 2026)
        for _ in 0..<200_000 {
            // Seconds since 2001 from about 1,500 years before to 1,500 after, and some near 1970 and 2001.
            let magnitude = Double(UInt64(1) << (random.next() % 36)) * 1.5
            let seconds = (Double(random.next() % 1_000_000) / 1_000_000 - 0.5) * magnitude * 2
            for date in [Date(timeIntervalSinceReferenceDate: seconds), Date(timeIntervalSince1970: seconds)] {
                let stored = date.timeIntervalSince1970
                #expect(
                    Date(timeIntervalSince1970: stored).timeIntervalSince1970 == stored,
                    "\(date.timeIntervalSinceReferenceDate)")
            }
        }
    }

    @Test("A date that is not a number matches no comparison, through the index and through a scan")
    func notANumberMatchesNothing() throws {
        let directory = TemporaryDirectory("dates-nan")
        let replica = try open(directory)
        let nan = Date(timeIntervalSince1970: .nan)
        let day = Date(timeIntervalSince1970: 86_400)
        try replica.write { txn in
            try txn.create("Event", ["_id": 1, "at": .date(nan), "plain": .date(nan)])
            try txn.create("Event", ["_id": 2, "at": .date(day), "plain": .date(day)])
        }
        for property in ["at", "plain"] {
            for op in ["==", ">", ">=", "<", "<="] {
                #expect(
                    try replica.objects("Event", where: "\(property) \(op) $0", arguments: [.date(nan)]).count == 0,
                    "\(property) \(op) NaN")
            }
            #expect(
                try replica.objects("Event", where: "\(property) != $0", arguments: [.date(nan)]).count == 2,
                "\(property) != NaN")
            #expect(
                try replica.objects(
                    "Event", where: "\(property) > $0", arguments: [.date(Date(timeIntervalSince1970: 0))]
                ).count == 1,
                "\(property) > 1970 matches the day, not the NaN")
            #expect(
                try replica.objects(
                    "Event", where: "\(property) <= $0", arguments: [.date(Date(timeIntervalSince1970: 1e12))]
                ).count == 1,
                "\(property) <= far future matches the day, not the NaN")
            let sorted = try replica.objects("Event", where: "TRUEPREDICATE SORT(\(property) ASC)").map(\.primaryKey)
            #expect(sorted == [.int(1), .int(2)], "NaN sorts first, as it does among doubles")
        }
        #expect(try replica.verify().passed)
    }

    /// The dates among ``dates`` whose read-back value is not `==` to the written one.
    static func changedDates() -> [Date] {
        dates.filter { Date(timeIntervalSince1970: $0.timeIntervalSince1970) != $0 }
    }

    @Test("Writing back the date a replica holds, as first written, does not win over a peer's concurrent change")
    func rewrittenDateDoesNotOverwriteConcurrentChange() throws {
        let changed = Self.changedDates()
        try #require(changed.count >= 5)
        let original = changed[0]
        let cluster = try Cluster(2, schema: Self.schema)
        try cluster[0].write { try $0.create("Event", ["_id": 1, "at": .date(original), "plain": .date(original)]) }
        try cluster.syncAll()
        // Replica 1 changes `plain`; replica 0, later, changes `at` and writes `plain` as the app still holds it: the
        // date it first wrote, which differs in its last bit from the one stored.
        cluster.clocks[1].advance(byMilliseconds: 10)
        cluster.clocks[0].advance(byMilliseconds: 20)
        try cluster[1].write { try $0.update("Event", primaryKey: .int(1), ["plain": .date(changed[1])]) }
        try cluster[0].write {
            try $0.update("Event", primaryKey: .int(1), ["at": .date(changed[2]), "plain": .date(original)])
        }
        try cluster.syncAll()
        let object = try #require(try cluster[0].object("Event", primaryKey: .int(1)))
        #expect(object["plain"].storesAlike(.date(changed[1])), "replica 0 did not change plain; replica 1 did")
        #expect(object["at"].storesAlike(.date(changed[2])))
        #expect(try cluster.converged())
    }

    @Test("Writing back a list of dates as first written keeps its elements: a peer's concurrent removal holds")
    func rewrittenDateListKeepsElements() throws {
        let changed = Self.changedDates()
        try #require(changed.count >= 5)
        let days = Array(changed.prefix(3))
        let cluster = try Cluster(2, schema: Self.schema)
        try cluster[0].write {
            try $0.create(
                "Event", ["_id": 1, "at": .date(days[0]), "plain": .date(days[0]), "days": .list(days.map(Value.date))])
        }
        try cluster.syncAll()
        // Replica 1 removes the first day (writing the list as it reads it); replica 0 adds a day to the list as
        // the app first wrote it.
        let held = try #require(try cluster[1].object("Event", primaryKey: .int(1))?["days"].listValue)
        try cluster[1].write { try $0.update("Event", primaryKey: .int(1), ["days": .list(Array(held.dropFirst()))]) }
        try cluster[0].write {
            try $0.update("Event", primaryKey: .int(1), ["days": .list((days + [changed[3]]).map(Value.date))])
        }
        try cluster.syncAll()
        let merged = try #require(try cluster[0].object("Event", primaryKey: .int(1))?["days"])
        #expect(merged.storesAlike(.list([days[1], days[2], changed[3]].map(Value.date))), "\(merged)")
        #expect(try cluster.converged())
    }
}
