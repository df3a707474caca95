import Testing
import TributaryModel
import TributaryTestSupport

/// Permission rules as App Services wrote them: loading, role selection, and the filters a session gets.
@Suite("Permission rules")
struct PermissionRulesTests {
    static func rules(_ json: String) throws(RulesError) -> PermissionRules {
        try PermissionRules(json: Array(json.utf8))
    }

    static func error(_ json: String) -> String? {
        do {
            _ = try rules(json)
            return nil
        } catch {
            return error.message
        }
    }

    @Test("The RChat rules: a user's own User object, every Chatster read-only, the messages it authored to write")
    func rchatRules() throws {
        let rules = try Self.rules(RChat.rules)
        #expect(rules.types == ["User", "Chatster", "ChatMessage"])
        let alice = rules.permissions(for: RuleUser(id: "alice"))
        #expect(alice["User"]?.read == .matching(#"_id == "alice""#))
        #expect(alice["User"]?.write == .matching(#"_id == "alice""#))
        #expect(alice["User"]?.insert == true && alice["User"]?.delete == true)
        #expect(alice["Chatster"]?.read == .all)
        #expect(alice["Chatster"]?.write == DocumentFilter.none)
        #expect(alice["Chatster"]?.insert == false, "no write, no create")
        #expect(alice["ChatMessage"]?.read == .all)
        #expect(alice["ChatMessage"]?.write == .matching(#"authorID == "alice""#))
        // The default role ({} filters) covers the types the rules do not name.
        #expect(alice["Photo"]?.read == .all && alice["Photo"]?.write == .all)
        // Subscriptions are limited to what the user may read.
        let limited = alice.readable([
            Subscription(name: "users", type: "User", query: "TRUEPREDICATE"),
            Subscription(type: "Chatster", query: "presence == 'on-line'"),
        ])
        #expect(limited.map(\.query) == [#"(TRUEPREDICATE) AND (_id == "alice")"#, "presence == 'on-line'"])
        #expect(limited.first?.name == "users")
    }

