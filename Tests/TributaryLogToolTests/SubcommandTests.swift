import Foundation
import Testing
import Tributary
import TributaryModel
import TributaryTestSupport

// Each subcommand run on the chat fixture (see `ChatFixture` for its seven changesets): full stdout, exit status
// and, on failure, the one-line reason on stderr.

@Suite("tributary-log info")
struct InfoTests {
    @Test func printsIdentitySizesAndCounts() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["info", fixture.path])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                replica           00000000000000a1
                directory         \#(fixture.path)
                format            \#(Replica.formatVersion)
                schema            version 1, 4 types (2 embedded)
                releases          app version 1 (history from 1), no migration
                changesets        7 (last local sequence 7)
                instructions      19
                compacted         never
                shared log        none (not a daemon of a cluster)
                log stored        \#(thousands(fixture.summary.log.storedBytes)) bytes
                log uncompressed  \#(thousands(fixture.summary.log.uncompressedBytes)) bytes
                compression       \#(String(format: "%.2fx", fixture.summary.log.compressionRatio))
                version vector    [00000000000000a1:5, 00000000000000b2:2]
                storage used      \#(thousands(fixture.storageUsedBytes)) bytes
                objects           3
                  ChatMessage  0
                  User         3

                """#)
        #expect(run.stderr.isEmpty)
    }

    @Test func json() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["info", fixture.path, "--json"])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                {"replica":"00000000000000a1","directory":"\#(fixture.path)","formatVersion":\#(Replica.formatVersion),"schemaVersion":1,"migratedSchemaVersion":0,"declaredSchemaVersion":1,"firstDeclaredSchemaVersion":1,"types":4,"changesets":7,"instructions":19,"lastLocalSequence":7,"compaction":null,"sharedLog":null,"logStoredBytes":\#(fixture.summary.log.storedBytes),"logUncompressedBytes":\#(fixture.summary.log.uncompressedBytes),"compressionRatio":\#(fixture.ratioJSON),"versionVector":[{"replica":"00000000000000a1","originSequence":5},{"replica":"00000000000000b2","originSequence":2}],"storageUsedBytes":\#(fixture.storageUsedBytes),"objects":[{"type":"ChatMessage","count":0},{"type":"User","count":3}],"schemaConflicts":[]}

                """#)
    }

    @Test("A daemon of a cluster shows the shared log's epoch and the position it applied")
    func sharedLogPosition() throws {
        let fixture = try ChatFixture()
        let epoch = UUID(uuidString: "5B8E2F1C-9D3A-4E7B-8C6D-0A1B2C3D4E5F")!
        let replica = try Replica.open(directory: fixture.path)
        try replica.setSharedLogPosition(SharedLogPosition(epoch: epoch, position: 42, last: nil))
        replica.close()
        let run = try runTool(["info", fixture.path])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.lines.contains(
                "shared log        epoch 5B8E2F1C-9D3A-4E7B-8C6D-0A1B2C3D4E5F, applied through position 42"),
            "\(run.stdout)")
        let json = try runTool(["info", fixture.path, "--json"])
        #expect(
            json.stdout.contains(#""sharedLog":{"epoch":"5B8E2F1C-9D3A-4E7B-8C6D-0A1B2C3D4E5F","applied":42}"#),
            "\(json.stdout)")
    }
}

@Suite("tributary-log list")
struct ListTests {
    static let header =
        "     SEQ  ORIGIN:SEQ                TIME (UTC)                AUTHOR             INSTR      BYTES"

