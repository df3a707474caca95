import Foundation
import Synchronization
import Tributary
import TributaryModel

/// A deterministic simulation of N replicas that write concurrently through a faulty network, then heal and
/// exchange everything; afterwards every replica must hold the same state, equal to what an oracle and a reference
/// model of the merge rules compute, and each replica's views equal a replay of its own log.
public struct SimulationConfiguration: Sendable {
    public var seed: UInt64
    /// Replicas, 3 to 7.
    public var replicas = 5
    /// Write transactions, across all replicas.
    public var operations = 10_000
    /// How many of the replicas are partial (hold every other key), each an app syncing through replicas 0 and 1, its
    /// relays; `nil` for two (one with three replicas). Two apps that upload to both relays are what makes relays
    /// adopt changesets in different orders, a pattern one app cannot make (it found a peer that stalled for good).
    public var partialReplicas: Int?
    /// ``partialReplicas``, or its default.
    public var partialCount: Int { partialReplicas ?? min(2, replicas - 2) }
    /// Whether the first app also syncs directly with replica 2, a full replica that is not a relay, as a peer: it
    /// sends it its own changesets as it wrote them (not adopted) and receives projections. Its changesets then reach
    /// replicas both as written and through the relays' copies, and contexts name them by either dot. Needs replica 2
    /// to be full (at least three full replicas); ignored otherwise.
    public var appPeerLink = false
    /// Random causal orders the oracle replays the changesets in.
    public var oracleOrders = 3
    /// Where replica directories go; a fresh subdirectory per run.
    public var directory: String

    public init(seed: UInt64, directory: String) {
        self.seed = seed
        self.directory = directory
    }
}

/// The outcome of one run.
public struct SimulationResult: Sendable {
    public var seed: UInt64
    public var failures: [String]
    public var operations = 0
    public var deliveries = 0
    public var duplicates = 0
    public var crashes = 0
    public var changesets = 0
    /// Changesets of the app replicas that both relays adopted.
    public var adoptedTwice = 0
    /// Compactions of full replicas' logs (``Simulation/compact(_:)``).
    public var compactions = 0
    public var seconds = 0.0

    public init(seed: UInt64, failures: [String]) {
        self.seed = seed
        self.failures = failures
    }

    public var passed: Bool { failures.isEmpty }
}

public final class Simulation {
    let configuration: SimulationConfiguration
    var random: SplitMix64
    var replicas: [Replica] = []
    var clocks: [SimulationClock] = []
    var generators: [OperationGenerator] = []
    var journal = WriteJournal()
    let root: String
    /// In-flight messages per directed link (source, target): batches of changesets.
    var links: [Link] = []
    var result: SimulationResult

    struct Link {
        var source: Int
        var target: Int
        var up = true
        var queue: [[Changeset]] = []
    }

    public init(_ configuration: SimulationConfiguration) {
        self.configuration = configuration
        random = SplitMix64(seed: configuration.seed)
        root = (configuration.directory as NSString).appendingPathComponent("seed-\(configuration.seed)")
        result = SimulationResult(seed: configuration.seed, failures: [])
    }

    var replicaCount: Int { max(3, min(7, configuration.replicas)) }
    /// The full replicas that partial ones sync through.
    static let relays = [0, 1]
    func isPartial(_ index: Int) -> Bool { index >= replicaCount - configuration.partialCount && index > 1 }
    /// The full replica that the linked app syncs with directly (``SimulationConfiguration/appPeerLink``).
    static let linkedPeer = 2
    /// The app that also syncs with ``linkedPeer`` as a peer, if the configuration asks for one and allows it.
    var linkedApp: Int? {
        guard configuration.appPeerLink, !isPartial(Self.linkedPeer) else { return nil }
        return (0..<replicaCount).first(where: isPartial)
    }

    func next(_ bound: Int) -> Int { Int(random.next() % UInt64(max(bound, 1))) }
    func chance(_ percent: Double) -> Bool { Double(random.next() % 1_000_000) < percent * 10_000 }