    @Test("The per-collection form: document filters, read, write, insert and delete; the first role that applies")
    func perCollectionForm() throws {
        let rules = try Self.rules(
            #"""
            [
              {"collection": "Task", "database": "todo", "roles": [
                {"name": "admin", "apply_when": {"%%user.custom_data.isAdmin": true},
                 "document_filters": {"read": {}, "write": {}},
                 "read": true, "write": true, "insert": true, "delete": true, "search": true},
                {"name": "member", "apply_when": {"%%user.custom_data.team": {"$in": ["blue", "red"]}},
                 "document_filters": {"read": {"team": "%%user.custom_data.team"},
                                      "write": {"$and": [{"owner": "%%user.id"}, {"done": {"$ne": true}}]}},
                 "read": true, "write": true, "insert": true, "delete": false,
                 "fields": {}, "additional_fields": {}}
              ]},
              {"roles": [{"name": "nobody", "apply_when": {}, "document_filters": {"read": {}, "write": {}},
                          "read": false, "write": false, "insert": false, "delete": false}]}
            ]
            """#)
        let admin = rules.permissions(for: RuleUser(id: "ann", customData: ["isAdmin": .bool(true)]))
        #expect(admin["Task"]?.role == "admin")
        #expect(admin["Task"]?.write == .all && admin["Task"]?.delete == true)
        let member = rules.permissions(for: RuleUser(id: "bo", customData: ["team": .string("blue")]))
        #expect(member["Task"]?.role == "member")
        #expect(member["Task"]?.delete == false)
        let write = #"(owner == "bo") AND (done != true)"#
        #expect(member["Task"]?.write == .matching(write))
        #expect(member["Task"]?.read == .matching(#"(team == "blue") OR (\#(write))"#), "what it may write it reads")
        // No role applies: the type is closed, whatever the default role.
        let stranger = rules.permissions(for: RuleUser(id: "cy", customData: ["team": .string("green")]))
        #expect(stranger["Task"]?.read == DocumentFilter.none && stranger["Task"]?.insert == false)
        #expect(stranger["Other"]?.read == DocumentFilter.none, "the default role grants nothing")
    }

    @Test("Field-level rules: named fields and the others, write implying read, document-level grants covering all")
    func fieldLevelRules() throws {
        let rules = try Self.rules(
            #"""
            [
              {"collection": "Profile", "roles": [
                {"name": "owner", "apply_when": {"%%user.custom_data.role": "owner"},
                 "document_filters": {"read": {}, "write": {"ownerID": "%%user.id"}},
                 "read": true, "write": false, "insert": true, "delete": false,
                 "fields": {"bio": {"write": true}}, "additional_fields": {}},
                {"name": "visitor", "apply_when": {},
                 "document_filters": {"read": {"public": true}, "write": {"public": true}},
                 "read": false, "write": false, "insert": false, "delete": false,
                 "fields": {"name": {"read": true}, "likes": {"write": true}},
                 "additional_fields": {"read": false, "write": false}}
              ]},
              {"collection": "Secret", "roles": [{"name": "blind", "apply_when": {},
                 "document_filters": {"read": {}, "write": {}}, "read": false, "write": false,
                 "fields": {}, "additional_fields": {}}]}
            ]
            """#)
        let owner = rules.permissions(for: RuleUser(id: "ann", customData: ["role": .string("owner")]))["Profile"]!
        #expect(owner.read == .all, "a write filter adds to what it reads; read: true reads every object")
        #expect(owner.write == .matching(#"ownerID == "ann""#))
        #expect(owner.fields["email"] == .readOnly && owner.fields["bio"] == .readWrite)
        #expect(!owner.fields.hidesFields && owner.fields.protectsFields)

        let visitor = rules.permissions(for: RuleUser(id: "bo"))["Profile"]!
        #expect(
            visitor.read == .matching("public == true"), "field-level reads hold the objects document_filters select")
        #expect(visitor.write == .matching("public == true"))
        #expect(visitor.fields["name"] == .readOnly)
        #expect(visitor.fields["likes"] == .readWrite, "writing a field implies reading it")
        #expect(visitor.fields["email"] == FieldAccess.none)
        #expect(visitor.fields.hidesFields && visitor.fields.protectsFields)

        let blind = rules.permissions(for: RuleUser(id: "bo"))["Secret"]!
        #expect(
            blind.read == DocumentFilter.none && blind.write == DocumentFilter.none, "empty field rules grant nothing")

        // The flexible-sync form, with boolean grants: every object, the named fields.
        let legacy = try Self.rules(
            #"""
            {"rules": {"Profile": [{"name": "reader", "applyWhen": {}, "read": false, "write": false,
              "fields": {"name": {"read": true}}, "additional_fields": {"read": false, "write": false}}]}}
            """#
        ).permissions(for: RuleUser(id: "cy"))["Profile"]!
        #expect(legacy.read == .all && legacy.write == DocumentFilter.none)
        #expect(legacy.insert == false && legacy.delete == false)
        #expect(legacy.fields["name"] == .readOnly && legacy.fields["email"] == FieldAccess.none)
        // Without field-level rules nothing is hidden.
        #expect(try Self.rules(RChat.rules).permissions(for: RuleUser(id: "a"))["ChatMessage"]?.fields == .unrestricted)
    }

    @Test("Operators and expansions become predicates of the query language, with the user's values quoted")
    func filtersBecomePredicates() throws {
        let rules = try Self.rules(
            #"""
            {"rules": {"Note": [{"name": "r", "applyWhen": {},
              "read": {"$or": [{"shared": true}, {"owner": "%%user.id"}, {"level": {"$gte": 2, "$lt": 5.5}},
                               {"tag": {"$nin": ["x", "y"]}}, {"archivedAt": {"$exists": false}},
                               {"$nor": [{"owner": null}]}, {"team.name": "%%user.custom_data.team.name"}]},
              "write": false}]}}
            """#)
        let permissions = rules.permissions(
            for: RuleUser(id: #"say "hi"\"#, customData: ["team.name": .string("blue")]))
        guard case .matching(let predicate) = permissions["Note"]?.read else {
            Issue.record("no read filter")
            return
        }
        #expect(predicate.contains(#"owner == "say \"hi\"\\""#), "\(predicate)")
        #expect(predicate.contains("shared == true"))
        #expect(predicate.contains("(level >= 2) AND (level < 5.5)"), "\(predicate)")
        #expect(predicate.contains(#"NOT (tag IN {"x", "y"})"#))
        #expect(predicate.contains("archivedAt == nil"))
        #expect(predicate.contains("NOT (owner == nil)"))
        #expect(predicate.contains(#"team.name == "blue""#))
    }

    @Test("What the daemon does not support is refused at load time, with the path of the element at fault")
    func unsupportedIsRefused() {
        let cases: [(String, String)] = [
            (
                #"{"rules": {"Note": [{"name": "r", "applyWhen": {}, "read": {"text": {"$regex": "a"}}}]}}"#,
                #"rules.Note[0].read.text["$regex"]: operator $regex is not supported"#
            ),
            (
                #"{"rules": {"Note": [{"name": "r", "applyWhen": {}, "read": {"owner": "%%request.remoteIPAddress"}}]}}"#,
                "rules.Note[0].read.owner: expansion %%request.remoteIPAddress is not supported"
            ),
            (
                #"{"rules": {"Note": [{"name": "r", "applyWhen": {"owner": "%%user.id"}, "read": true}]}}"#,
                "rules.Note[0].applyWhen.owner: applyWhen cannot read the object's fields"
            ),
            (
                #"{"rules": {"Note": [{"name": "r", "applyWhen": {}, "read": true, "fields": {"secret": {"read": false}}}]}}"#,
                "rules.Note[0].fields.secret: has no effect: the role's read: true grants every field"
            ),
            (
                #"{"rules": {"Note": [{"name": "r", "applyWhen": {}, "read": {"owner": "%%user.id"}, "write": false, "#
                    + #""fields": {"title": {"read": true}}}]}}"#,
                "rules.Note[0]: field-level rules need read and write to be true or false in this form"
            ),
            (
                #"{"rules": {"Note": [{"name": "r", "applyWhen": {}, "read": false, "fields": {"_id": {"read": true}}}]}}"#,
                "rules.Note[0].fields._id: _id takes no field-level rule"
            ),
            (
                #"[{"collection": "Note", "roles": [{"name": "r", "apply_when": {}, "read": false, "#
                    + #""fields": {"place": {"read": true, "fields": {"city": {"read": false}}}}}]}]"#,
                "[0].roles[0].fields.place.fields: rules on the fields of an embedded object are not supported"
            ),
            (
                #"[{"collection": "Note", "roles": [{"name": "r", "apply_when": {}, "additional_fields": {"read": 1}}]}]"#,
                "[0].roles[0].additional_fields.read: must be true or false, not a number"
            ),
            (
                #"{"rules": {"Note": [{"name": "r", "applyWhen": {}, "reed": true}]}}"#,
                "rules.Note[0].reed: unknown key"
            ),
            (
                #"[{"collection": "Note", "roles": [{"name": "r", "apply_when": {}, "read": {"a": 1}}]}]"#,
                "[0].roles[0].read: must be true or false, not an object"
            ),
            (
                #"{"rules": {"Note": [{"name": "r", "applyWhen": {}, "read": 1}]}}"#,
                "rules.Note[0].read: a filter must be an object"
            ),
            (#"{"rules": {"Note": [}"#, "rules: invalid JSON at line 1, column 21"),
            (#"{"rules": {}, "extra": 1}"#, "extra: unknown key"),
        ]
        for (json, expected) in cases {
            let message = Self.error(json)
            #expect(message?.hasPrefix(expected) == true, "\(json) → \(message ?? "loaded")")
        }
    }

    @Test("Rules decode or are refused, never trap, on random damage of a valid document")
    func damagedRulesNeverTrap() {
        var random = SplitMix64(seed: 7)
        let original = Array(RChat.rules.utf8)
        var refused = 0
        for _ in 0..<2_000 {
            var bytes = original
            for _ in 0..<(1 + Int(random.next() % 4)) {
                let position = Int(random.next() % UInt64(bytes.count))
                switch random.next() % 3 {
                case 0: bytes[position] = UInt8(truncatingIfNeeded: random.next())
                case 1: bytes.remove(at: position)
                default: bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: position)
                }
            }
            do {
                let rules = try PermissionRules(json: bytes)
                _ = rules.permissions(for: RuleUser(id: "u"))
            } catch {
                refused += 1
                #expect(!error.message.isEmpty)
            }
        }
        #expect(refused > 0)
    }
}
