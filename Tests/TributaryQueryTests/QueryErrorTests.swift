import Foundation
import Testing
import TributaryModel
import TributaryQuery

/// One query that must fail: its code, a part of its message, and where it points.
struct ErrorCase: Sendable, CustomTestStringConvertible {
    var query: String
    var arguments: [Value] = []
    var code: QueryError.Code
    var message: String
    var position: Int
    /// The queried type of the fixture.
    var type = "Task"

    var testDescription: String { query }

    /// Checks that the query fails as expected.
    func check() {
        guard let error = Fixture.error(query, arguments, type: type) else {
            Issue.record("\(query) did not fail")
            return
        }
        #expect(error.code == code, "\(error)")
        #expect(error.message.contains(message), "\(error)")
        #expect(error.position == position, "\(error)")
    }
}

@Suite("Query errors") struct QueryErrorTests {
    private func check(_ expected: ErrorCase) { expected.check() }

    @Test("The description shows the message, the column, the line and a caret") func description() throws {
        let error = try #require(Fixture.error("title == AND done == false"))
        #expect(error.code == .syntax)
        #expect(error.message == "expected a value after '==', found 'AND'")
        #expect(error.position == 9)
        #expect(error.line == 1)
        #expect(error.column == 10)
        #expect(
            error.description == """
                expected a value after '==', found 'AND' at column 10
                  title == AND done == false
                           ^
                """)
    }

    @Test("A syntax error at the end says what was expected after what") func atTheEnd() throws {
        let error = try #require(Fixture.error("done == true && priority =="))
        #expect(error.description.hasPrefix("expected a value after '==' at column 28\n"))
        #expect(error.position == 27)
    }

    @Test("Errors on later lines give line and column") func multiline() throws {
        let error = try #require(Fixture.error("priority == 1 AND\n  titel == 'x'"))
        #expect(error.code == .unknownProperty)
        #expect(error.line == 2)
        #expect(error.column == 3)
        #expect(error.description.contains("at line 2, column 3\n    titel == 'x'\n    ^"))
    }

    @Test("Columns count characters, not bytes") func unicodeColumns() throws {
        let error = try #require(Fixture.error("title == 'éé' x"))
        #expect(error.position == 16)
        #expect(error.column == 15)
        #expect(error.description.hasSuffix("\n  title == 'éé' x\n                ^"))
    }

    @Test(
        "Syntax errors",
        arguments: [
            ErrorCase(query: "", code: .syntax, message: "expected a predicate", position: 0),
            ErrorCase(query: "title == 'abc", code: .syntax, message: "unterminated string", position: 9),
            ErrorCase(
                query: "(priority == 1", code: .syntax, message: "the '(' at column 1 is not closed: expected ')'",
                position: 14),
            ErrorCase(
                query: "priority == 1)", code: .syntax,
                message: "expected AND, OR, SORT, DISTINCT, LIMIT or the end of the query, found ')'", position: 13),
            ErrorCase(query: "priority == 1 priority", code: .syntax, message: "found 'priority'", position: 14),
            ErrorCase(
                query: "priority 1", code: .syntax,
                message: "expected a comparison operator after 'priority', found '1'", position: 9),
            ErrorCase(query: "priority ==[x] 1", code: .syntax, message: "unknown modifier '[x]'", position: 12),
            ErrorCase(
                query: "priority <[c] 1", code: .syntax, message: "can only follow ==, !=, BEGINSWITH", position: 10),
            ErrorCase(query: "title ==[c 'a'", code: .syntax, message: "expected ']'", position: 11),
            ErrorCase(
                query: "SORT(priority ASC)", code: .syntax, message: "write TRUEPREDICATE SORT(...)", position: 0),
            ErrorCase(
                query: "priority == 1 SORT(priority UP)", code: .syntax,
                message: "expected ASC or DESC after 'priority' in SORT(...), as in SORT(priority ASC), found 'UP'",
                position: 28),
            ErrorCase(
                query: "TRUEPREDICATE SORT(priority)", code: .syntax, message: "expected ASC or DESC after 'priority'",
                position: 27),
            ErrorCase(
                query: "SUBQUERY(steps, $s, $s.minutes > 5) > 0", code: .syntax,
                message: "a SUBQUERY must be followed by .@count", position: 36),
            ErrorCase(
                query: "SUBQUERY(steps, s, minutes > 5).@count > 0", code: .syntax,
                message: "expected a variable such as $item", position: 16),
            ErrorCase(query: "tags[NEXT] == 'a'", code: .syntax, message: "expected FIRST, LAST, SIZE", position: 5),
            ErrorCase(
                query: "tags[SIZE].x == 1", code: .syntax, message: "'[SIZE]' must end the key path", position: 11),
            ErrorCase(query: "(priority + 1 > 2", code: .syntax, message: "is not closed", position: 17),
            ErrorCase(
                query: "priority == 1 LIMIT(-1)", code: .syntax, message: "expected a non-negative integer",
                position: 20),
            ErrorCase(
                query: "priority == 1 LIMIT(2) AND done == true", code: .syntax,
                message: "expected SORT, DISTINCT, LIMIT or the end", position: 23),
            ErrorCase(query: "priority & 1", code: .syntax, message: "single '&'", position: 9),
            ErrorCase(
                query: "priority == $", code: .syntax, message: "expected an argument number after '$'", position: 12),
            ErrorCase(query: "priority == %d", code: .syntax, message: "expected '%@'", position: 12),
            ErrorCase(query: "title == '\\q'", code: .syntax, message: "unknown escape '\\q'", position: 10),
            ErrorCase(query: "title == 'x' AND", code: .syntax, message: "expected a predicate", position: 16),
            ErrorCase(query: "priority == -", code: .syntax, message: "expected a number after '-'", position: 13),
            ErrorCase(query: "priority == #", code: .syntax, message: "unexpected character '#'", position: 12),
            ErrorCase(
                query: "priority BETWEEN 1, 2", code: .syntax, message: "expected '{' after BETWEEN", position: 17),
            ErrorCase(
                query: "priority == TRUEPREDICATE", code: .syntax, message: "a predicate, not a value", position: 12),
            ErrorCase(query: "ANY == 1", code: .unknownProperty, message: "has no property 'ANY'", position: 0),
            ErrorCase(query: "title == '\\u{D800}'", code: .syntax, message: "is not a Unicode scalar", position: 10),
        ])
    func syntax(_ expected: ErrorCase) { check(expected) }

    @Test(
        "Invalid literals",
        arguments: [
            ErrorCase(
                query: "due == 2024-02-30@00:00:00", code: .invalidLiteral, message: "is not a valid date", position: 7),
            ErrorCase(query: "due == 2024-01-01", code: .invalidLiteral, message: "a date needs a time", position: 7),
            ErrorCase(
                query: "due == 2024-01-01@25:00:00", code: .invalidLiteral, message: "is not a valid date", position: 7),
            ErrorCase(query: "due == T5:-3", code: .invalidLiteral, message: "same sign", position: 7),
            ErrorCase(
                query: "ref == oid(123)", code: .invalidLiteral, message: "'123' is not an ObjectId", position: 7),
            ErrorCase(query: "token == uuid(zzz)", code: .invalidLiteral, message: "'zzz' is not a UUID", position: 9),
            ErrorCase(
                query: "priority == 99999999999999999999", code: .invalidLiteral, message: "does not fit in 64 bits",
                position: 12),
            ErrorCase(
                query: "priority == -9223372036854775809", code: .invalidLiteral, message: "does not fit in 64 bits",
                position: 12),
            ErrorCase(query: "score == 1e999", code: .invalidLiteral, message: "not a finite number", position: 9),
            ErrorCase(
                query: "priority == 0x", code: .invalidLiteral, message: "not a hexadecimal integer", position: 12),
            ErrorCase(
                query: "priority == 0x10000000000000000", code: .invalidLiteral, message: "does not fit in 64 bits",
                position: 12),
            ErrorCase(query: "title == B64\"!!\"", code: .invalidLiteral, message: "is not base64", position: 9),
            ErrorCase(query: "title == B64\"/w==\"", code: .invalidLiteral, message: "not UTF-8 text", position: 9),
            ErrorCase(
                query: "author == obj('Person', 5)", code: .typeMismatch,
                message: "obj('Person', 5) does not fit 'Person': its primary key is string", position: 10),
            ErrorCase(
                query: "author == obj('Nobody', 'x')", code: .unknownProperty, message: "names a type the schema lacks",
                position: 10),
            ErrorCase(
                query: "author == obj('Person', 1.5)", code: .invalidLiteral, message: "a primary key in obj(...)",
                position: 24),
            ErrorCase(
                query: "priority == $99999999999999999999999", code: .invalidLiteral, message: "too large", position: 12
            ),
            ErrorCase(
                query: "priority == 1 LIMIT(99999999999999999999)", code: .invalidLiteral, message: "LIMIT",
                position: 20),
        ])
    func invalidLiterals(_ expected: ErrorCase) { check(expected) }

    @Test(
        "Unknown properties and operators",
        arguments: [
            ErrorCase(
                query: "titel == 'x'", code: .unknownProperty,
                message: "'Task' has no property 'titel'; did you mean 'title'?", position: 0),
            ErrorCase(
                query: "author.nmae == 'x'", code: .unknownProperty,
                message: "'Task.author' (Person) has no property 'nmae'; did you mean 'name'?", position: 7),
            ErrorCase(query: "zzz == 1", code: .unknownProperty, message: "'Task' has no property 'zzz'", position: 0),
            ErrorCase(query: "tags.@foo == 1", code: .unknownProperty, message: "unknown operator '@foo'", position: 5),
            ErrorCase(
                query: "priority == 1 SORT(nope ASC)", code: .unknownProperty, message: "has no property 'nope'",
                position: 19),
        ])
    func unknownProperties(_ expected: ErrorCase) { check(expected) }

    @Test(
        "Type mismatches",
        arguments: [
            ErrorCase(
                query: "priority == \"high\"", code: .typeMismatch,
                message: "cannot compare 'Task.priority' (int) with string \"high\"", position: 12),
            ErrorCase(
                query: "priority == $0", arguments: ["high"], code: .typeMismatch,
                message: "cannot compare 'Task.priority' (int) with string $0", position: 12),
            ErrorCase(
                query: "title = %@", arguments: [5], code: .typeMismatch,
                message: "cannot compare 'Task.title' (string) with int %@ (argument 0)", position: 8),
            ErrorCase(
                query: "'a' == priority", code: .typeMismatch,
                message: "cannot compare string 'a' with 'Task.priority' (int)", position: 7),
            ErrorCase(
                query: "done > true", code: .typeMismatch, message: "cannot use '>' with 'Task.done' (bool)",
                position: 5),
            ErrorCase(query: "score > nil", code: .typeMismatch, message: "cannot use '>' with null", position: 6),
            ErrorCase(
                query: "priority CONTAINS 'a'", code: .typeMismatch,
                message: "CONTAINS compares strings or data, but 'Task.priority' (int) is not", position: 0),
            ErrorCase(
                query: "attachment LIKE $0", arguments: [.data(.init([1]))], code: .typeMismatch,
                message: "LIKE compares strings", position: 0),
            ErrorCase(
                query: "priority ==[c] 1", code: .typeMismatch,
                message: "'==[c]' compares strings, but 'Task.priority' (int) is not a string", position: 0),
            ErrorCase(
                query: "ANY title == 'x'", code: .typeMismatch, message: "ANY needs a list or a to-many key path",
                position: 0),
            ErrorCase(query: "ALL author.name == 'x'", code: .typeMismatch, message: "ALL needs a list", position: 0),
            ErrorCase(
                query: "tags['key'] == 'x'", code: .typeMismatch,
                message: "'tags' is a list, not a dictionary: subscripts by key need a dictionary", position: 4),
            ErrorCase(query: "title IN 'x'", code: .typeMismatch, message: "IN needs a list on its right", position: 9),
            ErrorCase(
                query: "priority IN $0", arguments: [3], code: .typeMismatch, message: "IN needs a list on its right",
                position: 12),
            ErrorCase(
                query: "priority IN {1, 'x'}", code: .typeMismatch,
                message: "cannot compare 'Task.priority' (int) with string 'x'", position: 16),
            ErrorCase(
                query: "reviewers == nil", code: .typeMismatch,
                message: "goes through the list of objects 'reviewers', which holds no nulls", position: 13),
            ErrorCase(
                query: "nil != reviewers.name", code: .typeMismatch, message: "write reviewers.@count == 0",
                position: 0),
            ErrorCase(
                query: "ANY priority == ANY {1}", code: .typeMismatch, message: "ANY needs a list", position: 0),
            ErrorCase(
                query: "priority == ALL 3", code: .syntax, message: "found '3'", position: 16),
            ErrorCase(query: "priority == NONE title", code: .typeMismatch, message: "NONE needs a list", position: 12),
            ErrorCase(
                query: "priority + title > 1", code: .typeMismatch,
                message: "'+' needs numbers, but 'Task.title' (string) is not a number", position: 11),
            ErrorCase(
                query: "priority * 2 == 'x'", code: .typeMismatch, message: "cannot compare 'priority * 2' (int)",
                position: 16),
            ErrorCase(
                query: "title[FIRST] == 'x'", code: .typeMismatch, message: "'title' is not a list", position: 5),
            ErrorCase(
                query: "SUBQUERY(author, $a, $a.age > 1).@count > 0", code: .typeMismatch,
                message: "SUBQUERY needs a list property, but 'author' is not one", position: 9),
            ErrorCase(
                query: "SUBQUERY(steps, $s, $s.title == 'x').@count > 0", code: .unknownProperty,
                message: "'Step' has no property 'title'", position: 23),
            ErrorCase(
                query: "SUBQUERY(steps, $s, $s.minutes > 1).@count == 'x'", code: .typeMismatch,
                message: "cannot compare", position: 46),
            ErrorCase(
                query: "title.name == 'x'", code: .typeMismatch,
                message: "'Task.title' is a string and has no property 'name'", position: 6),
            ErrorCase(
                query: "author.@count == 1", code: .typeMismatch,
                message: "'@count' needs a list, but 'Task.author' is link<Person>", position: 7),
            ErrorCase(
                query: "priority.@size == 1", code: .typeMismatch, message: "'@size' needs a list, a string or data",
                position: 9),
            ErrorCase(query: "tags.@sum == 1", code: .typeMismatch, message: "'@sum' needs numbers", position: 5),
            ErrorCase(
                query: "tags.@max == 1", code: .typeMismatch, message: "'@max' needs numbers or dates", position: 5),
            ErrorCase(
                query: "steps.@sum == 1", code: .typeMismatch, message: "needs a property, as in steps.@sum.<property>",
                position: 6),
            ErrorCase(query: "steps.@sum.name == 1", code: .typeMismatch, message: "'@sum' needs numbers", position: 6),
            ErrorCase(
                query: "author == 5", code: .typeMismatch,
                message: "cannot compare 'Task.author' (link<Person>) with int 5", position: 10),
            ErrorCase(
                query: "author == $0", arguments: [.link(.int(5))], code: .typeMismatch,
                message: "cannot compare 'Task.author' (link<Person>) with link $0", position: 10),
            ErrorCase(
                query: "meta == 'x'", code: .typeMismatch, message: "cannot compare 'Task.meta' (embedded<Meta>)",
                position: 8),
            ErrorCase(
                query: "tags == 5", code: .typeMismatch,
                message: "cannot compare 'Task.tags' (list<string>) with int 5", position: 8),
            ErrorCase(
                query: "priority IN $0", arguments: [[[1]]], code: .typeMismatch, message: "lists inside lists",
                position: 12),
            ErrorCase(
                query: "scores.@min < 'a'", code: .typeMismatch,
                message: "cannot compare 'Task.scores.@min' (int) with string 'a'", position: 14),
        ])
    func typeMismatches(_ expected: ErrorCase) { check(expected) }

    @Test(
        "Missing arguments",
        arguments: [
            ErrorCase(
                query: "priority == $1", arguments: [1], code: .argumentMissing,
                message: "the query uses $1 but 1 argument was given", position: 12),
            ErrorCase(
                query: "priority == $0", code: .argumentMissing,
                message: "the query uses $0 but 0 arguments were given", position: 12),
            ErrorCase(
                query: "title = %@ AND notes = %@", arguments: ["a"], code: .argumentMissing,
                message: "more %@ placeholders than arguments", position: 23),
        ])
    func missingArguments(_ expected: ErrorCase) { check(expected) }

    @Test(
        "Unsupported parts of the language",
        arguments: [
            ErrorCase(
                query: "SUBQUERY(tags, $t, $t == 'x').@count > 0", code: .unsupported,
                message: "SUBQUERY over a list of string values is not supported", position: 9),
            ErrorCase(
                query: "ANY scores BETWEEN {1, 2}", code: .unsupported, message: "BETWEEN on a list takes ALL",
                position: 4),
            ErrorCase(
                query: "scores + ratings > 1", code: .unsupported, message: "'+' between two lists", position: 9),
            ErrorCase(
                query: "priority == 1 SORT(tags ASC)", code: .unsupported,
                message: "cannot SORT by 'Task.tags': it goes through a list", position: 19),
            ErrorCase(
                query: "priority == 1 SORT(author ASC)", code: .unsupported, message: "it is an object", position: 19),
            ErrorCase(
                query: "priority == 1 DISTINCT(reviewers.name)", code: .unsupported, message: "cannot DISTINCT by",
                position: 23),
            ErrorCase(query: "title == %K", code: .unsupported, message: "%K", position: 9),
            ErrorCase(
                query: "reviewers.friends.@count > 1", code: .unsupported, message: "goes through another list",
                position: 18),
            ErrorCase(query: "priority IN {{1}}", code: .unsupported, message: "lists inside lists", position: 13),
            ErrorCase(
                query: "priority IN {score}", code: .unsupported, message: "only hold literals and arguments",
                position: 13),
            ErrorCase(query: "@count == 1", code: .unsupported, message: "must follow a key path", position: 0),
        ])
    func unsupported(_ expected: ErrorCase) { check(expected) }

    @Test("Nesting deeper than the limit throws .tooComplex") func nesting() throws {
        let limit = Query.maximumNestingDepth
        let deep =
            String(repeating: "(", count: limit + 50) + "priority == 1" + String(repeating: ")", count: limit + 50)
        #expect(Fixture.error(deep)?.code == .tooComplex)
        let nots = String(repeating: "NOT ", count: limit * 10) + "priority == 1"
        #expect(Fixture.error(nots)?.code == .tooComplex)
        let bangs = String(repeating: "!", count: 100_000) + "priority == 1"
        #expect(Fixture.error(bangs)?.code == .tooComplex)
        let allowed =
            String(repeating: "(", count: limit - 1) + "priority == 2" + String(repeating: ")", count: limit - 1)
        #expect(try Fixture.ids(allowed) == [3])
    }

    @Test("Long AND and OR chains do not deepen the recursion") func longChains() throws {
        let chain = Array(repeating: "priority > 0", count: 20_000).joined(separator: " AND ")
        #expect(try Fixture.ids(chain) == [1, 2, 3, 4, 5])
        let alternatives = (0..<20_000).map { "priority == \($0)" }.joined(separator: " || ")
        #expect(try Fixture.ids(alternatives) == [1, 2, 3, 4, 5])
    }

    @Test("Codes describe themselves and errors compare by value") func codes() {
        #expect(QueryError.Code.typeMismatch.description == "typeMismatch")
        #expect(Fixture.error("titel == 1") == Fixture.error("titel == 1"))
        #expect(Fixture.error("titel == 1") != Fixture.error("titel == 2"))
    }
}
