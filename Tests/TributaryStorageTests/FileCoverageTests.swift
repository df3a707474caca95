import Foundation
import Testing
import TributaryModel
import TributaryStorage
import TributaryTestSupport

/// The data file always covers the pages LMDB's last commit counts, so that a shorter file can be told apart as
/// damaged. LMDB can leave free pages at the end of the map unwritten; `Environment` extends the file over them after
/// a commit, and asks the file only when the commit's pages end beyond what it knows the file holds.
@Suite("Storage: the data file covers every committed page")
struct FileCoverageTests {
    @Test("after every commit of a random mix of puts, overflow values and deletes, the file covers the pages in use")
    func fileCoversCommittedPages() throws {
        let directory = TemporaryDirectory("coverage")
        let environment = try Environment.open(path: directory.path)
        defer { environment.close() }
        let database = try environment.openDatabases(["data"])[0]
        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 0xC0FE))
        var shortfalls: [String] = []
        for commit in 0..<400 {
            try environment.write { txn in
                for _ in 0..<(1 + random.below(20)) {
                    let key = withUnsafeBytes(of: UInt64(random.below(300)).bigEndian) { Array($0) }
                    switch random.below(12) {
                    case 0..<3: try txn.delete(database, key: key)
                    case 10, 11:
                        // A large value written and deleted in one transaction: its pages extend the map but are
                        // freed before the commit writes anything, so LMDB leaves them unwritten at the file's end.
                        let scratch = withUnsafeBytes(of: UInt64(1_000 + random.below(100)).bigEndian) { Array($0) }
                        try txn.put(
                            database, key: scratch, value: [UInt8](repeating: 3, count: 4_096 * (4 + random.below(40))))
                        try txn.delete(database, key: scratch)
                    case 3:
                        try txn.put(
                            database, key: key, value: [UInt8](repeating: 1, count: 4_096 * (1 + random.below(12))))
                    default: try txn.put(database, key: key, value: [UInt8](repeating: 2, count: 1 + random.below(400)))
                    }
                }
            }
            var file = stat()
            let size = stat(directory.appending("data.mdb"), &file) == 0 ? Int(file.st_size) : -1
            let used = environment.statistics.usedBytes
            if size < used { shortfalls.append("commit \(commit): file \(size) bytes, pages in use \(used)") }
        }
        #expect(shortfalls.isEmpty, "\(shortfalls.count) commits left the file short: \(shortfalls.prefix(3))")
    }
}
