// What every fuzz target shares: its seeds, and how it reports a wrong answer.
import Foundation

/// Writes `seeds` into the corpus directory that `TRIBUTARY_FUZZ_SEEDS` names (Tools/fuzz/run.sh sets it), when that
/// directory is empty: the valid inputs the fuzzer starts mutating from.
func writeSeeds(_ seeds: [[UInt8]]) {
    guard let directory = ProcessInfo.processInfo.environment["TRIBUTARY_FUZZ_SEEDS"],
        let existing = try? FileManager.default.contentsOfDirectory(atPath: directory), existing.isEmpty
    else { return }
    for (index, seed) in seeds.enumerated() {
        _ = FileManager.default.createFile(atPath: "\(directory)/seed-\(index)", contents: Data(seed))
    }
}

/// Reports a decoder that read wrongly (a disagreement, a failed round trip) and stops, so that libFuzzer keeps the
/// input as a finding.
func wrong(_ message: String) -> Never {
    FileHandle.standardError.write(Data("wrong answer: \(message)\n".utf8))
    abort()
}

/// The input libFuzzer passes, as bytes.
func input(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
    guard let data, size > 0 else { return [] }
    return Array(UnsafeBufferPointer(start: data, count: size))
}
