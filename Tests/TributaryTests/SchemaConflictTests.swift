import Foundation
import Testing
import TributaryMerge
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// Rule 8 when two replicas define one property with different shapes: the later definition is the property's on
/// every replica, whatever the order they merge in; values written under the other stay aside in each object, and
/// show again when a later definition of their shape comes. Nothing is refused.
@Suite("Schema conflicts resolve by stamp (rule 8)")
struct SchemaConflictTests {
    static let schema = Schema(
        version: 1,
        types: [ObjectSchema(name: "Task", properties: [.scalar("_id", .string), .scalar("title", .string)])])

    /// Replica 0 adds `priority` as an int and sets it on `a`; replica 1, a moment later, adds it as a string and
    /// sets it on `b`. Both objects exist everywhere before.
    func conflictingReleases() throws -> Cluster {
        let cluster = try Cluster(4, schema: Self.schema)
        try cluster[0].write { txn in
            _ = try txn.create("Task", ["_id": "a", "title": "first"])
            _ = try txn.create("Task", ["_id": "b", "title": "second"])
        }
        try cluster.syncAll()
        try cluster.definePriorityTwoWays()
        return cluster
    }

    @Test("Conflicting definitions merge in either order to the later one, refusing nothing")
    func laterDefinitionWins() throws {
        let cluster = try conflictingReleases()
        // Replica 2 merges the int first, replica 3 the string first.
        for (target, order) in [(2, [0, 1]), (3, [1, 0])] {
            for source in order { #expect(try cluster.send(from: source, to: target).rejected.isEmpty) }
        }
        let intFirst = try cluster.send(from: 0, to: 1)
        #expect(intFirst.rejected.isEmpty, "\(intFirst)")
        let stringAfter = try cluster.send(from: 1, to: 0)
        #expect(stringAfter.rejected.isEmpty, "\(stringAfter)")
        // Replica 0 held the int: the string's arrival is a conflict the report names, with the value set aside.
        let conflict = try #require(stringAfter.schemaConflicts.first)
        #expect(conflict.definition == .scalar("priority", .string, optional: true))
        #expect(conflict.losing.map(\.property) == [.scalar("priority", .int, optional: true)])
        #expect(conflict.objectsWithValuesAside == 1)
        #expect(conflict.description.contains("'Task.priority' is string?"), "\(conflict)")
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            #expect(replica.schema[type: "Task"]?[property: "priority"] == .scalar("priority", .string, optional: true))
            #expect(try replica.object("Task", primaryKey: .string("b"))?["priority"] == "high")
            // The int written under the losing definition does not show.
            #expect(try replica.object("Task", primaryKey: .string("a"))?["priority"] == .null)
            #expect(try replica.verify().passed)
            #expect(try replica.summary().schemaConflicts.map(\.objectsWithValuesAside) == [1])
        }
    }

    @Test("Values written under a losing definition after the conflict keep their shape, on every replica")
    func writesUnderTheLosingDefinitionStayAside() throws {
        let cluster = try conflictingReleases()
        // Replica 0 has not heard of the string yet: it goes on writing ints.
        try cluster[0].write { try $0.update("Task", primaryKey: .string("b"), ["priority": 7]) }
        for (target, order) in [(2, [0, 1]), (3, [1, 0])] {
            for source in order { #expect(try cluster.send(from: source, to: target).rejected.isEmpty) }
        }
        try cluster.syncAll()
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            // `b` shows its string: the later int went aside, as the int written on `a` did.
            #expect(try replica.object("Task", primaryKey: .string("b"))?["priority"] == "high")
            #expect(try replica.object("Task", primaryKey: .string("a"))?["priority"] == .null)
        }
    }

