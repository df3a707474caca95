import Foundation
import Synchronization
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// An app's models, before and after a release that added properties; both releases run at once while users update.
enum ProfileV1 {
    struct Badge: EmbeddedModel, Equatable {
        static var typeName: String { "Badge" }
        var label: String
    }
    struct Profile: Model {
        static var typeName: String { "Profile" }
        var _id: String
        var name: String
        var badge: Badge?
    }
}

enum ProfileV2 {
    struct Badge: EmbeddedModel, Equatable {
        static var typeName: String { "Badge" }
        var label: String
        var color: String?
    }
    struct Profile: Model {
        static var typeName: String { "Profile" }
        var _id: String
        var name: String
        var badge: Badge?
        var nickname: String?
        var tags: [String] = []
    }
}

@Suite("Apps of two releases syncing")
struct MixedVersionModelTests {
    static func open(_ directory: TemporaryDirectory, version: Int) throws -> Replica {
        try open(directory, version == 1 ? ProfileV1.Profile.self : ProfileV2.Profile.self, version: version)
    }

    /// A replica of the release `version` of an app whose one model is `model`, opened without durability.
    static func open(
        _ directory: TemporaryDirectory, _ model: any Model.Type, version: Int, migration: Migration? = nil
    ) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(
            directory: directory.path, models: [model], schemaVersion: UInt64(version), configuration: configuration,
            migration: migration)
    }

    static func sync(_ from: Replica, _ to: Replica) throws {
        try to.integrate(try from.changesets(missingFrom: to.versionVector))
    }

    @Test("An app of the earlier release writes only the properties it knows; the later release's stay")
    func earlierReleaseKeepsLaterProperties() throws {
        let (oldDirectory, newDirectory) = (TemporaryDirectory("v1"), TemporaryDirectory("v2"))
        let old = try Self.open(oldDirectory, version: 1)
        let new = try Self.open(newDirectory, version: 2)
        try new.write { txn in
            try txn.create(
                ProfileV2.Profile(
                    _id: "p", name: "Ada", badge: ProfileV2.Badge(label: "gold", color: "yellow"), nickname: "ada",
                    tags: ["x", "y"]))
        }
        try Self.sync(new, old)
        #expect(
            try old.schemaStatus().undeclared == [
                PropertyName(type: "Badge", property: "color"), PropertyName(type: "Profile", property: "nickname"),
                PropertyName(type: "Profile", property: "tags"),
            ])
        // The earlier release reads its own properties, and edits the profile through its model.
        var profile = try #require(try old.read { try $0.object(ProfileV1.Profile.self, primaryKey: "p") })
        #expect(profile.name == "Ada")
        profile.name = "Ada L."
        profile.badge?.label = "platinum"
        try old.write { try $0.update(profile) }
        try old.write { try $0.upsert(profile) }
        try Self.sync(old, new)
        let merged = try #require(try new.read { try $0.object(ProfileV2.Profile.self, primaryKey: "p") })
        #expect(merged.name == "Ada L.")
        #expect(merged.badge?.label == "platinum")
        #expect(merged.nickname == "ada")
        #expect(merged.tags == ["x", "y"])
        #expect(merged.badge?.color == "yellow")
        // A profile the earlier release creates has the later release's properties unset, as their defaults say.
        try old.write { try $0.create(ProfileV1.Profile(_id: "q", name: "Grace", badge: nil)) }
        try Self.sync(old, new)
        let created = try #require(try new.read { try $0.object(ProfileV2.Profile.self, primaryKey: "q") })
        #expect(created.nickname == nil && created.tags.isEmpty)
        // What the earlier release clears, it clears: its own optional embedded object.
        profile.badge = nil
        try old.write { try $0.update(profile) }
        try Self.sync(old, new)
        let cleared = try #require(try new.read { try $0.object(ProfileV2.Profile.self, primaryKey: "p") })
        #expect(cleared.badge == nil && cleared.nickname == "ada" && cleared.tags == ["x", "y"])
        #expect(try old.verify().passed)
        #expect(try new.verify().passed)
    }

    @Test("Opened without a schema, an earlier release's model still writes only what it declares")
    func withoutSchemaAtOpen() throws {
        let (oldDirectory, newDirectory) = (TemporaryDirectory("v1"), TemporaryDirectory("v2"))
        let new = try Self.open(newDirectory, version: 2)
        try new.write { txn in
            try txn.create(ProfileV2.Profile(_id: "p", name: "Ada", badge: nil, nickname: "ada", tags: ["x"]))
        }
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let old = try Replica.open(directory: oldDirectory.path, configuration: configuration)
        try Self.sync(new, old)
        var profile = try #require(try old.read { try $0.object(ProfileV1.Profile.self, primaryKey: "p") })
        profile.name = "Ada L."
        try old.write { try $0.update(profile) }
        try Self.sync(old, new)
        let merged = try #require(try new.read { try $0.object(ProfileV2.Profile.self, primaryKey: "p") })
        #expect(merged.name == "Ada L." && merged.nickname == "ada" && merged.tags == ["x"])
    }
}

