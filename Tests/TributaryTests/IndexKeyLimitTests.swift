import Foundation
import Testing
import TributaryModel
import TributaryStorage
import TributaryTestSupport
import TributaryViews

@testable import Tributary

/// Index keys fit LMDB's 511-byte key limit whatever the names, values and primary keys (replica format 4): a
/// string, data or link value keeps what its index's budget leaves room for, and a property whose names leave no
/// room has no index entries. Before, a long value with a long primary key and names failed the write with
/// `MDB_BAD_VALSIZE`, and a peer's such changeset failed every batch that brought it.
@Suite("Index keys within LMDB's key limit")
struct IndexKeyLimitTests {
    /// A name of `count` bytes that starts with `start`.
    static func name(_ start: String, _ count: Int) -> String {
        start + String(repeating: "x", count: count - start.utf8.count)
    }

    // 30 + 30 bytes of names: with a 256-byte string primary key, a string value keeps 189 bytes (format 3 kept 200).
    static let typeName = name("Document", 30)
    static let textName = name("text", 30)
    static let blobName = name("blob", 30)

    static func schema(indexed: Bool = true) -> Schema {
        Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: typeName,
                    properties: [
                        .scalar("_id", .string),
                        .scalar(textName, .string, indexed: indexed),
                        .scalar(blobName, .data, optional: true, indexed: indexed),
                        .scalar("rank", .int, default: 0),
                    ])
            ])
    }

    static func configuration(readOnly: Bool = false) -> Replica.Configuration {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.readOnly = readOnly
        return configuration
    }

    static let longKey = String(repeating: "k", count: KeyEncoding.maximumPrimaryKeyBytes)
    static let longText = String(repeating: "t", count: 200)
    static let zeros = Data(repeating: 0, count: 200)

    /// The objects the tests write: one with a 256-byte key and a 200-byte text, one with a 100-byte key and 200
    /// zero bytes of data, and neighbours whose values share long prefixes with theirs.
    static func writeObjects(_ replica: Replica) throws {
        try replica.write { txn in
            _ = try txn.create(typeName, ["_id": .string(longKey), textName: .string(longText)])
            _ = try txn.create(
                typeName,
                [
                    "_id": .string(String(repeating: "d", count: 100)), textName: "short", blobName: .data(zeros),
                ])
            // Same first 199 bytes of text, and of zeros, as the objects above: they share their index keys.
            _ = try txn.create(
                typeName, ["_id": "near", textName: .string(longText + "u"), blobName: .data(zeros + [0])])
            _ = try txn.create(typeName, ["_id": "other", textName: "t", blobName: .data(Data([0, 1]))])
        }
    }

    static func keys(_ objects: [DynamicObject]) -> [PrimaryKey] { objects.map(\.primaryKey) }

    /// Equality queries on both properties find the object and only it, through the index.
    static func checkQueries(_ replica: Replica, usingIndexes: Bool = true) throws {
        try replica.read { snapshot throws in
            let text = "\(textName) == $0"
            let blob = "\(blobName) == $0"
            #expect(
                try keys(snapshot.objects(typeName, where: text, arguments: [.string(longText)])) == [.string(longKey)])
            #expect(
                try keys(snapshot.objects(typeName, where: text, arguments: [.string(longText + "u")])) == [
                    .string("near")
                ])
            #expect(
                try keys(snapshot.objects(typeName, where: blob, arguments: [.data(zeros)]))
                    == [.string(String(repeating: "d", count: 100))])
            #expect(
                try keys(snapshot.objects(typeName, where: blob, arguments: [.data(zeros + [0])])) == [.string("near")])
            #expect(try snapshot.objects(typeName, where: text, arguments: [.string(longText + "v")]).isEmpty)
            if usingIndexes {
                #expect(try snapshot.explain(typeName, where: text, arguments: [.string(longText)]).isIndex)
                #expect(try snapshot.explain(typeName, where: blob, arguments: [.data(zeros)]).isIndex)
            }
        }
    }

    @Test("A 256-byte key, 60 bytes of names and a 200-byte value commit, are found by their index, and verify")
    func longValuesCommitAndQuery() throws {
        let directory = TemporaryDirectory()
        let replica = try Replica.open(
            directory: directory.path, schema: Self.schema(), configuration: Self.configuration())
        defer { replica.close() }
        try Self.writeObjects(replica)
        try Self.checkQueries(replica)
        #expect(try replica.verify().passed)
        let scratch = TemporaryDirectory()
        #expect(try replica.verify(rebuildingIn: scratch.appending("verify")).passed)
        // Every stored index key fits, and the longest takes the whole room.
        var longest = 0
        try replica.environment.read { txn in
            try txn.scan(replica.views.indexes) { key, _ in
                longest = max(longest, key.count)
                return true
            }
        }
        #expect(longest == 511)
    }

    /// Each of the two long objects alone: format 3's key of either was over 511 bytes (62 + 203 + 257 for the text,
    /// 62 + 403 + 101 for the zeros).
    @Test("Each long object alone commits and is found", arguments: [true, false])
    func eachLongObjectAlone(text: Bool) throws {
        let directory = TemporaryDirectory()
        let replica = try Replica.open(
            directory: directory.path, schema: Self.schema(), configuration: Self.configuration())
        defer { replica.close() }
        let key = text ? Self.longKey : String(repeating: "d", count: 100)
        let (property, value): (String, Value) =
            text ? (Self.textName, .string(Self.longText)) : (Self.blobName, .data(Self.zeros))
        try replica.write { txn in
            var values: [String: Value] = ["_id": .string(key), Self.textName: "short"]
            values[property] = value
            _ = try txn.create(Self.typeName, values)
        }
        let found = try replica.read { try $0.objects(Self.typeName, where: "\(property) == $0", arguments: [value]) }
        #expect(found.map(\.primaryKey) == [.string(key)])
        #expect(try replica.verify().passed)
    }

    @Test("A peer's object with long values integrates where the property is indexed, and back")
    func peerChangesetIntegrates() throws {
        // Replica 0 writes with the property unindexed; replica 1 made it indexed (a redefinition, which wins).
        let cluster = try Cluster(2, schema: Self.schema(indexed: false))
        try cluster[1].write { txn in
            try txn.emit(.redefineProperty(type: Self.typeName, .scalar(Self.textName, .string, indexed: true)))
            try txn.emit(
                .redefineProperty(type: Self.typeName, .scalar(Self.blobName, .data, optional: true, indexed: true)))
        }
        try Self.writeObjects(cluster[0])
        let bytes = try cluster[0].encodedChangesets(missingFrom: cluster[1].versionVector)
        let report = try cluster[1].integrate(encoded: bytes)
        #expect(report.integrated.count == bytes.count && report.rejected.isEmpty && report.waiting == 0)
        try Self.checkQueries(cluster[1])
        #expect(try cluster[1].verify().passed)
        // Replica 0 gets the index and builds it.
        try cluster.send(from: 1, to: 0)
        try Self.checkQueries(cluster[0])
        #expect(try cluster[0].verify().passed)
        #expect(try cluster.converged())
    }

    @Test("A property whose names leave no room in an index key has no index, and queries on it read every object")
    func noRoomNoIndex() throws {
        // 200 + 100 bytes of names and a string key: 511 - 302 - 257 leaves less than a UUID's 17 bytes.
        let type = Self.name("Crowded", 200)
        let property = Self.name("label", 100)
        let schema = Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: type,
                    properties: [
                        .scalar("_id", .string), .scalar(property, .string, indexed: true),
                        .scalar("n", .int, indexed: true),
                    ])
            ])
        let directory = TemporaryDirectory()
        let replica = try Replica.open(directory: directory.path, schema: schema, configuration: Self.configuration())
        defer { replica.close() }
        let label = String(repeating: "l", count: 150)
        try replica.write { txn in
            for index in 0..<6 {
                _ = try txn.create(
                    type,
                    [
                        "_id": .string(String(repeating: "k", count: 100) + "\(index)"),
                        property: .string(label + "\(index % 2)"), "n": .int(Int64(index)),
                    ])
            }
        }
        try replica.read { snapshot in
            let query = "\(property) == $0"
            #expect(try snapshot.explain(type, where: query, arguments: [.string(label + "1")]) == .fullScan)
            let found = try snapshot.objects(type, where: query, arguments: [.string(label + "1")])
            #expect(found.map(\.primaryKey) == [1, 3, 5].map { .string(String(repeating: "k", count: 100) + "\($0)") })
            #expect(try snapshot.count(type, where: "\(property) > $0", arguments: [.string(label)]) == 6)
            #expect(try snapshot.explain(type, where: "n >= 4").isIndex)
            #expect(try snapshot.count(type, where: "n >= 4") == 2)
        }
        #expect(try replica.environment.read { txn in try txn.count(replica.views.indexes) } == 6)
        #expect(try replica.verify().passed)
    }

    @Test("Range and equality queries with long bounds return what filtering every object returns")
    func longBoundsAgreeWithScans() throws {
        // 200 + 29 bytes of names and a string key: string values keep 20 bytes (511 - 231 - 257 - 3), zero bytes
        // counting 2.
        let type = Self.name("Ranged", 200)
        let property = Self.name("value", 29)
        let objectType = ObjectSchema(
            name: type, properties: [.scalar("_id", .string), .scalar(property, .string, indexed: true)])
        let directory = TemporaryDirectory()
        let replica = try Replica.open(
            directory: directory.path, schema: Schema(version: 1, types: [objectType]),
            configuration: Self.configuration())
        defer { replica.close() }
        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 11))
        let alphabet = ["a", "b", "\u{0}", "é"]
        func text() -> String {
            String((0..<Int(random.next() % 32)).map { _ in alphabet[Int(random.next() % 4)] }.joined())
        }
        var values: [String: String] = [:]
        try replica.write { txn in
            for index in 0..<300 {
                // Long keys: with them, format 3's keys of values of more than 26 bytes did not fit.
                let key = "o\(index)" + String(repeating: "k", count: 240)
                let value = index % 3 == 0 ? String(repeating: "a", count: 18 + index % 7) : text()
                values[key] = value
                _ = try txn.create(type, ["_id": .string(key), property: .string(value)])
            }
        }
        func less(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }
        var plans: Set<Bool> = []
        try replica.read { snapshot in
            for round in 0..<300 {
                let a = round % 5 == 0 ? String(repeating: "a", count: 17 + round % 6) : text()
                let b = text()
                let (low, high) = less(a, b) ? (a, b) : (b, a)
                let cases: [(String, [Value], (String) -> Bool)] = [
                    ("\(property) == $0", [.string(a)], { $0.utf8.elementsEqual(a.utf8) }),
                    (
                        "\(property) IN {$0, $1}", [.string(a), .string(b)],
                        { $0.utf8.elementsEqual(a.utf8) || $0.utf8.elementsEqual(b.utf8) }
                    ),
                    ("\(property) > $0", [.string(a)], { less(a, $0) }),
                    ("\(property) <= $0", [.string(a)], { !less(a, $0) }),
                    (
                        "\(property) >= $0 AND \(property) < $1", [.string(low), .string(high)],
                        { !less($0, low) && less($0, high) }
                    ),
                    (
                        "\(property) BETWEEN {$0, $1}", [.string(low), .string(high)],
                        { !less($0, low) && !less(high, $0) }
                    ),
                ]
                for (query, arguments, predicate) in cases {
                    let expected = Set(values.filter { predicate($0.value) }.keys.map { PrimaryKey.string($0) })
                    let found = try snapshot.objects(type, where: query, arguments: arguments)
                    #expect(Set(found.map(\.primaryKey)) == expected, "\(query) \(arguments)")
                    #expect(found.count == expected.count)
                    plans.insert(try snapshot.explain(type, where: query, arguments: arguments).isIndex)
                }
            }
        }
        // Some bounds were short enough for the index, and some were cut off and read every object.
        #expect(plans == [true, false])
        #expect(try replica.verify().passed)
    }
}

