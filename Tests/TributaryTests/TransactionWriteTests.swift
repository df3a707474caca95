import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// What the dynamic write API sends, and that a method that throws has changed nothing.
@Suite("Transaction writes")
struct TransactionWriteTests {
    let task = PrimaryKey.string("t")

    @Test(
        "An update of an embedded object that leaves out a required field with a default sets the default, which peers integrate"
    )
    func embeddedUpdateLeavingOutARequiredFieldSetsItsDefault() throws {
        let cluster = try Cluster(2, schema: MergeSemanticsTests.schema)
        try cluster[0].write { txn in
            try txn.create(
                "Task",
                ["_id": "t", "steps": [.embedded(EmbeddedObject(type: "Step", fields: ["text": "a", "done": true]))]])
        }
        try cluster.syncAll()
        // `Step.done` is required with the default false; the new value does not give it.
        try cluster[0].write { txn in
            try txn.update(
                "Task", primaryKey: task, ["steps": [.embedded(EmbeddedObject(type: "Step", fields: ["text": "b"]))]])
        }
        #expect(try cluster.send(from: 0, to: 1).rejected.isEmpty)
        for replica in cluster.replicas {
            let step = try replica.object("Task", primaryKey: task)?["steps"].listValue?.first?.embeddedValue
            #expect(step?["text"] == "b")
            #expect(step?["done"] == false)
            #expect(try replica.verify().passed)
        }
        #expect(try cluster.converged())
    }

    @Test(
        "An update compares with the values a read gives: links to deleted objects read as absent, so giving what a read shows writes nothing"
    )
    func updateComparesWithWhatAReadGives() throws {
        let replica = try Replica.open(
            directory: TemporaryDirectory("update-read-values").path, schema: Fixtures.chatSchema,
            configuration: {
                var configuration = Replica.Configuration()
                configuration.durability = .none
                return configuration
            }())
        defer { replica.close() }
        let (one, two, three) = (PrimaryKey.string("u1"), PrimaryKey.string("u2"), PrimaryKey.string("u3"))
        try replica.write { txn in
            for key in [one, two, three] { try txn.create("User", ["_id": key.value, "name": "n"]) }
            try txn.update("User", primaryKey: one, ["friends": [.link(two), .link(three)]])
            try txn.create(
                "ChatMessage",
                [
                    "_id": "m", "author": "u3", "text": "t", "timestamp": .date(Date(timeIntervalSince1970: 0)),
                    "conversationID": "c", "sender": .link(three),
                ])
            _ = try txn.delete("User", primaryKey: three)
        }
        let before = replica.lastLocalSequence
        try replica.write { txn in
            try txn.update("User", primaryKey: one, ["friends": [.link(two)], "name": "n"])
            try txn.update("ChatMessage", primaryKey: .string("m"), ["sender": .null])
        }
        #expect(replica.lastLocalSequence == before)
        // A value that differs from the read is written, and only it.
        try replica.write { txn in
            try txn.update("User", primaryKey: one, ["friends": [.link(two)], "age": 5])
        }
        #expect(replica.lastLocalSequence == before + 1)
        let changeset = try #require(try replica.changesets(missingFrom: VersionVector()).last)
        #expect(changeset.instructions.count == 1)
        #expect(try replica.object("User", primaryKey: one)?["age"] == 5)
        #expect(try replica.object("User", primaryKey: one)?["friends"] == .list([.link(two)]))
    }

    @Test("An update that throws on one of its values writes none of them")
    func updateThatThrowsWritesNothing() throws {
        let cluster = try Cluster(1, schema: MergeSemanticsTests.schema)
        let replica = cluster[0]
        try replica.write { try $0.create("Task", ["_id": "t"]) }
        try replica.write { txn in
            // `done` sorts before the misspelt `titel`, which is refused.
            #expect(throws: TributaryError.self) {
                try txn.update("Task", primaryKey: task, ["done": true, "titel": "x"])
            }
            #expect(throws: TributaryError.self) {
                try txn.update("Task", primaryKey: task, ["done": true, "title": 5])
            }
            try txn.update("Task", primaryKey: task, ["notes": "kept"])
        }
        let object = try #require(try replica.object("Task", primaryKey: task))
        #expect(object["done"] == false)
        #expect(object["notes"] == "kept")
        #expect(try replica.verify().passed)
    }

    @Test("A set or increment of the primary key is refused alone; the transaction's other writes commit")
    func primaryKeyPathIsRefusedAlone() throws {
        let schema = Schema(
            version: 1,
            types: [ObjectSchema(name: "Counter", properties: [.scalar("_id", .int), .scalar("n", .int, default: 0)])])
        let cluster = try Cluster(1, schema: schema)
        let replica = cluster[0]
        try replica.write { try $0.create("Counter", ["_id": 1]) }
        try replica.write { txn in
            try txn.increment(["n"], of: "Counter", primaryKey: .int(1), by: 2)
            #expect { try txn.set(.int(2), at: ["_id"], of: "Counter", primaryKey: .int(1)) } throws: { error in
                (error as? TributaryError)?.code == .invalidValue
            }
            #expect { try txn.increment(["_id"], of: "Counter", primaryKey: .int(1), by: 1) } throws: { error in
                (error as? TributaryError)?.code == .invalidValue
            }
            try txn.increment(["n"], of: "Counter", primaryKey: .int(1), by: 3)
        }
        #expect(try replica.object("Counter", primaryKey: .int(1))?["n"] == 5)
        #expect(try replica.object("Counter", primaryKey: .int(2)) == nil)
    }
}
