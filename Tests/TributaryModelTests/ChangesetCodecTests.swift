import Foundation
import Testing
import TributaryModel

// MARK: - Samples

/// Changesets that use every instruction and every kind of value, for the codec tests and the fuzzer's corpus.
enum ChangesetSamples {
    static let objectID = ObjectID(bytes: [0x5F, 0x1B, 0x2C, 0x3D, 0x4E, 0x5F, 0x60, 0x71, 0x82, 0x93, 0xA4, 0xB5])!
    static let uuid = UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16))
    static let origin = ReplicaID(rawValue: 0x7F3C_0000_0000_0001)
    static let element = ElementID(origin: ReplicaID(rawValue: 9), sequence: 4, index: 3 << 24 | 2)

    /// One of every ``Value`` case (and the interesting corners of each).
    static let values: [Value] = [
        .null, .bool(false), .bool(true), .int(0), .int(-1), .int(.min), .int(.max), .double(0), .double(-0.0),
        .double(1.5), .double(.infinity), .double(-.greatestFiniteMagnitude), .double(.leastNonzeroMagnitude),
        .string(""), .string("héllo 🐟"), .data(Data()), .data(Data([0, 255, 7])),
        .date(Date(timeIntervalSince1970: 0)), .date(Date(timeIntervalSince1970: -1_234.5)),
        .date(Date(timeIntervalSince1970: 1_700_000_000.123)), .uuid(uuid), .objectId(objectID),
        .link(.string("user-1")), .link(.int(-42)), .link(.uuid(uuid)), .link(.objectId(objectID)),
        .embedded(EmbeddedObject(type: "Photo", fields: [:])),
        .embedded(
            EmbeddedObject(
                type: "Photo",
                fields: [
                    "date": .date(Date(timeIntervalSince1970: 5)), "picture": .data(Data([1, 2])),
                    "nested": .embedded(EmbeddedObject(type: "Inner", fields: ["x": .list([.int(1), .null])])),
                ]
            )
        ),
        .list([]), .list([.int(1), .string("two"), .null, .list([.bool(true)])]),
        .dictionary([:]), .dictionary(["b": .int(2), "a": .null, "ü": .link(.string("x"))]),
        .typedLink(type: "Pet", key: .string("rex")), .typedLink(type: "Counter", key: .objectId(objectID)),
        .list([.dictionary(["l": .typedLink(type: "Pet", key: .int(-1))])]),
    ]

    static let primaryKeys: [PrimaryKey] = [
        .string(""), .string("ü"), .int(.min), .int(7), .uuid(uuid), .objectId(objectID),
    ]

    static let path = FieldPath(type: "Task", primaryKey: .string("t1"), property: "title")
    static let deepPath = FieldPath(
        type: "User",
        primaryKey: .objectId(objectID),
        steps: [
            EmbeddedStep(property: "conversations", id: element),
            EmbeddedStep(property: "members", id: ElementID(origin: origin, sequence: .max, index: .max)),
        ],
        property: "userName"
    )

    static let photo = ObjectSchema.embedded(
        "Photo",
        properties: [.scalar("_id", .string), .scalar("date", .date), .scalar("picture", .data, optional: true)]
    )
    static let task = ObjectSchema(
        name: "Task",
        properties: [
            .scalar("_id", .string), .scalar("title", .string, indexed: true, default: "untitled"),
            .scalar("count", .int, default: 0), Property("tags", .scalar(.string), optional: true, list: true),
            Property("owner", .link("User")), Property("image", .embedded("Photo")),
            Property("watchers", .link("User"), list: true, default: .list([.link(.string("u"))])),
        ]
    )

    /// One of every ``Instruction`` case.
    static let instructions: [Instruction] = [
        .addType(task), .addType(photo), .addType(ObjectSchema(name: "Empty", primaryKey: "key", properties: [])),
        .addProperty(type: "Task", .scalar("done", .bool, default: false)),
        .addProperty(type: "Task", Property("scores", .scalar(.double), list: true)),
        .removeProperty(type: "Task", name: "done"),
        .renameProperty(type: "Task", from: "title", to: "name"),
        .redefineProperty(type: "Task", .scalar("title", .string, indexed: true, default: "untitled")),
        .removeType("Empty"),
        .setSchemaVersion(0), .setSchemaVersion(.max), .migrated(toVersion: 3),
        .create(
            type: "Task",
            primaryKey: .string("t1"),
            fields: [FieldValue("title", "Buy milk")],
            defaults: [FieldValue("count", 0)]
        ),
        .create(type: "Task", primaryKey: .int(1), fields: [], defaults: []),
        .erase(type: "Task", primaryKey: .uuid(uuid)),
        .set(path, "new title"), .set(deepPath, .null),
        .addInteger(path, delta: -5, base: .zero),
        .addInteger(deepPath, delta: .min, base: Stamp(time: HybridTime(milliseconds: 1, counter: 2), replica: origin)),
        .listInsert(path, anchor: .root, value: 1),
        .listInsert(path, anchor: ListAnchor(parent: element, side: .left), value: .list([])),
        .listSet(path, element: element, value: "x"),
        .listErase(deepPath, element: element),
        .listMove(path, element: element, anchor: ListAnchor(parent: element, side: .right)),
        .listMove(path, element: element, anchor: ListAnchor(parent: nil, side: .left)),
        .listClear(deepPath),
        .dictionarySet(path, key: "theme", value: "dark"), .dictionarySet(deepPath, key: "ü", value: .null),
        .dictionaryErase(path, key: "theme"),
        .omitted,
    ]

    /// The name of an instruction's case. The switch is exhaustive on purpose: a new case fails to compile here
    /// until it gets a name, and `everyCaseIsSampled` then fails until `instructions` holds one.
    static func caseName(_ instruction: Instruction) -> String {
        switch instruction {
        case .addType: "addType"
        case .addProperty: "addProperty"
        case .removeProperty: "removeProperty"
        case .renameProperty: "renameProperty"
        case .redefineProperty: "redefineProperty"
        case .removeType: "removeType"
        case .setSchemaVersion: "setSchemaVersion"
        case .migrated: "migrated"
        case .create: "create"
        case .erase: "erase"
        case .set: "set"
        case .addInteger: "addInteger"
        case .listInsert: "listInsert"
        case .listSet: "listSet"
        case .listErase: "listErase"
        case .listMove: "listMove"
        case .listClear: "listClear"
        case .dictionarySet: "dictionarySet"
        case .dictionaryErase: "dictionaryErase"
        case .omitted: "omitted"
        }
    }
    static let caseCount = 20

    static func changeset(
        _ instructions: [Instruction],
        sequence: UInt64 = 1,
        author: String = "user-1",
        context: VersionVector = VersionVector([(ReplicaID(rawValue: 3), 10), (ReplicaID(rawValue: 1), 2)])
    ) -> Changeset {
        Changeset(
            origin: origin,
            originSequence: sequence,
            time: HybridTime(milliseconds: 1_700_000_000_000, counter: 3),
            context: context,
            author: author,
            schemaVersion: 4,
            instructions: instructions
        )
    }

    /// A changeset per value (each set into a field), one with every instruction, and a few edge cases.
    static var changesets: [Changeset] {
        var result = [changeset(instructions)]
        result += values.map { changeset([.set(path, $0)]) }
        result += primaryKeys.map {
            changeset([
                .erase(type: "Task", primaryKey: $0),
                .set(FieldPath(type: "T", primaryKey: $0, property: "p"), .int(1)),
            ])
        }
        result.append(changeset([], sequence: .max, author: "", context: VersionVector()))
        result.append(changeset(Array(repeating: .set(path, .string("same")), count: 50)))
        return result
    }
}

