/// SplitMix64 (Steele, Lea and Flood, 2014): a small, fast generator whose whole state is one 64-bit seed.
///
/// Tests, the simulator and the benchmarks draw every random choice from it, never from the system generator, so a
/// printed seed replays a run exactly. Not for anything that needs unpredictability.
package struct SplitMix64: RandomNumberGenerator, Sendable {
    public private(set) var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A number in `0 ..< bound` (0 when `bound` is not positive).
    public mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(bound, 1))) }

    /// `true` with probability `percent` / 100.
    public mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
}