    func replicaConfiguration(_ index: Int) -> Replica.Configuration {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.clock = clocks[index]
        configuration.replicaID = ReplicaID(rawValue: UInt64(index + 1) << 32 | (self.configuration.seed & 0xFFFF_FFFF))
        configuration.maximumClockSkew = .seconds(30 * 60)
        configuration.initialSizeBytes = 1 << 20
        return configuration
    }

    func open(_ index: Int) throws -> Replica {
        try Replica.open(
            directory: (root as NSString).appendingPathComponent("r\(index)"), schema: Workload.schema,
            configuration: replicaConfiguration(index))
    }

    /// Runs the simulation and its checks. Never throws for a divergence: failures are in the result.
    public func run() throws -> SimulationResult {
        let started = Date()
        try? FileManager.default.removeItem(atPath: root)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }

        // Clocks: within ±10 minutes of each other, and one replica two hours ahead (rule 9).
        let base: UInt64 = 1_700_000_000_000
        for index in 0..<replicaCount {
            var offset = Int64(next(20 * 60_000)) - 10 * 60_000
            if index == 1 { offset = 2 * 3_600_000 }
            clocks.append(SimulationClock(milliseconds: UInt64(Int64(base) + offset)))
            generators.append(OperationGenerator(seed: random.next(), replicaIndex: index, partial: isPartial(index)))
        }
        for index in 0..<replicaCount { replicas.append(try open(index)) }
        for source in 0..<replicaCount {
            for target in 0..<replicaCount where source != target {
                // Partial replicas talk to their relays only, replicas 0 and 1: one that uploads to both before it
                // hears of either adoption has its changeset adopted twice. The linked app talks to its peer too.
                if isPartial(source) || isPartial(target) {
                    let (app, other) = isPartial(source) ? (source, target) : (target, source)
                    let linked = linkedApp == app && other == Self.linkedPeer
                    guard Self.relays.contains(other) || linked, !isPartial(other) else { continue }
                }
                links.append(Link(source: source, target: target))
            }
        }

