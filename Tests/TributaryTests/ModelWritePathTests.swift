import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// A model whose encoding nests a container by hand: written by the general path.
struct Waypoint: Model, Equatable {
    var _id: Int
    var label: String
    var weight: Int = 0

    enum CodingKeys: String, CodingKey { case _id, label, weight }
    enum Extra: String, CodingKey { case note }

    init(_id: Int, label: String, weight: Int = 0) {
        self._id = _id
        self.label = label
        self.weight = weight
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        _id = try container.decode(Int.self, forKey: ._id)
        label = try container.decode(String.self, forKey: .label)
        weight = try container.decode(Int.self, forKey: .weight)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(_id, forKey: ._id)
        try container.encode(label, forKey: .label)
        // A second container of the same object, as some hand-written encodings do.
        var again = encoder.container(keyedBy: CodingKeys.self)
        try again.encode(weight, forKey: .weight)
    }
}

/// Another release's `Waypoint` with a property the schema lacks.
struct WaypointWithExtra: Model {
    static let typeName = "Waypoint"
    var _id: Int
    var label: String
    var weight: Int
    var altitude: Double
}

/// A `Waypoint` whose weight is unsigned: a value over `Int64.max` fits no integer property.
struct UnsignedWaypoint: Model {
    static let typeName = "Waypoint"
    var _id: Int
    var label: String
    var weight: UInt64
}

/// A `Waypoint` that nests a container under one of its keys, by hand.
struct NestingWaypoint: Model {
    static let typeName = "Waypoint"
    var _id: Int
    var label: String

    enum CodingKeys: String, CodingKey { case _id, label, weight }
    enum Inner: String, CodingKey { case value }

    init(_id: Int, label: String) {
        self._id = _id
        self.label = label
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        _id = try container.decode(Int.self, forKey: ._id)
        label = try container.decode(String.self, forKey: .label)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(_id, forKey: ._id)
        try container.encode(label, forKey: .label)
        var inner = container.nestedContainer(keyedBy: Inner.self, forKey: .weight)
        try inner.encode(3, forKey: .value)
    }
}

/// A model whose optional collections and values are left out of its encoding when nil.
struct Jotting: Model, Equatable {
    var _id: Int
    var tags: [String]?
    var scores: [String: Int]?
    var when: Date?
    var place: Place?
    var size: Float = 1.5
    var total: Double = 3
    var amount: Decimal = 2
}

