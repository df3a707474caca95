import Foundation
import Testing
import Tributary
import TributaryModel
import TributaryStorage
import TributaryTestSupport

/// `verify()` replays a small replica in memory and a large one into scratch views on disk, writing records there past
/// a bound. Whichever way it goes, it must find the same problems and report them in the same words: checked on a
/// healthy replica and on copies of it damaged in each way a report names.
@Suite("verify in memory and through scratch views")
struct VerifyPathsTests {
    static func makeReplica(_ directory: TemporaryDirectory) throws {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(
            directory: directory.path, schema: RebuildTests.schema, configuration: configuration)
        defer { replica.close() }
        for batch in 0..<6 {
            try replica.write { txn in
                for index in 0..<40 {
                    let key = Int64(batch * 30 + index)  // overlapping: later batches update earlier objects
                    _ = try txn.upsert(
                        "Task",
                        [
                            "_id": .int(key), "title": .string("t\(key % 7)"), "n": .int(Int64(batch)),
                            "tags": .list([.string("a\(index % 3)")]),
                        ])
                }
            }
        }
        try replica.write { txn in
            for key in stride(from: Int64(0), to: 200, by: 9) { _ = try txn.delete("Task", primaryKey: .int(key)) }
        }
    }

    /// Both reports of the replica in `directory`.
    static func reports(_ directory: TemporaryDirectory) throws -> (
        memory: VerificationReport, scratch: VerificationReport
    ) {
        var configuration = Replica.Configuration()
        configuration.readOnly = true
        let replica = try Replica.open(directory: directory.path, configuration: configuration)
        defer { replica.close() }
        return (try replica.verify(recordsInMemory: .max), try replica.verify(recordsInMemory: 1))
    }

    /// Changes the replica's storage directly: `body` gets a write transaction and the named databases.
    static func damage(_ directory: TemporaryDirectory, _ body: (WriteTransaction, [String: Database]) throws -> Void)
        throws
    {
        let environment = try Environment.open(path: directory.path)
        let names = ["objects", "indexes", "log"]
        let databases = Dictionary(uniqueKeysWithValues: zip(names, try environment.openDatabases(names)))
        try environment.write { try body($0, databases) }
    }

    /// The `index`-th key and value of `database`.
    static func entry(_ index: Int, of database: Database, in txn: WriteTransaction) throws -> ([UInt8], [UInt8]) {
        var found: ([UInt8], [UInt8])?
        var position = 0
        try txn.scan(database) { key, value in
            if position == index { found = (Array(key), Array(value)) }
            position += 1
            return found == nil
        }
        return try #require(found)
    }

    @Test func healthy() throws {
        let directory = TemporaryDirectory()
        try Self.makeReplica(directory)
        let (memory, scratch) = try Self.reports(directory)
        #expect(memory.passed)
        #expect(memory == scratch)
    }

    enum Damage: String, CaseIterable, Sendable {
        case recordChanged, recordRemoved, strayIndexEntry, indexEntryRemoved, logEntryDamaged
    }

    @Test(arguments: Damage.allCases)
    func damaged(_ damage: Damage) throws {
        let directory = TemporaryDirectory()
        try Self.makeReplica(directory)
        try Self.damage(directory) { txn, databases in
            switch damage {
            case .recordChanged:
                var (key, value) = try Self.entry(17, of: databases["objects"]!, in: txn)
                value[value.count - 1] ^= 0x40
                try txn.put(databases["objects"]!, key: key, value: value)
            case .recordRemoved:
                try txn.delete(databases["objects"]!, key: try Self.entry(23, of: databases["objects"]!, in: txn).0)
            case .strayIndexEntry:
                var (key, _) = try Self.entry(5, of: databases["indexes"]!, in: txn)
                key[key.count - 1] ^= 0x01
                try txn.put(databases["indexes"]!, key: key, value: [])
            case .indexEntryRemoved:
                try txn.delete(databases["indexes"]!, key: try Self.entry(9, of: databases["indexes"]!, in: txn).0)
            case .logEntryDamaged:
                var (key, value) = try Self.entry(3, of: databases["log"]!, in: txn)
                value[value.count - 2] ^= 0xFF
                try txn.put(databases["log"]!, key: key, value: value)
            }
        }
        let (memory, scratch) = try Self.reports(directory)
        #expect(!memory.passed, "\(damage)")
        #expect(memory.firstProblem == scratch.firstProblem, "\(damage)")
        #expect(memory.changesetsChecked == scratch.changesetsChecked, "\(damage)")
    }
}
