import Foundation
import Testing
import TributaryMerge
import TributaryModel
import TributaryTestTags

// MARK: - Seeded randomness (the same generator as TributaryModelTests' fuzzers)

/// `TRIBUTARY_SEED` (decimal, or hexadecimal with `0x`) when set, else a seed from the clock; printed with the
/// command that replays the run.
private func seededGenerator(label: String) -> SplitMix64 {
    let environment = ProcessInfo.processInfo.environment
    // A fixed default, so CI runs are repeatable; set TRIBUTARY_SEED to explore other inputs.
    var seed: UInt64 = 0x7472_6962_7574_6172
    if let text = environment["TRIBUTARY_SEED"],
        let parsed = text.hasPrefix("0x") ? UInt64(text.dropFirst(2), radix: 16) : UInt64(text)
    {
        seed = parsed
    }
    print(
        "\(label): seed 0x\(String(seed, radix: 16)); replay with TRIBUTARY_SEED=0x\(String(seed, radix: 16)) "
            + "swift test --filter RecordFuzzTests"
    )
    var hash: UInt64 = 0xCBF2_9CE4_8422_2325
    for byte in label.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
    return SplitMix64(seed: seed ^ hash)
}

// MARK: - Sample records

private enum RecordSamples {
    static let a = ReplicaID(rawValue: 0xA)
    static let b = ReplicaID(rawValue: 0xB)
    static func stamp(_ milliseconds: UInt64, _ replica: ReplicaID) -> Stamp {
        Stamp(time: HybridTime(milliseconds: milliseconds), replica: replica)
    }
    static func id(_ replica: ReplicaID, _ sequence: UInt64, _ index: UInt64) -> ElementID {
        ElementID(origin: replica, sequence: sequence, index: index)
    }

    static let list: ListState = {
        var list = ListState()
        let first = id(a, 1, 0)
        let second = id(a, 1, 1)
        let third = id(b, 2, 0)
        list.slots[first] = Slot(id: first, parent: nil, side: .right, stamp: stamp(1, a))
        list.slots[second] = Slot(id: second, parent: first, side: .right, stamp: stamp(1, a))
        list.slots[third] = Slot(id: third, parent: first, side: .left, stamp: stamp(2, b))
        list.elements[first] = ListElement(
            id: first,
            value: .scalar(.string("one")),
            valueStamp: stamp(1, a),
            position: first,
            positionStamp: stamp(1, a)
        )
        list.elements[third] = ListElement(
            id: third,
            value: .embedded(
                EmbeddedState(
                    id: third,
                    type: "Member",
                    fields: ["userName": .register(Register(value: .scalar(.string("ann")), stamp: stamp(2, b)))]
                )
            ),
            valueStamp: stamp(2, b),
            position: third,
            positionStamp: stamp(4, a)
        )
        return list
    }()

    static let photo = EmbeddedState(
        id: id(b, 7, 1 << 24),
        type: "Photo",
        fields: [
            "date": .register(
                Register(value: .scalar(.date(Date(timeIntervalSince1970: 1_700_000_000))), stamp: stamp(5, b))
            ),
            "picture": .register(Register(value: .scalar(.data(Data([1, 2, 3]))), stamp: stamp(5, b))),
            "nested": .register(
                Register(
                    value: .embedded(
                        EmbeddedState(id: id(b, 7, 2), type: "Inner", fields: ["tags": .list(list)])
                    ),
                    stamp: stamp(6, a)
                )
            ),
        ]
    )

