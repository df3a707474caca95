import Foundation
import Synchronization
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// The migrations of published Realm examples, end to end: a replica written with the earlier schema, reopened with the
/// later one, then verified against its log.
@Suite("Schema versions and migrations")
struct MigrationTests {
    func configuration() -> Replica.Configuration {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return configuration
    }

    func open(_ directory: TemporaryDirectory, _ schema: Schema, migration: Migration? = nil) throws -> Replica {
        try Replica.open(
            directory: directory.path, schema: schema, configuration: configuration(), migration: migration)
    }

    func scrum(version: UInt64, _ extra: [Property]) -> Schema {
        Schema(
            version: version,
            types: [
                ObjectSchema(
                    name: "DailyScrum",
                    properties: [
                        .scalar("_id", .string), .scalar("title", .string),
                        Property("attendeeList", .scalar(.string), list: true),
                    ] + extra)
            ])
    }

    @Test("Scrumdinger: isPublic (automatic), then numberOfAttendees computed from the attendee list")
    func scrumdinger() throws {
        let directory = TemporaryDirectory()
        do {
            let v0 = try open(directory, scrum(version: 0, []))
            try v0.write { txn in
                try txn.create(
                    "DailyScrum", ["_id": "s1", "title": "Design", "attendeeList": ["Ada", "Alan", "Grace"]])
                try txn.create("DailyScrum", ["_id": "s2", "title": "Ops", "attendeeList": []])
            }
            v0.close()
        }
        let v2Schema = scrum(
            version: 2, [.scalar("isPublic", .bool, default: false), .scalar("numberOfAttendees", .int)])
        let migration = Migration(steps: [
            2: { migration in
                try migration.enumerateObjects("DailyScrum") { old, new in
                    new?["numberOfAttendees"] = .int(Int64(old["attendeeList"].listValue?.count ?? 0))
                }
            }
        ])
        let v2 = try open(directory, v2Schema, migration: migration)
        #expect(v2.schema.version == 2)
        #expect(try v2.object("DailyScrum", primaryKey: .string("s1"))?["numberOfAttendees"] == 3)
        #expect(try v2.object("DailyScrum", primaryKey: .string("s1"))?["isPublic"] == false)
        #expect(try v2.object("DailyScrum", primaryKey: .string("s2"))?["numberOfAttendees"] == 0)
        #expect(try v2.verify().passed)
        // The migration is in the log: a replay rebuilds the migrated state exactly.
        try v2.rebuildViews()
        #expect(try v2.object("DailyScrum", primaryKey: .string("s1"))?["numberOfAttendees"] == 3)
    }

