import Foundation
import Testing
import TributaryModel
import TributaryQuery

/// The parts of the Realm Query Language beyond everyday comparisons, each with the result Realm's documentation
/// gives for it, on the shared fixture.
@Suite("Realm Query Language constructs") struct RealmLanguageTests {
    @Test(
        "Arithmetic in comparisons",
        arguments: [
            ("priority * 2 > 5", [1, 4, 5]),
            ("2 * priority > 5", [1, 4, 5]),
            ("priority + 1 == 4", [1, 5]),
            // A predicate may start with a parenthesized sum.
            ("(priority + 1) * 2 == 8", [1, 5]),
            ("((priority + 1)) * 2 == 8 AND (done == false)", [1]),
            ("priority + 1 * 2 == 5", [1, 5]),
            ("priority - 1 - 1 == 1", [1, 5]),
            ("priority * 2 > priority + 2", [1, 4, 5]),
            // A null operand makes the result null, which no number equals.
            ("priority - score > 0", [5]),
            ("score * 0 == nil", [2]),
            // Integers divide as integers; a double makes it a double division.
            ("priority / 2 == 1", [1, 3, 5]),
            ("priority / 2.0 == 1.5", [1, 5]),
            // Realm's integer division by zero gives the largest integer of the dividend's sign.
            ("priority / 0 == 9223372036854775807", [1, 2, 3, 4, 5]),
            ("steps.@sum.minutes / 5 > 8", [1, 5]),
            ("author.age - 30 > 0", [1]),
            ("tags.@count * 10 >= 20", [1, 5]),
            // On a list and a number, one result per element.
            ("ANY scores * 2 > 15", [3]),
            ("ALL {8, 10} / 2 >= ANY scores", [1, 5]),
        ] as [(String, [Int64])])
    func arithmetic(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test(
        "Quantifiers on either side, list literals on either side",
        arguments: [
            ("priority == ANY {1, 2}", [2, 3]),
            ("priority == {1, 2}", [2, 3]),
            ("priority == NONE {1, 2}", [1, 4, 5]),
            ("priority IN ALL {3}", [1, 5]),
            ("priority != {1, 2}", [1, 2, 3, 4, 5]),
            ("priority > ALL {1, 2}", [1, 4, 5]),
            ("priority > ANY $0", [1, 3, 4, 5]),
            ("ALL {1, 2} IN scores", [1]),
            ("ANY {1, 10} IN scores", [1, 3]),
            ("NONE {1, 10} IN scores", [2, 4, 5]),
            ("ALL {'work', 'bug'} IN tags", [5]),
            ("SOME {'HOME'} ==[c] tags", [2]),
            ("5 IN ANY scores", [4]),
            ("scores == ALL {5}", [4]),
            ("NONE scores > 2", [2]),
            // Two lists without a quantifier compare element by element, in order.
            ("{5, 5} == scores", [4]),
            ("scores == {1, 2, 3}", [1]),
            ("tags == {}", [3]),
        ] as [(String, [Int64])])
    func quantifiers(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query, [[.int(1), .int(2)]]) == expected)
    }

    @Test(
        "The list comparisons of Realm's documentation",
        arguments: [
            ("ANY {1, 2, 3} > ALL {1, 2}", true),
            ("ANY {1, 2, 3} == NONE {1, 2}", true),
            ("ANY {4, 8} == ANY {5, 9, 11}", false),
            ("ANY {1, 2, 7} <= NONE {1, 2}", true),
            ("ALL {1, 2} IN ANY {1, 2, 3}", true),
            ("ALL {3, 1, 4, 3} == NONE {1, 2}", false),
            ("ALL {} in ALL {1, 2}", true),
            ("NONE {1, 2, 3, 12} > ALL {5, 9, 11}", false),
            ("NONE {4, 8} > ALL {5, 9, 11}", true),
            ("NONE {0, 1} < NONE {1, 2}", true),
        ] as [(String, Bool)])
    func documentedListComparisons(query: String, expected: Bool) throws {
        #expect(try Fixture.ids(query) == (expected ? [1, 2, 3, 4, 5] : []))
    }

    @Test(
        "Subscripts take one element of a list",
        arguments: [
            ("tags[FIRST] == 'work'", [1, 4, 5]),
            ("tags[first] == 'work'", [1, 4, 5]),
            ("tags[LAST] == 'work'", [4]),
            ("tags[1] == 'bug'", [5]),
            ("tags[0] == 'home'", [2]),
            ("tags[SIZE] == 2", [1, 5]),
            ("ANY tags[*] == 'home'", [2]),
            ("tags[*] == 'home'", [2]),
            // Past the end, an element reads as null.
            ("scores[5] == nil", [1, 2, 3, 4, 5]),
            ("scores[LAST] == nil", [2]),
            ("steps[FIRST].minutes > 20", [1]),
            ("steps[LAST].name == 'fix'", [5]),
            // A link to a missing object is not an element.
            ("reviewers[FIRST].name == 'Ada'", [3, 4]),
            ("reviewers[FIRST].friends[LAST].name == 'Ada'", [1]),
        ] as [(String, [Int64])])
    func subscripts(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test(
        "SUBQUERY counts the elements of a list that match a predicate",
        arguments: [
            ("SUBQUERY(steps, $s, $s.minutes > 12).@count == 2", [1]),
            ("SUBQUERY(steps, $s, $s.minutes > 12).@count > 0", [1, 5]),
            ("SUBQUERY(steps, $s, $s.minutes > 12).@size > 0", [1, 5]),
            // Inside, paths start at the element with or without the variable.
            ("SUBQUERY(steps, $s, minutes > 12 AND name BEGINSWITH 'f').@count > 0", [5]),
            ("SUBQUERY(reviewers, $r, $r.age > 30).@count >= 1", [3, 4]),
            ("subquery(reviewers, $r, $r.age > 30 OR $r.age == nil).@count == 1", [1, 3, 4, 5]),
            ("SUBQUERY(steps, $s, $s.minutes > 12).@count > priority - 2", [1, 2]),
            ("SUBQUERY(reviewers, $r, SUBQUERY($r.friends, $f, $f.name == 'Ada').@count > 0).@count > 0", [1, 5]),
            ("NOT SUBQUERY(steps, $s, TRUEPREDICATE).@count == 0", [1, 3, 5]),
        ] as [(String, [Int64])])
    func subqueries(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test(
        "Literals: hexadecimal, trailing and leading points, signs, infinities, base64, binary and object links",
        arguments: [
            ("priority == 0x3", [1, 5]),
            ("priority == 0X03", [1, 5]),
            ("score == 2.", [3]),
            ("score < .5", [5]),
            ("score > +1.5e0", [1, 3, 4]),
            ("priority == +5", [4]),
            ("score < +inf", [1, 3, 4, 5]),
            ("score > -INF", [1, 3, 4, 5]),
            ("score < Infinity", [1, 3, 4, 5]),
            ("score == nan OR score == -NaN", []),
            ("title == B64\"YnV5IG1pbGs=\"", [2]),
            ("attachment == bin(B64\"AQID\")", [1]),
            ("attachment == binary('\\t')", [3]),
            ("author == obj('Person', 'ada')", [1]),
            ("ANY reviewers == obj('Person', 'bob')", [1, 5]),
            ("author IN {obj('Person', 'cy'), obj('Person', 'bob')}", [2, 3]),
        ] as [(String, [Int64])])
    func literals(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test("String escapes \\b, \\f and \\/ read as Realm reads them") func escapes() throws {
        let query = try Fixture.query("title == 'a\\bb\\fc\\/d'")
        #expect(query.matches(["title": "a\u{8}b\u{C}c/d"], source: InMemoryObjectSource()))
        #expect(!query.matches(["title": "abcd"], source: InMemoryObjectSource()))
    }

    @Test("A list of values may hold nulls; comparing it with null asks for one") func listOfValuesWithNull() throws {
        let schema = Schema(types: [
            ObjectSchema(
                name: "Reading",
                properties: [.scalar("_id", .int), Property("values", .scalar(.int), optional: true, list: true)])
        ])
        let query = try Query("values == nil", type: schema[type: "Reading"]!, schema: schema)
        #expect(query.matches(["values": [1, .null]], source: InMemoryObjectSource()))
        #expect(!query.matches(["values": [1, 2]], source: InMemoryObjectSource()))
    }

    @Test("Names with '$', escaped spaces, and operator words where a property is expected") func names() throws {
        let schema = Schema(types: [
            ObjectSchema(
                name: "Odd",
                properties: [
                    .scalar("_id", .int), .scalar("$price", .int), .scalar("unit$", .string),
                    .scalar("first name", .string), .scalar("in", .int), .scalar("like", .string),
                    .scalar("bin", .string),
                ])
        ])
        let type = schema[type: "Odd"]!
        let object: [String: Value] = [
            "_id": 1, "$price": 12, "unit$": "kg", "first name": "Ada", "in": 3, "like": "yes", "bin": "b",
        ]
        for text in [
            "$price > 10", "unit$ == 'kg'", "first\\ name == 'Ada'", "in == 3", "like == 'yes'",
            "in IN {1, 3}", "$price * in == 36", "bin == 'b'",
        ] {
            let query = try Query(text, type: type, schema: schema)
            #expect(query.matches(object, source: InMemoryObjectSource()), "\(text)")
        }
        #expect(!(try Query("$price < 10", type: type, schema: schema)).matches(object, source: InMemoryObjectSource()))
    }

    @Test("Index lookups serve only the constraints that are lookups of some value") func indexableForms() throws {
        let any = try Fixture.query("title == ANY {'a', 'b'}").indexableConstraints
        #expect(any.map(\.property) == ["title"])
        #expect(try Fixture.query("title == ALL {'a', 'b'}").indexableConstraints.isEmpty)
        #expect(try Fixture.query("title == NONE {'a'}").indexableConstraints.isEmpty)
        #expect(try Fixture.query("priority * 2 == 4").indexableConstraints.isEmpty)
    }

    @Test("The properties a predicate reads include those inside arithmetic and SUBQUERY") func readProperties() throws
    {
        #expect(try Fixture.query("priority * score > 1").predicateProperties == ["priority", "score"])
        #expect(try Fixture.query("SUBQUERY(steps, $s, $s.minutes > 1).@count > 0").predicateProperties == ["steps"])
        #expect(try Fixture.query("tags[FIRST] == 'a'").predicateProperties == ["tags"])
    }
}

/// Backlinks, on the fixture's people: Ada wrote task 1 and reviews tasks 3 and 4, and is Bob's friend; Bob wrote
/// task 2, reviews tasks 1 and 5, and is Ada's friend; Cécile wrote task 3 and reviews tasks 1 and 5.
@Suite("Backlinks in queries") struct BacklinkQueryTests {
    static let source: InMemoryObjectSource = {
        var source = Fixture.source
        for (key, fields) in Fixture.tasks { source.insert(type: "Task", primaryKey: key, fields) }
        return source
    }()

    static func people(_ text: String) throws -> [String] {
        let query = try Fixture.query(text, type: "Person")
        let people = Fixture.people.sorted { $0.key < $1.key }.map { (PrimaryKey.string($0.key), $0.value) }
        return query.apply(to: people, source: source).map { "\($0.0)" }
    }

    @Test(
        "@links.Type.property and @links.@count",
        arguments: [
            ("@links.Task.author.@count > 0", ["ada", "bob", "cy"]),
            ("ANY @links.Task.reviewers.priority > 4", ["ada"]),
            ("@links.@count == 3", ["cy"]),
            ("@links.@size == 4", ["ada", "bob"]),
            ("@links.Person.friends.@count == 0", ["cy"]),
            ("ANY @links.Task.author.title BEGINSWITH 'W'", ["ada"]),
            ("@links.Task.reviewers.@sum.priority > 6", ["ada"]),
            ("@links.Task.reviewers.@max.priority == 3", ["bob", "cy"]),
            ("SUBQUERY(@links.Task.reviewers, $t, $t.done == true).@count > 0", ["bob", "cy"]),
            ("ANY @links.Task.author == obj('Task', 1)", ["ada"]),
            ("@links.Task.reviewers[FIRST].priority == 2", ["ada"]),
            ("TRUEPREDICATE SORT(@links.@count ASC, _id DESC)", ["cy", "bob", "ada"]),
        ] as [(String, [String])])
    func backlinks(query: String, expected: [String]) throws {
        #expect(try Self.people(query).map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) } == expected)
    }

    @Test("A key path may go through backlinks after a link") func throughLinks() throws {
        let query = try Fixture.query("ANY reviewers.@links.Task.author.priority == 3")
        #expect(query.apply(to: Fixture.tasks, source: Self.source).map(\.0) == [.int(3), .int(4)])
        #expect(query.backlinkTypes == ["Task"])
        #expect(try Fixture.query("@links.Person.friends.@count > 0", type: "Person").backlinkTypes == ["Person"])
        #expect(try Fixture.query("priority > 1").backlinkTypes.isEmpty)
    }

    @Test(
        "Backlinks that cannot be",
        arguments: [
            ErrorCase(
                query: "@links.Task.title.@count > 0", code: .typeMismatch,
                message: "'Task.title' does not link to 'Person'", position: 12, type: "Person"),
            ErrorCase(
                query: "@links.Nope.x.@count > 0", code: .unknownProperty, message: "names type 'Nope'", position: 7,
                type: "Person"),
            ErrorCase(
                query: "@links.Task.nope.@count > 0", code: .unknownProperty, message: "'Task' has no property 'nope'",
                position: 12, type: "Person"),
            ErrorCase(
                query: "address.@links.@count > 0", code: .typeMismatch,
                message: "@links needs an object that links can point at", position: 8, type: "Person"),
            ErrorCase(
                query: "@links == 1", code: .syntax, message: "expected a type and a property after @links",
                position: 0, type: "Person"),
            ErrorCase(
                query: "@links.@count.x > 1", code: .syntax, message: "'@links.@count' must end the key path",
                position: 14, type: "Person"),
        ])
    func errors(_ expected: ErrorCase) { expected.check() }
}