    @Test func listsEveryChangesetInFixedColumns() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["list", fixture.path])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                     SEQ  ORIGIN:SEQ                TIME (UTC)                AUTHOR             INSTR      BYTES
                       1  00000000000000a1:1        2023-11-14T22:13:20.000Z  alice                  5  \#(fixture.bytesColumn(1))
                       2  00000000000000a1:2        2023-11-14T22:13:21.000Z  alice                  2  \#(fixture.bytesColumn(2))
                       3  00000000000000a1:3        2023-11-14T22:13:22.000Z  alice                  3  \#(fixture.bytesColumn(3))
                       4  00000000000000a1:4        2023-11-14T22:13:23.000Z  alice                  1  \#(fixture.bytesColumn(4))
                       5  00000000000000b2:1        2023-11-14T22:13:23.000Z  bob                    5  \#(fixture.bytesColumn(5))
                       6  00000000000000b2:2        2023-11-14T22:13:24.000Z  bob                    1  \#(fixture.bytesColumn(6))
                       7  00000000000000a1:5        2023-11-14T22:13:25.000Z  alice                  2  \#(fixture.bytesColumn(7))

                """#)
        #expect(run.stderr.isEmpty)
    }

    @Test func filtersByOriginAuthorTypeRangeAndLimit() throws {
        let fixture = try ChatFixture()
        let byOrigin = try runTool(["list", fixture.path, "--origin", "b2"])
        #expect(byOrigin.status == 0, "\(byOrigin)")
        #expect(
            byOrigin.stdout == Self.header + "\n" + #"""
                       5  00000000000000b2:1        2023-11-14T22:13:23.000Z  bob                    5  \#(fixture.bytesColumn(5))
                       6  00000000000000b2:2        2023-11-14T22:13:24.000Z  bob                    1  \#(fixture.bytesColumn(6))

                """#)

        // The schema changeset defines ChatMessage, so it touches the type too.
        let byAuthorAndType = try runTool(["list", fixture.path, "--author", "alice", "--type", "ChatMessage"])
        #expect(byAuthorAndType.status == 0, "\(byAuthorAndType)")
        #expect(
            byAuthorAndType.lines.dropFirst().map { $0.prefix(8).trimmingCharacters(in: .whitespaces) } == [
                "1", "4", "7",
            ])

        let range = try runTool(["list", fixture.path, "--from", "3", "--to", "5", "--limit", "2"])
        #expect(range.status == 0, "\(range)")
        #expect(
            range.stdout == Self.header + "\n" + #"""
                       3  00000000000000a1:3        2023-11-14T22:13:22.000Z  alice                  3  \#(fixture.bytesColumn(3))
                       4  00000000000000a1:4        2023-11-14T22:13:23.000Z  alice                  1  \#(fixture.bytesColumn(4))

                """#)

        let pastTheEnd = try runTool(["list", fixture.path, "--from", "40"])
        #expect(pastTheEnd.status == 0, "\(pastTheEnd)")
        #expect(pastTheEnd.stdout == Self.header + "\n")
    }

    @Test func jsonLines() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["list", fixture.path, "--json", "--from", "6"])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                {"localSequence":6,"origin":"00000000000000b2","originSequence":2,"time":"2023-11-14T22:13:24.000Z","hybridTime":"1700000004000.0","author":"bob","instructionCount":1,\#(fixture.sizesJSON(6))}
                {"localSequence":7,"origin":"00000000000000a1","originSequence":5,"time":"2023-11-14T22:13:25.000Z","hybridTime":"1700000005000.0","author":"alice","instructionCount":2,\#(fixture.sizesJSON(7))}

                """#)
    }

    @Test(
        "Bad options exit 64 with a one-line reason and the usage",
        arguments: [
            (["--origin", "not-hex"], "Error: --origin must be a replica id of up to 16 hex digits, got 'not-hex'."),
            (["--from", "5", "--to", "2"], "Error: --to 2 is before --from 5."),
            (["--from", "0"], "Error: --from must be 1 or more (local sequences start at 1)."),
            (["--limit=-1"], "Error: --limit must be 0 or more, got -1."),
            (["--from", "x"], "Error: The value 'x' is invalid for '--from <from>'"),
        ])
    func badOptions(_ arguments: [String], _ message: String) throws {
        let fixture = try ChatFixture()
        let run = try runTool(["list", fixture.path] + arguments)
        #expect(run.status == 64, "\(run)")
        #expect(run.stdout.isEmpty)
        #expect(run.stderr.hasPrefix(message + "\n"), "\(run)")
        #expect(run.stderr.contains("Usage: tributary-log list <replica>"))
    }
}

