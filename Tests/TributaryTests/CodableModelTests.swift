import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

struct Chatster: Model, Equatable {
    var _id: String
    var displayName: String
    var avatar: Data?
    var presence: Presence = .offline
    var karma: Int = 0
    static let indexedProperties: Set<String> = ["displayName"]
    static let defaultValues: [String: Value] = ["karma": 0]
}

enum Presence: String, PersistableEnum {
    case online, offline, away
}

struct Reaction: EmbeddedModel {
    var emoji: String
    var count: Int
}

struct Place: EmbeddedModel {
    var city: String?
    var coordinates: [Double] = []
}

struct ChatMessage: Model, Equatable {
    var _id: ObjectID
    var conversationID: String
    var text: String
    var timestamp: Date
    var author: Link<Chatster>?
    var mentions: [Link<Chatster>] = []
    var reactions: [Reaction] = []
    var place: Place?
    var tags: [String] = []
    var score: Double = 0
}

@Suite("Codable models: derived schemas, round trips, upserts")
struct CodableModelTests {
    func open(_ directory: TemporaryDirectory) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(
            directory: directory.path, models: [Chatster.self, ChatMessage.self], schemaVersion: 1,
            configuration: configuration)
    }

    @Test func schemaIsDerivedFromCodable() throws {
        let schema = try Schema(models: [Chatster.self, ChatMessage.self], version: 3)
        #expect(schema.version == 3)
        #expect(schema.types.map(\.name) == ["ChatMessage", "Chatster", "Place", "Reaction"])
        let chatster = try #require(schema[type: "Chatster"])
        #expect(chatster.primaryKey == "_id")
        #expect(chatster[property: "displayName"] == .scalar("displayName", .string, indexed: true))
        #expect(chatster[property: "avatar"] == .scalar("avatar", .data, optional: true))
        #expect(chatster[property: "presence"] == .scalar("presence", .string))
        #expect(chatster[property: "karma"] == .scalar("karma", .int, default: 0))
        let message = try #require(schema[type: "ChatMessage"])
        #expect(message[property: "_id"] == .scalar("_id", .objectId))
        #expect(message[property: "author"] == Property("author", .link("Chatster")))
        #expect(message[property: "mentions"] == Property("mentions", .link("Chatster"), list: true))
        #expect(message[property: "reactions"] == Property("reactions", .embedded("Reaction"), list: true))
        #expect(message[property: "place"] == Property("place", .embedded("Place")))
        #expect(message[property: "timestamp"] == .scalar("timestamp", .date))
        let place = try #require(schema[type: "Place"])
        #expect(place.isEmbedded)
        #expect(place[property: "coordinates"] == Property("coordinates", .scalar(.double), list: true))
    }

    @Test func unsupportedShapesAreRefusedWithTheirPath() {
        struct Holder: Model {
            var _id: String
            var owner: Chatster
        }
        struct Dictionaryish: Model {
            var _id: String
            var attributes: [Int: String]
        }
        #expect {
            try Schema(models: [Holder.self])
        } throws: { error in
            (error as? TributaryError)?.message.contains("Link<Chatster>") == true
        }
        #expect {
            try Schema(models: [Dictionaryish.self])
        } throws: { error in
            (error as? TributaryError)?.message.contains("attributes") == true
        }
    }

    @Test func modelsRoundTrip() throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        let ada = Chatster(_id: "ada", displayName: "Ada", avatar: Data([1, 2, 3]), presence: .online)
        let id = ObjectID(hex: "65a1b2c3d4e5f60718293a4b")!
        let message = ChatMessage(
            _id: id, conversationID: "c1", text: "Hello", timestamp: Date(timeIntervalSince1970: 1_700_000_000.5),
            author: Link("ada"), mentions: [Link("ada")], reactions: [Reaction(emoji: "👍", count: 2)],
            place: Place(city: "Paris", coordinates: [48.85, 2.35]), tags: ["greeting"], score: 0.5)
        try replica.write { txn in
            try txn.create(ada)
            try txn.create(message)
        }
        #expect(try replica.object(Chatster.self, primaryKey: "ada") == ada)
        #expect(try replica.object(ChatMessage.self, primaryKey: id) == message)
        #expect(try replica.objects(ChatMessage.self) == [message])

        // An update writes only what changed.
        var edited = message
        edited.text = "Hello!"
        edited.reactions[0].count = 3
        try replica.write { try $0.update(edited) }
        let changeset = try replica.changeset(at: replica.lastLocalSequence)
        #expect(changeset.instructions.count == 2)
        #expect(try replica.object(ChatMessage.self, primaryKey: id) == edited)

        // Deleting the author nulls the link and removes it from lists (rule 7).
        try replica.write { _ = try $0.delete(Chatster.self, primaryKey: "ada") }
        let orphan = try #require(try replica.object(ChatMessage.self, primaryKey: id))
        #expect(orphan.author == nil)
        #expect(orphan.mentions.isEmpty)
        #expect(try replica.verify().passed)
    }

    @Test func upsertCreatesThenUpdates() throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        try replica.write { try $0.upsert(Chatster(_id: "a", displayName: "A")) }
        try replica.write { try $0.upsert(Chatster(_id: "a", displayName: "A2", karma: 3)) }
        #expect(try replica.object(Chatster.self, primaryKey: "a")?.displayName == "A2")
        #expect(try replica.object(Chatster.self, primaryKey: "a")?.karma == 3)
        #expect(try replica.read { try $0.count("Chatster") } == 1)
    }
}