/// Appends the XXH64 checksum, as the codec does, so hand-made bodies reach the inner parser.
func sealed(_ body: [UInt8]) -> [UInt8] {
    var writer = BinaryWriter()
    writer.raw(body)
    writer.fixed64(XXHash64.hash(body))
    return writer.bytes
}

/// Replaces the trailing checksum of `bytes` with the right one (a no-op for inputs under 8 bytes).
func resealed(_ bytes: [UInt8]) -> [UInt8] {
    guard bytes.count >= 8 else { return bytes }
    return sealed(Array(bytes[0..<bytes.count - 8]))
}

/// A changeset header written by hand, up to and including the name table; the caller adds the instructions.
func handMadeHeader(names: [String] = ["Task", "title"], nameCount: UInt64? = nil) -> BinaryWriter {
    var writer = BinaryWriter()
    writer.raw(Array("TRCS".utf8))
    writer.byte(ChangesetCodec.formatVersion)
    writer.fixed64(1)  // origin
    writer.varint(UInt64(1))  // origin sequence
    writer.fixed64(0)  // time
    writer.varint(UInt64(0))  // schema version
    writer.string("")  // author
    writer.varint(UInt64(0))  // context entries
    writer.byte(0)  // not adopted by a relay
    writer.varint(UInt64(0))  // no extra context dots
    writer.varint(nameCount ?? UInt64(names.count))
    for name in names { writer.string(name) }
    return writer
}

private func decodingError(
    _ bytes: [UInt8],
    limits: DecodingLimits = .standard,
    sourceLocation: SourceLocation = #_sourceLocation
) -> ChangesetDecodingError? {
    do {
        _ = try ChangesetCodec.decode(bytes, limits: limits)
        Issue.record("decoding succeeded; expected an error", sourceLocation: sourceLocation)
        return nil
    } catch {
        return error
    }
}

// MARK: - Tests

@Suite("Changeset codec") struct ChangesetCodecTests {
    @Test("The samples hold every instruction case")
    func everyCaseIsSampled() {
        #expect(Set(ChangesetSamples.instructions.map(ChangesetSamples.caseName)).count == ChangesetSamples.caseCount)
    }

    @Test("Every instruction round-trips, alone and together")
    func instructionsRoundTrip() throws {
        for instruction in ChangesetSamples.instructions {
            let changeset = ChangesetSamples.changeset([instruction])
            #expect(try ChangesetCodec.decode(ChangesetCodec.encode(changeset)) == changeset, "\(instruction)")
        }
        let all = ChangesetSamples.changeset(ChangesetSamples.instructions)
        #expect(try ChangesetCodec.decode(ChangesetCodec.encode(all)) == all)
    }

