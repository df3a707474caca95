import Foundation
import Testing
import TributaryModel
import TributaryStorage
import TributaryTestSupport

@testable import Tributary

@Suite("Replica format")
struct ReplicaFormatTests {
    static func configuration(readOnly: Bool = false) -> Replica.Configuration {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.readOnly = readOnly
        return configuration
    }

    /// A closed replica in `directory` with a few users, one deleted, and a list edit.
    static func makeReplica(_ directory: String) throws {
        let replica = try Replica.open(
            directory: directory, schema: Fixtures.chatSchema, configuration: configuration())
        defer { replica.close() }
        try replica.write { txn in
            for index in 0..<5 {
                try txn.create("User", ["_id": .string("u\(index)"), "name": .string("User \(index)")])
            }
        }
        try replica.write { txn in
            try txn.delete("User", primaryKey: .string("u3"))
            try txn.append("x", to: ["tags"], of: "User", primaryKey: .string("u1"))
        }
    }

    @Test("a new replica records format 1 under the release key, and reopens")
    func newReplicaRecordsTheCurrentFormat() throws {
        #expect(Replica.formatVersion == 1)
        let directory = TemporaryDirectory("format-new")
        try Self.makeReplica(directory.path)
        let replica = try Replica.open(directory: directory.path, configuration: Self.configuration(readOnly: true))
        defer { replica.close() }
        #expect(try replica.summary().formatVersion == 1)
        let stored = try replica.environment.read { txn in
            (
                try txn.get(replica.identity, key: ReplicaFormat.key),
                try txn.get(replica.identity, key: ReplicaFormat.developmentKey)
            )
        }
        #expect(stored.0 == [1])
        #expect(stored.1 == nil)
    }