/// A later release that removed a property the earlier one still has.
enum ProfileV3 {
    struct Profile: Model {
        static var typeName: String { "Profile" }
        var _id: String
        var name: String
    }
}

@Suite("An earlier release after a later one removed a property")
struct MixedVersionRemovalTests {
    @Test("The earlier release's writes go on, without the property the later release removed")
    func earlierReleaseWritesAfterRemoval() throws {
        let (oldDirectory, newDirectory) = (TemporaryDirectory("v1"), TemporaryDirectory("v3"))
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let old = try MixedVersionModelTests.open(oldDirectory, version: 1)
        // The later release starts from the earlier one, then drops `badge` in its migration to version 2.
        do {
            let first = try MixedVersionModelTests.open(newDirectory, version: 1)
            try first.write {
                try $0.create(ProfileV1.Profile(_id: "p", name: "Ada", badge: ProfileV1.Badge(label: "gold")))
            }
            first.close()
        }
        let new = try Replica.open(
            directory: newDirectory.path, models: [ProfileV3.Profile.self], schemaVersion: 2,
            configuration: configuration)
        try MixedVersionModelTests.sync(new, old)
        #expect(try old.read { try $0.object(ProfileV1.Profile.self, primaryKey: "p") }?.badge == nil)
        try old.write {
            try $0.upsert(ProfileV1.Profile(_id: "p", name: "Ada L.", badge: ProfileV1.Badge(label: "silver")))
        }
        try old.write {
            try $0.create(ProfileV1.Profile(_id: "q", name: "Grace", badge: ProfileV1.Badge(label: "gold")))
        }
        try MixedVersionModelTests.sync(old, new)
        #expect(try new.read { try $0.object(ProfileV3.Profile.self, primaryKey: "p") }?.name == "Ada L.")
        #expect(try new.read { try $0.object(ProfileV3.Profile.self, primaryKey: "q") }?.name == "Grace")
        #expect(try old.verify().passed)
        #expect(try new.verify().passed)

        #expect(try old.schemaStatus().removed == [PropertyName(type: "Profile", property: "badge")])
        // The earlier release restarts: its replica opens, and its declaration does not bring `badge` back.
        old.close()
        let reopened = try MixedVersionModelTests.open(oldDirectory, version: 1)
        #expect(reopened.schema[type: "Profile"]?[property: "badge"] == nil)
        try reopened.write { try $0.create(ProfileV1.Profile(_id: "r", name: "Edsger", badge: nil)) }
        try MixedVersionModelTests.sync(reopened, new)
        #expect(new.schema[type: "Profile"]?[property: "badge"] == nil)
        #expect(try new.read { try $0.object(ProfileV3.Profile.self, primaryKey: "r") }?.name == "Edsger")
        reopened.close()
    }
}

/// A release that renamed a property the earlier one still declares.
enum PersonV1 {
    struct Person: Model {
        static var typeName: String { "Person" }
        var _id: String
        var name: String
        var age: Int = 0
    }
}

enum PersonV2 {
    struct Person: Model {
        static var typeName: String { "Person" }
        var _id: String
        var fullName: String
        var age: Int = 0
    }
}

@Suite("An earlier release after a later one renamed a property")
struct MixedVersionRenameTests {
    static func open(_ directory: TemporaryDirectory, version: Int) throws -> Replica {
        version == 1
            ? try MixedVersionModelTests.open(directory, PersonV1.Person.self, version: 1)
            : try MixedVersionModelTests.open(
                directory, PersonV2.Person.self, version: 2,
                migration: Migration { $0.renameProperty(onType: "Person", from: "name", to: "fullName") })
    }

