import Foundation
import Testing
import TributaryModel
import TributaryStorage
import TributaryTestSupport

@testable import Tributary

/// Order independence of defaults and schema changes: list and embedded-object defaults, required properties added
/// concurrently with embedded writes, types declaring both names of a rename, and copies of a type change. Each shape
/// is merged in both orders and must end the same.
extension MergeSemanticsTests {
    /// What a migration that changes `Task.notes` to `kind` emits: a removal and an addition of the property.
    func changeNotesType(to kind: ScalarType) -> (Transaction) throws -> Void {
        { txn in
            try txn.emit(.removeProperty(type: "Task", name: "notes"))
            try txn.emit(.addProperty(type: "Task", .scalar("notes", kind, optional: true)))
        }
    }

    @Test(
        "Rule 3: a list or embedded-object default that a create carries is left out, so it merges alike in any order")
    func listAndEmbeddedDefaultsAreLeftOut() throws {
        let cluster = try cluster(4)
        try cluster.syncAll()
        let reasons = try mergeConcurrently(
            cluster,
            { txn in try txn.create("Task", ["_id": "t", "tags": ["x"]]) },
            { txn in
                // What an earlier build (or a schema with such defaults) sent: defaults with their writer's ids.
                try txn.emit(
                    .create(
                        type: "Task", primaryKey: task, fields: [],
                        defaults: [
                            FieldValue(
                                "location", .embedded(EmbeddedObject(type: "Location", fields: ["city": "Oslo"]))),
                            FieldValue("tags", ["d"]),
                        ]))
                #expect(try txn.object("Task", primaryKey: task)?["tags"] == [])
                #expect(try txn.object("Task", primaryKey: task)?["location"] == .null)
            })
        #expect(reasons.isEmpty, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            // The explicit list stands alone (a default never beats a value written), and no embedded default appears.
            #expect(try value(replica, "tags") == ["x"])
            #expect(try value(replica, "location") == .null)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 3: a schema declares no list default but [] and no embedded default, naming the property")
    func schemasRefuseListAndEmbeddedDefaults() throws {
        func schema(_ property: Property) throws -> Schema {
            var schema = Self.schema
            var task = try #require(schema[type: "Task"])
            task.properties.append(property)
            schema.upsert(task)
            return schema
        }
        for property in [
            Property("labels", .scalar(.string), list: true, default: ["a"]),
            Property("place", .embedded("Location"), default: .embedded(EmbeddedObject(type: "Location", fields: [:]))),
        ] {
            // The merged schema an earlier build stored may hold one: only a declaration is refused.
            try schema(property).validate()
            #expect {
                try schema(property).validateDeclaration()
            } throws: { error in
                let error = error as? SchemaError
                return error?.code == .invalidDefault && error?.message.contains("Task.\(property.name)") == true
            }
        }
        try schema(Property("labels", .scalar(.string), list: true, default: [])).validateDeclaration()
        let replica = try cluster(1)[0]
        #expect(throws: TributaryError.self) {
            try replica.write { txn in
                try txn.addProperty(Property("labels", .scalar(.string), list: true, default: ["a"]), to: "Task")
            }
        }
        #expect(replica.schema[type: "Task"]?[property: "labels"] == nil)
    }

    @Test(
        "Rule 8: an embedded object written concurrently with a required property added to its type is integrated, in either order"
    )
    func embeddedWriteConcurrentWithARequiredPropertyIsIntegrated() throws {
        let (cluster, reasons) = try mergeInBothOrders(
            // A later release adds a required property without a default to the embedded type (a migration may).
            { try $0.emit(.addProperty(type: "Location", .scalar("zip", .string))) },
            { txn in
                try txn.update(
                    "Task", primaryKey: task,
                    ["location": .embedded(EmbeddedObject(type: "Location", fields: ["city": "Oslo"]))])
            })
        #expect(reasons.allSatisfy { $0.isEmpty }, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            // The field the writer did not know reads as for an object created before its property existed.
            #expect(
                try value(replica, "location")
                    == .embedded(EmbeddedObject(type: "Location", fields: ["city": "Oslo", "floor": .null, "zip": ""])))
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test(
        "Rule 8: a type declared with both a property and its new name, concurrently with the rename, defines it alike in either order"
    )
    func typeDeclaringBothNamesOfARenameMergesAlike() throws {
        let (cluster, reasons) = try mergeInBothOrders(
            { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) },
            { txn in
                // A release that declares both names (the new one indexed), added whole without having seen the rename.
                var task = try #require(txn.schema[type: "Task"])
                task.properties.append(.scalar("details", .string, optional: true, indexed: true))
                try txn.emit(.addType(task))
            })
        #expect(reasons.allSatisfy { $0.isEmpty }, "\(reasons)")
        try cluster.syncAll()
        let details = cluster.replicas.map { $0.schema[type: "Task"]?[property: "details"] }
        #expect(details[0] != nil)
        #expect(Set(details).count == 1, "\(details)")
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "notes"] == nil)
            #expect(try value(replica, "details") == "before")
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 3: a definition from an earlier build with a list default merges without it, and schema changes go on")
    func earlierBuildsListDefaultIsDroppedByTheMerge() throws {
        let cluster = try cluster(2)
        try cluster[0].write { txn in
            // What an earlier build's schema declared and sent.
            try txn.emit(.addProperty(type: "Task", Property("labels", .scalar(.string), list: true, default: ["a"])))
            try txn.emit(
                .addProperty(
                    type: "Person",
                    Property(
                        "home", .embedded("Location"),
                        default: .embedded(EmbeddedObject(type: "Location", fields: ["city": "Oslo"])))))
            try txn.create("Task", ["_id": "t"])
        }
        #expect(try cluster.send(from: 0, to: 1).rejected.isEmpty)
        for replica in cluster.replicas {
            #expect(
                replica.schema[type: "Task"]?[property: "labels"] == Property("labels", .scalar(.string), list: true))
            #expect(replica.schema[type: "Person"]?[property: "home"] == Property("home", .embedded("Location")))
            #expect(try value(replica, "labels") == [])
        }
        // Later schema changes, from either side, are integrated.
        try cluster[1].write { try $0.addProperty(.scalar("rank", .int, optional: true), to: "Task") }
        try cluster[0].write { try $0.addProperty(.scalar("due", .date, optional: true), to: "Task") }
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "rank"] != nil)
            #expect(replica.schema[type: "Task"]?[property: "due"] != nil)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test("Rule 3: a null default of a list is left out, also where a concurrent rename takes it, in either order")
    func nullListDefaultIsLeftOutWhereARenameTakesIt() throws {
        let cluster = try cluster(4)
        try cluster[0].write {
            try $0.addProperty(Property("old", .scalar(.string), list: true, default: .null), to: "Task")
        }
        try cluster.syncAll()
        cluster.advanceClocks(byMilliseconds: 10)
        let reasons = try mergeConcurrently(
            cluster,
            { try $0.emit(.renameProperty(type: "Task", from: "old", to: "new")) },
            { txn in
                // A release that declares `new` as well, and creates an object with a value for it; the create
                // carries the null default of `old`, as the writer's schema has it.
                try txn.addProperty(Property("new", .scalar(.string), list: true), to: "Task")
                try txn.emit(
                    .create(
                        type: "Task", primaryKey: .string("x"), fields: [FieldValue("new", ["a"])],
                        defaults: [FieldValue("old", .null)]))
            })
        #expect(reasons.isEmpty, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(try value(replica, "new", key: .string("x")) == ["a"])
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test(
        "Rule 8: a type declaring a rename's old and new names with different kinds ends with the later definition, in either order"
    )
    func typeDeclaringBothNamesWithDifferentKindsResolves() throws {
        let (cluster, reasons) = try mergeInBothOrders(
            { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "details")) },
            { txn in
                var task = try #require(txn.schema[type: "Task"])
                task.properties.append(.scalar("details", .uuid, optional: true))
                try txn.emit(.addType(task))
            })
        #expect(reasons.allSatisfy { $0.isEmpty }, "\(reasons)")
        try cluster.syncAll()
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            // Where the rename lands `notes` on `details`, the type defines `details` twice, in one changeset: the
            // definition whose description sorts first stands (a string's before a uuid's), the other loses.
            #expect(replica.schema[type: "Task"]?[property: "details"]?.typeDescription == "string?")
            #expect(
                replica.schema.losingDefinitions(of: "details", in: "Task").map(\.property.typeDescription) == ["uuid?"]
            )
            #expect(try replica.verify().passed)
        }
    }

    @Test(
        "Rule 8: an embedded object inserted into a list concurrently with a required property added to its type is integrated, in either order"
    )
    func embeddedInsertConcurrentWithARequiredPropertyIsIntegrated() throws {
        let (cluster, reasons) = try mergeInBothOrders(
            { try $0.emit(.addProperty(type: "Step", .scalar("due", .string))) },
            { txn in
                try txn.insert(
                    .embedded(EmbeddedObject(type: "Step", fields: ["text": "call"])), at: 0, into: ["steps"],
                    of: "Task", primaryKey: task)
            })
        #expect(reasons.allSatisfy { $0.isEmpty }, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(try value(replica, "steps")?.listValue?.first?.embeddedValue?["due"] == "")
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test(
        "Rule 3: a null default of a scalar stays, in either order, when its name is used again for a list after a concurrent rename"
    )
    func nullDefaultOfARenamedScalarStaysWhenItsNameIsAListAgain() throws {
        let cluster = try cluster(4)
        try cluster[0].write { try $0.addProperty(.scalar("a", .string, optional: true, default: .null), to: "Task") }
        try cluster.syncAll()
        cluster.advanceClocks(byMilliseconds: 10)
        let reasons = try mergeConcurrently(
            cluster,
            { txn in
                // A migration renames `a`, and a later one uses the name again, for a list.
                try txn.emit(.renameProperty(type: "Task", from: "a", to: "b"))
                try txn.addProperty(Property("a", .scalar(.string), list: true), to: "Task")
            },
            { txn in try txn.create("Task", ["_id": "x"]) })
        #expect(reasons.isEmpty, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(try value(replica, "a", key: .string("x")) == [])
            #expect(try replica.verify().passed)
        }
        // The create's null default of `a` followed the rename to `b` everywhere, or nowhere.
        #expect(try cluster.converged())
    }

    @Test(
        "Rule 3: an app that removed a list default an earlier build stored in its declaration opens without a migration"
    )
    func declarationWithoutAnEarlierListDefaultOpens() throws {
        let directory = TemporaryDirectory("declared-default")
        var configuration = Replica.Configuration()
        configuration.durability = .none
        do {
            let replica = try Replica.open(directory: directory.path, schema: Self.schema, configuration: configuration)
            // What an earlier build stored as the app's declaration: `tags` with a default.
            var declared = Self.schema
            var task = try #require(declared[type: "Task"])
            let index = try #require(task.properties.firstIndex { $0.name == "tags" })
            task.properties[index].defaultValue = ["a"]
            declared.upsert(task)
            var writer = BinaryWriter()
            writer.schema(declared)
            try replica.environment.write {
                try $0.put(replica.identity, key: Replica.declaredSchemaKey, value: writer.bytes)
            }
            replica.close()
        }
        let reopened = try Replica.open(directory: directory.path, schema: Self.schema, configuration: configuration)
        defer { reopened.close() }
        // Opened (no `migrationRequired`), with the schema the app declares.
        #expect(reopened.schema[type: "Task"] == Self.schema[type: "Task"])
        #expect(try reopened.verify().passed)
    }

    @Test(
        "Rule 8: one migration changing a property's type, run on two replicas, keeps the property and what both wrote, in either order"
    )
    func copiesOfATypeChangeKeepTheProperty() throws {
        func migration(_ value: Int64, _ key: String) -> (Transaction) throws -> Void {
            { txn in
                // What a migration that changes `notes` from string to int emits: a removal and an addition, then
                // the values it converts.
                try txn.emit(.removeProperty(type: "Task", name: "notes"))
                try txn.emit(.addProperty(type: "Task", .scalar("notes", .int, optional: true)))
                try txn.update("Task", primaryKey: self.task, ["notes": .int(value)])
                try txn.create("Task", ["_id": .string(key), "notes": .int(value)])
            }
        }
        let (cluster, reasons) = try mergeInBothOrders(migration(1, "a"), migration(2, "b"))
        #expect(reasons.allSatisfy { $0.isEmpty }, "\(reasons)")
        try cluster.syncAll()
        let notes = try cluster.replicas.map { try value($0, "notes") }
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "notes"] == .scalar("notes", .int, optional: true))
            #expect(try value(replica, "notes", key: .string("a")) == 1)
            #expect(try value(replica, "notes", key: .string("b")) == 2)
            #expect(try replica.verify().passed)
        }
        // The task's value is one of the two, the same everywhere.
        #expect(notes[0] == 1 || notes[0] == 2)
        #expect(try cluster.converged())
    }

    @Test(
        "Rule 8: two successive changes of a property's type, each run on two replicas, keep the property and what the later ones wrote",
        arguments: [false, true])
    func successiveTypeChangesOnTwoReplicas(inOneChangeset: Bool) throws {
        func typeChange(to kind: ScalarType, _ value: Value, _ key: String) -> (Transaction) throws -> Void {
            { txn in
                try self.changeNotesType(to: kind)(txn)
                try txn.create("Task", ["_id": .string(key), "notes": value])
            }
        }
        let cluster = try cluster(4)
        try seed(cluster, ["notes": "before"])
        for (replica, values) in [(0, [(1, "a2"), (1.5, "a3")]), (1, [(2, "b2"), (2.5, "b3")])]
            as [(Int, [(Value, String)])]
        {
            if inOneChangeset {
                try cluster[replica].write { txn in
                    try typeChange(to: .int, values[0].0, values[0].1)(txn)
                    try typeChange(to: .double, values[1].0, values[1].1)(txn)
                }
            } else {
                try cluster[replica].write(typeChange(to: .int, values[0].0, values[0].1))
                try cluster[replica].write(typeChange(to: .double, values[1].0, values[1].1))
            }
        }
        let reasons = try cluster.deliver([(0, [1]), (1, [0]), (2, [0, 1]), (3, [1, 0])])
        #expect(reasons.isEmpty, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "notes"] == .scalar("notes", .double, optional: true))
            #expect(try value(replica, "notes", key: .string("a3")) == 1.5)
            #expect(try value(replica, "notes", key: .string("b3")) == 2.5)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test(
        "Rule 8: a write that saw one copy of a property's removal is dropped by a later removal of the other copy's changeset, in any order"
    )
    func laterRemovalInTheCopysChangesetDropsTheWrite() throws {
        let cluster = try cluster(4)
        try seed(cluster, ["notes": "before"])
        let typeChange = changeNotesType(to: .int)
        try cluster[0].write(typeChange)
        // Replica 1 changes the property three times in one changeset (its first removal is a copy of replica 0's).
        try cluster[1].write { txn in for _ in 0..<3 { try typeChange(txn) } }
        // Replica 2 saw replica 0's change only, and writes the property.
        #expect(try cluster.send(from: 0, to: 2).rejected.isEmpty)
        try cluster[2].write { try $0.update("Task", primaryKey: self.task, ["notes": 5]) }
        // Replica 3 merges the write before replica 1's changeset; replica 0 after it.
        let reasons = try cluster.deliver([(3, [0, 2, 1]), (0, [1, 2]), (1, [0, 2]), (2, [1])])
        #expect(reasons.isEmpty, "\(reasons)")
        for replica in cluster.replicas {
            // Replica 1's second removal, which the write did not see, drops it.
            #expect(replica.schema[type: "Task"]?[property: "notes"] == .scalar("notes", .int, optional: true))
            #expect(try value(replica, "notes") == .null)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test(
        "Rule 8: a rename of a property that one copy of a type change added back does not disagree with the other copy, in any order"
    )
    func renameAfterOneCopyOfATypeChangeMerges() throws {
        let cluster = try cluster(4)
        try seed(cluster, ["notes": "before"])
        let typeChange = changeNotesType(to: .int)
        try cluster[0].write { txn in
            try typeChange(txn)
            try txn.update("Task", primaryKey: self.task, ["notes": 1])
        }
        // The next release's migration, on replica 0 only, before it hears of replica 1's copy.
        try cluster[0].write { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "remarks")) }
        try cluster[1].write { txn in
            try typeChange(txn)
            try txn.create("Task", ["_id": "y", "notes": 2])
        }
        let reasons = try cluster.deliver([(0, [1]), (1, [0]), (2, [0, 1]), (3, [1, 0])])
        #expect(reasons.isEmpty, "\(reasons)")
        try cluster.syncAll()
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "notes"] == nil)
            #expect(replica.schema[type: "Task"]?[property: "remarks"] == .scalar("remarks", .int, optional: true))
            #expect(try value(replica, "remarks") == 1)
            #expect(try value(replica, "remarks", key: .string("y")) == 2)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }
}
