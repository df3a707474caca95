// Stored object records: every reader (the full decoder, positionalValues, the projector, locate, exists(inStored:))
// must accept the same bytes, read the same values, and refuse the rest with the same error; what decodes must
// re-encode to bytes that decode to the same record. The checks are the test suite's (RecordReaderAgreement.swift).
import Foundation
import TributaryMerge
import TributaryModel

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: OpaquePointer?, _ argv: OpaquePointer?) -> CInt {
    writeSeeds(seeds())
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = input(data, size)
    // One mask of wanted properties per input, chosen by its length: the fuzzer's mutations try them all.
    if let problem = ReaderAgreement.disagreement(bytes, only: bytes.count % ReaderAgreement.masks.count) {
        wrong(problem)
    }
    return 0
}

private func seeds() -> [[UInt8]] {
    let a = ReplicaID(rawValue: 0xA)
    let b = ReplicaID(rawValue: 0xB)
    func stamp(_ milliseconds: UInt64, _ replica: ReplicaID) -> Stamp {
        Stamp(time: HybridTime(milliseconds: milliseconds), replica: replica)
    }
    let first = ElementID(origin: a, sequence: 1, index: 0)
    let second = ElementID(origin: a, sequence: 1, index: 1)
    let third = ElementID(origin: b, sequence: 2, index: 0)
    var list = ListState()
    list.slots[first] = Slot(id: first, parent: nil, side: .right, stamp: stamp(1, a))
    list.slots[second] = Slot(id: second, parent: first, side: .right, stamp: stamp(1, a))
    list.slots[third] = Slot(id: third, parent: first, side: .left, stamp: stamp(2, b))
    list.elements[first] = ListElement(
        id: first, value: .scalar(.int(1)), valueStamp: stamp(1, a), position: first, positionStamp: stamp(1, a))
    list.elements[third] = ListElement(
        id: third, value: .scalar(.int(2)), valueStamp: stamp(2, b), position: second, positionStamp: stamp(4, a))
    var members = ListState()
    members.slots[first] = Slot(id: first, parent: nil, side: .right, stamp: stamp(3, a))
    members.elements[first] = ListElement(
        id: first,
        value: .embedded(
            EmbeddedState(
                id: first, type: "Member",
                fields: ["userName": .register(Register(value: .scalar(.string("ann")), stamp: stamp(3, a)))])),
        valueStamp: stamp(3, a), position: first, positionStamp: stamp(3, a))
    let photo = EmbeddedState(
        id: third, type: "Photo",
        fields: [
            "date": .register(Register(value: .scalar(.date(Date(timeIntervalSince1970: 1e9))), stamp: stamp(5, b))),
            "picture": .register(Register(value: .scalar(.data(Data([1, 2, 3]))), stamp: .zero)),
        ])
    let records = [
        ObjectRecord(),
        ObjectRecord(exists: false, erasures: [Dot(origin: a, sequence: 3)]),
        ObjectRecord(
            exists: true,
            fields: [
                "title": .register(Register(value: .scalar(.string("Buy milk")), stamp: stamp(10, a))),
                "count": .register(Register(value: .scalar(.int(41)), stamp: .zero, addend: -7)),
                "missing": .register(Register(value: .scalar(.null), stamp: .zero, addend: 3)),
                "ratio": .register(Register(value: .scalar(.double(0.25)), stamp: stamp(11, b))),
                "token": .register(
                    Register(
                        value: .scalar(.uuid(UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)))),
                        stamp: stamp(1, b))),
                "oid": .register(Register(value: .scalar(.objectId(ObjectID(bytes: Array(0..<12))!)), stamp: .zero)),
                "flag": .register(Register(value: .scalar(.bool(true)), stamp: .zero)),
                "none": .register(Register(value: .scalar(.null), stamp: stamp(2, a))),
                "when": .register(Register(value: .scalar(.date(Date(timeIntervalSince1970: 7))), stamp: .zero)),
                "blob": .register(Register(value: .scalar(.data(Data([9, 8]))), stamp: .zero)),
                "owner": .register(Register(value: .scalar(.link(.int(4))), stamp: stamp(12, a))),
            ]),
        ObjectRecord(
            exists: true, erasures: [Dot(origin: b, sequence: 1)],
            fields: [
                "values": .list(list), "members": .list(members),
                "image": .register(Register(value: .embedded(photo), stamp: stamp(20, b))),
                "tags": .register(Register(value: .scalar(.null), stamp: stamp(21, b))),
            ]),
    ]
    return records.map { $0.encoded() }
}
