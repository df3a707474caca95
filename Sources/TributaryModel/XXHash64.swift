/// XXH64 (Yann Collet's xxHash, 64-bit variant): a fast non-cryptographic checksum.
///
/// Tributary uses it to detect damaged changesets and log entries, not to resist forgery.
package enum XXHash64 {
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
        var state = State(seed: seed)
        state.update(bytes)
        return state.finalize()
    }

    /// The hash of several pieces of memory, as if they were one: the same value `hash(_:seed:)` gives for
    /// their concatenation, without copying them together.
    public struct State: Sendable {
        private var v1: UInt64, v2: UInt64, v3: UInt64, v4: UInt64
        private let seed: UInt64
        private var total = 0
        /// Up to 31 bytes that do not yet fill a 32-byte stripe.
        private var buffer: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        private var buffered = 0

        /// A hash of no bytes yet.
        public init(seed: UInt64 = 0) {
            self.seed = seed
            v1 = seed &+ prime1 &+ prime2
            v2 = seed &+ prime2
            v3 = seed
            v4 = seed &- prime1
        }

        @inline(__always) private static func round(_ accumulator: UInt64, _ input: UInt64) -> UInt64 {
            (accumulator &+ input &* prime2).rotatedLeft(31) &* prime1
        }

        @inline(__always) private static func merge(_ accumulator: UInt64, _ value: UInt64) -> UInt64 {
            (accumulator ^ round(0, value)) &* prime1 &+ prime4
        }

        @inline(__always) private mutating func stripe(_ bytes: UnsafeRawBufferPointer, at offset: Int) {
            func read64(_ at: Int) -> UInt64 {
                UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self))
            }
            v1 = Self.round(v1, read64(offset))
            v2 = Self.round(v2, read64(offset + 8))
            v3 = Self.round(v3, read64(offset + 16))
            v4 = Self.round(v4, read64(offset + 24))
        }

        /// Adds `bytes` to what is hashed.
        public mutating func update(_ bytes: UnsafeRawBufferPointer) {
            guard !bytes.isEmpty else { return }
            total += bytes.count
            var offset = 0
            if buffered > 0 {
                let taken = Swift.min(32 - buffered, bytes.count)
                withUnsafeMutableBytes(of: &buffer) { stored in
                    stored.baseAddress!.advanced(by: buffered).copyMemory(from: bytes.baseAddress!, byteCount: taken)
                }
                buffered += taken
                offset = taken
                guard buffered == 32 else { return }
                let full = buffer
                withUnsafeBytes(of: full) { stripe($0, at: 0) }
                buffered = 0
            }
            while offset + 32 <= bytes.count {
                stripe(bytes, at: offset)
                offset += 32
            }
            if offset < bytes.count {
                withUnsafeMutableBytes(of: &buffer) { stored in
                    stored.baseAddress!.copyMemory(
                        from: bytes.baseAddress!.advanced(by: offset), byteCount: bytes.count - offset)
                }
                buffered = bytes.count - offset
            }
        }

        /// The hash of everything added.
        public func finalize() -> UInt64 {
            var hash: UInt64
            if total >= 32 {
                hash = v1.rotatedLeft(1) &+ v2.rotatedLeft(7) &+ v3.rotatedLeft(12) &+ v4.rotatedLeft(18)
                hash = Self.merge(hash, v1)
                hash = Self.merge(hash, v2)
                hash = Self.merge(hash, v3)
                hash = Self.merge(hash, v4)
            } else {
                hash = seed &+ prime5
            }
            hash = hash &+ UInt64(truncatingIfNeeded: total)
            let tail = buffer
            let count = buffered
            return withUnsafeBytes(of: tail) { bytes in
                var offset = 0
                while offset + 8 <= count {
                    hash ^= Self.round(
                        0, UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
                    hash = hash.rotatedLeft(27) &* prime1 &+ prime4
                    offset += 8
                }
                if offset + 4 <= count {
                    hash ^=
                        UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
                        &* prime1
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
    }
}

extension UInt64 {
    @inline(__always)
    fileprivate func rotatedLeft(_ count: UInt64) -> UInt64 { (self << count) | (self >> (64 - count)) }
}
