// Permission rules in the JSON forms Atlas App Services wrote them: which objects each user's session may read and
// write. The rules are parsed and checked once (anything not supported is refused, with the path of the element at
// fault); a session's role is chosen per type when it starts, and its filters become predicates of the Realm Query
// Language with the user's values in place, which the daemon evaluates like subscriptions.

/// Which objects of a type a permission selects, for one session: all of them, none, or those a predicate in the
/// Realm Query Language matches.
public enum DocumentFilter: Sendable, Hashable, CustomStringConvertible {
    case all
    case none
    /// The objects the predicate matches (`authorID == "u1"`).
    case matching(String)

    /// The objects both select.
    public func and(_ other: DocumentFilter) -> DocumentFilter {
        if self == other { return self }
        return switch (self, other) {
        case (.none, _), (_, .none): .none
        case (.all, let filter), (let filter, .all): filter
        case (.matching(let a), .matching(let b)): .matching("(\(a)) AND (\(b))")
        }
    }

    /// The objects either selects.
    public func or(_ other: DocumentFilter) -> DocumentFilter {
        if self == other { return self }
        return switch (self, other) {
        case (.all, _), (_, .all): .all
        case (.none, let filter), (let filter, .none): filter
        case (.matching(let a), .matching(let b)): .matching("(\(a)) OR (\(b))")
        }
    }

    public var description: String {
        switch self {
        case .all: "TRUEPREDICATE"
        case .none: "FALSEPREDICATE"
        case .matching(let predicate): predicate
        }
    }
}

/// Whether a role may read and write one field of the objects it holds.
public struct FieldAccess: Sendable, Hashable {
    /// Whether the field's value is sent to the session.
    public var read: Bool
    /// Whether the session's writes may change the field's value.
    public var write: Bool

    /// Writing a field implies reading it: `write` makes `read` true.
    public init(read: Bool, write: Bool) {
        self.read = read || write
        self.write = write
    }

    /// Neither read nor written: the field is hidden.
    public static let none = FieldAccess(read: false, write: false)
    /// Read, not written.
    public static let readOnly = FieldAccess(read: true, write: false)
    /// Read and written.
    public static let readWrite = FieldAccess(read: true, write: true)
}

/// Field-level permissions: which fields of the objects a role holds it may read and write. A field the role may not
/// read is left out of everything the session is sent (the device reads its default); a field it may not write keeps
/// its value through the session's writes. The primary key is always readable.
public struct FieldPermissions: Sendable, Hashable {
    /// The fields named in the rules (`fields`).
    public var named: [String: FieldAccess]
    /// Every other field (`additional_fields`).
    public var others: FieldAccess

    public init(named: [String: FieldAccess] = [:], others: FieldAccess) {
        self.named = named
        self.others = others
    }

    /// Every field readable and writable: what a role without field-level rules gives.
    public static let unrestricted = FieldPermissions(others: .readWrite)

    /// The access to the field `name`.
    public subscript(name: String) -> FieldAccess { named[name] ?? others }

    /// Whether some field cannot be read.
    public var hidesFields: Bool { !others.read || named.values.contains { !$0.read } }

    /// Whether some field cannot be written.
    public var protectsFields: Bool { !others.write || named.values.contains { !$0.write } }

    /// Whether any field can be read (or written).
    var grantsReading: Bool { others.read || named.values.contains { $0.read } }

    /// Whether any field can be written.
    var grantsWriting: Bool { others.write || named.values.contains { $0.write } }
}

/// What a session's role lets it do with the objects of one type.
public struct TypePermissions: Sendable, Hashable {
    /// The role's name, for messages.
    public var role: String
    /// The objects the session may read, and so receive.
    public var read: DocumentFilter
    /// The objects the session may change: an object must be among them before and after the change.
    public var write: DocumentFilter
    /// Whether the session may create objects (which must then be among `write`).
    public var insert: Bool
    /// Whether the session may erase objects (which must be among `write`).
    public var delete: Bool
    /// Which fields of the objects it holds the session may read and write.
    public var fields: FieldPermissions

    public init(
        role: String, read: DocumentFilter, write: DocumentFilter, insert: Bool, delete: Bool,
        fields: FieldPermissions = .unrestricted
    ) {
        self.role = role
        self.read = read
        self.write = write
        self.insert = insert
        self.delete = delete
        self.fields = fields
    }
}