        for _ in 0..<configuration.operations { try step() }
        try heal()
        try check()
        result.seconds = Date().timeIntervalSince(started)
        for replica in replicas { replica.close() }
        return result
    }

    func step() throws {
        for clock in clocks { clock.advance(byMilliseconds: UInt64(1 + next(50))) }
        // Faults.
        if chance(2), !links.isEmpty { links[next(links.count)].up.toggle() }
        if chance(1) { try swizzleClog() }
        if chance(0.5) { try crash(next(replicaCount)) }
        if chance(1.5) { try compact(1 + next(2)) }
        // A write on a random replica.
        let index = next(replicaCount)
        var journal = self.journal
        try replicas[index].write { txn in
            for _ in 0..<(1 + next(3)) { try generators[index].perform(txn, journal: &journal) }
        }
        self.journal = journal
        result.operations += 1
        // Sends and deliveries.
        if chance(30) { try send(on: next(links.count)) }
        if chance(50) { try deliver() }
    }

    /// FoundationDB's swizzle-clog: take a random subset of links down one by one, then bring them back in a
    /// random order.
    func swizzleClog() throws {
        var chosen = (0..<links.count).filter { _ in next(3) == 0 }
        for index in chosen { links[index].up = false }
        for _ in 0..<(1 + next(20)) { try deliver() }
        while !chosen.isEmpty {
            let pick = next(chosen.count)
            links[chosen.remove(at: pick)].up = true
        }
    }

    func crash(_ index: Int) throws {
        replicas[index].close()
        replicas[index] = try open(index)
        result.crashes += 1
    }

    /// Replaces the start of full replica `index`'s log with a base state, as far as every replica it sends to
    /// holds (each is within its retention window: the simulation never resets one). Replica 0 keeps its whole log:
    /// the checks replay it.
    func compact(_ index: Int) throws {
        guard index > 0, index < replicaCount, !isPartial(index) else { return }
        var stable = replicas[index].versionVector
        for link in links where link.source == index {
            let other = replicas[link.target].versionVector
            var meet = VersionVector()
            for entry in stable.entries { meet.advance(entry.replica, to: min(entry.sequence, other[entry.replica])) }
            stable = meet
        }
        let cut = try replicas[index].compactionCut(coveredBy: stable)
        if try replicas[index].compact(through: cut, recordsInMemory: 1 + next(64)) != nil { result.compactions += 1 }
    }

    /// Queues on a link what its source has that its target lacks (as of now).
    func send(on linkIndex: Int) throws {
        let batch = try unsent(on: linkIndex)
        guard !batch.isEmpty else { return }
        // Split into a few messages, which may then be delivered in any order.
        var start = 0
        while start < batch.count {
            let size = 1 + next(batch.count - start)
            links[linkIndex].queue.append(Array(batch[start..<start + size]))
            start += size
        }
    }

    /// What the link's source has that its target lacks, as a sync protocol would send it (as of now).
    func unsent(on linkIndex: Int) throws -> [Changeset] {
        let link = links[linkIndex]
        let source = replicas[link.source]
        let target = replicas[link.target]
        // Neither what the target holds pending (its vector does not count it) nor what is still queued on this link
        // is sent again, as a sync protocol would not; duplicates still come from messages delivered twice and from
        // one changeset sent to a target by several sources.
        var held = try target.pendingDots()
        for message in link.queue { for changeset in message { held.insert(changeset.causalDot) } }
        if isPartial(link.source) {
            return try source.changesets(
                missingFrom: target.versionVector, origins: [source.replicaID], excluding: held)
        } else if isPartial(link.target) {
            return try source.changesets(
                missingFrom: target.versionVector, holds: Workload.partialHolds, excluding: held)
        } else {
            return try source.changesets(missingFrom: target.versionVector, excluding: held)
        }
    }

    /// Integrates a message at the link's target. What a partial (app) replica uploads, its relay adopts; the linked
    /// app's peer integrates it as written.
    @discardableResult
    func integrate(_ message: [Changeset], on linkIndex: Int) throws -> IntegrationReport {
        let link = links[linkIndex]
        if isPartial(link.source) && Self.relays.contains(link.target) {
            return try replicas[link.target].adopt(message)
        }
        return try replicas[link.target].integrate(message)
    }

    /// Delivers one random message from a random link that is up; sometimes delivers it twice.
    func deliver() throws {
        let ready = links.indices.filter { links[$0].up && !links[$0].queue.isEmpty }
        guard !ready.isEmpty else { return }
        let linkIndex = ready[next(ready.count)]
        let message = links[linkIndex].queue.remove(at: next(links[linkIndex].queue.count))
        try integrate(message, on: linkIndex)
        result.deliveries += 1
        if chance(1) {
            links[linkIndex].queue.append(message)
            result.duplicates += 1
        }
    }

    /// Heals every link, lets every clock pass the skewed replica's, and exchanges everything until quiet.
    func heal() throws {
        for index in links.indices { links[index].up = true }
        for clock in clocks { clock.advance(byMilliseconds: 3 * 3_600_000) }
        // What waited for the clocks (rule 9) is ready now, though nothing new may arrive: a sync layer's timer.
        for replica in replicas { try replica.integratePending() }
        while links.contains(where: { !$0.queue.isEmpty }) { try deliver() }
        var rounds = 0
        while true {
            rounds += 1
            var changed = false
            for index in links.indices {
                try send(on: index)
                while !links[index].queue.isEmpty {
                    let message = links[index].queue.removeFirst()
                    let report = try integrate(message, on: index)
                    if !report.integrated.isEmpty { changed = true }
                    if !report.rejected.isEmpty {
                        result.failures.append("replica \(links[index].target) rejected changesets: \(report.rejected)")
                    }
                }
            }
            if !changed { break }
            if rounds > 50 {
                result.failures.append("exchange did not become quiet after 50 rounds")
                break
            }
        }
    }
}

/// A wall clock the simulation moves.
final class SimulationClock: WallClock {
    private let now: Mutex<UInt64>
    init(milliseconds: UInt64) { now = Mutex(milliseconds) }
    func milliseconds() -> UInt64 { now.withLock { $0 } }
    func advance(byMilliseconds delta: UInt64) { now.withLock { $0 += delta } }
}
