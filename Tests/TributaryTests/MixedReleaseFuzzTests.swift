import Foundation
import Testing
import TributaryModel
import TributaryTestSupport
import TributaryTestTags

@testable import Tributary

/// Three releases of one app, syncing while users update at random times. Release 2 renames `name` to `fullName`
/// and turns `age` into text (a migration step converts it); release 3 removes `nickname` and adds `email`. Each of
/// four devices starts on release 1 and, in a random order, writes through its release's models, syncs with another
/// device, restarts, or updates to the next release. Then every device syncs with every other, and:
///
/// - nothing any device did threw (an earlier release's models read and write whatever later ones changed);
/// - every device holds the same views, and passes `verify`;
/// - every device reads every person through its own release's models;
/// - nothing an earlier release did erased what a later one wrote or removed: every person release 3 gave an email
///   still has one, and once a device migrated to release 3, `nickname` stays removed.
///
/// `TRIBUTARY_SEED` sets the first seed, `TRIBUTARY_MIXED_RELEASE_SEEDS` the number of seeds (40).
@Suite("Mixed releases fuzz", .tags(.fuzz))
struct MixedReleaseFuzzTests {
    enum Release1 {
        struct Person: Model {
            static var typeName: String { "Person" }
            var _id: String
            var name: String
            var age: Int
            var nickname: String?
        }
    }

    enum Release2 {
        struct Person: Model {
            static var typeName: String { "Person" }
            var _id: String
            var fullName: String
            var age: String
            var nickname: String?
        }
    }

    enum Release3 {
        struct Person: Model {
            static var typeName: String { "Person" }
            var _id: String
            var fullName: String
            var age: String
            var email: String?
        }
    }

    static let migration = Migration(steps: [
        2: { migration in
            migration.renameProperty(onType: "Person", from: "name", to: "fullName")
            try migration.enumerateObjects("Person") { old, new in
                if case .int(let age) = old["age"] { new?["age"] = .string(String(age)) }
            }
        }
    ])

    final class Device {
        let directory: TemporaryDirectory
        var release = 1
        var replica: Replica

        init(_ name: String) throws {
            directory = TemporaryDirectory(name)
            replica = try Self.open(directory, release: 1)
        }

        static func open(_ directory: TemporaryDirectory, release: Int) throws -> Replica {
            var configuration = Replica.Configuration()
            configuration.durability = .none
            let model: any Model.Type =
                switch release {
                case 1: Release1.Person.self
                case 2: Release2.Person.self
                default: Release3.Person.self
                }
            return try Replica.open(
                directory: directory.path, models: [model], schemaVersion: UInt64(release),
                configuration: configuration, migration: MixedReleaseFuzzTests.migration)
        }

        func reopen(at release: Int) throws {
            replica.close()
            self.release = release
            replica = try Self.open(directory, release: release)
        }

        /// Every person, through this release's models (read as ages and names, whatever the release).
        func people() throws -> [String] {
            switch release {
            case 1: try replica.objects(Release1.Person.self).map { "\($0._id) \($0.name) \($0.age)" }
            case 2: try replica.objects(Release2.Person.self).map { "\($0._id) \($0.fullName) \($0.age)" }
            default: try replica.objects(Release3.Person.self).map { "\($0._id) \($0.fullName) \($0.age)" }
            }
        }

        /// Creates or edits a person through this release's models; returns the person's key.
        @discardableResult
        func write(_ random: inout SplitMix64) throws -> String {
            let key = "p\(random.next() % 4)"
            let age = Int(random.next() % 90)
            let name = "n\(random.next() % 100)"
            try replica.write { txn in
                switch release {
                case 1:
                    var person =
                        try txn.object(Release1.Person.self, primaryKey: key)
                        ?? Release1.Person(_id: key, name: name, age: age)
                    person.name = name
                    person.age = age
                    person.nickname = "k\(age)"
                    try txn.upsert(person)
                case 2:
                    var person =
                        try txn.object(Release2.Person.self, primaryKey: key)
                        ?? Release2.Person(_id: key, fullName: name, age: String(age))
                    person.fullName = name
                    person.age = String(age)
                    try txn.upsert(person)
                default:
                    var person =
                        try txn.object(Release3.Person.self, primaryKey: key)
                        ?? Release3.Person(_id: key, fullName: name, age: String(age))
                    person.fullName = name
                    person.email = "\(name)@example.com"
                    try txn.upsert(person)
                }
            }
            return key
        }
    }

    static func sync(_ from: Device, _ to: Device) throws {
        try to.replica.integrate(try from.replica.changesets(missingFrom: to.replica.versionVector))
    }

    @Test("Devices that update at random times while syncing converge, and every release keeps reading and writing")
    func randomUpdates() throws {
        let first = SplitMix64.seedFromEnvironment(default: 0x2E1E_A5E0)
        let count = ProcessInfo.processInfo.environment["TRIBUTARY_MIXED_RELEASE_SEEDS"].flatMap { UInt64($0) } ?? 40
        for seed in first..<(first + count) {
            var random = SplitMix64(seed: seed)
            var trace: [String] = []
            var emailed: Set<String> = []
            var migratedToThree = false
            do {
                let devices = try (0..<4).map { try Device("release-fuzz-\($0)") }
                defer { for device in devices { device.replica.close() } }
                for _ in 0..<(12 + random.next() % 20) {
                    let device = Int(random.next() % 4)
                    switch random.next() % 10 {
                    case 0..<4:
                        trace.append("d\(device) writes (release \(devices[device].release))")
                        let key = try devices[device].write(&random)
                        if devices[device].release == 3 { emailed.insert(key) }
                    case 4..<7:
                        let other = (device + 1 + Int(random.next() % 3)) % 4
                        trace.append("d\(device) -> d\(other)")
                        try Self.sync(devices[device], devices[other])
                    case 7:
                        trace.append("d\(device) restarts")
                        try devices[device].reopen(at: devices[device].release)
                    default:
                        guard devices[device].release < 3 else { continue }
                        trace.append("d\(device) updates to release \(devices[device].release + 1)")
                        try devices[device].reopen(at: devices[device].release + 1)
                        if devices[device].release == 3 { migratedToThree = true }
                    }
                    _ = try devices[device].people()
                }
                for _ in 0..<2 {
                    for from in devices { for to in devices where to !== from { try Self.sync(from, to) } }
                }
                let digest = try devices[0].replica.viewDigest(includeVersionVector: false)
                for (index, device) in devices.enumerated() {
                    #expect(
                        try device.replica.viewDigest(includeVersionVector: false) == digest,
                        "seed \(seed): device \(index) differs after \(trace)")
                    #expect(try device.replica.verify().passed, "seed \(seed): device \(index) fails verify")
                    _ = try device.people()
                }
                let replica = devices[0].replica
                for key in emailed.sorted() {
                    #expect(
                        try replica.object("Person", primaryKey: .string(key))?["email"].isNull == false,
                        "seed \(seed): \(key)'s email was erased after \(trace)")
                }
                if migratedToThree {
                    #expect(
                        replica.schema[type: "Person"]?[property: "nickname"] == nil,
                        "seed \(seed): nickname came back after \(trace)")
                }
            } catch {
                Issue.record("seed \(seed): \(error)\nafter \(trace)")
            }
        }
    }
}