/// A session's permissions, by type. A type without an entry is closed to the session: no role applied to it.
public struct SessionPermissions: Sendable, Hashable {
    public var types: [String: TypePermissions]
    /// The permissions of the types `types` does not name (the default roles'), or `nil`: closed.
    public var others: TypePermissions?

    public init(types: [String: TypePermissions], others: TypePermissions? = nil) {
        self.types = types
        self.others = others
    }

    /// The permissions on `type`, or `nil` when the session may neither read nor write it.
    public subscript(type: String) -> TypePermissions? { types[type] ?? others }

    /// `subscriptions`, each limited to what the session may read: an object is held when a subscription selects it
    /// and the session may read it. A subscription on a type the session may not read selects nothing and is left out.
    public func readable(_ subscriptions: [Subscription]) -> [Subscription] {
        subscriptions.compactMap { subscription in
            switch self[subscription.type]?.read ?? .none {
            case .none: return nil
            case .all: return subscription
            case .matching(let predicate):
                var limited = subscription
                limited.query = "(\(subscription.query)) AND (\(predicate))"
                return limited
            }
        }
    }
}

/// The user a session's token names, as rules see it (`%%user`).
public struct RuleUser: Sendable, Hashable {
    /// `%%user.id`: the token's subject.
    public var id: String
    /// `%%user.custom_data`: values by dotted path (`team.id`).
    public var customData: [String: Value]

    public init(id: String, customData: [String: Value] = [:]) {
        self.id = id
        self.customData = customData
    }
}

/// Rules that cannot be loaded: the message names the element at fault by its path in the document
/// (`rules.ChatMessage[0].write.$regex`).
public struct RulesError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String

    public init(_ message: String) { self.message = message }

    public var description: String { message }
}

/// Permission rules: per type, roles tried in order; the first whose `applyWhen` holds for the session's user is
/// its role for that type. Accepted forms:
///
/// - the flexible-sync form: `{"rules": {"Type": [role, ...]}, "defaultRoles": [role, ...]}`, each role
///   `{"name", "applyWhen", "read", "write"}` with `read` and `write` either a boolean or a filter (a write filter
///   also grants reading what it selects);
/// - the later per-collection form, as App Services exports it (one `rules.json` per collection, and a
///   `default_rule.json`), given as an array of those documents: `[{"collection": "Type", "roles": [role, ...]},
///   {"roles": [role, ...]}]`, each role `{"name", "apply_when", "document_filters": {"read", "write"}, "read",
///   "write", "insert", "delete", "search"}` with boolean `read`, `write`, `insert` and `delete`.
///
/// Filters are MongoDB query documents over the object's fields: equality, `$eq`, `$ne`, `$gt`, `$gte`, `$lt`,
/// `$lte`, `$in`, `$nin`, `$exists`, `$and`, `$or`, `$nor`. Values may be expansions: `%%user.id`,
/// `%%user.custom_data.<path>`, `%%true`, `%%false`. `applyWhen` tests the user only (`{}` always holds).
///
/// Field-level rules, in both forms: `"fields": {"name": {"read": bool, "write": bool}}` for named fields and
/// `"additional_fields": {"read": bool, "write": bool}` for the others (absent: neither). They apply when the role's
/// document-level `read` or `write` does not already grant every field: `read: true` makes every field readable,
/// `write: true` every field writable; writing a field implies reading it. The role holds the objects its document
/// filters select as soon as it may read some field of them. In the flexible-sync form, a role with field-level rules
/// gives `read` and `write` as booleans (document filters with field-level rules are the per-collection form's
/// `document_filters`). Rules on the fields of embedded objects and on `_id` are refused.
public struct PermissionRules: Sendable {
    /// A role as loaded.
    struct Role: Sendable {
        var name: String
        var applyWhen: Filter
        var read: Filter
        var write: Filter
        var insert: Bool
        var delete: Bool
        var fields: FieldPermissions = .unrestricted
    }