    @Test(
        "a replica of a development build is refused, for writing and read-only, with the way to rebuild it",
        arguments: [UInt8(1), 4, 7])
    func developmentBuildIsRefused(developmentFormat: UInt8) throws {
        let directory = TemporaryDirectory("format-development")
        try Self.makeReplica(directory.path)
        try StoredFormat.markAsDevelopmentBuild(directory.path, developmentFormat: developmentFormat)
        for readOnly in [false, true] {
            let error = try #require(throws: TributaryError.self) {
                try Replica.open(
                    directory: directory.path, schema: Fixtures.chatSchema,
                    configuration: Self.configuration(readOnly: readOnly)
                )
                .close()
            }
            #expect(error.code == .developmentFormat)
            #expect(error.message.contains("development format \(developmentFormat)"), "\(error.message)")
            #expect(error.message.contains("tributary-log replay \(directory.path) --out"), "\(error.message)")
        }
        // The refusal changed nothing: the release key is still absent.
        let environment = try Environment.open(path: directory.path)
        defer { environment.close() }
        let identity = try environment.openDatabases([Replica.identityDatabase])[0]
        #expect(try environment.read { try $0.get(identity, key: ReplicaFormat.key) } == nil)
    }

    @Test("a development build's replica is rebuilt from its log into a new directory, every object kept")
    func developmentBuildIsRebuiltFromItsLog() throws {
        let directory = TemporaryDirectory("format-rebuild")
        try Self.makeReplica(directory.path)
        let (digest, objects, originalID) = try {
            let replica = try Replica.open(directory: directory.path, configuration: Self.configuration(readOnly: true))
            defer { replica.close() }
            return (try replica.recordsDigest(), try replica.objects("User"), replica.replicaID)
        }()
        try StoredFormat.markAsDevelopmentBuild(directory.path)

        let target = directory.appending("rebuilt")
        let rebuilt = try Replica.rebuild(fromLogOf: directory.path, into: target, configuration: Self.configuration())
        defer { rebuilt.close() }
        #expect(rebuilt.replicaID != originalID)
        #expect(rebuilt.lastLocalSequence == 3)
        #expect(try rebuilt.recordsDigest() == digest)
        #expect(try rebuilt.objects("User") == objects)
        #expect(try rebuilt.summary().formatVersion == Replica.formatVersion)
        #expect(try rebuilt.verify().passed)
        // It writes like any replica.
        try rebuilt.write { txn in try txn.create("User", ["_id": "u9", "name": "New"]) }
        #expect(try rebuilt.object("User", primaryKey: .string("u9")) != nil)

        // Part of the log only, and a directory that holds no replica.
        let partial = try Replica.rebuild(fromLogOf: directory.path, into: directory.appending("partial"), through: 1)
        #expect(partial.lastLocalSequence == 1)
        #expect(try partial.objects("User").isEmpty)
        partial.close()
        let empty = TemporaryDirectory("format-empty")
        let error = try #require(throws: TributaryError.self) {
            try Replica.rebuild(fromLogOf: empty.path, into: empty.appending("out")).close()
        }
        #expect(error.code == .notAReplica, "\(error)")
    }

    @Test("a replica of a later format is refused as newer, naming both formats")
    func newerFormatIsRefused() throws {
        let directory = TemporaryDirectory("format-newer")
        try Self.makeReplica(directory.path)
        try StoredFormat.setFormat(directory.path, ReplicaFormat.newest + 1)
        let error = try #require(throws: TributaryError.self) {
            try Replica.open(directory: directory.path, configuration: Self.configuration()).close()
        }
        #expect(error.code == .newerFormat)
        #expect(error.message.contains("replica format \(ReplicaFormat.newest + 1)"), "\(error.message)")
        #expect(error.message.contains("reads formats up to \(ReplicaFormat.newest)"), "\(error.message)")
    }

    @Test("upgrade steps chain from the stored format to the current one, and a gap is named")
    func stepsChain() {
        let noop: @Sendable (Replica, TributaryStorageWriteTransaction) throws -> Void = { _, _ in }
        let steps = [
            ReplicaFormat.Upgrade(from: 3, summary: "c", apply: noop),
            ReplicaFormat.Upgrade(from: 1, summary: "a", apply: noop),
            ReplicaFormat.Upgrade(from: 2, summary: "b", apply: noop),
        ]
        #expect(ReplicaFormat.steps(from: 1, to: 4, in: steps)?.map(\.summary) == ["a", "b", "c"])
        #expect(ReplicaFormat.steps(from: 2, to: 4, in: steps)?.map(\.summary) == ["b", "c"])
        #expect(ReplicaFormat.steps(from: 4, to: 4, in: steps)?.isEmpty == true)
        #expect(ReplicaFormat.steps(from: 0, to: 4, in: steps) == nil)
        #expect(ReplicaFormat.steps(from: 1, to: 5, in: steps) == nil)
        // No release wrote a format before 1, so none is registered.
        #expect(ReplicaFormat.upgrades.isEmpty)
    }

    static let marker = Array("upgradeMarker".utf8)

    /// A step from the format before the current one that stores a marker in the identity, then fails if told to.
    static func markingStep(fails: Bool) -> ReplicaFormat.Upgrade {
        ReplicaFormat.Upgrade(from: ReplicaFormat.current - 1, summary: "a marker stored") { replica, txn in
            try txn.put(replica.identity, key: Self.marker, value: [1])
            if fails { throw TributaryError(.storage, "the step failed after writing") }
        }
    }

    @Test("an upgrade runs its steps and records the format in one transaction; a failing step changes nothing")
    func upgradeIsAtomic() throws {
        let directory = TemporaryDirectory("format-upgrade")
        try Self.makeReplica(directory.path)
        let writer = try Replica.open(directory: directory.path, configuration: Self.configuration())
        defer { writer.close() }
        let reader = try Replica.open(directory: directory.path, configuration: Self.configuration(readOnly: true))
        defer { reader.close() }
        // The directory as a format before the current one left it (an open of it would run the registered steps).
        let earlier = ReplicaFormat.current - 1
        try writer.environment.write { txn in try txn.put(writer.identity, key: ReplicaFormat.key, value: [earlier]) }
        func stored() throws -> (format: UInt8, marker: [UInt8]?) {
            try writer.environment.read { txn in
                (try writer.storedFormat(in: txn), try txn.get(writer.identity, key: Self.marker))
            }
        }

        // Read-only, nothing is raised: the error says how.
        let readOnly = try #require(throws: TributaryError.self) {
            try reader.upgradeFormat(from: earlier, steps: [Self.markingStep(fails: false)])
        }
        #expect(readOnly.code == .readOnly)
        #expect(readOnly.message.contains("open it for writing once"), "\(readOnly.message)")
        #expect(try stored().format == earlier)

        let failed = try #require(throws: TributaryError.self) {
            try writer.upgradeFormat(from: earlier, steps: [Self.markingStep(fails: true)])
        }
        #expect(failed.message.contains("the step failed after writing"), "\(failed.message)")
        #expect(failed.message.contains("from replica format \(earlier)"), "\(failed.message)")
        #expect(try stored().format == earlier)
        #expect(try stored().marker == nil)

        try writer.upgradeFormat(from: earlier, steps: [Self.markingStep(fails: false)])
        #expect(try stored().format == ReplicaFormat.current)
        #expect(try stored().marker == [1])
        #expect(try writer.verify().passed)
        // Raised once: a second run finds the current format and runs no step.
        try writer.environment.write { txn in _ = try txn.delete(writer.identity, key: Self.marker) }
        try writer.upgradeFormat(from: earlier, steps: [Self.markingStep(fails: false)])
        #expect(try stored().marker == nil)

        // Without a step for it, a format no release wrote is named as damage.
        let gap = try #require(throws: TributaryError.self) { try writer.upgradeFormat(from: earlier, steps: []) }
        #expect(gap.code == .notAReplica)
    }
}
