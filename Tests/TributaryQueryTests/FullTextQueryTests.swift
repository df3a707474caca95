import Foundation
import Testing
import TributaryModel
import TributaryQuery

/// `TEXT`: full-text search of a string's words, with the results Realm's documentation describes.
@Suite("TEXT: full-text search") struct FullTextQueryTests {
    static let schema = Schema(types: [
        ObjectSchema(
            name: "Recipe",
            properties: [
                .scalar("_id", .int), .scalar("description", .string, optional: true), .scalar("servings", .int),
                Property("notes", .scalar(.string), list: true),
            ])
    ])

    static let recipes: [(PrimaryKey, [String: Value])] = [
        (1, "Chocolate cake with walnuts", ["quick"]),
        (2, "Lemon cake, no nuts", []),
        (3, "Hot CHOCOLATE: cocoa, milk and sugar", ["winter", "quick drink"]),
        (4, "Crème brûlée au café", []),
        (5, "Cheesecake (no bake)", ["chocolate-free"]),
        (6, nil, []),
        (7, "e-mail the chef about the choc\u{AD}olate order", []),
    ].map { id, description, notes in
        (
            .int(id),
            [
                "_id": .int(id), "description": description.map(Value.string) ?? .null, "servings": 4,
                "notes": .list(notes.map(Value.string)),
            ]
        )
    }

    static func ids(_ text: String, _ arguments: [Value] = []) throws(QueryError) -> [Int64] {
        let query = try Query(text, arguments: arguments, type: schema[type: "Recipe"]!, schema: schema)
        return query.apply(to: recipes, source: InMemoryObjectSource()).map {
            guard case .int(let id) = $0.0 else { return -1 }
            return id
        }
    }

    @Test(
        "Words, prefixes and exclusions",
        arguments: [
            // Every word must be there, as a whole word, in any case and without regard to diacritics.
            ("description TEXT 'chocolate'", [1, 3, 7]),
            ("description TEXT 'cake'", [1, 2]),
            ("description TEXT 'CAKE chocolate'", [1]),
            ("description TEXT 'creme brulee'", [4]),
            ("description TEXT 'café'", [4]),
            ("description TEXT 'cafe'", [4]),
            // Punctuation separates words; a soft hyphen does not.
            ("description TEXT 'cocoa milk'", [3]),
            ("description TEXT 'mail'", [7]),
            ("description TEXT 'e-mail'", [7]),
            // `-` excludes a word; `*` makes a prefix.
            ("description TEXT 'cake -chocolate'", [2]),
            ("description TEXT 'choc*'", [1, 3, 7]),
            ("description TEXT 'cake -wal*'", [2]),
            ("description TEXT 'che*'", [5, 7]),
            ("description TEXT '-cake'", [3, 4, 5, 7]),
            ("description TEXT 'nut'", []),
            ("NOT description TEXT 'cake'", [3, 4, 5, 6, 7]),
            // Lists of strings: ANY by default.
            ("notes TEXT 'quick'", [1, 3]),
            ("ALL notes TEXT 'quick'", [1, 2, 4, 6, 7]),
            ("NONE notes TEXT 'chocolate'", [1, 2, 3, 4, 6, 7]),
        ] as [(String, [Int64])])
    func words(query: String, expected: [Int64]) throws {
        #expect(try Self.ids(query) == expected, "\(query)")
    }

    @Test("The words may be an argument; TEXT is a keyword only where an operator is expected")
    func arguments() throws {
        #expect(try Self.ids("description TEXT $0", ["lemon"]) == [2])
        #expect(try Self.ids("description text %@ AND servings == 4", ["hot"]) == [3])
    }

    @Test(
        "Searches that cannot run are refused, naming the fault",
        arguments: [
            ("description TEXT ''", "at least one word"),
            ("description TEXT '-- !!'", "at least one word"),
            ("servings TEXT 'four'", "is not a string"),
            ("description TEXT 4", "as a string"),
            ("description TEXT $0", "as a string"),
            ("description TEXT[c] 'cake'", "modifier"),
            ("ANY description TEXT 'cake'", "needs a list"),
        ] as [(String, String)])
    func refusals(query: String, fragment: String) {
        do {
            _ = try Self.ids(query, [.int(1)])
            Issue.record("\(query) was accepted")
        } catch {
            #expect(error.message.contains(fragment), "\(query): \(error)")
        }
    }
}