    static let records: [ObjectRecord] = [
        ObjectRecord(),
        ObjectRecord(exists: true),
        ObjectRecord(exists: false, erasures: [Dot(origin: a, sequence: 3), Dot(origin: b, sequence: .max)]),
        ObjectRecord(
            exists: true,
            fields: [
                "title": .register(Register(value: .scalar(.string("Buy milk")), stamp: stamp(10, a))),
                "count": .register(Register(value: .scalar(.int(41)), stamp: .zero, addend: -7)),
                "ratio": .register(Register(value: .scalar(.double(0.25)), stamp: stamp(11, b))),
                "owner": .register(
                    Register(value: .scalar(.link(.objectId(ObjectID(bytes: Array(0..<12))!))), stamp: stamp(12, a))
                ),
                "token": .register(
                    Register(
                        value: .scalar(.uuid(UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)))),
                        stamp: stamp(1, b)
                    )
                ),
                "none": .register(Register(value: .scalar(.null), stamp: stamp(2, a))),
                "values": .register(
                    Register(value: .scalar(.list([.int(1), .bool(true), .string("x")])), stamp: stamp(3, a))
                ),
            ]
        ),
        ObjectRecord(
            exists: true,
            erasures: [Dot(origin: b, sequence: 1)],
            fields: [
                "members": .list(list),
                "image": .register(Register(value: .embedded(photo), stamp: stamp(20, b))),
                "empty": .list(ListState()),
            ]
        ),
        // A dictionary holding a value, an erased key, an embedded object, and a mixed link; a mixed register
        // holding a dictionary with a link.
        ObjectRecord(
            exists: true,
            fields: [
                "places": .dictionary(
                    DictionaryState(
                        entries: [
                            "count": DictionaryEntry(value: .scalar(.int(3)), stamp: stamp(30, a)),
                            "gone": DictionaryEntry(value: nil, stamp: stamp(31, b)),
                            "home": DictionaryEntry(value: .embedded(photo), stamp: stamp(32, a)),
                            "pet": DictionaryEntry(
                                value: .scalar(.typedLink(type: "Pet", key: .string("rex"))), stamp: stamp(33, b)),
                        ],
                        replaced: stamp(29, a))),
                "payload": .register(
                    Register(
                        value: .scalar(.dictionary(["l": .list([.typedLink(type: "Pet", key: .int(1)), .null])])),
                        stamp: stamp(34, a))),
            ]
        ),
    ]
}

// MARK: - Tests

