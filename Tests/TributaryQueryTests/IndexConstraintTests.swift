import Foundation
import Testing
import TributaryModel
import TributaryQuery

@Suite("Index constraints") struct IndexConstraintTests {
    private func constraints(_ text: String, _ arguments: [Value] = []) throws -> [IndexConstraint] {
        try Fixture.query(text, arguments).indexableConstraints
    }

    private func range(
        _ property: String, _ lower: Value?, _ lowerInclusive: Bool, _ upper: Value?, _ upperInclusive: Bool
    ) -> IndexConstraint {
        IndexConstraint(
            property: property,
            kind: .range(lower: lower, lowerInclusive: lowerInclusive, upper: upper, upperInclusive: upperInclusive))
    }

    @Test("Equality and IN give the values to look up") func equality() throws {
        #expect(try constraints("priority == 3") == [IndexConstraint(property: "priority", kind: .equal([3]))])
        #expect(try constraints("3 == priority") == [IndexConstraint(property: "priority", kind: .equal([3]))])
        #expect(
            try constraints("priority IN {1, 5, 1}") == [IndexConstraint(property: "priority", kind: .equal([1, 5]))])
        #expect(
            try constraints("title IN $0", [["a", "b"]]) == [
                IndexConstraint(property: "title", kind: .equal(["a", "b"]))
            ])
        #expect(try constraints("score == nil") == [IndexConstraint(property: "score", kind: .equal([.null]))])
        #expect(try constraints("_id == $0", [7]) == [IndexConstraint(property: "_id", kind: .equal([7]))])
    }

    @Test("Ranges, flipped comparisons and BETWEEN") func ranges() throws {
        #expect(try constraints("priority > 2") == [range("priority", 2, false, nil, false)])
        #expect(try constraints("priority <= 4") == [range("priority", nil, false, 4, true)])
        #expect(try constraints("3 < priority") == [range("priority", 3, false, nil, false)])
        #expect(try constraints("3 >= priority") == [range("priority", nil, false, 3, true)])
        #expect(try constraints("priority BETWEEN {2, 4}") == [range("priority", 2, true, 4, true)])
        #expect(
            try constraints("due >= $0", [.date(Fixture.january10)]) == [
                range("due", .date(Fixture.january10), true, nil, false)
            ])
        #expect(try constraints("title < 'm'") == [range("title", nil, false, "m", false)])
    }

    @Test("Constants are converted to the property's type") func conversion() throws {
        #expect(try constraints("priority > 2.5") == [range("priority", 3, true, nil, false)])
        #expect(try constraints("priority >= 2.0") == [range("priority", 2, true, nil, false)])
        #expect(try constraints("priority < 2.5") == [range("priority", nil, false, 2, true)])
        #expect(try constraints("priority == 2.5") == [IndexConstraint(property: "priority", kind: .equal([]))])
        #expect(try constraints("priority IN {2.0, 2.5}") == [IndexConstraint(property: "priority", kind: .equal([2]))])
        #expect(try constraints("score > 2") == [range("score", 2.0, false, nil, false)])
        #expect(try constraints("priority > 1e30") == [IndexConstraint(property: "priority", kind: .equal([]))])
    }

    @Test("Terms on one property are merged; others keep their order") func merging() throws {
        #expect(
            try constraints("priority >= 2 AND priority < 5 AND done == false")
                == [range("priority", 2, true, 5, false), IndexConstraint(property: "done", kind: .equal([false]))])
        #expect(
            try constraints("priority > 1 AND priority > 3 AND priority <= 5 AND priority < 5")
                == [range("priority", 3, false, 5, false)])
        #expect(
            try constraints("priority == 3 AND priority IN {1, 3}") == [
                IndexConstraint(property: "priority", kind: .equal([3]))
            ])
        #expect(
            try constraints("priority IN {1, 3, 5} AND priority > 2")
                == [IndexConstraint(property: "priority", kind: .equal([3, 5]))])
        let empty = try constraints("priority > 5 AND priority < 3")
        #expect(empty.count == 1 && empty[0].isEmpty)
        #expect(try !constraints("priority >= 3 AND priority <= 3")[0].isEmpty)
        #expect(try constraints("priority > 3 AND priority <= 3")[0].isEmpty)
    }

    @Test(
        "Only top-level AND terms on scalar properties, without modifiers, are indexable",
        arguments: [
            "title ==[c] 'x'", "title BEGINSWITH 'a'", "priority == 1 OR done == true", "NOT priority == 1",
            "tags == 'x'", "author.name == 'x'", "priority != 3", "priority == score", "'work' IN tags",
            "ANY scores > 3", "tags.@count == 1", "TRUEPREDICATE", "author == nil",
        ])
    func notIndexable(query: String) throws {
        #expect(try constraints(query).isEmpty)
    }

    @Test("Nested terms are ignored, top-level ones kept") func nested() throws {
        #expect(
            try constraints("title == $0 AND (priority == 1 OR priority == 2)", ["x"])
                == [IndexConstraint(property: "title", kind: .equal(["x"]))])
    }

    @Test("Every object that matches satisfies the constraints") func constraintsNarrowOnly() throws {
        for text in [
            "priority >= 2 AND priority < 5", "priority IN {1, 3} AND done == true", "score > 2 AND priority < 4.5",
            "priority BETWEEN {2.5, 5} AND title < 'c'",
        ] {
            let query = try Fixture.query(text)
            for (_, fields) in query.apply(to: Fixture.tasks, source: Fixture.source) {
                for constraint in query.indexableConstraints {
                    let value = fields[constraint.property] ?? .null
                    switch constraint.kind {
                    case .equal(let values): #expect(values.contains(value), "\(text): \(constraint)")
                    case .range:
                        #expect(value != .null, "\(text): \(constraint)")
                    }
                }
            }
        }
    }
}