    /// A filter: over an object's fields (documents), or over the user alone (`applyWhen`).
    indirect enum Filter: Sendable {
        case constant(Bool)
        case and([Filter])
        case or([Filter])
        case not(Filter)
        /// `subject op operand`: the subject is a field path in document filters, an expansion in `applyWhen`.
        case comparison(subject: Operand, op: Operator, operand: Operand)
        case member(subject: Operand, of: [Operand], negated: Bool)
        case exists(field: String, Bool)
    }

    enum Operator: String, Sendable {
        case equal = "=="
        case notEqual = "!="
        case greater = ">"
        case greaterEqual = ">="
        case less = "<"
        case lessEqual = "<="
    }

    enum Operand: Sendable {
        case field(String)
        case literal(Value)
        case userID
        case customData(String)
    }

    var roles: [(type: String, roles: [Role])]
    var defaultRoles: [Role]

    /// The types the rules name, in the order they are written.
    public var types: [String] { roles.map(\.type) }

    /// Loads rules from their JSON text.
    ///
    /// - Throws: ``RulesError`` naming the element at fault: JSON that does not parse, an unknown key, an operator or
    ///   expansion not supported, a value of the wrong kind.
    public init(json bytes: [UInt8]) throws(RulesError) {
        let document: JSONValue
        do {
            var parser = JSONParser(bytes, subject: "rules")
            document = try parser.parseDocument()
        } catch {
            throw RulesError(error.message)
        }
        var loader = RulesLoader()
        try loader.load(document)
        roles = loader.roles
        defaultRoles = loader.defaultRoles
    }

    /// The session's permissions for `user`: per type, the first role whose `applyWhen` holds.
    public func permissions(for user: RuleUser) -> SessionPermissions {
        func permissions(_ roles: [Role]) -> TypePermissions? {
            guard let role = roles.first(where: { Self.holds($0.applyWhen, for: user) }) else { return nil }
            let write = Self.resolve(role.write, for: user)
            return TypePermissions(
                role: role.name, read: Self.resolve(role.read, for: user).or(write), write: write,
                insert: role.insert && write != .none, delete: role.delete && write != .none, fields: role.fields)
        }
        var types: [String: TypePermissions] = [:]
        for (type, roles) in roles {
            // A type the rules name but no role of which applies is closed, whatever the default roles say.
            types[type] =
                permissions(roles)
                ?? TypePermissions(
                    role: "(none)", read: .none, write: .none, insert: false, delete: false)
        }
        return SessionPermissions(types: types, others: permissions(defaultRoles))
    }

    // MARK: Resolving for a user

    static func value(of operand: Operand, for user: RuleUser) -> Value? {
        switch operand {
        case .field: nil
        case .literal(let value): value
        case .userID: .string(user.id)
        case .customData(let path): user.customData[path] ?? .null
        }
    }

    /// Whether a filter over the user alone holds.
    static func holds(_ filter: Filter, for user: RuleUser) -> Bool {
        switch filter {
        case .constant(let value): return value
        case .and(let terms): return terms.allSatisfy { holds($0, for: user) }
        case .or(let terms): return terms.contains { holds($0, for: user) }
        case .not(let inner): return !holds(inner, for: user)
        case .comparison(let subject, let op, let operand):
            guard let left = value(of: subject, for: user), let right = value(of: operand, for: user) else {
                return false
            }
            return compare(left, op, right)
        case .member(let subject, let values, let negated):
            guard let left = value(of: subject, for: user) else { return false }
            let found = values.contains { value(of: $0, for: user).map { compare(left, .equal, $0) } ?? false }
            return found != negated
        case .exists(_, let wanted):
            return !wanted
        }
    }

    private static func compare(_ left: Value, _ op: Operator, _ right: Value) -> Bool {
        let order: Int?
        switch (left, right) {
        case (.string(let a), .string(let b)): order = a < b ? -1 : (a == b ? 0 : 1)
        case (.bool(let a), .bool(let b)): order = a == b ? 0 : nil
        case (.null, .null): order = 0
        default:
            if let a = left.numeric, let b = right.numeric {
                order = a < b ? -1 : (a == b ? 0 : 1)
            } else {
                order = nil
            }
        }
        switch op {
        case .equal: return order == 0
        case .notEqual: return order != 0
        case .greater: return order.map { $0 > 0 } ?? false
        case .greaterEqual: return order.map { $0 >= 0 } ?? false
        case .less: return order.map { $0 < 0 } ?? false
        case .lessEqual: return order.map { $0 <= 0 } ?? false
        }
    }

