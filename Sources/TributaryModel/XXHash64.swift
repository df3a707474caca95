/// XXH64 (Yann Collet's xxHash, 64-bit variant): a fast non-cryptographic checksum.
///
/// Tributary uses it to detect damaged changesets and log entries, not to resist forgery.
public enum XXHash64 {
    private static let prime1: UInt64 = 0x9E37_79B1_85EB_CA87
    private static let prime2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
    private static let prime3: UInt64 = 0x1656_67B1_9E37_79F9
    private static let prime4: UInt64 = 0x85EB_CA77_C2B2_AE63
    private static let prime5: UInt64 = 0x27D4_EB2F_1656_67C5

    /// The hash of `bytes` with `seed`.
    public static func hash(_ bytes: [UInt8], seed: UInt64 = 0) -> UInt64 {
        bytes.withUnsafeBytes { hash($0, seed: seed) }
    }

    /// The hash of the raw bytes with `seed`.
    public static func hash(_ bytes: UnsafeRawBufferPointer, seed: UInt64 = 0) -> UInt64 {
        let count = bytes.count
        var offset = 0
        var hash: UInt64
        @inline(__always) func read64(_ at: Int) -> UInt64 {
            UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self))
        }
        @inline(__always) func read32(_ at: Int) -> UInt64 {
            UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt32.self)))
        }
        @inline(__always) func round(_ accumulator: UInt64, _ input: UInt64) -> UInt64 {
            (accumulator &+ input &* prime2).rotatedLeft(31) &* prime1
        }
        @inline(__always) func merge(_ accumulator: UInt64, _ value: UInt64) -> UInt64 {
            (accumulator ^ round(0, value)) &* prime1 &+ prime4
        }
        if count >= 32 {
            var v1 = seed &+ prime1 &+ prime2
            var v2 = seed &+ prime2
            var v3 = seed
            var v4 = seed &- prime1
            while offset + 32 <= count {
                v1 = round(v1, read64(offset))
                v2 = round(v2, read64(offset + 8))
                v3 = round(v3, read64(offset + 16))
                v4 = round(v4, read64(offset + 24))
                offset += 32
            }
            hash = v1.rotatedLeft(1) &+ v2.rotatedLeft(7) &+ v3.rotatedLeft(12) &+ v4.rotatedLeft(18)
            hash = merge(hash, v1)
            hash = merge(hash, v2)
            hash = merge(hash, v3)
            hash = merge(hash, v4)
        } else {
            hash = seed &+ prime5
        }
        hash = hash &+ UInt64(count)
        while offset + 8 <= count {
            hash ^= round(0, read64(offset))
            hash = hash.rotatedLeft(27) &* prime1 &+ prime4
            offset += 8
        }
        if offset + 4 <= count {
            hash ^= read32(offset) &* prime1
            hash = hash.rotatedLeft(23) &* prime2 &+ prime3
            offset += 4
        }
        while offset < count {
            hash ^= UInt64(bytes[offset]) &* prime5
            hash = hash.rotatedLeft(11) &* prime1
            offset += 1
        }
        hash ^= hash >> 33
        hash = hash &* prime2
        hash ^= hash >> 29
        hash = hash &* prime3
        hash ^= hash >> 32
        return hash
    }
}

extension UInt64 {
    @inline(__always)
    fileprivate func rotatedLeft(_ count: UInt64) -> UInt64 { (self << count) | (self >> (64 - count)) }
}
