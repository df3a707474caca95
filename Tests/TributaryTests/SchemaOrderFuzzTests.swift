import Foundation
import Testing
import TributaryModel
import TributaryTestSupport
import TributaryTestTags

@testable import Tributary

/// Looks for order dependence in schema merging (rule 8). Three writers share a seeded object of a type whose
/// properties come from a small pool of names; each makes one to four transactions of renames, removals, additions,
/// redefinitions, writes and creates, without syncing. Some properties link to a second type, `Label`, or embed a
/// third, `Spot`, which writers also remove (with the properties that name them, as a migration must), add back, and
/// create labels of (but for the occasional partial sync between two of them).
/// Eight observers then receive the writers' changesets: six in every order of the writers' batches (each batch in
/// its causal order), two one changeset at a time (round robin, and a random interleaving); the writers sync among
/// themselves too. Then:
///
/// - every replica passes `verify`;
/// - if no replica refused anything, every replica has the same views and nothing waits;
/// - if some replica refused something, every replica refused something (a disagreement is never merged silently on
///   one replica and refused on another);
/// - replicas that refused the same changesets (so integrated the same ones) have the same views;
/// - a refused changeset stays refused;
/// - a replica reset from any of them (a new one that integrates its whole export in one call) holds byte for byte
///   what it holds, refusing nothing.
///
/// The third to fifth do not hold yet: which changeset a replica refuses can depend on the order it merged in
/// (docs/MergeSemantics.md says so). Seeds that fail only those are listed as a known issue; any other failure fails
/// the test.
///
/// `TRIBUTARY_SEED` sets the first seed (default below), `TRIBUTARY_SCHEMA_FUZZ_SEEDS` the number of seeds (200), and
/// `TRIBUTARY_SCHEMA_FUZZ_MINIMIZE` how many failing seeds get a smaller scenario worked out (2; a few seconds each).
/// A failing seed prints its scenario (as the Swift each writer ran), the delivery orders, what each replica ended
/// with, and a smaller scenario that fails the same way. Replay one with
/// `TRIBUTARY_SEED=<seed> TRIBUTARY_SCHEMA_FUZZ_SEEDS=1 swift test --filter SchemaOrderFuzz`; replayed alone, a seed
/// listed as a known issue prints its scenario and smallest form too.
@Suite("Schema merge order fuzz (rule 8)", .tags(.fuzz, .slow))
struct SchemaOrderFuzzTests {
    static var seedCount: Int {
        ProcessInfo.processInfo.environment["TRIBUTARY_SCHEMA_FUZZ_SEEDS"].flatMap { Int($0) } ?? 200
    }

    /// How many failing seeds get a smaller scenario worked out (each takes a few seconds).
    static var minimizedCount: Int {
        ProcessInfo.processInfo.environment["TRIBUTARY_SCHEMA_FUZZ_MINIMIZE"].flatMap { Int($0) } ?? 2
    }

    @Test("Schema changes merged in different orders are refused everywhere, or converge")
    func schemaMergeOrderFuzz() async throws {
        let first = SplitMix64.seedFromEnvironment(default: 0x5C4E_3A00)
        let count = Self.seedCount
        let minimizing = Self.minimizedCount
        var failures: [String] = []
        var refusalOrder: [String] = []
        try await offThePool {
            for seed in first..<(first + UInt64(count)) {
                let scenario = try SchemaFuzz.generate(seed: seed)
                guard let outcome = try SchemaFuzz.execute(scenario), !outcome.problems.isEmpty else { continue }
                var failure = "SchemaOrderFuzz seed \(seed) FAILED [\(outcome.category)]\n" + outcome.log
                if outcome.onlyRefusalOrder {
                    refusalOrder.append("SchemaOrderFuzz seed \(seed): [\(outcome.category)]")
                    // Replaying one seed shows it whole, with its smallest form.
                    if count == 1 {
                        let smaller = try SchemaFuzz.minimize(scenario, failingAs: outcome.category)
                        print(
                            failure + "\n--- smallest scenario failing the same way ---\n"
                                + (try SchemaFuzz.execute(smaller)?.log ?? "?"))
                    }
                    continue
                }
                if failures.count < minimizing {
                    let smaller = try SchemaFuzz.minimize(scenario, failingAs: outcome.category)
                    failure +=
                        "\n--- smallest scenario failing the same way ---\n"
                        + (try SchemaFuzz.execute(smaller)?.log ?? "?")
                    failure +=
                        "\nSchemaOrderFuzz seed \(seed) minimized: [\(outcome.category)] \(SchemaFuzz.summary(smaller))"
                }
                failures.append(failure)
                print(failure)
            }
        }
        print(
            "SchemaOrderFuzz: \(count) seeds from \(first), \(failures.count) failing, \(refusalOrder.count) with refusals that depend on the order"
        )
        for failure in failures.prefix(3) { Issue.record(Comment(rawValue: failure)) }
        if failures.count > 3 { Issue.record("\(failures.count) of \(count) seeds failed; the output shows each") }
        // Known, documented (docs/MergeSemantics.md, rule 8): refusals are judged against what a replica holds when the
        // changeset arrives, so a conflicting definition can be refused on one replica and not on another. Listed, not
        // hidden; replay one with TRIBUTARY_SEED to see it.
        if !refusalOrder.isEmpty {
            withKnownIssue("rule 8: which changeset is refused can depend on the merge order", isIntermittent: true) {
                Issue.record(Comment(rawValue: refusalOrder.joined(separator: "\n")))
            }
        }
    }

