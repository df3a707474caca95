import Foundation
import Testing
import TributaryLog
import TributaryModel
import TributaryStorage
import TributaryTestSupport
import TributaryTestTags

@testable import Tributary

/// Input that used to stop the process (a Swift trap) or hold a peer's changeset up for ever: each now gets an error
/// that names the problem, and what was committed stays.
@Suite("Hostile and careless input")
struct HostileInputTests {
    static let schema = MergeSemanticsTests.schema
    static let base = HybridTime(milliseconds: 1_700_000_000_000)

    /// A changeset of a replica that is not in the test, as a peer would send it.
    static func changeset(
        origin: UInt64, sequence: UInt64, context: VersionVector = VersionVector(), _ instructions: [Instruction]
    ) -> Changeset {
        Changeset(
            origin: ReplicaID(rawValue: origin), originSequence: sequence,
            time: HybridTime(rawValue: base.rawValue + sequence << 16), context: context, schemaVersion: 1,
            instructions: instructions)
    }

    static func open(_ directory: String, _ edit: (inout Replica.Configuration) -> Void = { _ in }) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.clock = ManualClock(milliseconds: 1_700_000_000_000)
        edit(&configuration)
        return try Replica.open(directory: directory, schema: schema, configuration: configuration)
    }

    @Test("A write inside a write on the same replica is an error, not a trap, and the replica goes on")
    func nestedWrite() throws {
        let directory = TemporaryDirectory("nested")
        let replica = try Self.open(directory.path)
        for nested in [
            { try replica.write { _ in } }, { _ = try replica.integrate([]) }, { try replica.rebuildViews() },
        ] {
            let error = #expect(throws: TributaryError.self) {
                try replica.write { txn in
                    try txn.create("Person", ["_id": "outer"])
                    try nested()
                }
            }
            #expect(error?.code == .nestedWrite)
            #expect(error?.message.contains("inside a write") == true, "\(String(describing: error))")
        }
        // The outer writes failed whole; the next one commits.
        #expect(try replica.object("Person", primaryKey: .string("outer")) == nil)
        try replica.write { try $0.create("Person", ["_id": "after"]) }
        #expect(try replica.object("Person", primaryKey: .string("after")) != nil)
    }

    @Test(
        "Reader and database counts outside what LMDB takes are refused at open, by name", arguments: [-1, 0, 1 << 33])
    func readerCounts(_ readers: Int) throws {
        let directory = TemporaryDirectory("readers")
        let error = #expect(throws: TributaryError.self) {
            _ = try Self.open(directory.path) { $0.maximumReaders = readers }
        }
        #expect(error?.message.contains("maximumReaders (\(readers))") == true, "\(String(describing: error))")
    }

    @Test("A clock skew of .seconds(.max) means no bound")
    func unboundedClockSkew() throws {
        let directory = TemporaryDirectory("skew")
        let replica = try Self.open(directory.path) { $0.maximumClockSkew = .seconds(Int64.max) }
        // Stamped ten years ahead of this replica's clock.
        var ahead = Self.changeset(
            origin: 77, sequence: 1, [.create(type: "Person", primaryKey: .string("future"), fields: [], defaults: [])])
        ahead.time = HybridTime(milliseconds: 1_700_000_000_000 + 10 * 365 * 86_400_000)
        let report = try replica.integrate([ahead])
        #expect(report.integrated == [ahead.dot], "\(report)")
    }

    @Test("A primary key longer than the views store, from a peer, refuses that changeset; the rest integrates")
    func longPrimaryKeyFromPeer() throws {
        let directory = TemporaryDirectory("long-key")
        let replica = try Self.open(directory.path)
        let long = String(repeating: "k", count: 600)
        let bad = Self.changeset(
            origin: 81, sequence: 1, [.create(type: "Person", primaryKey: .string(long), fields: [], defaults: [])])
        let good = Self.changeset(
            origin: 82, sequence: 1, [.create(type: "Person", primaryKey: .string("fine"), fields: [], defaults: [])])
        let report = try replica.integrate([bad, good])
        #expect(report.integrated == [good.dot], "\(report)")
        #expect(report.rejected.map(\.dot) == [bad.dot])
        #expect(
            report.rejected.first?.reason.contains("primary key of Person is 600 bytes long; the limit is 256") == true,
            "\(report)")
        #expect(try replica.object("Person", primaryKey: .string("fine")) != nil)
        #expect(try replica.verify().passed)
    }

    @Test("A batch of frames that decodes past maximumBatchBytes is refused whole, naming where to split it")
    func batchBound() throws {
        let cluster = try Cluster(1, schema: Self.schema)
        for index in 0..<3 {
            try cluster[0].write {
                try $0.create(
                    "Person", ["_id": .string("p\(index)"), "name": .string(String(repeating: "n", count: 700))])
            }
        }
        let encoded = try cluster[0].encodedChangesets(missingFrom: VersionVector(), compressed: true)
        #expect(encoded.count == 4)  // the schema, then the three creates
        let directory = TemporaryDirectory("batch")
        let replica = try Self.open(directory.path) { $0.maximumBatchBytes = 1_000 }
        let error = #expect(throws: TributaryError.self) { try replica.integrate(encoded: encoded) }
        #expect(error?.code == .transactionTooLarge)
        #expect(error?.message.contains("of a batch of 4 decode to") == true, "\(String(describing: error))")
        #expect(error?.message.contains("maximumBatchBytes") == true, "\(String(describing: error))")
        print("batch bound: \(String(describing: error))")
        #expect(try replica.object("Person", primaryKey: .string("p0")) == nil)
        for bytes in encoded { try replica.integrate(encoded: [bytes]) }
        #expect(try replica.recordsDigest() == cluster[0].recordsDigest())
    }

    @Test("A string or data value over 16 MiB is refused: by a local write, by name; from a peer, by changeset")
    func valuesOverSixteenMiB() throws {
        let directory = TemporaryDirectory("large-value")
        let replica = try Self.open(directory.path)
        let name = String(repeating: "x", count: (16 << 20) + 100)
        // It used to commit, and then the object could be neither read nor updated: its record did not decode.
        let error = #expect(throws: TributaryError.self) {
            try replica.write { try $0.create("Person", ["_id": "big", "name": .string(name)]) }
        }
        #expect(error?.code == .invalidValue, "\(String(describing: error))")
        #expect(error?.message.contains("Person.name") == true, "\(String(describing: error))")
        #expect(
            error?.message.contains("a string of 16777316 bytes (UTF-8), over the limit of 16777216") == true,
            "\(String(describing: error))")
        // The write that makes it throws and changes nothing; the transaction cannot commit.
        var refusedAndAbsent = false
        #expect(throws: TributaryError.self) {
            try replica.write { txn in
                if (try? txn.create("Person", ["_id": "big", "name": .string(name)])) == nil {
                    refusedAndAbsent = try txn.object("Person", primaryKey: .string("big")) == nil
                }
            }
        }
        #expect(refusedAndAbsent)

        let create = Self.changeset(
            origin: 91, sequence: 1, [.create(type: "Person", primaryKey: .string("big"), fields: [], defaults: [])])
        let set = Self.changeset(
            origin: 91, sequence: 2, context: VersionVector([(ReplicaID(rawValue: 91), 1)]),
            [.set(FieldPath(type: "Person", primaryKey: .string("big"), property: "name"), .string(name))])
        let report = try replica.integrate(encoded: [ChangesetCodec.encode(create), ChangesetCodec.encode(set)])
        #expect(report.integrated == [create.dot], "\(report)")
        #expect(report.rejected.map(\.dot) == [set.dot], "\(report)")
        #expect(try replica.object("Person", primaryKey: .string("big")) != nil)
        try replica.write { try $0.update("Person", primaryKey: .string("big"), ["name": "small"]) }
        #expect(try replica.verify().passed)
    }

    @Test(
        "A link to a key over 16 MiB, from a peer, refuses that changeset; one to a key no object can have reads as null"
    )
    func longLinkKeysFromPeer() throws {
        let directory = TemporaryDirectory("long-link")
        let replica = try Self.open(directory.path)
        func task(_ id: String, origin: UInt64, owner: String) -> Changeset {
            Self.changeset(
                origin: origin, sequence: 1,
                [
                    .create(
                        type: "Task", primaryKey: .string(id), fields: [FieldValue("owner", .link(.string(owner)))],
                        defaults: [])
                ])
        }
        let huge = task("huge", origin: 83, owner: String(repeating: "k", count: (16 << 20) + 1))
        let long = task("long", origin: 84, owner: String(repeating: "k", count: 300))
        let report = try replica.integrate([huge, long])
        #expect(report.rejected.map(\.dot) == [huge.dot], "\(report)")
        #expect(
            report.rejected.first?.reason.contains("a link to a primary key of 16777217 bytes, over the limit") == true,
            "\(report)")
        #expect(report.integrated == [long.dot], "\(report)")
        #expect(try replica.object("Task", primaryKey: .string("huge")) == nil)
        #expect(try replica.object("Task", primaryKey: .string("long"))?["owner"] == .null)
        #expect(try replica.verify().passed)
    }

    @Test("A log that already holds a value over 16 MiB (let through by an earlier build) still replays")
    func oversizedValueInTheLogReplays() throws {
        let directory = TemporaryDirectory("old-large-value")
        do {
            let replica = try Self.open(directory.path)
            replica.close()
        }
        // As an earlier build logged it: a create with a 17 MiB name, overwritten in the same changeset, so the
        // record stays readable.
        let path = FieldPath(type: "Person", primaryKey: .string("old"), property: "name")
        let changeset = Self.changeset(
            origin: 95, sequence: 1,
            [
                .create(
                    type: "Person", primaryKey: .string("old"),
                    fields: [FieldValue("name", .string(String(repeating: "x", count: 17 << 20)))], defaults: []),
                .set(path, "x"),
            ])
        do {
            let environment = try Environment.open(path: directory.path)
            defer { environment.close() }
            let log = try ChangesetLog(environment: environment)
            try environment.write { txn in
                var head = try log.head(in: txn)
                try log.append(changeset, after: &head, in: txn)
            }
        }
        let replica = try Self.open(directory.path)
        try replica.rebuildViews()
        #expect(try replica.object("Person", primaryKey: .string("old"))?["name"] == "x")
        #expect(try replica.verify().passed)
    }

    @Test("A waiting changeset over the default decoding limits (more than 500,000 instructions) survives a reopen")
    func largePendingSurvivesReopen() throws {
        let directory = TemporaryDirectory("pending-large")
        let create = Self.changeset(
            origin: 91, sequence: 1, [.create(type: "Person", primaryKey: .string("big"), fields: [], defaults: [])])
        let many = Self.changeset(
            origin: 91, sequence: 2, context: VersionVector([(ReplicaID(rawValue: 91), 1)]),
            Array(repeating: .omitted, count: 500_001)
                + [.set(FieldPath(type: "Person", primaryKey: .string("big"), property: "name"), "after many")])
        do {
            let replica = try Self.open(directory.path)
            let report = try replica.integrate(encoded: [ChangesetCodec.encode(many)])
            #expect(report.waiting == 1)
            replica.close()
        }
        // Reopened, the pending area is read from storage: under the default limits, the changeset was left out.
        let replica = try Self.open(directory.path)
        #expect(try replica.pendingDots() == [many.dot])
        #expect(try replica.pendingChangesets().map(\.dot) == [many.dot])
        let report = try replica.integrate([create])
        #expect(report.integrated == [create.dot, many.dot], "\(report)")
        #expect(try replica.object("Person", primaryKey: .string("big"))?["name"] == "after many")
    }

    @Test(
        "A schema merged past one changeset's limits (a type of 10,001 properties) reopens, and 10,001 types read back")
    func mergedSchemaPastChangesetLimitsReopens() throws {
        let directory = TemporaryDirectory("large-schema")
        let limit = BinaryReader.maximumPropertiesPerType
        let properties = (0..<limit).map { Property("p\($0)", .scalar(.int), optional: true) }
        // Each changeset within the limits; together, one more property than one changeset may define.
        let wide = Self.changeset(
            origin: 92, sequence: 1,
            [
                .addType(
                    ObjectSchema(
                        name: "Wide", primaryKey: "_id",
                        properties: [Property("_id", .scalar(.int))] + properties.dropLast()))
            ])
        let more = Self.changeset(
            origin: 92, sequence: 2, context: VersionVector([(ReplicaID(rawValue: 92), 1)]),
            [
                .addProperty(type: "Wide", properties.last!),
                .addProperty(type: "Wide", Property("extra", .scalar(.int), optional: true)),
            ])
        do {
            let replica = try Self.open(directory.path)
            #expect(try replica.integrate([wide, more]).integrated.count == 2)
            replica.close()
        }
        let replica = try Self.open(directory.path)
        #expect(replica.schema[type: "Wide"]?.properties.count == limit + 2)
        #expect(try replica.verify().passed)
        // More types than one changeset's limit, as a stored schema (the merge of many changesets) may hold.
        let types = (0...10_000).map {
            ObjectSchema(name: "T\($0)", primaryKey: "_id", properties: [Property("_id", .scalar(.int))])
        }
        var writer = BinaryWriter()
        writer.schema(Schema(types: types))
        var reader = BinaryReader(writer.bytes, subject: "stored schema")
        #expect(try reader.schema().types.count == 10_001)
    }

    /// A replica with a few writes whose log then gets one more entry, forged by `forge` from its last one (a
    /// well-formed entry with a valid checksum that chains to it), stored under the sequence the forged entry names.
    func replicaWithForgedEntry(_ sequence: UInt64) throws -> (TemporaryDirectory, Replica) {
        let directory = TemporaryDirectory("forged-sequence")
        do {
            let replica = try Self.open(directory.path)
            for index in 0..<3 { try replica.write { try $0.create("Person", ["_id": .string("p\(index)")]) } }
            replica.close()
        }
        do {
            let environment = try Environment.open(path: directory.path)
            defer { environment.close() }
            let log = try environment.openDatabases(["log"])[0]
            try environment.write { txn in
                var lastKey: [UInt8] = []
                var lastValue: [UInt8] = []
                try txn.scan(log) { key, value in
                    lastKey = Array(key)
                    lastValue = Array(value)
                    return true
                }
                let lastSequence = UInt64(bigEndian: lastKey.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) })
                let last = try lastValue.withUnsafeBytes { try LogEntry(decoding: $0, localSequence: lastSequence) }
                let forged = LogEntry(
                    localSequence: sequence, origin: last.origin, originSequence: last.originSequence + 1,
                    time: last.time,
                    instructionCount: last.instructionCount, uncompressedLength: last.uncompressedLength,
                    isCompressed: last.isCompressed, previousChain: last.checksum, payload: last.payload)
                try txn.put(log, key: ChangesetLog.key(sequence), value: forged.encoded())
            }
        }
        return (directory, try Self.open(directory.path))
    }

    @Test(
        "A log entry at local sequence 2^63 or more: verify reports it, writes fail by name",
        arguments: [UInt64(1) << 63, .max])
    func forgedHugeSequence(_ sequence: UInt64) throws {
        let (directory, replica) = try replicaWithForgedEntry(sequence)
        _ = directory
        let report = try replica.verify()
        #expect(!report.passed)
        #expect(report.firstProblem != nil, "\(report)")
        if sequence == .max {
            let error = #expect(throws: TributaryError.self) {
                try replica.write { try $0.create("Person", ["_id": "next"]) }
            }
            #expect(error?.message.contains("no entry can follow it") == true, "\(String(describing: error))")
        }
        // What was committed before the damage is still readable.
        #expect(try replica.object("Person", primaryKey: .string("p2")) != nil)
    }

    @Test("ObjectID.generate takes any date: before 1970, after 2106, infinite or not a number")
    func objectIDDates() {
        let dates = [
            Date(timeIntervalSince1970: .nan), Date(timeIntervalSince1970: .infinity),
            Date(timeIntervalSince1970: -.infinity),
            Date(timeIntervalSince1970: 1e19), Date(timeIntervalSince1970: -5),
        ]
        let seconds = dates.map { date -> UInt32 in
            let bytes = ObjectID.generate(date: date).bytes
            return bytes.prefix(4).reduce(0) { $0 << 8 | UInt32($1) }
        }
        #expect(seconds == [0, .max, 0, .max, 0])
    }
}

/// Records grow with their object's history; the bounds that protect decoding from a peer's bytes must not make a
/// replica's own records unreadable.
@Suite("Stored records past the standard decoding limits", .tags(.slow))
struct StoredRecordLimitSlowTests {
    @Test("An object whose list holds more than 1,000,000 elements reads and verifies")
    func listPastAMillionElements() throws {
        let directory = TemporaryDirectory("long-list")
        let replica = try HostileInputTests.open(directory.path)
        let count = DecodingLimits.standard.maximumElements + 1
        try replica.write { try $0.create("Task", ["_id": "t", "tags": .list(Array(repeating: "x", count: count))]) }
        // It used to commit, and then fail every read and write of the object: "list element count ... is over the
        // limit of 1000000".
        #expect(try replica.object("Task", primaryKey: .string("t"))?["tags"].listValue?.count == count)
        #expect(try replica.verify().passed)
    }
}
