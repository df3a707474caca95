public import TributaryModel

/// One entry of the changeset log: a header readable without decompressing, and the changeset's bytes.
///
/// ```
/// offset size
///  0     1   entry format (1)
///  1     1   flags (bit 0: payload is zstd-compressed; no other bit may be set)
///  2     8   local sequence
/// 10     8   origin replica id
/// 18     8   origin sequence
/// 26     8   hybrid time
/// 34     4   instruction count
/// 38     4   uncompressed changeset length
/// 42     8   chain value of the previous entry (0 for the first)
/// 50     8   checksum: XXH64 of bytes 0..<50 and the payload; also this entry's chain value
/// 58     -   payload: the encoded changeset, compressed or not
/// ```
/// All integers are little-endian. Because each checksum covers the previous entry's, a dropped, swapped or
/// replaced entry breaks the chain at the entry after it.
public struct LogEntry: Hashable, Sendable {
    public static let format: UInt8 = 1
    public static let headerSize = 58

    public var localSequence: UInt64
    public var origin: ReplicaID
    public var originSequence: UInt64
    public var time: HybridTime
    public var instructionCount: UInt32
    public var uncompressedLength: UInt32
    public var isCompressed: Bool
    public var previousChain: UInt64
    public var checksum: UInt64
    /// The stored (possibly compressed) changeset bytes.
    public var payload: [UInt8]

    /// The changeset's identity.
    public var dot: Dot { Dot(origin: origin, sequence: originSequence) }
    /// The stored size in bytes, header included.
    public var storedSize: Int { Self.headerSize + payload.count }

    /// Builds an entry and computes its checksum.
    public init(
        localSequence: UInt64, origin: ReplicaID, originSequence: UInt64, time: HybridTime, instructionCount: UInt32,
        uncompressedLength: UInt32, isCompressed: Bool, previousChain: UInt64, payload: [UInt8]
    ) {
        self.localSequence = localSequence
        self.origin = origin
        self.originSequence = originSequence
        self.time = time
        self.instructionCount = instructionCount
        self.uncompressedLength = uncompressedLength
        self.isCompressed = isCompressed
        self.previousChain = previousChain
        self.payload = payload
        self.checksum = 0
        self.checksum = computeChecksum()
    }

    func headerBytes() -> [UInt8] {
        var writer = BinaryWriter(capacity: Self.headerSize + payload.count)
        writer.byte(Self.format)
        writer.byte(isCompressed ? 1 : 0)
        writer.fixed64(localSequence)
        writer.fixed64(origin.rawValue)
        writer.fixed64(originSequence)
        writer.fixed64(time.rawValue)
        writer.fixed32(instructionCount)
        writer.fixed32(uncompressedLength)
        writer.fixed64(previousChain)
        return writer.bytes
    }

    func computeChecksum() -> UInt64 {
        var hasher = XXHash64.State()
        headerBytes().withUnsafeBytes { hasher.update($0) }
        payload.withUnsafeBytes { hasher.update($0) }
        return hasher.finalize()
    }

    /// The stored bytes.
    public func encoded() -> [UInt8] {
        var writer = BinaryWriter(capacity: Self.headerSize + payload.count)
        writer.raw(headerBytes())
        writer.fixed64(checksum)
        writer.raw(payload)
        return writer.bytes
    }

    /// The origin dot in the header of the stored bytes of the entry at `localSequence`, without checking the
    /// checksum; `nil` when the bytes are too short for a header or say they are another entry.
    public static func originDot(ofStored bytes: UnsafeRawBufferPointer, localSequence: UInt64) -> Dot? {
        guard bytes.count >= headerSize, bytes[0] == format else { return nil }
        func u64(_ offset: Int) -> UInt64 {
            UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }
        guard u64(2) == localSequence else { return nil }
        return Dot(origin: ReplicaID(rawValue: u64(10)), sequence: u64(18))
    }

    /// Decodes the stored bytes of the entry at `localSequence` and checks its checksum and sequence.
    ///
    /// - Throws: ``LogError`` with `.truncated`, `.unsupportedFormat`, `.checksumMismatch` (naming the entry, its
    ///   origin and origin sequence as recorded) or `.sequenceMismatch`.
    public init(decoding bytes: UnsafeRawBufferPointer, localSequence: UInt64) throws(LogError) {
        guard bytes.count >= Self.headerSize else {
            throw LogError(
                .truncated, localSequence: localSequence,
                "log entry \(localSequence) is truncated: \(bytes.count) bytes, the header alone needs \(Self.headerSize)"
            )
        }
        func u64(_ offset: Int) -> UInt64 {
            UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }
        func u32(_ offset: Int) -> UInt32 {
            UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
        }
        let format = bytes[0]
        let origin = ReplicaID(rawValue: u64(10))
        let originSequence = u64(18)
        let stored = u64(50)
        var hasher = XXHash64.State()
        hasher.update(UnsafeRawBufferPointer(rebasing: bytes[0..<50]))
        hasher.update(UnsafeRawBufferPointer(rebasing: bytes[Self.headerSize...]))
        let computed = hasher.finalize()
        guard computed == stored else {
            throw LogError(
                .checksumMismatch, localSequence: localSequence,
                "checksum mismatch in log entry \(localSequence) (origin \(origin), seq \(originSequence)): "
                    + "the entry is damaged on disk")
        }
        guard format == Self.format else {
            throw LogError(
                .unsupportedFormat, localSequence: localSequence,
                "log entry \(localSequence) has format \(format); this build reads format \(Self.format)")
        }
        let flags = bytes[1]
        // Only bit 0 has a meaning: an entry with others set was not written by this format, and reading it would
        // drop them.
        guard flags <= 1 else {
            throw LogError(
                .unsupportedFormat, localSequence: localSequence,
                "log entry \(localSequence) has flags \(flags), which format \(Self.format) does not define")
        }
        let recordedSequence = u64(2)
        guard recordedSequence == localSequence else {
            throw LogError(
                .sequenceMismatch, localSequence: localSequence,
                "log entry stored at \(localSequence) says it is entry \(recordedSequence): entries were moved or swapped"
            )
        }
        self.localSequence = localSequence
        self.origin = origin
        self.originSequence = originSequence
        self.time = HybridTime(rawValue: u64(26))
        self.instructionCount = u32(34)
        self.uncompressedLength = u32(38)
        self.isCompressed = flags & 1 != 0
        self.previousChain = u64(42)
        self.checksum = stored
        self.payload = Array(bytes[Self.headerSize...])
    }
}
