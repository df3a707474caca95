import Foundation
import Testing
import TributaryLog
import TributaryMerge
import TributaryModel
import TributaryStorage
import TributaryTestSupport
import TributaryViews

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

    @Test("a new replica records format 4 under the release key, and reopens")
    func newReplicaRecordsTheCurrentFormat() throws {
        #expect(Replica.formatVersion == 4)
        let directory = TemporaryDirectory("format-new")
        try Self.makeReplica(directory.path)
        let replica = try Replica.open(directory: directory.path, configuration: Self.configuration(readOnly: true))
        defer { replica.close() }
        #expect(try replica.summary().formatVersion == 4)
        let stored = try replica.environment.read { txn in
            (
                try txn.get(replica.identity, key: ReplicaFormat.key),
                try txn.get(replica.identity, key: ReplicaFormat.developmentKey)
            )
        }
        #expect(stored.0 == [4])
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
        // The registered steps raise every format a release wrote (1 on) to the current one.
        #expect(ReplicaFormat.steps(from: 1, to: ReplicaFormat.current, in: ReplicaFormat.upgrades)?.count == 3)
        #expect(ReplicaFormat.steps(from: 0, to: ReplicaFormat.current, in: ReplicaFormat.upgrades) == nil)
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

    /// `bytes`, a record whose list holds an element with the string value `marker`, as formats 1 and 2 stored it
    /// once that element was erased: the element kept, flagged 0 (no value), its stamps and position after.
    static func withErasedElementKept(_ bytes: [UInt8], marker: String) throws -> [UInt8] {
        let needle = Array(marker.utf8)
        let start = try #require(
            bytes.indices.first { bytes[$0...].starts(with: needle) }, "the record holds no element \(marker)")
        // Before the string: the element's flag (1), the stored-value tag (scalar, 0), the string tag, the length.
        try #require(start >= 4 && bytes[start - 4] == 1 && bytes[start - 3] == 0 && bytes[start - 1] == needle.count)
        return Array(bytes[..<(start - 4)]) + [0] + Array(bytes[(start + needle.count)...])
    }

    /// The key and bytes of the one record in `database` that holds `marker`.
    static func record(holding marker: String, in database: Database, of replica: Replica) throws -> (
        key: [UInt8], bytes: [UInt8]
    ) {
        let needle = Array(marker.utf8)
        var found: [([UInt8], [UInt8])] = []
        try replica.environment.read { txn in
            try txn.scan(database) { key, value in
                let bytes = Array(value)
                if bytes.indices.contains(where: { bytes[$0...].starts(with: needle) }) {
                    found.append((Array(key), bytes))
                }
                return true
            }
        }
        try #require(found.count == 1, "\(found.count) records hold \(marker)")
        return found[0]
    }

    @Test(
        "a replica of format 1 or 2 whose records keep erased list elements is raised to the current format at its first open for writing: the records are rewritten without them, in the views and in the base state, and verify passes",
        arguments: [false, true])
    func erasedListElementsAreDroppedByTheUpgrade(compacted: Bool) throws {
        let directory = TemporaryDirectory("format-erased-elements")
        let marker = "erased-element-marker"
        var legacy: (key: [UInt8], bytes: [UInt8]) = ([], [])
        var current: [UInt8] = []
        var baseLegacy: (key: [UInt8], bytes: [UInt8])?
        do {
            let replica = try Replica.open(
                directory: directory.path, schema: Fixtures.chatSchema, configuration: Self.configuration())
            defer { replica.close() }
            try replica.write { txn in
                try txn.create("User", ["_id": "u1", "name": "One", "tags": .list(["kept", .string(marker)])])
                try txn.create("User", ["_id": "u2", "name": "Two"])
            }
            let live = try Self.record(holding: marker, in: replica.views.objects, of: replica)
            try replica.write { txn in
                try txn.removeElement(at: 1, from: ["tags"], of: "User", primaryKey: .string("u1"))
            }
            current = try #require(try replica._recordBytes(type: "User", primaryKey: .string("u1")))
            legacy = (live.key, try Self.withErasedElementKept(live.bytes, marker: marker))
            // The erased element kept as formats 1 and 2 did reads as the record written today, and takes more bytes.
            #expect(try ObjectRecord(decoding: legacy.bytes) == ObjectRecord(decoding: current))
            #expect(legacy.bytes.count > current.count)
            #expect(legacy.bytes != current)
            if compacted {
                try replica.write { txn in try txn.update("User", primaryKey: .string("u2"), ["name": "Two again"]) }
                _ = try #require(try replica.compact(through: replica.lastLocalSequence - 1))
                let base = try #require(try replica.baseDatabase())
                let inBase = try Self.record(holding: "kept", in: base, of: replica)
                #expect(inBase.bytes == current)
                baseLegacy = (inBase.key, legacy.bytes)
            }
            try replica.environment.write { txn in
                try txn.put(replica.views.objects, key: legacy.key, value: legacy.bytes)
                if let baseLegacy, let base = try replica.baseDatabase() {
                    try txn.put(base, key: baseLegacy.key, value: baseLegacy.bytes)
                }
            }
        }
        let earlier: UInt8 = compacted ? 2 : 1
        try StoredFormat.setFormat(directory.path, earlier)

        // Read-only, it is refused with the way to raise it.
        let readOnly = try #require(throws: TributaryError.self) {
            try Replica.open(directory: directory.path, configuration: Self.configuration(readOnly: true)).close()
        }
        #expect(readOnly.code == .readOnly)
        #expect(readOnly.message.contains("erased list elements are dropped"), "\(readOnly.message)")

        let replica = try Replica.open(directory: directory.path, configuration: Self.configuration())
        defer { replica.close() }
        #expect(try replica.summary().formatVersion == ReplicaFormat.current)
        #expect(try replica._recordBytes(type: "User", primaryKey: .string("u1")) == current)
        if let baseLegacy, let base = try replica.baseDatabase() {
            #expect(try replica.environment.read { txn in try txn.get(base, key: baseLegacy.key) } == current)
        }
        #expect(try replica.object("User", primaryKey: .string("u1"))?["tags"] == .list(["kept"]))
        let report = try replica.verify()
        #expect(report.passed, "\(report)")
    }

    /// The version vector `replica` stores, and the one it holds (the stored one with the log's last entry).
    static func vectors(of replica: Replica) throws -> (stored: VersionVector, held: VersionVector) {
        try replica.environment.read { txn in
            (try replica.views.storedVersionVector(in: txn).vector, try replica.versionVector(in: txn))
        }
    }

    @Test(
        "a local commit leaves the stored version vector alone; the replica counts it from the log's last entry, after reopening too, and the next commit takes the next dot"
    )
    func localCommitsLeaveTheStoredVectorAlone() throws {
        let directory = TemporaryDirectory("format-vector-local")
        try Self.makeReplica(directory.path)
        var replica = try Replica.open(directory: directory.path, configuration: Self.configuration())
        let me = replica.replicaID
        // The first commit declared the schema (its own dot only); none since stored the vector.
        var vectors = try Self.vectors(of: replica)
        #expect(vectors.stored[me] == 0)
        #expect(vectors.held[me] == 3)
        #expect(replica.versionVector[me] == 3)
        replica.close()

        replica = try Replica.open(directory: directory.path, configuration: Self.configuration())
        defer { replica.close() }
        #expect(replica.versionVector[me] == 3)
        try replica.write { txn in try txn.create("User", ["_id": "u7", "name": "Seven"]) }
        vectors = try Self.vectors(of: replica)
        #expect(vectors.stored[me] == 0)
        #expect(vectors.held[me] == 4)
        let last = try replica.environment.read { txn in try replica.log.entry(replica.lastLocalSequence, in: txn) }
        #expect(last.dot == Dot(origin: me, sequence: 4))
        #expect(try replica.verify().passed)
    }

    @Test(
        "a commit that integrates another replica's changesets stores the whole vector; local commits after it leave it alone"
    )
    func integrationStoresTheWholeVector() throws {
        let directory = TemporaryDirectory("format-vector-integrate")
        let first = try Replica.open(
            directory: directory.appending("a"), schema: Fixtures.chatSchema, configuration: Self.configuration())
        defer { first.close() }
        let second = try Replica.open(
            directory: directory.appending("b"), schema: Fixtures.chatSchema, configuration: Self.configuration())
        defer { second.close() }
        try first.write { txn in try txn.create("User", ["_id": "a1", "name": "A"]) }
        try second.write { txn in try txn.create("User", ["_id": "b1", "name": "B"]) }
        try second.write { txn in try txn.create("User", ["_id": "b2", "name": "B2"]) }
        let report = try first.integrate(encoded: try second.export(missingFrom: first.versionVector).changesets)
        #expect(report.integrated.count == 3)
        var vectors = try Self.vectors(of: first)
        #expect(vectors.stored == first.versionVector)
        #expect(vectors.held == first.versionVector)
        #expect(vectors.stored[second.replicaID] == 3)

        try first.write { txn in try txn.create("User", ["_id": "a2", "name": "A2"]) }
        vectors = try Self.vectors(of: first)
        #expect(vectors.stored[first.replicaID] == 2)
        #expect(vectors.held[first.replicaID] == 3)
        #expect(vectors.held[second.replicaID] == 3)
        #expect(vectors.held == first.versionVector)
        #expect(try first.verify().passed)
    }

    @Test("a log compacted through its last entry keeps that entry's dot in the stored vector")
    func compactionThroughTheLastEntryStoresTheVector() throws {
        let directory = TemporaryDirectory("format-vector-compact")
        try Self.makeReplica(directory.path)
        let replica = try Replica.open(directory: directory.path, configuration: Self.configuration())
        defer { replica.close() }
        let me = replica.replicaID
        #expect(try Self.vectors(of: replica).stored[me] == 0)
        _ = try #require(try replica.compact(through: replica.lastLocalSequence, includingLastEntry: true))
        #expect(try replica.environment.read { txn in try replica.log.lastDot(in: txn) } == nil)
        let vectors = try Self.vectors(of: replica)
        #expect(vectors.stored[me] == 3)
        #expect(vectors.held == vectors.stored)
    }

    @Test(
        "a replica of format 3, which stored the whole vector with every commit, is read as it is read-only and raised to 4 with its vector as it was for writing"
    )
    func formatThreeIsRaisedWithItsVector() throws {
        let directory = TemporaryDirectory("format-vector-three")
        try Self.makeReplica(directory.path)
        let expected = try {
            let replica = try Replica.open(directory: directory.path, configuration: Self.configuration())
            defer { replica.close() }
            // As format 3 left it: the vector stored whole by the last commit, without the entry it is whole through.
            try replica.environment.write { txn in
                try txn.put(
                    replica.views.meta, key: ViewStore.versionVectorKey,
                    value: ViewStore.encode(try replica.versionVector(in: txn)))
            }
            return replica.versionVector
        }()
        try StoredFormat.setFormat(directory.path, 3)
        // Read-only, it is read as it is (the raise rewrites nothing), and left in format 3.
        do {
            let reader = try Replica.open(directory: directory.path, configuration: Self.configuration(readOnly: true))
            defer { reader.close() }
            #expect(reader.versionVector == expected)
            #expect(try reader.environment.read { try reader.storedFormat(in: $0) } == 3)
        }

        let replica = try Replica.open(directory: directory.path, configuration: Self.configuration())
        defer { replica.close() }
        #expect(try replica.summary().formatVersion == 4)
        #expect(replica.versionVector == expected)
        try replica.write { txn in try txn.create("User", ["_id": "u8", "name": "Eight"]) }
        #expect(replica.versionVector[replica.replicaID] == expected[replica.replicaID] + 1)
        // That first commit stored the vector again, with its entry; the next one leaves it alone.
        #expect(try Self.vectors(of: replica).stored == replica.versionVector)
        // Stored so that an earlier build's reading of it (a process that opened the replica before the raise) fails
        // rather than reading the vector without the entries after it.
        let bytes = try #require(
            try replica.environment.read { try $0.get(replica.views.meta, key: ViewStore.versionVectorKey) })
        #expect(throws: ChangesetDecodingError.self) { try ViewStore.decodeVector(bytes, subject: "vector") }
        try replica.write { txn in try txn.create("User", ["_id": "u9", "name": "Nine"]) }
        #expect(try Self.vectors(of: replica).stored[replica.replicaID] == expected[replica.replicaID] + 1)
        #expect(replica.versionVector[replica.replicaID] == expected[replica.replicaID] + 2)
        #expect(try replica.verify().passed)
    }
}
