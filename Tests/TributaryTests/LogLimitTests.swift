import Foundation
import Testing
import TributaryLog
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// Nothing goes into the log that the log cannot read back: replay, verify and every peer decode its entries under
/// the log's limits, so a transaction or changeset over them is refused when it is written, not found out later.
@Suite("Writes within the log's decoding limits")
struct LogLimitTests {
    /// A thread of comments, each embedding its reply: a recursive embedded type, as a comment tree is.
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Thread", properties: [.scalar("_id", .string), Property("first", .embedded("Comment"))]),
            .embedded(
                "Comment",
                properties: [
                    .scalar("text", .string, optional: true), Property("reply", .embedded("Comment")),
                    Property("replies", .embedded("Comment"), list: true),
                ]),
        ])

    /// Comments nested `levels` deep, each with a text; the innermost's text is `levels` embedded objects down.
    static func comments(_ levels: Int) -> Value {
        var value = Value.embedded(EmbeddedObject(type: "Comment", fields: ["text": .string("comment \(levels)")]))
        for level in stride(from: levels - 1, through: 1, by: -1) {
            value = .embedded(
                EmbeddedObject(type: "Comment", fields: ["text": .string("comment \(level)"), "reply": value]))
        }
        return value
    }

    /// How many comments a thread's first comment starts, counting down its replies.
    static func levels(_ value: Value?) -> Int {
        var count = 0
        var next = value
        while case .embedded(let comment)? = next {
            count += 1
            next = comment.fields["reply"]
        }
        return count
    }

    /// The deepest thread whose changeset decodes under the log's limits: values nest `maximumDepth` levels below a
    /// field's value, and the innermost comment's text is one of them.
    static var deepestThread: Int { DecodingLimits.standard.maximumDepth }

    /// A thread whose comments hold their replies in a list, `levels` comments deep: each level is a list and an
    /// embedded object, two levels of nesting in a changeset.
    static func repliesThread(_ levels: Int) -> Value {
        var value = Value.embedded(EmbeddedObject(type: "Comment", fields: ["text": .string("comment \(levels)")]))
        for level in stride(from: levels - 1, through: 1, by: -1) {
            value = .embedded(
                EmbeddedObject(
                    type: "Comment", fields: ["text": .string("comment \(level)"), "replies": .list([value])]))
        }
        return value
    }

    @Test(
        "A comment tree whose replies nest deeper than the log reads is refused at commit, naming why; its parts sync")
    func repliesAtCommit() throws {
        let cluster = try Cluster(2, schema: Self.schema)
        // 16 comments: 15 lists and 16 embedded objects below the field, the innermost text 31 levels down.
        try cluster[0].write { try $0.create("Thread", ["_id": "deepest", "first": Self.repliesThread(16)]) }
        // 17 comments put the innermost text 33 levels down: the write allows 17 embedded objects, the log's decoder
        // does not. Before the commit checked, this committed, and then replay, verify and every peer failed on it.
        let error = #expect(throws: TributaryError.self) {
            try cluster[0].write { txn in
                try txn.create("Thread", ["_id": "fine"])
                try txn.create("Thread", ["_id": "too deep", "first": Self.repliesThread(17)])
            }
        }
        #expect(error?.code == .invalidValue)
        #expect(error?.message.contains("instruction 1") == true, "\(String(describing: error))")
        #expect(error?.message.contains("nest more than 32 levels deep") == true, "\(String(describing: error))")
        #expect(try cluster[0].object("Thread", primaryKey: .string("fine")) == nil)
        #expect(try cluster[0].verify().passed)
        try cluster.send(from: 0, to: 1)
        #expect(try cluster[1].object("Thread", primaryKey: .string("deepest")) != nil)
        #expect(try cluster[1].verify().passed)
    }

    @Test("Values nested as deep as the log reads commit, replay and sync; deeper ones are refused at the write")
    func nestingAtCommit() throws {
        let cluster = try Cluster(2, schema: Self.schema)
        try cluster[0].write {
            try $0.create("Thread", ["_id": "deepest", "first": Self.comments(Self.deepestThread)])
        }
        let error = #expect(throws: TributaryError.self) {
            try cluster[0].write {
                try $0.create("Thread", ["_id": "too deep", "first": Self.comments(Self.deepestThread + 1)])
            }
        }
        #expect(error?.message.contains("nest deeper than 32 levels") == true, "\(String(describing: error))")
        // What committed before is whole, and is read back by replay and by a peer; what was refused left nothing.
        #expect(try cluster[0].object("Thread", primaryKey: .string("too deep")) == nil)
        #expect(try cluster[0].verify().passed)
        try cluster.send(from: 0, to: 1)
        #expect(
            Self.levels(try cluster[1].object("Thread", primaryKey: .string("deepest"))?["first"]) == Self.deepestThread
        )
        #expect(try cluster[1].verify().passed)
    }

    @Test("Changesets given in memory are checked as the log will read them, before any of them is integrated")
    func nestingInMemory() throws {
        let cluster = try Cluster(2, schema: Self.schema)
        // A changeset this build could never write, as app code or a custom transport may build one.
        func thread(_ key: String, _ value: Value, sequence: UInt64) -> Changeset {
            Changeset(
                origin: ReplicaID(rawValue: 99), originSequence: sequence,
                time: HybridTime(milliseconds: 1_700_000_000_000),
                context: VersionVector(), schemaVersion: 1,
                instructions: [
                    .create(
                        type: "Thread", primaryKey: .string(key), fields: [FieldValue("first", value)], defaults: [])
                ])
        }
        let good = thread("fine", Self.comments(3), sequence: 1)
        let before = try cluster[0].versionVector
        for levels in [Self.deepestThread + 1, 1_000] {
            let bad = thread("deep", Self.comments(levels), sequence: 2)
            for call in [{ _ = try cluster[0].integrate([good, bad]) }, { _ = try cluster[0].adopt([good, bad]) }] {
                let error = #expect(throws: TributaryError.self) { try call() }
                #expect(error?.code == .invalidChangeset)
                #expect(error?.message.contains("changeset 1 of 2") == true, "\(String(describing: error))")
                #expect(
                    error?.message.contains("nest more than 32 levels deep") == true, "\(String(describing: error))")
            }
        }
        #expect(try cluster[0].object("Thread", primaryKey: .string("fine")) == nil)
        #expect(try cluster[0].versionVector == before)
        // The good one alone integrates, and the log reads it back.
        #expect(try cluster[0].integrate([good]).integrated.count == 1)
        #expect(try cluster[0].verify().passed)
    }
}