@Suite("Model writes: the positional path writes what the general path writes")
struct ModelWritePathTests {
    func open(_ directory: TemporaryDirectory, _ name: String = "a") throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(
            directory: directory.path + "/" + name,
            models: [Chatster.self, ChatMessage.self, Waypoint.self, Jotting.self],
            schemaVersion: 1, configuration: configuration)
    }

    static let chatsters = [
        Chatster(_id: "ada", displayName: "Ada", avatar: Data([1, 2, 3]), presence: .online, karma: 7),
        Chatster(_id: "bob", displayName: "Bob"),
    ]

    static let messages = [
        ChatMessage(
            _id: ObjectID(hex: "65a1b2c3d4e5f60718293a4b")!, conversationID: "c1", text: "hello",
            timestamp: Date(timeIntervalSince1970: 1_000),
            author: Link("ada"), mentions: [Link("bob"), Link("ada")], reactions: [Reaction(emoji: "👍", count: 2)],
            place: Place(city: "Lyon", coordinates: [45.76, 4.83]), tags: ["a", "b"], score: 2.5),
        ChatMessage(
            _id: ObjectID(hex: "65a1b2c3d4e5f60718293a4c")!, conversationID: "c2", text: "",
            timestamp: Date(timeIntervalSince1970: 2_000),
            author: nil),
    ]

    static let jottings = [
        Jotting(_id: 1),
        Jotting(
            _id: 2, tags: ["x"], scores: ["a": 1], when: Date(timeIntervalSince1970: 5), place: Place(city: nil),
            size: 2.25, total: 4, amount: Decimal(string: "12.5")!),
    ]

    /// The instructions of every changeset in `replica`'s log, in order.
    func instructions(_ replica: Replica) throws -> [[Instruction]] {
        var result: [[Instruction]] = []
        try replica.forEachChangeset { _, changeset in
            result.append(changeset.instructions)
            return true
        }
        return result
    }

    @Test func positionalPathMakesTheSameChangesetsAsValuesByName() throws {
        let directory = try TemporaryDirectory()
        let fast = try open(directory, "fast")
        let general = try open(directory, "general")
        try fast.write { txn in
            // The path this test is about is the one taken.
            let plan = try #require(try txn.modelWritePlan(ChatMessage.self))
            #expect(plan.values(of: Self.messages[0]) != nil)
            try txn.create(contentsOf: Self.chatsters)
            try txn.create(contentsOf: Self.messages)
            try txn.create(contentsOf: Self.jottings)
        }
        try general.write { txn in
            for chatster in Self.chatsters { try txn.create("Chatster", try generalValues(chatster, txn)) }
            for message in Self.messages { try txn.create("ChatMessage", try generalValues(message, txn)) }
            for jotting in Self.jottings { try txn.create("Jotting", try generalValues(jotting, txn)) }
        }
        let written = try instructions(fast)
        #expect(written == (try instructions(general)))
        #expect(written.last?.count == 6)
        // A list or dictionary left out reads as an empty one, as it does through the general path.
        #expect(try fast.objects(Jotting.self) == [Jotting(_id: 1, tags: [], scores: [:]), Self.jottings[1]])
        #expect(
            try fast.objects(ChatMessage.self).sorted { $0.text < $1.text }
                == Self.messages.sorted { $0.text < $1.text })
        #expect(try fast.object(Chatster.self, primaryKey: "ada") == Self.chatsters[0])
    }

    /// A model's values as the general path gives them.
    func generalValues<M: Model>(_ model: M, _ txn: Transaction) throws -> [String: Value] {
        let type = try txn.schema.requireType(M.typeName)
        return try ModelCoding.values(of: model, type: type, schema: txn.schema, declared: txn.schema)
    }

    @Test func updatesAndUpsertsReadTheSameValues() throws {
        let directory = try TemporaryDirectory()
        let replica = try open(directory)
        try replica.write { txn in try txn.create(contentsOf: Self.chatsters) }
        var ada = Self.chatsters[0]
        ada.karma = 8
        ada.avatar = nil
        try replica.write { txn in
            try txn.update(ada)
            try txn.upsert(Chatster(_id: "cy", displayName: "Cy"))
        }
        #expect(try replica.object(Chatster.self, primaryKey: "ada") == ada)
        #expect(try replica.object(Chatster.self, primaryKey: "cy")?.displayName == "Cy")
        // Only what changed was written.
        let last = try #require(try instructions(replica).last)
        #expect(last.count == 3)
    }

    @Test func handWrittenEncodingsTakeTheGeneralPath() throws {
        let directory = try TemporaryDirectory()
        let replica = try open(directory)
        try replica.write { txn in
            try txn.create(Waypoint(_id: 1, label: "start", weight: 4))
            let error = try #require(throws: TributaryError.self) {
                try txn.create(NestingWaypoint(_id: 2, label: "x"))
            }
            #expect(error.code == .wrongType)
        }
        #expect(try replica.object(Waypoint.self, primaryKey: 1) == Waypoint(_id: 1, label: "start", weight: 4))
        #expect(try replica.read { try $0.count("Waypoint") } == 1)
    }

    @Test func faultsAreNamedAsTheGeneralPathNamesThem() throws {
        let directory = try TemporaryDirectory()
        let replica = try open(directory)
        try replica.write { txn in
            let extra = try #require(throws: TributaryError.self) {
                try txn.create(WaypointWithExtra(_id: 1, label: "a", weight: 1, altitude: 2))
            }
            #expect(extra.code == .unknownProperty)
            #expect("\(extra)".contains("altitude"))
            #expect(throws: (any Error).self) {
                try txn.create(UnsignedWaypoint(_id: 2, label: "b", weight: .max))
            }
            #expect(try txn.count("Waypoint") == 0)
            // A value that fits is written.
            try txn.create(UnsignedWaypoint(_id: 3, label: "c", weight: 9))
        }
        #expect(try replica.object(Waypoint.self, primaryKey: 3)?.weight == 9)
    }

    @Test func createContentsOfStopsAtTheFirstDuplicate() throws {
        let directory = try TemporaryDirectory()
        let replica = try open(directory)
        let waypoints = (0..<5).map { Waypoint(_id: $0, label: "w\($0)") }
        let keys = try replica.write { txn in try txn.create(contentsOf: waypoints) }
        #expect(keys == (0..<5).map { PrimaryKey.int(Int64($0)) })
        struct Stop: Error {}
        #expect(throws: Stop.self) {
            try replica.write { txn in
                let error = try #require(throws: TributaryError.self) {
                    try txn.create(contentsOf: [Waypoint(_id: 10, label: "new"), Waypoint(_id: 3, label: "again")])
                }
                #expect(error.code == .duplicatePrimaryKey)
                // The one before the duplicate is in the transaction, until the write gives up.
                #expect(try txn.count("Waypoint") == 6)
                throw Stop()
            }
        }
        #expect(try replica.read { try $0.count("Waypoint") } == 5)
        #expect(try replica.object(Waypoint.self, primaryKey: 3)?.label == "w3")
    }

    @Test func anotherReleasesPropertiesTakeTheGeneralPath() throws {
        let (oldDirectory, newDirectory) = (TemporaryDirectory("v1"), TemporaryDirectory("v2"))
        let old = try MixedVersionModelTests.open(oldDirectory, version: 1)
        let new = try MixedVersionModelTests.open(newDirectory, version: 2)
        try new.write { txn in
            #expect(try txn.modelWritePlan(ProfileV2.Profile.self) != nil)
            try txn.create(ProfileV2.Profile(_id: "p", name: "Ada", badge: nil, nickname: "ada", tags: ["x"]))
        }
        try MixedVersionModelTests.sync(new, old)
        // The earlier release declares less than the schema now holds: its writes leave the rest alone.
        try old.write { txn in
            #expect(try txn.modelWritePlan(ProfileV1.Profile.self) == nil)
            try txn.update(ProfileV1.Profile(_id: "p", name: "Ada L.", badge: ProfileV1.Badge(label: "gold")))
        }
        try MixedVersionModelTests.sync(old, new)
        let merged = try #require(try new.object(ProfileV2.Profile.self, primaryKey: "p"))
        #expect(merged.name == "Ada L." && merged.nickname == "ada" && merged.tags == ["x"])
        #expect(merged.badge?.label == "gold")
    }
}
