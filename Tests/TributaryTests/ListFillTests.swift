import Testing
import Tributary
import TributaryModel
import TributaryTestSupport

/// An update that writes many new elements into a list (filling an empty list, refilling one emptied by removals, in
/// an embedded object) places them with one plan of the list. The elements read back in order, the log rebuilds the
/// same records, and concurrent fills merge by rule 5: runs in stamp order, never interleaved.
@Suite("Filling a list")
struct ListFillTests {
    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Doc",
                properties: [
                    .scalar("_id", .string), Property("tags", .scalar(.string), list: true),
                    Property("note", .embedded("Note")), Property("watchers", .link("Person"), list: true),
                ]),
            ObjectSchema(name: "Person", properties: [.scalar("_id", .string)]),
            .embedded(
                "Note",
                properties: [
                    .scalar("title", .string, optional: true), Property("lines", .scalar(.string), list: true),
                ]),
        ])

    static func strings(_ prefix: String, _ count: Int) -> [Value] { (0..<count).map { .string("\(prefix)\($0)") } }

    static func tags(_ replica: Replica) throws -> [Value] {
        try replica.object("Doc", primaryKey: .string("d"))?["tags"].listValue ?? []
    }

    @Test("2,000 values fill an empty list, then refill it after removals, in order; the log rebuilds the same")
    func fillAndRefill() throws {
        let cluster = try Cluster(2, schema: Self.schema)
        let replica = cluster[0]
        let note = EmbeddedObject(type: "Note", fields: ["title": "n", "lines": .list([])])
        try replica.write { _ = try $0.create("Doc", ["_id": "d", "tags": .list([]), "note": .embedded(note)]) }
        let first = Self.strings("a", 2_000)
        try replica.write { try $0.update("Doc", primaryKey: .string("d"), ["tags": .list(first)]) }
        #expect(try Self.tags(replica) == first)
        // Some kept, the rest removed, new ones between and around them.
        var second = Self.strings("b", 700)
        second.insert(first[10], at: 0)
        second.insert(first[1_500], at: 350)
        second.append(first[1_999])
        try replica.write { try $0.update("Doc", primaryKey: .string("d"), ["tags": .list(second)]) }
        #expect(try Self.tags(replica) == second)
        try replica.write { try $0.update("Doc", primaryKey: .string("d"), ["tags": .list([])]) }
        let third = Self.strings("c", 1_000)
        try replica.write { try $0.update("Doc", primaryKey: .string("d"), ["tags": .list(third)]) }
        #expect(try Self.tags(replica) == third)
        // In the embedded object: the update edits its fields, and the list in it fills the same way.
        let lines = Self.strings("l", 1_500)
        try replica.write {
            try $0.update(
                "Doc", primaryKey: .string("d"),
                ["note": .embedded(EmbeddedObject(type: "Note", fields: ["title": "n", "lines": .list(lines)]))])
        }
        guard case .embedded(let read)? = try replica.object("Doc", primaryKey: .string("d"))?["note"] else {
            Issue.record("the note is gone")
            return
        }
        #expect(read.fields["lines"] == .list(lines))
        #expect(try replica.verify().passed)
        try cluster.syncAll()
        #expect(try Self.tags(cluster[1]) == third)
        #expect(try cluster.converged())
    }

    @Test(
        "two replicas fill the same emptied list concurrently: both runs, the earlier writer's first, not interleaved",
        arguments: [0, 1])
    func concurrentFills(later: Int) throws {
        let cluster = try Cluster(2, schema: Self.schema)
        try cluster[0].write { _ = try $0.create("Doc", ["_id": "d", "tags": .list(Self.strings("old", 5))]) }
        try cluster.syncAll()
        try cluster[0].write { try $0.update("Doc", primaryKey: .string("d"), ["tags": .list([])]) }
        try cluster.syncAll()
        cluster.advanceClocks(byMilliseconds: 10)
        cluster.clocks[later].advance(byMilliseconds: 5)
        let runs = [Self.strings("x", 300), Self.strings("y", 300)]
        for index in 0..<2 {
            try cluster[index].write { try $0.update("Doc", primaryKey: .string("d"), ["tags": .list(runs[index])]) }
        }
        try cluster.syncAll()
        let expected = runs[1 - later] + runs[later]
        for replica in cluster.replicas { #expect(try Self.tags(replica) == expected) }
        #expect(try cluster.converged())
        #expect(try cluster[1].verify().passed)
    }

    @Test(
        "a fill and a concurrent insert at the front: the insert lands before or after the whole run, by stamp",
        arguments: [0, 1])
    func fillAgainstInsertAtFront(later: Int) throws {
        let cluster = try Cluster(2, schema: Self.schema)
        try cluster[0].write { _ = try $0.create("Doc", ["_id": "d", "tags": .list(Self.strings("old", 3))]) }
        try cluster.syncAll()
        try cluster[1].write { try $0.update("Doc", primaryKey: .string("d"), ["tags": .list([])]) }
        try cluster.syncAll()
        cluster.advanceClocks(byMilliseconds: 10)
        cluster.clocks[later].advance(byMilliseconds: 5)
        let run = Self.strings("x", 200)
        try cluster[0].write { try $0.update("Doc", primaryKey: .string("d"), ["tags": .list(run)]) }
        try cluster[1].write { try $0.insert("z", at: 0, into: ["tags"], of: "Doc", primaryKey: .string("d")) }
        try cluster.syncAll()
        let expected = later == 0 ? ["z"] + run : run + ["z"]
        for replica in cluster.replicas { #expect(try Self.tags(replica) == expected) }
        #expect(try cluster.converged())
    }

    @Test("append(contentsOf:) and insert(contentsOf:at:) write many values in order; a call that fails writes none")
    func appendAndInsertContentsOf() throws {
        let cluster = try Cluster(2, schema: Self.schema)
        let replica = cluster[0]
        try replica.write { _ = try $0.create("Doc", ["_id": "d"]) }
        let appended = Self.strings("a", 1_000)
        try replica.write { try $0.append(contentsOf: appended, to: ["tags"], of: "Doc", primaryKey: .string("d")) }
        #expect(try Self.tags(replica) == appended)
        let inserted = Self.strings("x", 10)
        try replica.write {
            try $0.insert(contentsOf: inserted, at: 500, into: ["tags"], of: "Doc", primaryKey: .string("d"))
        }
        try replica.write {
            try $0.insert(contentsOf: ["first"], at: 0, into: ["tags"], of: "Doc", primaryKey: .string("d"))
        }
        let expected = ["first"] + Array(appended[..<500]) + inserted + Array(appended[500...])
        #expect(try Self.tags(replica) == expected)
        // A value of the wrong type after good ones, and an index out of range: each call throws before it writes
        // anything, so the transaction can go on and commit without them.
        try replica.write { txn in
            let wrongType = #expect(throws: TributaryError.self) {
                try txn.append(contentsOf: ["fine", 3, "also fine"], to: ["tags"], of: "Doc", primaryKey: .string("d"))
            }
            #expect(wrongType?.code == .wrongType)
            let outOfRange = #expect(throws: TributaryError.self) {
                try txn.insert(contentsOf: ["late"], at: 1_012, into: ["tags"], of: "Doc", primaryKey: .string("d"))
            }
            #expect(outOfRange?.code == .invalidPath)
            try txn.update(
                "Doc", primaryKey: .string("d"),
                ["note": .embedded(EmbeddedObject(type: "Note", fields: ["title": "kept"]))])
        }
        #expect(try Self.tags(replica) == expected)
        guard case .embedded(let note)? = try replica.object("Doc", primaryKey: .string("d"))?["note"] else {
            Issue.record("the transaction did not commit")
            return
        }
        #expect(note.fields["title"] == "kept")
        try replica.write { try $0.append(contentsOf: [], to: ["tags"], of: "Doc", primaryKey: .string("d")) }
        #expect(try Self.tags(replica) == expected)
        // At the end, by index: the same as appending.
        try replica.write {
            try $0.insert(
                contentsOf: ["y", "z"], at: expected.count, into: ["tags"], of: "Doc", primaryKey: .string("d"))
        }
        #expect(try Self.tags(replica) == expected + ["y", "z"])
        #expect(try replica.verify().passed)
        try cluster.syncAll()
        #expect(try cluster.converged())
    }

    @Test("updates of a list of links with moved elements and hidden links read back as written", arguments: 0..<6)
    func updatesWithMovesAndHiddenLinks(seed: Int) throws {
        var generator = SplitMix64(seed: UInt64(seed) + 1)
        func random(_ bound: Int) -> Int { Int(generator.next() % UInt64(bound)) }
        func link(_ name: String) -> Value { .link(.string(name)) }
        func watchers(_ replica: Replica) throws -> [Value] {
            try replica.object("Doc", primaryKey: .string("d"))?["watchers"].listValue ?? []
        }
        let cluster = try Cluster(2, schema: Self.schema)
        let people = (0..<20).map { "p\($0)" }
        try cluster[0].write { txn in
            for person in people { _ = try txn.create("Person", ["_id": .string(person)]) }
            _ = try txn.create("Doc", ["_id": "d", "watchers": .list(people[..<10].map(link))])
        }
        try cluster.syncAll()
        // Replica 1 moves elements and erases people (their links stay, hidden); replica 0 inserts concurrently.
        try cluster[1].write { txn in
            for _ in 0..<8 {
                try txn.moveElement(
                    from: random(10), to: random(10), in: ["watchers"], of: "Doc", primaryKey: .string("d"))
            }
            for person in ["p3", "p7", "p12"] { _ = try txn.delete("Person", primaryKey: .string(person)) }
        }
        try cluster[0].write { txn in
            for index in 0..<5 {
                try txn.insert(
                    link(people[10 + index]), at: random(10 + index), into: ["watchers"], of: "Doc",
                    primaryKey: .string("d"))
            }
        }
        try cluster.syncAll()
        let living = people.filter { !["p3", "p7", "p12"].contains($0) }
        for round in 0..<12 {
            let replica = cluster[round % 2]
            let old = try watchers(replica)
            var new: [Value] = []
            for value in old {
                // Runs of new links between kept ones; a move first and last now and then.
                while random(3) == 0 { new.append(link(living[random(living.count)])) }
                if random(4) != 0 { new.append(value) }
            }
            if random(2) == 0 {
                new.append(contentsOf: (0..<random(30)).map { _ in link(living[random(living.count)]) })
            }
            if round % 3 == 2, let last = new.popLast() { new.insert(last, at: 0) }
            try replica.write { try $0.update("Doc", primaryKey: .string("d"), ["watchers": .list(new)]) }
            #expect(try watchers(replica) == new, "round \(round)")
            try cluster.syncAll()
        }
        // The hidden links were never touched: they read again once their targets are back.
        let before = try watchers(cluster[0]).count
        try cluster[1].write { txn in
            for person in ["p3", "p7", "p12"] { _ = try txn.create("Person", ["_id": .string(person)]) }
        }
        try cluster.syncAll()
        #expect(try watchers(cluster[0]).count > before)
        #expect(try cluster.converged())
        #expect(try cluster[0].verify().passed)
    }
}