    /// The smallest scenarios of the order dependences this test found, each of which now converges: a redefinition
    /// of an indexed property's default (R1), a rename into a name removed concurrently (R2), two properties renamed
    /// to one name (R3), a write that missed a chain of renames that comes back to its name (R4), a rename onto a
    /// name that was renamed away concurrently (R5), a create with values for both a renamed property and its new name
    /// (R7), a write that follows a rename whose new name its own changeset renamed on (R8), renames that form a
    /// cycle (R9), two copies of a rename whose new name one of them saw used and renamed away (R13), and a copy
    /// that drops the property merged after a rename that moved it on (R14) but not after one in its copy's own
    /// changeset (R15), and two embedded objects of one changeset joined by renames (R16). Writer 0 is w0, and so on;
    /// the object `t` exists before the writers start.
    @Test("Reproductions of order dependences found by the fuzzer converge", arguments: SchemaFuzz.reproductions)
    func reproductionConverges(_ reproduction: SchemaFuzz.Reproduction) throws {
        let schema = Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: SchemaFuzz.typeName, properties: [.scalar("_id", .string)] + reproduction.properties),
                SchemaFuzz.labelType, SchemaFuzz.spotType,
            ])
        var fields = reproduction.fields
        fields["_id"] = "t"
        let scenario = SchemaFuzzScenario(seed: 0, schema: schema, seedFields: fields, steps: reproduction.steps)
        let outcome = try #require(try SchemaFuzz.execute(scenario))
        #expect(outcome.problems.isEmpty, "\(reproduction.name):\n\(outcome.log)")
    }

    /// A shape that still ends differently by merge order, found by hand (not by the fuzzer): two copies of a
    /// rename (a→b on w0 and w1), where w0's copy came after a rename of another property away from the new name
    /// (b→c) and was then removed (remove b). Merged after the removal, w1's copy would land on c, but the property is
    /// gone; merged before it, the property joins the other at c. docs/MergeSemantics.md lists it. The day it
    /// converges, this test reports that the known issue is gone: move it to ``SchemaFuzz/reproductions``.
    @Test("Known: copies of a rename, one removed after a rename away from its new name, end differently")
    func copiesOfARenameOneRemovedAfterARenameAway() throws {
        let schema = Schema(
            version: 1,
            types: [
                ObjectSchema(
                    name: SchemaFuzz.typeName,
                    properties: [.scalar("_id", .string), .scalar("a", .int, optional: true)])
            ])
        let steps: [SchemaFuzzStep] = [
            .write(writer: 0, advance: 0, [.add(.scalar("b", .int, optional: true)), .rename(from: "b", to: "c")]),
            .write(writer: 0, advance: 0, [.rename(from: "a", to: "b")]),
            .write(writer: 0, advance: 0, [.remove("b")]),
            .write(writer: 1, advance: 0, [.rename(from: "a", to: "b")]),
        ]
        let scenario = SchemaFuzzScenario(seed: 0, schema: schema, seedFields: ["_id": "t", "a": 7], steps: steps)
        let outcome = try #require(try SchemaFuzz.execute(scenario))
        // The known problem, and only it: any other would fail the test.
        #expect(outcome.categories.isSubset(of: ["differ-without-refusal"]), "\(outcome.log)")
        withKnownIssue("rule 8: copies of a rename whose new name was renamed away and then removed around one copy") {
            #expect(outcome.problems.isEmpty, "\(outcome.log)")
        }
    }
}

extension SchemaFuzz {
    struct Reproduction: Sendable, CustomTestStringConvertible {
        var name: String
        var properties: [Property]
        var fields: [String: Value]
        var steps: [SchemaFuzzStep]
        var testDescription: String { name }
    }

