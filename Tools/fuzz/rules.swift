// Permission rules as JSON (what `tributaryd --rules` reads): each document loads or is refused with a message,
// never traps; rules that load resolve for any user, twice alike.
import Foundation
import TributaryModel

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: OpaquePointer?, _ argv: OpaquePointer?) -> CInt {
    let flexible = #"""
        {"rules": {"User": [{"name": "self", "applyWhen": {}, "read": {"_id": "%%user.id"}, "write": {"_id": "%%user.id"}}],
                   "Note": [{"name": "team", "applyWhen": {"%%user.custom_data.team": {"$in": ["a", "b"]}},
                             "read": {"$or": [{"shared": true}, {"level": {"$gte": 2, "$lt": 5.5}}, {"tag": {"$nin": ["x"]}}]},
                             "write": {"$and": [{"owner": "%%user.id"}, {"archived": {"$exists": false}}]}}]},
         "defaultRoles": [{"name": "all", "applyWhen": {}, "read": {}, "write": {}}]}
        """#
    let collections = #"""
        [{"collection": "Task", "database": "db", "roles": [{"name": "owner", "apply_when": {"%%true": true},
           "document_filters": {"read": {"$nor": [{"hidden": true}]}, "write": {"owner": "%%user.id"}},
           "read": true, "write": true, "insert": true, "delete": false, "search": true,
           "fields": {}, "additional_fields": {}}]},
         {"roles": [{"name": "none", "apply_when": {}, "document_filters": {"read": {}, "write": {}},
           "read": false, "write": false, "insert": false, "delete": false}]}]
        """#
    let fields = #"""
        [{"collection": "Profile", "roles": [{"name": "visitor", "apply_when": {},
           "document_filters": {"read": {"public": true}, "write": {"owner": "%%user.id"}},
           "read": false, "write": false, "insert": true, "delete": false,
           "fields": {"name": {"read": true}, "bio": {"write": true}, "place": {"read": true, "fields": {}}},
           "additional_fields": {"read": false, "write": false}}]},
         {"roles": [{"name": "reader", "apply_when": {}, "document_filters": {"read": {}, "write": {}},
           "read": true, "write": false, "fields": {"notes": {"write": true}}}]}]
        """#
    let legacyFields = #"""
        {"rules": {"Profile": [{"name": "r", "applyWhen": {}, "read": false, "write": false,
                                "fields": {"name": {"read": true}}, "additional_fields": {"write": true}}]}}
        """#
    writeSeeds([Array(flexible.utf8), Array(collections.utf8), Array(fields.utf8), Array(legacyFields.utf8)])
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = input(data, size)
    let rules: PermissionRules
    do {
        rules = try PermissionRules(json: bytes)
    } catch {
        if error.message.isEmpty { wrong("rules refused without a message") }
        return 0
    }
    let users = [
        RuleUser(id: #"a "quoted" \ user"#, customData: ["team": .string("a"), "level": .int(3)]),
        RuleUser(id: "", customData: [:]),
    ]
    for user in users {
        let permissions = rules.permissions(for: user)
        guard permissions == rules.permissions(for: user) else { wrong("the same user resolved two ways") }
        for (_, type) in permissions.types {
            for filter in [type.read, type.write] {
                if case .matching(let predicate) = filter, predicate.isEmpty { wrong("an empty predicate") }
            }
            for access in type.fields.named.values + [type.fields.others] where access.write && !access.read {
                wrong("a field written but not read")
            }
            if type.fields.hidesFields == false, type.fields.named.values.contains(where: { !$0.read }) {
                wrong("a hidden field not counted")
            }
        }
    }
    return 0
}
