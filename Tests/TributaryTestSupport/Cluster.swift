public import Tributary
public import TributaryModel

/// Several replicas in one process, each in its own directory with its own manual clock, and helpers to sync them.
public final class Cluster {
    public let directory = TemporaryDirectory("cluster")
    public private(set) var replicas: [Replica] = []
    public let clocks: [ManualClock]
    public let schema: Schema

    /// Opens `count` replicas with ids `firstReplicaID`, `firstReplicaID + 1`... (so ties between equal clock readings
    /// are predictable) and clocks at `1_700_000_000_000 + index` milliseconds. Give two clusters in one test different
    /// first ids, so that their replicas are different replicas.
    public init(_ count: Int, schema: Schema, durability: Replica.Durability = .none, firstReplicaID: UInt64 = 1) throws
    {
        self.schema = schema
        clocks = (0..<count).map { ManualClock(milliseconds: 1_700_000_000_000 + UInt64($0)) }
        for index in 0..<count {
            var configuration = Replica.Configuration()
            configuration.durability = durability
            configuration.clock = clocks[index]
            configuration.replicaID = ReplicaID(rawValue: firstReplicaID + UInt64(index))
            replicas.append(
                try Replica.open(
                    directory: directory.appending("r\(index)"), schema: schema, configuration: configuration))
        }
    }

    public subscript(index: Int) -> Replica { replicas[index] }

    /// Sends everything `source` has that `target` lacks.
    @discardableResult
    public func send(from source: Int, to target: Int) throws -> IntegrationReport {
        let missing = try replicas[source].changesets(missingFrom: replicas[target].versionVector)
        return try replicas[target].integrate(missing)
    }

    /// Delivers in the order given: for each step, everything each of its sources has that its target lacks (so
    /// replicas can merge the same changesets in different orders). Returns the reasons of every refusal, in order.
    @discardableResult
    public func deliver(_ plan: [(target: Int, sources: [Int])]) throws -> [String] {
        var reasons: [String] = []
        for (target, sources) in plan {
            for source in sources { reasons += try send(from: source, to: target).rejected.map(\.reason) }
        }
        return reasons
    }

    /// Syncs every pair until nothing changes.
    public func syncAll() throws {
        for _ in 0..<replicas.count {
            for source in replicas.indices {
                for target in replicas.indices where source != target { try send(from: source, to: target) }
            }
        }
    }

    /// What each replica would still send another (its export for the other's vector, less what the other holds
    /// pending), as "source -> target: dots"; empty when every pair is in step. Every replica exports in full, as
    /// ``send(from:to:)`` does: not as an app uploads (`origins:`) or receives projections (`holds:`).
    public func unsent() throws -> [String] {
        var result: [String] = []
        for source in replicas.indices {
            for target in replicas.indices where source != target {
                let missing = try replicas[source].changesets(
                    missingFrom: replicas[target].versionVector, excluding: try replicas[target].pendingDots())
                if !missing.isEmpty { result.append("\(source) -> \(target): \(missing.map(\.causalDot))") }
            }
        }
        return result
    }

    /// Advances every clock.
    public func advanceClocks(byMilliseconds delta: UInt64) {
        for clock in clocks { clock.advance(byMilliseconds: delta) }
    }

    /// Whether every replica's views are byte-identical.
    public func converged() throws -> Bool { try Self.converged(replicas) }

    /// Whether the views of `replicas` (of any clusters) are byte-identical.
    public static func converged(_ replicas: [Replica]) throws -> Bool {
        let digests = try replicas.map { try $0.viewDigest() }
        return Set(digests).count == 1
    }
}

extension Cluster {
    /// Two releases that define one property differently (rule 8): replica 0 adds `Task.priority` as an `int?` and
    /// sets it to 3 on task `a`; replica 1, 5 ms later, adds it as a `string?` and sets `"high"` on task `b`. Nothing
    /// is sent. The schema has a `Task` type with a string `_id`, and tasks `a` and `b` exist on both replicas.
    public func definePriorityTwoWays() throws {
        try self[0].write { txn in
            try txn.emit(.addProperty(type: "Task", .scalar("priority", .int, optional: true)))
            try txn.update("Task", primaryKey: .string("a"), ["priority": 3])
        }
        advanceClocks(byMilliseconds: 5)
        try self[1].write { txn in
            try txn.emit(.addProperty(type: "Task", .scalar("priority", .string, optional: true)))
            try txn.update("Task", primaryKey: .string("b"), ["priority": "high"])
        }
    }
}