    static let reproductions: [Reproduction] = [
        Reproduction(
            name: "R1: an indexed property's default redefined", properties: [], fields: [:],
            steps: [
                .write(writer: 0, advance: 0, [.add(.scalar("c", .int, optional: true, indexed: true))]),
                .write(
                    writer: 0, advance: 0, [.redefine(.scalar("c", .int, optional: true, indexed: true, default: 6))]),
            ]),
        Reproduction(
            name: "R1b: an indexed property added twice with different defaults", properties: [], fields: [:],
            steps: [
                .write(writer: 0, advance: 0, [.add(.scalar("c", .string, optional: true, indexed: true))]),
                .write(
                    writer: 1, advance: 0, [.add(.scalar("c", .string, optional: true, indexed: true, default: "x"))]),
            ]),
        Reproduction(
            name: "R2: a rename into a name removed concurrently",
            properties: [.scalar("a", .string, optional: true), .scalar("b", .string, optional: true)],
            fields: ["a": "A", "b": "B"],
            steps: [
                .write(writer: 0, advance: 0, [.remove("a")]),
                .write(writer: 1, advance: 0, [.remove("a"), .rename(from: "b", to: "a")]),
            ]),
        Reproduction(
            name: "R2b: a rename into a name added and removed concurrently",
            properties: [.scalar("b", .string, optional: true)], fields: ["b": "B"],
            steps: [
                .write(writer: 0, advance: 0, [.add(.scalar("a", .string, optional: true))]),
                .write(writer: 0, advance: 0, [.remove("a")]),
                .write(writer: 1, advance: 0, [.rename(from: "b", to: "a")]),
            ]),
        Reproduction(
            name: "R3: two properties renamed to one name",
            properties: [.scalar("c", .string, optional: true), .scalar("d", .string, optional: true, default: "dd")],
            fields: ["c": "C", "d": "D"],
            steps: [
                .write(writer: 0, advance: 0, [.rename(from: "c", to: "a")]),
                .write(writer: 1, advance: 0, [.rename(from: "d", to: "a")]),
            ]),
        Reproduction(
            name: "R4: a write that missed renames d→c→d→c", properties: [.scalar("d", .string, optional: true)],
            fields: ["d": "before"],
            steps: [
                .write(writer: 0, advance: 0, [.rename(from: "d", to: "c")]),
                .write(writer: 0, advance: 0, [.rename(from: "c", to: "d")]),
                .write(writer: 0, advance: 0, [.rename(from: "d", to: "c")]),
                .write(writer: 1, advance: 5, [.update(key: "t", property: "d", "concurrent")]),
            ]),
        Reproduction(
            name: "R4c: a redefinition that missed renames a→d→a→c",
            properties: [.scalar("a", .string, optional: true)], fields: [:],
            steps: [
                .write(writer: 0, advance: 0, [.rename(from: "a", to: "d"), .rename(from: "d", to: "a")]),
                .write(writer: 0, advance: 0, [.rename(from: "a", to: "c")]),
                .write(writer: 1, advance: 0, [.redefine(.scalar("a", .string, optional: true, indexed: true))]),
            ]),
        Reproduction(
            name: "R5: a rename onto a name renamed away concurrently", properties: [], fields: [:],
            steps: [
                .write(writer: 0, advance: 0, [.add(.scalar("b", .int, optional: true))]),
                .write(writer: 0, advance: 0, [.rename(from: "b", to: "c")]),
                .write(writer: 1, advance: 0, [.add(.scalar("c", .int, optional: true)), .rename(from: "c", to: "a")]),
            ]),
        Reproduction(
            name: "R8: a write that follows a rename onto a name its own changeset renamed on",
            properties: [.scalar("c", .string, optional: true, indexed: true, default: "s1")], fields: [:],
            steps: [
                .write(writer: 0, advance: 0, [.rename(from: "c", to: "a")]),
                .sync(from: 0, to: 2), .sync(from: 2, to: 1),
                .write(writer: 1, advance: 0, [.rename(from: "a", to: "d")]),
                .write(writer: 2, advance: 0, [.add(.scalar("d", .string, optional: true, default: .null))]),
                .write(writer: 2, advance: 0, [.rename(from: "d", to: "b"), .update(key: "t", property: "a", "s11")]),
            ]),
        Reproduction(
            name: "R9: two properties renamed onto each other's names concurrently (c→d against d→c)", properties: [],
            fields: [:],
            steps: [
                .write(writer: 0, advance: 0, [.add(.scalar("c", .string, optional: true, indexed: true))]),
                .write(writer: 1, advance: 0, [.add(.scalar("d", .string, optional: true))]),
                .write(writer: 1, advance: 0, [.rename(from: "d", to: "c")]),
                .write(writer: 0, advance: 0, [.rename(from: "c", to: "d")]),
            ]),
        Reproduction(
            name: "R9b: writes to both names that missed a swap of them", properties: [], fields: [:],
            steps: [
                .write(writer: 0, advance: 0, [.add(.scalar("c", .string, optional: true))]),
                .write(writer: 0, advance: 0, [.update(key: "t", property: "c", "c0")]),
                .write(writer: 1, advance: 0, [.add(.scalar("d", .string, optional: true))]),
                .write(writer: 1, advance: 0, [.update(key: "t", property: "d", "d1")]),
                .sync(from: 0, to: 2), .sync(from: 1, to: 2),
                .write(writer: 1, advance: 0, [.rename(from: "d", to: "c")]),
                .write(writer: 0, advance: 0, [.rename(from: "c", to: "d")]),
                .write(writer: 2, advance: 3, [.update(key: "t", property: "c", "c2")]),
                .write(writer: 2, advance: 3, [.update(key: "t", property: "d", "d2")]),
            ]),
        Reproduction(
            name: "R9c: three renames in a cycle, on three replicas (a→b, b→c, c→a)", properties: [], fields: [:],
            steps: [
                .write(writer: 0, advance: 0, [.add(.scalar("a", .string, optional: true))]),
                .write(writer: 1, advance: 0, [.add(.scalar("b", .string, optional: true))]),
                .write(writer: 2, advance: 0, [.add(.scalar("c", .string, optional: true))]),
                .write(writer: 0, advance: 0, [.update(key: "t", property: "a", "A")]),
                .write(writer: 0, advance: 0, [.rename(from: "a", to: "b")]),
                .write(writer: 1, advance: 0, [.rename(from: "b", to: "c")]),
                .write(writer: 2, advance: 0, [.rename(from: "c", to: "a")]),
            ]),
        Reproduction(
            name: "R10: two copies of a rename onto a removed name, one of which missed a removal of it",
            properties: [.scalar("a", .string, optional: true), .scalar("d", .int, default: 1)],
            fields: ["a": "A", "d": 3],
            steps: [
                .write(writer: 1, advance: 0, [.remove("a")]),
                .write(writer: 2, advance: 0, [.remove("a")]),
                .sync(from: 1, to: 0),
                .write(writer: 1, advance: 0, [.rename(from: "d", to: "a")]),
                .sync(from: 2, to: 0),
                .write(writer: 0, advance: 0, [.rename(from: "d", to: "a")]),
            ]),
        Reproduction(
            name: "R11: a rename that saw one copy of a rename, against another copy of it (c→d twice; d→c, c→d)",
            properties: [.scalar("c", .string, optional: true, indexed: true, default: "s2")], fields: [:],
            steps: [
                .write(writer: 1, advance: 0, [.rename(from: "c", to: "d")]),
                .write(writer: 2, advance: 0, [.rename(from: "c", to: "d")]),
                .write(writer: 1, advance: 0, [.rename(from: "d", to: "c"), .rename(from: "c", to: "d")]),
            ]),
        Reproduction(
            name: "R11b: a rename of a name used again, against a copy of the rename of its earlier property",
            properties: [.scalar("c", .int, default: 1), .scalar("d", .int, optional: true, default: 2)], fields: [:],
            steps: [
                .write(writer: 1, advance: 0, [.rename(from: "d", to: "a"), .rename(from: "c", to: "d")]),
                .write(writer: 1, advance: 0, [.remove("a"), .rename(from: "d", to: "a")]),
                .write(writer: 2, advance: 0, [.rename(from: "d", to: "a")]),
            ]),
        Reproduction(
            name: "R12: one changeset redefines a property and, differently, the name a concurrent rename moves it to",
            properties: [.scalar("a", .string, optional: true, indexed: true)], fields: [:],
            steps: [
                .write(writer: 1, advance: 0, [.rename(from: "a", to: "d")]),
                .write(writer: 0, advance: 0, [.add(.scalar("d", .string, optional: true))]),
                .write(
                    writer: 0, advance: 0,
                    [
                        .redefine(.scalar("a", .string, optional: true)),
                        .redefine(.scalar("d", .string, optional: true, indexed: true)),
                    ]),
            ]),
        Reproduction(
            name:
                "R11c: an addition of a renamed name, against a rename of that name that had seen a copy of the first",
            properties: [.scalar("a", .int, optional: true)], fields: [:],
            steps: [
                .write(
                    writer: 1, advance: 0,
                    [.rename(from: "a", to: "d"), .add(.scalar("a", .int, optional: true, indexed: true))]),
                .write(writer: 0, advance: 0, [.rename(from: "a", to: "d"), .rename(from: "d", to: "a")]),
                .write(writer: 0, advance: 0, [.rename(from: "a", to: "d")]),
            ]),
        Reproduction(
            name: "R13: two copies of a rename onto a name one replica used and renamed away concurrently (seed 2607)",
            properties: [.scalar("c", .int, optional: true, indexed: true)], fields: ["c": 7],
            steps: [
                .write(
                    writer: 2, advance: 0,
                    [.add(.scalar("b", .int, optional: true, default: 2)), .rename(from: "b", to: "d")]),
                .write(writer: 1, advance: 0, [.rename(from: "c", to: "a")]),
                .write(writer: 2, advance: 0, [.rename(from: "c", to: "a")]),
                .write(writer: 1, advance: 0, [.rename(from: "a", to: "d")]),
                .write(writer: 2, advance: 0, [.rename(from: "d", to: "b")]),
                .write(writer: 2, advance: 0, [.rename(from: "a", to: "d")]),
            ]),
        Reproduction(
            name:
                "R14: a copy of a rename that drops the property, merged after a rename that saw another copy (seed 10456)",
            properties: [.scalar("d", .string, optional: true)], fields: ["d": "D"],
            steps: [
                .write(writer: 0, advance: 0, [.add(.scalar("a", .string, optional: true, default: "s4"))]),
                .write(writer: 1, advance: 0, [.rename(from: "d", to: "b")]),
                .sync(from: 1, to: 2),
                .write(writer: 0, advance: 0, [.remove("a")]),
                .write(writer: 2, advance: 0, [.rename(from: "b", to: "a")]),
                .sync(from: 0, to: 1),
                .write(writer: 1, advance: 0, [.rename(from: "b", to: "a")]),
                .sync(from: 1, to: 0),
                .write(writer: 0, advance: 0, [.rename(from: "a", to: "b")]),
            ]),
        Reproduction(
            name:
                "R15: a copy of a rename whose other copy's changeset renamed the property back, then a new property of the name",
            properties: [.scalar("a", .int, optional: true)], fields: ["a": 2],
            steps: [
                .write(writer: 1, advance: 0, [.rename(from: "a", to: "b")]),
                .write(writer: 0, advance: 0, [.rename(from: "a", to: "b"), .rename(from: "b", to: "a")]),
                .sync(from: 0, to: 2),
                .write(writer: 2, advance: 0, [.add(.scalar("b", .int, optional: true, default: 5))]),
            ]),
        Reproduction(
            name: "R7: a create with values for a renamed property and its new name",
            properties: [.scalar("d", .string, optional: true)], fields: [:],
            steps: [
                .write(writer: 0, advance: 0, [.rename(from: "d", to: "a")]),
                .write(writer: 1, advance: 0, [.add(.scalar("a", .string, optional: true))]),
                .write(writer: 1, advance: 0, [.create(["_id": "v", "a": "s7", "d": .null])]),
            ]),
        Reproduction(
            name: "R16: two embedded objects that one changeset wrote, their properties renamed to one name",
            properties: [Property("c", .embedded(spotTypeName)), Property("d", .embedded(spotTypeName))],
            fields: [:],
            steps: [
                .write(writer: 1, advance: 0, [.rename(from: "c", to: "b")]),
                .write(
                    writer: 2, advance: 0,
                    [
                        .update(
                            key: "t", property: "c", .embedded(EmbeddedObject(type: spotTypeName, fields: ["x": 2]))),
                        .update(
                            key: "t", property: "d", .embedded(EmbeddedObject(type: spotTypeName, fields: ["x": 3]))),
                    ]),
                .write(writer: 2, advance: 0, [.rename(from: "d", to: "b")]),
            ]),
    ]
}

