import Foundation
import Testing
import TributaryModel

@testable import TributaryMerge

/// Every reader of stored records (the full decoder, `positionalValues`, the projector, `locate`, `exists(inStored:)`)
/// accepts the same bytes, reads the same values from them, and refuses the rest with the same error; no read depends
/// on the order a dictionary visits its entries.
@Suite struct StoredRecordReaderTests {
    /// Inputs the readers once disagreed on, or that once read differently from one process to the next, as hex. The
    /// record fuzz target (Tools/fuzz) adds the inputs it finds here.
    static let regressions: [(name: String, hex: String)] = [
        // Two live list elements in one slot: one process read `[1]`, the next `[2]`.
        (
            "two live elements in one slot",
            "0101010000000000000000000000000000000000010676616c7565730101010000000000000001000100020100000000"
                + "0000000101010003020001000000000000000100000100000000000000010201000304000100000000000000010000"
        ),
        // A field stored twice: `positionalValues` read one value, the projector the other.
        (
            "a field stored twice",
            "01010100000000000000000000000000000000000205636f756e740000030e000005636f756e740000000000"
        ),
    ]

    @Test("the regression inputs are refused alike by every reader", arguments: regressions.indices)
    func regression(_ index: Int) throws {
        let (name, hex) = Self.regressions[index]
        let bytes = try #require([UInt8](hex: hex), "\(name): not hex")
        #expect(throws: ChangesetDecodingError.self, "\(name)") { try ObjectRecord(decoding: bytes) }
        #expect(ReaderAgreement.disagreement(bytes) == nil, "\(name)")
    }

    @Test("two live elements in one slot are refused as damage, naming the slot")
    func twoElementsInOneSlot() throws {
        let bytes = try #require([UInt8](hex: Self.regressions[0].hex))
        let error = try #require(throws: ChangesetDecodingError.self) { try ObjectRecord(decoding: bytes) }
        #expect(error.code == .invalidValue)
        #expect(error.message.contains("occupy slot"), "\(error)")
    }

    // MARK: - Damage every reader must refuse alike

    /// A record's bytes, written field by field so that a test can write what the encoder never does.
    struct Written {
        var flags: UInt8 = 1
        var stamps: [Stamp] = [.zero]
        var fields: [(name: [UInt8], state: [UInt8])] = []
        var trailing: [UInt8] = []

        /// A register holding the int `value`, at stamp index `stamp`, with `addend`.
        static func int(_ value: Int64, stamp: UInt64 = 0, addend: Int64 = 0) -> [UInt8] {
            var writer = BinaryWriter()
            writer.byte(0)
            writer.byte(0)
            var names = NameTable.inline
            writer.value(.int(value), &names)
            writer.varint(stamp)
            writer.zigzag(addend)
            return writer.bytes
        }

        /// A register holding null, at stamp index `stamp`, with `addend`.
        static func null(stamp: UInt64 = 0, addend: Int64 = 0) -> [UInt8] {
            var writer = BinaryWriter()
            writer.raw([0, 0, 0])
            writer.varint(stamp)
            writer.zigzag(addend)
            return writer.bytes
        }

        var bytes: [UInt8] {
            var writer = BinaryWriter()
            writer.byte(ObjectRecord.formatVersion)
            writer.byte(flags)
            writer.varint(stamps.count)
            for stamp in stamps {
                writer.fixed64(stamp.time.rawValue)
                writer.fixed64(stamp.replica.rawValue)
            }
            writer.varint(0)
            writer.varint(fields.count)
            for field in fields {
                writer.lengthPrefixed(field.name)
                writer.raw(field.state)
            }
            writer.raw(trailing)
            return writer.bytes
        }
    }

    static let later = Stamp(time: HybridTime(rawValue: 7), replica: ReplicaID(rawValue: 1))

    static let damaged: [(name: String, record: Written, message: String)] = [
        (
            "a stamp index out of range", Written(fields: [(Array("count".utf8), Written.int(3, stamp: 1))]),
            "stamp index"
        ),
        (
            "bytes after the record", Written(fields: [(Array("count".utf8), Written.int(3))], trailing: [0]),
            "follow the record"
        ),
        (
            "a damaged tombstone", Written(flags: 0, fields: [(Array("count".utf8), Written.int(3, stamp: 4))]),
            "stamp index"
        ),
        (
            "stamps out of order",
            Written(stamps: [later, .zero], fields: [(Array("count".utf8), Written.null(stamp: 1, addend: 2))]),
            "stamp 1"
        ),
        ("a stamp given twice", Written(stamps: [later, later], fields: []), "stamp 1"),
        ("a field name that is not UTF-8", Written(fields: [([0x63, 0xFF], Written.int(3))]), "UTF-8"),
        (
            "one name twice, as `String` compares names",
            Written(fields: [(Array("e\u{301}".utf8), Written.int(1)), (Array("\u{E9}".utf8), Written.int(2))]),
            "appears twice"
        ),
    ]

    @Test("damage is refused by every reader with the decoder's error", arguments: damaged.indices)
    func damage(_ index: Int) throws {
        let (name, record, message) = Self.damaged[index]
        let bytes = record.bytes
        let error = try #require(throws: ChangesetDecodingError.self, "\(name)") { try ObjectRecord(decoding: bytes) }
        #expect(error.message.contains(message), "\(name): \(error)")
        #expect(ReaderAgreement.disagreement(bytes) == nil, "\(name)")
    }

