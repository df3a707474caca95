import Foundation
import Testing
import TributaryModel

@testable import TributaryQuery

/// `==` and `IN` with many constants look values up in a hash (`EqualityLookup`) rather than comparing with each:
/// the lookup must agree with `queryEqual` on every pair of values, whatever their kinds.
@Suite("Long IN lists")
struct EqualityLookupTests {
    static let readBack = Date(
        timeIntervalSince1970: Date(timeIntervalSinceReferenceDate: 785_001_234.567_891_3).timeIntervalSince1970)
    static let pool: [Value] = [
        .null, .bool(true), .bool(false),
        .int(0), .int(1), .int(-1), .int(.max), .int(.min), .int(9_007_199_254_740_993),
        .double(0), .double(-0.0), .double(1), .double(1.5), .double(.nan), .double(.infinity), .double(-.infinity),
        .double(9_007_199_254_740_992), .double(9_223_372_036_854_775_808), .double(-9_223_372_036_854_775_808),
        .double(1e-300),
        .string(""), .string("a"), .string("A"), .string("caf\u{E9}"), .string("cafe\u{301}"), .string("CAF\u{C9}"),
        .string("Stra\u{DF}e"), .string("STRASSE"), .string("\u{FB01}"), .string("fi"),
        .date(Date(timeIntervalSince1970: 0)), .date(Date(timeIntervalSince1970: -0.0)),
        .date(Date(timeIntervalSince1970: .nan)),
        .date(Date(timeIntervalSinceReferenceDate: 785_001_234.567_891_3)), .date(readBack),
        .date(Date(timeIntervalSince1970: 1)),
        .link(.string("caf\u{E9}")), .link(.string("cafe\u{301}")), .link(.int(1)), .link(.string("1")),
        .data(Data()), .data(Data([1])), .data(Data([1, 2])),
        .uuid(UUID(uuidString: "6ba7b810-9dad-11d1-80b4-00c04fd430c8")!),
        .uuid(UUID(uuidString: "6ba7b811-9dad-11d1-80b4-00c04fd430c8")!),
        .objectId(ObjectID(bytes: Array(repeating: 1, count: 12))!),
        .objectId(ObjectID(bytes: Array(repeating: 2, count: 12))!),
        .embedded(EmbeddedObject(type: "E", fields: ["a": .int(1)])),
        .embedded(EmbeddedObject(type: "E", fields: ["a": .int(2)])),
        .list([.int(1)]), .list([]),
    ]

    @Test("The lookup agrees with queryEqual on every pair of values, with and without [c] and [d]")
    func agreesWithQueryEqual() {
        let options: [StringOptions] = [
            [], .caseInsensitive, .diacriticInsensitive, [.caseInsensitive, .diacriticInsensitive],
        ]
        var disagreements: [String] = []
        for option in options {
            for right in Self.pool {
                let lookup = EqualityLookup([right], options: option)
                for left in Self.pool where lookup.contains(left) != queryEqual(left, right, options: option) {
                    disagreements.append("\(left) vs \(right) with options \(option.rawValue)")
                }
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(10))")
        // The pool holds pairs that are equal across kinds or spellings, so the test can tell.
        #expect(EqualityLookup([.double(1)], options: []).contains(.int(1)))
        #expect(
            EqualityLookup([.string("CAF\u{C9}")], options: [.caseInsensitive, .diacriticInsensitive]).contains(
                .string("cafe")))
    }

    @Test("A query with a long IN list finds what the same list finds value by value")
    func longListMatchesShortLists() throws {
        let ids: [Value] = (0..<40).map { .int($0 % 2 == 0 ? $0 : -$0) }
        let long = try Fixture.ids("_id IN $0", [.list(ids)])
        var short: [Int64] = []
        for start in stride(from: 0, to: ids.count, by: 4) {
            short += try Fixture.ids("_id IN $0", [.list(Array(ids[start..<min(start + 4, ids.count)]))])
        }
        #expect(long == short.sorted())
        #expect(!long.isEmpty)
        let titles = try Fixture.ids(
            "title IN[c] $0", [.list((0..<20).map { .string($0 == 7 ? "BUY MILK" : "no \($0)") })])
        #expect(titles == (try Fixture.ids("title ==[c] 'buy milk'")))
    }
}
