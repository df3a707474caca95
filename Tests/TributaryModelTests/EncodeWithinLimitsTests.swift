import Foundation
import Testing
import TributaryTestTags

@testable import TributaryModel

/// `ChangesetCodec.encode(_:within:)` must refuse exactly what `decode(_:limits:)` refuses: a writer that lets
/// through more stores entries its readers cannot read back; one that refuses more rejects good writes.
@Suite("Encoding within decoding limits")
struct EncodeWithinLimitsTests {
    /// Small limits around the samples' sizes, so that each bound is crossed by some sample and not by others.
    static let limitGrid: [DecodingLimits] = {
        var grid: [DecodingLimits] = []
        for instructions in [0, 1, 2, 24, 500_000] {
            for depth in [0, 1, 2, 3, 32] {
                for elements in [0, 1, 2, 3, 1_000_000] {
                    for valueBytes in [0, 1, 3, 5, 16, 16 << 20] {
                        var limits = DecodingLimits()
                        limits.maximumInstructions = instructions
                        limits.maximumDepth = depth
                        limits.maximumElements = elements
                        limits.maximumValueBytes = valueBytes
                        grid.append(limits)
                    }
                }
            }
        }
        return grid
    }()

    /// Every sample value in every place an instruction holds one, each alone in a changeset, and the changeset of
    /// every instruction.
    static let changesets: [Changeset] = {
        var result = ChangesetSamples.changesets
        // Values longer than 16 bytes, where the names and author (at most 13 bytes) are not.
        let long: [Value] = [
            .string(String(repeating: "s", count: 20)), .data(Data(repeating: 7, count: 17)),
            .link(.string(String(repeating: "k", count: 17))),
        ]
        for value in ChangesetSamples.values + long + RandomValues.sample(count: 40) {
            let fields = [FieldValue("a", value)]
            result.append(
                ChangesetSamples.changeset([.create(type: "Task", primaryKey: .int(1), fields: fields, defaults: [])]))
            result.append(
                ChangesetSamples.changeset([.create(type: "Task", primaryKey: .int(1), fields: [], defaults: fields)]))
            result.append(
                ChangesetSamples.changeset([.listInsert(ChangesetSamples.deepPath, anchor: .root, value: value)]))
            result.append(
                ChangesetSamples.changeset([
                    .listSet(ChangesetSamples.path, element: ChangesetSamples.element, value: value)
                ]))
            var property = Property.scalar("p", .string)
            property.defaultValue = value
            result.append(ChangesetSamples.changeset([.addProperty(type: "Task", property)]))
            result.append(
                ChangesetSamples.changeset([
                    .addType(ObjectSchema(name: "T", properties: [.scalar("_id", .int), property]))
                ]))
        }
        for instruction in ChangesetSamples.instructions {
            result.append(ChangesetSamples.changeset([instruction]))
        }
        return result
    }()

    /// Which bound a refusal names.
    static func bound(_ problem: ChangesetCodec.LimitProblem) -> String {
        if problem.instructionIndex == nil { return "header" }
        if problem.message.contains("levels deep") { return "nesting" }
        if problem.message.contains(" bytes, over the limit") { return "bytes" }
        if problem.message.contains("more than") { return "count" }
        return problem.message
    }

    @Test("A value nested without bound is named, not recursed into")
    func deepNesting() throws {
        var value = Value.int(1)
        for level in 0..<5_000 {
            value =
                level.isMultiple(of: 2)
                ? .list([value]) : .embedded(EmbeddedObject(type: "Node", fields: ["child": value]))
        }
        let changeset = ChangesetSamples.changeset([
            .set(ChangesetSamples.path, .int(0)), .set(ChangesetSamples.path, value),
        ])
        let error = #expect(throws: ChangesetCodec.LimitProblem.self) {
            _ = try ChangesetCodec.encode(changeset, within: .standard)
        }
        #expect(error?.instructionIndex == 1)
        #expect(error?.message.contains("nest more than 32 levels deep") == true, "\(String(describing: error))")
        // Unwind it by hand: releasing 5,000 nested values at once recurses in the runtime too.
        while true {
            switch value {
            case .list(let elements) where !elements.isEmpty: value = elements[0]
            case .embedded(let object) where object.fields["child"] != nil: value = object.fields["child"]!
            default: return
            }
        }
    }

    @Test("Too many instructions are named as the header's, with no instruction index")
    func instructionCount() throws {
        var limits = DecodingLimits()
        limits.maximumInstructions = 3
        let changeset = ChangesetSamples.changeset(Array(repeating: .setSchemaVersion(1), count: 4))
        let error = #expect(throws: ChangesetCodec.LimitProblem.self) {
            _ = try ChangesetCodec.encode(changeset, within: limits)
        }
        #expect(error?.instructionIndex == nil)
        #expect(error?.description.contains("instruction") == true, "\(String(describing: error))")
        limits.maximumInstructions = 4
        #expect(try ChangesetCodec.encode(changeset, within: limits) == ChangesetCodec.encode(changeset))
    }
}

/// Random values nested a few levels, with lists and embedded objects of a few elements.
enum RandomValues {
    static func sample(count: Int) -> [Value] {
        var random = SplitMix64(seed: 0x11_4D17)
        return (0..<count).map { _ in value(&random, depth: 0) }
    }

    static func value(_ random: inout SplitMix64, depth: Int) -> Value {
        switch random.below(depth < 4 ? 6 : 3) {
        case 0: return .int(Int64(random.below(1_000)))
        case 1: return .string(String(repeating: "x", count: random.below(7)))
        case 2: return .data(Data(repeating: 0, count: random.below(7)))
        case 3: return .link(.string(String(repeating: "k", count: random.below(7))))
        case 4: return .list((0..<random.below(4)).map { _ in value(&random, depth: depth + 1) })
        default:
            var fields: [String: Value] = [:]
            for index in 0..<random.below(4) { fields["f\(index)"] = value(&random, depth: depth + 1) }
            return .embedded(EmbeddedObject(type: "E", fields: fields))
        }
    }
}

/// `EncodeWithinLimitsTests`' grid: every sample changeset under every limits of the grid, about 14 s in a debug build.
@Suite("Encoding within decoding limits, every sample under every limit", .tags(.slow))
struct EncodeWithinLimitsSlowTests {
    @Test("A changeset is encoded within limits exactly when its encoding decodes under them")
    func agreesWithTheDecoder() throws {
        var accepted = 0
        var refusedFor = Set<String>()
        var disagreements: [String] = []
        for (index, changeset) in EncodeWithinLimitsTests.changesets.enumerated() {
            let plain = ChangesetCodec.encode(changeset)
            for limits in EncodeWithinLimitsTests.limitGrid {
                let decodes = (try? ChangesetCodec.decode(plain, limits: limits)) != nil
                do {
                    let encoded = try ChangesetCodec.encode(changeset, within: limits)
                    #expect(encoded == plain)
                    accepted += 1
                    if !decodes {
                        disagreements.append("changeset \(index) under \(limits): encoded, but does not decode")
                    }
                } catch {
                    refusedFor.insert(EncodeWithinLimitsTests.bound(error))
                    if decodes {
                        disagreements.append("changeset \(index) under \(limits): refused (\(error)), but decodes")
                    }
                }
                if disagreements.count > 5 { break }
            }
        }
        #expect(disagreements.isEmpty, "\(disagreements.prefix(5))")
        // The grid crosses every bound, and leaves room too.
        #expect(accepted > 0)
        #expect(refusedFor == ["header", "nesting", "count", "bytes"], "\(refusedFor)")
    }
}