    @Test("A value takes 32 bytes in an array: reads and scans copy arrays of them, and a larger case slows them all")
    func valueSize() {
        // A case whose payload exceeds 24 bytes (a typed link's type name and key) is boxed (`indirect`).
        #expect(
            MemoryLayout<Value>.stride == 32, "\(MemoryLayout<Value>.size) bytes, stride \(MemoryLayout<Value>.stride)")
    }

    @Test("Every value round-trips")
    func valuesRoundTrip() throws {
        for value in ChangesetSamples.values {
            let changeset = ChangesetSamples.changeset([
                .set(ChangesetSamples.path, value), .listInsert(ChangesetSamples.path, anchor: .root, value: value),
                .create(
                    type: "T",
                    primaryKey: .int(1),
                    fields: [FieldValue("v", value)],
                    defaults: [FieldValue("d", value)]
                ),
            ])
            #expect(try ChangesetCodec.decode(ChangesetCodec.encode(changeset)) == changeset, "\(value.kindName)")
        }
        // NaN is not equal to itself: compare its bits.
        let nan = Double(nan: 0x1234, signaling: false)
        let decoded = try ChangesetCodec.decode(
            ChangesetCodec.encode(ChangesetSamples.changeset([.set(ChangesetSamples.path, .double(nan))]))
        )
        guard case .set(_, .double(let value)) = decoded.instructions.first else {
            Issue.record("expected a set of a double")
            return
        }
        #expect(value.bitPattern == nan.bitPattern)
    }

    @Test("Names are stored once each, however many a changeset uses (a few are found by comparing, more by hashing)")
    func namesAreStoredOnce() throws {
        for count in [1, 15, 16, 17, 18, 40] {
            // Each name twice, the second time after all the others, as property names of one type.
            let names = (0..<count).map { "property\($0)ø" }
            let instructions = (names + names).map { name in
                Instruction.set(FieldPath(type: "Type", primaryKey: .int(1), property: name), .int(1))
            }
            let changeset = ChangesetSamples.changeset(instructions)
            let bytes = ChangesetCodec.encode(changeset)
            #expect(try ChangesetCodec.decode(bytes) == changeset, "\(count) names")
            for name in names + ["Type"] {
                let utf8 = Array(name.utf8)
                let occurrences = (0...(bytes.count - utf8.count)).count {
                    bytes[$0..<($0 + utf8.count)].elementsEqual(utf8)
                }
                #expect(occurrences == 1, "'\(name)' of \(count) names is stored \(occurrences) times")
            }
        }
    }

    @Test("Every sample changeset round-trips, and encoding is deterministic")
    func samplesRoundTrip() throws {
        for changeset in ChangesetSamples.changesets {
            let bytes = ChangesetCodec.encode(changeset)
            #expect(try ChangesetCodec.decode(bytes) == changeset)
            #expect(ChangesetCodec.encode(try ChangesetCodec.decode(bytes)) == bytes)
        }
    }

    @Test("decodeHeader reads everything but the instructions")
    func header() throws {
        let changeset = ChangesetSamples.changeset(ChangesetSamples.instructions, sequence: 77, author: "ann")
        let header = try ChangesetCodec.decodeHeader(ChangesetCodec.encode(changeset))
        #expect(header.origin == changeset.origin)
        #expect(header.originSequence == 77)
        #expect(header.time == changeset.time)
        #expect(header.schemaVersion == 4)
        #expect(header.author == "ann")
        #expect(header.context == changeset.context)
        #expect(header.context.entries.map(\.replica.rawValue) == [1, 3])
        #expect(header.instructionCount == ChangesetSamples.instructions.count)
        // The header does not read the instructions, but it does check the checksum.
        var damaged = ChangesetCodec.encode(changeset)
        damaged[damaged.count - 20] ^= 1
        #expect(throws: ChangesetDecodingError.self) { try ChangesetCodec.decodeHeader(damaged) }
    }

    @Test("The layout starts with TRCS, the format version, and ends with XXH64 of the rest")
    func layout() {
        let bytes = ChangesetCodec.encode(ChangesetSamples.changeset([]))
        #expect(Array(bytes[0..<4]) == Array("TRCS".utf8))
        #expect(bytes[4] == 1)
        #expect(ChangesetCodec.formatVersion == 1)
        #expect(resealed(bytes) == bytes)
    }

    @Test(
        "Every instruction kind, a relay, context extras and shape notes encode to the bytes this format has always had"
    )
    func bytesStayTheSame() {
        var changeset = ChangesetSamples.changeset(ChangesetSamples.instructions)
        changeset.relay = Dot(origin: ReplicaID(rawValue: 44), sequence: 7)
        changeset.contextExtras = [Dot(origin: ReplicaID(rawValue: 45), sequence: 2)]
        changeset.shapeNotes = ShapeNotes([
            ShapeNotes.Note(
                PropertyName(type: "Task", property: "count"), from: 1, ChangesetSamples.task.properties[2].shape),
            ShapeNotes.Note(
                PropertyName(type: "User", property: "name"), from: 0, ChangesetSamples.photo.properties[1].shape),
        ])
        let bytes = ChangesetCodec.encode(changeset)
        // Logs written by earlier builds are read by this one, and peers of either build read each other's changesets.
        #expect(bytes.count == 920)
        #expect(XXHash64.hash(bytes) == 15_906_474_921_279_819_684)
        #expect((try? ChangesetCodec.decode(bytes)) == changeset)
    }

    @Test("Any single flipped bit is detected")
    func everyBitFlip() throws {
        let bytes = ChangesetCodec.encode(ChangesetSamples.changeset(Array(ChangesetSamples.instructions.prefix(12))))
        for bit in 0..<bytes.count * 8 {
            var damaged = bytes
            damaged[bit / 8] ^= 1 << UInt8(bit % 8)
            guard let error = decodingError(damaged) else { continue }
            switch bit / 8 {
            case 0..<4: #expect(error.code == .badMagic, "bit \(bit)")
            case 4: #expect(error.code == .unsupportedFormatVersion, "bit \(bit)")
            default:
                #expect(error.code == .checksumMismatch, "bit \(bit)")
                #expect(error.offset == bytes.count - 8)
            }
        }
    }

    @Test("A checksum mismatch names both checksums")
    func checksumMessage() {
        var bytes = ChangesetCodec.encode(ChangesetSamples.changeset([]))
        bytes[10] ^= 0x80
        let error = decodingError(bytes)
        #expect(error?.message.hasPrefix("changeset checksum mismatch: stored ") == true)
        #expect(error?.message.hasSuffix("; the bytes are damaged") == true)
    }

    @Test("An unknown format version is refused, with the version in the message", arguments: [0, 2, 255] as [UInt8])
    func unsupportedVersion(version: UInt8) {
        var bytes = ChangesetCodec.encode(ChangesetSamples.changeset([.setSchemaVersion(1)]))
        bytes[4] = version
        let error = decodingError(resealed(bytes))
        #expect(error?.code == .unsupportedFormatVersion)
        #expect(error?.offset == 4)
        #expect(error?.message == "changeset format version \(version) is not supported (this build reads version 1)")
    }

    @Test("Bytes that are not a changeset")
    func badMagic() {
        let error = decodingError(Array("TRCX".utf8) + [1] + [UInt8](repeating: 0, count: 20))
        #expect(error?.code == .badMagic)
        #expect(error?.description == "bytes are not a Tributary changeset (no TRCS marker) (byte 0)")
    }

    @Test("Truncation at every offset is an error, never a trap")
    func truncationAtEveryOffset() throws {
        let bytes = ChangesetCodec.encode(ChangesetSamples.changeset(ChangesetSamples.instructions))
        for length in 0..<bytes.count {
            let error = decodingError(Array(bytes[0..<length]))
            if length < 13 {
                #expect(error?.code == .truncated, "length \(length)")
            } else {
                #expect(error?.code == .checksumMismatch, "length \(length)")
            }
        }
        // With the checksum recomputed, every prefix of the body reaches the parser, which finds it truncated.
        let body = Array(bytes[0..<bytes.count - 8])
        for length in 5..<body.count {
            let error = decodingError(sealed(Array(body[0..<length])))
            #expect(error?.code == .truncated, "body length \(length): \(String(describing: error))")
        }
    }

    @Test("Bytes after the last instruction are trailing data")
    func trailingData() throws {
        let bytes = ChangesetCodec.encode(ChangesetSamples.changeset([.setSchemaVersion(3)]))
        let body = Array(bytes[0..<bytes.count - 8])
        let error = decodingError(sealed(body + [0, 0, 0]))
        #expect(error?.code == .trailingData)
        #expect(error?.message == "changeset: 3 bytes follow the last instruction")
        // Appended after the checksum, the bytes are read as the checksum: a mismatch.
        #expect(decodingError(bytes + [0])?.code == .checksumMismatch)
    }

    @Test("More instructions than DecodingLimits.maximumInstructions are refused")
    func instructionLimit() throws {
        var limits = DecodingLimits()
        limits.maximumInstructions = 10
        let ten = ChangesetCodec.encode(ChangesetSamples.changeset(Array(repeating: .setSchemaVersion(1), count: 10)))
        #expect(try ChangesetCodec.decode(ten, limits: limits).instructions.count == 10)
        let eleven = ChangesetCodec.encode(
            ChangesetSamples.changeset(Array(repeating: .setSchemaVersion(1), count: 11))
        )
        let error = decodingError(eleven, limits: limits)
        #expect(error?.code == .limitExceeded)
        #expect(error?.message == "changeset: instruction count 11 is over the limit of 10")

        // A hostile count: 10^6 instructions hit the default cap of 500,000, before any is read.
        var writer = handMadeHeader()
        writer.varint(UInt64(1_000_000))
        writer.raw([UInt8](repeating: 6, count: 16))  // a few setSchemaVersion tags; far fewer than declared
        let million = decodingError(sealed(writer.bytes))
        #expect(million?.code == .limitExceeded)
        #expect(million?.message == "changeset: instruction count 1000000 is over the limit of 500000")
        // Under the cap but more than the bytes left: truncated, without reserving room for them.
        var short = handMadeHeader()
        short.varint(UInt64(400_000))
        short.raw([6, 0])
        #expect(decodingError(sealed(short.bytes))?.code == .truncated)
    }

    /// A value of `depth` nested one-element lists around a null, written by hand (the encoder would recurse).
    private func nestedListValue(depth: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        for _ in 0..<depth { bytes += [12, 1] }  // list tag, one element
        return bytes + [0]  // null
    }

    /// A changeset holding one `set` of Task["t"].title to the given value bytes.
    private func setChangeset(valueBytes: [UInt8]) -> [UInt8] {
        var writer = handMadeHeader()
        writer.varint(UInt64(1))  // one instruction
        writer.byte(18)  // set
        writer.varint(UInt64(0))  // type name 0: Task
        writer.byte(0)  // string key
        writer.string("t")
        writer.varint(UInt64(0))  // no steps
        writer.varint(UInt64(1))  // property name 1: title
        writer.raw(valueBytes)
        return sealed(writer.bytes)
    }

    @Test("Nesting deeper than DecodingLimits.maximumDepth is refused, not a stack overflow")
    func nestingDepth() throws {
        let atLimit = try ChangesetCodec.decode(setChangeset(valueBytes: nestedListValue(depth: 32)))
        #expect(atLimit.instructions.count == 1)
        let overLimit = decodingError(setChangeset(valueBytes: nestedListValue(depth: 33)))
        #expect(overLimit?.code == .limitExceeded)
        #expect(overLimit?.message == "changeset: values nest deeper than 32 levels")
        // A hostile nesting: depth 100,000.
        #expect(decodingError(setChangeset(valueBytes: nestedListValue(depth: 100_000)))?.code == .limitExceeded)
        // Embedded objects count too.
        var embedded: [UInt8] = []
        for _ in 0..<40 { embedded += [11, 0, 1, 1] }  // embedded, type name 0, one field named 1
        #expect(decodingError(setChangeset(valueBytes: embedded + [0]))?.code == .limitExceeded)

        // Path steps are bounded by the same limit.
        var writer = handMadeHeader()
        writer.varint(UInt64(1))
        writer.byte(18)
        writer.varint(UInt64(0))
        writer.byte(1)  // int key
        writer.zigzag(1)
        writer.varint(UInt64(33))  // 33 steps
        for _ in 0..<33 {
            writer.varint(UInt64(1))
            writer.elementID(ElementID(origin: ReplicaID(rawValue: 1), sequence: 1, index: 0))
        }
        writer.varint(UInt64(1))
        writer.byte(0)
        let steps = decodingError(sealed(writer.bytes))
        #expect(steps?.code == .limitExceeded)
        #expect(steps?.message == "changeset: path step count 33 is over the limit of 32")
    }

    @Test(
        "Huge declared lengths are refused before allocating",
        arguments: [1 << 31, 1 << 63, UInt64.max, UInt64(16 << 20) + 1] as [UInt64]
    )
    func hugeLengths(length: UInt64) {
        // A string value whose length field is huge.
        var value: [UInt8] = [5]  // string tag
        var writer = BinaryWriter()
        writer.varint(length)
        value += writer.bytes + Array("abc".utf8)
        let string = decodingError(setChangeset(valueBytes: value))
        #expect(string?.code == .limitExceeded)
        #expect(string?.message == "changeset: string length count \(length) is over the limit of 16777216")

        // The same for data, a list count, an embedded field count, the name count and the author.
        for tag: UInt8 in [6, 12, 11] {
            var bytes: [UInt8] = [tag]
            if tag == 11 { bytes.append(0) }  // embedded type name
            bytes += writer.bytes
            #expect(decodingError(setChangeset(valueBytes: bytes + [0, 0, 0]))?.code == .limitExceeded, "tag \(tag)")
        }
        let names = handMadeHeader(names: [], nameCount: length)
        #expect(decodingError(sealed(names.bytes + [0, 0]))?.code == .limitExceeded)

        var author = BinaryWriter()
        author.raw(Array("TRCS".utf8))
        author.byte(1)
        author.fixed64(1)
        author.varint(UInt64(1))
        author.fixed64(0)
        author.varint(UInt64(0))
        author.varint(length)  // author length
        author.raw([0x61, 0x62])
        #expect(decodingError(sealed(author.bytes))?.code == .limitExceeded)
    }

    @Test("A length under the limit but past the end is truncated")
    func lengthPastEnd() {
        let error = decodingError(setChangeset(valueBytes: [5, 0xE8, 0x07] + Array("abc".utf8)))  // 1000 bytes declared
        #expect(error?.code == .truncated)
        #expect(error?.message == "changeset: truncated string length (1000 of them): needs 1000 bytes, 3 left")
    }

    @Test("Malformed fields are named")
    func malformedFields() {
        #expect(
            decodingError(setChangeset(valueBytes: [99]))?.message == "changeset: unknown value tag 99"
        )
        // Over-long and overflowing varints.
        #expect(
            decodingError(setChangeset(valueBytes: [3] + [UInt8](repeating: 0xFF, count: 10) + [1]))?.code
                == .invalidValue
        )
        #expect(
            decodingError(setChangeset(valueBytes: [3] + [UInt8](repeating: 0x80, count: 9) + [0x02]))?.message
                == "changeset: varint overflows 64 bits"
        )
        #expect(
            decodingError(setChangeset(valueBytes: [5, 2, 0xC3, 0x28]))?.message
                == "changeset: string is not valid UTF-8"
        )

        var unknownTag = handMadeHeader()
        unknownTag.varint(UInt64(1))
        unknownTag.byte(99)
        #expect(
            decodingError(sealed(unknownTag.bytes))?.message == "changeset: unknown instruction tag 99 in instruction 0"
        )

        var badName = handMadeHeader()
        badName.varint(UInt64(1))
        badName.byte(5)  // removeType
        badName.varint(UInt64(7))
        #expect(
            decodingError(sealed(badName.bytes))?.message
                == "changeset: type name refers to name 7, but the table has 2"
        )

        var badKey = handMadeHeader()
        badKey.varint(UInt64(1))
        badKey.byte(17)  // erase
        badKey.varint(UInt64(0))
        badKey.byte(9)
        #expect(decodingError(sealed(badKey.bytes))?.message == "changeset: unknown primary key tag 9")
    }

    @Test("Header invariants: origin sequence 0 and an unsorted causal context are refused")
    func headerInvariants() {
        var zero = ChangesetCodec.encode(ChangesetSamples.changeset([]))
        // The origin sequence is the varint right after the 8-byte origin.
        zero[13] = 0
        #expect(decodingError(resealed(zero))?.message == "changeset: origin sequence is 0")

        var writer = BinaryWriter()
        writer.raw(Array("TRCS".utf8))
        writer.byte(1)
        writer.fixed64(1)
        writer.varint(UInt64(1))
        writer.fixed64(0)
        writer.varint(UInt64(0))
        writer.string("")
        writer.varint(UInt64(2))
        writer.fixed64(5)
        writer.varint(UInt64(1))
        writer.fixed64(4)
        writer.varint(UInt64(1))
        writer.varint(UInt64(0))
        writer.varint(UInt64(0))
        #expect(decodingError(sealed(writer.bytes))?.message == "changeset: causal context is not sorted by replica")
    }

    @Test("Inputs shorter than the smallest changeset")
    func tooShort() {
        for length in 0..<13 {
            let error = decodingError([UInt8](repeating: 0, count: length))
            #expect(error?.code == .truncated)
            #expect(error?.message == "changeset is truncated: \(length) bytes, at least 13 needed")
        }
    }
}