    @Test("names out of order still read, through the full decoder, to the same values everywhere")
    func namesOutOfOrder() throws {
        let record = Written(
            stamps: [.zero, Self.later],
            fields: [
                (Array("title".utf8), [0, 0, 5, 1, 0x78, 1, 0]), (Array("count".utf8), Written.int(3, addend: 4)),
            ]
        )
        let decoded = try ObjectRecord(decoding: record.bytes)
        #expect(decoded.values(of: ReaderAgreement.task, in: ReaderAgreement.schema)["count"] == .int(7))
        #expect(ReaderAgreement.disagreement(record.bytes) == nil)
    }

    @Test("a null counter at the zero stamp reads as its default plus its increments, in every reader")
    func counterOnZeroStamp() throws {
        let record = Written(
            stamps: [.zero, Self.later], fields: [(Array("missing".utf8), Written.null(stamp: 0, addend: 2))])
        let decoded = try ObjectRecord(decoding: record.bytes)
        #expect(decoded.values(of: ReaderAgreement.task, in: ReaderAgreement.schema)["missing"] == .int(7))
        #expect(ReaderAgreement.disagreement(record.bytes) == nil)
    }

    @Test("the errors of a stored record name its object")
    func errorsNameTheObject() throws {
        let bytes = Written(fields: [(Array("count".utf8), Written.int(3, stamp: 1))]).bytes
        let error = try #require(throws: ChangesetDecodingError.self) { try ObjectRecord(decoding: bytes) }
        let named = error.inRecord(of: RecordKey(type: "Task", primaryKey: .int(42)))
        #expect(named.message.hasPrefix("object record of Task[42]: stamp index"), "\(named)")
        #expect(named.inRecord(of: "Other[1]") == named)
    }

    // MARK: - The merge rules never put two live elements in one slot

    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Item", properties: [.scalar("_id", .int), Property("tags", .scalar(.string), list: true)])
        ])
    static let key = RecordKey(type: "Item", primaryKey: .int(1))
    static let path = FieldPath(type: "Item", primaryKey: .int(1), steps: [], property: "tags")

    static func info(_ origin: UInt64, _ sequence: UInt64, context: [(ReplicaID, UInt64)]) -> ChangesetInfo {
        ChangesetInfo(
            dot: Dot(origin: ReplicaID(rawValue: origin), sequence: sequence),
            stamp: Stamp(
                time: HybridTime(milliseconds: 1_700_000_000_000 + sequence, counter: 0),
                replica: ReplicaID(rawValue: origin)),
            context: VersionVector(context))
    }

    @Test("concurrent moves, sets, erases and inserts of one list, in every order, leave each slot one live element")
    func concurrentListWrites() throws {
        var created = WorkingSet(source: EmptyRecordSource(), schema: Self.schema)
        let creator = Self.info(1, 1, context: [])
        try MergeEngine.apply(
            .create(
                type: "Item", primaryKey: .int(1), fields: [FieldValue("tags", .list(["a", "b", "c"]))], defaults: []),
            index: 0, of: creator, to: &created)
        let start = try #require(try created.record(Self.key))
        guard case .list(let list)? = start.fields["tags"] else {
            Issue.record("no list")
            return
        }
        let ids = list.orderedElements().map(\.id)
        try #require(ids.count == 3)
        let seen = [(ReplicaID(rawValue: 1), UInt64(1))]
        // Six writers, each having seen the create only.
        let writes: [(ChangesetInfo, Instruction)] = [
            (
                Self.info(2, 1, context: seen),
                .listMove(Self.path, element: ids[0], anchor: ListAnchor(parent: ids[2], side: .right))
            ),
            (
                Self.info(3, 1, context: seen),
                .listMove(Self.path, element: ids[0], anchor: ListAnchor(parent: nil, side: .right))
            ),
            (
                Self.info(4, 1, context: seen),
                .listMove(Self.path, element: ids[1], anchor: ListAnchor(parent: ids[2], side: .right))
            ),
            (Self.info(5, 1, context: seen), .set(Self.path, .list(["x", "y"]))),
            (Self.info(6, 1, context: seen), .listErase(Self.path, element: ids[2])),
            (
                Self.info(7, 1, context: seen),
                .listInsert(Self.path, anchor: ListAnchor(parent: ids[0], side: .right), value: "z")
            ),
        ]
        var results = Set<[UInt8]>()
        var order = Array(writes.indices)
        // Every order of the six writes (Heap's algorithm).
        func visit(_ count: Int) throws {
            if count == 1 {
                var working = created
                for index in order {
                    try MergeEngine.apply(writes[index].1, index: 0, of: writes[index].0, to: &working)
                }
                let bytes = try #require(try working.record(Self.key)).encoded()
                // The decoder refuses two live elements in one slot: this record decodes.
                _ = try ObjectRecord(decoding: bytes)
                #expect(ReaderAgreement.disagreement(bytes) == nil)
                results.insert(bytes)
                return
            }
            for index in 0..<count {
                try visit(count - 1)
                order.swapAt(count.isMultiple(of: 2) ? index : 0, count - 1)
            }
        }
        try visit(order.count)
        #expect(results.count == 1, "the orders converge")
    }
}
