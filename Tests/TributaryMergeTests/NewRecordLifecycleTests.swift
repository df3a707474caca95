import Testing
import TributaryModel
import TributaryTestSupport

@testable import TributaryMerge

/// A create of a new object with plain values is kept unbuilt: as its values while it is the latest create, then as
/// its bytes, built only when something reads or changes it. Whatever happens to such records afterwards (reads,
/// sets, erases, creates again, more creates in between, changes taken in the middle), a working set must hold what
/// the general path holds. The general path is forced by a schema that remembers the removal of an unrelated type,
/// which changes nothing the rules decide for `Item`.
@Suite struct NewRecordLifecycleTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Item",
                properties: [
                    .scalar("_id", .int), .scalar("a", .string, optional: true), .scalar("b", .int, default: .int(7)),
                    .scalar("c", .double, optional: true),
                ])
        ])

    /// The same type with two more properties: `aa`, which sorts between `a` and `b` and moves the properties after
    /// it, and `d`, which creates name before it exists (and which is then no property).
    static let widerSchema = Schema(
        version: 2,
        types: [
            ObjectSchema(
                name: "Item",
                properties: [
                    .scalar("_id", .int), .scalar("a", .string, optional: true), .scalar("aa", .int, optional: true),
                    .scalar("b", .int, default: .int(7)), .scalar("c", .double, optional: true),
                    .scalar("d", .bool, optional: true),
                ])
        ])

    static func general(_ schema: Schema) -> Schema {
        var schema = schema
        schema.recordRemoval(TypeRemoval(dot: Dot(origin: ReplicaID(rawValue: 77), sequence: 1)), ofType: "Gone")
        return schema
    }

    static func info(_ sequence: UInt64) -> ChangesetInfo {
        let replica = ReplicaID(rawValue: 5)
        return ChangesetInfo(
            dot: Dot(origin: replica, sequence: sequence),
            stamp: Stamp(time: HybridTime(milliseconds: 1_700_000_000_000 + sequence, counter: 0), replica: replica),
            context: VersionVector([(replica, sequence - 1)]))
    }

    static func digest(_ changes: [RecordChange]) -> [String] {
        changes.map { "\($0.key) \($0.encodedAfter().map { $0.map(String.init).joined(separator: ",") } ?? "none")" }
    }

    @Test("Unbuilt records read, change and store as the general path's", arguments: 1...30)
    func unbuiltRecordsBehaveAsBuiltOnes(seed: UInt64) throws {
        var generator = SplitMix64(seed: seed)
        var fast = WorkingSet(source: EmptyRecordSource(), schema: Self.schema)
        var general = WorkingSet(source: EmptyRecordSource(), schema: Self.general(Self.schema))
        var schema = Self.schema
        var fastTaken: [RecordChange] = []
        var generalTaken: [RecordChange] = []
        var encoded = 0
        for sequence in UInt64(1)...200 {
            // Halfway, the type gains properties: plans of earlier creates must not place values by the old positions.
            if sequence == 100 {
                schema = Self.widerSchema
                fast.setSchema(schema)
                general.setSchema(Self.general(schema))
            }
            let key = PrimaryKey.int(Int64(generator.next() % 12))
            let recordKey = RecordKey(type: "Item", primaryKey: key)
            var instruction: Instruction?
            switch generator.next() % 6 {
            case 0, 1:
                var fields: [FieldValue] = []
                if generator.next() % 2 == 0 { fields.append(FieldValue("a", .string("s\(sequence)"))) }
                if generator.next() % 2 == 0 { fields.append(FieldValue("c", .double(Double(sequence)))) }
                if generator.next() % 3 == 0 { fields.append(FieldValue("d", .bool(sequence % 2 == 0))) }
                let defaults = fields.contains { $0.name == "b" } ? [] : [FieldValue("b", .int(7))]
                instruction = .create(type: "Item", primaryKey: key, fields: fields, defaults: defaults)
            case 2:
                instruction = .set(FieldPath(type: "Item", primaryKey: key, property: "b"), .int(Int64(sequence)))
            case 3:
                instruction = .erase(type: "Item", primaryKey: key)
            case 4:
                instruction = nil
                #expect(try fast.record(recordKey) == general.record(recordKey), "seed \(seed), step \(sequence)")
            default:
                instruction = nil
                if generator.next() % 4 == 0 {
                    fastTaken += fast.takeChanges()
                    generalTaken += general.takeChanges()
                    // Taken changes leave the working sets empty: reload nothing, as a store would not have them.
                    fast = WorkingSet(source: EmptyRecordSource(), schema: schema)
                    general = WorkingSet(source: EmptyRecordSource(), schema: Self.general(schema))
                }
            }
            // Around the change, two creates that name the same properties, one of them (`d`) added by the change.
            if sequence == 99 || sequence == 100 {
                instruction = .create(
                    type: "Item", primaryKey: .int(Int64(sequence)),
                    fields: [FieldValue("a", .string("x")), FieldValue("d", .bool(true))], defaults: [])
            }
            if let instruction {
                try MergeEngine.apply(instruction, index: 0, of: Self.info(sequence), to: &fast)
                try MergeEngine.apply(instruction, index: 0, of: Self.info(sequence), to: &general)
            }
            #expect(try fast.keys(ofType: "Item") == general.keys(ofType: "Item"), "seed \(seed), step \(sequence)")
        }
        let fastChanges = fast.changes
        encoded += fastChanges.count { $0.holdsEncoding }
        #expect(Self.digest(fastChanges) == Self.digest(general.changes))
        fastTaken += fast.takeChanges()
        generalTaken += general.takeChanges()
        #expect(Self.digest(fastTaken) == Self.digest(generalTaken))
        #expect(fastTaken.map(\.after) == generalTaken.map(\.after))
        #expect(!generalTaken.contains { $0.holdsEncoding })
        #expect(encoded + fastTaken.count { $0.holdsEncoding } > 0)
    }
}