/// One operation of a writer's transaction.
enum SchemaFuzzOperation: CustomStringConvertible {
    case rename(from: String, to: String)
    case remove(String)
    case add(Property)
    case redefine(Property)
    case update(key: String, property: String, Value)
    case create([String: Value])
    /// Removes `Label`, with the properties linking to it, as a migration that drops a type must.
    case removeLabelType
    case addLabelType
    case createLabel(String)
    /// Removes `Spot`, with the properties embedding it.
    case removeSpotType
    case addSpotType

    /// Whether the operation still makes sense in the transaction's state (a smaller scenario may have taken away
    /// what it relied on): it renames, removes, redefines or writes a property that exists, adds or renames to a
    /// name that does not.
    func fits(_ txn: Transaction) -> Bool {
        guard let type = txn.schema[type: SchemaFuzz.typeName] else { return false }
        func present(_ name: String) -> Bool { name != type.primaryKey && type[property: name] != nil }
        switch self {
        case .rename(let from, let to): return present(from) && type[property: to] == nil
        case .remove(let name): return present(name)
        case .add(let property): return type[property: property.name] == nil
        case .redefine(let property):
            guard let current = type[property: property.name] else { return false }
            return current.kind == property.kind && current.isOptional == property.isOptional
                && current.isList == property.isList
        case .update(_, let property, _): return present(property)
        case .create(let fields): return fields.keys.allSatisfy { $0 == "_id" || present($0) }
        case .removeLabelType: return txn.schema[type: SchemaFuzz.labelTypeName] != nil
        case .createLabel(let key):
            return txn.schema[type: SchemaFuzz.labelTypeName] != nil
                && (try? txn.object(SchemaFuzz.labelTypeName, primaryKey: .string(key))) == .some(nil)
        case .addLabelType: return txn.schema[type: SchemaFuzz.labelTypeName] == nil
        case .removeSpotType: return txn.schema[type: SchemaFuzz.spotTypeName] != nil
        case .addSpotType: return txn.schema[type: SchemaFuzz.spotTypeName] == nil
        }
    }

