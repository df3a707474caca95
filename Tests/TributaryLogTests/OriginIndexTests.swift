import Foundation
import Testing
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
            instructions: [.create(type: "T", primaryKey: .int(Int64(sequence)), fields: [], defaults: [])],
            relay: relay)
    }

    /// Writes `count` changesets in random runs; `everyKey` writes a key for each.
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
                        changeset = Self.changeset(
                            held.origin, held.originSequence, relay: Dot(origin: relay, sequence: relaySequence))
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
                        try txn.put(
                            log.origins, key: ChangesetLog.originKey(changeset.dot), value: ChangesetLog.key(local))
                    }
                    model.written.append(changeset)
                }
            }
        }
        return model
    }

    static func check(_ model: Model, in environment: Environment, log: ChangesetLog, everyKey: Bool?) throws {
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
            if everyKey == true {
                #expect(keys == expected.count)
            } else if everyKey == false {
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

    static func open(_ directory: TemporaryDirectory) throws -> (Environment, ChangesetLog) {
        var configuration = Environment.Configuration()
        configuration.durability = .noSync
        let environment = try Environment.open(path: directory.path, configuration: configuration)
        return (environment, try ChangesetLog(environment: environment))
    }

    @Test("A log whose first half has a key for every changeset and whose second half does not")
    func denseThenSparse() throws {
        let directory = TemporaryDirectory()
        let (environment, log) = try Self.open(directory)
        let first = try Self.write(count: 200, seed: 5, everyKey: true, in: environment, log: log)
        // Continue the same origins' sequences, without the extra keys.
        var model = first
        let denseKeys = try environment.read { try log.originCount(in: $0) }
        var head = try environment.read { try log.head(in: $0) }
        var generator = SplitMix64(seed: 6)
        try environment.write { txn in
            for _ in 0..<200 {
                let origin = Self.origins[Int(generator.next() % 2)]
                let sequence = model.next[origin, default: 0] + 1
                model.next[origin] = sequence
                let changeset = Self.changeset(origin, sequence)
                model.first[changeset.dot] = head.localSequence + 1
                try log.append(changeset, after: &head, in: txn)
                model.written.append(changeset)
            }
        }
        try Self.check(model, in: environment, log: log, everyKey: nil)
        // Two origins in random alternation: about one key per two changesets.
        #expect(try environment.read { try log.originCount(in: $0) } - denseKeys < 150)
    }

    @Test("Gaps: a changeset that arrives after a later one of its origin, and counting that lands on another run")
    func gaps() throws {
        let directory = TemporaryDirectory()
        let (environment, log) = try Self.open(directory)
        let o = Self.origins[0]
        let x = Self.origins[1]
        let r = Self.relay
        var head = LogHead()
        // 1 (o,1), 2 (x,1), 3 (o,3), 4 (o,2), 5 (o,4): (o,4) follows (o,3) in sequence but not in the log.
        // 6 (r,1), 7 and 8 relay copies under (r,2) and (r,3) of (x,2) and (x,3), 9 (r,4): it follows the relay dot
        // (r,3) at entry 8.
        let changesets = [
            Self.changeset(o, 1), Self.changeset(x, 1), Self.changeset(o, 3), Self.changeset(o, 2),
            Self.changeset(o, 4),
            Self.changeset(r, 1), Self.changeset(x, 2, relay: Dot(origin: r, sequence: 2)),
            Self.changeset(x, 3, relay: Dot(origin: r, sequence: 3)), Self.changeset(r, 4),
        ]
        try environment.write { txn in for changeset in changesets { try log.append(changeset, after: &head, in: txn) }
        }
        try environment.read { txn throws in
            let expected: [(Dot, UInt64?)] = [
                (Dot(origin: o, sequence: 1), 1), (Dot(origin: o, sequence: 2), 4), (Dot(origin: o, sequence: 3), 3),
                (Dot(origin: o, sequence: 4), 5), (Dot(origin: o, sequence: 5), nil), (Dot(origin: x, sequence: 3), 8),
                (Dot(origin: r, sequence: 3), 8), (Dot(origin: r, sequence: 4), 9), (Dot(origin: r, sequence: 5), nil),
            ]
            for (dot, local) in expected { #expect(try log.localSequence(of: dot, in: txn) == local, "\(dot)") }
            #expect(try log.originEntries(from: o, after: 0, in: txn).map(\.localSequence) == [1, 4, 3, 5])
            #expect(try log.originEntries(from: o, after: 2, in: txn).map(\.localSequence) == [3, 5])
            #expect(try log.originEntries(from: r, after: 0, in: txn).map(\.localSequence) == [6, 7, 8, 9])
            #expect(try log.originEntries(from: r, after: 3, in: txn).map(\.localSequence) == [9])
        }
    }

    @Test("A log copied without its relay keys (as copies were before), continued: counting must not stand for a run")
    func copyWithoutRelayKeys() throws {
        let directory = TemporaryDirectory()
        let (environment, log) = try Self.open(directory)
        let a = Self.origins[0]
        let r = Self.relay
        var head = LogHead()
        // 1 (r,1), 2 (r,2), 3 and 4 relay copies under (r,3) and (r,4) of (a,1) and (a,2); then the relay keys are
        // dropped, as an old copy of the log lacks them; then 5 (r,5).
        try environment.write { txn in
            for changeset in [
                Self.changeset(r, 1), Self.changeset(r, 2), Self.changeset(a, 1, relay: Dot(origin: r, sequence: 3)),
                Self.changeset(a, 2, relay: Dot(origin: r, sequence: 4)),
            ] { try log.append(changeset, after: &head, in: txn) }
            for sequence: UInt64 in [3, 4] {
                try txn.delete(log.origins, key: ChangesetLog.originKey(Dot(origin: r, sequence: sequence)))
            }
            try log.append(Self.changeset(r, 5), after: &head, in: txn)
        }
        try environment.read { txn throws in
            #expect(try log.localSequence(of: Dot(origin: r, sequence: 5), in: txn) == 5)
            #expect(try log.originEntries(from: r, after: 4, in: txn).map(\.localSequence) == [5])
            #expect(try log.originEntries(from: r, after: 0, in: txn).map(\.localSequence) == [1, 2, 5])
        }
    }

    @Test("A damaged header inside a run is an error, not the run's end")
    func damagedHeaderInRun() throws {
        let directory = TemporaryDirectory()
        let (environment, log) = try Self.open(directory)
        let o = Self.origins[0]
        var head = LogHead()
        try environment.write { txn in
            for sequence in 1...20 { try log.append(Self.changeset(o, UInt64(sequence)), after: &head, in: txn) }
        }
        #expect(try environment.read { try log.originCount(in: $0) } == 1)
        // Entry 11 is the first one the search for the run's end reads.
        try environment.write { try $0.put(log.entries, key: ChangesetLog.key(11), value: [1, 2, 3]) }
        try environment.read { txn throws in
            #expect(throws: LogError.self) { try log.originEntries(from: o, after: 0, in: txn) }
            #expect(throws: LogError.self) { try log.localSequence(of: Dot(origin: o, sequence: 11), in: txn) }
            #expect(try log.localSequence(of: Dot(origin: o, sequence: 12), in: txn) == 12)
        }
    }

    @Test("A log with a key for every changeset reads the same")
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