    /// A document filter as a predicate of the Realm Query Language, with the user's values in place.
    static func resolve(_ filter: Filter, for user: RuleUser) -> DocumentFilter {
        switch filter {
        case .constant(let value): return value ? .all : .none
        case .and(let terms): return terms.reduce(DocumentFilter.all) { $0.and(resolve($1, for: user)) }
        case .or(let terms): return terms.reduce(DocumentFilter.none) { $0.or(resolve($1, for: user)) }
        case .not(let inner):
            switch resolve(inner, for: user) {
            case .all: return .none
            case .none: return .all
            case .matching(let predicate): return .matching("NOT (\(predicate))")
            }
        case .comparison(let subject, let op, let operand):
            return .matching("\(text(subject, for: user)) \(op.rawValue) \(text(operand, for: user))")
        case .member(let subject, let values, let negated):
            guard !values.isEmpty else { return negated ? .all : .none }
            let list = values.map { text($0, for: user) }.joined(separator: ", ")
            let predicate = "\(text(subject, for: user)) IN {\(list)}"
            return .matching(negated ? "NOT (\(predicate))" : predicate)
        case .exists(let field, let wanted):
            return .matching("\(field) \(wanted ? "!=" : "==") nil")
        }
    }

    private static func text(_ operand: Operand, for user: RuleUser) -> String {
        switch operand {
        case .field(let path): return path
        default: return literal(value(of: operand, for: user) ?? .null)
        }
    }

    /// A value as a literal of the Realm Query Language.
    static func literal(_ value: Value) -> String {
        switch value {
        case .null: return "nil"
        case .bool(let bool): return bool ? "true" : "false"
        case .int(let int): return String(int)
        case .double(let double):
            return double.isFinite ? "\(double)" : (double.isNaN ? "nan" : (double > 0 ? "inf" : "-inf"))
        case .string(let string):
            // The query language reads JSON's escapes (\", \\, \n, \r, \t, \uXXXX).
            var quoted = ""
            JSONText.quote(string, into: &quoted)
            return quoted
        default: return "nil"
        }
    }
}

extension Value {
    /// The value as a number, for comparing numbers of either kind.
    fileprivate var numeric: Double? {
        switch self {
        case .int(let int): Double(int)
        case .double(let double): double
        default: nil
        }
    }
}

/// Reads the JSON forms into roles, refusing what it does not support.
private struct RulesLoader {
    var roles: [(type: String, roles: [PermissionRules.Role])] = []
    var defaultRoles: [PermissionRules.Role] = []
    private var hasDefault = false

    mutating func load(_ document: JSONValue) throws(RulesError) {
        switch document {
        case .object(let members) where members.contains(where: { $0.key == "rules" || $0.key == "defaultRoles" }):
            for (key, value) in members {
                switch key {
                case "rules":
                    guard case .object(let types) = value else { throw invalid("rules", "must be an object of types") }
                    for (type, list) in types {
                        roles.append((type, try roleList(list, at: jsonPath("rules", type), unified: false)))
                    }
                case "defaultRoles":
                    defaultRoles = try roleList(value, at: "defaultRoles", unified: false)
                default:
                    throw invalid(key, "unknown key (the flexible-sync form has rules and defaultRoles)")
                }
            }
        case .array(let files):
            for (index, file) in files.enumerated() { try loadCollection(file, at: "[\(index)]") }
        case .object:
            try loadCollection(document, at: "rules")
        default:
            throw invalid("rules", "must be an object (rules and defaultRoles) or an array of collection rules")
        }
    }

