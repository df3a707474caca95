import Testing
import TributaryStorage
import TributaryTestSupport

/// One directory opened twice in a process shares one environment; each holder may close it.
@Suite("Storage: environment lifecycle")
struct EnvironmentLifecycleTests {
    @Test("two holders of one environment each close it, and the directory opens again afterwards")
    func sharedEnvironmentClosesOnce() throws {
        let directory = TemporaryDirectory("lifecycle")
        let first = try Environment.open(path: directory.path)
        var readOnly = Environment.Configuration()
        readOnly.readOnly = true
        let second = try Environment.open(path: directory.path, configuration: readOnly)
        #expect(first === second)
        let database = try first.openDatabases(["data"])[0]
        try first.write { txn in try txn.put(database, key: [1], value: [2]) }
        first.close()
        second.close()  // LMDB's handle is closed once: a second close is a no-op
        #expect(first.isClosed)
        #expect(throws: StorageError.self) { try second.read { txn in try txn.get(database, key: [1]) } }
        let reopened = try Environment.open(path: directory.path)
        defer { reopened.close() }
        let again = try reopened.openDatabases(["data"])[0]
        #expect(try reopened.read { txn in try txn.get(again, key: [1]) } == [2])
    }
}