    func apply(to txn: Transaction) throws {
        let type = SchemaFuzz.typeName
        switch self {
        case .rename(let from, let to): try txn.emit(.renameProperty(type: type, from: from, to: to))
        case .remove(let name): try txn.emit(.removeProperty(type: type, name: name))
        case .add(let property): try txn.addProperty(property, to: type)
        case .redefine(let property): try txn.emit(.redefineProperty(type: type, property))
        case .update(let key, let property, let value):
            try txn.update(type, primaryKey: .string(key), [property: value])
        case .create(let fields): _ = try txn.create(type, fields)
        case .removeLabelType:
            for property in txn.schema[type: type]?.properties ?? []
            where property.kind == .link(SchemaFuzz.labelTypeName) {
                try txn.emit(.removeProperty(type: type, name: property.name))
            }
            try txn.emit(.removeType(SchemaFuzz.labelTypeName))
        case .addLabelType: try txn.addType(SchemaFuzz.labelType)
        case .createLabel(let key):
            _ = try txn.create(SchemaFuzz.labelTypeName, ["_id": .string(key)])
        case .removeSpotType:
            for property in txn.schema[type: type]?.properties ?? []
            where property.kind == .embedded(SchemaFuzz.spotTypeName) {
                try txn.emit(.removeProperty(type: type, name: property.name))
            }
            try txn.emit(.removeType(SchemaFuzz.spotTypeName))
        case .addSpotType: try txn.addType(SchemaFuzz.spotType)
        }
    }

    /// As Swift, the way a test would write it.
    var description: String {
        switch self {
        case .rename(let from, let to):
            "try txn.emit(.renameProperty(type: \"Task\", from: \"\(from)\", to: \"\(to)\"))"
        case .remove(let name): "try txn.emit(.removeProperty(type: \"Task\", name: \"\(name)\"))"
        case .add(let property): "try txn.addProperty(\(SchemaFuzz.source(property)), to: \"Task\")"
        case .redefine(let property): "try txn.emit(.redefineProperty(type: \"Task\", \(SchemaFuzz.source(property))))"
        case .update(let key, let property, let value):
            "try txn.update(\"Task\", primaryKey: .string(\"\(key)\"), [\"\(property)\": \(SchemaFuzz.source(value))])"
        case .create(let fields): "_ = try txn.create(\"Task\", \(SchemaFuzz.source(fields)))"
        case .removeLabelType:
            "(remove every Task property linking to Label); try txn.emit(.removeType(\"Label\"))"
        case .addLabelType: "try txn.addType(SchemaFuzz.labelType)"
        case .createLabel(let key): "_ = try txn.create(\"Label\", [\"_id\": \"\(key)\"])"
        case .removeSpotType:
            "(remove every Task property embedding Spot); try txn.emit(.removeType(\"Spot\"))"
        case .addSpotType: "try txn.addType(SchemaFuzz.spotType)"
        }
    }
}

/// A step of the writers' phase: a transaction on one writer (after advancing its clock), or a sync between two.
enum SchemaFuzzStep {
    case write(writer: Int, advance: UInt64, [SchemaFuzzOperation])
    case sync(from: Int, to: Int)
}

/// A concrete run: replaying it makes the same changesets.
struct SchemaFuzzScenario {
    var seed: UInt64
    var schema: Schema
    var seedFields: [String: Value]
    var steps: [SchemaFuzzStep]
}

