import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// Migrations that change embedded types, a type's embeddedness the other way, and a primary key's type: each either
/// carries the data over or fails with an error that says what to do, and a failure leaves the replica as it was.
@Suite("Migrations of embedded types and primary keys")
struct EmbeddedMigrationTests {
    func open(_ directory: TemporaryDirectory, _ schema: Schema, migration: Migration? = nil) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(
            directory: directory.path, schema: schema, configuration: configuration, migration: migration)
    }

    static func contacts(_ version: UInt64, address: [Property]) -> Schema {
        Schema(
            version: version,
            types: [
                ObjectSchema(
                    name: "Contact",
                    properties: [
                        .scalar("_id", .string), Property("address", .embedded("Address")),
                        Property("previous", .embedded("Address"), list: true),
                        Property("places", .embedded("Address"), dictionary: true),
                    ]),
                .embedded("Address", properties: address),
            ])
    }

    static let v1Address: [Property] = [
        .scalar("street", .string), .scalar("city", .string), .scalar("zip", .int, optional: true),
    ]

    func address(_ street: String, _ city: String, _ zip: Int64) -> Value {
        .embedded(
            EmbeddedObject(
                type: "Address", fields: ["street": .string(street), "city": .string(city), "zip": .int(zip)]))
    }

    /// A replica at version 1 with two contacts, each with an address and a list of previous addresses.
    func writeV1(_ directory: TemporaryDirectory) throws {
        let v1 = try open(directory, Self.contacts(1, address: Self.v1Address))
        try v1.write { txn in
            try txn.create(
                "Contact",
                [
                    "_id": "c1", "address": address("1 Main St", "Paris", 75001),
                    "previous": .list([address("9 Old Rd", "Lyon", 69001)]),
                    "places": .dictionary(["work": address("5 Quay", "Nice", 6000)]),
                ])
            try txn.create("Contact", ["_id": "c2", "address": address("2 High St", "Oslo", 150)])
        }
        v1.close()
    }

    func field(_ replica: Replica, _ contact: String, _ name: String) throws -> Value? {
        try replica.object("Contact", primaryKey: .string(contact))?["address"].embeddedValue?.fields[name]
    }

    @Test("Removing a property of an embedded type keeps the others, in single and list properties")
    func removeEmbeddedProperty() throws {
        let directory = TemporaryDirectory()
        try writeV1(directory)
        let v2 = try open(directory, Self.contacts(2, address: [.scalar("street", .string), .scalar("city", .string)]))
        #expect(try field(v2, "c1", "city") == "Paris")
        #expect(try field(v2, "c1", "zip") == nil)
        let previous = try v2.object("Contact", primaryKey: .string("c1"))?["previous"].listValue
        #expect(previous?.first?.embeddedValue?.fields == ["street": "9 Old Rd", "city": "Lyon"])
        let places = try v2.object("Contact", primaryKey: .string("c1"))?["places"].dictionaryValue
        #expect(places?["work"]?.embeddedValue?.fields == ["street": "5 Quay", "city": "Nice"])
        #expect(try v2.verify().passed)
    }

    @Test("Renaming a property of an embedded type keeps its values")
    func renameEmbeddedProperty() throws {
        let directory = TemporaryDirectory()
        try writeV1(directory)
        let schema = Self.contacts(
            2,
            address: [.scalar("street", .string), .scalar("city", .string), .scalar("postcode", .int, optional: true)])
        let v2 = try open(
            directory, schema,
            migration: Migration { $0.renameProperty(onType: "Address", from: "zip", to: "postcode") })
        #expect(try field(v2, "c1", "postcode") == 75001)
        #expect(try field(v2, "c2", "postcode") == 150)
        #expect(
            try v2.object("Contact", primaryKey: .string("c1"))?["previous"].listValue?.first?.embeddedValue?[
                "postcode"] == 69001)
        let places = try v2.object("Contact", primaryKey: .string("c1"))?["places"].dictionaryValue
        #expect(places?["work"]?.embeddedValue?["postcode"] == 6000)
        #expect(try v2.verify().passed)
    }

    @Test("Changing a property's type in an embedded type: the migration's values are kept, others take the default")
    func retypeEmbeddedProperty() throws {
        let directory = TemporaryDirectory()
        try writeV1(directory)
        let schema = Self.contacts(
            2, address: [.scalar("street", .string), .scalar("city", .string), .scalar("zip", .string, optional: true)])
        let v2 = try open(
            directory, schema,
            migration: Migration { migration in
                try migration.enumerateObjects("Contact") { old, new in
                    guard var address = new?["address"].embeddedValue,
                        let zip = old["address"].embeddedValue?["zip"].intValue
                    else { return }
                    address["zip"] = .string(String(format: "%05d", zip))
                    new?["address"] = .embedded(address)
                }
            })
        #expect(try field(v2, "c1", "zip") == "75001")
        #expect(try field(v2, "c2", "zip") == "00150")
        #expect(
            try v2.object("Contact", primaryKey: .string("c1"))?["previous"].listValue?.first?.embeddedValue?["zip"]
                == .null)
        #expect(try v2.verify().passed)
    }

    @Test("A misspelled renameProperty fails, naming the property, and changes nothing")
    func misspelledRenameFails() throws {
        let directory = TemporaryDirectory()
        try writeV1(directory)
        let schema = Self.contacts(
            2,
            address: [.scalar("street", .string), .scalar("city", .string), .scalar("postcode", .int, optional: true)])
        #expect {
            _ = try open(
                directory, schema,
                migration: Migration { $0.renameProperty(onType: "Address", from: "zipp", to: "postcode") })
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .migrationFailed else { return false }
            return error.message.contains("'Address.zipp'")
        }
        #expect {
            _ = try open(
                directory, schema,
                migration: Migration { $0.renameProperty(onType: "Adress", from: "zip", to: "postcode") })
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .migrationFailed else { return false }
            return error.message.contains("'Adress'")
        }
        let again = try open(directory, Self.contacts(1, address: Self.v1Address))
        #expect(try field(again, "c1", "zip") == 75001)
    }

    @Test("Making an embedded type top-level fails unless the migration creates its objects")
    func embeddedToTopLevel() throws {
        let directory = TemporaryDirectory()
        try writeV1(directory)
        let schema = Schema(
            version: 2,
            types: [
                ObjectSchema(
                    name: "Contact",
                    properties: [
                        .scalar("_id", .string), Property("address", .link("Address")),
                    ]),
                ObjectSchema(
                    name: "Address",
                    properties: [
                        .scalar("_id", .string), .scalar("street", .string), .scalar("city", .string),
                        .scalar("zip", .int, optional: true),
                    ]),
            ])
        #expect {
            _ = try open(directory, schema)
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .migrationFailed else { return false }
            return error.message.contains("Address") && error.message.contains("embedded")
        }
        #expect(try field(try open(directory, Self.contacts(1, address: Self.v1Address)), "c1", "city") == "Paris")
        let v2 = try open(
            directory, schema,
            migration: Migration { migration in
                try migration.enumerateObjects("Contact") { old, new in
                    guard var fields = old["address"].embeddedValue?.fields else { return }
                    fields["_id"] = .string("address of \(old.primaryKey)")
                    try migration.create("Address", fields)
                    new?["address"] = .link(.string("address of \(old.primaryKey)"))
                }
            })
        #expect(try v2.object("Address", primaryKey: .string("address of \"c1\""))?["city"] == "Paris")
        #expect(try v2.object("Contact", primaryKey: .string("c2"))?["address"] == .link(.string("address of \"c2\"")))
        #expect(try v2.verify().passed)
    }

    static func people(_ version: UInt64, key: ScalarType) -> Schema {
        Schema(
            version: version,
            types: [ObjectSchema(name: "Person", properties: [.scalar("_id", key), .scalar("name", .string)])])
    }

    @Test("Changing a primary key's type fails unless the migration re-creates the objects; then it is applied")
    func primaryKeyTypeChange() throws {
        let directory = TemporaryDirectory()
        do {
            let v1 = try open(directory, Self.people(1, key: .int))
            try v1.write { txn in
                for id in 1...3 { try txn.create("Person", ["_id": .int(Int64(id)), "name": .string("p\(id)")]) }
            }
            v1.close()
        }
        #expect {
            _ = try open(directory, Self.people(2, key: .string))
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .migrationFailed else { return false }
            return error.message.contains("Person._id") && error.message.contains("int")
                && error.message.contains("string")
        }
        let v2 = try open(
            directory, Self.people(2, key: .string),
            migration: Migration { migration in
                try migration.enumerateObjects("Person") { old, new in
                    guard let new, case .int(let id) = old.primaryKey else { return }
                    migration.delete(new)
                    try migration.create("Person", ["_id": .string("person-\(id)"), "name": old["name"]])
                }
            })
        #expect(try v2.object("Person", primaryKey: .string("person-2"))?["name"] == "p2")
        #expect(try v2.objects("Person").count == 3)
        try v2.write { try $0.create("Person", ["_id": "person-4", "name": "p4"]) }
        #expect(try v2.verify().passed)
    }

    @Test("Renames chained across steps (a to b, then b to c) carry the values to c, from version 1 and from 2")
    func chainedRenames() throws {
        func schema(_ version: UInt64, _ name: String) -> Schema {
            Schema(
                version: version,
                types: [ObjectSchema(name: "Person", properties: [.scalar("_id", .int), .scalar(name, .int)])])
        }
        let migration = Migration(steps: [
            2: { migration in
                try migration.enumerateObjects("Person") { _, _ in }  // makes the new objects before the later rename
                migration.renameProperty(onType: "Person", from: "yearsSinceBirth", to: "years")
            },
            3: { migration in migration.renameProperty(onType: "Person", from: "years", to: "age") },
        ])
        let fromOne = TemporaryDirectory()
        do {
            let v1 = try open(fromOne, schema(1, "yearsSinceBirth"))
            try v1.write { try $0.create("Person", ["_id": 1, "yearsSinceBirth": 30]) }
            v1.close()
        }
        let v3 = try open(fromOne, schema(3, "age"), migration: migration)
        #expect(try v3.object("Person", primaryKey: .int(1))?["age"] == 30)
        #expect(try v3.verify().passed)

        let fromTwo = TemporaryDirectory()
        do {
            let v2 = try open(fromTwo, schema(2, "years"))
            try v2.write { try $0.create("Person", ["_id": 1, "years": 40]) }
            v2.close()
        }
        let again = try open(fromTwo, schema(3, "age"), migration: migration)
        #expect(try again.object("Person", primaryKey: .int(1))?["age"] == 40)
    }

    // Renames across versions, reused names, primary keys, and embedded types made top-level.

    func person(_ v: UInt64, _ names: [String]) -> Schema {
        Schema(
            version: v,
            types: [
                ObjectSchema(
                    name: "Person",
                    properties: [.scalar("_id", .int)] + names.map { .scalar($0, .string, optional: true) })
            ])
    }
    func seed(_ d: TemporaryDirectory, _ s: Schema, _ values: [String: Value]) throws {
        let r = try open(d, s)
        try r.write { try $0.create("Person", values) }
        r.close()
    }

    @Test("Renames shift in one version: b to c, then a to b")
    func shiftedRenames() throws {
        let d = TemporaryDirectory()
        try seed(d, person(1, ["a", "b"]), ["_id": 1, "a": "A", "b": "B"])
        let r = try open(
            d, person(2, ["b", "c"]),
            migration: Migration { m in
                m.renameProperty(onType: "Person", from: "b", to: "c")
                m.renameProperty(onType: "Person", from: "a", to: "b")
            })
        let o = try r.object("Person", primaryKey: .int(1))
        #expect(o?["b"] == "A")
        #expect(o?["c"] == "B")
    }

    @Test("A name freed by one step is reused by a later one: title to heading (2), subtitle to title (3)")
    func reusedName() throws {
        let d = TemporaryDirectory()
        try seed(d, person(1, ["subtitle", "title"]), ["_id": 1, "title": "T", "subtitle": "S"])
        let r = try open(
            d, person(3, ["heading", "title"]),
            migration: Migration(steps: [
                2: { $0.renameProperty(onType: "Person", from: "title", to: "heading") },
                3: { $0.renameProperty(onType: "Person", from: "subtitle", to: "title") },
            ]))
        let o = try r.object("Person", primaryKey: .int(1))
        #expect(o?["heading"] == "T")
        #expect(o?["title"] == "S")
    }

    @Test("A rename undone by a later step: a to b (2), b to a (3)")
    func renameUndone() throws {
        let d = TemporaryDirectory()
        try seed(d, person(1, ["a"]), ["_id": 1, "a": "A"])
        let r = try open(
            d, person(3, ["a"]),
            migration: Migration(steps: [
                2: { $0.renameProperty(onType: "Person", from: "a", to: "b") },
                3: { $0.renameProperty(onType: "Person", from: "b", to: "a") },
            ]))
        #expect(try r.object("Person", primaryKey: .int(1))?["a"] == "A")
    }

    static func contactsWith(_ v: UInt64, _ address: [Property], extra: [Property] = []) -> Schema {
        Schema(
            version: v,
            types: [
                ObjectSchema(
                    name: "Contact",
                    properties: [.scalar("_id", .string), Property("address", .embedded("Address"))] + extra),
                .embedded("Address", properties: address),
            ])
    }

    @Test("An embedded type's property renamed in a later step than the one that enumerates its parents")
    func embeddedRenameAfterEnumerate() throws {
        let d = TemporaryDirectory()
        do {
            let r = try open(
                d, Self.contactsWith(1, [.scalar("street", .string), .scalar("zip", .int, optional: true)]))
            try r.write {
                try $0.create(
                    "Contact",
                    [
                        "_id": "c1",
                        "address": .embedded(EmbeddedObject(type: "Address", fields: ["street": "s", "zip": 75001])),
                    ])
            }
            r.close()
        }
        let r = try open(
            d,
            Self.contactsWith(
                3, [.scalar("street", .string), .scalar("postcode", .int, optional: true)],
                extra: [.scalar("n", .int, optional: true)]),
            migration: Migration(steps: [
                2: { m in try m.enumerateObjects("Contact") { _, new in new?["n"] = 1 } },
                3: { m in m.renameProperty(onType: "Address", from: "zip", to: "postcode") },
            ]))
        #expect(
            try r.object("Contact", primaryKey: .string("c1"))?["address"].embeddedValue?.fields["postcode"] == 75001)
    }

    @Test("A type embedded inside an embedded type made top-level fails rather than dropping it")
    func nestedMadeTopLevel() throws {
        let d = TemporaryDirectory()
        do {
            let r = try open(
                d,
                Schema(
                    version: 1,
                    types: [
                        ObjectSchema(
                            name: "Contact",
                            properties: [.scalar("_id", .string), Property("profile", .embedded("Profile"))]),
                        .embedded("Profile", properties: [Property("address", .embedded("Address"))]),
                        .embedded("Address", properties: [.scalar("street", .string)]),
                    ]))
            try r.write {
                try $0.create(
                    "Contact",
                    [
                        "_id": "c1",
                        "profile": .embedded(
                            EmbeddedObject(
                                type: "Profile",
                                fields: [
                                    "address": .embedded(
                                        EmbeddedObject(type: "Address", fields: ["street": "1 Main St"]))
                                ])),
                    ])
            }
            r.close()
        }
        let v2 = Schema(
            version: 2,
            types: [
                ObjectSchema(
                    name: "Contact", properties: [.scalar("_id", .string), Property("profile", .embedded("Profile"))]),
                .embedded("Profile", properties: [Property("address", .link("Address"))]),
                ObjectSchema(name: "Address", properties: [.scalar("_id", .string), .scalar("street", .string)]),
            ])
        #expect {
            _ = try open(d, v2)
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .migrationFailed else { return false }
            return error.message.contains("Contact[\"c1\"].profile.address")
        }
    }

    @Test("A primary key renamed (_id to id, same type), objects re-created with the same keys")
    func pkRename() throws {
        let d = TemporaryDirectory()
        try seed(d, person(1, ["name"]), ["_id": 1, "name": "N"])
        let v2 = Schema(
            version: 2,
            types: [
                ObjectSchema(
                    name: "Person", primaryKey: "id",
                    properties: [.scalar("id", .int), .scalar("name", .string, optional: true)])
            ])
        let r = try open(
            d, v2,
            migration: Migration { m in
                try m.enumerateObjects("Person") { old, new in
                    guard let new else { return }
                    m.delete(new)
                    try m.create("Person", ["id": old["_id"], "name": old["name"]])
                }
            })
        #expect(try r.object("Person", primaryKey: .int(1))?["name"] == "N")
    }

    @Test("A primary key type change with links from another type, rewritten by the migration")
    func pkChangeWithLinks() throws {
        let d = TemporaryDirectory()
        func s(_ v: UInt64, _ key: ScalarType) -> Schema {
            Schema(
                version: v,
                types: [
                    ObjectSchema(name: "Person", properties: [.scalar("_id", key), .scalar("name", .string)]),
                    ObjectSchema(
                        name: "Team",
                        properties: [.scalar("_id", .string), Property("members", .link("Person"), list: true)]),
                ])
        }
        do {
            let r = try open(d, s(1, .int))
            try r.write { txn in
                try txn.create("Person", ["_id": 1, "name": "p1"])
                try txn.create("Team", ["_id": "t", "members": .list([.link(.int(1))])])
            }
            r.close()
        }
        let r = try open(
            d, s(2, .string),
            migration: Migration { m in
                try m.enumerateObjects("Person") { old, new in
                    guard let new, case .int(let id) = old.primaryKey else { return }
                    m.delete(new)
                    try m.create("Person", ["_id": .string("p\(id)"), "name": old["name"]])
                }
                try m.enumerateObjects("Team") { _, new in new?["members"] = .list([.link(.string("p1"))]) }
            })
        #expect(try r.object("Team", primaryKey: .string("t"))?["members"] == .list([.link(.string("p1"))]))
        #expect(try r.verify().passed)
    }

    @Test("A field another replica added to an embedded type survives this replica's migration")
    func peerEmbeddedField() throws {
        let da = TemporaryDirectory()
        let db = TemporaryDirectory()
        let a1 = Self.contactsWith(1, [.scalar("street", .string)])
        let b1 = Self.contactsWith(1, [.scalar("street", .string), .scalar("country", .string, optional: true)])
        do {
            let a = try open(da, a1)
            let b = try open(db, b1)
            try a.write {
                try $0.create(
                    "Contact",
                    ["_id": "c1", "address": .embedded(EmbeddedObject(type: "Address", fields: ["street": "s"]))])
            }
            _ = try b.integrate(try a.changesets(missingFrom: VersionVector()))
            try b.write {
                try $0.update(
                    "Contact", primaryKey: .string("c1"),
                    ["address": .embedded(EmbeddedObject(type: "Address", fields: ["street": "s", "country": "FR"]))])
            }
            _ = try a.integrate(try b.changesets(missingFrom: VersionVector()))
            #expect(
                try a.object("Contact", primaryKey: .string("c1"))?["address"].embeddedValue?.fields["country"] == "FR")
            a.close()
            b.close()
        }
        let a = try open(
            da, Self.contactsWith(2, [.scalar("street", .string)], extra: [.scalar("note", .string, optional: true)]))
        #expect(try a.object("Contact", primaryKey: .string("c1"))?["address"].embeddedValue?.fields["country"] == "FR")
    }

    @Test("A holding property removed while its embedded type becomes top-level drops the data, as removals do")
    func droppedParent() throws {
        let d = TemporaryDirectory()
        do {
            let r = try open(d, Self.contactsWith(1, [.scalar("street", .string)]))
            try r.write {
                try $0.create(
                    "Contact",
                    ["_id": "c1", "address": .embedded(EmbeddedObject(type: "Address", fields: ["street": "s"]))])
            }
            r.close()
        }
        let v2 = Schema(
            version: 2,
            types: [
                ObjectSchema(name: "Contact", properties: [.scalar("_id", .string)]),
                ObjectSchema(name: "Address", properties: [.scalar("_id", .string), .scalar("street", .string)]),
            ])
        let r = try open(d, v2)
        #expect(try r.objects("Address").isEmpty)
        #expect(try r.verify().passed)
    }

    // Values the migration writes: checked fields, later renames, changed link targets, re-created objects.

    @Test(
        "A wrong value the migration writes into an embedded object fails it, naming the field; a fresh object clears the rest"
    )
    func migrationWritesToEmbeddedAreChecked() throws {
        let directory = TemporaryDirectory()
        try writeV1(directory)
        let schema = Self.contacts(2, address: Self.v1Address)
        #expect {
            _ = try open(
                directory, schema,
                migration: Migration { migration in
                    try migration.enumerateObjects("Contact") { _, new in
                        guard var address = new?["address"].embeddedValue else { return }
                        address["zip"] = "75001"  // a string for an int
                        new?["address"] = .embedded(address)
                    }
                })
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .migrationFailed else { return false }
            return error.message.contains("zip")
        }
        let v2 = try open(
            directory, schema,
            migration: Migration { migration in
                try migration.enumerateObjects("Contact") { _, new in
                    new?["address"] = .embedded(
                        EmbeddedObject(type: "Address", fields: ["street": "New St", "city": "Rome"]))
                }
            })
        #expect(try field(v2, "c1", "street") == "New St")
        #expect(try field(v2, "c1", "zip") == .null, "the migration wrote an address without a zip")
        #expect(try v2.verify().passed)
    }

    @Test("A rename in a later step keeps the value an earlier step set under the old name")
    func laterRenameKeepsEarlierStepsValue() throws {
        let directory = TemporaryDirectory()
        func schema(_ version: UInt64, _ properties: [Property]) -> Schema {
            Schema(
                version: version, types: [ObjectSchema(name: "Person", properties: [.scalar("_id", .int)] + properties)]
            )
        }
        do {
            let v1 = try open(directory, schema(1, [.scalar("age", .int)]))
            try v1.write { try $0.create("Person", ["_id": 1, "age": 30]) }
            v1.close()
        }
        let v3 = try open(
            directory, schema(3, [.scalar("years", .int)]),
            migration: Migration(steps: [
                2: { migration in
                    try migration.enumerateObjects("Person") { old, new in
                        new?["age"] = .int((old["age"].intValue ?? 0) + 1)
                    }
                },
                3: { $0.renameProperty(onType: "Person", from: "age", to: "years") },
            ]))
        #expect(try v3.object("Person", primaryKey: .int(1))?["years"] == 31)
    }

    @Test("An embedded type's field renamed while the migration sets the old name anew: both land")
    func embeddedNameReused() throws {
        let directory = TemporaryDirectory()
        do {
            let v1 = try open(directory, Self.contacts(1, address: [.scalar("name", .string)]))
            try v1.write {
                try $0.create(
                    "Contact",
                    [
                        "_id": "c1",
                        "address": .embedded(EmbeddedObject(type: "Address", fields: ["name": "Ada Lovelace"])),
                    ])
            }
            v1.close()
        }
        let schema = Self.contacts(
            2, address: [.scalar("fullName", .string), .scalar("name", .string, optional: true)])
        let v2 = try open(
            directory, schema,
            migration: Migration { migration in
                migration.renameProperty(onType: "Address", from: "name", to: "fullName")
                try migration.enumerateObjects("Contact") { _, new in
                    guard var address = new?["address"].embeddedValue else { return }
                    address["name"] = "Ada"
                    new?["address"] = .embedded(address)
                }
            })
        #expect(try field(v2, "c1", "fullName") == "Ada Lovelace")
        #expect(try field(v2, "c1", "name") == "Ada")
    }

    @Test("An embedded link whose target type changes does not carry its key to the new target")
    func embeddedLinkRetargeted() throws {
        let directory = TemporaryDirectory()
        func schema(_ version: UInt64, target: String) -> Schema {
            Schema(
                version: version,
                types: [
                    ObjectSchema(
                        name: "Contact",
                        properties: [.scalar("_id", .string), Property("address", .embedded("Address"))]),
                    .embedded("Address", properties: [.scalar("street", .string), Property("owner", .link(target))]),
                    ObjectSchema(name: "Person", properties: [.scalar("_id", .string)]),
                    ObjectSchema(name: "Team", properties: [.scalar("_id", .string)]),
                ])
        }
        do {
            let v1 = try open(directory, schema(1, target: "Person"))
            try v1.write { txn in
                try txn.create("Person", ["_id": "x"])
                try txn.create("Team", ["_id": "x"])
                try txn.create(
                    "Contact",
                    [
                        "_id": "c1",
                        "address": .embedded(
                            EmbeddedObject(type: "Address", fields: ["street": "s", "owner": .link(.string("x"))])),
                    ])
            }
            v1.close()
        }
        let v2 = try open(directory, schema(2, target: "Team"))
        #expect(try field(v2, "c1", "owner") == .null, "person x's key would name team x")
        #expect(try field(v2, "c1", "street") == "s")
    }

    @Test("A type made embedded has its own embedded fields renamed")
    func typeMadeEmbeddedCarriesRenamedFields() throws {
        let directory = TemporaryDirectory()
        func schema(_ version: UInt64, embedded: Bool, zip: String) -> Schema {
            Schema(
                version: version,
                types: [
                    ObjectSchema(
                        name: "Mall",
                        properties: [
                            .scalar("_id", .string), Property("shop", embedded ? .embedded("Shop") : .link("Shop")),
                        ]),
                    embedded
                        ? .embedded("Shop", properties: [Property("address", .embedded("Address"))])
                        : ObjectSchema(
                            name: "Shop",
                            properties: [.scalar("_id", .string), Property("address", .embedded("Address"))]),
                    .embedded("Address", properties: [.scalar("street", .string), .scalar(zip, .int, optional: true)]),
                ])
        }
        do {
            let v1 = try open(directory, schema(1, embedded: false, zip: "zip"))
            try v1.write { txn in
                try txn.create(
                    "Shop",
                    [
                        "_id": "s1",
                        "address": .embedded(
                            EmbeddedObject(type: "Address", fields: ["street": "1 Rue", "zip": 75001])),
                    ])
                try txn.create("Mall", ["_id": "m1", "shop": .link(.string("s1"))])
            }
            v1.close()
        }
        let v2 = try open(
            directory, schema(2, embedded: true, zip: "postcode"),
            migration: Migration {
                $0.renameProperty(onType: "Address", from: "zip", to: "postcode")
            })
        let address = try v2.object("Mall", primaryKey: .string("m1"))?["shop"].embeddedValue?["address"].embeddedValue
        #expect(address?["postcode"] == 75001)
        #expect(try v2.verify().passed)
    }

    @Test("An object deleted and created again with the same key holds only what the create gave it")
    func recreatedObjectStartsFresh() throws {
        let directory = TemporaryDirectory()
        try writeV1(directory)
        let schema = Self.contacts(2, address: Self.v1Address)
        let v2 = try open(
            directory, schema,
            migration: Migration { migration in
                try migration.enumerateObjects("Contact") { old, new in
                    guard let new, old.primaryKey == .string("c1") else { return }
                    migration.delete(new)
                    try migration.create(
                        "Contact",
                        [
                            "_id": "c1",
                            "address": .embedded(
                                EmbeddedObject(type: "Address", fields: ["street": "s", "city": "c"])),
                        ])
                }
            })
        #expect(try field(v2, "c1", "zip") == .null)
        #expect(try field(v2, "c1", "street") == "s")
    }

    // Renames of values a step set or copied, in types becoming embedded and in embedded lists.

    @Test("A type becoming embedded has its properties renamed in objects already enumerated")
    func renameOfTypeBecomingEmbedded() throws {
        let directory = TemporaryDirectory()
        do {
            let v1 = try open(
                directory,
                Schema(
                    version: 1,
                    types: [
                        ObjectSchema(
                            name: "Contact",
                            properties: [.scalar("_id", .string), Property("address", .link("Address"))]),
                        ObjectSchema(
                            name: "Address",
                            properties: [.scalar("_id", .string), .scalar("street", .string), .scalar("city", .string)]),
                    ]))
            try v1.write { txn in
                try txn.create("Address", ["_id": "a1", "street": "1 Main St", "city": "Paris"])
                try txn.create("Contact", ["_id": "c1", "address": .link(.string("a1"))])
            }
            v1.close()
        }
        let schema = Schema(
            version: 2,
            types: [
                ObjectSchema(
                    name: "Contact", properties: [.scalar("_id", .string), Property("address", .embedded("Address"))]),
                .embedded("Address", properties: [.scalar("road", .string), .scalar("city", .string)]),
            ])
        let v2 = try open(
            directory, schema,
            migration: Migration { migration in
                try migration.enumerateObjects("Address") { _, _ in }
                migration.renameProperty(onType: "Address", from: "street", to: "road")
            })
        #expect(try field(v2, "c1", "road") == "1 Main St")
        #expect(try v2.verify().passed)
    }

    @Test("An embedded field set by one step and renamed by a later one keeps the step's value")
    func embeddedRetypeThenRename() throws {
        let directory = TemporaryDirectory()
        try writeV1(directory)
        let schema = Self.contacts(
            3,
            address: [
                .scalar("street", .string), .scalar("city", .string), .scalar("postcode", .string, optional: true),
            ])
        let v3 = try open(
            directory, schema,
            migration: Migration(steps: [
                2: { migration in
                    try migration.enumerateObjects("Contact") { old, new in
                        guard var address = new?["address"].embeddedValue,
                            let zip = old["address"].embeddedValue?["zip"].intValue
                        else { return }
                        address["zip"] = .string(String(zip))
                        new?["address"] = .embedded(address)
                    }
                },
                3: { $0.renameProperty(onType: "Address", from: "zip", to: "postcode") },
            ]))
        #expect(try field(v3, "c1", "postcode") == "75001")
        #expect(
            try v3.object("Contact", primaryKey: .string("c1"))?["previous"].listValue?.first?.embeddedValue?[
                "postcode"] == .null,
            "an int zip the migration left is old data of another type")
        #expect(try v3.verify().passed)
    }

    @Test("An embedded list the migration reorders keeps each element's renamed field")
    func reorderedListThenRename() throws {
        let directory = TemporaryDirectory()
        do {
            let v1 = try open(directory, Self.contacts(1, address: Self.v1Address))
            try v1.write { txn in
                try txn.create(
                    "Contact",
                    [
                        "_id": "c1",
                        "previous": .list([
                            self.address("b", "B", 2), self.address("a", "A", 1), self.address("c", "C", 3),
                        ]),
                    ])
            }
            v1.close()
        }
        let schema = Self.contacts(
            3,
            address: [.scalar("street", .string), .scalar("city", .string), .scalar("postcode", .int, optional: true)])
        let v3 = try open(
            directory, schema,
            migration: Migration(steps: [
                2: { migration in
                    try migration.enumerateObjects("Contact") { _, new in
                        let sorted = (new?["previous"].listValue ?? []).sorted {
                            ($0.embeddedValue?["street"].stringValue ?? "")
                                < ($1.embeddedValue?["street"].stringValue ?? "")
                        }
                        new?["previous"] = .list(Array(sorted.prefix(2)))
                    }
                },
                3: { $0.renameProperty(onType: "Address", from: "zip", to: "postcode") },
            ]))
        let previous = try v3.object("Contact", primaryKey: .string("c1"))?["previous"].listValue ?? []
        #expect(previous.map { $0.embeddedValue?["street"] } == ["a", "b"])
        #expect(previous.map { $0.embeddedValue?["postcode"] } == [1, 2])
    }

    @Test("Old embedded values copied into a created object are renamed as the migration says")
    func copiedOldEmbeddedValues() throws {
        let directory = TemporaryDirectory()
        try writeV1(directory)
        let schema = Self.contacts(
            2,
            address: [.scalar("street", .string), .scalar("city", .string), .scalar("postcode", .int, optional: true)])
        let v2 = try open(
            directory, schema,
            migration: Migration { migration in
                migration.renameProperty(onType: "Address", from: "zip", to: "postcode")
                try migration.enumerateObjects("Contact") { old, new in
                    guard let new, old.primaryKey == .string("c2") else { return }
                    migration.delete(new)
                    try migration.create("Contact", ["_id": "c2-copy", "address": old["address"]])
                }
            })
        #expect(try field(v2, "c2-copy", "postcode") == 150)
        #expect(try v2.object("Contact", primaryKey: .string("c2")) == nil)
    }

    @Test("A value a step set on a property a later step renames moves with it, even when the old name stays")
    func laterRenameMovesAStepsValue() throws {
        let directory = TemporaryDirectory()
        func schema(_ version: UInt64, _ names: [String]) -> Schema {
            Schema(
                version: version,
                types: [
                    ObjectSchema(name: "Book", properties: [.scalar("_id", .int)] + names.map { .scalar($0, .string) })
                ])
        }
        do {
            let v1 = try open(directory, schema(1, ["title", "subtitle"]))
            try v1.write { try $0.create("Book", ["_id": 1, "title": "  Dune ", "subtitle": "A novel"]) }
            v1.close()
        }
        let v3 = try open(
            directory, schema(3, ["heading", "title"]),
            migration: Migration(steps: [
                2: { migration in
                    try migration.enumerateObjects("Book") { old, new in
                        new?["title"] = .string(old["title"].stringValue!.trimmingCharacters(in: .whitespaces))
                    }
                },
                3: { migration in
                    migration.renameProperty(onType: "Book", from: "title", to: "heading")
                    migration.renameProperty(onType: "Book", from: "subtitle", to: "title")
                },
            ]))
        #expect(try v3.object("Book", primaryKey: .int(1))?["heading"] == "Dune")
        #expect(try v3.object("Book", primaryKey: .int(1))?["title"] == "A novel")
    }

    @Test("A shift of an embedded type's names asked after enumerating its parents fails, saying to ask first")
    func lateEmbeddedShiftFails() throws {
        let directory = TemporaryDirectory()
        try writeV1(directory)
        let schema = Self.contacts(
            2, address: [.scalar("city", .string), .scalar("town", .string), .scalar("zip", .int, optional: true)])
        #expect {
            _ = try open(
                directory, schema,
                migration: Migration { migration in
                    try migration.enumerateObjects("Contact") { _, _ in }
                    migration.renameProperty(onType: "Address", from: "city", to: "town")
                    migration.renameProperty(onType: "Address", from: "street", to: "city")
                })
        } throws: { error in
            guard let error = error as? TributaryError, error.code == .migrationFailed else { return false }
            return error.message.contains("before enumerating")
        }
        let v2 = try open(
            directory, schema,
            migration: Migration { migration in
                migration.renameProperty(onType: "Address", from: "city", to: "town")
                migration.renameProperty(onType: "Address", from: "street", to: "city")
            })
        #expect(try field(v2, "c1", "town") == "Paris")
        #expect(try field(v2, "c1", "city") == "1 Main St")
    }

    // Late renames of reused names and of links.

    @Test(
        "A late rename of a name an earlier rename reused moves the right value: title to heading, subtitle to title, then title to label"
    )
    func lateRenameOfReusedName() throws {
        let directory = TemporaryDirectory()
        do {
            let v1 = try open(
                directory, Self.contacts(1, address: [.scalar("title", .string), .scalar("subtitle", .string)]))
            try v1.write {
                try $0.create(
                    "Contact",
                    [
                        "_id": "c1",
                        "address": .embedded(EmbeddedObject(type: "Address", fields: ["title": "T", "subtitle": "S"])),
                    ])
            }
            v1.close()
        }
        let schema = Self.contacts(5, address: [.scalar("heading", .string), .scalar("label", .string)])
        let v5 = try open(
            directory, schema,
            migration: Migration(steps: [
                2: { $0.renameProperty(onType: "Address", from: "title", to: "heading") },
                3: { $0.renameProperty(onType: "Address", from: "subtitle", to: "title") },
                4: { migration in try migration.enumerateObjects("Contact") { _, _ in } },
                5: { $0.renameProperty(onType: "Address", from: "title", to: "label") },
            ]))
        #expect(try field(v5, "c1", "heading") == "T")
        #expect(try field(v5, "c1", "label") == "S")
        #expect(try v5.verify().passed)
    }

    @Test("A late rename onto a link to another type does not carry the old key")
    func lateRenameOfRetargetedLink() throws {
        let directory = TemporaryDirectory()
        func schema(_ version: UInt64, _ link: Property) -> Schema {
            Schema(
                version: version,
                types: [
                    ObjectSchema(
                        name: "Contact",
                        properties: [.scalar("_id", .string), Property("address", .embedded("Address"))]),
                    .embedded("Address", properties: [.scalar("street", .string), link]),
                    ObjectSchema(name: "Person", properties: [.scalar("_id", .string)]),
                    ObjectSchema(name: "Account", properties: [.scalar("_id", .string)]),
                ])
        }
        do {
            let v1 = try open(directory, schema(1, Property("owner", .link("Person"))))
            try v1.write { txn in
                try txn.create("Person", ["_id": "x"])
                try txn.create("Account", ["_id": "x"])
                try txn.create(
                    "Contact",
                    [
                        "_id": "c1",
                        "address": .embedded(
                            EmbeddedObject(type: "Address", fields: ["street": "s", "owner": .link(.string("x"))])),
                    ])
            }
            v1.close()
        }
        let v2 = try open(
            directory, schema(2, Property("holder", .link("Account"))),
            migration: Migration { migration in
                try migration.enumerateObjects("Contact") { _, _ in }
                migration.renameProperty(onType: "Address", from: "owner", to: "holder")
            })
        #expect(try field(v2, "c1", "holder") == .null, "person x's key would name account x")
    }
}
