import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// A create's instruction comes from a planned path (one pass over the values and one over the type's properties)
/// when the values are valid, and from the checked path otherwise. The two must agree on every input the planned path
/// accepts, and the planned path must accept nothing the checked path refuses.
@Suite("Creates: the planned path agrees with the checked path")
struct CreatePathTests {
    /// The chat schema, and a type whose property names have other spellings that are equal as `String`s.
    static let schema: Schema = {
        var types = Fixtures.chatSchema.types
        types.append(
            ObjectSchema(
                name: "Spelling",
                properties: [
                    .scalar("_id", .int), .scalar("Kind", .string, optional: true),
                    .scalar("caf\u{E9}", .int, default: 1),
                ]))
        return Schema(version: Fixtures.chatSchema.version, types: types)
    }()

    func open(_ directory: TemporaryDirectory) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(directory: directory.path, schema: Self.schema, configuration: configuration)
    }

    /// Random values for a `User`: right and wrong types, nulls, missing required properties, unknown names.
    static func randomValues(_ generator: inout SplitMix64, index: Int) -> [String: Value] {
        var values: [String: Value] = ["_id": .string("u\(index)")]
        func maybe(_ percent: UInt64) -> Bool { generator.next() % 100 < percent }
        if maybe(85) { values["name"] = maybe(90) ? .string("name \(index)") : .int(7) }
        if maybe(50) { values["age"] = maybe(20) ? .null : (maybe(90) ? .int(Int64(index)) : .string("old")) }
        if maybe(40) { values["karma"] = maybe(90) ? .int(3) : .null }
        if maybe(30) { values["tags"] = maybe(90) ? .list([.string("a"), .string("b")]) : .list([.int(1)]) }
        if maybe(20) { values["friends"] = .list([.link(.string("u0")), .link(maybe(90) ? .string("u1") : .int(2))]) }
        if maybe(20) {
            values["address"] = .embedded(EmbeddedObject(type: "Address", fields: ["city": .string("Oslo")]))
        }
        if maybe(5) { values["nickname"] = .string("unknown property") }
        return values
    }

    /// Random values for a `Spelling`, whose names the caller may spell with other code points: "Kind" with the
    /// Kelvin sign, "café" with a combining accent. An instruction keeps the caller's spelling.
    static func randomSpellings(_ generator: inout SplitMix64, index: Int) -> [String: Value] {
        var values: [String: Value] = ["_id": .int(Int64(index))]
        switch generator.next() % 3 {
        case 0: values["Kind"] = .string("plain")
        case 1: values["\u{212A}ind"] = .string("kelvin")
        default: break
        }
        switch generator.next() % 3 {
        case 0: values["caf\u{E9}"] = .int(2)
        case 1: values["cafe\u{301}"] = .int(3)
        default: break
        }
        return values
    }

    /// The field and default names of a create, as bytes.
    static func spelledNames(_ instruction: Instruction) -> [[UInt8]] {
        guard case .create(_, _, let fields, let defaults) = instruction else { return [] }
        return (fields + defaults).map { Array($0.name.utf8) }
    }

    @Test("The planned create instruction equals the checked one; inputs it declines are the checked path's to judge")
    func plannedAgreesWithChecked() throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        var generator = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 0xC4EA7E))
        var planned = 0
        var declined = 0
        try replica.write { txn in
            let user = try #require(txn.schema[type: "User"])
            let spelling = try #require(txn.schema[type: "Spelling"])
            for index in 0..<3_000 {
                let spelled = index % 4 == 3
                let type = spelled ? spelling : user
                let values =
                    spelled
                    ? Self.randomSpellings(&generator, index: index) : Self.randomValues(&generator, index: index)
                let key = spelled ? PrimaryKey.int(Int64(index)) : PrimaryKey.string("u\(index)")
                let checked = Result { try txn.checkedCreate(type, key, values) }
                if let instruction = txn.plannedCreate(type, key, values) {
                    planned += 1
                    let expected = try checked.get()
                    #expect(expected == instruction, "values: \(values)")
                    // `String` equality cannot tell spellings apart; the bytes can.
                    #expect(Self.spelledNames(expected) == Self.spelledNames(instruction), "values: \(values)")
                } else {
                    declined += 1
                    // Declined: invalid (the checked path throws) or spelled otherwise than the schema.
                    if case .success = checked {
                        #expect(
                            values.keys.contains { name in
                                type.properties.contains { $0.name == name && !$0.name.utf8.elementsEqual(name.utf8) }
                            }, "declined valid values: \(values)")
                    }
                }
            }
        }
        #expect(planned > 1_000)
        #expect(declined > 500)
    }

    @Test("A create after a schema change in the same transaction takes the changed type's defaults")
    func planFollowsSchemaChangesInTheTransaction() throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        try replica.write { txn in
            try txn.create("User", ["_id": "a", "name": "Ada"])
            try txn.addProperty(.scalar("level", .int, default: 5), to: "User")
            try txn.create("User", ["_id": "b", "name": "Bob"])
        }
        var logged: [Instruction] = []
        try replica.forEachChangeset { _, changeset in
            logged = changeset.instructions
            return true
        }
        let creates = logged.compactMap { instruction -> [FieldValue]? in
            if case .create(_, _, _, let defaults) = instruction { defaults } else { nil }
        }
        #expect(creates.count == 2)
        #expect(!creates[0].contains { $0.name == "level" })
        #expect(creates[1].contains { $0.name == "level" && $0.value == .int(5) })
        #expect(try replica.object("User", primaryKey: .string("b"))?["level"] == 5)
        #expect(try replica.verify().passed)
    }
}
