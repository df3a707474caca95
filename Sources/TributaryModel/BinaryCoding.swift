import Foundation

/// Appends the primitive encodings every Tributary format uses: LEB128 varints, zigzag integers, fixed-width
/// little-endian words, and length-prefixed bytes.
package struct BinaryWriter: Sendable {
    /// The bytes written so far.
    public var bytes: [UInt8]

    public init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    @inline(__always)
    public mutating func byte(_ value: UInt8) { bytes.append(value) }

    @inline(__always)
    public mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    @inline(__always)
    public mutating func varint(_ value: Int) { varint(UInt64(clamping: value)) }

    @inline(__always)
    public mutating func zigzag(_ value: Int64) {
        varint(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
    }

    @inline(__always)
    public mutating func fixed64(_ value: UInt64) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    @inline(__always)
    public mutating func fixed32(_ value: UInt32) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    /// A dot: its origin as a 64-bit word, then its sequence as a varint.
    public mutating func dot(_ dot: Dot) {
        fixed64(dot.origin.rawValue)
        varint(dot.sequence)
    }

    /// A version vector: a count, then each origin as a 64-bit word and its sequence as a varint.
    public mutating func versionVector(_ vector: VersionVector) {
        varint(vector.entries.count)
        for entry in vector.entries {
            fixed64(entry.replica.rawValue)
            varint(entry.sequence)
        }
    }

    public mutating func lengthPrefixed(_ data: some Collection<UInt8>) {
        varint(data.count)
        bytes.append(contentsOf: data)
    }

    public mutating func string(_ string: String) {
        // A native string (small or not) is read where it is; only a foreign one is copied first.
        if string.utf8.withContiguousStorageIfAvailable({ lengthPrefixed($0) }) != nil { return }
        var string = string
        string.withUTF8 { lengthPrefixed($0) }
    }

    public mutating func raw(_ data: some Sequence<UInt8>) { bytes.append(contentsOf: data) }
}

/// Reads what ``BinaryWriter`` writes, checking every length against the bytes left and the limits, so that
/// no input can make it trap or allocate without bound.
package struct BinaryReader {
    public let bytes: [UInt8]
    /// The offset of the next byte to read.
    public var offset: Int
    /// Where the readable region ends.
    public var end: Int
    public let limits: DecodingLimits
    /// What is being decoded, for error messages ("changeset", "object record").
    public let subject: String

    public init(_ bytes: [UInt8], subject: String, limits: DecodingLimits = .standard) {
        self.bytes = bytes
        self.offset = 0
        self.end = bytes.count
        self.limits = limits
        self.subject = subject
    }

    public var remaining: Int { end - offset }
    public var isAtEnd: Bool { offset >= end }

    public func error(_ code: ChangesetDecodingError.Code, _ message: String) -> ChangesetDecodingError {
        ChangesetDecodingError(code, "\(subject): \(message)", offset: offset)
    }

    private func truncated(_ what: String, needs: Int) -> ChangesetDecodingError {
        error(.truncated, "truncated \(what): needs \(needs) bytes, \(remaining) left")
    }

    @inline(__always)
    public mutating func byte() throws(ChangesetDecodingError) -> UInt8 {
        guard offset < end else { throw truncated("byte", needs: 1) }
        defer { offset += 1 }
        return bytes[offset]
    }

    /// The next byte, without consuming it.
    public func peekByte() throws(ChangesetDecodingError) -> UInt8 {
        guard offset < end else { throw error(.truncated, "truncated byte: needs 1 bytes, 0 left") }
        return bytes[offset]
    }

    public mutating func varint() throws(ChangesetDecodingError) -> UInt64 {
        // Most varints (lengths, counts, stamp indexes, sequences of a young replica) are one byte.
        if offset < end, bytes[offset] < 0x80 {
            defer { offset += 1 }
            return UInt64(bytes[offset])
        }
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard offset < end else { throw truncated("varint", needs: 1) }
            let byte = bytes[offset]
            offset += 1
            if shift == 63 && byte > 1 { throw error(.invalidValue, "varint overflows 64 bits") }
            result |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 { return result }
            shift += 7
            if shift > 63 { throw error(.invalidValue, "varint longer than 10 bytes") }
        }
    }

    public mutating func zigzag() throws(ChangesetDecodingError) -> Int64 {
        let raw = try varint()
        return Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
    }

    public mutating func fixed64() throws(ChangesetDecodingError) -> UInt64 {
        guard remaining >= 8 else { throw truncated("64-bit word", needs: 8) }
        var value: UInt64 = 0
        for index in 0..<8 { value |= UInt64(bytes[offset + index]) << (8 * UInt64(index)) }
        offset += 8
        return value
    }

    public mutating func dot() throws(ChangesetDecodingError) -> Dot {
        Dot(origin: ReplicaID(rawValue: try fixed64()), sequence: try varint())
    }

    /// A version vector written by ``BinaryWriter/versionVector(_:)``.
    public mutating func versionVector() throws(ChangesetDecodingError) -> VersionVector {
        let count = try self.count("version vector entry", maximum: 1 << 24, minimumBytesEach: 9)
        var vector = VersionVector()
        for _ in 0..<count {
            let replica = ReplicaID(rawValue: try fixed64())
            vector.advance(replica, to: try varint())
        }
        return vector
    }

    public mutating func fixed32() throws(ChangesetDecodingError) -> UInt32 {
        guard remaining >= 4 else { throw truncated("32-bit word", needs: 4) }
        var value: UInt32 = 0
        for index in 0..<4 { value |= UInt32(bytes[offset + index]) << (8 * UInt32(index)) }
        offset += 4
        return value
    }

    /// A count of items that each take at least `minimumBytesEach` bytes, checked against the bytes left and
    /// `maximum`, so that a huge count cannot reserve memory.
    ///
    /// `what` is built only for an error message: decoding builds no text on its way.
    public mutating func count(
        _ what: @autoclosure () -> String, maximum: Int, minimumBytesEach: Int = 1
    ) throws(ChangesetDecodingError) -> Int {
        let raw = try varint()
        guard raw <= UInt64(maximum), let count = Int(exactly: raw) else {
            throw error(.limitExceeded, "\(what()) count \(raw) is over the limit of \(maximum)")
        }
        let (needed, overflow) = count.multipliedReportingOverflow(by: max(minimumBytesEach, 0))
        guard !overflow, needed <= remaining else {
            throw truncated("\(what()) (\(count) of them)", needs: overflow ? Int.max : needed)
        }
        return count
    }

    public mutating func rawBytes(_ count: Int, _ what: String) throws(ChangesetDecodingError) -> ArraySlice<UInt8> {
        guard count >= 0, count <= remaining else { throw truncated(what, needs: count) }
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    public mutating func lengthPrefixed(_ what: String) throws(ChangesetDecodingError) -> ArraySlice<UInt8> {
        let length = try count(what + " length", maximum: limits.maximumValueBytes)
        return try rawBytes(length, what)
    }

    public mutating func string(_ what: String = "string") throws(ChangesetDecodingError) -> String {
        let slice = try lengthPrefixed(what)
        let string = bytes.withUnsafeBufferPointer { buffer in
            let utf8 = UnsafeBufferPointer(rebasing: buffer[slice.startIndex..<slice.endIndex])
            // ASCII is valid UTF-8 as it is, and `String(decoding:)` is the fast path; anything else is validated.
            return utf8.allSatisfy { $0 < 0x80 }
                ? String(decoding: utf8, as: UTF8.self) : String(validating: utf8, as: UTF8.self)
        }
        guard let string else { throw error(.invalidValue, "\(what) is not valid UTF-8") }
        return string
    }
}
