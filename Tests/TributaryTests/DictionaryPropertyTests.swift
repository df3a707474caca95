import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

private struct Profile: Model {
    var _id: String
    var settings: [String: Int] = [:]
    var labels: [String: String?] = [:]
    var friends: [String: Link<Friend>?] = [:]
    var extras: [String: Value] = [:]
}

private struct Friend: Model {
    var _id: String
}

/// Dictionaries (Realm's `Map`): values by string key, each key merged as a field.
@Suite("Dictionaries: values by key, each key merged as a field")
struct DictionaryPropertyTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Profile",
                properties: [.scalar("_id", .string), Property("settings", .scalar(.int), dictionary: true)])
        ])

    static func settings(_ replica: Replica, _ id: String = "p") throws -> [String: Value] {
        try replica.read { try $0.object("Profile", primaryKey: .string(id)) }?["settings"].dictionaryValue ?? [:]
    }

    @Test("A dictionary is written whole, updated key by key, and read back after a reopen")
    func writesAndReads() throws {
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        do {
            let replica = try Replica.open(directory: directory.path, schema: Self.schema, configuration: configuration)
            defer { replica.close() }
            try replica.write { try $0.create("Profile", ["_id": "p", "settings": .dictionary(["a": 1, "b": 2])]) }
            #expect(try Self.settings(replica) == ["a": 1, "b": 2])
            try replica.write {
                try $0.update("Profile", primaryKey: .string("p"), ["settings": .dictionary(["b": 3, "c": 4])])
            }
            #expect(try Self.settings(replica) == ["b": 3, "c": 4])
            // The update wrote one erase and two sets, not the whole dictionary.
            let last = try #require(try replica.changesets(missingFrom: VersionVector()).last)
            #expect(last.instructions.count == 3)
            #expect(replica.schema[type: "Profile"]?[property: "settings"]?.typeDescription == "dictionary<int>")
            #expect(throws: TributaryError.self) {
                try replica.write {
                    try $0.update("Profile", primaryKey: .string("p"), ["settings": .dictionary(["a.b": 1])])
                }
            }
            #expect(throws: TributaryError.self) {
                try replica.write {
                    try $0.update("Profile", primaryKey: .string("p"), ["settings": .dictionary(["x": "no"])])
                }
            }
        }
        var readOnly = Replica.Configuration()
        readOnly.readOnly = true
        let reopened = try Replica.open(directory: directory.path, configuration: readOnly)
        defer { reopened.close() }
        #expect(try Self.settings(reopened) == ["b": 3, "c": 4])
        #expect(try reopened.verify().passed)
    }

    @Test("Concurrent writes: different keys all stay; one key, the later write wins, set or erase")
    func concurrentWrites() throws {
        let cluster = try Cluster(2, schema: Self.schema)
        let (a, b) = (cluster.replicas[0], cluster.replicas[1])
        try a.write { try $0.create("Profile", ["_id": "p", "settings": .dictionary(["x": 1, "y": 1])]) }
        try cluster.syncAll()
        // a sets k1 and erases y; b, later, sets k2 and y.
        try a.write {
            try $0.update("Profile", primaryKey: .string("p"), ["settings": .dictionary(["x": 1, "k1": 1])])
        }
        cluster.advanceClocks(byMilliseconds: 5)
        try b.write {
            try $0.update("Profile", primaryKey: .string("p"), ["settings": .dictionary(["x": 1, "y": 2, "k2": 2])])
        }
        try cluster.syncAll()
        #expect(try cluster.converged())
        #expect(try Self.settings(a) == ["x": 1, "y": 2, "k1": 1, "k2": 2])
        // b erases x while a, later, sets it: a's set wins.
        try b.write {
            try $0.update("Profile", primaryKey: .string("p"), ["settings": .dictionary(["y": 2, "k1": 1, "k2": 2])])
        }
        cluster.advanceClocks(byMilliseconds: 5)
        try a.write {
            try $0.update(
                "Profile", primaryKey: .string("p"), ["settings": .dictionary(["x": 9, "y": 2, "k1": 1, "k2": 2])])
        }
        try cluster.syncAll()
        #expect(try cluster.converged())
        #expect(try Self.settings(b)["x"] == 9)
    }

    @Test("Models: Swift dictionaries of values, optionals, links and mixed values")
    func models() throws {
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(
            directory: directory.path, models: [Profile.self, Friend.self], schemaVersion: 1,
            configuration: configuration)
        let type = try #require(replica.schema[type: "Profile"])
        // The schema JSON keeps a dictionary of links (a relationship whose property is an object of keys).
        let json = try Schema(json: replica.schema.jsonString())
        #expect(json[type: "Profile"]?[property: "friends"]?.typeDescription == "dictionary<link<Friend>?>")
        #expect(type[property: "settings"]?.typeDescription == "dictionary<int>")
        #expect(type[property: "labels"]?.typeDescription == "dictionary<string?>")
        #expect(type[property: "friends"]?.typeDescription == "dictionary<link<Friend>?>")
        #expect(type[property: "extras"]?.typeDescription == "dictionary<mixed?>")
        try replica.write { txn in
            try txn.create(Friend(_id: "ada"))
            try txn.create(Friend(_id: "bob"))
            try txn.create(
                Profile(
                    _id: "p", settings: ["volume": 7], labels: ["home": "Home", "none": nil],
                    friends: ["best": Link("ada"), "old": Link("bob")], extras: ["n": .int(1), "s": "x"]))
        }
        var profile = try #require(try replica.object(Profile.self, primaryKey: "p"))
        #expect(profile.settings == ["volume": 7])
        #expect(profile.labels == ["home": "Home", "none": String?.none])
        #expect(profile.extras == ["n": .int(1), "s": "x"])
        profile.settings["brightness"] = 3
        profile.settings["volume"] = nil
        try replica.write { try $0.update(profile) }
        #expect(try replica.object(Profile.self, primaryKey: "p")?.settings == ["brightness": 3])
        // A link whose target is gone reads as null under its key (rule 7): the key stays.
        try replica.write { _ = try $0.delete(Friend.self, primaryKey: "bob") }
        let friends = try replica.read { try $0.object("Profile", primaryKey: .string("p")) }?["friends"]
        #expect(friends == .dictionary(["best": .link(.string("ada")), "old": .null]))
        #expect(
            try replica.object(Profile.self, primaryKey: "p")?.friends == [
                "best": Link("ada"), "old": Link<Friend>?.none,
            ])
        // Values that could not read nil are refused, saying what to write.
        struct Strict: Model {
            var _id: String
            var friends: [String: Link<Friend>] = [:]
        }
        #expect {
            try Schema(models: [Strict.self, Friend.self])
        } throws: { error in
            "\(error)".contains("[String: Link<Friend>?]")
        }
    }

    @Test(
        "Queries: a key's value, every value, the keys, and how many, as in Realm",
        arguments: [
            ("settings['volume'] > 5", ["p1"]),
            ("settings['volume'] == nil", ["p3"]),
            ("settings['missing'] == nil", ["p1", "p2", "p3"]),
            ("settings == 2", ["p2"]),
            ("ANY settings.@values > 2", ["p1"]),
            ("ALL settings.@values > 2", ["p1", "p3"]),
            ("NONE settings.@values == 7", ["p2", "p3"]),
            ("settings[*] == 3", ["p1"]),
            ("settings.@keys == 'brightness'", ["p1"]),
            ("'volume' IN settings.@keys", ["p1", "p2"]),
            ("settings.@keys BEGINSWITH 'bri'", ["p1"]),
            ("settings.@count == 1", ["p2"]),
            ("settings.@size == 0", ["p3"]),
            ("settings[SIZE] == 2", ["p1"]),
            ("settings.@values.@count == 2", ["p1"]),
        ] as [(String, [String])])
    func queries(query: String, expected: [String]) throws {
        let cluster = try Cluster(1, schema: Self.schema)
        let replica = cluster.replicas[0]
        try replica.write { txn in
            try txn.create("Profile", ["_id": "p1", "settings": .dictionary(["volume": 7, "brightness": 3])])
            try txn.create("Profile", ["_id": "p2", "settings": .dictionary(["volume": 2])])
            try txn.create("Profile", ["_id": "p3"])
        }
        let found = try replica.objects("Profile", where: query + " SORT(_id ASC)").compactMap(
            \.primaryKey.value.stringValue)
        #expect(found == expected, "\(query)")
    }

    @Test("One key set or removed by name: concurrent writes of other keys stay; bad keys and values are refused")
    func keyByKey() throws {
        let schema = Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: "Profile",
                    properties: [
                        .scalar("_id", .string), .scalar("name", .string, optional: true),
                        Property("settings", .scalar(.int), dictionary: true),
                    ])
            ])
        let cluster = try Cluster(2, schema: schema)
        try cluster[0].write { try $0.create("Profile", ["_id": "p", "settings": .dictionary(["a": 1, "b": 2])]) }
        try cluster.syncAll()
        try cluster[0].write {
            try $0.setValue(10, forKey: "a", in: ["settings"], of: "Profile", primaryKey: .string("p"))
        }
        try cluster[1].write { txn in
            try txn.setValue(3, forKey: "c", in: ["settings"], of: "Profile", primaryKey: .string("p"))
            try txn.removeValue(forKey: "b", in: ["settings"], of: "Profile", primaryKey: .string("p"))
            // A key this replica does not hold: nothing is written.
            try txn.removeValue(forKey: "zz", in: ["settings"], of: "Profile", primaryKey: .string("p"))
        }
        let written = try cluster[1].changesets(missingFrom: VersionVector()).last?.instructions.count
        #expect(written == 2)
        try cluster.syncAll()
        #expect(try cluster.converged())
        #expect(try Self.settings(cluster[0]) == ["a": 10, "c": 3])
        for (attempt, fragment) in [
            (
                { (txn: Transaction) in
                    try txn.setValue("x", forKey: "a", in: ["settings"], of: "Profile", primaryKey: .string("p"))
                }, "expected int"
            ),
            (
                { (txn: Transaction) in
                    try txn.setValue(1, forKey: "a.b", in: ["settings"], of: "Profile", primaryKey: .string("p"))
                }, "'.'"
            ),
            (
                { (txn: Transaction) in
                    try txn.setValue(1, forKey: "a", in: ["name"], of: "Profile", primaryKey: .string("p"))
                }, "not a dictionary"
            ),
        ] as [((Transaction) throws -> Void, String)] {
            let error = #expect(throws: TributaryError.self) { try cluster[0].write { try attempt($0) } }
            #expect(error?.description.contains(fragment) == true, "\(String(describing: error))")
        }
    }

    @Test("Dictionary subscripts and operators that do not apply are refused, naming the fault")
    func queryRefusals() throws {
        let cluster = try Cluster(1, schema: Self.schema)
        for (query, fragment) in [
            ("settings[FIRST] == 1", "is a dictionary"), ("_id['x'] == 1", "not a list"),
            ("_id.@keys == 'x'", "needs a dictionary"), ("settings.@keys.@min == 'x'", "ends the key path"),
            ("settings['a'][0] == 1", "takes one subscript"),
        ] {
            #expect(throws: TributaryError.self, "\(query)") {
                try cluster.replicas[0].objects("Profile", where: query)
            }
            do {
                _ = try cluster.replicas[0].objects("Profile", where: query)
            } catch {
                #expect("\(error)".contains(fragment), "\(query): \(error)")
            }
        }
    }

    @Test("Schemas: the JSON's additionalProperties and the binary form keep a dictionary")
    func schemas() throws {
        let json = Self.schema.jsonString()
        #expect(json.contains("additionalProperties"))
        #expect(try Schema(json: json)[type: "Profile"]?[property: "settings"]?.isDictionary == true)
        var writer = BinaryWriter()
        writer.schema(Self.schema)
        var reader = BinaryReader(writer.bytes, subject: "schema")
        #expect(try reader.schema()[type: "Profile"]?[property: "settings"]?.typeDescription == "dictionary<int>")
    }
}
