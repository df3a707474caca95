import Foundation
import Testing
@testable import Tributary
import TributaryModel
import TributaryStorage
import TributaryTestSupport
import TributaryViews

/// A removal or rename of a property remembers the renames onto its name that its changeset saw (rule 8), so that a
/// copy of a rename merged late can find the property that a rename which saw another copy moved on. Replica format 2
/// stores them; a replica of format 1 gets them from its log when it is opened for writing.
@Suite("Removals remember the renames onto their name that they saw")
struct RenamesOntoSeenTests {
    static let schema = Schema(version: 1, types: [
        ObjectSchema(name: "Task", properties: [.scalar("_id", .string), .scalar("a", .string, optional: true)]),
    ])

    /// Creates an object, renames `a` to `b`, then removes `b`: a removal that saw a rename onto its name. The dots
    /// are origin dots, which equal local sequences on a replica that integrated nothing.
    static func migrate(_ replica: Replica) throws -> (rename: Dot, removal: Dot) {
        try replica.write { _ = try $0.create("Task", ["_id": "t", "a": "A"]) }
        try replica.write { try $0.emit(.renameProperty(type: "Task", from: "a", to: "b")) }
        let rename = Dot(origin: replica.replicaID, sequence: try replica.summary().lastLocalSequence)
        try replica.write { try $0.emit(.removeProperty(type: "Task", name: "b")) }
        let removal = Dot(origin: replica.replicaID, sequence: try replica.summary().lastLocalSequence)
        return (rename, removal)
    }

    static var configuration: Replica.Configuration {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return configuration
    }

    /// A replica that ran ``migrate(_:)``, then stored as a build of format 1 stored it: the format byte 1 and the
    /// schema without the renames its removals saw (and, `withoutStamps`, without definition stamps, as a build before
    /// those stored it); `damagingEntry` also flips a byte in that log entry's payload. Returns the schema as this
    /// build stores it.
    static func formatOneReplica(
        in directory: String, withoutStamps: Bool = false, damagingEntry: UInt64? = nil
    ) throws -> Schema {
        let expected: Schema
        do {
            let replica = try Replica.open(directory: directory, schema: schema, configuration: configuration)
            defer { replica.close() }
            _ = try migrate(replica)
            expected = replica.schema
        }
        let environment = try Environment.open(path: directory)
        defer { environment.close() }
        let databases = try environment.openDatabases(["replica", "log"])
        let views = try ViewStore(environment: environment)
        try environment.write { txn in
            try txn.put(databases[0], key: Array("format".utf8), value: [1])
            var stored = expected.withoutRenamesOntoSeen
            if withoutStamps { stored.definitionStamps = [:] }
            try views.setSchema(stored, in: txn)
            if let damagingEntry {
                let key = withUnsafeBytes(of: damagingEntry.bigEndian) { Array($0) }
                var entry = try #require(try txn.get(databases[1], key: key))
                entry[entry.count - 1] ^= 0x40
                try txn.put(databases[1], key: key, value: entry)
            }
        }
        return expected
    }

    @Test("A removal records the renames onto its name that it saw; the first rename, which saw none, records none")
    func recorded() throws {
        let directory = TemporaryDirectory()
        let replica = try Replica.open(directory: directory.path, schema: Self.schema, configuration: Self.configuration)
        defer { replica.close() }
        let (rename, removal) = try Self.migrate(replica)
        #expect(replica.schema.removals(of: "b", in: "Task") == [PropertyRemoval(dot: removal, renamesOntoSeen: [rename])])
        #expect(replica.schema.removals(of: "a", in: "Task") == [PropertyRemoval(dot: rename, renamedTo: "b")])
        #expect(try replica.verify().passed)
    }

    @Test(
        "A replica of format 1 whose schema lacks them gets them from its log when opened for writing (and its definition stamps, if it lacks those too)",
        arguments: [false, true])
    func upgradedFromFormatOne(withoutStamps: Bool) throws {
        let directory = TemporaryDirectory()
        let expected = try Self.formatOneReplica(in: directory.path, withoutStamps: withoutStamps)
        #expect(expected.propertyRemovals.values.contains { $0.contains { !$0.renamesOntoSeen.isEmpty } })
        #expect(!expected.definitionStamps.isEmpty)
        var stripped = expected.withoutRenamesOntoSeen
        if withoutStamps { stripped.definitionStamps = [:] }
        var readOnly = Self.configuration
        readOnly.readOnly = true
        do {
            let replica = try Replica.open(directory: directory.path, configuration: readOnly)
            #expect(try replica.summary().formatVersion == 1)
            #expect(replica.schema == stripped)
            replica.close()
        }
        let replica = try Replica.open(directory: directory.path, configuration: Self.configuration)
        defer { replica.close() }
        #expect(try replica.summary().formatVersion == Replica.formatVersion)
        #expect(replica.schema == expected)
        #expect(try replica.verify().passed)
    }

    @Test("A replica of format 1 whose rebuild fails (a damaged log entry) opens with its stored views, raised to the current format")
    func upgradeWhoseRebuildFails() throws {
        let directory = TemporaryDirectory()
        // The second log entry is the create: the replay stops there, naming it.
        let stripped = try Self.formatOneReplica(in: directory.path, damagingEntry: 2).withoutRenamesOntoSeen
        let replica = try Replica.open(directory: directory.path, configuration: Self.configuration)
        #expect(replica.schema == stripped)
        #expect(try replica.object("Task", primaryKey: .string("t")) != nil)
        // Nothing committed was lost, and verify names the damage.
        let report = try replica.verify()
        #expect(!report.passed)
        #expect(String(describing: report).contains("checksum mismatch in log entry 2"))
        replica.close()
        // Raised all the same (`summary()` reads the damaged entry, so the format is read where it is stored).
        let environment = try Environment.open(path: directory.path)
        defer { environment.close() }
        let identity = try environment.openDatabases(["replica"])[0]
        #expect(try environment.read { try $0.get(identity, key: Array("format".utf8)) } == [Replica.formatVersion])
    }
}

extension Schema {
    /// This schema as a build of replica format 1 stored it: without the renames onto their name that removals saw.
    var withoutRenamesOntoSeen: Schema {
        var stripped = self
        for (name, removals) in propertyRemovals {
            stripped.propertyRemovals[name] = removals.map { removal in
                var removal = removal
                removal.renamesOntoSeen = []
                return removal
            }
        }
        return stripped
    }
}
