import Foundation
import Testing
import Tributary
import TributaryLog
import TributaryModel
import TributaryStorage
import TributaryTestSupport

/// The log's origin index keeps a key only for a changeset that does not directly follow its origin's previous one in
/// the log; the others are found from the run of the key before them. Checked against a model that lists every entry,
/// over logs of several origins written in random interleavings (runs of every length), with relay adoptions (whose
/// relay dots share the relay's sequence space with its own changesets) and adopted copies of changesets already
/// held, and against logs written before (a key for every changeset).
@Suite("The log's origin index, one key per run")
struct OriginIndexTests {
    static let origins = (1...4).map { ReplicaID(rawValue: UInt64($0)) }
    static let relay = ReplicaID(rawValue: 9)

    struct Model {
        /// dot -> local sequence of its first entry
        var first: [Dot: UInt64] = [:]
        /// relay dot -> local sequence
        var relayDots: [Dot: UInt64] = [:]
        var next: [ReplicaID: UInt64] = [:]
        var written: [Changeset] = []
    }

    static func changeset(_ origin: ReplicaID, _ sequence: UInt64, relay: Dot? = nil) -> Changeset {
        Changeset(
            origin: origin, originSequence: sequence, time: HybridTime(milliseconds: 1_700_000_000_000 + sequence),
            context: VersionVector(), schemaVersion: 1,
            instructions: [.create(type: "T", primaryKey: .int(Int64(sequence)), fields: [], defaults: [])], relay: relay)
    }

    /// Writes `count` changesets in random runs; `everyKey` writes a key for each (as format 1 did).
    static func write(
        count: Int, seed: UInt64, everyKey: Bool = false, in environment: Environment, log: ChangesetLog
    ) throws -> Model {
        var generator = SplitMix64(seed: seed)
        var model = Model()
        var head = LogHead()
        var relaySequence: UInt64 = 0
        var origin = origins[0]
        while model.written.count < count {
            if generator.next() % 3 == 0 { origin = (origins + [relay])[Int(generator.next() % 5)] }
            let run = 1 + Int(generator.next() % 6)
            try environment.write { txn in
                for _ in 0..<run {
                    let local = head.localSequence + 1
                    let changeset: Changeset
                    switch generator.next() % 8 {
                    case 0 where origin != relay:
                        // A relay adopts a changeset, under the relay's next sequence.
                        relaySequence += 1
                        let sequence = model.next[origin, default: 0] + 1
                        model.next[origin] = sequence
                        changeset = Self.changeset(origin, sequence, relay: Dot(origin: relay, sequence: relaySequence))
                        model.relayDots[Dot(origin: relay, sequence: relaySequence)] = local
                    case 1 where !model.written.isEmpty:
                        // An adopted copy of a changeset held already: its first entry stays its entry.
                        let held = model.written[Int(generator.next() % UInt64(model.written.count))]
                        relaySequence += 1
                        changeset = Self.changeset(held.origin, held.originSequence, relay: Dot(origin: relay, sequence: relaySequence))
                        model.relayDots[Dot(origin: relay, sequence: relaySequence)] = local
                    default:
                        let sequence: UInt64
                        if origin == relay {
                            relaySequence += 1
                            sequence = relaySequence
                        } else {
                            sequence = model.next[origin, default: 0] + 1
                            model.next[origin] = sequence
                        }
                        changeset = Self.changeset(origin, sequence)
                    }
                    if model.first[changeset.dot] == nil { model.first[changeset.dot] = local }
                    try log.append(changeset, after: &head, in: txn)
                    if everyKey, model.first[changeset.dot] == local {
                        try txn.put(log.origins, key: ChangesetLog.originKey(changeset.dot), value: ChangesetLog.key(local))
                    }
                    model.written.append(changeset)
                }
            }
        }
        return model
    }

