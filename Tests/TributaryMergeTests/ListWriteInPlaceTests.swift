import Testing
import TributaryModel

@testable import TributaryMerge

/// A list write changes the list where the record holds it: in a top-level list, in a list in an embedded object, and
/// in a list in an embedded object that is an element of a list. Inserts land in order, and a write that fails part
/// way (here: the log cannot say which relay copies a changeset was adopted as) leaves the record exactly as it was.
/// The engine no longer copies the field before a write, so this is each write's own promise.
@Suite struct ListWriteInPlaceTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Item",
                properties: [
                    .scalar("_id", .int), Property("tags", .scalar(.string), list: true),
                    Property("spot", .embedded("Spot")), Property("stops", .embedded("Spot"), list: true),
                ]),
            .embedded("Spot", properties: [.scalar("label", .string), Property("marks", .scalar(.int), list: true)]),
        ])

    static let key = RecordKey(type: "Item", primaryKey: .int(1))
    static let writer = ReplicaID(rawValue: 5)
    static let other = ReplicaID(rawValue: 6)

    /// A source whose adoptions cannot be read: asking which relay copies a changeset was adopted as throws.
    struct DamagedAdoptions: RecordSource {
        struct Damaged: Error {}
        func loadRecord(type: String, primaryKey: PrimaryKey) throws -> ObjectRecord? { nil }
        func loadPrimaryKeys(ofType type: String) throws -> [PrimaryKey] { [] }
        func causalDots(ofOrigin dot: Dot) throws -> [Dot] { throw Damaged() }
    }

    static func info(_ origin: ReplicaID, _ sequence: UInt64, context: [(ReplicaID, UInt64)]) -> ChangesetInfo {
        ChangesetInfo(
            dot: Dot(origin: origin, sequence: sequence),
            stamp: Stamp(time: HybridTime(milliseconds: 1_700_000_000_000 + sequence, counter: 0), replica: origin),
            context: VersionVector(context))
    }

    static func list(_ state: FieldState?) -> ListState? {
        if case .list(let list)? = state { list } else { nil }
    }

    /// The three list paths: top level, in the embedded object, in the embedded object that is the first stop.
    struct Paths {
        var tags: FieldPath
        var spotMarks: FieldPath
        var stopMarks: FieldPath
        var all: [FieldPath] { [tags, spotMarks, stopMarks] }
    }

    /// The working set after the writer creates the item (with one stop), and the paths of its lists.
    static func created(source: any RecordSource = EmptyRecordSource()) throws -> (WorkingSet, Paths) {
        var working = WorkingSet(source: source, schema: schema)
        let spot = Value.embedded(EmbeddedObject(type: "Spot", fields: ["label": "a", "marks": .list([])]))
        let create = Instruction.create(
            type: "Item", primaryKey: .int(1),
            fields: [FieldValue("tags", .list([])), FieldValue("spot", spot), FieldValue("stops", .list([spot]))],
            defaults: [])
        try MergeEngine.apply(create, index: 0, of: info(writer, 1, context: []), to: &working)
        let record = try #require(try working.record(key))
        guard case .register(let register)? = record.fields["spot"], case .embedded(let child) = register.value,
            let stops = Self.list(record.fields["stops"]),
            case .embedded(let stop)? = stops.orderedElements().first?.value
        else {
            Issue.record("the embedded objects are missing")
            throw CancellationError()
        }
        func path(_ steps: [EmbeddedStep], _ property: String) -> FieldPath {
            FieldPath(type: "Item", primaryKey: .int(1), steps: steps, property: property)
        }
        return (
            working,
            Paths(
                tags: path([], "tags"), spotMarks: path([EmbeddedStep(property: "spot", id: child.id)], "marks"),
                stopMarks: path([EmbeddedStep(property: "stops", id: stop.id)], "marks"))
        )
    }

    static func value(_ path: FieldPath, _ number: Int) -> Value {
        path.property == "tags" ? .string("t\(number)") : .int(Int64(number))
    }

    /// The values of the list at `path` in the record, in order.
    static func values(at path: FieldPath, in record: ObjectRecord) -> [StoredValue?] {
        var fields = record.fields
        for step in path.steps {
            switch fields[step.property] {
            case .register(let register)?:
                guard case .embedded(let child) = register.value else { return [] }
                fields = child.fields
            case .list(let list)?:
                guard case .embedded(let child)? = list.elements.values.first?.value else {
                    return []
                }
                fields = child.fields
            case .dictionary?, nil:
                return []
            }
        }
        return list(fields[path.property])?.orderedElements().map(\.value) ?? []
    }

    @Test(
        "inserts into a top-level list, a list in an embedded object, and one in a list's embedded object land in order"
    )
    func insertsLandInOrder() throws {
        var (working, paths) = try Self.created()
        let info = Self.info(Self.writer, 2, context: [(Self.writer, 1)])
        var left: [ElementID?] = [nil, nil, nil]
        var instruction = 0
        for number in 0..<400 {
            for (which, path) in paths.all.enumerated() {
                try MergeEngine.apply(
                    .listInsert(
                        path, anchor: ListAnchor(parent: left[which], side: .right), value: Self.value(path, number)),
                    index: instruction, of: info, to: &working)
                left[which] = ElementID(dot: info.dot, instruction: instruction)
                instruction += 1
            }
        }
        let record = try #require(try working.record(Self.key))
        for path in paths.all {
            #expect(Self.values(at: path, in: record) == (0..<400).map { .scalar(Self.value(path, $0)) }, "\(path)")
        }
    }

    @Test("a clear or a list set that fails part way leaves the record as it was, at every depth")
    func failedWriteChangesNothing() throws {
        var (working, paths) = try Self.created(source: DamagedAdoptions())
        // The writer's elements, then one from another replica that the writer's next changeset has not seen: asking
        // whether it saw a relay's copy of it reads the damaged adoptions.
        let own = Self.info(Self.writer, 2, context: [(Self.writer, 1)])
        var instruction = 0
        for path in paths.all {
            for number in 0..<8 {
                try MergeEngine.apply(
                    .listInsert(path, anchor: ListAnchor(parent: nil, side: .right), value: Self.value(path, number)),
                    index: instruction, of: own, to: &working)
                instruction += 1
            }
        }
        let concurrent = Self.info(Self.other, 1, context: [(Self.writer, 1)])
        for (index, path) in paths.all.enumerated() {
            try MergeEngine.apply(
                .listInsert(path, anchor: ListAnchor(parent: nil, side: .right), value: Self.value(path, 99)),
                index: index, of: concurrent, to: &working)
        }
        let before = try #require(try working.record(Self.key))
        for path in paths.all { #expect(Self.values(at: path, in: before).count == 9) }
        let next = Self.info(Self.writer, 3, context: [(Self.writer, 2)])
        for path in paths.all {
            for instruction in [Instruction.listClear(path), .set(path, .list([Self.value(path, 7)]))] {
                #expect(throws: DamagedAdoptions.Damaged.self, "\(instruction)") {
                    try MergeEngine.apply(instruction, index: 0, of: next, to: &working)
                }
                let after = try working.record(Self.key)
                #expect(after == before, "\(instruction)")
            }
        }
    }
}
