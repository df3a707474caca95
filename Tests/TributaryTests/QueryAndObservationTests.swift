import Foundation
import Synchronization
import Testing
import TributaryModel
import TributaryTestSupport

@testable import Tributary

/// The currency-rates app of a published Realm example: `Rate` objects with an embedded `query`.
struct Rate: Model, Equatable {
    var _id: String
    var query: RateQuery?
    var result: Double
}

struct RateQuery: EmbeddedModel {
    var from: String
    var to: String
    var amount: Double
}

/// RChat's message.
struct Message: Model, Equatable {
    var _id: String
    var author: String
    var text: String
    var timestamp: Date
    var conversationID: String
    var priority: Int = 0
    static let indexedProperties: Set<String> = ["conversationID", "priority"]
}

// The limit guards against a hung observation. It is generous because under the full suite this one shares 2 cores
// with the long storage suites: they run off the cooperative pool (`offThePool`), yet the suite took 130-170 s in
// clean CI runs, against 0.1 s for one of its tests alone.
@Suite("Queries and live results", .timeLimit(.minutes(10)))
struct QueryAndObservationTests {
    func open(_ directory: TemporaryDirectory) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(
            directory: directory.path, models: [Rate.self, Message.self], configuration: configuration)
    }

    /// A replica of `types` (schema version 1), without disk syncs.
    func open(_ directory: TemporaryDirectory, types: [ObjectSchema]) throws -> Replica {
        var configuration = Replica.Configuration()
        configuration.durability = .none
        return try Replica.open(
            directory: directory.path, schema: Schema(version: 1, types: types), configuration: configuration)
    }

    func message(_ index: Int, conversation: String, text: String? = nil, priority: Int = 0) -> Message {
        Message(
            _id: "m\(index)", author: "u\(index % 3)", text: text ?? "message \(index)",
            timestamp: Date(timeIntervalSince1970: Double(1000 - index)), conversationID: conversation,
            priority: priority)
    }

    @Test("The published example's queries work as written")
    func publishedExampleQueries() throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        try replica.write { txn in
            try txn.create(Rate(_id: "r1", query: RateQuery(from: "USD", to: "EUR", amount: 1), result: 0.9))
            try txn.create(Rate(_id: "r2", query: RateQuery(from: "USD", to: "GBP", amount: 1), result: 0.8))
            for index in 0..<20 {
                try txn.create(
                    message(
                        index, conversation: index % 2 == 0 ? "even" : "odd", text: index == 7 ? "Hello THERE" : nil))
            }
        }
        let rates = try replica.objects(
            Rate.self, where: "query.from = %@ AND query.to = %@", arguments: ["USD", "GBP"])
        #expect(rates.map(\._id) == ["r2"])

        let conversation = try replica.objects(
            Message.self, where: "conversationID == $0 SORT(timestamp ASC)", arguments: ["odd"])
        #expect(conversation.count == 10)
        #expect(conversation.map(\.timestamp) == conversation.map(\.timestamp).sorted())
        #expect(conversation.first?._id == "m19")

        let found = try replica.objects(Message.self, where: "text CONTAINS[c] $0", arguments: ["hello"])
        #expect(found.map(\._id) == ["m7"])
    }

    @Test("explain says which index answers a query")
    func explainNamesTheIndex() throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        try replica.write { txn in for index in 0..<10 { try txn.create(message(index, conversation: "c\(index % 3)")) }
        }
        try replica.read { snapshot in
            #expect(
                try snapshot.explain("Message", where: "conversationID == 'c1'")
                    == .index(property: "conversationID", constraint: "conversationID IN {\"c1\"}"))
            #expect(try snapshot.explain("Message", where: "_id IN {'m1', 'm2'}") == .primaryKey(count: 2))
            if case .index(let property, _) = try snapshot.explain(
                "Message", where: "priority >= 2 AND text CONTAINS 'x'")
            {
                #expect(property == "priority")
            } else {
                Issue.record("a range on an indexed property should use its index")
            }
            #expect(try snapshot.explain("Message", where: "text CONTAINS 'x'") == .fullScan)
            #expect(
                try snapshot.explain("Message", where: "conversationID == 'a' AND conversationID == 'b'") == .noMatch)
            #expect(try snapshot.objects("Message", where: "conversationID == 'c1'").count == 3)
        }
    }

    @Test("Index answers equal full scans under random data and queries")
    func indexesAgreeWithScans() throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 4))
        try replica.write { txn in
            for index in 0..<400 {
                try txn.create(
                    message(index, conversation: "c\(random.next() % 9)", priority: Int(random.next() % 20) - 5))
            }
        }
        try replica.write { txn in
            for index in 0..<100 {
                try txn.update(
                    "Message", primaryKey: .string("m\(random.next() % 400)"),
                    ["priority": .int(Int64(random.next() % 20) - 5)])
                if index % 10 == 0 { _ = try txn.delete("Message", primaryKey: .string("m\(random.next() % 400)")) }
            }
        }
        let all = try replica.objects(Message.self)
        for _ in 0..<200 {
            let a = Int(random.next() % 20) - 5
            let b = Int(random.next() % 20) - 5
            let c = "c\(random.next() % 9)"
            let cases: [(String, [Value], (Message) -> Bool)] = [
                ("priority == $0", [.int(Int64(a))], { $0.priority == a }),
                (
                    "priority > $0 AND priority <= $1", [.int(Int64(a)), .int(Int64(b))],
                    { $0.priority > a && $0.priority <= b }
                ),
                (
                    "priority BETWEEN {$0, $1}", [.int(Int64(min(a, b))), .int(Int64(max(a, b)))],
                    { $0.priority >= min(a, b) && $0.priority <= max(a, b) }
                ),
                (
                    "priority IN {$0, $1} AND conversationID != $2", [.int(Int64(a)), .int(Int64(b)), .string(c)],
                    { ($0.priority == a || $0.priority == b) && $0.conversationID != c }
                ),
                (
                    "conversationID == $0 AND priority < $1", [.string(c), .int(Int64(a))],
                    { $0.conversationID == c && $0.priority < a }
                ),
                ("priority < $0", [.int(Int64(a))], { $0.priority < a }),
            ]
            for (query, arguments, predicate) in cases {
                let expected = all.filter(predicate).map(\._id)
                let actual = try replica.objects(Message.self, where: query, arguments: arguments).map(\._id)
                #expect(actual == expected, "\(query) with \(arguments)")
            }
        }
    }

    @Test("Full scans, which decode only what the predicate reads, equal a filter of every object")
    func fullScansAgreeWithFilters() throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 6))
        try replica.write { txn in
            for index in 0..<300 {
                let text = ["hello", "Hello world", "naïve café", "x", ""][Int(random.next() % 5)] + " \(index)"
                try txn.create(
                    message(index, conversation: "c\(random.next() % 4)", text: text, priority: Int(random.next() % 9)))
            }
        }
        // Updates (some objects' fields no longer in their first order) and deletes (tombstones the scan skips).
        try replica.write { txn in
            for _ in 0..<80 {
                let key = PrimaryKey.string("m\(random.next() % 300)")
                if random.next() % 4 == 0 {
                    _ = try txn.delete("Message", primaryKey: key)
                } else if try txn.object("Message", primaryKey: key) != nil {
                    try txn.update(
                        "Message", primaryKey: key,
                        ["author": .string("u\(random.next() % 5)"), "text": .string("edited")])
                }
            }
        }
        let all = try replica.objects(Message.self)
        for _ in 0..<40 {
            let author = "u\(random.next() % 5)"
            let cutoff = Date(timeIntervalSince1970: Double(700 + random.next() % 300))
            let cases: [(String, [Value], (Message) -> Bool)] = [
                ("author == $0", [.string(author)], { $0.author == author }),
                (
                    "text CONTAINS[c] 'hello' AND timestamp > $0", [.date(cutoff)],
                    {
                        $0.text.lowercased().contains("hello") && $0.timestamp > cutoff
                    }
                ),
                (
                    "NOT (author == $0) OR text BEGINSWITH 'na'", [.string(author)],
                    { $0.author != author || $0.text.hasPrefix("na") }
                ),
                ("_id == 'm7' OR author == $0", [.string(author)], { $0._id == "m7" || $0.author == author }),
                ("text == 'edited' AND _id ENDSWITH '1'", [], { $0.text == "edited" && $0._id.hasSuffix("1") }),
            ]
            for (query, arguments, predicate) in cases {
                #expect(try replica.read { try $0.explain("Message", where: query, arguments: arguments) } == .fullScan)
                let expected = all.filter(predicate)
                let actual = try replica.objects(Message.self, where: query, arguments: arguments)
                #expect(actual == expected, "\(query) with \(arguments)")
                #expect(
                    try replica.read { try $0.count("Message", where: query, arguments: arguments) } == expected.count)
            }
        }
        #expect(try replica.read { try $0.count("Message") } == all.count)
    }

    @Test("Invalid queries name the position and the types")
    func invalidQueries() throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        #expect {
            try replica.objects("Message", where: "priority == 'high'")
        } throws: { error in
            guard let error = error as? TributaryError else { return false }
            return error.code == .invalidQuery && error.message.contains("Message.priority")
                && error.message.contains("^")
        }
        #expect {
            try replica.objects("Message", where: "priority ==")
        } throws: { error in
            (error as? TributaryError)?.message.contains("expected a value") == true
        }
    }

    /// Queries whose live results a refresh updates from the objects that changed (one SORT, with ties or without;
    /// none; by an index or a scan; every object) and one it runs again (LIMIT).
    static let observedQueries: [String?] = [
        "priority >= 2 SORT(priority DESC, _id ASC)", "priority >= 1 SORT(priority ASC)", "priority >= 2",
        "text CONTAINS '1' AND priority < 5 SORT(timestamp DESC)", nil, "priority >= 1 SORT(priority DESC) LIMIT(6)",
    ]

    @Test("Live results deliver change indexes that turn the old results into the new", arguments: observedQueries)
    func liveResultsUnderRandomWrites(query: String?) async throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        var random = SplitMix64(seed: SplitMix64.seedFromEnvironment(default: 5))
        try await replica.write { txn in
            for index in 0..<30 { try txn.create(message(index, conversation: "c\(index % 3)", priority: index % 7)) }
        }
        let observation = replica.observe("Message", where: query)
        var iterator = observation.makeAsyncIterator()
        guard case .initial(var current)? = try await iterator.next() else {
            Issue.record("no initial results")
            return
        }
        for round in 0..<60 {
            let seed = random.next()
            try await replica.write { txn in
                var local = SplitMix64(seed: seed)
                for _ in 0..<(1 + Int(local.next() % 4)) {
                    let key = PrimaryKey.string("m\(local.next() % 40)")
                    switch local.next() % 3 {
                    case 0: _ = try txn.delete("Message", primaryKey: key)
                    case 1:
                        if try txn.object("Message", primaryKey: key) != nil {
                            try txn.update("Message", primaryKey: key, ["priority": .int(Int64(local.next() % 7))])
                        }
                    default:
                        let index = Int(local.next() % 40)
                        try txn.upsert(message(index, conversation: "c1", priority: Int(local.next() % 7)))
                    }
                }
            }
            let expected = try query.map { try replica.objects("Message", where: $0) } ?? replica.objects("Message")
            if expected == current { continue }  // this commit left the results as they were: no update comes
            guard
                case .update(let results, let deletions, let insertions, let modifications)? = try await iterator.next()
            else {
                Issue.record("round \(round): the observation ended")
                return
            }
            #expect(results == expected, "round \(round)")
            // Apply the change to the previous results: deletions, then insertions, then check modifications.
            var applied = current
            for index in deletions.reversed() { applied.remove(at: index) }
            for index in insertions { applied.insert(results[index], at: index) }
            #expect(applied.map(\.primaryKey) == results.map(\.primaryKey), "round \(round)")
            for index in modifications { applied[index] = results[index] }
            #expect(applied == results, "round \(round)")
            for index in results.indices where !insertions.contains(index) && !modifications.contains(index) {
                #expect(current.contains(results[index]), "round \(round): index \(index) changed but was not reported")
            }
            current = results
        }
        // Without LIMIT every refresh reads only the objects that changed; with it, each runs the query again.
        let incremental = iterator.registration.incrementalRefreshes.load(ordering: .relaxed)
        if query?.contains("LIMIT") == true { #expect(incremental == 0) } else { #expect(incremental > 10) }
    }

    @Test("An observer wakes for a type its results reach through a link added since it started")
    func observerFollowsLinksAddedLater() async throws {
        let directory = TemporaryDirectory()
        let replica = try open(
            directory,
            types: [
                ObjectSchema(
                    name: "Note", properties: [.scalar("_id", .string), .scalar("text", .string, optional: true)]),
                ObjectSchema(name: "Person", properties: [.scalar("_id", .string)]),
            ])
        try await replica.write { try $0.create("Note", ["_id": "n"]) }
        var iterator = replica.observe("Note").makeAsyncIterator()
        _ = try await iterator.next()
        try await replica.write { txn in
            try txn.addProperty(Property("author", .link("Person")), to: "Note")
            try txn.create("Person", ["_id": "p"])
            try txn.update("Note", primaryKey: .string("n"), ["author": .link(.string("p"))])
        }
        #expect(try await iterator.next()?.results.first?["author"] == .link(.string("p")))
        // Deleting the author commits only a Person: the note's author now reads null (rule 7).
        try await replica.write { _ = try $0.delete("Person", primaryKey: .string("p")) }
        let woken = iterator.registration.wakes.count.load(ordering: .relaxed) == 2
        #expect(woken)
        if woken { #expect(try await iterator.next()?.results.first?["author"] == .null) }
    }

    @Test("Results that depend on backlinks change when a linking object does")
    func observerFollowsBacklinks() async throws {
        let directory = TemporaryDirectory()
        let replica = try open(
            directory,
            types: [
                ObjectSchema(name: "Person", properties: [.scalar("_id", .string)]),
                ObjectSchema(name: "Note", properties: [.scalar("_id", .string), Property("author", .link("Person"))]),
            ])
        try await replica.write { txn in
            try txn.create("Person", ["_id": "ada"])
            try txn.create("Person", ["_id": "bob"])
            try txn.create("Note", ["_id": "n1", "author": .link(.string("ada"))])
        }
        let query = "@links.Note.author.@count > 0"
        #expect(try replica.objects("Person", where: query).map(\.primaryKey) == [.string("ada")])
        var iterator = replica.observe("Person", where: query).makeAsyncIterator()
        #expect(try await iterator.next()?.results.map(\.primaryKey) == [.string("ada")])
        // Only a Note is written: no Person changes, yet bob now has a backlink.
        try await replica.write { try $0.create("Note", ["_id": "n2", "author": .link(.string("bob"))]) }
        #expect(try await iterator.next()?.results.map(\.primaryKey) == [.string("ada"), .string("bob")])
        try await replica.write { _ = try $0.delete("Note", primaryKey: .string("n1")) }
        #expect(try await iterator.next()?.results.map(\.primaryKey) == [.string("bob")])
        #expect(
            try replica.objects("Person", where: "@links.@count == 0 SORT(_id ASC)").map(\.primaryKey) == [
                .string("ada")
            ])
        // A flexible-sync subscription cannot depend on other objects' links to it.
        #expect {
            try replica.subscriptions.commit { $0.append("Person", where: "@links.Note.author.@count > 0") }
        } throws: { error in
            (error as? TributaryError)?.message.contains("cannot use backlinks (@links") == true
        }
    }

    @Test("geoWithin through a replica: reads, live results that follow a moved point, and subscriptions")
    func geoWithinThroughAReplica() async throws {
        let directory = TemporaryDirectory()
        let replica = try open(
            directory,
            types: [
                ObjectSchema(
                    name: "Shop", properties: [.scalar("_id", .string), Property("location", .embedded("Location"))]),
                .embedded(
                    "Location",
                    properties: [.scalar("type", .string), Property("coordinates", .scalar(.double), list: true)]),
            ])
        @Sendable func point(_ longitude: Double, _ latitude: Double) -> Value {
            .embedded(
                EmbeddedObject(
                    type: "Location",
                    fields: ["type": "Point", "coordinates": .list([.double(longitude), .double(latitude)])]))
        }
        try await replica.write { txn in
            try txn.create("Shop", ["_id": "norreport", "location": point(12.5715, 55.6832)])
            try txn.create("Shop", ["_id": "kodbyen", "location": point(12.5589, 55.6672)])
            try txn.create("Shop", ["_id": "berlin", "location": point(13.3973, 52.5117)])
        }
        // Within 2.5 km of Nørreport (2.5 / 6378.1 radians).
        let nearby = "location geoWithin geoCircle([12.5715, 55.6832], $0) SORT(_id ASC)"
        let radius: Value = .double(2.5 / 6378.1)
        #expect(
            try replica.objects("Shop", where: nearby, arguments: [radius]).map(\.primaryKey) == [
                .string("kodbyen"), .string("norreport"),
            ])
        var iterator = replica.observe("Shop", where: nearby, arguments: [radius]).makeAsyncIterator()
        #expect(try await iterator.next()?.results.count == 2)
        // The shop in Berlin moves to Copenhagen: the live results take it in.
        try await replica.write {
            try $0.update("Shop", primaryKey: .string("berlin"), ["location": point(12.568, 55.676)])
        }
        #expect(
            try await iterator.next()?.results.map(\.primaryKey) == [
                .string("berlin"), .string("kodbyen"), .string("norreport"),
            ])
        // A flexible-sync subscription may select by region.
        let set = try replica.subscriptions.commit {
            $0.append("Shop", where: "location geoWithin geoBox([12.4, 55.6], [12.7, 55.8])")
        }
        #expect(set.count == 1)
        #expect {
            try replica.objects("Shop", where: "location geoWithin geoCircle([0, 0], -1)")
        } throws: { error in
            "\(error)".contains("non-negative")
        }
    }

    @Test("A commit to another type does not wake the observer; cancelling ends observation")
    func irrelevantCommitsDoNotWake() async throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        try await replica.write { try $0.create(message(1, conversation: "c")) }
        let observation = replica.observe(Message.self)
        var iterator = observation.makeAsyncIterator()
        _ = try await iterator.next()
        try await replica.write { try $0.create(Rate(_id: "r", query: nil, result: 1)) }
        #expect(iterator.registration.wakes.count.load(ordering: .relaxed) == 0)
        try await replica.write { try $0.update(message(1, conversation: "c", text: "edited")) }
        #expect(iterator.registration.wakes.count.load(ordering: .relaxed) == 1)
        let next = try await iterator.next()
        #expect(next?.results.first?.text == "edited")

        let task = Task {
            var count = 0
            for try await _ in replica.observe(Message.self) { count += 1 }
            return count
        }
        try await Task.sleep(for: .milliseconds(50))
        task.cancel()
        try await replica.write { try $0.update(message(1, conversation: "c", text: "again")) }
        #expect(try await task.value >= 1)
    }

    @Test func observingOneObject() async throws {
        let directory = TemporaryDirectory()
        let replica = try open(directory)
        try await replica.write { try $0.create(message(1, conversation: "c")) }
        var iterator = replica.observeObject(Message.self, primaryKey: "m1").makeAsyncIterator()
        #expect(try await iterator.next()?.object?.text == "message 1")
        try await replica.write { try $0.update(message(1, conversation: "c", text: "changed")) }
        #expect(try await iterator.next()?.object?.text == "changed")
        try await replica.write { _ = try $0.delete(Message.self, primaryKey: "m1") }
        let deleted = try #require(try await iterator.next())
        #expect(deleted.object == nil)
        try await replica.write { try $0.create(message(1, conversation: "c", text: "back")) }
        #expect(try await iterator.next()?.object?.text == "back")
    }

    @Test("Integrated remote changesets wake observers too")
    func remoteChangesWake() async throws {
        let cluster = try Cluster(2, schema: try Schema(models: [Rate.self, Message.self]))
        var iterator = cluster[1].observe(Message.self).makeAsyncIterator()
        #expect(try await iterator.next()?.results.isEmpty == true)
        try await cluster[0].write { try $0.create(message(3, conversation: "c")) }
        try cluster.send(from: 0, to: 1)
        guard case .update(let results, _, let insertions, _)? = try await iterator.next() else {
            Issue.record("no update after integration")
            return
        }
        #expect(results.map(\._id) == ["m3"])
        #expect(insertions == [0])
    }
}