    @Test("Scrumdinger's history: a migration enumerates an embedded type wherever it is held, and may delete one")
    func embeddedHistory() throws {
        func schema(version: UInt64, _ extra: [Property]) -> Schema {
            Schema(
                version: version,
                types: [
                    ObjectSchema(
                        name: "DailyScrum",
                        properties: [
                            .scalar("_id", .string), .scalar("title", .string),
                            Property("history", .embedded("History"), list: true),
                            Property("latest", .embedded("Summary")),
                        ]),
                    .embedded("Summary", properties: [Property("last", .embedded("History"))]),
                    .embedded(
                        "History",
                        properties: [.scalar("date", .string), Property("attendees", .scalar(.string), list: true)]
                            + extra),
                ])
        }
        func history(_ date: String, _ attendees: [String]) -> Value {
            .embedded(
                EmbeddedObject(
                    type: "History", fields: ["date": .string(date), "attendees": .list(attendees.map(Value.string))]))
        }
        let directory = TemporaryDirectory()
        do {
            let v1 = try open(directory, schema(version: 1, []))
            try v1.write { txn in
                try txn.create(
                    "DailyScrum",
                    [
                        "_id": "s1", "title": "Design",
                        "history": .list([
                            history("mon", ["Ada", "Alan"]), history("tue", []), history("wed", ["Ada"]),
                        ]),
                        "latest": .embedded(
                            EmbeddedObject(type: "Summary", fields: ["last": history("wed", ["Ada", "Grace", "Alan"])])),
                    ])
                try txn.create("DailyScrum", ["_id": "s2", "title": "Ops", "history": .list([])])
            }
            v1.close()
        }
        let visits = Mutex<[String]>([])
        let migration = Migration { migration in
            try migration.enumerateObjects("History") { old, new in
                visits.withLock { $0.append("\(old.primaryKey) \(old["date"]) \(new?.path ?? [])") }
                let count = old["attendees"].listValue?.count ?? 0
                // A meeting nobody attended is dropped.
                if count == 0, let new { migration.delete(new) }
                new?["numberOfAttendees"] = .int(Int64(count))
            }
        }
        let v2 = try open(directory, schema(version: 2, [.scalar("numberOfAttendees", .int)]), migration: migration)
        let visited = visits.withLock { $0 }.sorted()
        #expect(
            visited == [
                #""s1" "mon" [history, [0]]"#, #""s1" "tue" [history, [1]]"#, #""s1" "wed" [history, [2]]"#,
                #""s1" "wed" [latest, last]"#,
            ], "\(visited)")
        let scrum = try #require(try v2.object("DailyScrum", primaryKey: .string("s1")))
        let counts = scrum["history"].listValue?.map { element -> Value? in
            guard case .embedded(let object) = element else { return nil }
            return object.fields["numberOfAttendees"]
        }
        #expect(counts == [.int(2), .int(1)], "the empty meeting is gone: \(scrum["history"])")
        guard case .embedded(let latest) = scrum["latest"], case .embedded(let last)? = latest.fields["last"] else {
            Issue.record("no latest summary: \(scrum["latest"])")
            return
        }
        #expect(last.fields["numberOfAttendees"] == .int(3), "nested embedded objects are visited too")
        #expect(try v2.verify().passed)
    }

    @Test("A default dropped from a required property: every object keeps the value it read")
    func droppedDefault() throws {
        func schema(version: UInt64, default value: Value?) -> Schema {
            Schema(
                version: version,
                types: [
                    ObjectSchema(
                        name: "Task", properties: [.scalar("_id", .string), .scalar("count", .int, default: value)])
                ])
        }
        let directory = TemporaryDirectory()
        do {
            let v1 = try open(directory, schema(version: 1, default: .int(5)))
            try v1.write { txn in
                try txn.create("Task", ["_id": "defaulted"])
                try txn.create("Task", ["_id": "given", "count": 7])
                try txn.create("Task", ["_id": "given-default", "count": 5])
            }
            v1.close()
        }
        let v2 = try open(directory, schema(version: 2, default: nil))
        for (key, count) in [("defaulted", 5), ("given", 7), ("given-default", 5)] {
            #expect(try v2.object("Task", primaryKey: .string(key))?["count"] == .int(Int64(count)), "\(key)")
        }
        #expect(try v2.verify().passed)
    }

    @Test(
        "A new default reaches the objects that hold no value, and the ones whose create stored the old default keep it"
    )
    func changedDefaultIsNotWrittenBack() throws {
        let directory = TemporaryDirectory()
        do {
            let v0 = try open(directory, scrum(version: 0, []))
            try v0.write { try $0.create("DailyScrum", ["_id": "old", "title": "Before"]) }
            v0.close()
            // Version 1 adds `minutes` with default 15: the old meeting holds no value for it; a new one stores 15.
            let v1 = try open(directory, scrum(version: 1, [.scalar("minutes", .int, default: 15)]))
            try v1.write { try $0.create("DailyScrum", ["_id": "stored", "title": "After"]) }
            v1.close()
        }
        let copy = TemporaryDirectory()
        try FileManager.default.copyItem(atPath: directory.path, toPath: copy.path + "/replica")
        let v2 = try open(directory, scrum(version: 2, [.scalar("minutes", .int, default: 30)]))
        #expect(try v2.object("DailyScrum", primaryKey: .string("old"))?["minutes"] == 30)
        #expect(try v2.object("DailyScrum", primaryKey: .string("stored"))?["minutes"] == 15)
        #expect(try v2.verify().passed)
        // A migration that keeps the old meetings at the old default says so, and it is written.
        let kept = try Replica.open(
            directory: copy.path + "/replica", schema: scrum(version: 2, [.scalar("minutes", .int, default: 30)]),
            configuration: configuration(),
            migration: Migration(steps: [
                2: { migration in
                    try migration.enumerateObjects("DailyScrum") { old, new in new?["minutes"] = old["minutes"] }
                }
            ]))
        #expect(try kept.object("DailyScrum", primaryKey: .string("old"))?["minutes"] == 15)
        #expect(try kept.object("DailyScrum", primaryKey: .string("stored"))?["minutes"] == 15)
    }

    @Test("An object a migration creates leaves its defaults to the schema: a concurrent write on another device wins")
    func migrationCreatedObjectsKeepDefaultsAsDefaults() throws {
        let v1 = Schema(version: 1, types: [ObjectSchema(name: "Person", properties: [.scalar("_id", .string)])])
        let v2 = Schema(
            version: 2,
            types: v1.types + [
                ObjectSchema(
                    name: "Tag",
                    properties: [
                        .scalar("_id", .string), .scalar("color", .string, default: "red"),
                        .scalar("note", .string, optional: true),
                    ])
            ])
        // Each device's release creates the tag in its migration.
        // `u` is given its colour explicitly (the default's value), and `v` gets its note through the subscript: those
        // are writes with the migration's stamp, as before.
        let migration = Migration(steps: [
            2: { context in
                _ = try context.create("Tag", ["_id": "t"])
                _ = try context.create("Tag", ["_id": "u", "color": "red"])
                let v = try context.create("Tag", ["_id": "v"])
                v["note"] = .null
            }
        ])
        let directories = [TemporaryDirectory("migrate-a"), TemporaryDirectory("migrate-b")]
        let clocks = [ManualClock(milliseconds: 1_700_000_000_000), ManualClock(milliseconds: 1_700_000_000_000)]
        func open(_ index: Int, _ schema: Schema) throws -> Replica {
            var configuration = configuration()
            configuration.clock = clocks[index]
            configuration.replicaID = ReplicaID(rawValue: UInt64(index + 1))
            return try Replica.open(
                directory: directories[index].path, schema: schema, configuration: configuration, migration: migration)
        }
        for index in 0..<2 { try open(index, v1).close() }
        // B migrates and its user colours the tag; A migrates later (by the clocks), before they sync.
        let b = try open(1, v2)
        clocks[1].advance(byMilliseconds: 10)
        try b.write { txn in
            for key in ["t", "u", "v"] {
                try txn.update("Tag", primaryKey: .string(key), ["color": "blue", "note": "mine"])
            }
        }
        clocks[0].advance(byMilliseconds: 1000)
        let a = try open(0, v2)
        try a.integrate(try b.changesets(missingFrom: a.versionVector))
        try b.integrate(try a.changesets(missingFrom: b.versionVector))
        for replica in [a, b] {
            let tag = try #require(try replica.object("Tag", primaryKey: .string("t")))
            #expect(tag["color"] == "blue")
            #expect(tag["note"] == "mine")
            let u = try #require(try replica.object("Tag", primaryKey: .string("u")))
            #expect(u["color"] == "red")  // given to create: A's later write wins
            #expect(u["note"] == "mine")
            let v = try #require(try replica.object("Tag", primaryKey: .string("v")))
            #expect(v["color"] == "blue")
            #expect(v["note"] == .null)  // set through the subscript: A's later write wins
            #expect(try replica.verify().passed)
        }
        #expect(try a.recordsDigest() == b.recordsDigest())
    }

    @Test("A migration that deletes an object and creates it again under its key resets what the create does not give")
    func deleteAndCreateAgainResets() throws {
        let tag = ObjectSchema(
            name: "Tag",
            properties: [
                .scalar("_id", .string), .scalar("color", .string, default: "red"),
                .scalar("note", .string, optional: true),
                Property("labels", .scalar(.string), list: true),
            ])
        let directory = TemporaryDirectory("migrate-recreate")
        do {
            let replica = try open(directory, Schema(version: 1, types: [tag]))
            try replica.write { try $0.create("Tag", ["_id": "t", "color": "blue", "note": "x", "labels": ["a"]]) }
            replica.close()
        }
        let migration = Migration { context in
            context.deleteAll("Tag")
            _ = try context.create("Tag", ["_id": "t"])
        }
        let replica = try open(directory, Schema(version: 2, types: [tag]), migration: migration)
        let object = try #require(try replica.object("Tag", primaryKey: .string("t")))
        #expect(object["color"] == "red")
        #expect(object["note"] == .null)
        #expect(object["labels"] == .list([]))
        #expect(try replica.verify().passed)
    }

    @Test("A date default that reads back from the stored schema a last bit off is the same declaration at reopen")
    func dateDefaultReadsBackAlike() throws {
        // A date kept as seconds since 2001 whose seconds since 1970 (how it is stored) round.
        let candidates = (1...1000).map { Date(timeIntervalSinceReferenceDate: 700_000_000 + Double($0) / 7) }
        let date = try #require(candidates.first { Date(timeIntervalSince1970: $0.timeIntervalSince1970) != $0 })
        let schema = Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: "Event", properties: [.scalar("_id", .string), .scalar("at", .date, default: .date(date))])
            ])
        let directory = TemporaryDirectory("date-default")
        do {
            let replica = try open(directory, schema)
            try replica.write { try $0.create("Event", ["_id": "e"]) }
            replica.close()
        }
        // Reopened with the same schema: no migration is asked for, and nothing is written.
        let replica = try open(directory, schema)
        let head = try replica.versionVector
        #expect(try replica.object("Event", primaryKey: .string("e"))?["at"].storesAlike(.date(date)) == true)
        replica.close()
        let again = try open(directory, schema)
        #expect(try again.versionVector == head)
        // Adding the same property again at runtime is no conflict.
        try again.write { try $0.addProperty(.scalar("at", .date, default: .date(date)), to: "Event") }
        #expect(try again.versionVector == head)
        #expect(try again.verify().passed)
        again.close()
        // A migration to a later version that keeps the property redefines nothing.
        let v2 = Schema(
            version: 2,
            types: [
                ObjectSchema(
                    name: "Event",
                    properties: [
                        .scalar("_id", .string), .scalar("at", .date, default: .date(date)),
                        .scalar("place", .string, optional: true),
                    ])
            ])
        let migrated = try open(directory, v2)
        let last = try #require(try migrated.changesets(missingFrom: VersionVector()).last)
        #expect(
            !last.instructions.contains { if case .redefineProperty = $0 { return true } else { return false } },
            "\(last.instructions)")
        #expect(last.instructions.contains { if case .addProperty = $0 { return true } else { return false } })
    }

    @Test("Catalyst: an added property at the same version is a clear error; a raised version migrates it")
    func isPinned() throws {
        let directory = TemporaryDirectory()
        let project = { (version: UInt64, extra: [Property]) in
            Schema(
                version: version,
                types: [
                    ObjectSchema(
                        name: "Project", properties: [.scalar("_id", .objectId), .scalar("name", .string)] + extra)
                ])
        }
        let id = ObjectID.generate()
        do {
            let v1 = try open(directory, project(1, []))
            try v1.write { try $0.create("Project", ["_id": .objectId(id), "name": "Launch"]) }
            v1.close()
        }
        #expect {
            try open(directory, project(1, [.scalar("isPinned", .bool, optional: true)]))
        } throws: { error in
            guard let error = error as? TributaryError else { return false }
            return error.code == .migrationRequired
                && error.message.contains(
                    "Migration is required due to the following errors:\n- Property 'Project.isPinned' has been added.")
        }
        let v2 = try open(directory, project(2, [.scalar("isPinned", .bool, optional: true)]))
        #expect(try v2.object("Project", primaryKey: .objectId(id))?["isPinned"] == .null)
        #expect(try v2.object("Project", primaryKey: .objectId(id))?["name"] == "Launch")
        #expect(try v2.verify().passed)
    }

    func person(_ version: UInt64) -> Schema {
        switch version {
        case 1:
            Schema(
                version: 1,
                types: [
                    ObjectSchema(
                        name: "Person",
                        properties: [
                            .scalar("_id", .int), .scalar("firstName", .string), .scalar("lastName", .string),
                            .scalar("age", .int),
                        ])
                ])
        case 2:
            Schema(
                version: 2,
                types: [
                    ObjectSchema(
                        name: "Person",
                        properties: [
                            .scalar("_id", .int), .scalar("fullName", .string), .scalar("age", .int),
                        ])
                ])
        default:
            Schema(
                version: 3,
                types: [
                    ObjectSchema(
                        name: "Person",
                        properties: [
                            .scalar("_id", .int), .scalar("fullName", .string), .scalar("age", .string),
                        ])
                ])
        }
    }

    /// The example's migration function, written to take any older version to the newest.
    static let personMigration = Migration { migration in
        if migration.oldSchemaVersion < 2 {
            try migration.enumerateObjects("Person") { old, new in
                new?["fullName"] = .string("\(old["firstName"].stringValue ?? "") \(old["lastName"].stringValue ?? "")")
            }
        }
        if migration.oldSchemaVersion < 3 {
            try migration.enumerateObjects("Person") { old, new in
                new?["age"] = .string(old["age"].intValue.map(String.init) ?? old["age"].stringValue ?? "")
            }
        }
    }

    @Test("Full name from first and last name, then age from Int to String, from v1 straight to v3")
    func fullNameAndAge() throws {
        let directory = TemporaryDirectory()
        do {
            let v1 = try open(directory, person(1))
            try v1.write { txn in
                try txn.create("Person", ["_id": 1, "firstName": "Ada", "lastName": "Lovelace", "age": 36])
                try txn.create("Person", ["_id": 2, "firstName": "Alan", "lastName": "Turing", "age": 41])
            }
            v1.close()
        }
        let v3 = try open(directory, person(3), migration: Self.personMigration)
        let ada = try #require(try v3.object("Person", primaryKey: .int(1)))
        #expect(ada["fullName"] == "Ada Lovelace")
        #expect(ada["age"] == "36")
        #expect(ada["firstName"] == .null)
        #expect(v3.schema[type: "Person"]?[property: "firstName"] == nil)
        #expect(try v3.verify().passed)
    }

    @Test("Migrations run step by step from any older version (v2 to v3)")
    func fromTheMiddle() throws {
        let directory = TemporaryDirectory()
        do {
            let v1 = try open(directory, person(1))
            try v1.write { try $0.create("Person", ["_id": 1, "firstName": "Grace", "lastName": "Hopper", "age": 85]) }
            v1.close()
        }
        do {
            // The app at version 2 had only the first step.
            let v2Migration = Migration(steps: [
                2: { migration in
                    try migration.enumerateObjects("Person") { old, new in
                        new?["fullName"] = .string(
                            "\(old["firstName"].stringValue ?? "") \(old["lastName"].stringValue ?? "")")
                    }
                }
            ])
            let v2 = try open(directory, person(2), migration: v2Migration)
            #expect(try v2.object("Person", primaryKey: .int(1))?["fullName"] == "Grace Hopper")
            #expect(try v2.object("Person", primaryKey: .int(1))?["age"] == 85)
            v2.close()
        }
        let v3 = try open(directory, person(3), migration: Self.personMigration)
        #expect(try v3.object("Person", primaryKey: .int(1))?["fullName"] == "Grace Hopper")
        #expect(try v3.object("Person", primaryKey: .int(1))?["age"] == "85")
        #expect(try v3.verify().passed)
    }

    @Test("Renaming a property keeps its values")
    func renameKeepsData() throws {
        let directory = TemporaryDirectory()
        let old = Schema(
            version: 1,
            types: [ObjectSchema(name: "Person", properties: [.scalar("_id", .int), .scalar("yearsSinceBirth", .int)])])
        let new = Schema(
            version: 2,
            types: [
                ObjectSchema(name: "Person", properties: [.scalar("_id", .int), .scalar("age", .int, indexed: true)])
            ])
        do {
            let v1 = try open(directory, old)
            try v1.write { try $0.create("Person", ["_id": 1, "yearsSinceBirth": 30]) }
            v1.close()
        }
        let v2 = try open(
            directory, new,
            migration: Migration { $0.renameProperty(onType: "Person", from: "yearsSinceBirth", to: "age") })
        #expect(try v2.object("Person", primaryKey: .int(1))?["age"] == 30)
        #expect(
            try v2.read { try $0.explain("Person", where: "age == 30") }
                == .index(property: "age", constraint: "age IN {30}"))
        #expect(try v2.objects("Person", where: "age == 30").count == 1)
        #expect(try v2.verify().passed)
    }

    @Test("Renaming a property onto one the previous schema has fails, naming both, and changes nothing")
    func renameOntoExistingPropertyFails() throws {
        let directory = TemporaryDirectory()
        let old = Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: "Person",
                    properties: [.scalar("_id", .int), .scalar("nick", .string), .scalar("name", .string)])
            ])
        let new = Schema(
            version: 2,
            types: [ObjectSchema(name: "Person", properties: [.scalar("_id", .int), .scalar("name", .string)])])
        do {
            let v1 = try open(directory, old)
            try v1.write { try $0.create("Person", ["_id": 1, "nick": "Bo", "name": "Bob"]) }
            v1.close()
        }
        #expect {
            _ = try open(
                directory, new, migration: Migration { $0.renameProperty(onType: "Person", from: "nick", to: "name") })
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .migrationFailed else { return false }
            return error.message.contains("'Person.nick' to 'name'") && error.message.contains("'Person.name: string'")
        }
        let reopened = try open(directory, old)
        #expect(try reopened.object("Person", primaryKey: .int(1))?["nick"] == "Bo")
        #expect(try reopened.object("Person", primaryKey: .int(1))?["name"] == "Bob")
    }

    func addressSchema(_ version: UInt64, embedded: Bool) -> Schema {
        Schema(
            version: version,
            types: [
                ObjectSchema(
                    name: "Contact",
                    properties: [
                        .scalar("_id", .string),
                        embedded ? Property("address", .embedded("Address")) : Property("address", .link("Address")),
                    ]),
                embedded
                    ? .embedded("Address", properties: [.scalar("street", .string), .scalar("city", .string)])
                    : ObjectSchema(
                        name: "Address",
                        properties: [.scalar("_id", .string), .scalar("street", .string), .scalar("city", .string)]),
            ])
    }

    func writeContacts(_ directory: TemporaryDirectory, orphan: Bool, shared: Bool) throws {
        let v1 = try open(directory, addressSchema(1, embedded: false))
        try v1.write { txn in
            try txn.create("Address", ["_id": "a1", "street": "1 Main St", "city": "Paris"])
            try txn.create("Address", ["_id": "a2", "street": "2 High St", "city": "Oslo"])
            try txn.create("Contact", ["_id": "c1", "address": .link(.string("a1"))])
            if !orphan { try txn.create("Contact", ["_id": "c2", "address": .link(.string("a2"))]) }
            if shared { try txn.create("Contact", ["_id": "c3", "address": .link(.string("a1"))]) }
        }
        v1.close()
    }

    @Test("An object type made embedded moves into its one parent")
    func objectToEmbedded() throws {
        let directory = TemporaryDirectory()
        try writeContacts(directory, orphan: false, shared: false)
        let v2 = try open(directory, addressSchema(2, embedded: true))
        let contact = try #require(try v2.object("Contact", primaryKey: .string("c1")))
        #expect(contact["address"].embeddedValue?["city"] == "Paris")
        #expect(try v2.object("Contact", primaryKey: .string("c2"))?["address"].embeddedValue?["street"] == "2 High St")
        #expect(try v2.verify().passed)
    }

    @Test("Making a type embedded fails when an object would have no parent, and the replica stays as it was")
    func embeddedWithoutParentFails() throws {
        let directory = TemporaryDirectory()
        try writeContacts(directory, orphan: true, shared: false)
        #expect {
            try open(directory, addressSchema(2, embedded: true))
        } throws: { error in
            guard let error = error as? TributaryError else { return false }
            return error.code == .migrationFailed && error.message.contains("does not have a backlink")
                && error.message.contains("a2")
        }
        let again = try open(directory, addressSchema(1, embedded: false))
        #expect(try again.object("Address", primaryKey: .string("a2"))?["city"] == "Oslo")
        #expect(again.schema.version == 1)
        #expect(try again.verify().passed)
    }

    @Test("Making a type embedded fails when an object would have two parents")
    func embeddedWithTwoParentsFails() throws {
        let directory = TemporaryDirectory()
        try writeContacts(directory, orphan: false, shared: true)
        #expect {
            try open(directory, addressSchema(2, embedded: true))
        } throws: { error in
            guard let error = error as? TributaryError else { return false }
            return error.message.contains("multiple backlinks") && error.message.contains("Contact[\"c1\"].address")
                && error.message.contains("Contact[\"c3\"].address")
        }
    }

    @Test("A migration can fix orphans before a type becomes embedded")
    func migrationDeletesOrphans() throws {
        let directory = TemporaryDirectory()
        try writeContacts(directory, orphan: true, shared: false)
        let v2 = try open(
            directory, addressSchema(2, embedded: true),
            migration: Migration { migration in
                try migration.enumerateObjects("Address") { old, new in
                    if old.primaryKey == .string("a2"), let new { migration.delete(new) }
                }
            })
        #expect(try v2.object("Contact", primaryKey: .string("c1"))?["address"].embeddedValue?["city"] == "Paris")
        #expect(try v2.verify().passed)
    }

    @Test("A required property added without default or migration code is named in the error")
    func requiredPropertyWithoutDefault() throws {
        let directory = TemporaryDirectory()
        do {
            let v0 = try open(directory, scrum(version: 0, []))
            try v0.write { try $0.create("DailyScrum", ["_id": "s1", "title": "Design"]) }
            v0.close()
        }
        #expect {
            try open(directory, scrum(version: 1, [.scalar("theme", .string)]))
        } throws: { error in
            (error as? TributaryError)?.message.contains("'DailyScrum.theme'") == true
        }
    }

    @Test("A migration that throws leaves the replica exactly as it was")
    func throwingMigration() throws {
        struct Refused: Error {}
        let directory = TemporaryDirectory()
        var digest: UInt64 = 0
        do {
            let v1 = try open(directory, person(1))
            try v1.write { try $0.create("Person", ["_id": 1, "firstName": "Ada", "lastName": "L", "age": 36]) }
            digest = try v1.viewDigest()
            v1.close()
        }
        #expect(throws: Refused.self) {
            try open(directory, person(2), migration: Migration { _ in throw Refused() })
        }
        let v1 = try open(directory, person(1))
        #expect(try v1.viewDigest() == digest)
        #expect(try v1.verify().passed)
    }

    @Test("A replica a later release opened may not be opened by an earlier one on the same device")
    func lowerVersion() throws {
        let directory = TemporaryDirectory()
        _ = try open(directory, person(2)).close()
        #expect {
            try open(directory, person(1))
        } throws: { error in
            guard let error = error as? TributaryError else { return false }
            return error.code == .schemaMismatch
                && error.message.contains("lower than version 2, which \(directory.path) was last opened with")
        }
    }

    @Test("Development mode deletes and recreates the replica when a migration would be needed")
    func developmentMode() throws {
        let directory = TemporaryDirectory()
        do {
            let v1 = try open(directory, person(1))
            try v1.write { try $0.create("Person", ["_id": 1, "firstName": "Ada", "lastName": "L", "age": 36]) }
            v1.close()
        }
        var configuration = configuration()
        configuration.deleteReplicaIfMigrationNeeded = true
        var changed = person(1)
        var type = changed[type: "Person"]!
        type.properties.append(.scalar("nickname", .string, optional: true))
        changed.upsert(type)
        let replica = try Replica.open(directory: directory.path, schema: changed, configuration: configuration)
        #expect(try replica.objects("Person").isEmpty)
        #expect(replica.schema[type: "Person"]?[property: "nickname"] != nil)
    }

    @Test("Codable models and the JSON form produce equal schemas")
    func codableEqualsJSON() throws {
        let fromModels = try Schema(models: [Rate.self], version: 1)
        let json = """
            [{"title": "Rate", "bsonType": "object", "required": ["_id", "result"],
              "properties": {"_id": {"bsonType": "string"},
                             "query": {"title": "RateQuery", "bsonType": "object", "required": ["from", "to", "amount"],
                                       "properties": {"from": {"bsonType": "string"}, "to": {"bsonType": "string"},
                                                      "amount": {"bsonType": "double"}}},
                             "result": {"bsonType": "double"}}}]
            """
        let fromJSON = try Schema(json: json, version: 1)
        #expect(fromModels.isEquivalent(to: fromJSON), "\(fromModels.differences(from: fromJSON))")
        #expect(try Schema(json: fromModels.jsonString(), version: 1).isEquivalent(to: fromModels))
    }
}
