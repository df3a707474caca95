import Testing
@testable import TributaryMerge
import TributaryModel
import TributaryTestSupport

/// A create of an object that has no fields yet builds them in one ordered pass when the schema never removed a
/// property, and through the general merge otherwise (names given twice, out of order, or given and defaulted, which
/// only instructions from elsewhere hold). Either way the record must be what the rules say: each value given lands
/// with the create's stamp (of a name given twice, the later), each default fills a property not given with the zero
/// stamp (rule 3), and the primary key and unknown names are not fields.
@Suite struct NewRecordTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Item",
                properties: [
                    .scalar("_id", .int), .scalar("a", .string), .scalar("b", .int, default: .int(7)),
                    .scalar("c", .double, optional: true), .scalar("d", .bool, default: .bool(false)),
                    .scalar("e", .string, optional: true),
                ])
        ])

    static func info(_ sequence: UInt64) -> ChangesetInfo {
        let replica = ReplicaID(rawValue: 5)
        return ChangesetInfo(
            dot: Dot(origin: replica, sequence: sequence),
            stamp: Stamp(time: HybridTime(milliseconds: 1_700_000_000_000 + sequence, counter: 0), replica: replica),
            context: VersionVector())
    }

    static func randomValue(of name: String, _ generator: inout SplitMix64) -> Value {
        let number = generator.next() % 1000
        switch name {
        case "a", "e", "ghost": return .string("s\(number)")
        case "b", "_id": return .int(Int64(number))
        case "c": return .double(Double(number) / 4)
        default: return .bool(number % 2 == 0)
        }
    }

    @Test func createsOfNewObjectsFollowTheRules() throws {
        var generator = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 0x2EC0))
        let names = ["a", "b", "c", "d", "e", "_id", "ghost"]
        var outOfOrder = 0
        for sequence in UInt64(1)...2_000 {
            // Values given: a random selection, in name order most of the time, else shuffled, with repeats.
            var explicit: [FieldValue] = []
            for name in names where generator.next() % 2 == 0 {
                explicit.append(FieldValue(name, Self.randomValue(of: name, &generator)))
            }
            if generator.next() % 4 == 0 {
                if let repeated = explicit.randomElement(using: &generator) {
                    explicit.append(FieldValue(repeated.name, Self.randomValue(of: repeated.name, &generator)))
                }
                explicit.shuffle(using: &generator)
                outOfOrder += 1
            }
            // Defaults: of the properties not given, as a local writer sends them, or sometimes of given ones too.
            let given = Set(explicit.map(\.name))
            let defaults = [FieldValue("b", .int(7)), FieldValue("d", .bool(false)), FieldValue("ghost", .string("g"))]
                .filter { !given.contains($0.name) || generator.next() % 8 == 0 }
            let key = PrimaryKey.int(Int64(sequence))
            let info = Self.info(sequence)
            var working = WorkingSet(source: EmptyRecordSource(), schema: Self.schema)
            try MergeEngine.apply(
                .create(type: "Item", primaryKey: key, fields: explicit, defaults: defaults), index: 0, of: info,
                to: &working)

            var expected = FieldTable()
            for field in explicit where !["_id", "ghost"].contains(field.name) {
                expected[field.name] = .register(Register(value: .scalar(field.value), stamp: info.stamp))
            }
            for field in defaults where field.name != "ghost" && expected[field.name] == nil {
                expected[field.name] = .register(Register(value: .scalar(field.value), stamp: .zero))
            }
            let record = try #require(try working.record(RecordKey(type: "Item", primaryKey: key)))
            #expect(record == ObjectRecord(exists: true, fields: expected), "create \(sequence): \(explicit) + \(defaults)")
            #expect(record.encoded() == ObjectRecord(exists: true, fields: expected).encoded())
        }
        #expect(outOfOrder > 300)
    }

    @Test func aBadCreateNamesTheValueGivenFirst() throws {
        var working = WorkingSet(source: EmptyRecordSource(), schema: Self.schema)
        let create = Instruction.create(
            type: "Item", primaryKey: .int(1), fields: [FieldValue("a", .int(3))], defaults: [FieldValue("b", .string("x"))])
        #expect {
            try MergeEngine.apply(create, index: 0, of: Self.info(1), to: &working)
        } throws: { error in
            let error = error as? MergeError
            return error?.code == .invalidInstruction && error?.message.contains("Item.a") == true
        }
    }
}