enum SchemaFuzz {
    static let typeName = "Task"
    static let labelTypeName = "Label"
    static let labelType = ObjectSchema(name: labelTypeName, properties: [.scalar("_id", .string)])
    static let labelKeys = ["l1", "l2"]
    static let spotTypeName = "Spot"
    static let spotType = ObjectSchema.embedded(spotTypeName, properties: [.scalar("x", .int, optional: true)])
    static let pool = ["a", "b", "c", "d"]
    static let keys = ["t", "u", "v"]
    static let writers = 3
    static let batchOrders: [[Int]] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]
    static let replicaCount = writers + batchOrders.count + 2

    struct Outcome {
        var problems: [String]
        var category: String
        var log: String
        /// Every problem's category.
        var categories: Set<String> = []

        /// Whether every problem is one of the known order dependence of refusals (docs/MergeSemantics.md, rule 8):
        /// which changeset a replica refuses, and whether it refuses one at all, can depend on the order it merged in.
        var onlyRefusalOrder: Bool { !categories.isEmpty && categories.isSubset(of: SchemaFuzz.refusalOrderCategories) }
    }

    static let refusalOrderCategories: Set<String> = [
        "refused-only-somewhere", "refused-then-integrated", "same-refusals-differ",
    ]

    // MARK: Generating

    /// Picks the seed's scenario, choosing each operation against the writer's state at that point.
    static func generate(seed: UInt64) throws -> SchemaFuzzScenario {
        var generator = Generator(random: SplitMix64(seed: seed), seed: seed)
        let schema = generator.initialSchema()
        var seedFields: [String: Value] = ["_id": "t"]
        for property in schema.types[0].properties where property.name != "_id" && generator.random.chance(70) {
            seedFields[property.name] = generator.value(for: property)
        }
        var scenario = SchemaFuzzScenario(seed: seed, schema: schema, seedFields: seedFields, steps: [])
        let cluster = try Cluster(writers, schema: schema)
        try prepare(cluster, scenario)
        var turns: [Int] = []
        for writer in 0..<writers { turns += Array(repeating: writer, count: 1 + generator.random.below(4)) }
        for index in turns.indices.reversed() { turns.swapAt(index, generator.random.below(index + 1)) }
        for writer in turns {
            if generator.random.chance(12) {
                let source = generator.random.below(writers)
                let target = (source + 1 + generator.random.below(writers - 1)) % writers
                try cluster.send(from: source, to: target)
                scenario.steps.append(.sync(from: source, to: target))
            }
            let advance = UInt64(generator.random.below(4))
            cluster.clocks[writer].advance(byMilliseconds: advance)
            var operations: [SchemaFuzzOperation] = []
            try cluster[writer].write { txn in
                for _ in 0..<(1 + generator.random.below(2)) {
                    guard let operation = try generator.operation(in: txn) else { continue }
                    try operation.apply(to: txn)
                    operations.append(operation)
                }
            }
            scenario.steps.append(.write(writer: writer, advance: advance, operations))
        }
        return scenario
    }

    struct Generator {
        var random: SplitMix64
        let seed: UInt64
        var counter: Int64 = 0

        mutating func pick<T>(_ items: [T]) -> T { items[random.below(items.count)] }

        mutating func property(_ name: String, linkable: Bool = true, embeddable: Bool = true) -> Property {
            if linkable && random.chance(30) { return Property(name, .link(SchemaFuzz.labelTypeName)) }
            if embeddable && random.chance(25) { return Property(name, .embedded(SchemaFuzz.spotTypeName)) }
            let kind: ScalarType = random.chance(50) ? .string : .int
            let optional = random.chance(70)
            let defaultValue: Value? = (!optional || random.chance(30)) ? value(for: kind, allowNull: false) : nil
            return .scalar(name, kind, optional: optional, indexed: random.chance(25), default: defaultValue)
        }

        mutating func value(for kind: ScalarType, allowNull: Bool) -> Value {
            counter += 1
            if allowNull && random.chance(10) { return .null }
            return kind == .string ? .string("s\(counter)") : .int(counter)
        }

        mutating func value(for property: Property) -> Value {
            if case .link = property.kind {
                return random.chance(20) ? .null : .link(.string(pick(SchemaFuzz.labelKeys)))
            }
            if case .embedded = property.kind {
                counter += 1
                return random.chance(20)
                    ? .null : .embedded(EmbeddedObject(type: SchemaFuzz.spotTypeName, fields: ["x": .int(counter)]))
            }
            guard case .scalar(let kind) = property.kind else { return .null }
            return value(for: kind, allowNull: property.isOptional)
        }

        /// The primary key and one to three pool names.
        mutating func initialSchema() -> Schema {
            var names = SchemaFuzz.pool.filter { _ in random.chance(50) }
            if names.isEmpty { names = [pick(SchemaFuzz.pool)] }
            if names.count == SchemaFuzz.pool.count { names.removeLast() }
            var properties: [Property] = [.scalar("_id", .string)]
            for name in names { properties.append(property(name)) }
            return Schema(
                version: 1,
                types: [
                    ObjectSchema(name: SchemaFuzz.typeName, properties: properties), SchemaFuzz.labelType,
                    SchemaFuzz.spotType,
                ])
        }

        /// A random operation that fits the transaction's state, or `nil`.
        mutating func operation(in txn: Transaction) throws -> SchemaFuzzOperation? {
            let type = txn.schema[type: SchemaFuzz.typeName]!
            let present = type.properties.filter { $0.name != type.primaryKey }
            let absent = SchemaFuzz.pool.filter { type[property: $0] == nil }
            let labels = txn.schema[type: SchemaFuzz.labelTypeName] != nil
            let spots = txn.schema[type: SchemaFuzz.spotTypeName] != nil
            // A property that a merge left embedding an absent type takes no local write (nothing could check it).
            let writable = present.filter { spots || $0.kind != .embedded(SchemaFuzz.spotTypeName) }
            if random.chance(20) {
                if random.chance(40) { return spots ? .removeSpotType : .addSpotType }
                guard labels else { return .addLabelType }
                let missing = try SchemaFuzz.labelKeys.filter {
                    try txn.object(SchemaFuzz.labelTypeName, primaryKey: .string($0)) == nil
                }
                return missing.isEmpty || random.chance(40) ? .removeLabelType : .createLabel(pick(missing))
            }
            switch random.below(100) {
            case 0..<22 where !present.isEmpty && !absent.isEmpty:
                return .rename(from: pick(present).name, to: pick(absent))
            case 22..<38 where !present.isEmpty:
                return .remove(pick(present).name)
            case 38..<56 where !absent.isEmpty:
                return .add(property(pick(absent), linkable: labels, embeddable: spots))
            case 56..<62 where present.contains(where: { $0.kind.objectType == nil }):
                var redefined = pick(present.filter { $0.kind.objectType == nil })
                if random.chance(50) || !redefined.isOptional && redefined.defaultValue == nil {
                    redefined.isIndexed.toggle()
                } else if redefined.isOptional && random.chance(30) {
                    redefined.defaultValue = nil
                } else {
                    redefined.defaultValue = value(
                        for: redefined.kind == .scalar(.string) ? .string : .int, allowNull: false)
                }
                return .redefine(redefined)
            case 62..<90 where !writable.isEmpty:
                let existing = try SchemaFuzz.keys.filter {
                    try txn.object(SchemaFuzz.typeName, primaryKey: .string($0)) != nil
                }
                guard !existing.isEmpty else { return nil }
                let key = pick(existing)
                let target = pick(writable)
                return .update(key: key, property: target.name, value(for: target))
            default:
                let missing = try SchemaFuzz.keys.filter {
                    try txn.object(SchemaFuzz.typeName, primaryKey: .string($0)) == nil
                }
                guard !missing.isEmpty else { return nil }
                var fields: [String: Value] = ["_id": .string(pick(missing))]
                for property in writable where random.chance(50) { fields[property.name] = value(for: property) }
                return .create(fields)
            }
        }
    }

    /// The seeded object on replica 0, and every replica's first changesets everywhere; then every clock moves on.
    static func prepare(_ cluster: Cluster, _ scenario: SchemaFuzzScenario) throws {
        try cluster[0].write { _ = try $0.create(typeName, scenario.seedFields) }
        var everything: [Changeset] = []
        for replica in cluster.replicas {
            everything += try replica.changesets(missingFrom: VersionVector(), origins: [replica.replicaID])
        }
        for replica in cluster.replicas { _ = try replica.integrate(everything) }
        cluster.advanceClocks(byMilliseconds: 10)
    }

    // MARK: Running and checking

    /// Runs `scenario` on three writers and eight observers and checks the invariants; `nil` when one of its
    /// transactions no longer fits (a smaller scenario that is not valid).
    static func execute(_ scenario: SchemaFuzzScenario) throws -> Outcome? {
        let cluster = try Cluster(replicaCount, schema: scenario.schema)
        try prepare(cluster, scenario)
        var log = [
            "seed \(scenario.seed); schema \(scenario.schema.types[0])",
            "replica 0 creates \(source(scenario.seedFields)); every replica syncs; writers are replicas 1-3 (w0-w2)",
        ]
        var rejected: [[IntegrationReport.Rejection]] = Array(repeating: [], count: replicaCount)
        func note(_ report: IntegrationReport, on target: Int) {
            for rejection in report.rejected where !rejected[target].contains(where: { $0.dot == rejection.dot }) {
                rejected[target].append(rejection)
            }
        }

        for step in scenario.steps {
            switch step {
            case .sync(let source, let target):
                let report = try cluster.send(from: source, to: target)
                note(report, on: target)
                log.append(
                    "sync w\(source) -> w\(target): integrated \(report.integrated), rejected \(report.rejected.map(\.dot))"
                )
            case .write(let writer, let advance, let operations):
                cluster.clocks[writer].advance(byMilliseconds: advance)
                let replica = cluster[writer]
                let before = replica.versionVector[replica.replicaID]
                do {
                    try replica.write { txn in
                        for operation in operations {
                            guard operation.fits(txn) else { throw CancellationError() }
                            try operation.apply(to: txn)
                        }
                    }
                } catch {
                    return nil
                }
                let after = replica.versionVector[replica.replicaID]
                let name = after > before ? "\(Dot(origin: replica.replicaID, sequence: after))" : "(nothing)"
                log.append(
                    "w\(writer) clock +\(advance), changeset \(name): "
                        + operations.map(\.description).joined(separator: "; "))
            }
        }

        // Each writer's own changesets since the first, in its causal order.
        var batches: [[Changeset]] = []
        for writer in 0..<writers {
            let id = cluster[writer].replicaID
            batches.append(try cluster[writer].changesets(missingFrom: VersionVector([(id, 1)]), origins: [id]))
        }
        for (offset, order) in batchOrders.enumerated() {
            let target = writers + offset
            for writer in order { note(try cluster[target].integrate(batches[writer]), on: target) }
            log.append(
                "observer \(cluster[target].replicaID.rawValue): batches of w\(order.map(String.init).joined(separator: ", w"))"
            )
        }
        var random = SplitMix64(seed: scenario.seed ^ 0x0B5E_47E4)
        for (target, roundRobin) in [(replicaCount - 2, true), (replicaCount - 1, false)] {
            var queues = batches
            var order: [String] = []
            var turn = 0
            while queues.contains(where: { !$0.isEmpty }) {
                let writer: Int
                if roundRobin {
                    while queues[turn % writers].isEmpty { turn += 1 }
                    writer = turn % writers
                    turn += 1
                } else {
                    let nonEmpty = queues.indices.filter { !queues[$0].isEmpty }
                    writer = nonEmpty[random.below(nonEmpty.count)]
                }
                let changeset = queues[writer].removeFirst()
                order.append("\(changeset.origin.rawValue):\(changeset.originSequence)")
                note(try cluster[target].integrate([changeset]), on: target)
            }
            log.append("observer \(cluster[target].replicaID.rawValue): one at a time: \(order.joined(separator: " "))")
        }
        var syncs: [String] = []
        for _ in 0..<writers {
            for source in 0..<writers {
                for target in 0..<writers where target != source {
                    let report = try cluster.send(from: source, to: target)
                    note(report, on: target)
                    if !report.integrated.isEmpty { syncs.append("w\(source)->w\(target) \(report.integrated)") }
                }
            }
        }
        log.append("writers sync: " + syncs.joined(separator: ", "))

        // The checks.
        var problems: [(category: String, text: String)] = []
        for index in 0..<replicaCount {
            let verification = try cluster[index].verify()
            if !verification.passed {
                problems.append(("verify", "replica \(index + 1) fails verify: \(verification)"))
            }
            for rejection in rejected[index] where cluster[index].versionVector.includes(rejection.dot) {
                problems.append(
                    ("refused-then-integrated", "replica \(index + 1) refused \(rejection.dot), then integrated it"))
            }
        }
        if rejected.allSatisfy(\.isEmpty) {
            if !(try cluster.converged()) {
                problems.append(("differ-without-refusal", "nothing was refused, but the replicas differ"))
            }
            for index in 0..<replicaCount where !(try cluster[index].pendingDots().isEmpty) {
                problems.append(
                    ("waiting-without-refusal", "nothing was refused, but replica \(index + 1) has changesets waiting"))
            }
        } else {
            let silent = (0..<replicaCount).filter { rejected[$0].isEmpty }
            if !silent.isEmpty {
                problems.append(
                    (
                        "refused-only-somewhere",
                        "replicas \(silent.map { $0 + 1 }) refused nothing, but others refused something"
                    ))
            }
            var groups: [Set<Dot>: [Int]] = [:]
            for index in 0..<replicaCount { groups[Set(rejected[index].map(\.dot)), default: []].append(index) }
            for (dots, members) in groups.sorted(by: { $0.value[0] < $1.value[0] }) where members.count > 1 {
                if try Set(members.map { try cluster[$0].viewDigest() }).count > 1 {
                    problems.append(
                        (
                            "same-refusals-differ",
                            "replicas \(members.map { $0 + 1 }) refused the same changesets \(dots.sorted()) but differ"
                        ))
                }
            }
        }

        // Whatever a replica refused, a replica reset from it (a new one that integrates its whole export in one
        // call) ends with what it holds, byte for byte, refusing nothing: the way out of a refusal that depends on
        // the order (docs/MergeSemantics.md, rule 8). Opened without a schema, so that it writes nothing of its own.
        let latest = cluster.clocks.map { $0.milliseconds() }.max() ?? 0
        for index in 0..<replicaCount {
            var configuration = Replica.Configuration()
            configuration.durability = .none
            configuration.clock = ManualClock(milliseconds: latest)
            configuration.replicaID = ReplicaID(rawValue: 1_000 + UInt64(index))
            let reset = try Replica.open(
                directory: cluster.directory.appending("reset-\(index)"), configuration: configuration)
            defer { reset.close() }
            let report = try reset.integrate(try cluster[index].changesets(missingFrom: VersionVector()))
            let same = try Cluster.converged([reset, cluster[index]])
            if !report.rejected.isEmpty || report.waiting > 0 || !same {
                problems.append(
                    (
                        "reset-differs",
                        "a replica reset from replica \(index + 1) does not hold what it holds: \(report)"
                    ))
            }
        }

        // What each replica ended with, grouped by digest.
        log.append("problems:")
        log += problems.map { "  [\($0.category)] \($0.text)" }
        log.append("replicas, by their views:")
        var byDigest: [(digest: UInt64, members: [Int])] = []
        for index in 0..<replicaCount {
            let digest = try cluster[index].viewDigest()
            if let position = byDigest.firstIndex(where: { $0.digest == digest }) {
                byDigest[position].members.append(index)
            } else {
                byDigest.append((digest, [index]))
            }
        }
        for (_, members) in byDigest {
            let replica = cluster[members[0]]
            log.append("  replicas \(members.map { $0 + 1 }):")
            log.append("    schema \(replica.schema[type: typeName].map { "\($0)" } ?? "-")")
            let labels = try labelKeys.filter {
                try replica.schema[type: labelTypeName] != nil
                    && replica.object(labelTypeName, primaryKey: .string($0)) != nil
            }
            log.append(
                "    type Label \(replica.schema[type: labelTypeName] == nil ? "absent" : "present"), labels \(labels); "
                    + "type Spot \(replica.schema[type: spotTypeName] == nil ? "absent" : "present")")
            for key in keys {
                guard let object = try replica.object(typeName, primaryKey: .string(key)) else { continue }
                log.append("    \(key): \(source(object.values.filter { $0.key != "_id" }))")
            }
            for index in members {
                let refused = rejected[index].map { "\($0.dot) (\($0.reason))" }
                let pending = try cluster[index].pendingDots().sorted()
                if refused.isEmpty && pending.isEmpty { continue }
                log.append(
                    "    replica \(index + 1) refused \(refused.isEmpty ? "nothing" : refused.joined(separator: "; ")); waiting \(pending)"
                )
            }
        }
        return Outcome(
            problems: problems.map(\.text), category: problems.first?.category ?? "", log: log.joined(separator: "\n"),
            categories: Set(problems.map(\.category)))
    }

    // MARK: Minimizing

    /// A smaller scenario that still fails with `category`: steps, operations, seed fields and clock advances taken
    /// away one at a time while it does.
    static func minimize(_ scenario: SchemaFuzzScenario, failingAs category: String) throws -> SchemaFuzzScenario {
        func fails(_ candidate: SchemaFuzzScenario) throws -> Bool {
            guard let outcome = try execute(candidate) else { return false }
            return outcome.problems.isEmpty == false && outcome.category == category
        }
        var best = scenario
        var changed = true
        while changed {
            changed = false
            var candidates: [SchemaFuzzScenario] = []
            for index in best.steps.indices.reversed() {
                var candidate = best
                candidate.steps.remove(at: index)
                candidates.append(candidate)
                if case .write(let writer, let advance, let operations) = best.steps[index] {
                    if operations.count > 1 {
                        for position in operations.indices {
                            var fewer = operations
                            fewer.remove(at: position)
                            var candidate = best
                            candidate.steps[index] = .write(writer: writer, advance: advance, fewer)
                            candidates.append(candidate)
                        }
                    }
                    if advance > 0 {
                        var candidate = best
                        candidate.steps[index] = .write(writer: writer, advance: 0, operations)
                        candidates.append(candidate)
                    }
                }
            }
            for key in best.seedFields.keys.sorted() where key != "_id" {
                var candidate = best
                candidate.seedFields[key] = nil
                candidates.append(candidate)
            }
            for property in best.schema.types[0].properties where property.name != "_id" {
                var candidate = best
                var type = best.schema.types[0]
                type.properties.removeAll { $0.name == property.name }
                candidate.schema = Schema(version: best.schema.version, types: [type])
                candidate.seedFields[property.name] = nil
                candidates.append(candidate)
            }
            for candidate in candidates where try fails(candidate) {
                best = candidate
                changed = true
                break
            }
        }
        return best
    }

    // MARK: Printing

    /// One line: the starting properties and each writer's operations, names kept, values left out.
    static func summary(_ scenario: SchemaFuzzScenario) -> String {
        var parts = ["start " + scenario.schema.types[0].properties.dropFirst().map(\.name).joined(separator: ",")]
        for step in scenario.steps {
            switch step {
            case .sync(let from, let to): parts.append("sync w\(from)->w\(to)")
            case .write(let writer, _, let operations):
                parts.append(
                    "w\(writer)["
                        + operations.map { operation in
                            switch operation {
                            case .rename(let from, let to): "rename \(from)->\(to)"
                            case .remove(let name): "remove \(name)"
                            case .add(let property): "add \(property.name):\(property.typeDescription)"
                            case .redefine(let property): "redefine \(property.name)"
                            case .update(let key, let property, _): "update \(key).\(property)"
                            case .create(let fields): "create \(fields["_id"].map(source) ?? "?")"
                            case .removeLabelType: "remove Label"
                            case .addLabelType: "add Label"
                            case .createLabel(let key): "create Label \(key)"
                            case .removeSpotType: "remove Spot"
                            case .addSpotType: "add Spot"
                            }
                        }.joined(separator: "; ") + "]")
            }
        }
        return parts.joined(separator: " | ")
    }

    static func source(_ value: Value) -> String {
        switch value {
        case .null: ".null"
        case .string(let text): "\"\(text)\""
        case .int(let number): "\(number)"
        default: "\(value)"
        }
    }

    static func source(_ fields: [String: Value]) -> String {
        "[" + fields.keys.sorted().map { "\"\($0)\": \(source(fields[$0]!))" }.joined(separator: ", ") + "]"
    }

    static func source(_ property: Property) -> String {
        guard case .scalar(let kind) = property.kind else { return "\(property)" }
        var text = ".scalar(\"\(property.name)\", .\(kind)"
        if property.isOptional { text += ", optional: true" }
        if property.isIndexed { text += ", indexed: true" }
        if let value = property.defaultValue { text += ", default: \(source(value))" }
        return text + ")"
    }
}
