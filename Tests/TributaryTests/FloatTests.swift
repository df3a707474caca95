import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// Float properties (Realm's `Float`): 32 bits stored as written, and compared with query constants as Realm compares
/// them, in the property's type: `level == 0.1` finds the float nearest 0.1.
@Suite("Float values")
struct FloatTests {
    static let schema = Schema(types: [
        ObjectSchema(
            name: "Reading",
            properties: [
                .scalar("_id", .int), .scalar("level", .float, indexed: true),
                .scalar("plain", .float, optional: true), Property("samples", .scalar(.float), list: true),
            ])
    ])

    func open(_ directory: TemporaryDirectory) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(directory: directory.path, schema: Self.schema, configuration: configuration)
    }

    static func intKey(_ object: DynamicObject) -> Int64? {
        if case .int(let key) = object.primaryKey { key } else { nil }
    }

    @Test("Floats store their 32 bits, and read back as written")
    func storage() throws {
        var writer = BinaryWriter()
        var names = NameTable.inline
        writer.value(.float(0.1), &names)
        #expect(writer.bytes.count == 5)
        var reader = BinaryReader(writer.bytes, subject: "value")
        #expect(try reader.value(names) == .float(0.1))
        #expect(!Value.float(0).storesAlike(.float(-0.0)))
        let directory = TemporaryDirectory("float-storage")
        let replica = try open(directory)
        defer { replica.close() }
        try replica.write { txn in
            _ = try txn.create(
                "Reading", ["_id": .int(1), "level": .float(0.1), "samples": .list([.float(1.5), .float(.nan)])])
        }
        let object = try #require(try replica.object("Reading", primaryKey: .int(1)))
        #expect(object["level"] == .float(0.1))
        #expect(object["samples"].listValue?.last?.floatValue?.isNaN == true)
    }

    @Test(
        "Queries on an indexed and an unindexed float property take constants as floats, and give what a plain evaluation does"
    )
    func queries() throws {
        let directory = TemporaryDirectory("float-queries")
        let replica = try open(directory)
        defer { replica.close() }
        var random = SplitMix64(seed: 5)
        var values: [Float] = [0.1, 0.5, -0.5, 0, 1, .nan, 16_777_217]
        for _ in 0..<150 { values.append(Float(Int64(random.next() % 2_001) - 1_000) / 8) }
        try replica.write { txn in
            for (index, value) in values.enumerated() {
                _ = try txn.create(
                    "Reading", ["_id": .int(Int64(index)), "level": .float(value), "plain": .float(value)])
            }
        }
        func expected(_ keep: (Float) -> Bool) -> Set<Int64> {
            Set(values.indices.filter { !values[$0].isNaN && keep(values[$0]) }.map { Int64($0) })
        }
        func found(_ query: String, _ arguments: [Value]) throws -> Set<Int64> {
            Set(try replica.objects("Reading", where: query, arguments: arguments).compactMap(Self.intKey))
        }
        let cases: [(String, [Value], Set<Int64>)] = [
            ("== 0.1", [], expected { $0 == Float(0.1) }),
            ("== $0", [.double(0.1)], expected { $0 == Float(0.1) }),
            ("> 0.1", [], expected { $0 > Float(0.1) }),
            ("<= -0.5", [], expected { $0 <= -0.5 }),
            ("BETWEEN {-1, 1}", [], expected { $0 >= -1 && $0 <= 1 }),
            ("IN {0.1, 1, 16777217}", [], expected { $0 == Float(0.1) || $0 == 1 || $0 == Float(16_777_217) }),
            ("== 16777216", [], expected { $0 == 16_777_216 }),
            // Eight or more constants are looked up by hash, as floats too.
            (
                "IN {0.1, 0.5, 1, 2, 3, 4, 5, 6, -0.5}", [],
                expected { [Float(0.1), 0.5, 1, 2, 3, 4, 5, 6, -0.5].contains($0) }
            ),
        ]
        for (condition, arguments, want) in cases {
            #expect(!want.isEmpty, "\(condition) selects nothing: the test tests little")
            let indexed = try found("level \(condition)", arguments)
            #expect(indexed == want, "indexed: level \(condition)")
            let scanned = try found("plain \(condition)", arguments)
            #expect(scanned == want, "scanned: plain \(condition)")
        }
        try replica.read { snapshot in
            guard case .index(let property, _) = try snapshot.explain("Reading", where: "level > 0.1") else {
                Issue.record("a range on an indexed float property should use its index")
                return
            }
            #expect(property == "level")
        }
        let sorted = try replica.objects("Reading", where: "TRUEPREDICATE SORT(level ASC)").compactMap {
            $0["level"].floatValue
        }
        #expect(sorted.first?.isNaN == true)
        #expect(Array(sorted.dropFirst()) == values.filter { !$0.isNaN }.sorted())
    }

    @Test("The App Services JSON form: bsonType float, written back alike")
    func schemaJSON() throws {
        let schema = try Schema(
            json:
                #"[{"title": "Reading", "properties": {"_id": {"bsonType": "long"}, "level": {"bsonType": "float", "default": 0.25}}}]"#
        )
        let level = try #require(schema[type: "Reading"]?.properties.first { $0.name == "level" })
        #expect(level.kind == .scalar(.float))
        #expect(level.defaultValue == .float(0.25))
        #expect(try Schema(json: schema.jsonString()) == schema)
    }
}
