import Foundation
import Testing
import TributaryMerge
import TributaryModel
import TributaryTestSupport

@testable import Tributary

@Suite("Writing and reading objects through a replica")
struct ObjectReadWriteTests {
    func openChat(_ directory: TemporaryDirectory, clock: ManualClock = ManualClock()) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.clock = clock
        return try Replica.open(directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
    }

    /// A replica stores its clock only when the clock runs ahead of the log's last entry; opening takes the later
    /// of the two. Either way a write after reopening is stamped after every write before it, even with the wall
    /// clock set back: after local commits (whose last entry carries the clock) and after a merge of an older
    /// changeset from a peer (whose entry does not).
    @Test("A write after reopening is stamped after every earlier one, with the wall clock set back")
    func clockSurvivesReopen() throws {
        let directory = TemporaryDirectory()
        let start: UInt64 = 1_700_000_000_000
        let clock = ManualClock(milliseconds: start + 60_000)
        var latest = HybridTime.zero
        do {
            let replica = try openChat(directory, clock: clock)
            // Several in one millisecond: the clock's counter, not the wall clock, orders them.
            for index in 0..<3 {
                try replica.write { try $0.create("User", ["_id": .string("u\(index)"), "name": "U"]) }
            }
            latest = try replica.changeset(at: replica.lastLocalSequence).time
            replica.close()
        }
        clock.set(milliseconds: start)
        do {
            let replica = try openChat(directory, clock: clock)
            try replica.write { try $0.create("User", ["_id": "after-reopen", "name": "U"]) }
            let time = try replica.changeset(at: replica.lastLocalSequence).time
            #expect(time > latest, "stamped \(time) after \(latest)")
            latest = time
            // A peer's changeset from an earlier time merges last: the log's last entry is then older than the clock.
            let peerDirectory = TemporaryDirectory()
            let peer = try openChat(peerDirectory, clock: ManualClock(milliseconds: start - 60_000))
            try peer.write { try $0.create("User", ["_id": "from-peer", "name": "U"]) }
            try replica.integrate(try peer.changesets(missingFrom: replica.versionVector))
            peer.close()
            let merged = try replica.changeset(at: replica.lastLocalSequence)
            #expect(merged.origin == peer.replicaID && merged.time < latest)
            replica.close()
        }
        let replica = try openChat(directory, clock: clock)
        try replica.write { try $0.create("User", ["_id": "after-merge", "name": "U"]) }
        let time = try replica.changeset(at: replica.lastLocalSequence).time
        #expect(time > latest, "stamped \(time) after \(latest)")
        #expect(try replica.verify().passed)
    }

    @Test func createdObjectsSurviveReopen() throws {
        let directory = TemporaryDirectory()
        do {
            let replica = try openChat(directory)
            try replica.write { txn in
                try txn.create("User", ["_id": "u1", "name": "Ada", "age": 36, "tags": ["math", "engines"]])
                try txn.create("User", ["_id": "u2", "name": "Alan"])
            }
            replica.close()
        }
        let replica = try openChat(directory)
        let ada = try #require(try replica.object("User", primaryKey: .string("u1")))
        #expect(ada["name"] == "Ada")
        #expect(ada["age"] == 36)
        #expect(ada["karma"] == 0)  // the default
        #expect(ada["tags"] == ["math", "engines"])
        #expect(ada["address"] == .null)
        let alan = try #require(try replica.object("User", primaryKey: .string("u2")))
        #expect(alan["age"] == .null)
        #expect(try replica.objects("User").map(\.primaryKey) == [.string("u1"), .string("u2")])
        #expect(try replica.verify().passed)
    }