@Suite("Object record decoder fuzzing", .tags(.fuzz)) struct RecordFuzzTests {
    @Test("Sample records round-trip")
    func samplesRoundTrip() throws {
        for record in RecordSamples.records {
            let bytes = record.encoded()
            #expect(try ObjectRecord(decoding: bytes) == record)
            #expect(try ObjectRecord(decoding: bytes).encoded() == bytes)
        }
    }

    @Test("Truncation at every offset is an error, never a trap")
    func truncationAtEveryOffset() {
        for record in RecordSamples.records {
            let bytes = record.encoded()
            for length in 0..<bytes.count {
                #expect(throws: ChangesetDecodingError.self) { try ObjectRecord(decoding: Array(bytes[0..<length])) }
            }
            #expect(throws: ChangesetDecodingError.self) { try ObjectRecord(decoding: bytes + [0]) }
        }
    }

    @Test("Random and mutated records give a value or a ChangesetDecodingError, never a trap")
    func fuzzRecordDecoder() {
        var random = seededGenerator(label: "RecordFuzzTests.fuzzRecordDecoder")
        let corpus = RecordSamples.records.map { $0.encoded() }
        // Half of the 100,000 decoder fuzz inputs per run; the changeset decoder (TributaryModelTests) takes the rest.
        let count = ProcessInfo.processInfo.environment["TRIBUTARY_FUZZ_COUNT"].flatMap { Int($0) } ?? 50_000
        var decoded = 0
        var errors: [String: Int] = [:]
        var problems: [String] = []
        for index in 0..<count {
            let input: [UInt8]
            if random.chance(20) {
                input = (0..<random.below(4097)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            } else {
                var bytes = corpus[random.below(corpus.count)]
                for _ in 0...random.below(3) { mutate(&bytes, corpus: corpus, random: &random) }
                input = bytes
            }
            do {
                let record = try ObjectRecord(decoding: input)
                decoded += 1
                // What decodes must encode again and decode.
                do {
                    _ = try ObjectRecord(decoding: record.encoded())
                } catch {
                    problems.append("input \(index): re-encoded record does not decode: \(error)")
                }
            } catch {
                errors[error.code.description, default: 0] += 1
                if error.message.isEmpty || !(0...input.count).contains(error.offset) {
                    problems.append("input \(index): bad error \(error)")
                }
            }
        }
        let codes = errors.keys.sorted().map { "\($0) \(errors[$0] ?? 0)" }.joined(separator: ", ")
        print("fuzzRecordDecoder: \(count) inputs, \(decoded) decoded; errors: \(codes)")
        #expect(problems.isEmpty, "\(problems.prefix(5))")
        #expect(decoded > 0)
    }

    /// A type whose property names are the scalar sample's fields, plus a list, a link and a property the records
    /// never hold (which reads as its default).
    static let projectedType = ObjectSchema(
        name: "Task",
        properties: [
            .scalar("_id", .int), .scalar("title", .string), .scalar("count", .int), .scalar("ratio", .double),
            .scalar("token", .uuid, optional: true), .scalar("none", .string, optional: true), .scalar("when", .date),
            .scalar("blob", .data), .scalar("oid", .objectId, optional: true), .scalar("flag", .bool),
            .scalar("missing", .int, default: .int(5)), Property("values", .scalar(.int), list: true),
            Property("owner", .link("Task")),
        ])

    static let scalarRecord = ObjectRecord(
        exists: true,
        erasures: [Dot(origin: RecordSamples.a, sequence: 2)],
        fields: [
            "title": .register(
                Register(value: .scalar(.string("Buy milk")), stamp: RecordSamples.stamp(10, RecordSamples.a))),
            "count": .register(Register(value: .scalar(.int(41)), stamp: .zero, addend: -7)),
            "ratio": .register(
                Register(value: .scalar(.double(0.25)), stamp: RecordSamples.stamp(11, RecordSamples.b))),
            "token": .register(
                Register(
                    value: .scalar(.uuid(UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)))),
                    stamp: RecordSamples.stamp(1, RecordSamples.b))),
            "none": .register(Register(value: .scalar(.null), stamp: RecordSamples.stamp(2, RecordSamples.a))),
            "when": .register(
                Register(value: .scalar(.date(Date(timeIntervalSince1970: 1_700_000_000))), stamp: .zero)),
            "blob": .register(Register(value: .scalar(.data(Data([9, 8, 7]))), stamp: .zero)),
            "oid": .register(Register(value: .scalar(.objectId(ObjectID(bytes: Array(0..<12))!)), stamp: .zero)),
            "flag": .register(Register(value: .scalar(.bool(true)), stamp: .zero)),
            "ünïcode": .register(Register(value: .scalar(.string("naïve café")), stamp: .zero)),
            "stray": .register(Register(value: .scalar(.int(3)), stamp: .zero)),
        ])

    /// The scalar sample with exactly the projected type's scalar properties: its names are the type's, in the order
    /// the encoder writes them, which the projector takes without checking each (a mutated name must still be found).
    static let storedOrderRecord: ObjectRecord = {
        var record = scalarRecord
        record.fields["stray"] = nil
        record.fields["ünïcode"] = nil
        record.fields["missing"] = .register(Register(value: .scalar(.int(8)), stamp: .zero))
        return record
    }()

    /// Values compared by their encoding: a mutated double may be NaN, which `==` never equals.
    private func encoding(_ values: [Value]?) -> [UInt8]? {
        guard let values else { return nil }
        var writer = BinaryWriter()
        var names = NameTable.inline
        for value in values { writer.value(value, &names) }
        return writer.bytes
    }

    @Test("The in-place projector reads what the full decoder reads, for every record and every mutation of one")
    func projectorMatchesFullDecoder() throws {
        var random = seededGenerator(label: "RecordFuzzTests.projectorMatchesFullDecoder")
        let type = Self.projectedType
        let schema = Schema(version: 1, types: [type])
        let corpus = ([Self.scalarRecord, Self.storedOrderRecord] + RecordSamples.records).map { $0.encoded() }
        // Every property; the scalar ones only; none but the primary key; and masks shorter than the properties (the
        // positions past their end are not wanted), which used to trap.
        let masks: [[Bool]?] = [
            nil, type.properties.map { !$0.isList && $0.kind.objectType == nil }, type.properties.map { _ in false },
            [],
            type.properties.dropLast().map { _ in true },
        ]
        let projectors = masks.map { RecordProjector(type: type, schema: schema, wanted: $0) }

        // The scalar record, read in place, holds what was written, with the increment added and the default filled.
        let read = try #require(try corpus[0].withUnsafeBytes { try projectors[0].values($0) })
        #expect(read[type.position(ofProperty: "title")!] == .string("Buy milk"))
        #expect(read[type.position(ofProperty: "count")!] == .int(34))
        #expect(read[type.position(ofProperty: "missing")!] == .int(5))
        #expect(read[type.position(ofProperty: "values")!] == .list([]))
        #expect(read[type.position(ofProperty: "_id")!] == .null)
        // A mask shorter than the properties reads what the same mask padded with `false` reads.
        let short = try #require(try corpus[0].withUnsafeBytes { try projectors[4].values($0) })
        let padded = RecordProjector(type: type, schema: schema, wanted: masks[4]! + [false])
        #expect(short == (try corpus[0].withUnsafeBytes { try padded.values($0) }))
        #expect(short.last == .null)

        let count =
            ProcessInfo.processInfo.environment["TRIBUTARY_FUZZ_COUNT"].flatMap { Int($0) }.map { $0 / 5 } ?? 20_000
        var problems: [String] = []
        var reused: [Value] = []
        var agreedValues = 0
        for index in 0..<count {
            var input = corpus[random.below(corpus.count)]
            if index >= corpus.count * masks.count {
                for _ in 0...random.below(3) { mutate(&input, corpus: corpus, random: &random) }
            }
            let which = random.below(masks.count)
            let expected: Result<[UInt8]?, ChangesetDecodingError> = Result { () throws(ChangesetDecodingError) in
                encoding(try ObjectRecord.positionalValues(decoding: input, of: type, in: schema, wanted: masks[which]))
            }
            let actual: Result<[UInt8]?, ChangesetDecodingError> = input.withUnsafeBytes { bytes in
                Result { () throws(ChangesetDecodingError) in
                    // The reused array, as queries pass it: stale values from the last record must not show through.
                    try projectors[which].project(bytes, into: &reused) ? encoding(reused) : nil
                }
            }
            switch (expected, actual) {
            case (.success(let a), .success(let b)) where a == b:
                if a != nil { agreedValues += 1 }
            case (.failure(let a), .failure(let b)) where a.code == b.code && a.message == b.message:
                break
            default:
                problems.append(
                    "input \(index) (\(input.count) bytes, mask \(which)): full decoder \(expected), projector \(actual)"
                )
            }
        }
        print("projectorMatchesFullDecoder: \(count) inputs, \(agreedValues) read alike, \(problems.count) differ")
        #expect(problems.isEmpty, "\(problems.prefix(5))")
        // Most mutations damage a record, which every reader then refuses alike: about one input in seventeen reads.
        #expect(agreedValues > count / 25)
    }

    /// One mutation: bit flip, byte set, truncate, extend, splice, or a length field set to
    /// 0, -1, 2^31 or 2^63.
    private func mutate(_ bytes: inout [UInt8], corpus: [[UInt8]], random: inout SplitMix64) {
        switch random.below(6) {
        case 0:
            guard !bytes.isEmpty else { return }
            bytes[random.below(bytes.count)] ^= 1 << UInt8(random.below(8))
        case 1:
            guard !bytes.isEmpty else { return }
            let interesting: [UInt8] = [0, 1, 0x7F, 0x80, 0xFF, UInt8(truncatingIfNeeded: random.next())]
            bytes[random.below(bytes.count)] = interesting[random.below(interesting.count)]
        case 2:
            bytes.removeLast(random.below(bytes.count + 1))
        case 3:
            bytes += (0..<1 + random.below(64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        case 4:
            let donor = corpus[random.below(corpus.count)]
            let start = random.below(donor.count + 1)
            let piece = donor[start..<min(donor.count, start + random.below(64))]
            let at = random.below(bytes.count + 1)
            bytes.replaceSubrange(at..<min(bytes.count, at + random.below(16)), with: piece)
        default:
            let values: [UInt64] = [0, .max, 1 << 31, 1 << 63]
            var writer = BinaryWriter()
            writer.varint(values[random.below(values.count)])
            let at = random.below(bytes.count + 1)
            bytes.replaceSubrange(at..<min(bytes.count, at + 1 + random.below(2)), with: writer.bytes)
        }
    }
}