    private mutating func loadCollection(_ document: JSONValue, at path: String) throws(RulesError) {
        guard case .object(let members) = document else { throw invalid(path, "must be an object") }
        var collection: String?
        var list: [PermissionRules.Role] = []
        for (key, value) in members {
            let here = jsonPath(path, key)
            switch key {
            case "collection":
                guard case .string(let name) = value, !name.isEmpty else { throw invalid(here, "must be a type name") }
                collection = name
            case "database", "id", "_id", "schema":
                continue
            case "roles": list = try roleList(value, at: here, unified: true)
            case "filters":
                guard case .array(let filters) = value, filters.isEmpty else {
                    throw invalid(here, "query filters are not supported: use the roles' document_filters")
                }
            default: throw invalid(here, "unknown key (a collection's rules have collection, database and roles)")
            }
        }
        if let collection {
            guard !roles.contains(where: { $0.type == collection }) else {
                throw invalid(path, "a second set of rules for \(collection)")
            }
            roles.append((collection, list))
        } else {
            guard !hasDefault else { throw invalid(path, "a second default rule") }
            hasDefault = true
            defaultRoles = list
        }
    }

    private func roleList(_ value: JSONValue, at path: String, unified: Bool) throws(RulesError)
        -> [PermissionRules.Role]
    {
        guard case .array(let items) = value else { throw invalid(path, "must be an array of roles") }
        var result: [PermissionRules.Role] = []
        for (index, item) in items.enumerated() {
            result.append(try role(item, at: "\(path)[\(index)]", unified: unified))
        }
        return result
    }

    private func role(_ value: JSONValue, at path: String, unified: Bool) throws(RulesError) -> PermissionRules.Role {
        guard case .object(let members) = value else { throw invalid(path, "a role must be an object") }
        var role = PermissionRules.Role(
            name: "", applyWhen: .constant(true), read: .constant(false), write: .constant(false), insert: !unified,
            delete: !unified)
        var readGrant = false
        var writeGrant = false
        var documentRead: PermissionRules.Filter = .constant(true)
        var documentWrite: PermissionRules.Filter = .constant(true)
        var namedFields: [String: FieldAccess] = [:]
        var otherFields: FieldAccess?
        for (key, value) in members {
            let here = jsonPath(path, key)
            switch (key, unified) {
            case ("name", _):
                guard case .string(let name) = value else { throw invalid(here, "must be a string") }
                role.name = name
            case ("applyWhen", false), ("apply_when", true):
                role.applyWhen = try filter(value, at: here, userOnly: true)
            case ("read", false): role.read = try grant(value, at: here)
            case ("write", false): role.write = try grant(value, at: here)
            case ("read", true): readGrant = try boolean(value, at: here)
            case ("write", true): writeGrant = try boolean(value, at: here)
            case ("insert", true): role.insert = try boolean(value, at: here)
            case ("delete", true): role.delete = try boolean(value, at: here)
            case ("search", true): _ = try boolean(value, at: here)
            case ("document_filters", true):
                guard case .object(let filters) = value else { throw invalid(here, "must be an object") }
                for (name, filterValue) in filters {
                    switch name {
                    case "read": documentRead = try filter(filterValue, at: jsonPath(here, name), userOnly: false)
                    case "write": documentWrite = try filter(filterValue, at: jsonPath(here, name), userOnly: false)
                    default: throw invalid(jsonPath(here, name), "unknown key (document_filters has read and write)")
                    }
                }
            case ("fields", _):
                guard case .object(let fields) = value else { throw invalid(here, "must be an object of fields") }
                for (name, access) in fields {
                    let at = jsonPath(here, name)
                    guard name != "_id" else {
                        throw invalid(at, "_id takes no field-level rule: a primary key is always readable")
                    }
                    guard isFieldName(name) else { throw invalid(at, "must be the name of a property") }
                    namedFields[name] = try fieldAccess(access, at: at, nested: true)
                }
            case ("additional_fields", _):
                otherFields = try fieldAccess(value, at: here, nested: false)
            default:
                throw invalid(
                    here,
                    unified
                        ? "unknown key (a role has name, apply_when, document_filters, read, write, insert, delete)"
                        : "unknown key (a role has name, applyWhen, read and write)")
            }
        }
        // `"fields": {}, "additional_fields": {}` (what App Services writes for a role without them) grant nothing.
        let fieldLevel = !namedFields.isEmpty || otherFields.map { $0.read || $0.write } == true
        if !unified {
            guard fieldLevel else { return role }
            // Field-level rules refine boolean grants only: which objects a role holds is the per-collection form's
            // document_filters.
            guard case .constant(let read) = role.read, case .constant(let write) = role.write else {
                throw invalid(
                    path,
                    "field-level rules need read and write to be true or false in this form; give document filters "
                        + "with field-level rules in the per-collection form (document_filters)")
            }
            readGrant = read
            writeGrant = write
            documentRead = .constant(true)
            documentWrite = .constant(true)
            // As this form's write grant implied them: creating and erasing whole objects.
            role.insert = write
            role.delete = write
        }
        // A field rule the document-level grant overrides would be ignored: refused, so that no one relies on it.
        for (name, access) in namedFields.sorted(by: { $0.key < $1.key }) {
            let grant = !access.read && readGrant ? "read" : (!access.write && writeGrant ? "write" : nil)
            if let grant {
                throw invalid(
                    jsonPath(jsonPath(path, "fields"), name),
                    "has no effect: the role's \(grant): true grants every field; set \(grant) to false to let "
                        + "field-level rules decide")
            }
        }
        var fields = FieldPermissions.unrestricted
        if !(readGrant && writeGrant) {
            fields = FieldPermissions(named: namedFields, others: otherFields ?? .none)
            if readGrant || writeGrant {
                fields.others = FieldAccess(read: true, write: fields.others.write || writeGrant)
                for name in fields.named.keys {
                    fields.named[name] = FieldAccess(read: true, write: fields.named[name]!.write || writeGrant)
                }
            }
        }
        role.fields = fields
        role.read = readGrant || fields.grantsReading ? documentRead : .constant(false)
        role.write = writeGrant || fields.grantsWriting ? documentWrite : .constant(false)
        return role
    }

