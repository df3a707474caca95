import Foundation
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// Writes and observers compare values as a replica stores them (`Value.storesAlike`): by UTF-8 bytes for strings, by
/// bits for doubles. Otherwise a change a peer made is not reported, and the app's write-back reverts it.
@Suite("Values compare as they store")
struct StoredValueTests {
    static let (composed, decomposed) = (UnicodeKeyTests.composed, UnicodeKeyTests.decomposed)
    /// `UnicodeKeyTests`' places, with a score.
    static let schema = Schema(types: [
        ObjectSchema(
            name: "Place", properties: UnicodeKeyTests.schema.types[0].properties + [.scalar("score", .double)])
    ])

    @Test("A peer's rewrite of a string in the other Unicode normalization is reported to observers, and holds")
    func normalizationChangeIsObserved() throws {
        let cluster = try Cluster(2, schema: Self.schema)
        try cluster[0].write {
            try $0.create("Place", ["_id": "p", "name": .string(Self.composed), "visits": 1, "score": 0.0])
        }
        try cluster.syncAll()
        let held = try #require(try cluster[1].object("Place", primaryKey: .string("p")))
        try cluster[0].write { try $0.update("Place", primaryKey: .string("p"), ["name": .string(Self.decomposed)]) }
        try cluster.syncAll()
        let fresh = try #require(try cluster[1].object("Place", primaryKey: .string("p")))
        #expect(Array(fresh["name"].stringValue!.utf8) == Array(Self.decomposed.utf8), "stored bytes changed")
        #expect(fresh != held, "the changed object must not equal the held one")
        #expect(ResultsDiff(old: [held], new: [fresh]).modifications == [0], "live results report the modification")
        // An app told of the change writes back what it now holds while changing another field.
        try cluster[1].write { try $0.update("Place", primaryKey: .string("p"), ["name": fresh["name"], "visits": 2]) }
        try cluster.syncAll()
        let after = try #require(try cluster[0].object("Place", primaryKey: .string("p"))?["name"].stringValue)
        #expect(Array(after.utf8) == Array(Self.decomposed.utf8), "the peer's rewrite was reverted by a write-back")
    }

    @Test("Writing -0.0 over 0.0 is written: the two store differently")
    func negativeZeroIsWritten() throws {
        let cluster = try Cluster(1, schema: Self.schema)
        try cluster[0].write { try $0.create("Place", ["_id": "p", "name": "x", "visits": 1, "score": .double(0.0)]) }
        try cluster[0].write { try $0.update("Place", primaryKey: .string("p"), ["score": .double(-0.0)]) }
        let score = try #require(try cluster[0].object("Place", primaryKey: .string("p"))?["score"].doubleValue)
        #expect(score.sign == .minus, "the write was dropped as a write of the same value")
        #expect(!Value.double(-0.0).storesAlike(.double(0.0)))
    }

    @Test("An unchanged object holding NaN is not reported modified")
    func nanIsNotAModification() throws {
        let cluster = try Cluster(1, schema: Self.schema)
        try cluster[0].write { try $0.create("Place", ["_id": "p", "name": "x", "visits": 1, "score": .double(.nan)]) }
        let a = try #require(try cluster[0].object("Place", primaryKey: .string("p")))
        let b = try #require(try cluster[0].object("Place", primaryKey: .string("p")))
        #expect(ResultsDiff(old: [a], new: [b]).modifications.isEmpty)
    }
}