    @Test("The earlier release reads and writes the renamed property under its new name, in models and live results")
    func earlierReleaseFollowsRename() async throws {
        let (oldDirectory, newDirectory) = (TemporaryDirectory("v1"), TemporaryDirectory("v2"))
        var old = try Self.open(oldDirectory, version: 1)
        do {
            let first = try Self.open(newDirectory, version: 1)
            try await first.write { try $0.create(PersonV1.Person(_id: "p", name: "Ada", age: 36)) }
            try MixedVersionModelTests.sync(first, old)
            first.close()
        }
        let new = try Self.open(newDirectory, version: 2)
        try MixedVersionModelTests.sync(new, old)
        #expect(old.schema[type: "Person"]?[property: "name"] == nil)

        // Release 1 reads `name` from `fullName`, and its writes land there.
        var ada = try #require(try await old.read { try $0.object(PersonV1.Person.self, primaryKey: "p") })
        #expect(ada.name == "Ada")
        ada.name = "Ada L."
        ada.age = 37
        try await old.write { [ada] in try $0.update(ada) }
        try await old.write { try $0.create(PersonV1.Person(_id: "q", name: "Grace", age: 45)) }
        #expect(try await old.read { try $0.objects(PersonV1.Person.self) }.map(\.name) == ["Ada L.", "Grace"])
        try MixedVersionModelTests.sync(old, new)
        let people = try await new.read { try $0.objects(PersonV2.Person.self) }
        #expect(people.map(\.fullName) == ["Ada L.", "Grace"])
        #expect(people.map(\.age) == [37, 45])

        // A write of release 2 reaches release 1's model, through live results too.
        var iterator = old.observe(PersonV1.Person.self).makeAsyncIterator()
        guard case .initial(let initial)? = try await iterator.next() else {
            Issue.record("no initial results")
            return
        }
        #expect(initial.map { $0.name } == ["Ada L.", "Grace"])
        try await new.write { try $0.update(PersonV2.Person(_id: "q", fullName: "Grace H.", age: 45)) }
        try MixedVersionModelTests.sync(new, old)
        #expect(try await old.read { try $0.object(PersonV1.Person.self, primaryKey: "q") }?.name == "Grace H.")

        let status = try old.schemaStatus()
        #expect(status.renamed == [PropertyName(type: "Person", property: "name"): "fullName"])
        #expect(status.removed.isEmpty && status.undeclared.isEmpty && status.reshaped.isEmpty)
        #expect(status.laterReleaseSynced)
        #expect(status.declared == DeclaredSchemaVersions(current: 1, first: 1))
        #expect(status.highestDeclared == 2 && status.migrated == 2)

        // Release 1 restarts: the same.
        old.close()
        old = try Self.open(oldDirectory, version: 1)
        #expect(try await old.read { try $0.object(PersonV1.Person.self, primaryKey: "p") }?.name == "Ada L.")
        #expect(try old.verify().passed)
        #expect(try new.verify().passed)
        old.close()
        new.close()
    }
}

@Suite("Migration steps while releases sync")
struct MixedVersionMigrationStepTests {
    static func schema(_ version: UInt64, ageType: ScalarType) -> Schema {
        Schema(
            version: version,
            types: [ObjectSchema(name: "Person", properties: [.scalar("_id", .string), .scalar("age", ageType)])])
    }

    /// Release 3's migration: step 2 turns `age` into text.
    static let steps = Migration(steps: [
        2: { migration in
            try migration.enumerateObjects("Person") { old, new in
                if case .int(let age) = old["age"] { new?["age"] = .string(String(age)) }
            }
        }
    ])

