import Testing
import TributaryModel
import TributaryQuery

@Suite("String operators and modifiers") struct StringOperatorTests {
    @Test(
        "BEGINSWITH, ENDSWITH, CONTAINS, LIKE",
        arguments: [
            ("title BEGINSWITH 'Write'", [1]),
            ("title beginswith 'write'", []),
            ("title BEGINSWITH[c] 'write'", [1, 4]),
            ("title ENDSWITH 'report'", [1]),
            ("title ENDSWITH[c] 'TESTS'", [4]),
            ("title CONTAINS 'report'", [1, 5]),
            ("title CONTAINS[c] 'RePoRt'", [1, 5]),
            ("title CONTAINS ''", [1, 2, 3, 4, 5]),
            ("notes CONTAINS ''", [1, 3, 4, 5]),
            ("title LIKE '*report'", [1]),
            ("title LIKE 'report*'", [5]),
            ("title LIKE '*e*'", [1, 4, 5]),
            ("title LIKE[c] 'w?ite*'", [1, 4]),
            ("title LIKE 'buy milk'", [2]),
            ("title LIKE '?'", []),
            ("title LIKE '*'", [1, 2, 3, 4, 5]),
            ("title LIKE 'Caf? visit'", [3]),
            ("notes LIKE '*'", [1, 3, 4, 5]),
        ] as [(String, [Int64])])
    func operators(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test(
        "[c] folds case, [d] folds diacritics, [cd] both",
        arguments: [
            ("title == 'cafe visit'", []),
            ("title ==[c] 'café VISIT'", [3]),
            ("title ==[d] 'Cafe visit'", [3]),
            ("title ==[c] 'cafe visit'", []),
            ("title ==[cd] 'CAFE VISIT'", [3]),
            ("title ==[dc] 'CAFE VISIT'", [3]),
            ("title ==[CD] 'CAFE VISIT'", [3]),
            ("title !=[c] 'BUY MILK'", [1, 3, 4, 5]),
            ("notes CONTAINS[d] 'reme brulee'", [3]),
            ("notes CONTAINS 'reme brulee'", []),
            ("notes CONTAINS[cd] 'CREME'", [3]),
            ("notes BEGINSWITH[d] 'Creme'", [3]),
            ("notes ENDSWITH[d] 'brulee'", [3]),
            ("notes LIKE[cd] 'creme*'", [3]),
            ("title CONTAINS [c] 'MILK'", [2]),
        ] as [(String, [Int64])])
    func modifiers(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test("String equality compares Unicode scalars, not canonical equivalence") func scalarEquality() throws {
        // "é" precomposed in the data; decomposed in the query.
        #expect(try Fixture.ids("title == $0", ["Cafe\u{301} visit"]) == [])
        #expect(try Fixture.ids("title ==[d] $0", ["Cafe\u{301} visit"]) == [3])
    }

    @Test("Strings in lists, with quantifiers and modifiers") func lists() throws {
        #expect(try Fixture.ids("ANY tags BEGINSWITH 'ur'") == [1])
        #expect(try Fixture.ids("tags ==[c] 'WORK'") == [1, 4, 5])
        #expect(try Fixture.ids("ALL tags CONTAINS 'o'") == [2, 3, 4])
        #expect(try Fixture.ids("NONE tags LIKE 'w*'") == [2, 3])
    }

    @Test("Escapes in string literals") func escapes() throws {
        let query = try Fixture.query(
            #"title == 'it\'s' OR title == "say \"hi\"" OR title == 'a\\b\n\t\u00e9\u{1F600}'"#)
        let source = InMemoryObjectSource()
        #expect(query.matches(["title": "it's"], source: source))
        #expect(query.matches(["title": "say \"hi\""], source: source))
        #expect(query.matches(["title": "a\\b\n\té😀"], source: source))
        #expect(!query.matches(["title": "its"], source: source))
    }
}
