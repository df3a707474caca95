import Foundation
import Testing
import TributaryModel
import TributaryQuery

/// Queries as Realm apps write them, unchanged.
@Suite("Queries from Realm apps") struct RealmAppQueryTests {
    private static func search(_ id: String, from: String, to: String) -> (PrimaryKey, [String: Value]) {
        let query = EmbeddedObject(type: "SearchQuery", fields: ["from": .string(from), "to": .string(to)])
        return (.string(id), ["_id": .string(id), "query": .embedded(query)])
    }

    private static let searches = [
        search("a", from: "Paris", to: "Rome"), search("b", from: "Rome", to: "Paris"),
        search("c", from: "Paris", to: "Rome"), search("d", from: "Paris", to: "Oslo"),
        (PrimaryKey.string("e"), ["_id": Value.string("e"), "query": .null]),
    ]

    private static func message(_ number: UInt8, _ conversation: String, _ text: String, _ seconds: Double)
        -> (PrimaryKey, [String: Value])
    {
        let id = ObjectID(bytes: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, number])!
        return (
            .objectId(id),
            [
                "_id": .objectId(id), "conversationID": .string(conversation), "text": .string(text),
                "timestamp": .date(Date(timeIntervalSince1970: seconds)),
            ]
        )
    }

    private static let messages = [
        message(1, "c1", "Hello there", 300), message(2, "c2", "hello from c2", 100),
        message(3, "c1", "Say HELLO", 100), message(4, "c1", "bye", 200), message(5, "c1", "Hellooo", 250),
    ]

    private func texts(_ results: [(PrimaryKey, [String: Value])]) -> [String] {
        results.compactMap { $0.1["text"]?.stringValue }
    }

    @Test("query.from = %@ AND query.to = %@ (NSPredicate style, embedded object)") func savedSearches() throws {
        let query = try Fixture.query("query.from = %@ AND query.to = %@", ["Paris", "Rome"], type: "SavedSearch")
        let found = query.apply(to: Self.searches, source: InMemoryObjectSource()).map(\.0)
        #expect(found == [.string("a"), .string("c")])
        let reversed = try Fixture.query("query.from = %@ AND query.to = %@", ["Rome", "Paris"], type: "SavedSearch")
        #expect(reversed.apply(to: Self.searches, source: InMemoryObjectSource()).map(\.0) == [.string("b")])
        #expect(
            reversed.indexableConstraints.isEmpty, "embedded key paths are not properties of the queried type")
    }

    @Test("conversationID == $0") func conversation() throws {
        let query = try Fixture.query("conversationID == $0", ["c1"], type: "ChatMessage")
        #expect(
            texts(query.apply(to: Self.messages, source: InMemoryObjectSource())) == [
                "Hello there", "Say HELLO", "bye", "Hellooo",
            ])
        #expect(query.indexableConstraints == [IndexConstraint(property: "conversationID", kind: .equal(["c1"]))])
    }

    @Test("text CONTAINS[c] $0") func textSearch() throws {
        let query = try Fixture.query("text CONTAINS[c] $0", ["hello"], type: "ChatMessage")
        #expect(
            texts(query.apply(to: Self.messages, source: InMemoryObjectSource()))
                == ["Hello there", "hello from c2", "Say HELLO", "Hellooo"])
        #expect(query.indexableConstraints.isEmpty)
    }

    @Test("A conversation's messages sorted by timestamp") func sortedByTimestamp() throws {
        let ascending = try Fixture.query(
            "conversationID == $0 SORT(timestamp ASC)", ["c1"], type: "ChatMessage")
        #expect(
            texts(ascending.apply(to: Self.messages, source: InMemoryObjectSource()))
                == ["Say HELLO", "bye", "Hellooo", "Hello there"])
        let latest = try Fixture.query(
            "conversationID == $0 AND text CONTAINS[c] $1 SORT(timestamp DESC) LIMIT(2)", ["c1", "hello"],
            type: "ChatMessage")
        #expect(texts(latest.apply(to: Self.messages, source: InMemoryObjectSource())) == ["Hello there", "Hellooo"])
    }

    @Test("timestamp comparisons with date arguments") func timestampRange() throws {
        let query = try Fixture.query(
            "timestamp > $0 && timestamp <= $1",
            [.date(Date(timeIntervalSince1970: 100)), .date(Date(timeIntervalSince1970: 250))],
            type: "ChatMessage")
        #expect(texts(query.apply(to: Self.messages, source: InMemoryObjectSource())) == ["bye", "Hellooo"])
    }
}