    @Test("async read runs on a snapshot off the caller's task, alongside an async write, and reports errors")
    func asyncRead() async throws {
        let directory = TemporaryDirectory()
        let replica = try openChat(directory)
        defer { replica.close() }
        try await replica.write { txn in
            for index in 0..<50 {
                try txn.create("User", ["_id": .string("u\(index)"), "name": "N", "age": .int(Int64(index))])
            }
        }
        async let written: Void = replica.write { txn in
            for index in 50..<100 {
                try txn.create("User", ["_id": .string("u\(index)"), "name": "N", "age": .int(Int64(index))])
            }
        }
        // Each snapshot sees one commit whole: 50 or 100 users, and the ages of exactly those.
        let counts = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            for _ in 0..<8 {
                group.addTask {
                    try await replica.read { snapshot in
                        (try snapshot.count("User"), try snapshot.count("User", where: "age >= 0"))
                    }
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        try await written
        for (all, filtered) in counts {
            #expect(all == filtered)
            #expect(all == 50 || all == 100)
        }
        #expect(try await replica.read { try $0.count("User") } == 100)
        await #expect(throws: TributaryError.self) {
            try await replica.read { snapshot in try snapshot.objects("User", where: "age >>> 3") }
        }
    }

    @Test("An object read by key equals the same object built from its values by name, and hashes alike")
    func readObjectsEqualTheirValuesByName() throws {
        let directory = TemporaryDirectory()
        let replica = try openChat(directory)
        try replica.write { txn in
            try txn.create("User", ["_id": "u1", "name": "Ada", "age": 36])
            try txn.create("User", ["_id": "u2", "name": "Ada", "age": 36])
        }
        let read = try #require(try replica.object("User", primaryKey: .string("u1")))
        let byName = DynamicObject(type: "User", primaryKey: .string("u1"), values: read.values)
        #expect(read.values["_id"] == "u1")
        #expect(read.values.count == Fixtures.chatSchema[type: "User"]?.properties.count)
        #expect(read == byName && byName == read)
        #expect(read.hashValue == byName.hashValue)
        #expect(Set([read, byName]).count == 1)
        #expect(read["no such property"] == .null)
        // Another key, or another value, is another object.
        let other = try #require(try replica.object("User", primaryKey: .string("u2")))
        #expect(read != other)
        try replica.write { txn in try txn.update("User", primaryKey: .string("u1"), ["age": 37]) }
        let changed = try #require(try replica.object("User", primaryKey: .string("u1")))
        #expect(changed != read)
        #expect(changed["age"] == 37)
        #expect(try replica.objects("User").first == changed)
    }

    @Test func errorsNameTheTypePropertyAndValue() throws {
        let directory = TemporaryDirectory()
        let replica = try openChat(directory)
        try replica.write { try $0.create("User", ["_id": "u1", "name": "Ada"]) }

        func message(_ body: (Transaction) throws -> Void) -> (TributaryError.Code, String)? {
            do {
                try replica.write(body)
                return nil
            } catch let error as TributaryError {
                return (error.code, error.message)
            } catch {
                return nil
            }
        }
        let duplicate = message { try $0.create("User", ["_id": "u1", "name": "Again"]) }
        #expect(duplicate?.0 == .duplicatePrimaryKey)
        #expect(duplicate?.1.contains("\"u1\"") == true)

        let unknown = message { try $0.create("User", ["_id": "u3", "name": "X", "nickname": "x"]) }
        #expect(unknown?.0 == .unknownProperty)
        #expect(unknown?.1.contains("User.nickname") == true)

        let wrongType = message { try $0.create("User", ["_id": "u3", "name": "X", "age": "old"]) }
        #expect(wrongType?.0 == .wrongType)
        #expect(wrongType?.1.contains("User.age") == true)
        #expect(wrongType?.1.contains("string") == true)

        let missing = message { try $0.create("ChatMessage", ["_id": "m1", "author": "u1"]) }
        #expect(missing?.0 == .missingProperty)
        #expect(missing?.1.contains("'text'") == true)

        let noType = message { try $0.create("Message", ["_id": "m1"]) }
        #expect(noType?.0 == .unknownType)
        #expect(noType?.1.contains("'Message'") == true)

        let noKey = message { try $0.create("User", ["name": "Nobody"]) }
        #expect(noKey?.0 == .missingProperty)

        // Nothing of the failed transactions was written.
        #expect(try replica.objects("User").count == 1)
        #expect(replica.lastLocalSequence == 2)  // the schema changeset and one write
    }

    @Test func aFailedTransactionLeavesNothingBehind() throws {
        let directory = TemporaryDirectory()
        let replica = try openChat(directory)
        struct Abort: Error {}
        #expect(throws: Abort.self) {
            try replica.write { txn in
                try txn.create("User", ["_id": "u1", "name": "Ada"])
                throw Abort()
            }
        }
        #expect(try replica.objects("User").isEmpty)
        #expect(replica.lastLocalSequence == 1)
    }

