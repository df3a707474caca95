import Foundation
import Testing
import TributaryModel
import TributaryTestTags

// MARK: - Seeded randomness (one PRNG, seeded from TRIBUTARY_SEED and printed)

enum FuzzRandom {
    /// The run's seed: `TRIBUTARY_SEED` (decimal, or hexadecimal with `0x`) when set, else one drawn from the
    /// clock. Either way it is printed first, with the command that replays the run.
    static let seed: UInt64 = {
        let environment = ProcessInfo.processInfo.environment
        if let text = environment["TRIBUTARY_SEED"] {
            let parsed = text.hasPrefix("0x") ? UInt64(text.dropFirst(2), radix: 16) : UInt64(text)
            if let parsed { return parsed }
            print("TRIBUTARY_SEED='\(text)' is not a number; drawing a seed from the clock")
        }
        // A fixed default, so CI runs are repeatable; set TRIBUTARY_SEED to explore other inputs.
        return 0x7472_6962_7574_6172
    }()

    /// A generator for one test: the run's seed mixed with the test's label (FNV-1a, not `Hasher`, whose seed
    /// changes per process), so each test has its own stream and replays alone.
    static func seeded(label: String) -> SplitMix64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in label.utf8 { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        print(
            "\(label): seed 0x\(String(seed, radix: 16)); replay with "
                + "TRIBUTARY_SEED=0x\(String(seed, radix: 16)) swift test --filter \(label.split(separator: ".").first ?? "")"
        )
        return SplitMix64(seed: seed ^ hash)
    }

    /// How many inputs to try: `TRIBUTARY_FUZZ_COUNT` when set (deep runs), else `defaultCount`.
    static func count(default defaultCount: Int) -> Int {
        ProcessInfo.processInfo.environment["TRIBUTARY_FUZZ_COUNT"].flatMap { Int($0) } ?? defaultCount
    }
}

/// Makes fuzz inputs: 20% random bytes (0-4 KiB), 80% mutations of valid encodings (bit
/// flip, byte set, truncate, extend, splice, a length field set to 0, -1, 2^31 or 2^63), one to three each.
struct FuzzMutator {
    var random: SplitMix64
    let corpus: [[UInt8]]

    enum Kind: String, CaseIterable {
        case random, bitFlip, byteSet, truncate, extend, splice, length
    }

    /// The next input, and the kinds of change that made it.
    mutating func next() -> (bytes: [UInt8], kinds: [Kind]) {
        if random.chance(20) {
            let count = random.below(4097)
            return ((0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }, [.random])
        }
        var bytes = corpus[random.below(corpus.count)]
        var kinds: [Kind] = []
        for _ in 0...random.below(3) {
            let kind = Kind.allCases[1 + random.below(Kind.allCases.count - 1)]
            kinds.append(kind)
            mutate(&bytes, kind)
        }
        return (bytes, kinds)
    }

    private mutating func mutate(_ bytes: inout [UInt8], _ kind: Kind) {
        switch kind {
        case .random:
            break
        case .bitFlip:
            guard !bytes.isEmpty else { return }
            bytes[random.below(bytes.count)] ^= 1 << UInt8(random.below(8))
        case .byteSet:
            guard !bytes.isEmpty else { return }
            let interesting: [UInt8] = [0, 1, 0x7F, 0x80, 0xFF, UInt8(truncatingIfNeeded: random.next())]
            bytes[random.below(bytes.count)] = interesting[random.below(interesting.count)]
        case .truncate:
            bytes.removeLast(random.below(bytes.count + 1))
        case .extend:
            bytes += (0..<1 + random.below(64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        case .splice:
            let donor = corpus[random.below(corpus.count)]
            let start = random.below(donor.count + 1)
            let piece = donor[start..<min(donor.count, start + random.below(64))]
            let at = random.below(bytes.count + 1)
            let end = min(bytes.count, at + random.below(16))
            bytes.replaceSubrange(at..<end, with: piece)
        case .length:
            // Lengths and counts are varints: write one over the bytes at a random place (where a real varint
            // sits, it replaces it; elsewhere it shifts what follows, which is a mutation too).
            let values: [UInt64] = [0, .max, 1 << 31, 1 << 63]
            var writer = BinaryWriter()
            writer.varint(values[random.below(values.count)])
            let at = random.below(bytes.count + 1)
            let end = min(bytes.count, at + 1 + random.below(2))
            bytes.replaceSubrange(at..<end, with: writer.bytes)
        }
    }
}

/// Tallies fuzz outcomes, so a run shows how deep its inputs reached.
struct FuzzTally {
    var decoded = 0
    var errors: [String: Int] = [:]
    var problems: [String] = []

    mutating func error(_ code: String) { errors[code, default: 0] += 1 }

    func summary(_ label: String, count: Int) -> String {
        let codes = errors.keys.sorted().map { "\($0) \(errors[$0] ?? 0)" }.joined(separator: ", ")
        return "\(label): \(count) inputs, \(decoded) decoded; errors: \(codes)"
    }
}

// MARK: - The changeset decoder

@Suite("Changeset decoder fuzzing", .tags(.fuzz)) struct ChangesetFuzzTests {
    @Test("Random and mutated changesets give a value or a ChangesetDecodingError, never a trap")
    func fuzzChangesetDecoder() {
        var mutator = FuzzMutator(
            random: FuzzRandom.seeded(label: "ChangesetFuzzTests.fuzzChangesetDecoder"),
            corpus: ChangesetSamples.changesets.map(ChangesetCodec.encode)
        )
        // Half of the 100,000 decoder fuzz inputs per run; the object record decoder takes the other half.
        let count = FuzzRandom.count(default: 50_000)
        var tally = FuzzTally()
        var resealedCount = 0
        for index in 0..<count {
            var (input, kinds) = mutator.next()
            // Half the mutants get their checksum recomputed, so they reach the parser behind it.
            if kinds != [.random], mutator.random.chance(50) {
                input = resealed(input)
                resealedCount += 1
            }
            do {
                let changeset = try ChangesetCodec.decode(input)
                tally.decoded += 1
                // What decodes must encode again (without trapping) and decode to itself, header included.
                let again = ChangesetCodec.encode(changeset)
                let header = try ChangesetCodec.decodeHeader(again)
                if header.instructionCount != changeset.instructions.count {
                    tally.problems.append("input \(index): re-encoded header disagrees")
                }
            } catch {
                tally.error(error.code.description)
                if error.message.isEmpty || !(0...input.count).contains(error.offset) {
                    tally.problems.append("input \(index) (\(kinds)): bad error \(error)")
                }
            }
        }
        print(tally.summary("fuzzChangesetDecoder", count: count) + "; \(resealedCount) resealed")
        #expect(tally.problems.isEmpty, "\(tally.problems.prefix(5))")
        // The corpus and the resealing must let a good share of inputs past the checksum.
        #expect(tally.errors["checksumMismatch", default: 0] < count * 3 / 4)
        #expect(tally.errors["truncated", default: 0] + tally.errors["invalidValue", default: 0] > 0)
    }

    @Test("Truncating every sample at every offset, resealed, never traps")
    func truncateEverySample() {
        var outcomes = FuzzTally()
        for bytes in ChangesetSamples.changesets.map(ChangesetCodec.encode) {
            let body = bytes[0..<bytes.count - 8]
            for length in 0..<body.count {
                do {
                    _ = try ChangesetCodec.decode(sealed(Array(body[0..<length])))
                    outcomes.decoded += 1
                } catch {
                    outcomes.error(error.code.description)
                }
            }
        }
        #expect(outcomes.decoded == 0)
    }
}
