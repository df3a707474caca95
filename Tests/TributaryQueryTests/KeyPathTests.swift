import Testing
import TributaryModel
import TributaryQuery

@Suite("Key paths through links and embedded objects") struct KeyPathTests {
    @Test(
        "To-one links: a missing target or a null link reads as null",
        arguments: [
            ("author.name == 'Ada'", [1]),
            ("author.name == nil", [4, 5]),
            ("author == nil", [4, 5]),
            ("author != nil", [1, 2, 3]),
            ("author.age == nil", [2, 4, 5]),
            ("author.age > 30", [1]),
            ("author.address.city == 'Paris'", [3]),
            ("author.address.zip == nil", [2, 3, 4, 5]),
            ("author.friends.name == 'Bob'", [1]),
        ] as [(String, [Int64])])
    func toOneLinks(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test("Links compare with link arguments") func linkArguments() throws {
        #expect(try Fixture.ids("author == $0", [Fixture.person("cy")]) == [3])
        #expect(try Fixture.ids("author != $0", [Fixture.person("cy")]) == [1, 2, 4, 5])
        // The target of task 4's author is missing, so its author reads as null.
        #expect(try Fixture.ids("author == $0", [Fixture.person("ghost")]) == [])
        #expect(try Fixture.ids("author.name == $0", ["Bob"]) == [2])
    }

    @Test(
        "Embedded objects",
        arguments: [
            ("meta.label == 'alpha'", [1]),
            ("meta == nil", [2, 5]),
            ("meta != nil", [1, 3, 4]),
            ("meta.label == nil", [2, 3, 5]),
            ("meta.createdBy.name == 'Cécile'", [3]),
            ("meta.createdBy == nil", [2, 4, 5]),
            ("steps.name == 'go'", [3]),
            ("steps.minutes > 60", [5]),
            ("ALL steps.minutes < 20", [2, 3, 4]),
        ] as [(String, [Int64])])
    func embedded(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test(
        "To-many key paths: ANY is implicit; ALL and NONE",
        arguments: [
            ("reviewers.name == 'Bob'", [1, 5]),
            ("ANY reviewers.name == 'Ada'", [3, 4]),
            ("SOME reviewers.age > 30", [3, 4]),
            ("any reviewers.age > 30", [3, 4]),
            ("ALL reviewers.name != 'Bob'", [2, 3, 4]),
            ("NONE reviewers.age > 30", [1, 2, 5]),
            ("reviewers.friends.name == 'Bob'", [3, 4]),
            ("scores == 5", [4]),
            ("ANY scores > 6", [3, 5]),
            ("ALL scores > 0", [1, 2, 3, 4]),
            ("NONE scores == 5", [1, 2, 3, 5]),
            ("ratings >= 4", [1]),
            ("NOT ANY tags == 'work'", [2, 3]),
            ("tags != 'work'", [1, 2, 5]),
        ] as [(String, [Int64])])
    func quantifiers(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test(
        "@count and @size",
        arguments: [
            ("tags.@count == 0", [3]),
            ("tags.@count >= 2", [1, 5]),
            ("scores.@size == 2", [4, 5]),
            ("reviewers.@count == 2", [1, 5]),
            ("steps.@count > 1", [1, 5]),
            ("title.@size == 8", [2]),
            ("title.@size == 10", [5]),
            ("title.@size == 11", [3, 4]),
            ("author.friends.@count == 1", [1, 2]),
            ("author.friends.@count == 0", [3, 4, 5]),
            ("tags.@count < priority", [1, 3, 4, 5]),
        ] as [(String, [Int64])])
    func counts(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test(
        "@min, @max, @sum, @avg of lists of values and of objects",
        arguments: [
            ("scores.@sum == 6", [1]),
            ("scores.@sum == 0", [2]),
            ("scores.@sum == 10", [3, 4]),
            ("scores.@avg == 2", [1]),
            ("scores.@avg == nil", [2]),
            ("scores.@avg > 4", [3, 4]),
            ("scores.@min == -2", [5]),
            ("scores.@max == 10", [3]),
            ("scores.@min == nil", [2]),
            ("ratings.@sum > 5", [1, 4]),
            ("ratings.@max == 5.0", [1]),
            ("steps.@sum.minutes == 45", [1]),
            ("steps.@max.minutes > 100", [5]),
            ("steps.@avg.minutes == 5", [3]),
            ("reviewers.@max.age == 36", [3, 4]),
            ("reviewers.@min.age == 28", [1, 5]),
            ("reviewers.@sum.age == 0", [2]),
            ("scores.@MAX == 10", [3]),
        ] as [(String, [Int64])])
    func aggregates(query: String, expected: [Int64]) throws {
        #expect(try Fixture.ids(query) == expected)
    }

    @Test("@sum stays exact for integers and turns to double on overflow") func sumOverflow() throws {
        let query = try Fixture.query("scores.@sum > 9223372036854775807")
        #expect(query.matches(["scores": [.int(.max), 1]], source: InMemoryObjectSource()))
        #expect(!query.matches(["scores": [.int(.max), -1]], source: InMemoryObjectSource()))
        let exact = try Fixture.query("scores.@sum == 9223372036854775806")
        #expect(exact.matches(["scores": [.int(.max), -1]], source: InMemoryObjectSource()))
    }

    @Test("Date aggregates") func dateAggregates() throws {
        let schema = Schema(types: [
            ObjectSchema(
                name: "Log", properties: [.scalar("_id", .int), Property("times", .scalar(.date), list: true)])
        ])
        let query = try Query("times.@max > 2024-01-01@00:00:00", type: schema[type: "Log"]!, schema: schema)
        #expect(query.matches(["times": [.date(Fixture.january10)]], source: InMemoryObjectSource()))
        #expect(!query.matches(["times": []], source: InMemoryObjectSource()))
    }
}
