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

/// The reader table, as metrics read it.
@Suite("Storage: reader table")
struct ReaderTableTests {
    @Test("a running snapshot counts as an active reader, behind by the commits made since it began")
    func snapshotIsAnActiveReader() throws {
        let directory = TemporaryDirectory("readers")
        let environment = try Environment.open(path: directory.path)
        defer { environment.close() }
        let database = try environment.openDatabases(["data"])[0]
        try environment.write { txn in try txn.put(database, key: [0], value: [0]) }
        let idle = environment.readers
        #expect(idle.active == 0 && idle.oldestLagTransactions == nil)

        let snapshot = try environment.snapshot()
        for key in UInt8(1)...3 {
            try environment.write { txn in try txn.put(database, key: [key], value: [key]) }
        }
        let reading = environment.readers
        #expect(reading.active == 1)
        #expect(reading.slotsHeld >= 1)
        #expect(reading.oldestLagTransactions == 3)
        snapshot.release()
        #expect(environment.readers.active == 0)
        environment.close()
        #expect(environment.readers == Environment.Readers(slotsHeld: 0, active: 0, oldestLagTransactions: nil))
    }

    @Test("the listing is read line by line; an idle slot is held but not active, and odd lines are skipped")
    func listingParse() {
        let listing =
            "    pid     thread     txnid\n      4242 7f00aa 17\n      4242 7f00bb -\n      4343 7f00cc 12\nnoise\n"
        let readers = Environment.Readers(listing: listing, lastTransactionID: 20)
        #expect(readers == Environment.Readers(slotsHeld: 3, active: 2, oldestLagTransactions: 8))
        #expect(
            Environment.Readers(listing: "(no active readers)\n", lastTransactionID: 5)
                == Environment.Readers(slotsHeld: 0, active: 0, oldestLagTransactions: nil))
    }
}