@Suite("Adopted changesets in the codec")
struct AdoptedChangesetCodecTests {
    @Test("A relay's dot and extra context dots round-trip, and unsorted extras are refused")
    func relayFieldsRoundTrip() throws {
        var changeset = ChangesetSamples.changeset([.erase(type: "Task", primaryKey: .string("t"))])
        changeset.relay = Dot(origin: ReplicaID(rawValue: 42), sequence: 7)
        changeset.contextExtras = [
            Dot(origin: ReplicaID(rawValue: 42), sequence: 5), Dot(origin: ReplicaID(rawValue: 42), sequence: 6),
        ]
        let decoded = try ChangesetCodec.decode(ChangesetCodec.encode(changeset))
        #expect(decoded == changeset)
        #expect(decoded.causalDot == Dot(origin: ReplicaID(rawValue: 42), sequence: 7))
        #expect(decoded.contextIncludes(Dot(origin: ReplicaID(rawValue: 42), sequence: 6)))

        var unsorted = changeset
        unsorted.contextExtras.reverse()
        #expect(throws: ChangesetDecodingError.self) { try ChangesetCodec.decode(ChangesetCodec.encode(unsorted)) }
    }
}

@Suite("Stored schema encoding") struct StoredSchemaEncodingTests {
    static let types = [
        ObjectSchema(
            name: "Task", properties: [.scalar("_id", .string), .scalar("title", .string, indexed: true, default: "x")])
    ]