    static func open(_ directory: TemporaryDirectory, _ schema: Schema, migration: Migration? = nil) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(
            directory: directory.path, schema: schema, configuration: configuration, migration: migration)
    }

    @Test("A fresh install of a later release does not stop an earlier device's data from being migrated")
    func freshInstallDoesNotSkipSteps() throws {
        let (oldDirectory, freshDirectory) = (TemporaryDirectory("v1"), TemporaryDirectory("v3"))
        var old = try Self.open(oldDirectory, Self.schema(1, ageType: .int))
        try old.write { _ = try $0.create("Person", ["_id": "p", "age": 36]) }
        let fresh = try Self.open(freshDirectory, Self.schema(3, ageType: .string))
        try MixedVersionModelTests.sync(fresh, old)
        try MixedVersionModelTests.sync(old, fresh)
        // The user updates to release 3: no device ran step 2 on this data yet, so this one does.
        old.close()
        old = try Self.open(oldDirectory, Self.schema(3, ageType: .string), migration: Self.steps)
        #expect(try old.object("Person", primaryKey: .string("p"))?["age"] == "36")
        #expect(try old.declaredVersions() == DeclaredSchemaVersions(current: 3, first: 1))
        try MixedVersionModelTests.sync(old, fresh)
        #expect(try fresh.object("Person", primaryKey: .string("p"))?["age"] == "36")
        #expect(try old.verify().passed)
        old.close()
        fresh.close()
    }

    @Test("A device that updates after another migrated the same data runs no step again")
    func stepsRunOnce() throws {
        let (first, second) = (TemporaryDirectory("first"), TemporaryDirectory("second"))
        var a = try Self.open(first, Self.schema(1, ageType: .int))
        try a.write { _ = try $0.create("Person", ["_id": "p", "age": 36]) }
        var b = try Self.open(second, Self.schema(1, ageType: .int))
        try MixedVersionModelTests.sync(a, b)
        b.close()
        b = try Self.open(second, Self.schema(3, ageType: .string), migration: Self.steps)
        try b.write { try $0.update("Person", primaryKey: .string("p"), ["age": "thirty-six"]) }
        try MixedVersionModelTests.sync(b, a)
        a.close()
        let ran = Mutex(0)
        a = try Self.open(
            first, Self.schema(3, ageType: .string),
            migration: Migration(steps: [2: { _ in ran.withLock { $0 += 1 } }]))
        #expect(ran.withLock { $0 } == 0)
        #expect(try a.object("Person", primaryKey: .string("p"))?["age"] == "thirty-six")
        a.close()
        b.close()
    }
}

extension MixedVersionMigrationStepTests {
    @Test("Two devices that update offline run the same migration: their changes are copies, and they converge")
    func offlineUpgradesAreCopies() throws {
        let (first, second) = (TemporaryDirectory("first"), TemporaryDirectory("second"))
        var a = try Self.open(first, Self.schema(1, ageType: .int))
        try a.write {
            _ = try $0.create("Person", ["_id": "p", "age": 36])
            _ = try $0.create("Person", ["_id": "q", "age": 45])
        }
        var b = try Self.open(second, Self.schema(1, ageType: .int))
        try MixedVersionModelTests.sync(a, b)
        a.close()
        b.close()
        a = try Self.open(first, Self.schema(3, ageType: .string), migration: Self.steps)
        b = try Self.open(second, Self.schema(3, ageType: .string), migration: Self.steps)
        // Later than both migrations' writes (the wait makes sure of it), so it wins over them.
        Thread.sleep(forTimeInterval: 0.01)
        try a.write { try $0.update("Person", primaryKey: .string("q"), ["age": "forty-five"]) }
        try MixedVersionModelTests.sync(a, b)
        try MixedVersionModelTests.sync(b, a)
        #expect(try a.viewDigest() == b.viewDigest())
        #expect(try a.object("Person", primaryKey: .string("p"))?["age"] == "36")
        #expect(try b.object("Person", primaryKey: .string("q"))?["age"] == "forty-five")
        #expect(a.schema.migratedVersion == 3)
        #expect(try a.verify().passed)
        #expect(try b.verify().passed)
        a.close()
        b.close()
    }
}

extension MixedVersionMigrationStepTests {
    static func profile(_ version: UInt64, _ properties: [String]) -> Schema {
        Schema(
            version: version,
            types: [
                ObjectSchema(
                    name: "Profile",
                    properties: [.scalar("_id", .string)] + properties.map { .scalar($0, .string, optional: true) })
            ])
    }

