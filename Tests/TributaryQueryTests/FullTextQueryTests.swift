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

/// Random texts and searches over a small vocabulary (with case and diacritics varied), each answer checked against a
/// naive evaluator: the words of a text are its runs of letters, lowercased, with é read as e.
@Suite("TEXT against a naive evaluator") struct FullTextDifferentialTests {
    static let words = ["cake", "Cake", "café", "cafe", "choc", "chocolate", "nuts", "walnut", "lemon", "tart"]

    static func naiveWords(_ text: String) -> Set<String> {
        Set(
            text.lowercased().replacingOccurrences(of: "é", with: "e").split { !$0.isLetter }.map(String.init))
    }

    @Test("Random searches of words, exclusions and prefixes", arguments: [1, 2, 0x7E47] as [UInt64])
    func randomized(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        func pick() -> String { Self.words[Int(random.next() % UInt64(Self.words.count))] }
        let separators = [" ", ", ", "-", "; ", "!"]
        let texts: [String] = (0..<200).map { _ in
            (0..<(1 + Int(random.next() % 5))).map { _ in pick() + separators[Int(random.next() % 5)] }.joined()
        }
        let objects: [(PrimaryKey, [String: Value])] = texts.enumerated().map { index, text in
            (.int(Int64(index)), ["_id": .int(Int64(index)), "description": .string(text), "servings": 1])
        }
        let schema = FullTextQueryTests.schema
        for _ in 0..<150 {
            var terms: [String] = []
            var required: [(word: String, prefix: Bool)] = []
            var excluded: [(word: String, prefix: Bool)] = []
            for index in 0..<(1 + Int(random.next() % 3)) {
                let word = pick()
                let prefix = random.next() % 4 == 0
                let term = String(word.prefix(prefix ? 3 : word.count))
                if index > 0 && random.next() % 3 == 0 {
                    terms.append("-" + term + (prefix ? "*" : ""))
                    excluded.append((Self.naiveWords(term).first ?? term, prefix))
                } else {
                    terms.append(term + (prefix ? "*" : ""))
                    required.append((Self.naiveWords(term).first ?? term, prefix))
                }
            }
            let search = terms.joined(separator: " ")
            let query = try Query(
                "description TEXT $0", arguments: [.string(search)], type: schema[type: "Recipe"]!, schema: schema)
            let found = query.apply(to: objects, source: InMemoryObjectSource()).map(\.0)
            let expected = objects.filter { object in
                guard case .string(let text)? = object.1["description"] else { return false }
                let words = Self.naiveWords(text)
                func has(_ term: (word: String, prefix: Bool)) -> Bool {
                    term.prefix ? words.contains { $0.hasPrefix(term.word) } : words.contains(term.word)
                }
                return required.allSatisfy(has) && !excluded.contains(where: has)
            }.map(\.0)
            #expect(found == expected, "\(search)")
        }
    }
}
