import Testing
import TributaryLog
import TributaryModel

/// A stored log entry decodes only as its format defines it: what the log fuzz target (Tools/fuzz) found decoding
/// and re-encoding to other bytes is refused.
@Suite struct LogEntryDecodingTests {
    /// The stored bytes of an entry whose header says `flags`, with a checksum that matches them.
    static func stored(flags: UInt8) -> [UInt8] {
        let entry = LogEntry(
            localSequence: 1, origin: ReplicaID(rawValue: 9), originSequence: 9, time: HybridTime(rawValue: 9),
            instructionCount: 0, uncompressedLength: 2, isCompressed: false, previousChain: 0, payload: [9, 9])
        var bytes = entry.encoded()
        bytes[1] = flags
        var hasher = XXHash64.State()
        bytes.withUnsafeBytes {
            hasher.update(UnsafeRawBufferPointer(rebasing: $0[0..<50]))
            hasher.update(UnsafeRawBufferPointer(rebasing: $0[LogEntry.headerSize...]))
        }
        let checksum = hasher.finalize()
        for index in 0..<8 { bytes[50 + index] = UInt8(truncatingIfNeeded: checksum >> (8 * UInt64(index))) }
        return bytes
    }

    @Test("an entry decodes and re-encodes to its bytes", arguments: [0, 1] as [UInt8])
    func roundTrip(_ flags: UInt8) throws {
        let bytes = Self.stored(flags: flags)
        let entry = try bytes.withUnsafeBytes { try LogEntry(decoding: $0, localSequence: 1) }
        #expect(entry.isCompressed == (flags == 1))
        #expect(entry.encoded() == bytes)
    }

    @Test("flags the format does not define are refused, not dropped", arguments: [2, 9, 0x80, 0xFF] as [UInt8])
    func unknownFlags(_ flags: UInt8) throws {
        let bytes = Self.stored(flags: flags)
        let error = try #require(throws: LogError.self) {
            try bytes.withUnsafeBytes { try LogEntry(decoding: $0, localSequence: 1) }
        }
        #expect(error.code == .unsupportedFormat)
        #expect(error.message.contains("flags \(flags)"), "\(error)")
    }
}
