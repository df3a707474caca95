import Foundation
import Testing
import TributaryModel
import TributaryStorage
import TributaryTestSupport
import TributaryViews

@testable import Tributary

/// A removal or rename of a property remembers the renames onto its name that its changeset saw (rule 8), so that a
/// copy of a rename merged late can find the property that a rename which saw another copy moved on.
@Suite("Removals remember the renames onto their name that they saw")
struct RenamesOntoSeenTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(name: "Task", properties: [.scalar("_id", .string), .scalar("a", .string, optional: true)])
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

    @Test("A removal records the renames onto its name that it saw; the first rename, which saw none, records none")
    func recorded() throws {
        let directory = TemporaryDirectory()
        let replica = try Replica.open(
            directory: directory.path, schema: Self.schema, configuration: Self.configuration)
        defer { replica.close() }
        let (rename, removal) = try Self.migrate(replica)
        #expect(
            replica.schema.removals(of: "b", in: "Task") == [PropertyRemoval(dot: removal, renamesOntoSeen: [rename])])
        #expect(replica.schema.removals(of: "a", in: "Task") == [PropertyRemoval(dot: rename, renamedTo: "b")])
        #expect(try replica.verify().passed)
    }
}
