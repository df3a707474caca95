import Testing
import TributaryStorage
import TributaryTestSupport

/// `WriteTransaction.append`, which the log uses for its entries: keys that only grow go straight to the last page.
@Suite("Storage: appends")
struct AppendTests {
    static func key(_ number: UInt64) -> [UInt8] { withUnsafeBytes(of: number.bigEndian) { Array($0) } }

    @Test("appended entries read back in key order, across many pages")
    func appendsReadBack() throws {
        let directory = TemporaryDirectory("append")
        let environment = try Environment.open(path: directory.path)
        defer { environment.close() }
        let database = try environment.openDatabases(["log"])[0]
        // Enough 200-byte values to fill many pages, in two transactions.
        for range in [UInt64(1)...3_000, 3_001...6_000] {
            try environment.write { txn in
                for number in range {
                    try txn.append(
                        database, key: Self.key(number), value: [UInt8](repeating: UInt8(number % 251), count: 200))
                }
            }
        }
        var seen: UInt64 = 0
        try environment.read { txn in
            try txn.scan(database) { key, value in
                seen += 1
                #expect(Array(key) == Self.key(seen))
                #expect(value.count == 200 && value.allSatisfy { $0 == UInt8(seen % 251) })
                return true
            }
        }
        #expect(seen == 6_000)
    }

    @Test(
        "an append whose key does not sort after the last key is refused, and nothing committed is lost",
        arguments: [UInt64(5), 10])
    func outOfOrderAppendIsRefused(_ number: UInt64) throws {
        let directory = TemporaryDirectory("append-order")
        let environment = try Environment.open(path: directory.path)
        defer { environment.close() }
        let database = try environment.openDatabases(["log"])[0]
        try environment.write { txn in
            for number in UInt64(1)...10 { try txn.append(database, key: Self.key(number), value: [UInt8(number)]) }
        }
        // An earlier key, and the last key itself: both would overwrite an entry under `put`.
        let error = try #require(throws: StorageError.self) {
            try environment.write { txn in try txn.append(database, key: Self.key(number), value: [0xFF]) }
        }
        #expect(error.code == .keyExists)
        #expect(error.message.contains("does not sort after the last key"), "\(error.message)")
        let stored = try environment.read { txn in try txn.get(database, key: Self.key(number)) }
        #expect(stored == [UInt8(number)])
    }
}