    func encode(_ schema: Schema) -> [UInt8] {
        var writer = BinaryWriter()
        writer.schema(schema)
        return writer.bytes
    }

    @Test("Definition stamps round-trip, and encode in one order whatever order they were set in")
    func definitionStampsRoundTrip() throws {
        var schema = Schema(version: 3, types: Self.types)
        let a = PropertyName(type: "Task", property: "title")
        let b = PropertyName(type: "Task", property: "_id")
        let redefined = DefinitionStamp(
            .redefinition,
            Stamp(time: HybridTime(milliseconds: 1_700_000_000_123, counter: 2), replica: ReplicaID(rawValue: 7)))
        let added = DefinitionStamp(
            .addition, Stamp(time: HybridTime(milliseconds: 1_700_000_000_000), replica: ReplicaID(rawValue: 9)))
        schema.definitionStamps[a] = redefined
        schema.definitionStamps[b] = added
        var other = Schema(version: 3, types: Self.types)
        other.definitionStamps[b] = added
        other.definitionStamps[a] = redefined
        #expect(encode(schema) == encode(other))
        var reader = BinaryReader(encode(schema), subject: "schema")
        let decoded = try reader.schema()
        #expect(decoded == schema)
        #expect(decoded.definitionStamp(of: "title", in: "Task") == redefined)
        #expect(decoded.definitionStamp(of: "missing", in: "Task") == .unknown)
    }

