// Changeset checks and samples, for the changeset and log entry targets.
import Foundation
import TributaryModel

/// `bytes` with the checksum a changeset ends with made right, so that the fuzzer explores what the checksum guards.
func withChecksum(_ bytes: [UInt8]) -> [UInt8] {
    guard bytes.count >= 13 else { return bytes }
    var bytes = bytes
    let end = bytes.count - 8
    let checksum = bytes.withUnsafeBytes { XXHash64.hash(UnsafeRawBufferPointer(rebasing: $0[0..<end])) }
    for index in 0..<8 { bytes[end + index] = UInt8(truncatingIfNeeded: checksum >> (8 * UInt64(index))) }
    return bytes
}

/// Decodes `bytes` as a changeset and checks what decodes.
func checkChangeset(_ bytes: [UInt8], limits: DecodingLimits = .standard) {
    let changeset: Changeset
    do {
        changeset = try ChangesetCodec.decode(bytes, limits: limits)
    } catch {
        if error.message.isEmpty || !(0...bytes.count).contains(error.offset) { wrong("a bad error: \(error)") }
        return
    }
    let encoded = ChangesetCodec.encode(changeset)
    guard let again = try? ChangesetCodec.decode(encoded, limits: limits) else {
        wrong("a decoded changeset re-encodes to bytes that do not decode")
    }
    // Compared by their bytes: a double may be NaN, which `==` never equals.
    guard ChangesetCodec.encode(again) == encoded else { wrong("a decoded changeset does not re-encode alike") }
    guard let header = try? ChangesetCodec.decodeHeader(bytes, limits: limits) else {
        wrong("a changeset decodes, but its header alone does not")
    }
    guard header.origin == changeset.origin, header.originSequence == changeset.originSequence,
        header.time == changeset.time, header.author == changeset.author, header.context == changeset.context,
        header.instructionCount == changeset.instructions.count, header.relay == changeset.relay,
        header.contextExtras == changeset.contextExtras, header.schemaVersion == changeset.schemaVersion
    else { wrong("the header alone reads \(header), the changeset \(changeset)") }
}

func sampleChangesets() -> [Changeset] {
    let replica = ReplicaID(rawValue: 0x1234)
    let key = PrimaryKey.int(7)
    let path = FieldPath(type: "Task", primaryKey: key, steps: [], property: "tags")
    let element = ElementID(origin: replica, sequence: 1, index: 1 << 24)
    let embedded = Value.embedded(EmbeddedObject(type: "Member", fields: ["userName": "ann"]))
    let instructions: [[Instruction]] = [
        [
            .addType(ObjectSchema(name: "Task", properties: [.scalar("_id", .int), .scalar("title", .string)])),
            .addProperty(type: "Task", .scalar("n", .int, default: .int(1))),
            .create(
                type: "Task", primaryKey: key, fields: [FieldValue("title", "milk"), FieldValue("n", 4)], defaults: []),
        ],
        [
            .set(FieldPath(type: "Task", primaryKey: key, steps: [], property: "title"), .string("eggs")),
            .listInsert(path, anchor: ListAnchor(parent: nil, side: .right), value: embedded),
            .listMove(path, element: element, anchor: ListAnchor(parent: element, side: .left)),
            .listSet(path, element: element, value: .double(.nan)), .listErase(path, element: element),
            .listClear(path), .erase(type: "Task", primaryKey: .string("x")),
            .addInteger(FieldPath(type: "Task", primaryKey: key, steps: [], property: "n"), delta: -3, base: .zero),
        ],
    ]
    return instructions.enumerated().map { index, instructions in
        Changeset(
            origin: replica, originSequence: UInt64(index + 1), time: HybridTime(rawValue: 1 << 40),
            context: VersionVector([(ReplicaID(rawValue: 9), 3)]), author: "ann", schemaVersion: 2,
            instructions: instructions, relay: index == 1 ? Dot(origin: ReplicaID(rawValue: 2), sequence: 5) : nil,
            contextExtras: index == 1 ? [Dot(origin: ReplicaID(rawValue: 3), sequence: 1)] : [])
    }
}