/// A replica of format 3, whose index keys were written by a build that kept 200 bytes of every value whatever the
/// names and primary key, opened read-only reads its index keys in that encoding; opened for writing, it is raised to
/// format 4 and the keys that differ are rewritten in the same transaction.
@Suite("Index entries of removed types")
struct RemovedTypeIndexTests {
    @Test("Removing a type removes its index entries; verify and a rebuild agree")
    func removedTypeLeavesNoIndexEntries() throws {
        let schema = Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: "Note", properties: [.scalar("_id", .string), .scalar("text", .string, indexed: true)]),
                ObjectSchema(
                    name: "Task", properties: [.scalar("_id", .string), .scalar("title", .string, indexed: true)]),
            ])
        let directory = TemporaryDirectory("removed-type")
        let replica = try Replica.open(
            directory: directory.path, schema: schema, configuration: IndexKeyLimitTests.configuration())
        try replica.write { txn in
            for index in 0..<5 {
                _ = try txn.create("Note", ["_id": .string("n\(index)"), "text": .string("note \(index)")])
            }
            _ = try txn.create("Task", ["_id": "t", "title": "kept"])
        }
        try replica.write { try $0.emit(.removeType("Note")) }
        let noteEntries = try replica.environment.read { txn in
            var count = 0
            let prefix = ViewStore.typePrefix("Note")
            try txn.scan(replica.views.indexes, from: prefix, to: ViewStore.prefixEnd(prefix)) { _, _ in
                count += 1
                return true
            }
            return count
        }
        #expect(noteEntries == 0)
        #expect(try replica.verify(recordsInMemory: .max).firstProblem == nil)
        #expect(try replica.verify(recordsInMemory: 1).firstProblem == nil)
        #expect(try replica.objects("Task", where: "title == 'kept'").count == 1)

    }
}

extension QueryPlan {
    var isIndex: Bool { if case .index = self { true } else { false } }
}