    /// A field's `{"read": bool, "write": bool}` (absent: false).
    private func fieldAccess(_ value: JSONValue, at path: String, nested: Bool) throws(RulesError) -> FieldAccess {
        guard case .object(let members) = value else { throw invalid(path, "must be an object with read and write") }
        var read = false
        var write = false
        for (key, value) in members {
            let here = jsonPath(path, key)
            switch key {
            case "read": read = try boolean(value, at: here)
            case "write": write = try boolean(value, at: here)
            case "fields" where nested:
                guard case .object(let inner) = value, inner.isEmpty else {
                    throw invalid(
                        here,
                        "rules on the fields of an embedded object are not supported; give the property's as a whole")
                }
            default: throw invalid(here, "unknown key (a field's rule has read and write)")
            }
        }
        return FieldAccess(read: read, write: write)
    }

    private func boolean(_ value: JSONValue, at path: String) throws(RulesError) -> Bool {
        guard case .bool(let bool) = value else { throw invalid(path, "must be true or false, not \(value.kindName)") }
        return bool
    }

    /// A `read` or `write` of the flexible-sync form: a boolean or a filter.
    private func grant(_ value: JSONValue, at path: String) throws(RulesError) -> PermissionRules.Filter {
        if case .bool(let bool) = value { return .constant(bool) }
        return try filter(value, at: path, userOnly: false)
    }

    /// A filter document. `userOnly`: `applyWhen`, whose subjects are expansions (it cannot read the object).
    private func filter(_ value: JSONValue, at path: String, userOnly: Bool) throws(RulesError)
        -> PermissionRules.Filter
    {
        guard case .object(let members) = value else {
            throw invalid(path, "a filter must be an object, not \(value.kindName)")
        }
        var terms: [PermissionRules.Filter] = []
        for (key, value) in members {
            let here = jsonPath(path, key)
            switch key {
            case "$and", "$or", "$nor":
                guard case .array(let items) = value, !items.isEmpty else {
                    throw invalid(here, "must be a non-empty array of filters")
                }
                var parts: [PermissionRules.Filter] = []
                for (index, item) in items.enumerated() {
                    parts.append(try filter(item, at: "\(here)[\(index)]", userOnly: userOnly))
                }
                terms.append(key == "$and" ? .and(parts) : key == "$or" ? .or(parts) : .not(.or(parts)))
            case let key where key.hasPrefix("$"):
                throw invalid(here, "operator \(key) is not supported here (supported: $and, $or, $nor)")
            default:
                let subject: PermissionRules.Operand
                if key.hasPrefix("%%") {
                    guard userOnly else {
                        throw invalid(here, "an expansion cannot be a field name in a document filter")
                    }
                    subject = try expansion(key, at: here)
                } else {
                    guard !userOnly else {
                        throw invalid(
                            here, "applyWhen cannot read the object's fields; test %%user expansions only")
                    }
                    guard isFieldPath(key) else { throw invalid(here, "not a field name") }
                    subject = .field(key)
                }
                terms.append(try condition(subject, value, at: here))
            }
        }
        return terms.count == 1 ? terms[0] : .and(terms)
    }

