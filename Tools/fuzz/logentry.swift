// Log entries, as stored on disk: an entry decodes or names its damage; what decodes re-encodes to the same bytes,
// and its changeset (decompressed when the entry says so) decodes as the log reads it, or is refused.
import Foundation
import TributaryCompression
import TributaryLog
import TributaryModel

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: OpaquePointer?, _ argv: OpaquePointer?) -> CInt {
    let codec = ZstdCodec()
    var seeds: [[UInt8]] = []
    for (index, changeset) in sampleChangesets().enumerated() {
        let encoded = ChangesetCodec.encode(changeset)
        let compressed = index == 1
        let payload = compressed ? (try? codec.compress(encoded)) ?? encoded : encoded
        let entry = LogEntry(
            localSequence: UInt64(index + 1), origin: changeset.origin, originSequence: changeset.originSequence,
            time: changeset.time, instructionCount: UInt32(changeset.instructions.count),
            uncompressedLength: UInt32(encoded.count), isCompressed: compressed && payload != encoded,
            previousChain: 0x55, payload: payload)
        seeds.append(entry.encoded())
    }
    writeSeeds(seeds)
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var bytes = input(data, size)
    // Most inputs get the right checksum, so that the fuzzer explores what it guards.
    if bytes.count >= LogEntry.headerSize, bytes[1] & 0x80 == 0 {
        var hasher = XXHash64.State()
        bytes.withUnsafeBytes {
            hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<50]))
            hasher.update(UnsafeRawBufferPointer(rebasing: $0[LogEntry.headerSize...]))
        }
        let checksum = hasher.finalize()
        for index in 0..<8 { bytes[50 + index] = UInt8(truncatingIfNeeded: checksum >> (8 * UInt64(index))) }
    }
    let sequence = bytes.count >= 10 ? bytes[2..<10].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) } : 1
    let decoded = bytes.withUnsafeBytes { bytes in
        Result { () throws(LogError) in try LogEntry(decoding: bytes, localSequence: sequence) }
    }
    let entry: LogEntry
    switch decoded {
    case .success(let decoded):
        entry = decoded
    case .failure(let error):
        if error.message.isEmpty { wrong("an error without a message") }
        return 0
    }
    guard entry.encoded() == bytes else { wrong("a decoded entry does not re-encode to its bytes") }
    var changeset = entry.payload
    if entry.isCompressed {
        // As the log decompresses: no more than the entry says, nor than its largest changeset.
        let limit = min(Int(entry.uncompressedLength), 64 << 20)
        guard let decompressed = try? ZstdCodec().decompress(entry.payload, maximumOutputBytes: limit) else { return 0 }
        guard decompressed.count <= limit else { wrong("decompressed \(decompressed.count) bytes, over \(limit)") }
        changeset = decompressed
    }
    // The changeset's own checksum made right too, as the changeset target does.
    checkChangeset(withChecksum(changeset))
    return 0
}
