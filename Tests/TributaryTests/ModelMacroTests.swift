import Foundation
import Testing
import Tributary
import TributaryMacros
import TributaryModel
import TributaryTestSupport

// Scrumdinger's models, release by release, as the Realm article writes them: each property's initial value is its
// default, and release 2 adds `isPublic` with no migration code at all.

@EmbeddedModel struct HistoryV1 {
    static let typeName = "History"
    var date: Date = .distantPast
    var attendees: [String] = []
    var lengthInMinutes = 0
}

@Model struct DailyScrumV1 {
    static let typeName = "DailyScrum"
    var _id = ObjectID.generate()
    var title = ""
    var attendees: [String] = []
    var lengthInMinutes = 5
    var history: [HistoryV1] = []
}

@Model struct DailyScrumV2 {
    static let typeName = "DailyScrum"
    var _id = ObjectID.generate()
    var title = ""
    var attendees: [String] = []
    var lengthInMinutes = 5
    var history: [HistoryV1] = []
    var isPublic = false
}

@EmbeddedModel struct HistoryV3 {
    static let typeName = "History"
    var date: Date = .distantPast
    var attendees: [String] = []
    var lengthInMinutes = 0
    var numberOfAttendees = 0
}

@Model struct DailyScrumV3 {
    static let typeName = "DailyScrum"
    var _id = ObjectID.generate()
    var title = ""
    var attendees: [String] = []
    var lengthInMinutes = 5
    var history: [HistoryV3] = []
    var isPublic = false
}

/// History's release 3 without the macro: `numberOfAttendees` has no default.
struct PlainHistory: EmbeddedModel {
    static let typeName = "History"
    var date: Date
    var attendees: [String]
    var lengthInMinutes: Int
    var numberOfAttendees: Int
}

@Model struct DailyScrumPlainHistory {
    static let typeName = "DailyScrum"
    var _id = ObjectID.generate()
    var title = ""
    var attendees: [String] = []
    var lengthInMinutes = 5
    var history: [PlainHistory] = []
    var isPublic = false
}

enum Status: String, PersistableEnum {
    case open, done
}

/// Initial values of every kind the macro takes, and one it does not.
@Model struct Ticket {
    static let primaryKeyProperty = "code"
    var code = "T-0"
    var priority: Double = 1
    var level = -2
    var status = Status.open
    var shortStatus: Status = .done
    var note: String? = nil
    var label = "none"
    var tags: [String] = []
    var weight: Int = 3
}

/// A model written without the macro keeps working, and gets no defaults from its initial values.
struct PlainTask: Model {
    var _id: String
    var done = false
}

@Suite("Initial values as defaults (@Model, @EmbeddedModel)")
struct ModelMacroTests {
    @Test("The initial values of a @Model's stored properties are the schema's defaults; the primary key's is not")
    func initialValuesAreDefaults() throws {
        let schema = try Schema(models: [Ticket.self, PlainTask.self])
        let ticket = try #require(schema[type: "Ticket"])
        func defaultValue(_ name: String) -> Value? { ticket[property: name]?.defaultValue }
        #expect(defaultValue("code") == nil, "the primary key takes no default")
        #expect(defaultValue("priority") == .double(1), "an integer literal for a Double property")
        #expect(defaultValue("level") == .int(-2))
        #expect(defaultValue("status") == .string("open"), "an enum case, stored by its raw value")
        #expect(defaultValue("shortStatus") == .string("done"))
        #expect(defaultValue("note") == nil, "nil is what an optional reads without a default")
        #expect(defaultValue("label") == .string("none"))
        #expect(defaultValue("tags") == nil, "an empty list is what a list reads without a default")
        #expect(defaultValue("weight") == .int(3))
        #expect(schema[type: "PlainTask"]?[property: "done"]?.defaultValue == nil)
    }

