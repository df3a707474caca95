import Foundation
import Testing
import TributaryModel
import TributaryTestSupport
import TributaryViews

@testable import Tributary

struct Invoice: Model, Equatable {
    var _id: String
    var total: Decimal
    var discount: Decimal?
    var lines: [Decimal] = []
}

/// Decimal properties (Realm's `Decimal128`): stored exactly, in one canonical form, compared with other numbers as
/// decimals, indexed in numeric order, and summed and averaged without binary rounding.
@Suite("Decimal values")
struct DecimalTests {
    static let schema = Schema(types: [
        ObjectSchema(
            name: "Item",
            properties: [
                .scalar("_id", .int), .scalar("price", .decimal, indexed: true),
                .scalar("plain", .decimal, optional: true), Property("amounts", .scalar(.decimal), list: true),
            ])
    ])

    static func decimal(_ text: String) -> Decimal { Decimal(parsing: text)! }

    static func intKey(_ object: DynamicObject) -> Int64? {
        if case .int(let key) = object.primaryKey { key } else { nil }
    }

    func open(_ directory: TemporaryDirectory) throws -> Replica { try open(directory.path) }

    func open(_ path: String) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(directory: path, schema: Self.schema, configuration: configuration)
    }

    @Test("One canonical form: 12.50 and 12.5 store as the same bytes; text that is not canonical does not decode")
    func canonicalForm() throws {
        #expect(Self.decimal("12.50").canonicalText == "12.5")
        #expect(Self.decimal("-0.000100").canonicalText == "-0.0001")
        #expect(Self.decimal("1e3").canonicalText == "1000")
        #expect(Decimal.nan.canonicalText == "NaN")
        for text in ["12.5", "-0.0001", "1000", "0", "NaN", "12345678901234567890123456789012345678"] {
            #expect(Decimal(canonicalText: text)?.canonicalText == text, "\(text)")
        }
        for text in ["12.50", "1e3", "+1", "abc", "1.2.3", "", " 1"] {
            #expect(Decimal(canonicalText: text) == nil, "\(text) is not canonical")
        }
        // 39 significant digits would be stored inexactly: refused. Zeros around them do not count.
        #expect(Decimal(parsing: "123456789012345678901234567890123456789") == nil)
        #expect(Decimal(parsing: "0.000123456789012345678901234567890123456780000") != nil)
        for text in ["12abc", "1.2.3", "--1", "", "1e", "0x10"] {
            #expect(Decimal(parsing: text) == nil, "\(text) is not a number")
        }
        var a = BinaryWriter()
        var b = BinaryWriter()
        var names = NameTable.inline
        a.value(.decimal(Self.decimal("12.50")), &names)
        b.value(.decimal(Self.decimal("12.5")), &names)
        #expect(a.bytes == b.bytes)
        var reader = BinaryReader(a.bytes, subject: "value")
        #expect(try reader.value(names) == .decimal(Self.decimal("12.5")))
        #expect(Value.decimal(Self.decimal("12.50")).storesAlike(.decimal(Self.decimal("12.5"))))
    }

    @Test("A model's Decimal properties round-trip exactly, where a Double would not")
    func modelRoundTrip() throws {
        let directory = TemporaryDirectory("decimal-model")
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(
            directory: directory.path, models: [Invoice.self], schemaVersion: 1, configuration: configuration)
        defer { replica.close() }
        let schema = try #require(replica.schema[type: "Invoice"])
        #expect(schema.properties.first { $0.name == "total" }?.kind == .scalar(.decimal))
        #expect(schema.properties.first { $0.name == "discount" }?.isOptional == true)
        let total = Self.decimal("0.1") + Self.decimal("0.2")
        let invoice = Invoice(
            _id: "i1", total: total, discount: nil, lines: [Self.decimal("0.1"), Self.decimal("0.2")])
        try replica.write { txn in _ = try txn.create(invoice) }
        let read = try #require(try replica.object(Invoice.self, primaryKey: "i1"))
        #expect(read == invoice)
        #expect(read.total == Self.decimal("0.3"))
        #expect(0.1 + 0.2 != 0.3 as Double)  // the point of a decimal
        let sums = try replica.objects("Invoice", where: "lines.@sum == $0", arguments: [.decimal(Self.decimal("0.3"))])
        #expect(sums.count == 1)
    }

    /// Decimals over a wide range of magnitudes and both signs, with repeats and a NaN.
    static func values(seed: UInt64) -> [Decimal] {
        var random = SplitMix64(seed: seed)
        var values: [Decimal] = [
            0, .nan, Self.decimal("-0.5"), Self.decimal("0.5"), 1, -1, Self.decimal("19.99"), Self.decimal("-0.07"),
        ]
        for _ in 0..<150 {
            let significand = Int64(random.next() % 2_000_001) - 1_000_000
            let exponent = Int(random.next() % 13) - 6
            values.append(
                Decimal(
                    sign: significand < 0 ? .minus : .plus, exponent: exponent,
                    significand: Decimal(significand.magnitude)))
        }
        return values
    }

    @Test("Index keys sort decimals in numeric order, NaN first")
    func indexKeysSortNumerically() {
        let values = Self.values(seed: 7).filter { !$0.isNaN }
        let byKey = values.sorted {
            KeyEncoding.orderedBytes($0).lexicographicallyPrecedes(KeyEncoding.orderedBytes($1))
        }
        #expect(byKey == values.sorted())
        #expect(KeyEncoding.orderedBytes(.nan).lexicographicallyPrecedes(KeyEncoding.orderedBytes(-1_000_000_000)))
        #expect(KeyEncoding.orderedBytes(Self.decimal("1.50")) == KeyEncoding.orderedBytes(Self.decimal("1.5")))
    }

    @Test(
        "Queries on an indexed and an unindexed decimal property give what a plain evaluation does, with int, double and decimal constants"
    )
    func queriesMatchAPlainEvaluation() throws {
        let directory = TemporaryDirectory("decimal-queries")
        let replica = try open(directory)
        defer { replica.close() }
        let values = Self.values(seed: 11)
        try replica.write { txn in
            for (index, value) in values.enumerated() {
                _ = try txn.create(
                    "Item", ["_id": .int(Int64(index)), "price": .decimal(value), "plain": .decimal(value)])
            }
        }
        func expected(_ keep: (Decimal) -> Bool) -> Set<Int64> {
            Set(values.indices.filter { !values[$0].isNaN && keep(values[$0]) }.map { Int64($0) })
        }
        func found(_ query: String, _ arguments: [Value] = []) throws -> Set<Int64> {
            Set(try replica.objects("Item", where: query, arguments: arguments).compactMap(Self.intKey))
        }
        let half = Self.decimal("0.5")
        let cases: [(String, [Value], Set<Int64>)] = [
            ("> 0.5", [], expected { $0 > half }),
            (">= 1", [], expected { $0 >= 1 }),
            ("< -0.5", [], expected { $0 < -half }),
            ("<= $0", [.decimal(Self.decimal("12.25"))], expected { $0 <= Self.decimal("12.25") }),
            ("== 0.5", [], expected { $0 == half }),
            ("== $0", [.decimal(-half)], expected { $0 == -half }),
            ("== 1", [], expected { $0 == 1 }),
            ("!= 0", [], expected { $0 != 0 }.union(values.indices.filter { values[$0].isNaN }.map { Int64($0) })),
            ("BETWEEN {-1, 1}", [], expected { $0 >= -1 && $0 <= 1 }),
            ("IN {0.5, -1, $0}", [.decimal(Self.decimal("-0.5"))], expected { $0 == half || $0 == -1 || $0 == -half }),
            ("* 2 > 1", [], expected { $0 * 2 > 1 }),
            // A double constant is the decimal its shortest form writes (Foundation's Decimal(Double) is not).
            ("== 19.99", [], expected { $0 == Self.decimal("19.99") }),
            ("== $0", [.double(-0.07)], expected { $0 == Self.decimal("-0.07") }),
            // Doubles past Decimal's range, or nearer zero than it reaches, still order against every decimal.
            ("> 1e-200", [], expected { $0 > 0 }),
            ("< -1e-200", [], expected { $0 < 0 }),
            ("< 1e300", [], expected { _ in true }),
            ("> -1e300", [], expected { _ in true }),
            // Eight or more constants are looked up by hash: the keys must equal as the comparisons do.
            (
                "IN {0.5, -1, 1, 2.0, 3, 4, 5, 6, 7.25, $0}", [.decimal(Self.decimal("-0.5"))],
                expected { [half, -1, 1, 2, 3, 4, 5, 6, Self.decimal("7.25"), -half].contains($0) }
            ),
        ]
        for (condition, arguments, want) in cases {
            #expect(!want.isEmpty || condition == "== 0.5", "\(condition) selects nothing: the test tests little")
            let indexed = try found("price \(condition)", arguments)
            #expect(
                indexed == want,
                "indexed: price \(condition): \(indexed.subtracting(want)) wrongly, \(want.subtracting(indexed)) missed"
            )
            let scanned = try found("plain \(condition)", arguments)
            #expect(
                scanned == want,
                "scanned: plain \(condition): \(scanned.subtracting(want)) wrongly, \(want.subtracting(scanned)) missed"
            )
        }
        try replica.read { snapshot in
            guard case .index(let property, _) = try snapshot.explain("Item", where: "price > 0.5") else {
                Issue.record("a range on an indexed decimal property should use its index")
                return
            }
            #expect(property == "price")
        }
        // SORT: null first, then NaN, then by value.
        let sorted = try replica.objects("Item", where: "TRUEPREDICATE SORT(price ASC)")
            .compactMap { $0["price"].decimalValue }
        #expect(sorted.first?.isNaN == true)
        #expect(Array(sorted.dropFirst()) == values.filter { !$0.isNaN }.sorted())
    }

    @Test("@sum, @avg, @min and @max of decimal lists are decimals, exact")
    func aggregates() throws {
        let directory = TemporaryDirectory("decimal-aggregates")
        let replica = try open(directory)
        defer { replica.close() }
        try replica.write { txn in
            _ = try txn.create(
                "Item",
                [
                    "_id": .int(1), "price": .decimal(1),
                    "amounts": .list(["0.1", "0.2", "0.3"].map { .decimal(Self.decimal($0)) }),
                ])
            _ = try txn.create(
                "Item", ["_id": .int(2), "price": .decimal(1), "amounts": .list([.decimal(Self.decimal("-7.25"))])])
        }
        func keys(_ query: String) throws -> [Int64] {
            try replica.objects("Item", where: query).compactMap(Self.intKey).sorted()
        }
        #expect(try keys("amounts.@sum == 0.6") == [1])
        #expect(try keys("amounts.@avg == 0.2") == [1])
        #expect(try keys("amounts.@max == 0.3") == [1])
        #expect(try keys("amounts.@min < -7") == [2])
        #expect(try keys("ANY amounts == 0.2") == [1])
    }

    @Test("The App Services JSON form: bsonType decimal, defaults as strings or $numberDecimal, written back alike")
    func schemaJSON() throws {
        let json = """
            {"title": "Item", "bsonType": "object", "required": ["_id", "price"],
             "properties": {"_id": {"bsonType": "long"}, "price": {"bsonType": "decimal"},
                            "tax": {"bsonType": "decimal", "default": {"$numberDecimal": "0.20"}}},
             "x-tributary-primaryKey": "_id"}
            """
        let schema = try Schema(json: "[\(json)]")
        let item = try #require(schema[type: "Item"])
        #expect(item.properties.first { $0.name == "price" }?.kind == .scalar(.decimal))
        #expect(item.properties.first { $0.name == "tax" }?.defaultValue == .decimal(Self.decimal("0.2")))
        let again = try Schema(json: schema.jsonString())
        #expect(again == schema)
    }

    @Test("Decimals sync: a write on one replica reaches another exactly, and concurrent writes merge alike")
    func syncsBetweenReplicas() throws {
        let directory = TemporaryDirectory("decimal-sync")
        let a = try open(directory.appending("a"))
        let b = try open(directory.appending("b"))
        defer {
            a.close()
            b.close()
        }
        try a.write { txn in _ = try txn.create("Item", ["_id": .int(1), "price": .decimal(Self.decimal("19.99"))]) }
        _ = try b.integrate(a.changesets(missingFrom: b.versionVector))
        try a.write { txn in try txn.update("Item", primaryKey: .int(1), ["price": .decimal(Self.decimal("17.50"))]) }
        try b.write { txn in try txn.update("Item", primaryKey: .int(1), ["price": .decimal(Self.decimal("18.25"))]) }
        _ = try b.integrate(a.changesets(missingFrom: b.versionVector))
        _ = try a.integrate(b.changesets(missingFrom: a.versionVector))
        let left = try a.object("Item", primaryKey: .int(1))?["price"]
        #expect(left == (try b.object("Item", primaryKey: .int(1))?["price"]))
        #expect(left == .decimal(Self.decimal("17.5")) || left == .decimal(Self.decimal("18.25")))
        #expect(try a.inspection.recordsDigest() == b.inspection.recordsDigest())
    }
}