    static func check(_ model: Model, in environment: Environment, log: ChangesetLog, everyKey: Bool) throws {
        try environment.read { txn in
            var expected = model.first
            for (dot, local) in model.relayDots { expected[dot] = local }
            for (dot, local) in expected {
                #expect(try log.localSequence(of: dot, in: txn) == local, "\(dot)")
            }
            // Dots never written: past each origin's last, and sequence 0.
            for origin in origins + [relay] {
                let last = expected.keys.filter { $0.origin == origin }.map(\.sequence).max() ?? 0
                for sequence in [0, last + 1, last + 2, UInt64.max] {
                    #expect(try log.localSequence(of: Dot(origin: origin, sequence: sequence), in: txn) == nil)
                }
            }
            // What a peer that has each origin up to `after` lacks.
            var generator = SplitMix64(seed: UInt64(expected.count))
            for origin in origins + [relay] {
                let dots = expected.filter { $0.key.origin == origin }.sorted { $0.key.sequence < $1.key.sequence }
                for after in [0, 1, UInt64.max] + (0..<12).map({ _ in generator.next() % UInt64(dots.count + 2) }) {
                    let listed = try log.originEntries(from: origin, after: after, in: txn)
                    let wanted = dots.filter { $0.key.sequence > after }
                    #expect(listed.map(\.dot) == wanted.map(\.key), "\(origin) after \(after)")
                    #expect(listed.map(\.localSequence) == wanted.map(\.value), "\(origin) after \(after)")
                }
            }
            let keys = try log.originCount(in: txn)
            if everyKey {
                #expect(keys == expected.count)
            } else {
                // Runs share keys: far fewer keys than dots.
                #expect(keys < expected.count * 2 / 3, "\(keys) keys for \(expected.count) dots")
            }
        }
    }

    @Test("Every dot is found at its first entry, and every run is listed whole", arguments: [1, 2, 3])
    func runs(seed: UInt64) throws {
        let directory = TemporaryDirectory()
        var configuration = Environment.Configuration()
        configuration.durability = .noSync
        let environment = try Environment.open(path: directory.path, configuration: configuration)
        let log = try ChangesetLog(environment: environment)
        let model = try Self.write(count: 600, seed: seed, in: environment, log: log)
        try Self.check(model, in: environment, log: log, everyKey: false)
    }

    @Test("A log with a key for every changeset (replica format 1) reads the same")
    func everyKey() throws {
        let directory = TemporaryDirectory()
        var configuration = Environment.Configuration()
        configuration.durability = .noSync
        let environment = try Environment.open(path: directory.path, configuration: configuration)
        let log = try ChangesetLog(environment: environment)
        let model = try Self.write(count: 300, seed: 4, everyKey: true, in: environment, log: log)
        try Self.check(model, in: environment, log: log, everyKey: true)
    }
}

/// A replica of format 1 (a key for every changeset in the origin index) opened for writing is raised to format 2,
/// which a build that reads format 1 only refuses; opened read-only, it stays as it was. Either way it reads and
/// exports as before, and the changesets written after the upgrade are found too.
@Suite("Raising a replica of format 1 to format 2")
struct ReplicaFormatUpgradeTests {
    @Test func upgradeOnOpenForWriting() throws {
        let directory = TemporaryDirectory()
        let schema = MergeSemanticsTests.schema
        var configuration = Replica.Configuration()
        configuration.durability = .none
        do {
            let replica = try Replica.open(directory: directory.path, schema: schema, configuration: configuration)
            for index in 0..<5 { try replica.write { _ = try $0.create("Task", ["_id": .string("a\(index)")]) } }
            replica.close()
        }
        // Format 1, as a replica written before this release says.
        do {
            let environment = try Environment.open(path: directory.path)
            let identity = try environment.openDatabases(["replica"])[0]
            try environment.write { try $0.put(identity, key: Array("format".utf8), value: [1]) }
        }
        var readOnly = configuration
        readOnly.readOnly = true
        do {
            let replica = try Replica.open(directory: directory.path, schema: schema, configuration: readOnly)
            #expect(try replica.summary().formatVersion == 1)
            replica.close()
        }
        let replica = try Replica.open(directory: directory.path, schema: schema, configuration: configuration)
        defer { replica.close() }
        #expect(try replica.summary().formatVersion == Replica.formatVersion)
        #expect(Replica.formatVersion == 2)
        for index in 5..<10 { try replica.write { _ = try $0.create("Task", ["_id": .string("a\(index)")]) } }
        let exported = try replica.changesets(missingFrom: VersionVector())
        // The first changeset declares the schema; then ten creates.
        #expect(exported.filter { $0.origin == replica.replicaID }.map(\.originSequence) == Array(1...11))
        #expect(try replica.verify().passed)
    }
}