    @Test func updateWritesOnlyTheFieldsThatChanged() throws {
        let directory = TemporaryDirectory()
        let replica = try openChat(directory)
        try replica.write { try $0.create("User", ["_id": "u1", "name": "Ada", "age": 36, "tags": ["a", "b", "c"]]) }
        try replica.write { txn in
            try txn.update(
                "User", primaryKey: .string("u1"), ["name": "Ada", "age": 37, "tags": ["a", "x", "c", "d"]])
        }
        let changeset = try replica.changeset(at: replica.lastLocalSequence)
        // age set; "b" erased; "x" and "d" inserted. The unchanged name is not written.
        #expect(changeset.instructions.count == 4)
        #expect(
            !changeset.instructions.contains {
                if case .set(let path, _) = $0 { path.property == "name" } else { false }
            })
        let ada = try #require(try replica.object("User", primaryKey: .string("u1")))
        #expect(ada["age"] == 37)
        #expect(ada["tags"] == ["a", "x", "c", "d"])
        #expect(try replica.verify().passed)
    }

    @Test func listOperations() throws {
        let directory = TemporaryDirectory()
        let replica = try openChat(directory)
        let key = PrimaryKey.string("u1")
        try replica.write { try $0.create("User", ["_id": "u1", "name": "Ada"]) }
        try replica.write { txn in
            for tag in ["a", "b", "c", "d"] { try txn.append(.string(tag), to: ["tags"], of: "User", primaryKey: key) }
            try txn.insert("z", at: 0, into: ["tags"], of: "User", primaryKey: key)
        }
        #expect(try replica.object("User", primaryKey: key)?["tags"] == ["z", "a", "b", "c", "d"])
        try replica.write { txn in
            try txn.moveElement(from: 0, to: 4, in: ["tags"], of: "User", primaryKey: key)
            try txn.removeElement(at: 1, from: ["tags"], of: "User", primaryKey: key)
            try txn.replaceElement(at: 0, with: "A", in: ["tags"], of: "User", primaryKey: key)
        }
        #expect(try replica.object("User", primaryKey: key)?["tags"] == ["A", "c", "d", "z"])
        try replica.write { txn in
            try txn.moveElement(from: 3, to: 1, in: ["tags"], of: "User", primaryKey: key)
        }
        #expect(try replica.object("User", primaryKey: key)?["tags"] == ["A", "z", "c", "d"])
        try replica.write { try $0.removeAllElements(in: ["tags"], of: "User", primaryKey: key) }
        #expect(try replica.object("User", primaryKey: key)?["tags"] == [])
        #expect(throws: TributaryError.self) {
            try replica.write { try $0.removeElement(at: 0, from: ["tags"], of: "User", primaryKey: key) }
        }
        #expect(try replica.verify().passed)
    }

    @Test func embeddedObjectsAndLinks() throws {
        let directory = TemporaryDirectory()
        let replica = try openChat(directory)
        let address = Value.embedded(EmbeddedObject(type: "Address", fields: ["street": "1 Main St", "city": "Paris"]))
        try replica.write { txn in
            try txn.create("User", ["_id": "u1", "name": "Ada", "address": address])
            try txn.create("User", ["_id": "u2", "name": "Alan", "friends": [.link(.string("u1"))]])
            try txn.create(
                "ChatMessage",
                [
                    "_id": "m1", "author": "u2", "text": "hi", "timestamp": .date(Date(timeIntervalSince1970: 10)),
                    "conversationID": "c1", "sender": .link(.string("u1")),
                    "attachments": [
                        .embedded(EmbeddedObject(type: "Attachment", fields: ["name": "a.png", "size": 10]))
                    ],
                ])
        }
        try replica.write { txn in
            try txn.set("Lyon", at: ["address", "city"], of: "User", primaryKey: .string("u1"))
            try txn.set(.int(20), at: ["attachments", 0, "size"], of: "ChatMessage", primaryKey: .string("m1"))
            try txn.increment(["karma"], of: "User", primaryKey: .string("u1"), by: 5)
        }
        let ada = try #require(try replica.object("User", primaryKey: .string("u1")))
        #expect(ada["address"].embeddedValue?["city"] == "Lyon")
        #expect(ada["address"].embeddedValue?["street"] == "1 Main St")
        #expect(ada["karma"] == 5)
        let message = try #require(try replica.object("ChatMessage", primaryKey: .string("m1")))
        #expect(message["attachments"].listValue?.first?.embeddedValue?["size"] == 20)
        #expect(message["sender"] == .link(.string("u1")))

        // Rule 7: a link to a deleted object reads as null, and leaves its list.
        try replica.write { _ = try $0.delete("User", primaryKey: .string("u1")) }
        #expect(try replica.object("ChatMessage", primaryKey: .string("m1"))?["sender"] == .null)
        #expect(try replica.object("User", primaryKey: .string("u2"))?["friends"] == [])
        #expect(try replica.verify().passed)
    }

    @Test func migrationIsRequiredWhenTheSchemaChangesAtTheSameVersion() throws {
        let directory = TemporaryDirectory()
        _ = try openChat(directory)
        var changed = Fixtures.chatSchema
        var user = changed[type: "User"]!
        user.properties.append(.scalar("isPinned", .bool, default: false))
        changed.upsert(user)
        var configuration = Replica.Configuration()
        configuration.durability = .none
        do {
            _ = try Replica.open(directory: directory.path, schema: changed, configuration: configuration)
            Issue.record("opening with a changed schema at the same version succeeded")
        } catch let error as TributaryError {
            #expect(error.code == .migrationRequired)
            #expect(error.message.contains("Migration is required due to the following errors:"))
            #expect(error.message.contains("- Property 'User.isPinned' has been added."))
        }
    }
}

