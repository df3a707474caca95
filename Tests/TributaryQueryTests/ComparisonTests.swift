import Foundation
import Testing
import TributaryModel
import TributaryQuery

@Suite("Comparison operators") struct ComparisonTests {
    @Test(
        "Equality, ordering and their spellings",
        arguments: [
            ("priority == 3", [1, 5]),
            ("priority = 3", [1, 5]),
            ("priority != 3", [2, 3, 4]),
            ("priority <> 3", [2, 3, 4]),
            ("priority < 3", [2, 3]),
            ("priority <= 3", [1, 2, 3, 5]),
            ("priority =< 3", [1, 2, 3, 5]),
            ("priority > 3", [4]),
            ("priority >= 3", [1, 4, 5]),
            ("priority => 3", [1, 4, 5]),
            ("3 < priority", [4]),
            ("3 == priority", [1, 5]),
            ("done == true", [2, 5]),
            ("done != true", [1, 3, 4]),
            ("done == FALSE", [1, 3, 4]),
            ("title == 'buy milk'", [2]),
            ("title == \"buy milk\"", [2]),
            ("title > 'b'", [2, 5]),
            ("title < 'W'", [3]),
        ] as [(String, [Int64])])
    func operators(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test(
        "Integers and doubles compare by value",
        arguments: [
            ("score == 2", [3]),
            ("score > 2", [1, 4]),
            ("priority == 3.0", [1, 5]),
            ("priority < 2.5", [2, 3]),
            ("priority > 2.5", [1, 4, 5]),
            ("score >= -1", [1, 3, 4, 5]),
            ("score == -1.0", [5]),
            ("priority == 3.5", []),
        ] as [(String, [Int64])])
    func numbers(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test("Null compares equal only to null, and never orders") func nulls() throws {
        #expect(try Fixture.ids("score == nil") == [2])
        #expect(try Fixture.ids("score == NULL") == [2])
        #expect(try Fixture.ids("score != nil") == [1, 3, 4, 5])
        #expect(try Fixture.ids("notes == null") == [2])
        #expect(try Fixture.ids("score < 100") == [1, 3, 4, 5])
        #expect(try Fixture.ids("nil == score") == [2])
        #expect(try Fixture.ids("due == $0", [.null]) == [2])
    }

    @Test("BETWEEN is inclusive at both ends") func between() throws {
        #expect(try Fixture.ids("priority BETWEEN {2, 3}") == [1, 3, 5])
        #expect(try Fixture.ids("score between {-1, 2}") == [3, 5])
        #expect(try Fixture.ids("priority BETWEEN {$0, $1}", [2, 3]) == [1, 3, 5])
        #expect(try Fixture.ids("priority BETWEEN {4, 2}") == [])
        // On a list, every element must be in the range (an empty list has none outside it).
        #expect(try Fixture.ids("ALL scores BETWEEN {1, 10}") == [1, 2, 3, 4])
    }

    @Test("IN a list literal, a list argument and a list property") func inOperator() throws {
        #expect(try Fixture.ids("priority IN {1, 5}") == [2, 4])
        #expect(try Fixture.ids("priority IN {}") == [])
        #expect(try Fixture.ids("title IN {'buy milk', 'nothing'}") == [2])
        #expect(try Fixture.ids("title IN[c] {'BUY MILK', 'write TESTS'}") == [2, 4])
        #expect(try Fixture.ids("priority IN $0", [[1, 2]]) == [2, 3])
        #expect(try Fixture.ids("priority in %@", [[5]]) == [4])
        #expect(try Fixture.ids("'work' IN tags") == [1, 4, 5])
        #expect(try Fixture.ids("$0 IN tags", ["bug"]) == [5])
        #expect(try Fixture.ids("5 IN scores") == [4])
        #expect(try Fixture.ids("ANY tags IN {'home', 'bug'}") == [2, 5])
        #expect(try Fixture.ids("ALL tags IN {'work', 'urgent'}") == [1, 3, 4])
        #expect(try Fixture.ids("$0 IN reviewers", [Fixture.person("ada")]) == [3, 4])
        #expect(try Fixture.ids("priority == {1, 5}") == [2, 4])
    }

    @Test("Dates, object ids, UUIDs and data") func otherScalars() throws {
        #expect(try Fixture.ids("due == $0", [.date(Fixture.january10)]) == [1, 5])
        #expect(try Fixture.ids("due == 2024-01-10@09:00:00") == [1, 5])
        #expect(try Fixture.ids("due == 2024-01-10T09:00:00") == [1, 5])
        #expect(try Fixture.ids("due == T1704877200:0") == [1, 5])
        #expect(try Fixture.ids("due < 2024-01-01@00:00:00") == [4])
        #expect(try Fixture.ids("due > 2023-12-31@23:59:59:500000000") == [1, 3, 5])
        #expect(try Fixture.ids("due > 2023-12-31@23:59:58:500000000") == [1, 3, 4, 5])
        #expect(try Fixture.ids("due < T1704067199:500000000") == [4])
        #expect(try Fixture.ids("due > T-5:-100 AND due < 9999-12-31@23:59:59") == [1, 3, 4, 5])
        #expect(try Fixture.ids("ref == oid(507f1f77bcf86cd799439011)") == [1])
        #expect(try Fixture.ids("ref != oid(507f1f77bcf86cd799439011)") == [2, 3, 4, 5])
        #expect(try Fixture.ids("ref == $0", [.objectId(Fixture.oid)]) == [1])
        #expect(try Fixture.ids("token == uuid(6ba7b810-9dad-11d1-80b4-00c04fd430c8)") == [1])
        #expect(try Fixture.ids("token == nil") == [2, 3, 4, 5])
        #expect(try Fixture.ids("attachment == $0", [.data(Data([9]))]) == [3])
        #expect(try Fixture.ids("attachment BEGINSWITH $0", [.data(Data([1, 2]))]) == [1])
        #expect(try Fixture.ids("attachment CONTAINS $0", [.data(Data([2, 3]))]) == [1])
        #expect(try Fixture.ids("attachment ENDSWITH $0", [.data(Data([9]))]) == [3])
    }

    @Test("TRUEPREDICATE and FALSEPREDICATE") func constants() throws {
        #expect(try Fixture.ids("TRUEPREDICATE") == [1, 2, 3, 4, 5])
        #expect(try Fixture.ids("falsepredicate") == [])
        #expect(try Fixture.ids("FALSEPREDICATE OR priority == 1") == [2])
    }

    @Test("AND, OR, NOT, their symbols and parentheses") func logic() throws {
        #expect(try Fixture.ids("priority == 3 AND done == true") == [5])
        #expect(try Fixture.ids("priority == 3 && done == true") == [5])
        #expect(try Fixture.ids("priority == 1 OR priority == 5") == [2, 4])
        #expect(try Fixture.ids("priority == 1 || priority == 5") == [2, 4])
        #expect(try Fixture.ids("NOT done == true") == [1, 3, 4])
        #expect(try Fixture.ids("!(done == true)") == [1, 3, 4])
        #expect(try Fixture.ids("not not done == true") == [2, 5])
        #expect(try Fixture.ids("priority == 3 OR priority == 1 AND done == false") == [1, 5])
        #expect(try Fixture.ids("(priority == 3 OR priority == 1) AND done == true") == [2, 5])
        #expect(try Fixture.ids("priority == 3 and (done == true or score > 4)") == [1, 5])
        #expect(try Fixture.ids("((((priority == 2))))") == [3])
    }

    @Test("A key path may be compared with another") func keyPathWithKeyPath() throws {
        #expect(try Fixture.ids("score > priority") == [1, 4])
        #expect(try Fixture.ids("priority == score") == [3])
    }

    @Test("Queries match objects given as plain fields") func matchesFields() throws {
        let query = try Fixture.query("title BEGINSWITH 'a' AND priority > 1")
        #expect(query.matches(["title": "apple", "priority": 2], source: InMemoryObjectSource()))
        #expect(!query.matches(["title": "apple"], source: InMemoryObjectSource()))
        #expect(!query.matches([:], source: InMemoryObjectSource()))
    }
}
