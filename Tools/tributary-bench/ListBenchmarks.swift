import Foundation
import Tributary
import TributaryModel

/// Filling a list: one update that writes a whole list of strings into an empty list, then a peer integrating it.
/// Each is measured at two lengths, and the long fill's rate is compared with the short one's: a fill that costs the
/// same per element at any length scores 1; one whose cost per element grows with the list scores less (down to 0.1,
/// for lengths ten times apart, when that growth is all there is).
struct ListBenchmarks {
    let context: BenchContext

    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Doc", properties: [.scalar("_id", .int), Property("tags", .scalar(.string), list: true)])
        ])

    func run() throws {
        try runFill()
        try runReplaced()
    }

    func runFill() throws {
        guard context.wants("list_fill") else { return }
        let long = max(context.listElements, 10)
        let short = long / 10
        // A first fill warms the allocator and the code, so that neither length pays for it; then the best of three
        // at each length, alternated.
        _ = try fill(elements: short, run: 0)
        var shortRates = (local: 0.0, integrate: 0.0)
        var longRates = (local: 0.0, integrate: 0.0)
        for run in 1...3 {
            let shortRun = try fill(elements: short, run: run)
            let longRun = try fill(elements: long, run: run)
            shortRates = (max(shortRates.local, shortRun.local), max(shortRates.integrate, shortRun.integrate))
            longRates = (max(longRates.local, longRun.local), max(longRates.integrate, longRun.integrate))
        }
        Measurement(
            name: "list_fill_\(long)_elements_local", value: longRates.local, unit: "elements/s",
            baseline: "the same fill of \(short) elements (elements/s)", baselineValue: shortRates.local
        ).print()
        Measurement(
            name: "list_fill_\(long)_elements_integrate", value: longRates.integrate, unit: "elements/s",
            baseline: "the same fill of \(short) elements integrated (elements/s)", baselineValue: shortRates.integrate
        ).print()
    }

    /// Elements per second of a fill of `elements` strings, written locally and integrated by a peer.
    func fill(elements: Int, run: Int) throws -> (local: Double, integrate: Double) {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        configuration.replicaID = ReplicaID(rawValue: 11)
        let writer = try Replica.open(
            directory: context.path("list-fill-\(elements)-\(run)-writer"), schema: Self.schema,
            configuration: configuration)
        configuration.replicaID = ReplicaID(rawValue: 12)
        let peer = try Replica.open(
            directory: context.path("list-fill-\(elements)-\(run)-peer"), schema: Self.schema,
            configuration: configuration)
        try writer.write { txn in _ = try txn.create("Doc", ["_id": .int(1), "tags": .list([])]) }
        try peer.integrate(encoded: try writer.encodedChangesets(missingFrom: peer.versionVector, compressed: true))
        let values = Value.list((0..<elements).map { .string("tag \($0)") })
        let localSeconds = try time {
            try writer.write { txn in try txn.update("Doc", primaryKey: .int(1), ["tags": values]) }
        }
        let encoded = try writer.encodedChangesets(missingFrom: peer.versionVector, compressed: true)
        let integrateSeconds = try time { try peer.integrate(encoded: encoded) }
        let read = try peer.object("Doc", primaryKey: .int(1))?["tags"]
        precondition(read == values, "the list did not read back as written")
        let converged = try peer.inspection.recordsDigest() == writer.inspection.recordsDigest()
        precondition(converged, "the peer did not converge")
        return (Double(elements) / localSeconds, Double(elements) / integrateSeconds)
    }

    /// A list of 10 strings set whole 1,000 times (an app that saves a screen's tags by replacing the list), against
    /// the same 10 strings written once: the record's size, and reads of the object per second. What a replaced list
    /// keeps of its history shows in both.
    func runReplaced() throws {
        guard context.wants("list_replaced") else { return }
        let replacements = 1_000
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(
            directory: context.path("list-replaced"), schema: Self.schema, configuration: configuration)
        defer { replica.close() }
        let tags = Value.list((0..<10).map { .string("tag \($0)") })
        try replica.write { txn in
            _ = try txn.create("Doc", ["_id": .int(1), "tags": tags])
            _ = try txn.create("Doc", ["_id": .int(2), "tags": .list([])])
        }
        for round in 0..<replacements {
            let values = round == replacements - 1 ? tags : .list((0..<10).map { .string("tag \($0) \(round)") })
            try replica.write { txn in try txn.update("Doc", primaryKey: .int(2), ["tags": values]) }
        }
        let fresh = try replica._recordBytes(type: "Doc", primaryKey: .int(1))?.count ?? 0
        let replaced = try replica._recordBytes(type: "Doc", primaryKey: .int(2))?.count ?? 0
        let readBack = try replica.object("Doc", primaryKey: .int(2))?["tags"]
        precondition(readBack == tags, "the list did not read back as written")
        Measurement(
            name: "list_replaced_\(replacements)_times_record_bytes", value: Double(replaced), unit: "bytes",
            baseline: "the record of the same list written once (bytes)", baselineValue: Double(fresh),
            higherIsBetter: false
        ).print()
        // Reads of each object, alternated, best of three rounds.
        let reads = 2_000
        var rates = (fresh: 0.0, replaced: 0.0)
        for _ in 0..<3 {
            for key in [1, 2] {
                let seconds = try time {
                    for _ in 0..<reads { _ = try replica.object("Doc", primaryKey: .int(Int64(key))) }
                }
                if key == 1 {
                    rates.fresh = max(rates.fresh, Double(reads) / seconds)
                } else {
                    rates.replaced = max(rates.replaced, Double(reads) / seconds)
                }
            }
        }
        Measurement(
            name: "list_replaced_\(replacements)_times_reads", value: rates.replaced, unit: "reads/s",
            baseline: "reads of the same list written once (reads/s)", baselineValue: rates.fresh
        ).print()
    }
}