    /// A field's (or expansion's) condition: a value (equality), or an object of operators.
    private func condition(_ subject: PermissionRules.Operand, _ value: JSONValue, at path: String) throws(RulesError)
        -> PermissionRules.Filter
    {
        guard case .object(let operators) = value else {
            return .comparison(subject: subject, op: .equal, operand: try operand(value, at: path))
        }
        guard !operators.isEmpty, operators.allSatisfy({ $0.key.hasPrefix("$") }) else {
            throw invalid(path, "equality with an object is not supported; use operators ($eq, $in, ...)")
        }
        var terms: [PermissionRules.Filter] = []
        for (name, argument) in operators {
            let here = jsonPath(path, name)
            let comparison: PermissionRules.Operator?
            switch name {
            case "$eq": comparison = .equal
            case "$ne": comparison = .notEqual
            case "$gt": comparison = .greater
            case "$gte": comparison = .greaterEqual
            case "$lt": comparison = .less
            case "$lte": comparison = .lessEqual
            default: comparison = nil
            }
            if let comparison {
                terms.append(.comparison(subject: subject, op: comparison, operand: try operand(argument, at: here)))
                continue
            }
            switch name {
            case "$in", "$nin":
                guard case .array(let items) = argument else { throw invalid(here, "must be an array of values") }
                var values: [PermissionRules.Operand] = []
                for (index, item) in items.enumerated() { values.append(try operand(item, at: "\(here)[\(index)]")) }
                terms.append(.member(subject: subject, of: values, negated: name == "$nin"))
            case "$exists":
                guard case .field(let field) = subject else { throw invalid(here, "applies to a field") }
                terms.append(.exists(field: field, try boolean(argument, at: here)))
            default:
                throw invalid(
                    here,
                    "operator \(name) is not supported (supported: $eq, $ne, $gt, $gte, $lt, $lte, $in, $nin, $exists)")
            }
        }
        return terms.count == 1 ? terms[0] : .and(terms)
    }

    /// A value in a filter: a JSON scalar, or an expansion.
    private func operand(_ value: JSONValue, at path: String) throws(RulesError) -> PermissionRules.Operand {
        switch value {
        case .null: return .literal(.null)
        case .bool(let bool): return .literal(.bool(bool))
        case .number(let text):
            if let int = Int64(text) { return .literal(.int(int)) }
            guard let double = Double(text) else { throw invalid(path, "the number \(text) is out of range") }
            return .literal(.double(double))
        case .string(let text) where text.hasPrefix("%%"): return try expansion(text, at: path)
        case .string(let text): return .literal(.string(text))
        case .array, .object: throw invalid(path, "must be a value (a string, number, boolean, null or %%expansion)")
        }
    }

    private func expansion(_ text: String, at path: String) throws(RulesError) -> PermissionRules.Operand {
        switch text {
        case "%%user.id": return .userID
        case "%%true": return .literal(.bool(true))
        case "%%false": return .literal(.bool(false))
        default:
            let prefix = "%%user.custom_data."
            if text.hasPrefix(prefix), isFieldPath(String(text.dropFirst(prefix.count))) {
                return .customData(String(text.dropFirst(prefix.count)))
            }
            throw invalid(
                path,
                "expansion \(text) is not supported (supported: %%user.id, %%user.custom_data.<path>, %%true, %%false)")
        }
    }

    private func isFieldName(_ text: String) -> Bool { !text.contains(".") && isFieldPath(text) }

    private func isFieldPath(_ text: String) -> Bool {
        !text.isEmpty
            && text.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { part in
                !part.isEmpty
                    && part.unicodeScalars.allSatisfy {
                        $0 == "_" || $0.properties.isAlphabetic || ("0"..."9").contains($0)
                    }
            }
    }

    private func invalid(_ path: String, _ message: String) -> RulesError {
        RulesError("\(path): \(message)")
    }
}
