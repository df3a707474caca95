import Foundation
import TributaryModel
import TributaryQuery

/// A schema and objects that every suite queries: tasks with scalars, lists, links and embedded objects,
/// the people they link to (one of whom, "ghost", is missing), and the types of two Realm apps.
enum Fixture {
    static let schema = Schema(types: [
        ObjectSchema(
            name: "Task",
            properties: [
                .scalar("_id", .int),
                .scalar("title", .string, indexed: true),
                .scalar("priority", .int),
                .scalar("score", .double, optional: true),
                .scalar("done", .bool),
                .scalar("notes", .string, optional: true),
                .scalar("due", .date, optional: true),
                Property("tags", .scalar(.string), list: true),
                Property("scores", .scalar(.int), list: true),
                Property("ratings", .scalar(.double), list: true),
                Property("author", .link("Person")),
                Property("reviewers", .link("Person"), list: true),
                Property("meta", .embedded("Meta")),
                Property("steps", .embedded("Step"), list: true),
                .scalar("attachment", .data, optional: true),
                .scalar("ref", .objectId, optional: true),
                .scalar("token", .uuid, optional: true),
            ]),
        ObjectSchema(
            name: "Person",
            properties: [
                .scalar("_id", .string),
                .scalar("name", .string),
                .scalar("age", .int, optional: true),
                Property("friends", .link("Person"), list: true),
                Property("address", .embedded("Address")),
            ]),
        .embedded("Address", properties: [.scalar("city", .string), .scalar("zip", .string, optional: true)]),
        .embedded(
            "Meta", properties: [Property("createdBy", .link("Person")), .scalar("label", .string, optional: true)]),
        .embedded("Step", properties: [.scalar("name", .string), .scalar("minutes", .int)]),
        // A Realm chat app: messages of a conversation, sorted by timestamp.
        ObjectSchema(
            name: "ChatMessage",
            properties: [
                .scalar("_id", .objectId),
                .scalar("conversationID", .string, indexed: true),
                .scalar("text", .string),
                .scalar("timestamp", .date),
            ]),
        // A Realm travel app: saved searches with an embedded `query` object.
        ObjectSchema(
            name: "SavedSearch",
            properties: [.scalar("_id", .string), Property("query", .embedded("SearchQuery"))]),
        .embedded("SearchQuery", properties: [.scalar("from", .string), .scalar("to", .string)]),
    ])

    static func type(_ name: String) -> ObjectSchema { schema[type: name]! }

    static let oid = ObjectID(hex: "507f1f77bcf86cd799439011")!
    static let uuid = UUID(uuidString: "6BA7B810-9DAD-11D1-80B4-00C04FD430C8")!

    /// 2024-01-10 09:00:00 UTC.
    static let january10 = Date(timeIntervalSince1970: 1_704_877_200)

    static func person(_ id: String) -> Value { .link(.string(id)) }

    static func step(_ name: String, _ minutes: Int64) -> Value {
        .embedded(EmbeddedObject(type: "Step", fields: ["name": .string(name), "minutes": .int(minutes)]))
    }

    static func meta(_ createdBy: Value, _ label: Value) -> Value {
        .embedded(EmbeddedObject(type: "Meta", fields: ["createdBy": createdBy, "label": label]))
    }

    static let people: [String: [String: Value]] = [
        "ada": [
            "_id": "ada", "name": "Ada", "age": 36, "friends": [person("bob")],
            "address": .embedded(EmbeddedObject(type: "Address", fields: ["city": "London", "zip": "N1"])),
        ],
        "bob": [
            "_id": "bob", "name": "Bob", "age": .null, "friends": [person("ada"), person("ghost")], "address": .null,
        ],
        "cy": [
            "_id": "cy", "name": "Cécile", "age": 28, "friends": [],
            "address": .embedded(EmbeddedObject(type: "Address", fields: ["city": "Paris", "zip": .null])),
        ],
    ]

    static let source: InMemoryObjectSource = {
        var source = InMemoryObjectSource()
        for (id, fields) in people.sorted(by: { $0.key < $1.key }) {
            source.insert(type: "Person", primaryKey: .string(id), fields)
        }
        return source
    }()

    static let tasks: [(PrimaryKey, [String: Value])] = [
        task(
            1,
            [
                "title": "Write report", "priority": 3, "score": 4.5, "done": false, "notes": "urgent: finish",
                "due": .date(january10), "tags": ["work", "urgent"], "scores": [1, 2, 3], "ratings": [4.0, 5.0],
                "author": person("ada"), "reviewers": [person("bob"), person("cy")],
                "meta": meta(person("ada"), "alpha"),
                "steps": [step("draft", 30), step("review", 15)], "attachment": .data(Data([1, 2, 3])),
                "ref": .objectId(oid), "token": .uuid(uuid),
            ]),
        task(
            2,
            [
                "title": "buy milk", "priority": 1, "score": .null, "done": true, "notes": .null, "due": .null,
                "tags": ["home"], "scores": [], "ratings": [], "author": person("bob"), "reviewers": [],
                "meta": .null, "steps": [], "attachment": .null, "ref": .null, "token": .null,
            ]),
        task(
            3,
            [
                "title": "Café visit", "priority": 2, "score": 2.0, "done": false, "notes": "Crème brûlée",
                "due": .date(Date(timeIntervalSince1970: 1_709_296_200)), "tags": [], "scores": [10], "ratings": [1.5],
                "author": person("cy"), "reviewers": [person("ada")], "meta": meta(person("cy"), .null),
                "steps": [step("go", 5)], "attachment": .data(Data([9])), "ref": .null, "token": .null,
            ]),
        task(
            4,
            [
                "title": "WRITE tests", "priority": 5, "score": 9.25, "done": false, "notes": "",
                "due": .date(Date(timeIntervalSince1970: 1_704_067_199)), "tags": ["work"], "scores": [5, 5],
                "ratings": [2.5, 3.5], "author": person("ghost"), "reviewers": [person("ghost"), person("ada")],
                "meta": meta(person("ghost"), "beta"), "steps": [], "attachment": .null, "ref": .null, "token": .null,
            ]),
        task(
            5,
            [
                "title": "report bug", "priority": 3, "score": -1.0, "done": true, "notes": "see report",
                "due": .date(january10), "tags": ["work", "bug"], "scores": [7, -2], "ratings": [],
                "author": .null, "reviewers": [person("cy"), person("bob")], "meta": .null,
                "steps": [step("triage", 10), step("fix", 120)], "attachment": .null, "ref": .null, "token": .null,
            ]),
    ]

    private static func task(_ id: Int64, _ fields: [String: Value]) -> (PrimaryKey, [String: Value]) {
        var fields = fields
        fields["_id"] = .int(id)
        return (.int(id), fields)
    }

    static func query(_ text: String, _ arguments: [Value] = [], type: String = "Task") throws(QueryError) -> Query {
        try Query(text, arguments: arguments, type: Fixture.type(type), schema: schema)
    }

    /// The ids of the tasks a query selects, in the order `apply` returns them.
    static func ids(_ text: String, _ arguments: [Value] = []) throws(QueryError) -> [Int64] {
        try query(text, arguments).apply(to: tasks, source: source).map {
            guard case .int(let id) = $0.0 else { return -1 }
            return id
        }
    }

    /// The error a query throws, or `nil` when it parses and checks.
    static func error(_ text: String, _ arguments: [Value] = [], type: String = "Task") -> QueryError? {
        do {
            _ = try Query(text, arguments: arguments, type: Fixture.type(type), schema: schema)
            return nil
        } catch {
            return error
        }
    }
}