@Suite("tributary-log show")
struct ShowTests {
    @Test func decodesInstructions() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["show", fixture.path, "3"])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                changeset 3
                  origin          00000000000000a1:3
                  time            2023-11-14T22:13:22.000Z (hybrid 1700000002000.0)
                  author          "alice"
                  schema version  1
                  context         [00000000000000a1:2]
                  stored          \#(fixture.storedDescription(3))
                  instructions    3
                  0  set User["u1"].age = 37
                  1  insert "poetry" into User["u1"].tags right of 00000000000000a1:2/0.0
                  2  add User["u1"].karma += 5 (base default)

                """#)

        let integrated = try runTool(["show", fixture.path, "7"])
        #expect(integrated.status == 0, "\(integrated)")
        #expect(
            integrated.stdout == #"""
                changeset 7
                  origin          00000000000000a1:5
                  time            2023-11-14T22:13:25.000Z (hybrid 1700000005000.0)
                  author          "alice"
                  schema version  1
                  context         [00000000000000a1:4, 00000000000000b2:2]
                  stored          \#(fixture.storedDescription(7))
                  instructions    2
                  0  erase ChatMessage["m1"]
                  1  set User["u1"].address = {city: "London"}

                """#)
    }

    @Test func showsSchemaInstructions() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["show", fixture.path, "1"])
        #expect(run.status == 0, "\(run)")
        let chatMessage =
            "  2  add type ChatMessage { _id: string; author: string (indexed); text: string; timestamp: date (indexed); "
            + "conversationID: string (indexed); isHighPriority: bool = false; sender: link<User>; "
            + "attachments: list<embedded<Attachment>> }"
        let user =
            "  3  add type User { _id: string; name: string (indexed); age: int?; karma: int = 0; "
            + "address: embedded<Address>; tags: list<string>; friends: list<link<User>> }"
        let expected: [String] = [
            "  instructions    5",
            "  0  add type embedded Address { street: string?; city: string? }",
            "  1  add type embedded Attachment { name: string; size: int = 0 }",
            chatMessage, user, "  4  set schema version 1",
        ]
        #expect(Array(run.lines.suffix(6)) == expected)
    }

    @Test func json() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["show", fixture.path, "6", "--json"])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                {"localSequence":6,"origin":"00000000000000b2","originSequence":2,"time":"2023-11-14T22:13:24.000Z","hybridTime":"1700000004000.0","author":"bob","instructionCount":1,\#(fixture.sizesJSON(6)),"schemaVersion":1,"context":[{"replica":"00000000000000b2","originSequence":1}],"instructions":[{"op":"create","type":"User","primaryKey":"u3","fields":{"address":{"city":"Arlington"},"name":"Grace"},"defaults":{"karma":0}}]}

                """#)
    }

    @Test func missingEntryExits66() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["show", fixture.path, "9"])
        #expect(run.status == 66, "\(run)")
        #expect(run.stdout.isEmpty)
        #expect(run.stderr == "Error: the log has no entry 9: it holds local sequences 1 through 7\n")
    }
}

