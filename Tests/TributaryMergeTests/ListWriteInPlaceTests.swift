import Testing
@testable import TributaryMerge
import TributaryModel

/// A list write changes the list where the record holds it, in a top-level list and in one inside an embedded
/// object: inserts land in order, and a write that fails leaves the record exactly as it was (the engine no longer
/// copies the field first, so this is each write's own promise).
@Suite struct ListWriteInPlaceTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Item",
                properties: [
                    .scalar("_id", .int), Property("tags", .scalar(.string), list: true),
                    Property("spot", .embedded("Spot")),
                ]),
            .embedded("Spot", properties: [.scalar("label", .string), Property("marks", .scalar(.int), list: true)]),
        ])

    static let key = RecordKey(type: "Item", primaryKey: .int(1))

    static func info(_ sequence: UInt64) -> ChangesetInfo {
        let replica = ReplicaID(rawValue: 5)
        return ChangesetInfo(
            dot: Dot(origin: replica, sequence: sequence),
            stamp: Stamp(time: HybridTime(milliseconds: 1_700_000_000_000 + sequence, counter: 0), replica: replica),
            context: VersionVector([(replica, sequence - 1)]))
    }

    static func list(_ state: FieldState?) -> ListState? {
        if case .list(let list)? = state { list } else { nil }
    }

    /// The working set after creating the item, and the path of the list in its embedded object.
    static func created() throws -> (WorkingSet, FieldPath) {
        var working = WorkingSet(source: EmptyRecordSource(), schema: schema)
        let spot = Value.embedded(EmbeddedObject(type: "Spot", fields: ["label": "a", "marks": .list([])]))
        try MergeEngine.apply(
            .create(type: "Item", primaryKey: .int(1), fields: [FieldValue("tags", .list([])), FieldValue("spot", spot)], defaults: []),
            index: 0, of: info(1), to: &working)
        let record = try #require(try working.record(key))
        guard case .register(let register)? = record.fields["spot"], case .embedded(let child) = register.value else {
            Issue.record("no embedded object")
            throw CancellationError()
        }
        return (working, FieldPath(type: "Item", primaryKey: .int(1), steps: [EmbeddedStep(property: "spot", id: child.id)], property: "marks"))
    }

    @Test("inserts into a top-level list and into a list in an embedded object land in order")
    func insertsLandInOrder() throws {
        var (working, marksPath) = try Self.created()
        let tagsPath = FieldPath(type: "Item", primaryKey: .int(1), property: "tags")
        let info = Self.info(2)
        var left: (tags: ElementID?, marks: ElementID?) = (nil, nil)
        for index in 0..<600 {
            let tags = index * 2
            let marks = index * 2 + 1
            try MergeEngine.apply(
                .listInsert(tagsPath, anchor: ListAnchor(parent: left.tags, side: .right), value: .string("t\(index)")),
                index: tags, of: info, to: &working)
            try MergeEngine.apply(
                .listInsert(marksPath, anchor: ListAnchor(parent: left.marks, side: .right), value: .int(Int64(index))),
                index: marks, of: info, to: &working)
            left = (ElementID(dot: info.dot, instruction: tags), ElementID(dot: info.dot, instruction: marks))
        }
        let record = try #require(try working.record(Self.key))
        let tags = try #require(Self.list(record.fields["tags"]))
        #expect(tags.orderedElements().map(\.value) == (0..<600).map { .scalar(.string("t\($0)")) })
        guard case .register(let register)? = record.fields["spot"], case .embedded(let spot) = register.value else {
            Issue.record("no embedded object")
            return
        }
        let marks = try #require(Self.list(spot.fields["marks"]))
        #expect(marks.orderedElements().map(\.value) == (0..<600).map { .scalar(.int(Int64($0))) })
        #expect(spot.fields["label"] != nil)
    }

    @Test("a list write that fails leaves the record as it was, at the top and in an embedded object")
    func failedWriteChangesNothing() throws {
        var (working, marksPath) = try Self.created()
        let tagsPath = FieldPath(type: "Item", primaryKey: .int(1), property: "tags")
        let info = Self.info(2)
        try MergeEngine.apply(.listInsert(tagsPath, anchor: ListAnchor(parent: nil, side: .right), value: "x"), index: 0, of: info, to: &working)
        try MergeEngine.apply(.listInsert(marksPath, anchor: ListAnchor(parent: nil, side: .right), value: 7), index: 1, of: info, to: &working)
        let before = try #require(try working.record(Self.key))
        // Values of the wrong type for each list, checked as a changeset from elsewhere is: refused.
        let failing: [Instruction] = [
            .listInsert(tagsPath, anchor: ListAnchor(parent: nil, side: .right), value: 3),
            .listInsert(marksPath, anchor: ListAnchor(parent: nil, side: .right), value: "three"),
            .set(tagsPath, .list([3])),
            .set(marksPath, .list(["three"])),
            .listSet(marksPath, element: ElementID(dot: info.dot, instruction: 1), value: "three"),
        ]
        for (offset, instruction) in failing.enumerated() {
            #expect(throws: MergeError.self) {
                try MergeEngine.apply(instruction, index: 2 + offset, of: info, to: &working)
            }
            let after = try working.record(Self.key)
            #expect(after == before, "\(instruction)")
        }
    }
}