    @Test("Scrumdinger: isPublic added with the version raised and no migration code, then the embedded history")
    func scrumdingerAsTheArticleWritesIt() throws {
        let directory = TemporaryDirectory()
        let id = ObjectID.generate()
        do {
            let v1 = try Replica.open(directory: directory.path, models: [DailyScrumV1.self], schemaVersion: 1)
            try v1.write { txn in
                var scrum = DailyScrumV1(_id: id, title: "Design", attendees: ["Ada", "Alan"])
                scrum.history = [
                    HistoryV1(date: .now, attendees: ["Ada", "Alan", "Grace"], lengthInMinutes: 10),
                    HistoryV1(date: .now, attendees: ["Ada"], lengthInMinutes: 5),
                ]
                try txn.create(scrum)
            }
            v1.close()
        }
        do {
            // Release 2: `var isPublic = false`, the version raised, no migration.
            let v2 = try Replica.open(directory: directory.path, models: [DailyScrumV2.self], schemaVersion: 2)
            let scrum = try #require(try v2.object(DailyScrumV2.self, primaryKey: id))
            #expect(scrum.isPublic == false && scrum.title == "Design")
            #expect(try v2.verify().passed)
            v2.close()
        }
        // Release 3: History gains numberOfAttendees, computed by enumerating the embedded type.
        let migration = Migration(steps: [
            3: { migration in
                try migration.enumerateObjects("History") { old, new in
                    new?["numberOfAttendees"] = .int(Int64(old["attendees"].listValue?.count ?? 0))
                }
            }
        ])
        let v3 = try Replica.open(
            directory: directory.path, models: [DailyScrumV3.self], schemaVersion: 3, migration: migration)
        let scrum = try #require(try v3.object(DailyScrumV3.self, primaryKey: id))
        #expect(scrum.history.map(\.numberOfAttendees) == [3, 1])
        #expect(scrum.history.map(\.lengthInMinutes) == [10, 5])
        #expect(try v3.verify().passed)
    }

    @Test("A required embedded field left without a value fails the migration, saying how to fix it")
    func embeddedFieldWithoutDefaultSaysHowToFix() throws {
        let id = ObjectID.generate()
        let directory = TemporaryDirectory()
        do {
            let v2 = try Replica.open(directory: directory.path, models: [DailyScrumV2.self], schemaVersion: 2)
            try v2.write { txn in
                var scrum = DailyScrumV2(_id: id, title: "Ops")
                scrum.history = [HistoryV1(date: .now, attendees: [], lengthInMinutes: 1)]
                try txn.create(scrum)
            }
            v2.close()
        }
        #expect {
            try Replica.open(directory: directory.path, models: [DailyScrumPlainHistory.self], schemaVersion: 3)
        } throws: { error in
            let message = (error as? TributaryError)?.message ?? ""
            return (error as? TributaryError)?.code == .migrationFailed
                && message.contains("History.numberOfAttendees") && message.contains("declare a default for it")
                && message.contains("on DailyScrum \(id)")
                && message.contains("set it in the migration")
        }
    }

    @Test("Without migration code, an embedded type's new property takes its initial value")
    func embeddedInitialValueFillsMigratedObjects() throws {
        let directory = TemporaryDirectory()
        let id = ObjectID.generate()
        do {
            let v1 = try Replica.open(directory: directory.path, models: [DailyScrumV2.self], schemaVersion: 2)
            try v1.write { txn in
                var scrum = DailyScrumV2(_id: id, title: "Ops")
                scrum.history = [HistoryV1(date: .now, attendees: ["Ada"], lengthInMinutes: 15)]
                try txn.create(scrum)
            }
            v1.close()
        }
        let v3 = try Replica.open(directory: directory.path, models: [DailyScrumV3.self], schemaVersion: 3)
        let scrum = try #require(try v3.object(DailyScrumV3.self, primaryKey: id))
        #expect(scrum.history.map(\.numberOfAttendees) == [0])
        #expect(try v3.verify().passed)
    }
}