@Suite("Record decoding")
struct RecordDecodingTests {
    @Test("Reading values straight from stored bytes equals decoding the record and reading it")
    func fastPathEqualsFullDecode() throws {
        let directory = TemporaryDirectory()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(
            directory: directory.path, schema: MergeSemanticsTests.schema, configuration: configuration)
        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 9))
        try replica.write { txn in try txn.create("Person", ["_id": "p"]) }
        for round in 0..<40 {
            try replica.write { txn in
                let key = PrimaryKey.string("t\(random.next() % 5)")
                if try txn.object("Task", primaryKey: key) == nil {
                    try txn.create(
                        "Task",
                        [
                            "_id": key.value, "tags": ["a", "b"],
                            "steps": [.embedded(EmbeddedObject(type: "Step", fields: ["text": "s"]))],
                            "location": .embedded(EmbeddedObject(type: "Location", fields: ["city": "x"])),
                        ])
                }
                try ConcurrentOrderFuzzTests.randomWrite(txn, &random, key: key)
                if round % 7 == 0 { try txn.increment(["count"], of: "Task", primaryKey: key, by: 3) }
            }
        }
        let schema = replica.schema
        var compared = 0
        for (type, key) in try replica._recordKeys() {
            guard let objectType = schema[type: type], let bytes = try replica._recordBytes(type: type, primaryKey: key)
            else { continue }
            let record = try ObjectRecord(decoding: bytes)
            let fast = try ObjectRecord.values(decoding: bytes, of: objectType, in: schema)
            #expect(fast == (record.exists ? record.values(of: objectType, in: schema) : nil), "\(type)[\(key)]")
            compared += 1
        }
        #expect(compared >= 3)
    }
}
