import Foundation
import Synchronization
import Testing
import Tributary
import TributaryMacros
import TributaryTestSupport

// The worked examples of docs/PortingFromRealm.md. The guide quotes this file: the test at the end checks that every
// Swift block of the guide appears here word for word, so that each example compiles and runs.

// MARK: Scrumdinger

@EmbeddedModel struct History {
    var date: Date = .distantPast
    var attendees: [String] = []
    var lengthInMinutes = 0
    var numberOfAttendees = 0
}

@Model struct DailyScrum {
    var _id = ObjectID.generate()
    var title = ""
    var attendees: [String] = []
    var lengthInMinutes = 5
    var history: [History] = []
    var isPublic = false
}

func openScrums(at path: String) throws -> Replica {
    try Replica.open(
        directory: path, models: [DailyScrum.self], schemaVersion: 3,
        migration: Migration { migration in
            if migration.oldSchemaVersion < 3 {
                try migration.enumerateObjects("History") { old, new in
                    new?["numberOfAttendees"] = .int(Int64(old["attendees"].listValue?.count ?? 0))
                }
            }
        })
}

// MARK: Catalyst

@Model struct Project {
    var _id = UUID()
    var name = ""
    var isPinned = false
}

func pinnedProjects(_ replica: Replica) throws -> [Project] {
    try replica.objects(Project.self, where: "isPinned == true SORT(name ASC)")
}

// MARK: Writing and observing

func rename(_ replica: Replica, scrum id: ObjectID, to title: String) async throws {
    try await replica.write { txn in
        guard var scrum = try txn.object(DailyScrum.self, primaryKey: id) else { return }
        scrum.title = title
        try txn.update(scrum)
    }
}

func watchPublicScrums(_ replica: Replica, show: ([DailyScrum]) -> Void) async throws {
    for try await change in replica.observe(DailyScrum.self, where: "isPublic == true") {
        show(change.results)
        return
    }
}

@Suite("The porting guide's examples")
struct PortingGuideTests {
    /// The schema of release 1 of Scrumdinger: no `isPublic`, no `numberOfAttendees`.
    static let scrumdingerRelease1 = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "DailyScrum",
                properties: [
                    .scalar("_id", .objectId), .scalar("title", .string),
                    Property("attendees", .scalar(.string), list: true), .scalar("lengthInMinutes", .int),
                    Property("history", .embedded("History"), list: true),
                ]),
            .embedded(
                "History",
                properties: [
                    .scalar("date", .date), Property("attendees", .scalar(.string), list: true),
                    .scalar("lengthInMinutes", .int),
                ]),
        ])

    @Test("Scrumdinger: release 1's data opens in release 3, with isPublic and numberOfAttendees filled in")
    func scrumdinger() async throws {
        let directory = TemporaryDirectory()
        let id = ObjectID.generate()
        do {
            let release1 = try Replica.open(directory: directory.path, schema: Self.scrumdingerRelease1)
            try await release1.write { txn in
                let meeting: (Int64, [String]) -> Value = { minutes, people in
                    .embedded(
                        EmbeddedObject(
                            type: "History",
                            fields: [
                                "date": .date(Date(timeIntervalSince1970: 1_700_000_000)),
                                "lengthInMinutes": .int(minutes),
                                "attendees": .list(people.map(Value.string)),
                            ]))
                }
                try txn.create(
                    "DailyScrum",
                    [
                        "_id": .objectId(id), "title": "Design", "attendees": ["Ada", "Alan"], "lengthInMinutes": 10,
                        "history": .list([meeting(10, ["Ada", "Alan", "Grace"]), meeting(5, ["Ada"])]),
                    ])
            }
            release1.close()
        }
        let replica = try openScrums(at: directory.path)
        let scrum = try #require(try replica.object(DailyScrum.self, primaryKey: id))
        #expect(scrum.isPublic == false)
        #expect(scrum.history.map(\.numberOfAttendees) == [3, 1])
        try await rename(replica, scrum: id, to: "Design review")
        #expect(try replica.object(DailyScrum.self, primaryKey: id)?.title == "Design review")
        try await replica.write { txn in
            var shared = DailyScrum()
            shared.title = "All hands"
            shared.isPublic = true
            try txn.create(shared)
        }
        let shown = Mutex<[String]>([])
        try await watchPublicScrums(replica) { scrums in shown.withLock { $0 = scrums.map(\.title) } }
        #expect(shown.withLock { $0 } == ["All hands"])
        #expect(try replica.verify().passed)
    }

    @Test("Catalyst: isPinned added to Project with the version raised; existing projects read false")
    func catalyst() throws {
        let directory = TemporaryDirectory()
        do {
            let release1 = try Replica.open(
                directory: directory.path,
                schema: Schema(
                    version: 1,
                    types: [
                        ObjectSchema(name: "Project", properties: [.scalar("_id", .uuid), .scalar("name", .string)])
                    ]))
            try release1.write { txn in
                try txn.create("Project", ["_id": .uuid(UUID()), "name": "tributary"])
                try txn.create("Project", ["_id": .uuid(UUID()), "name": "catalyst"])
            }
            release1.close()
        }
        let replica = try Replica.open(directory: directory.path, models: [Project.self], schemaVersion: 2)
        #expect(try replica.objects(Project.self).allSatisfy { !$0.isPinned })
        try replica.write { txn in
            guard var project = try txn.objects(Project.self, where: "name == 'catalyst'").first else { return }
            project.isPinned = true
            try txn.update(project)
        }
        #expect(try pinnedProjects(replica).map(\.name) == ["catalyst"])
    }

    @Test("Every Swift block of docs/PortingFromRealm.md is in this file, word for word")
    func guideQuotesThisFile() throws {
        let here = URL(fileURLWithPath: #filePath)
        let root = here.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let guide = try String(contentsOf: root.appendingPathComponent("docs/PortingFromRealm.md"), encoding: .utf8)
        let source = try String(contentsOf: here, encoding: .utf8)
        var blocks: [String] = []
        var current: [Substring]?
        for line in guide.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "```swift" {
                current = []
            } else if line == "```", let block = current {
                blocks.append(block.joined(separator: "\n"))
                current = nil
            } else {
                current?.append(line)
            }
        }
        #expect(blocks.count >= 4, "the guide's examples")
        for block in blocks {
            #expect(source.contains(block), "not in PortingGuideTests.swift:\n\(block)")
        }
    }
}
