import Foundation
import Testing
import TributaryModel
import TributaryTestSupport
import TributaryTestTags

// Schemas as MongoDB Atlas App Services prints them (JSON Schema), copied verbatim from published articles. RChat's
// are in the test support module (`RChat`), which the sync tests share.

/// An article on changing a synced schema: ChatMessage with `isHighPriority`.
private let chatMessageV1JSON = #"""
    {
       "bsonType": "object",
       "properties": {
         "_id": {
           "bsonType": "string"
         },
         "author": {
           "bsonType": "string"
         },
         "image": {
           "bsonType": "object",
           "properties": {
             "_id": {
               "bsonType": "string"
             },
             "date": {
               "bsonType": "date"
             },
             "picture": {
               "bsonType": "binData"
             },
             "thumbNail": {
               "bsonType": "binData"
             }
           },
           "required": [
             "_id",
             "date"
           ],
           "title": "Photo"
         },
         "isHighPriority": {
           "bsonType": "bool"
         },
         "location": {
           "bsonType": "array",
           "items": {
             "bsonType": "double"
           }
         },
         "partition": {
           "bsonType": "string"
         },
         "text": {
           "bsonType": "string"
         },
         "timestamp": {
           "bsonType": "date"
         }
       },
       "required": [
         "_id",
         "partition",
         "text",
         "timestamp",
         "isHighPriority"
       ],
       "title": "ChatMessage"
     }
    """#

/// The same article: the partner type ChatMessageV2, with `author` required.
private let chatMessageV2JSON = #"""
    {
       "bsonType": "object",
       "properties": {
         "_id": {
           "bsonType": "string"
         },
         "author": {
           "bsonType": "string"
         },
         "image": {
           "bsonType": "object",
           "properties": {
             "_id": {
               "bsonType": "string"
             },
             "date": {
               "bsonType": "date"
             },
             "picture": {
               "bsonType": "binData"
             },
             "thumbNail": {
               "bsonType": "binData"
             }
           },
           "required": [
             "_id",
             "date"
           ],
           "title": "Photo"
         },
         "isHighPriority": {
           "bsonType": "bool"
         },
         "location": {
           "bsonType": "array",
           "items": {
             "bsonType": "double"
           }
         },
         "partition": {
           "bsonType": "string"
         },
         "text": {
           "bsonType": "string"
         },
         "timestamp": {
           "bsonType": "date"
         }
       },
       "required": [
         "_id",
         "partition",
         "text",
         "timestamp",
         "isHighPriority",
         "author"
       ],
       "title": "ChatMessageV2"
     }
    """#

/// A Project schema, as its article prints it (code-block line markers "_13" included).
private let projectSchemaLine =
    #"_13{_13 "title": "Project",_13 "bsonType": "object",_13 "required": ["isPinned"],_13 "properties": {_13 "_id": {_13 "bsonType": "uuid"_13 },_13 "isPinned": {_13 "bsonType": "bool"_13 }_13 }_13}"#

// MARK: - Helpers

/// Runs `body`, expecting a ``SchemaError``; returns it.
private func schemaError(
    _ body: () throws(SchemaError) -> Void,
    sourceLocation: SourceLocation = #_sourceLocation
)
    -> SchemaError?
{
    do {
        try body()
        Issue.record("expected a SchemaError, got none", sourceLocation: sourceLocation)
        return nil
    } catch {
        return error
    }
}

private func parseError(_ json: String) -> SchemaError? {
    schemaError { () throws(SchemaError) in _ = try Schema(json: json) }
}

private func array(_ schemas: String...) -> String { "[\n" + schemas.joined(separator: ",\n") + "\n]" }

// MARK: - Published schemas

@Suite("App Services JSON schemas") struct SchemaJSONTests {
    @Test("RChat's User schema: nested objects become embedded types, arrays lists")
    func rchatUserSchema() throws {
        let schema = try Schema(json: RChat.user)
        #expect(schema.types.map(\.name) == ["Conversation", "Member", "Photo", "User", "UserPreferences"])

        let user = try #require(schema[type: "User"])
        #expect(!user.isEmbedded)
        #expect(user.primaryKey == "_id")
        #expect(
            user.properties == [
                .scalar("_id", .string),
                Property("conversations", .embedded("Conversation"), list: true),
                .scalar("lastSeenAt", .date, optional: true),
                .scalar("presence", .string),
                .scalar("userName", .string),
                Property("userPreferences", .embedded("UserPreferences")),
            ]
        )

        let conversation = try #require(schema[type: "Conversation"])
        #expect(conversation.isEmbedded)
        #expect(conversation.primaryKey == nil)
        #expect(
            conversation.properties == [
                .scalar("displayName", .string),
                .scalar("id", .string),
                Property("members", .embedded("Member"), list: true),
                .scalar("unreadCount", .int),  // "long"
            ]
        )
        #expect(
            schema[type: "Member"]?.properties == [.scalar("membershipStatus", .string), .scalar("userName", .string)]
        )
        #expect(
            schema[type: "UserPreferences"]?.properties == [
                Property("avatarImage", .embedded("Photo")), .scalar("displayName", .string, optional: true),
            ]
        )
        // An embedded type's `_id` is a plain property, not a primary key.
        let photo = try #require(schema[type: "Photo"])
        #expect(photo.isEmbedded)
        #expect(
            photo.properties == [
                .scalar("_id", .string), .scalar("date", .date), .scalar("picture", .data, optional: true),
                .scalar("thumbNail", .data, optional: true),
            ]
        )
        #expect(schema.version == 0)
    }

    @Test("RChat's User, Chatster and ChatMessage together share one Photo")
    func rchatSchemas() throws {
        let schema = try Schema(json: array(RChat.user, RChat.chatster, RChat.chatMessage), version: 3)
        #expect(
            schema.types.map(\.name) == [
                "ChatMessage", "Chatster", "Conversation", "Member", "Photo", "User", "UserPreferences",
            ]
        )
        #expect(schema.version == 3)
        #expect(
            schema[type: "Chatster"]?.properties == [
                .scalar("_id", .string), Property("avatarImage", .embedded("Photo")),
                .scalar("displayName", .string, optional: true), .scalar("lastSeenAt", .date, optional: true),
                .scalar("presence", .string), .scalar("userName", .string),
            ]
        )
        #expect(
            schema[type: "ChatMessage"]?.properties == [
                .scalar("_id", .string), .scalar("author", .string, optional: true), .scalar("authorID", .string),
                .scalar("conversationID", .string), Property("image", .embedded("Photo")),
                Property("location", .scalar(.double), list: true), .scalar("text", .string),
                .scalar("timestamp", .date),
            ]
        )
    }

    @Test("The schema-change article: ChatMessage with isHighPriority, and ChatMessageV2 with a required author")
    func schemaChangeSchemas() throws {
        let schema = try Schema(json: array(chatMessageV1JSON, chatMessageV2JSON))
        #expect(schema.types.map(\.name) == ["ChatMessage", "ChatMessageV2", "Photo"])
        let v1 = try #require(schema[type: "ChatMessage"])
        let v2 = try #require(schema[type: "ChatMessageV2"])
        #expect(v1[property: "isHighPriority"] == .scalar("isHighPriority", .bool))
        #expect(v1[property: "partition"] == .scalar("partition", .string))
        #expect(v1[property: "author"]?.isOptional == true)
        #expect(v2[property: "author"]?.isOptional == false)
        #expect(v1.properties.map(\.name) == v2.properties.map(\.name))
    }

    @Test("The Project schema: _id is the primary key and required even though `required` omits it")
    func projectSchema() throws {
        // The article shows the code block with its line markers ("_13"); they stand for line breaks.
        let json = projectSchemaLine.replacingOccurrences(of: "_13", with: "\n")
        let schema = try Schema(json: json)
        #expect(
            schema.types == [
                ObjectSchema(name: "Project", properties: [.scalar("_id", .uuid), .scalar("isPinned", .bool)])
            ]
        )
        #expect(
            schema.jsonString() == """
                [
                  {
                    "title": "Project",
                    "bsonType": "object",
                    "properties": {
                      "_id": {
                        "bsonType": "uuid"
                      },
                      "isPinned": {
                        "bsonType": "bool"
                      }
                    },
                    "required": [
                      "_id",
                      "isPinned"
                    ]
                  }
                ]
                """
        )
    }

    @Test("The mapping form: type names as keys, title optional")
    func mappingForm() throws {
        let schema = try Schema(json: "{ \"User\": \(RChat.user), \"Chatster\": \(RChat.chatster) }")
        #expect(schema.types.count == 6)
        let untitled = try Schema(json: #"{ "Tag": { "properties": { "_id": { "bsonType": "objectId" } } } }"#)
        #expect(untitled.types == [ObjectSchema(name: "Tag", properties: [.scalar("_id", .objectId)])])
        #expect(
            parseError(#"{ "Tag": { "title": "Label", "properties": { "_id": { "bsonType": "string" } } } }"#)?.message
                == "schema.Tag.title: title 'Label' differs from its key 'Tag'"
        )
    }

    @Test("Bytes, Data and String inputs agree")
    func inputForms() throws {
        let fromString = try Schema(json: RChat.chatster)
        #expect(try Schema(json: Array(RChat.chatster.utf8)) == fromString)
        #expect(try Schema(json: Data(RChat.chatster.utf8)) == fromString)
        #expect(try Schema(json: fromString.jsonData()) == fromString)
        // A UTF-8 byte order mark is tolerated.
        #expect(try Schema(json: [0xEF, 0xBB, 0xBF] + Array(RChat.chatster.utf8)) == fromString)
    }

    // MARK: - Round trips

    @Test("Round trip of every published schema", arguments: 0..<6)
    func publishedSchemaRoundTrip(index: Int) throws {
        let inputs = [
            RChat.user, RChat.chatster, RChat.chatMessage, array(RChat.user, RChat.chatster, RChat.chatMessage),
            array(chatMessageV1JSON, chatMessageV2JSON), projectSchemaLine.replacingOccurrences(of: "_13", with: "\n"),
        ]
        let schema = try Schema(json: inputs[index], version: 7)
        let text = schema.jsonString()
        #expect(try Schema(json: text, version: 7) == schema)
        // Writing is deterministic: the same schema gives the same text.
        #expect(try Schema(json: text, version: 7).jsonString() == text)
    }

    @Test("A chain of 300 embedded types is written without nesting past what reads back, and round-trips")
    func deepEmbeddedChainRoundTrips() throws {
        let depth = 300
        let chain = (0..<depth).map { index in
            ObjectSchema.embedded(
                "E\(index)",
                properties: [.scalar("x", .int)]
                    + (index + 1 < depth ? [Property("next", .embedded("E\(index + 1)"))] : []))
        }
        let schema = Schema(
            version: 3,
            types: [
                ObjectSchema(name: "Root", properties: [.scalar("_id", .string), Property("first", .embedded("E0"))])
            ] + chain)
        try schema.validate()
        let text = schema.jsonString()
        let parsed = try Schema(json: text, version: 3)
        #expect(parsed.types.count == schema.types.count)
        for type in schema.types { #expect(parsed[type: type.name] == type, "\(type.name)") }
        // Deterministic, and stable through a second round.
        #expect(parsed.jsonString() == text)
    }

    @Test("Each top-level schema written is self-contained: it defines the embedded types it holds")
    func writtenSchemasAreSelfContained() throws {
        let schema = try Schema(json: array(RChat.user, RChat.chatster, RChat.chatMessage))
        let elements = try #require(
            try JSONSerialization.jsonObject(with: schema.jsonData()) as? [Any]
        )
        #expect(elements.count == 3)
        var names: [[String]] = []
        for element in elements {
            // Each element alone is a complete schema (Foundation's writer reorders keys, which is fine here).
            let alone = try Schema(json: JSONSerialization.data(withJSONObject: element))
            names.append(alone.types.map(\.name))
        }
        #expect(
            names == [
                ["ChatMessage", "Photo"], ["Chatster", "Photo"],
                ["Conversation", "Member", "Photo", "User", "UserPreferences"],
            ]
        )
    }

    @Test("Round trip of every feature: links, indexes, defaults, optional elements, recursive and orphan types")
    func featureRoundTrip() throws {
        let objectID = try #require(ObjectID(hex: "5f1b2c3d4e5f60718293a4b5"))
        let uuid = try #require(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F"))
        let schema = Schema(
            version: 9,
            types: [
                ObjectSchema(
                    name: "Account",
                    primaryKey: "number",
                    properties: [
                        .scalar("number", .int),
                        .scalar("label", .string, optional: true, indexed: true, default: .null),
                    ]
                ),
                ObjectSchema(
                    name: "Task",
                    properties: [
                        .scalar("_id", .objectId),
                        .scalar("done", .bool, default: false),
                        .scalar("count", .int, indexed: true, default: .int(Int64.min)),
                        .scalar("ratio", .double, default: .double(0.1)),
                        .scalar("ceiling", .double, optional: true, default: .double(-.infinity)),
                        .scalar("title", .string, default: "untitled \"quoted\" \\ \n\t\u{1} é 🐟"),
                        .scalar("blob", .data, default: .data(Data([0, 1, 2, 255]))),
                        .scalar("due", .date, default: .date(Date(timeIntervalSince1970: 1_700_000_000.5))),
                        .scalar("exact", .date, default: .date(Date(timeIntervalSince1970: 1_700_000_000.123_456))),
                        .scalar("never", .date, optional: true, default: .date(.distantFuture)),
                        .scalar("token", .uuid, optional: true, default: .uuid(uuid)),
                        .scalar("origin", .objectId, default: .objectId(objectID)),
                        Property("owner", .link("User")),
                        Property("watchers", .link("User"), list: true),
                        Property("account", .link("Account"), default: .link(.int(42))),
                        Property("scores", .scalar(.int), optional: true, list: true),
                        // A list's only default is the empty list it starts as.
                        Property("tags", .scalar(.string), list: true, default: []),
                        Property("notes", .embedded("Note"), list: true),
                        Property("root", .embedded("Tree"), default: .null),
                    ]
                ),
                ObjectSchema(name: "User", properties: [.scalar("_id", .string), .scalar("name", .string)]),
                .embedded("Note", properties: [.scalar("text", .string), Property("author", .link("User"))]),
                // Recursive: a tree of embedded nodes.
                .embedded(
                    "Tree",
                    properties: [
                        .scalar("name", .string), Property("children", .embedded("Tree"), list: true),
                        Property("note", .embedded("Note")),
                    ]
                ),
                // Held by no type: written at the top, marked embedded.
                .embedded("Orphan", properties: [.scalar("x", .double)]),
            ]
        )
        try schema.validate()
        let text = schema.jsonString()
        let parsed = try Schema(json: text, version: 9)
        #expect(parsed == schema)
        #expect(text.contains(#""x-tributary-embedded": true"#))
        #expect(text.contains(#""x-tributary-primaryKey": "number""#))
        #expect(text.contains(##""ref": "#/relationship/mongodb-atlas/tributary/User""##))
        #expect(text.contains(#""$numberDouble": "-Infinity""#))
        #expect(text.contains(#""default": "2023-11-14T22:13:20.500Z""#))
        // A date that ISO 8601 with milliseconds cannot hold is written as exact seconds since 1970.
        #expect(text.contains(#""default": 1700000000.123456"#))
        // NaN is not equal to itself, so Schema's == cannot compare a NaN default: check it alone.
        let nan = Schema(types: [
            ObjectSchema(
                name: "N",
                properties: [.scalar("_id", .int), .scalar("weight", .double, default: .double(.nan))]
            )
        ])
        #expect(nan.jsonString().contains(#""$numberDouble": "NaN""#))
        #expect(
            try Schema(json: nan.jsonString())[type: "N"]?[property: "weight"]?.defaultValue?.doubleValue?.isNaN == true
        )
    }

    @Test("Links read from relationships: to-one and to-many, and their checks")
    func relationships() throws {
        let json = """
            [
              { "title": "User", "properties": { "_id": { "bsonType": "string" } } },
              {
                "title": "Task",
                "properties": {
                  "_id": { "bsonType": "objectId" },
                  "owner": { "bsonType": "string" },
                  "watchers": { "bsonType": "array", "items": { "bsonType": "string" } }
                },
                "relationships": {
                  "owner": { "ref": "#/relationship/mongodb-atlas/todo/User", "foreign_key": "_id", "is_list": false },
                  "watchers": { "ref": "#/relationship/mongodb-atlas/todo/User", "foreign_key": "_id", "is_list": true }
                }
              }
            ]
            """
        let schema = try Schema(json: json)
        #expect(
            schema[type: "Task"]?.properties == [
                .scalar("_id", .objectId), Property("owner", .link("User")),
                Property("watchers", .link("User"), list: true),
            ]
        )

        let wrongKeyType = json.replacingOccurrences(
            of: #""owner": { "bsonType": "string" }"#,
            with: #""owner": { "bsonType": "long" }"#
        )
        #expect(
            parseError(wrongKeyType)?.message
                == "schema[1].relationships.owner: property 'Task.owner' holds int, but the primary key of 'User' is string"
        )
        let wrongList = json.replacingOccurrences(of: #""is_list": false"#, with: #""is_list": true"#)
        #expect(
            parseError(wrongList)?.message
                == "schema[1].relationships.owner.is_list: is true, but property 'owner' is not an array"
        )
        let unknownTarget = json.replacingOccurrences(
            of: "todo/User\", \"foreign_key\": \"_id\", \"is_list\": false",
            with: "todo/Usr\", \"foreign_key\": \"_id\", \"is_list\": false"
        )
        let unknown = parseError(unknownTarget)
        #expect(unknown?.code == .unknownType)
        #expect(unknown?.message == "schema[1].relationships.owner.ref: type 'Usr' is not in the schema")
        let wrongForeignKey = json.replacingOccurrences(
            of: #""foreign_key": "_id", "is_list": true"#,
            with: #""foreign_key": "name", "is_list": true"#
        )
        #expect(
            parseError(wrongForeignKey)?.message
                == "schema[1].relationships.watchers.foreign_key: 'name' is not the primary key of 'User' ('_id')"
        )
    }

    // MARK: - Errors

    @Test("A misspelled bsonType names its path")
    func unknownBSONType() throws {
        let broken = RChat.chatMessage.replacingOccurrences(
            of: "\"author\": {\n      \"bsonType\": \"string\"",
            with: "\"author\": {\n      \"bsonType\": \"strng\""
        )
        #expect(broken != RChat.chatMessage)
        let error = parseError(array(RChat.user, RChat.chatster, broken))
        #expect(error?.code == .invalidJSON)
        #expect(error?.message == "schema[2].properties.author.bsonType: unknown bsonType 'strng'")
        #expect(error?.description == error?.message)
    }

    @Test("decimal is a decimal property, not mapped to double; a default that is not a decimal is refused")
    func decimalIsADecimal() throws {
        let schema = try Schema(
            json:
                #"{ "title": "Price", "properties": { "_id": { "bsonType": "int" }, "amount": { "bsonType": "decimal" } } }"#
        )
        #expect(schema[type: "Price"]?.properties.first { $0.name == "amount" }?.kind == .scalar(.decimal))
        let error = parseError(
            #"{ "title": "Price", "properties": { "_id": { "bsonType": "int" }, "amount": { "bsonType": "decimal", "default": "12.5x" } } }"#
        )
        #expect(error?.code == .invalidDefault)
        #expect(error?.message.contains("'12.5x' is not a decimal number") == true, "\(String(describing: error))")
    }

    @Test("Sets: an array with uniqueItems, read and written back")
    func sets() throws {
        let schema = try Schema(
            json:
                #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "p": { "bsonType": "array", "uniqueItems": true, "items": { "bsonType": ["string", "null"] } } } }"#
        )
        let property = try #require(schema[type: "T"]?[property: "p"])
        #expect(property.isSet && property.isList && property.isOptional)
        #expect(property.typeDescription == "set<string?>")
        #expect(try Schema(json: schema.jsonString())[type: "T"]?[property: "p"] == property)
        #expect(
            schema.jsonString().contains(#""uniqueItems" : true"#)
                || schema.jsonString().contains(#""uniqueItems": true"#))
    }

    @Test("Unsupported shapes: sets of embedded objects, dictionaries of lists, lists of lists, two types")
    func unsupportedShapes() {
        func check(_ property: String, _ expected: String) {
            let error = parseError(
                #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "p": "# + property + " } }"
            )
            #expect(error?.code == .unsupportedType)
            #expect(error?.message == expected)
        }
        check(
            #"{ "bsonType": "array", "uniqueItems": true, "items": { "bsonType": "object", "title": "E", "properties": { "x": { "bsonType": "int" } } } }"#,
            "schema.properties.p.uniqueItems: a set cannot hold embedded objects; use an array"
        )
        check(
            #"{ "bsonType": "object", "additionalProperties": { "bsonType": "array", "items": { "bsonType": "int" } } }"#,
            "schema.properties.p.additionalProperties.bsonType: a dictionary of arrays is not supported"
        )
        check(
            #"{ "bsonType": "array", "items": { "bsonType": "array", "items": { "bsonType": "int" } } }"#,
            "schema.properties.p.items.bsonType: lists of lists are not supported"
        )
        check(
            #"{ "bsonType": ["int", "string"] }"#,
            #"schema.properties.p.bsonType: a property has one type (optionally with "null"); got 2 types"#
        )
        check(
            #"{ "bsonType": "timestamp" }"#,
            "schema.properties.p.bsonType: BSON timestamps are not supported; use date"
        )
    }

    @Test(
        "Malformed schemas name the path at fault",
        arguments: [
            (
                #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "c": { "bsonType": "array", "items": { "bsonType": "object", "properties": {} } } } }"#,
                "schema.properties.c.items.title: missing; a nested object needs a title, the name of its embedded type"
            ),
            (
                #"{ "title": "T", "required": ["_id", "nope"], "properties": { "_id": { "bsonType": "int" } } }"#,
                "schema.required[1]: 'nope' is not in properties"
            ),
            (
                #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "tags": { "bsonType": "array" } } }"#,
                "schema.properties.tags.items: missing; an array needs items"
            ),
            (
                #"[{ "title": "A", "properties": { "_id": { "bsonType": "int" } } }, { "properties": {} }]"#,
                "schema[1].title: missing; every schema needs a title, its type name"
            ),
            (
                #"{ "title": "T", "bsonType": "array", "properties": {} }"#,
                #"schema.bsonType: a schema's bsonType must be "object""#
            ),
            (
                #"{ "title": "T", "properties": { "_id": { "type": "int" } } }"#,
                "schema.properties._id.bsonType: missing"
            ),
            (
                #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "x": 3 } }"#,
                "schema.properties.x: expected a property schema object, got a number"
            ),
            (
                #"{ "title": "T", "properties": { "_id": { "bsonType": "int", "x-tributary-index": true } } }"#,
                "schema.properties._id.x-tributary-index: unknown Tributary extension 'x-tributary-index'"
            ),
            (
                #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "odd key": { "bsonType": 5 } } }"#,
                #"schema.properties["odd key"].bsonType: expected a string, got a number"#
            ),
            (
                "42",
                "schema: expected a schema object, an array of schema objects, or an object mapping type names to schemas; got a number"
            ),
            (
                #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "p": { "bsonType": "object", "title": "Missing" } } }"#,
                "schema.properties.p: embedded type 'Missing' is not defined in the schema"
            ),
        ]
    )
    func malformed(json: String, message: String) {
        #expect(parseError(json)?.message == message)
    }

    @Test("A type without its primary key")
    func missingPrimaryKey() {
        let error = parseError(#"{ "title": "T", "properties": { "id": { "bsonType": "string" } } }"#)
        #expect(error?.code == .missingPrimaryKey)
        #expect(error?.message == "schema.properties: type 'T' has no primary key property '_id'")
    }

    @Test("Two different definitions of one embedded type are a conflict naming both places")
    func conflictingEmbeddedDefinitions() {
        let otherPhoto = RChat.chatster.replacingOccurrences(
            of: "\"thumbNail\": {\n          \"bsonType\": \"binData\"",
            with: "\"thumbNail\": {\n          \"bsonType\": \"string\""
        )
        #expect(otherPhoto != RChat.chatster)
        let error = parseError(array(RChat.user, otherPhoto))
        #expect(error?.code == .conflict)
        #expect(
            error?.message.hasPrefix(
                "schema[1].properties.avatarImage: type 'Photo' is defined differently at "
                    + "schema[0].properties.userPreferences.properties.avatarImage: there embedded Photo {"
            ) == true
        )
        #expect(error?.message.contains("thumbNail: data?") == true)
        #expect(error?.message.contains("thumbNail: string?") == true)
    }

    @Test("An embedded title that is also a top-level type is refused")
    func embeddedAndTopLevelClash() {
        let json = array(
            #"{ "title": "Photo", "properties": { "_id": { "bsonType": "string" } } }"#,
            RChat.chatster
        )
        let error = parseError(json)
        #expect(error?.code == .conflict)
        #expect(
            error?.message.hasPrefix(
                "schema[1].properties.avatarImage: type 'Photo' is defined differently at schema[0]"
            ) == true
        )
    }

    @Test("Defaults of the wrong type name their path")
    func badDefaults() {
        let wrongType = parseError(
            #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "count": { "bsonType": "int", "default": "3" } } }"#
        )
        #expect(wrongType?.code == .invalidDefault)
        #expect(wrongType?.message == "schema.properties.count.default: expected an integer, got a string")
        let tooBig = parseError(
            #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "count": { "bsonType": "long", "default": 9223372036854775808 } } }"#
        )
        #expect(tooBig?.message == "schema.properties.count.default: 9223372036854775808 is not a 64-bit integer")
        let nullRequired = parseError(
            #"{ "title": "T", "required": ["n"], "properties": { "_id": { "bsonType": "int" }, "n": { "bsonType": "string", "default": null } } }"#
        )
        #expect(nullRequired?.code == .invalidDefault)
        #expect(
            nullRequired?.message
                == "schema.properties.n.default: expected string, got null (the property is required)"
        )
        let badDate = parseError(
            #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "d": { "bsonType": "date", "default": "yesterday" } } }"#
        )
        #expect(
            badDate?.message
                == "schema.properties.d.default: 'yesterday' is not an ISO 8601 date such as 2024-01-31T12:00:00.000Z"
        )
        let listElement = parseError(
            #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "l": { "bsonType": "array", "items": { "bsonType": "int" }, "default": [1, true] } } }"#
        )
        #expect(listElement?.message == "schema.properties.l.default[1]: expected an integer, got a boolean")
        // A list starts empty and an embedded object null: no other default (they would merge by arrival order).
        let listDefault = parseError(
            #"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "l": { "bsonType": "array", "items": { "bsonType": "int" }, "default": [1] } } }"#
        )
        #expect(
            listDefault?.message
                == "'T.l' cannot have the default [1]: a list starts empty and an embedded object starts null. Remove the default from the schema and give the value when you create an object"
        )
    }

    @Test("JSON syntax errors give line and column")
    func syntaxErrors() {
        let trailingComma = parseError("{\n  \"title\": \"T\",\n}")
        #expect(trailingComma?.code == .invalidJSON)
        #expect(trailingComma?.message == "schema: invalid JSON at line 3, column 1: expected a string key")
        #expect(
            parseError("")?.message
                == "schema: invalid JSON at line 1, column 1: unexpected end of input; expected a value"
        )
        #expect(
            parseError("[1] x")?.message
                == "schema: invalid JSON at line 1, column 5: unexpected text after the JSON value"
        )
        #expect(
            parseError(#"{"a": 1, "a": 2}"#)?.message == "schema: invalid JSON at line 1, column 10: duplicate key 'a'"
        )
        #expect(parseError("\"\\x\"")?.message == "schema: invalid JSON at line 1, column 3: invalid escape in string")
        #expect(parseError("[01]")?.message == "schema: invalid JSON at line 1, column 3: expected ',' or ']' in array")
        #expect(
            parseError("\"\u{1}\"")?.message
                == "schema: invalid JSON at line 1, column 2: control character in string; escape it"
        )
        #expect(
            parseError("[\"\\ud800\"]")?.message
                == "schema: invalid JSON at line 1, column 9: unpaired surrogate in \\u escape"
        )
        let invalidUTF8 = schemaError { () throws(SchemaError) in _ = try Schema(json: [0x22, 0xC3, 0x28, 0x22]) }
        #expect(invalidUTF8?.message == "schema: invalid JSON at line 1, column 1: string is not valid UTF-8")
    }

    @Test("Deep nesting is an error, not a stack overflow")
    func deepNesting() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(
            parseError(deep)?.message == "schema: invalid JSON at line 1, column 257: nesting deeper than 256 levels"
        )
        let deepObjects = String(repeating: #"{"a":"#, count: 10_000)
        #expect(parseError(deepObjects)?.code == .invalidJSON)
    }

    @Test("Escapes and surrogate pairs decode")
    func escapes() throws {
        let schema = try Schema(
            json:
                #"{ "title": "T", "properties": { "_id": { "bsonType": "string", "default": "\u00e9\ud83d\udc1f\n\/" } } }"#
        )
        #expect(schema[type: "T"]?[property: "_id"]?.defaultValue == .string("é🐟\n/"))
    }

    @Test("Schemas that parse still pass validate(): a link to an embedded type is refused")
    func validateRuns() {
        let error = parseError(
            array(
                RChat.chatster,
                ##"{ "title": "T", "properties": { "_id": { "bsonType": "int" }, "p": { "bsonType": "string" } }, "relationships": { "p": { "ref": "#/relationship/mongodb-atlas/db/Photo" } } }"##
            )
        )
        #expect(error?.code == .invalidLink)
        #expect(
            error?.message == "schema[1].relationships.p.ref: 'Photo' is an embedded type; links need a top-level type"
        )
        let badKey = parseError(#"{ "title": "T", "properties": { "_id": { "bsonType": "double" } } }"#)
        #expect(badKey?.code == .invalidPrimaryKey)
    }

    // MARK: - Fuzzing

    @Test("Mutated schema JSON gives a schema or a SchemaError, never a trap", .tags(.fuzz))
    func schemaJSONFuzz() throws {
        var random = FuzzRandom.seeded(label: "SchemaJSONTests.fuzzSchemaJSON")
        let corpus =
            [RChat.user, RChat.chatster, RChat.chatMessage, chatMessageV1JSON].map { Array($0.utf8) }
            + [Array(try Schema(json: array(RChat.user, RChat.chatster, RChat.chatMessage)).jsonString().utf8)]
        let tokens: [[UInt8]] = [
            "{", "}", "[", "]", ",", ":", "\"", "null", "true", "-1e999", "\"bsonType\"",
            "\"object\"", "\"array\"", "\"items\"", "\"title\"", "\"properties\"", "\"required\"", "\\u", "\"_id\"",
            "\"relationships\"", "\"default\"", "9223372036854775808",
        ].map { Array($0.utf8) }
        let count = FuzzRandom.count(default: 5_000)
        var accepted = 0
        for _ in 0..<count {
            var input = corpus[Int(random.next() % UInt64(corpus.count))]
            for _ in 0...(random.next() % 4) {
                let at = Int(random.next() % UInt64(input.count + 1))
                switch random.next() % 4 {
                case 0 where !input.isEmpty: input.remove(at: min(at, input.count - 1))
                case 1: input.insert(contentsOf: tokens[Int(random.next() % UInt64(tokens.count))], at: at)
                case 2 where !input.isEmpty: input[min(at, input.count - 1)] = UInt8(truncatingIfNeeded: random.next())
                default: input.removeSubrange(at..<min(input.count, at + Int(random.next() % 64)))
                }
            }
            do {
                let schema = try Schema(json: input)
                accepted += 1
                // Whatever parses writes back to an equal schema.
                #expect(try Schema(json: schema.jsonString()) == schema)
            } catch {
                #expect(!error.message.isEmpty)
            }
        }
        print("fuzzSchemaJSON: \(count) inputs, \(accepted) accepted")
    }
}