    @Test("A device that updates late to an intermediate release erases nothing a later release declared")
    func lateIntermediateMigrationKeepsLaterDecisions() throws {
        // Release 2 removed `nickname`; release 3 has it again (and `bio`, which release 2 keeps too).
        let v1 = Self.profile(1, ["bio", "nickname"])
        let v2 = Self.profile(2, ["bio"])
        let v3 = Self.profile(3, ["bio", "nickname"])
        let (late, later) = (TemporaryDirectory("late"), TemporaryDirectory("later"))
        var old = try Self.open(late, v1)
        try old.write { _ = try $0.create("Profile", ["_id": "p", "bio": "b", "nickname": "n"]) }
        // A fresh install of release 3 (no migration ran anywhere yet) writes a nickname.
        let newer = try Self.open(later, v3)
        try MixedVersionModelTests.sync(old, newer)
        try newer.write { try $0.update("Profile", primaryKey: .string("p"), ["nickname": "x"]) }
        try MixedVersionModelTests.sync(newer, old)
        // The late device updates to release 2 only.
        old.close()
        old = try Self.open(late, v2)
        try MixedVersionModelTests.sync(old, newer)
        for replica in [old, newer] {
            #expect(try replica.object("Profile", primaryKey: .string("p"))?["nickname"] == "x")
            #expect(try replica.object("Profile", primaryKey: .string("p"))?["bio"] == "b")
            #expect(try replica.verify().passed)
        }
        old.close()
        newer.close()
    }
}

/// Two releases that define one property with different types.
enum PlayerV1 {
    struct Player: Model {
        static var typeName: String { "Player" }
        var _id: String
        var name: String
        var score: Int
    }
}

enum PlayerV2 {
    struct Player: Model {
        static var typeName: String { "Player" }
        var _id: String
        var name: String
        var score: String?
    }
}

@Suite("An earlier release after a later one defined a property with another type")
struct MixedVersionShapeTests {
    static func open(_ directory: TemporaryDirectory, version: Int) throws -> Replica {
        try MixedVersionModelTests.open(
            directory, version == 1 ? PlayerV1.Player.self : PlayerV2.Player.self, version: version)
    }

    @Test("The earlier release reads and writes the property under its own definition, and erases nothing")
    func earlierReleaseKeepsItsShape() throws {
        let (oldDirectory, newDirectory) = (TemporaryDirectory("v1"), TemporaryDirectory("v2"))
        let old = try Self.open(oldDirectory, version: 1)
        try old.write { try $0.create(PlayerV1.Player(_id: "p", name: "Ada", score: 10)) }
        // A fresh install of release 2: its definition of `score` is the later one (its clock is past release 1's
        // definition, which the wait makes sure of), and shows on every replica.
        Thread.sleep(forTimeInterval: 0.01)
        let new = try Self.open(newDirectory, version: 2)
        try MixedVersionModelTests.sync(old, new)
        try MixedVersionModelTests.sync(new, old)
        #expect(old.schema[type: "Player"]?[property: "score"]?.kind == .scalar(.string))

        // Release 1 reads its own int, kept aside under its definition.
        var ada = try #require(try old.read { try $0.object(PlayerV1.Player.self, primaryKey: "p") })
        #expect(ada.score == 10)
        // It edits the player: the name lands; its score is kept aside under its int definition, where it reads
        // it back, and release 2's string stays.
        try new.write { try $0.update(PlayerV2.Player(_id: "p", name: "Ada", score: "ten")) }
        try MixedVersionModelTests.sync(new, old)
        ada.name = "Ada L."
        ada.score = 11
        try old.write { [ada] in try $0.update(ada) }
        try old.write { try $0.create(PlayerV1.Player(_id: "q", name: "Grace", score: 3)) }
        try MixedVersionModelTests.sync(old, new)
        let players = try new.read { try $0.objects(PlayerV2.Player.self) }
        #expect(players.map(\.name) == ["Ada L.", "Grace"])
        #expect(players.map(\.score) == ["ten", nil])
        #expect(try old.read { try $0.objects(PlayerV1.Player.self) }.map(\.score) == [11, 3])
        #expect(
            try new.read { try $0.valuesAside("Player", primaryKey: .string("p")) }.map(\.value) == [.int(11)])
        let status = try old.schemaStatus()
        #expect(status.reshaped == [PropertyName(type: "Player", property: "score")])
        #expect(status.laterReleaseSynced && status.migrated == 0)
        // A later release that defines `score` as an int again: the ints show, on every replica.
        try new.write { try $0.emit(.redefineProperty(type: "Player", .scalar("score", .int))) }
        try MixedVersionModelTests.sync(new, old)
        for replica in [old, new] {
            #expect(try replica.object("Player", primaryKey: .string("p"))?["score"] == 11)
            #expect(try replica.object("Player", primaryKey: .string("q"))?["score"] == 3)
        }
        #expect(try old.verify().passed)
        #expect(try new.verify().passed)
        old.close()
        new.close()
    }
}