@Suite("tributary-log replay")
struct ReplayTests {
    @Test func summarizesTheStateAsOfASequence() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["replay", fixture.path, "--to", "4"])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                state as of local sequence 4 (the log holds 7)
                schema          version 1, 4 types
                version vector  [00000000000000a1:4]
                objects         3
                  ChatMessage  1
                  User         2

                """#)

        let json = try runTool(["replay", fixture.path, "--to", "4", "--json"])
        #expect(json.status == 0, "\(json)")
        #expect(
            json.stdout == #"""
                {"localSequence":4,"schemaVersion":1,"versionVector":[{"replica":"00000000000000a1","originSequence":4}],"objectCount":3,"objects":[{"type":"ChatMessage","count":1},{"type":"User","count":2}]}

                """#)

        let empty = try runTool(["replay", fixture.path, "--to", "0", "--json"])
        #expect(
            empty.stdout
                == #"{"localSequence":0,"schemaVersion":0,"versionVector":[],"objectCount":0,"objects":[]}"# + "\n")
    }

    @Test func writesANewReplicaTheLibraryOpens() throws {
        let fixture = try ChatFixture()
        let out = fixture.directory.appending("replayed")
        let run = try runTool(["replay", fixture.path, "--to", "4", "--out", out])
        #expect(run.status == 0, "\(run)")
        #expect(run.stdout.hasPrefix("wrote replica "))
        #expect(run.stdout.hasSuffix(" to \(out): 4 changesets, 3 objects\n"))

        let source = try Replica.open(directory: fixture.path)
        let expected = try source.objects(asOf: 4).objects
        source.close()
        let copy = try Replica.open(directory: out)
        defer { copy.close() }
        #expect(copy.replicaID != ChatFixture.replicaA)
        #expect(try copy.objects("ChatMessage") + copy.objects("User") == expected)
        #expect(try copy.verify().passed)

        // The copy is a replica like any other: the tool reads it.
        let list = try runTool(["list", out])
        #expect(list.lines.count == 5)
    }

    @Test func refusesANonEmptyOutputDirectoryAndAPointPastTheEnd() throws {
        let fixture = try ChatFixture()
        let occupied = fixture.directory.appending("occupied")
        try FileManager.default.createDirectory(atPath: occupied, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: occupied + "/notes.txt", contents: Data("keep".utf8))
        let run = try runTool(["replay", fixture.path, "--to", "2", "--out", occupied])
        #expect(run.status == 73, "\(run)")
        #expect(run.stderr == "Error: \(occupied) is not empty; replay writes a new replica into an empty directory\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: occupied) == ["notes.txt"])

        let past = try runTool(["replay", fixture.path, "--to", "8"])
        #expect(past.status == 66, "\(past)")
        #expect(past.stderr == "Error: the log has no entry 8: it holds local sequences 1 through 7\n")

        let whole = try runTool(["replay", fixture.path])
        #expect(whole.status == 0, "\(whole)")
        #expect(whole.stdout.hasPrefix("state as of local sequence 7 (the log holds 7)\n"), "\(whole)")
    }

    @Test func rebuildsADevelopmentBuildsReplicaFromItsLog() throws {
        let fixture = try ChatFixture()
        let source = try Replica.open(directory: fixture.path)
        let expected = try source.objects(asOf: 7).objects
        source.close()
        let old = fixture.directory.appending("old")
        try FileManager.default.copyItem(atPath: fixture.path, toPath: old)
        try StoredFormat.markAsDevelopmentBuild(old)

        let refused = try runTool(["info", old])
        #expect(refused.status == 66, "\(refused)")
        #expect(refused.stderr.contains("development build"), "\(refused)")
        #expect(refused.stderr.contains("tributary-log replay \(old) --out"), "\(refused)")

        let out = fixture.directory.appending("rebuilt")
        let run = try runTool(["replay", old, "--out", out])
        #expect(run.status == 0, "\(run)")
        #expect(run.stdout.hasSuffix(" to \(out): 7 changesets, 3 objects\n"), "\(run)")
        let copy = try Replica.open(directory: out)
        defer { copy.close() }
        #expect(try copy.objects("ChatMessage") + copy.objects("User") == expected)
        #expect(try copy.verify().passed)
    }
}

@Suite("tributary-log diff")
struct DiffTests {
    @Test func showsCreatedErasedAndChangedFieldByFieldAndExits1() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["diff", fixture.path, "2", "7"])
        #expect(run.status == 1, "\(run)")
        #expect(
            run.stdout == #"""
                ~ User["u1"]
                    age: 36 -> 37
                    karma: 0 -> 5
                    address: null -> {city: "London", street: null}
                    tags: ["math"] -> ["math", "poetry"]
                + User["u3"]
                    name: "Grace"
                    age: null
                    karma: 0
                    address: {city: "Arlington", street: null}
                    tags: []
                    friends: []
                1 created, 0 erased, 1 changed (local sequence 2 -> 7)

                """#)
        #expect(run.stderr.isEmpty)

        let erased = try runTool(["diff", fixture.path, "4", "5"])
        #expect(erased.status == 0, "the schema changeset from b2 changes nothing: \(erased)")
        let backwards = try runTool(["diff", fixture.path, "6", "4"])
        #expect(backwards.status == 1)
        #expect(backwards.lines.first == #"- User["u3"]"#)
        let messageErased = try runTool(["diff", fixture.path, "6", "7"])
        #expect(
            messageErased.lines.prefix(8) == [
                #"- ChatMessage["m1"]"#, #"    author: "u1""#, #"    text: "Hello\nworld""#,
                "    timestamp: 2023-11-14T22:15:00.000Z", #"    conversationID: "c1""#, "    isHighPriority: false",
                #"    sender: -> "u2""#, "    attachments: []",
            ])
        #expect(messageErased.lines.last == "0 created, 1 erased, 1 changed (local sequence 6 -> 7)")
    }

    @Test func identicalStatesExit0() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["diff", fixture.path, "3", "3"])
        #expect(run.status == 0, "\(run)")
        #expect(run.stdout == "0 created, 0 erased, 0 changed (local sequence 3 -> 3)\n")
    }

    @Test func jsonLinesStartWithTheSchema() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["diff", fixture.path, "0", "2", "--json"])
        #expect(run.status == 1, "\(run)")
        #expect(
            run.stdout == #"""
                {"change":"schema","versionBefore":0,"versionAfter":1,"differences":["Class 'Address' has been added.","Class 'Attachment' has been added.","Class 'ChatMessage' has been added.","Class 'User' has been added."]}
                {"change":"created","type":"User","primaryKey":"u1","object":{"_id":"u1","name":"Ada","age":36,"karma":0,"address":null,"tags":["math"],"friends":[]}}
                {"change":"created","type":"User","primaryKey":"u2","object":{"_id":"u2","name":"Alan","age":null,"karma":0,"address":null,"tags":[],"friends":[]}}

                """#)
    }
}

@Suite("tributary-log history")
struct HistoryTests {
    @Test func oneLinePerChangesetThatTouchedTheObject() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["history", fixture.path, "User", "u1"])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                     SEQ  ORIGIN:SEQ                TIME (UTC)                AUTHOR            WHAT
                       2  00000000000000a1:2        2023-11-14T22:13:21.000Z  alice             create {age: 36, name: "Ada", tags: ["math"]} defaults {karma: 0}
                       3  00000000000000a1:3        2023-11-14T22:13:22.000Z  alice             set age = 37; insert "poetry" into tags right of 00000000000000a1:2/0.0; add karma += 5
                       7  00000000000000a1:5        2023-11-14T22:13:25.000Z  alice             set address = {city: "London"}

                """#)

        let message = try runTool(["history", fixture.path, "ChatMessage", "m1"])
        #expect(
            message.stdout == #"""
                     SEQ  ORIGIN:SEQ                TIME (UTC)                AUTHOR            WHAT
                       4  00000000000000a1:4        2023-11-14T22:13:23.000Z  alice             create {author: "u1", conversationID: "c1", sender: -> "u2", text: "Hello\nworld", timestamp: 2023-11-14T22:15:00.000Z} defaults {isHighPriority: false}
                       7  00000000000000a1:5        2023-11-14T22:13:25.000Z  alice             erase

                """#)

        let never = try runTool(["history", fixture.path, "User", "nobody"])
        #expect(never.status == 0)
        #expect(never.lines.count == 1)
        #expect(never.stderr == "no changeset touched User[\"nobody\"]\n")
    }

    @Test func json() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["history", fixture.path, "User", "u1", "--json"])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                {"localSequence":2,"origin":"00000000000000a1","originSequence":2,"time":"2023-11-14T22:13:21.000Z","hybridTime":"1700000001000.0","author":"alice","instructionCount":2,\#(fixture.sizesJSON(2)),"instructions":[{"op":"create","type":"User","primaryKey":"u1","fields":{"age":36,"name":"Ada","tags":["math"]},"defaults":{"karma":0}}]}
                {"localSequence":3,"origin":"00000000000000a1","originSequence":3,"time":"2023-11-14T22:13:22.000Z","hybridTime":"1700000002000.0","author":"alice","instructionCount":3,\#(fixture.sizesJSON(3)),"instructions":[{"op":"set","type":"User","primaryKey":"u1","property":"age","value":37},{"op":"listInsert","type":"User","primaryKey":"u1","property":"tags","anchor":{"side":"right","parent":"00000000000000a1:2/0.0"},"value":"poetry"},{"op":"addInteger","type":"User","primaryKey":"u1","property":"karma","delta":5,"base":{"replica":"0000000000000000","hybridTime":"0.0"}}]}
                {"localSequence":7,"origin":"00000000000000a1","originSequence":5,"time":"2023-11-14T22:13:25.000Z","hybridTime":"1700000005000.0","author":"alice","instructionCount":2,\#(fixture.sizesJSON(7)),"instructions":[{"op":"set","type":"User","primaryKey":"u1","property":"address","value":{"city":"London"}}]}

                """#)
    }

    @Test(
        "Primary keys are parsed as the schema says",
        arguments: [
            (["Counter", "42"], ["create {value: 1}", "add value -= 3"]),
            (["Document", KeyedFixture.objectID], [#"create {title: "Notes"}"#, #"set title = "Notes, revised""#]),
            (["Token", KeyedFixture.uuid], ["create {data: x'deadbeef', score: 0.5}"]),
            (["Token", KeyedFixture.uuid.lowercased()], ["create {data: x'deadbeef', score: 0.5}"]),
        ])
    func primaryKeyTypes(_ arguments: [String], _ what: [String]) throws {
        let fixture = try KeyedFixture()
        let run = try runTool(["history", fixture.path] + arguments)
        #expect(run.status == 0, "\(run)")
        #expect(run.lines.dropFirst().map { String($0.dropFirst(80)) } == what)
    }

    @Test(
        "A key that does not fit the type exits 64",
        arguments: [
            (["Counter", "abc"], "Error: the primary key of Counter is an int; 'abc' is not a 64-bit integer"),
            (
                ["Document", "12345"],
                "Error: the primary key of Document is an ObjectID; '12345' is not 24 hexadecimal digits"
            ),
            (["Token", "not-a-uuid"], "Error: the primary key of Token is a UUID; 'not-a-uuid' is not a UUID"),
        ])
    func badKeys(_ arguments: [String], _ message: String) throws {
        let fixture = try KeyedFixture()
        let run = try runTool(["history", fixture.path] + arguments)
        #expect(run.status == 64, "\(run)")
        #expect(run.stdout.isEmpty)
        #expect(run.stderr == message + "\n")
    }
}

@Suite("tributary-log objects")
struct ObjectsTests {
    @Test func tableInSchemaOrder() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["objects", fixture.path, "User"])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                _id   name     age   karma  address                            tags                friends
                "u1"  "Ada"    37    5      {city: "London", street: null}     ["math", "poetry"]  []
                "u2"  "Alan"   null  0      null                               []                  []
                "u3"  "Grace"  null  0      {city: "Arlington", street: null}  []                  []

                """#)

        let keyed = try KeyedFixture()
        let tokens = try runTool(["objects", keyed.path, "Token"])
        #expect(
            tokens.stdout == #"""
                _id                                   data         score
                E621E1F8-C36C-495A-93FC-0C247A3E6E5F  x'deadbeef'  0.5

                """#)
    }

    @Test func whereTakesAQuery() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["objects", fixture.path, "User", "--where", "age > 30 SORT(name ASC)"])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                _id   name   age  karma  address                         tags                friends
                "u1"  "Ada"  37   5      {city: "London", street: null}  ["math", "poetry"]  []

                """#)
        let sorted = try runTool([
            "objects", fixture.path, "User", "--where", "TRUEPREDICATE SORT(name DESC)", "--json",
        ])
        #expect(sorted.lines.map { $0.prefix(11) } == [#"{"_id":"u3""#, #"{"_id":"u2""#, #"{"_id":"u1""#])
    }

    @Test func jsonLinesTagValuesJSONHasNoTypeFor() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["objects", fixture.path, "User", "--json"])
        #expect(run.status == 0, "\(run)")
        #expect(
            run.stdout == #"""
                {"_id":"u1","name":"Ada","age":37,"karma":5,"address":{"city":"London","street":null},"tags":["math","poetry"],"friends":[]}
                {"_id":"u2","name":"Alan","age":null,"karma":0,"address":null,"tags":[],"friends":[]}
                {"_id":"u3","name":"Grace","age":null,"karma":0,"address":{"city":"Arlington","street":null},"tags":[],"friends":[]}

                """#)
        let keyed = try KeyedFixture()
        let tokens = try runTool(["objects", keyed.path, "Token", "--json"])
        #expect(
            tokens.stdout
                == #"{"_id":{"$uuid":"E621E1F8-C36C-495A-93FC-0C247A3E6E5F"},"data":{"$binary":"3q2+7w=="},"score":0.5}"#
                + "\n")
        let documents = try runTool(["objects", keyed.path, "Document", "--json"])
        #expect(documents.stdout == #"{"_id":{"$oid":"65a1b2c3d4e5f60718293a4b"},"title":"Notes, revised"}"# + "\n")
    }

    @Test(
        "Unknown types and bad queries exit 64",
        arguments: [
            (["Nope"], "Error: the schema has no type 'Nope' (top-level types: ChatMessage, User)"),
            (["Address"], "Error: 'Address' is an embedded type (top-level types: ChatMessage, User)"),
            (["User", "--where", "age >"], "Error: expected a value after '>' at column 6; age >"),
        ])
    func badTypesAndQueries(_ arguments: [String], _ message: String) throws {
        let fixture = try ChatFixture()
        let run = try runTool(["objects", fixture.path] + arguments)
        #expect(run.status == 64, "\(run)")
        #expect(run.stdout.isEmpty)
        #expect(run.stderr == message + "\n")
    }
}

@Suite("tributary-log verify")
struct VerifyTests {
    @Test func passesOnAHealthyReplica() throws {
        let fixture = try ChatFixture()
        let expected = "verified: 7 changesets, 4 objects, 3 index entries; the views equal a replay of the log\n"
        let run = try runTool(["verify", fixture.path])
        #expect(run.status == 0, "\(run)")
        #expect(run.stdout == expected)
        #expect(run.stderr.isEmpty)

        let inMemory = try runTool(["verify", fixture.path, "--in-memory"])
        #expect(inMemory.stdout == expected)

        let scratch = fixture.directory.appending("scratch")
        let explicit = try runTool(["verify", fixture.path, "--scratch", scratch])
        #expect(explicit.stdout == expected)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch).isEmpty, "the scratch files are removed")

        let json = try runTool(["verify", fixture.path, "--json"])
        #expect(
            json.stdout
                == #"{"passed":true,"changesetsChecked":7,"objectsCompared":4,"indexEntriesCompared":3,"firstProblem":null}"#
                + "\n")
    }
}

@Suite("tributary-log export")
struct ExportTests {
    @Test func streamsEveryChangesetAsJSONLines() throws {
        let fixture = try ChatFixture()
        let run = try runTool(["export", fixture.path, "--format", "jsonl"])
        #expect(run.status == 0, "\(run)")
        #expect(run.lines.count == 7)
        for (index, line) in run.lines.enumerated() {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object?["localSequence"] as? Int == index + 1)
            #expect((object?["instructions"] as? [Any])?.count == object?["instructionCount"] as? Int)
        }
        #expect(
            run.lines[2] == #"""
                {"localSequence":3,"origin":"00000000000000a1","originSequence":3,"time":"2023-11-14T22:13:22.000Z","hybridTime":"1700000002000.0","author":"alice","instructionCount":3,\#(fixture.sizesJSON(3)),"schemaVersion":1,"context":[{"replica":"00000000000000a1","originSequence":2}],"instructions":[{"op":"set","type":"User","primaryKey":"u1","property":"age","value":37},{"op":"listInsert","type":"User","primaryKey":"u1","property":"tags","anchor":{"side":"right","parent":"00000000000000a1:2/0.0"},"value":"poetry"},{"op":"addInteger","type":"User","primaryKey":"u1","property":"karma","delta":5,"base":{"replica":"0000000000000000","hybridTime":"0.0"}}]}
                """#)
        let range = try runTool(["export", fixture.path, "--from", "3", "--to", "3"])
        #expect(range.lines == [run.lines[2]])

        let badFormat = try runTool(["export", fixture.path, "--format", "csv"])
        #expect(badFormat.status == 64)
        #expect(badFormat.stderr.hasPrefix("Error: The value 'csv' is invalid for '--format <format>'"), "\(badFormat)")
    }
}

@Suite("tributary-log usage")
struct UsageTests {
    @Test func noSubcommandOrMissingArgumentsExit64() throws {
        let none = try runTool([])
        // Without a subcommand argument-parser prints the help and exits 0.
        #expect(none.status == 0)
        #expect(none.stdout.hasPrefix("OVERVIEW: Inspect and replay a replica's changeset log (read-only)."))

        let missing = try runTool(["show"])
        #expect(missing.status == 64, "\(missing)")
        #expect(missing.stderr.hasPrefix("Error: Missing expected argument '<replica>'\n"))

        let unknown = try runTool(["tail", "x"])
        #expect(unknown.status == 64, "\(unknown)")
    }
}

@Suite("tributary-log on a property defined two ways")
struct SchemaConflictToolTests {
    /// Two replicas add `priority`, as an int and (later) as a string, each setting it on one task, and sync: the
    /// string definition shows, and the int written on `a` is kept aside.
    @Test func infoNamesTheConflictAndObjectsListTheValuesAside() throws {
        let schema = Schema(
            version: 1,
            types: [ObjectSchema(name: "Task", properties: [.scalar("_id", .string), .scalar("title", .string)])])
        let cluster = try Cluster(2, schema: schema)
        try cluster[0].write { txn in
            for key in ["a", "b"] { _ = try txn.create("Task", ["_id": .string(key), "title": .string(key)]) }
        }
        try cluster.syncAll()
        try cluster.definePriorityTwoWays()
        try cluster.syncAll()
        let path = cluster[0].directory
        cluster[0].close()

        let info = try runTool(["info", path])
        #expect(info.status == 0, "\(info)")
        #expect(
            info.stdout.contains(
                "schema conflict   'Task.priority' is string? (added at "), "\(info.stdout)")
        #expect(info.stdout.contains("over int? (added at "), "\(info.stdout)")
        #expect(info.stdout.contains("1 object keeps values written under that definition aside"), "\(info.stdout)")

        let objects = try runTool(["objects", path, "Task"])
        #expect(objects.status == 0, "\(objects)")
        let lines = objects.stdout.split(separator: "\n")
        #expect(lines.first?.hasSuffix("aside") == true, "\(objects.stdout)")
        #expect(lines.contains { $0.hasPrefix("\"a\"") && $0.hasSuffix("priority as int?: 3") }, "\(objects.stdout)")

        let json = try runTool(["objects", path, "Task", "--json"])
        #expect(
            json.stdout.contains(#""_id":"a","#)
                && json.stdout.contains(
                    #""$aside":[{"property":"priority","type":"int?","value":3}]"#),
            "\(json.stdout)")
    }
}

@Suite("tributary-log on a compacted log")
struct CompactedLogTests {
    /// The chat fixture with entries 1-4 replaced by a base state.
    static func compacted() throws -> ChatFixture {
        let fixture = try ChatFixture()
        var configuration = Replica.Configuration()
        configuration.durability = .none
        let replica = try Replica.open(directory: fixture.path, configuration: configuration)
        defer { replica.close() }
        try #require(try replica.compact(through: 4) != nil)
        return fixture
    }

    @Test func infoListShowAndVerify() throws {
        let fixture = try Self.compacted()
        let info = try runTool(["info", fixture.path])
        #expect(info.status == 0, "\(info)")
        #expect(info.stdout.contains("compacted         entries 1-4 replaced by a base state at "), "\(info.stdout)")
        #expect(info.stdout.contains("format            \(Replica.formatVersion)"), "\(info.stdout)")

        // The list starts after the base, also when asked from an entry it replaced.
        for arguments in [["list", fixture.path], ["list", fixture.path, "--from", "2"]] {
            let list = try runTool(arguments)
            #expect(list.status == 0, "\(list)")
            let sequences = list.stdout.split(separator: "\n").dropFirst().compactMap {
                $0.split(separator: " ").first.flatMap { Int($0) }
            }
            #expect(sequences == [5, 6, 7], "\(list.stdout)")
        }

        let show = try runTool(["show", fixture.path, "2"])
        #expect(show.status == 66, "\(show)")
        #expect(
            show.stderr
                == "Error: log entry 2 was replaced by a base state when the log was compacted; it holds local "
                + "sequences 5 through 7\n")
        #expect(try runTool(["show", fixture.path, "6"]).status == 0)

        let verify = try runTool(["verify", fixture.path])
        #expect(verify.status == 0, "\(verify)")
        let replay = try runTool(["replay", fixture.path, "--out", fixture.directory.appending("copy")])
        #expect(replay.status != 0)
        #expect(replay.stderr.contains("replaced by a base state"), "\(replay.stderr)")
    }
}