    @Test("A later definition of the losing shape brings its values back, in any order")
    func laterDefinitionOfTheOtherShapeShowsItsValues() throws {
        let cluster = try conflictingReleases()
        try cluster.syncAll()
        // A release that defines priority as an int again, later than both.
        cluster.advanceClocks(byMilliseconds: 5)
        try cluster[2].write { txn in
            try txn.emit(.redefineProperty(type: "Task", .scalar("priority", .int, optional: true, indexed: true)))
        }
        #expect(cluster[2].schema[type: "Task"]?[property: "priority"]?.shape.description == "int?")
        try cluster.syncAll()
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            #expect(try replica.object("Task", primaryKey: .string("a"))?["priority"] == 3)
            // The string on `b` goes aside in its turn.
            #expect(try replica.object("Task", primaryKey: .string("b"))?["priority"] == .null)
            #expect(try replica.objects("Task", where: "priority == 3").count == 1)
            #expect(try replica.verify().passed)
        }
    }

    @Test("A rename onto a name added concurrently with another shape keeps both states, the later one showing")
    func renameOntoAnotherShape() throws {
        let cluster = try Cluster(
            3,
            schema: Schema(
                version: 1,
                types: [
                    ObjectSchema(
                        name: "Task",
                        properties: [.scalar("_id", .string), .scalar("notes", .string, optional: true)])
                ]))
        try cluster[0].write { try $0.create("Task", ["_id": "t", "notes": "written before"]) }
        try cluster.syncAll()
        try cluster[0].write { try $0.emit(.renameProperty(type: "Task", from: "notes", to: "priority")) }
        cluster.advanceClocks(byMilliseconds: 5)
        try cluster[1].write { txn in
            try txn.emit(.addProperty(type: "Task", .scalar("priority", .int, optional: true)))
            try txn.update("Task", primaryKey: .string("t"), ["priority": 2])
        }
        #expect(try cluster.send(from: 0, to: 2).rejected.isEmpty)
        #expect(try cluster.send(from: 1, to: 2).rejected.isEmpty)
        #expect(try cluster.send(from: 1, to: 0).rejected.isEmpty)
        #expect(try cluster.send(from: 0, to: 1).rejected.isEmpty)
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            // The addition is later than the renamed property's definition.
            #expect(try replica.object("Task", primaryKey: .string("t"))?["priority"] == 2)
            #expect(replica.schema[type: "Task"]?[property: "notes"] == nil)
        }
    }

    @Test("A property of an embedded type defined with two shapes: values in embedded objects go aside alike")
    func embeddedObjectValues() throws {
        let schema = Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: "Task", properties: [.scalar("_id", .string), Property("place", .embedded("Place"))]),
                ObjectSchema(name: "Place", embedded: true, properties: [.scalar("city", .string, optional: true)]),
            ])
        let cluster = try Cluster(4, schema: schema)
        try cluster[0].write { txn in
            for key in ["a", "b"] { _ = try txn.create("Task", ["_id": .string(key)]) }
        }
        try cluster.syncAll()
        func place(_ zip: Value) -> Value {
            .embedded(EmbeddedObject(type: "Place", fields: ["city": "Oslo", "zip": zip]))
        }
        try cluster[0].write { txn in
            try txn.emit(.addProperty(type: "Place", .scalar("zip", .int, optional: true)))
            try txn.update("Task", primaryKey: .string("a"), ["place": place(150)])
        }
        cluster.advanceClocks(byMilliseconds: 5)
        try cluster[1].write { txn in
            try txn.emit(.addProperty(type: "Place", .scalar("zip", .string, optional: true)))
            try txn.update("Task", primaryKey: .string("b"), ["place": place("0150")])
        }
        for (target, order) in [(2, [0, 1]), (3, [1, 0])] {
            for source in order {
                let report = try cluster.send(from: source, to: target)
                #expect(report.rejected.isEmpty, "\(report)")
            }
        }
        try cluster.syncAll()
        #expect(try cluster.converged())
        for replica in cluster.replicas {
            let a = try replica.object("Task", primaryKey: .string("a"))?["place"].embeddedValue
            let b = try replica.object("Task", primaryKey: .string("b"))?["place"].embeddedValue
            #expect(a?["city"] == "Oslo")
            #expect(a?["zip"] == .null)
            #expect(b?["zip"] == "0150")
            #expect(try replica.verify().passed)
            // Task `a` holds the place whose zip went aside.
            #expect(try replica.summary().schemaConflicts.map(\.objectsWithValuesAside) == [1])
        }
    }

    @Test("A field a flexible-sync session may not read is sent with none of its states, those aside included")
    func redactionTakesStatesAside() throws {
        let rules = try PermissionRules(
            json: Array(
                #"""
                [{"collection": "Task", "roles": [{"name": "reader", "apply_when": {},
                   "document_filters": {"read": {}, "write": {}}, "read": false, "write": false,
                   "fields": {"title": {"read": true}}, "additional_fields": {"read": false, "write": false}}]}]
                """#.utf8))
        var view = FlexibleSessionView()
        view.setPermissions(rules.permissions(for: RuleUser(id: "ann")))
        let stamp = Stamp(time: HybridTime(rawValue: 7), replica: ReplicaID(rawValue: 1))
        var fields = FieldTable()
        fields["title"] = .register(Register(value: .scalar("visible"), stamp: stamp))
        fields["priority"] = .register(Register(value: .scalar("high"), stamp: stamp))
        fields["priority", shape: Property.scalar("", .int, optional: true).shape] =
            .register(Register(value: .scalar(.int(3)), stamp: stamp))
        let sent = try ObjectRecord(
            decoding: view.redacted(ObjectRecord(exists: true, fields: fields).encoded(), of: "Task"))
        #expect(sent.fields.names == ["title"])
        #expect(sent.fields.sideFields.isEmpty)
    }

    @Test("Shape notes and states kept aside survive encoding, and damaged ones are refused")
    func encodings() throws {
        let notes = ShapeNotes([
            .init(
                PropertyName(type: "Task", property: "priority"), from: 0,
                Property.scalar("", .int, optional: true).shape),
            .init(
                PropertyName(type: "Task", property: "priority"), from: 3,
                Property("", .scalar(.string), list: true).shape),
        ])
        #expect(notes.shape(of: "priority", in: "Task", at: 2)?.description == "int?")
        #expect(notes.shape(of: "priority", in: "Task", at: 3)?.description == "list<string>")
        #expect(notes.shape(of: "title", in: "Task", at: 3) == nil)
        let changeset = Changeset(
            origin: ReplicaID(rawValue: 9), originSequence: 1, time: HybridTime(rawValue: 1 << 20),
            context: VersionVector(), schemaVersion: 1,
            instructions: [.set(FieldPath(type: "Task", primaryKey: .string("t"), property: "priority"), .int(1))],
            shapeNotes: notes)
        #expect(try ChangesetCodec.decode(ChangesetCodec.encode(changeset)) == changeset)

        var fields = FieldTable()
        fields["priority"] = .register(
            Register(
                value: .scalar("high"), stamp: Stamp(time: HybridTime(rawValue: 7), replica: ReplicaID(rawValue: 1))))
        fields["priority", shape: Property.scalar("", .int, optional: true).shape] =
            .register(
                Register(
                    value: .scalar(.int(3)),
                    stamp: Stamp(time: HybridTime(rawValue: 5), replica: ReplicaID(rawValue: 2))))
        let record = ObjectRecord(exists: true, fields: fields)
        let bytes = record.encoded()
        #expect(try ObjectRecord(decoding: bytes) == record)
        // The flag says states aside follow: without them the record is damaged, and says so.
        var truncated = bytes
        truncated[1] = 1
        #expect(throws: ChangesetDecodingError.self) { try ObjectRecord(decoding: truncated) }
    }
}
