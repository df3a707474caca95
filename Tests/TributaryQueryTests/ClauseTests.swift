import Testing
import TributaryModel
import TributaryQuery

@Suite("SORT, DISTINCT and LIMIT") struct ClauseTests {
    @Test(
        "SORT",
        arguments: [
            ("TRUEPREDICATE SORT(priority ASC)", [2, 3, 1, 5, 4]),
            ("TRUEPREDICATE SORT(steps[FIRST].minutes DESC)", [1, 5, 3, 2, 4]),
            ("TRUEPREDICATE sort(priority ascending)", [2, 3, 1, 5, 4]),
            ("TRUEPREDICATE SORT(priority DESC)", [4, 1, 5, 3, 2]),
            ("TRUEPREDICATE SORT(priority DESCENDING)", [4, 1, 5, 3, 2]),
            ("TRUEPREDICATE SORT(score ASC)", [2, 5, 3, 1, 4]),
            ("TRUEPREDICATE SORT(score DESC)", [4, 1, 3, 5, 2]),
            ("TRUEPREDICATE SORT(priority ASC, title DESC)", [2, 3, 5, 1, 4]),
            ("TRUEPREDICATE SORT(title ASC)", [3, 4, 1, 2, 5]),
            ("TRUEPREDICATE SORT(due ASC)", [2, 4, 1, 5, 3]),
            ("TRUEPREDICATE SORT(author.name ASC)", [4, 5, 1, 2, 3]),
            ("TRUEPREDICATE SORT(meta.label DESC)", [4, 1, 2, 3, 5]),
            ("TRUEPREDICATE SORT(tags.@count DESC, _id ASC)", [1, 5, 2, 4, 3]),
            ("done == false SORT(priority DESC)", [4, 1, 3]),
        ] as [(String, [Int64])])
    func sort(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test("A later SORT is the primary order; the earlier one breaks its ties") func multipleSorts() throws {
        #expect(try Fixture.ids("TRUEPREDICATE SORT(title DESC) SORT(priority ASC)") == [2, 3, 5, 1, 4])
        #expect(try Fixture.ids("TRUEPREDICATE SORT(title ASC) SORT(priority ASC)") == [2, 3, 1, 5, 4])
    }

    @Test("DISTINCT keeps the first object of each combination") func distinct() throws {
        #expect(try Fixture.ids("TRUEPREDICATE DISTINCT(priority)") == [1, 2, 3, 4])
        #expect(try Fixture.ids("TRUEPREDICATE DISTINCT(done)") == [1, 2])
        #expect(try Fixture.ids("TRUEPREDICATE DISTINCT(priority, done)") == [1, 2, 3, 4, 5])
        #expect(try Fixture.ids("TRUEPREDICATE DISTINCT(author.name)") == [1, 2, 3, 4])
    }

    @Test("DISTINCT treats 1 and 1.0 as one value and compares strings by scalars") func distinctValues() throws {
        let query = try Fixture.query("TRUEPREDICATE DISTINCT(score)")
        let objects: [(PrimaryKey, [String: Value])] = [
            (.int(1), ["score": 1.0]), (.int(2), ["score": .int(1)]), (.int(3), ["score": .null]),
            (.int(4), ["score": .null]), (.int(5), ["score": 1.5]),
        ]
        #expect(query.apply(to: objects, source: InMemoryObjectSource()).map(\.0) == [.int(1), .int(3), .int(5)])
        let titles = try Fixture.query("TRUEPREDICATE DISTINCT(title)")
        let strings: [(PrimaryKey, [String: Value])] = [
            (.int(1), ["title": "é"]), (.int(2), ["title": "e\u{301}"]), (.int(3), ["title": "é"]),
        ]
        #expect(titles.apply(to: strings, source: InMemoryObjectSource()).map(\.0) == [.int(1), .int(2)])
    }

    @Test("LIMIT, and clauses apply in the order written") func limit() throws {
        #expect(try Fixture.ids("TRUEPREDICATE LIMIT(2)") == [1, 2])
        #expect(try Fixture.ids("TRUEPREDICATE LIMIT(0)") == [])
        #expect(try Fixture.ids("TRUEPREDICATE LIMIT(100)") == [1, 2, 3, 4, 5])
        #expect(try Fixture.ids("TRUEPREDICATE SORT(priority DESC) LIMIT(2)") == [4, 1])
        #expect(try Fixture.ids("TRUEPREDICATE LIMIT(2) SORT(priority DESC)") == [1, 2])
        #expect(try Fixture.ids("TRUEPREDICATE SORT(priority ASC) DISTINCT(done)") == [2, 3])
        #expect(try Fixture.ids("TRUEPREDICATE SORT(priority ASC) DISTINCT(done) LIMIT(1)") == [2])
        #expect(try Fixture.ids("TRUEPREDICATE LIMIT(4) LIMIT(2)") == [1, 2])
    }

    @Test("Strings sort by Unicode scalars; numbers by value across int and double") func sortOrder() throws {
        let query = try Fixture.query("TRUEPREDICATE SORT(title ASC)")
        let objects: [(PrimaryKey, [String: Value])] = ["z", "é", "Z", "a", "", "ab"].enumerated().map {
            (.int(Int64($0.offset)), ["title": .string($0.element)])
        }
        let sorted = query.apply(to: objects, source: InMemoryObjectSource()).compactMap { $0.1["title"]?.stringValue }
        #expect(sorted == ["", "Z", "a", "ab", "z", "é"])
        let numbers = try Fixture.query("TRUEPREDICATE SORT(score ASC)")
        let mixed: [(PrimaryKey, [String: Value])] = [
            (.int(1), ["score": 2.5]), (.int(2), ["score": .int(2)]), (.int(3), ["score": .double(.nan)]),
            (.int(4), ["score": .null]), (.int(5), ["score": .int(3)]),
        ]
        #expect(
            numbers.apply(to: mixed, source: InMemoryObjectSource()).map(\.0) == [
                .int(4), .int(3), .int(2), .int(1), .int(5),
            ])
    }

    @Test("The clauses are reported in order") func clausesAreReported() throws {
        let query = try Fixture.query("priority > 1 SORT(priority DESC, author.name ASC) DISTINCT(done) LIMIT(3)")
        #expect(
            query.clauses == [
                .sort([.init(keyPath: "priority", ascending: false), .init(keyPath: "author.name", ascending: true)]),
                .distinct(["done"]), .limit(3),
            ])
        #expect(try Fixture.query("priority > 1").clauses.isEmpty)
    }
}