    @Test(
        "Removals and renames round-trip, in one order whatever order they were recorded in; a truncation is an error")
    func removalsRoundTrip() throws {
        let first = Dot(origin: ReplicaID(rawValue: 3), sequence: 8)
        let second = Dot(origin: ReplicaID(rawValue: 1), sequence: 40)
        let rename = PropertyRemoval(dot: second, renamedTo: "details", removalsOfNewNameSeen: [first])
        let third = Dot(origin: ReplicaID(rawValue: 2), sequence: 5)
        let removalAfterRename = PropertyRemoval(dot: third, removalsSeen: [second], renamesOntoSeen: [second, first])
        let renameAfterRename = PropertyRemoval(dot: third, renamedTo: "notes", renamesOntoSeen: [second])
        var schema = Schema(version: 2, types: Self.types)
        schema.recordRemoval(PropertyRemoval(dot: first), of: "notes", in: "Task")
        schema.recordRemoval(rename, of: "notes", in: "Task")
        schema.recordRemoval(removalAfterRename, of: "details", in: "Task")
        schema.recordRemoval(renameAfterRename, of: "title", in: "Task")
        schema.recordRemoval(TypeRemoval(dot: second), ofType: "Tag")
        schema.recordRemoval(TypeRemoval(dot: first), ofType: "Tag")
        var other = Schema(version: 2, types: Self.types)
        other.recordRemoval(TypeRemoval(dot: first), ofType: "Tag")
        other.recordRemoval(rename, of: "notes", in: "Task")
        other.recordRemoval(TypeRemoval(dot: second), ofType: "Tag")
        other.recordRemoval(TypeRemoval(dot: first), ofType: "Tag")  // a repeat changes nothing
        other.recordRemoval(PropertyRemoval(dot: first), of: "notes", in: "Task")
        other.recordRemoval(PropertyRemoval(dot: first), of: "notes", in: "Task")  // a repeat changes nothing
        other.recordRemoval(renameAfterRename, of: "title", in: "Task")
        other.recordRemoval(removalAfterRename, of: "details", in: "Task")
        #expect(other == schema)
        #expect(encode(schema) == encode(other))
        var reader = BinaryReader(encode(schema), subject: "schema")
        let decoded = try reader.schema()
        #expect(decoded == schema)
        #expect(decoded.removals(of: "notes", in: "Task") == [rename, PropertyRemoval(dot: first)])
        #expect(decoded.removals(of: "details", in: "Task") == [removalAfterRename])
        #expect(decoded.removals(of: "details", in: "Task").first?.renamesOntoSeen == [second, first].sorted())
        #expect(decoded.removals(of: "title", in: "Task") == [renameAfterRename])
        #expect(decoded.removals(ofType: "Tag") == [TypeRemoval(dot: second), TypeRemoval(dot: first)].sorted())
        #expect(decoded.definitionStamps.isEmpty)
        // Every truncation inside the removals is an error, never a trap or a wrong schema. (Cut right after the
        // empty list of definition stamps that precedes them, it is a schema with neither.)
        let withoutRemovals = encode(Schema(version: 2, types: Self.types))
        let full = encode(schema)
        for length in withoutRemovals.count + 2..<full.count {
            var truncated = BinaryReader(Array(full.prefix(length)), subject: "schema")
            #expect(throws: ChangesetDecodingError.self) { try truncated.schema() }
        }
    }

