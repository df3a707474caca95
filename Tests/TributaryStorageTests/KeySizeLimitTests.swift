import Testing
import TributaryStorage
import TributaryTestSupport

/// A key longer than LMDB's limit is refused with an error that says so, not LMDB's bare `MDB_BAD_VALSIZE`.
@Suite("Storage: keys over LMDB's limit")
struct KeySizeLimitTests {
    @Test("LMDB's MDB_BAD_VALSIZE says the key is too long")
    func badValueSizeMessage() throws {
        let directory = TemporaryDirectory()
        let environment = try Environment.open(path: directory.path)
        defer { environment.close() }
        let database = try environment.openDatabases(["d"])[0]
        #expect {
            try environment.write { try $0.put(database, key: [UInt8](repeating: 1, count: 600), value: [1]) }
        } throws: { error in
            guard let error = error as? StorageError else { return false }
            return error.code == .badValueSize && error.message.contains("600-byte key")
                && error.message.contains("longer than LMDB's limit of 511 bytes")
        }
    }
}