    @Test("Type removals that saw others round-trip; without any, a schema encodes as replica format 6 stored it")
    func typeRemovalsSeenRoundTrip() throws {
        let first = Dot(origin: ReplicaID(rawValue: 3), sequence: 8)
        let second = Dot(origin: ReplicaID(rawValue: 1), sequence: 40)
        var plain = Schema(version: 2, types: Self.types)
        plain.recordRemoval(TypeRemoval(dot: first), ofType: "Tag")
        plain.recordRemoval(TypeRemoval(dot: second), ofType: "Note")
        let plainBytes = encode(plain)
        // Format 6: the type removals end the schema, as their names and dots.
        var legacy = BinaryWriter()
        var names = NameTable.inline
        legacy.varint(2)
        legacy.varint(UInt64(Self.types.count))
        for type in Self.types { legacy.objectSchema(type, &names) }
        legacy.varint(0)  // definition stamps
        legacy.varint(0)  // property removals
        legacy.varint(2)
        legacy.name("Note", &names)
        legacy.varint(1)
        legacy.dot(second)
        legacy.name("Tag", &names)
        legacy.varint(1)
        legacy.dot(first)
        #expect(plainBytes == legacy.bytes)
        // One that saw another: each removal's list follows, in the same order.
        var schema = plain
        schema.recordRemoval(TypeRemoval(dot: second, removalsSeen: [first]), ofType: "Tag")
        let bytes = encode(schema)
        #expect(bytes.count == plainBytes.count + 9 + 1 + 1 + 9 + 1)
        var reader = BinaryReader(bytes, subject: "schema")
        let decoded = try reader.schema()
        #expect(decoded == schema)
        #expect(
            decoded.removals(ofType: "Tag")
                == [TypeRemoval(dot: first), TypeRemoval(dot: second, removalsSeen: [first])].sorted())
        #expect(decoded.removals(ofType: "Note") == [TypeRemoval(dot: second)])
        // Every truncation is an error, except right before the lists seen: a schema whose removals saw none.
        let withoutSeen = bytes.count - (1 + 1 + 1 + 9)
        for length in plainBytes.count - 10..<bytes.count {
            var truncated = BinaryReader(Array(bytes.prefix(length)), subject: "schema")
            if length == withoutSeen {
                #expect(try truncated.schema().removals(ofType: "Tag").allSatisfy(\.removalsSeen.isEmpty))
            } else {
                #expect(throws: ChangesetDecodingError.self) { try truncated.schema() }
            }
        }
    }

    @Test("A removal that saw no rename onto its name encodes as replica format 1 stored it; unknown flags are refused")
    func removalFlags() throws {
        let dot = Dot(origin: ReplicaID(rawValue: 3), sequence: 8)
        var schema = Schema(version: 2, types: Self.types)
        schema.recordRemoval(PropertyRemoval(dot: dot), of: "notes", in: "Task")
        let bytes = encode(schema)
        // The removal's flags (0), its empty list of removals seen, and the empty list of type removals: nothing of
        // the renames onto its name seen, which only a removal that saw some writes (flag bit 1, then their list).
        #expect(Array(bytes.suffix(3)) == [0, 0, 0])
        var withOnto = schema
        withOnto.recordRemoval(PropertyRemoval(dot: dot, renamesOntoSeen: [dot]), of: "notes", in: "Task")
        withOnto.propertyRemovals[PropertyName(type: "Task", property: "notes")]?.removeFirst()
        let ontoBytes = encode(withOnto)
        #expect(ontoBytes.count == bytes.count + 1 + 9)
        #expect(ontoBytes[bytes.count - 3] == 2)
        var flagged = bytes
        flagged[bytes.count - 3] = 4
        var reader = BinaryReader(flagged, subject: "schema")
        #expect {
            try reader.schema()
        } throws: { error in
            String(describing: error).contains("bad flags 4 for a removal of 'Task.notes'")
        }
    }

    @Test("A migration mark round-trips after every other section; a schema without one encodes as before")
    func migratedVersionRoundTrip() throws {
        let plain = Schema(version: 3, types: Self.types)
        var marked = plain
        marked.migratedVersion = 2
        var reader = BinaryReader(encode(marked), subject: "schema")
        #expect(try reader.schema() == marked)
        #expect(encode(marked).count > encode(plain).count)
        var withRemoval = marked
        withRemoval.recordRemoval(
            PropertyRemoval(dot: Dot(origin: ReplicaID(rawValue: 3), sequence: 8)), of: "notes", in: "Task")
        reader = BinaryReader(encode(withRemoval), subject: "schema")
        #expect(try reader.schema() == withRemoval)
        var unmarked = BinaryReader(encode(plain), subject: "schema")
        #expect(try unmarked.schema().migratedVersion == 0)
    }

    @Test("A schema without stamps encodes as before stamps existed, and decodes with none")
    func schemaWithoutStamps() throws {
        let schema = Schema(version: 1, types: Self.types)
        let bytes = encode(schema)
        var reader = BinaryReader(bytes, subject: "schema")
        let decoded = try reader.schema()
        #expect(decoded.definitionStamps.isEmpty)
        #expect(decoded == schema)
        // Every truncation of a stamped schema is an error, never a trap or a wrong schema.
        var stamped = schema
        stamped.definitionStamps[PropertyName(type: "Task", property: "title")] = DefinitionStamp(
            .redefinition, Stamp(time: HybridTime(rawValue: 5), replica: ReplicaID(rawValue: 1)))
        let full = encode(stamped)
        for length in bytes.count + 1..<full.count {
            var truncated = BinaryReader(Array(full.prefix(length)), subject: "schema")
            #expect(throws: ChangesetDecodingError.self) { try truncated.schema() }
        }
    }

    @Test("Redefinitions are later than additions, and the greater stamp is later within each kind")
    func definitionStampOrder() {
        let early = Stamp(time: HybridTime(milliseconds: 1), replica: ReplicaID(rawValue: 2))
        let late = Stamp(time: HybridTime(milliseconds: 2), replica: ReplicaID(rawValue: 1))
        #expect(DefinitionStamp(.redefinition, early) > DefinitionStamp(.addition, late))
        #expect(DefinitionStamp(.addition, late) > DefinitionStamp(.addition, early))
        #expect(DefinitionStamp(.redefinition, late) > DefinitionStamp(.redefinition, early))
        #expect(DefinitionStamp.unknown < DefinitionStamp(.addition, early))
    }
}
