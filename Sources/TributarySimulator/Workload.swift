import Foundation
import Tributary
public import TributaryModel

/// The schema and the random writes of a simulation: a small key space, so that conflicts are common.
public enum Workload {
    /// 3 top-level types × 20 keys, lists of values, a set, dictionaries of values and of embedded objects, mixed
    /// values, links and lists of links, two levels of embedded objects and lists of embedded objects.
    public static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "Card",
                properties: [
                    .scalar("_id", .string), .scalar("title", .string, default: ""),
                    .scalar("count", .int, default: 0), .scalar("done", .bool, default: false),
                    .scalar("note", .string, optional: true),
                    Property("tags", .scalar(.string), list: true),
                    // Values from a small pool, so that replicas add and remove the same ones concurrently.
                    Property("flags", .scalar(.string), set: true),
                    // Written with values of every type: which one a replica holds must not depend on the order.
                    .scalar("anything", .mixed),
                    // Keys from a small pool: replicas set and erase the same keys concurrently.
                    Property("counts", .scalar(.int), dictionary: true),
                    // Embedded objects under keys from the same pool, set, erased and edited field by field.
                    Property("places", .embedded("Item"), dictionary: true),
                    Property("owner", .link("Member")),
                    Property("members", .link("Member"), list: true),
                    Property("box", .embedded("Box")),
                    Property("items", .embedded("Item"), list: true),
                ]),
            ObjectSchema(
                name: "Member",
                properties: [
                    .scalar("_id", .string), .scalar("name", .string, optional: true),
                    .scalar("score", .int, default: 0),
                ]),
            ObjectSchema(
                name: "Board",
                properties: [
                    .scalar("_id", .int), .scalar("name", .string, optional: true),
                    Property("cards", .link("Card"), list: true), Property("labels", .scalar(.string), list: true),
                ]),
            // Removed and added back by migrations while replicas write its objects.
            ObjectSchema(
                name: "Note", properties: [.scalar("_id", .string), .scalar("text", .string, optional: true)]),
            .embedded(
                "Box",
                properties: [
                    .scalar("label", .string, optional: true), .scalar("size", .int, optional: true),
                    Property("inner", .embedded("Inner")),
                ]),
            .embedded("Inner", properties: [.scalar("tag", .string, optional: true)]),
            .embedded(
                "Item", properties: [.scalar("text", .string, optional: true), .scalar("done", .bool, default: false)]),
        ])

    /// Properties a simulation may add to Card. Each name has one definition, so concurrent additions merge.
    static let extraProperties: [Property] = [
        .scalar("extraText", .string, optional: true), .scalar("extraNumber", .int, optional: true),
        .scalar("extraFlag", .bool, optional: true), .scalar("extraWhen", .date, optional: true),
        .scalar("extraAmount", .decimal, optional: true),
    ]

    /// Extra properties a simulation may remove (a migration dropping them), concurrently with additions of them and
    /// writes to them.
    static let removableProperties = ["extraNumber", "extraFlag", "extraWhen"]

    /// The one rename a simulation makes (replicas may make it concurrently, as each runs the migration), and the new
    /// name added by replicas that have not seen it (new installs of the app version that renamed). The old name is
    /// not added back once a replica has seen the rename, and neither name is removed: a rename against a concurrent
    /// removal is refused (docs/MergeSemantics.md), which the simulation does not model.
    static let rename = (from: "extraText", to: "renamedText")

    /// A value for a write to an extra property.
    static func extraValue(_ name: String, _ number: Int) -> Value {
        switch name {
        case "extraNumber": .int(Int64(number))
        case "extraFlag": .bool(number % 2 == 0)
        case "extraWhen": .date(Date(timeIntervalSince1970: Double(number)))
        // Written in several forms (12.50 and 12.5 are one value): replicas must store them alike.
        case "extraAmount": .decimal(Decimal(sign: .plus, exponent: -(number % 3), significand: Decimal(number * 10)))
        default: .string("extra-\(number)")
        }
    }

    /// A default for each extra property, which some additions of it give.
    static let extraDefaults: [String: Value] = [
        "extraText": "none", "extraNumber": 7, "extraFlag": false, "extraWhen": .date(Date(timeIntervalSince1970: 0)),
        "extraAmount": .decimal(Decimal(string: "0.10")!),
    ]

    static let keysPerType = 20

    static func key(type: String, index: Int) -> PrimaryKey {
        type == "Board" ? .int(Int64(index)) : .string("\(type.lowercased())\(index)")
    }

    /// Whether a partial replica holds an object: every other key, and no boards.
    public static func partialHolds(_ type: String, _ key: PrimaryKey) -> Bool {
        guard type != "Board" else { return false }
        guard case .string(let text) = key, let number = Int(text.drop { !$0.isNumber }) else { return false }
        return number % 2 == 0
    }

    /// Operation kinds and their weights (after realm-core's fuzz tester).
    enum Kind: CaseIterable {
        case create, set, erase, addInteger, listInsert, listSet, listErase, listMove, listClear, embedded, link
        case setAdd, setRemove, dictionarySet, dictionaryErase
        case schemaChange

        var weight: Int {
            switch self {
            case .create: 100
            case .set: 80
            case .erase: 30
            case .addInteger: 40
            case .listInsert: 100
            case .listSet: 80
            case .listErase: 70
            case .listMove: 50
            case .listClear: 1
            case .embedded: 20
            case .link: 40
            case .setAdd: 40
            case .setRemove: 25
            case .dictionarySet: 40
            case .dictionaryErase: 25
            case .schemaChange: 2
            }
        }
    }
}

/// What the workload wrote, for the checks that do not trust the merge engine.
struct WriteJournal {
    /// Unique strings inserted into lists of values, by object.
    var listValues: [String: Set<String>] = [:]
    /// Lists of values (`Card[key].tags`) on which anything other than an insert or a move happened (an erase, a set
    /// or a clear of an element), and objects (`Card[key]`) whose lists all may have shrunk (an erase of the object,
    /// an upsert that sets whole lists): only lists never shrunk must hold every insert.
    var listsShrunk = Set<String>()

    /// Values added to sets (`Card[key].flags`), by object, and the values removed from them (`Card[key].flags.value`):
    /// a value added and never removed from an object never erased must be in the set.
    var setAdds: [String: Set<String>] = [:]
    var setRemovals = Set<String>()
    /// Keys set in dictionaries (`Card[key].counts`, `Card[key].places`), and the keys erased
    /// (`Card[key].counts.key`): a key set and never erased, in an object never erased, must be there.
    var dictionarySets: [String: Set<String>] = [:]
    var dictionaryErasures = Set<String>()

    func mayHaveShrunk(_ object: String, _ property: String) -> Bool {
        listsShrunk.contains(object) || listsShrunk.contains("\(object).\(property)")
    }
}

/// Draws one operation and performs it in a transaction.
struct OperationGenerator {
    var random: SplitMix64
    let replicaIndex: Int
    let partial: Bool
    var counter = 0

    init(seed: UInt64, replicaIndex: Int, partial: Bool) {
        random = SplitMix64(seed: seed)
        self.replicaIndex = replicaIndex
        self.partial = partial
    }

    mutating func next(_ bound: Int) -> Int { Int(random.next() % UInt64(max(bound, 1))) }

    mutating func unique() -> String {
        counter += 1
        return "r\(replicaIndex)-\(counter)"
    }

    mutating func kind() -> Workload.Kind {
        let total = Workload.Kind.allCases.reduce(0) { $0 + $1.weight }
        var pick = next(total)
        for kind in Workload.Kind.allCases {
            if pick < kind.weight { return kind }
            pick -= kind.weight
        }
        return .create
    }

    mutating func type() -> String {
        if next(10) == 0 { return "Note" }
        return partial ? ["Card", "Member"][next(2)] : ["Card", "Member", "Board"][next(3)]
    }

    mutating func key(_ type: String) -> PrimaryKey {
        while true {
            let key = Workload.key(type: type, index: next(Workload.keysPerType))
            if !partial || Workload.partialHolds(type, key) { return key }
        }
    }

    mutating func listProperty(_ type: String) -> String {
        switch type {
        case "Card": ["tags", "members", "items"][next(3)]
        case "Board": ["cards", "labels"][next(2)]
        default: ""
        }
    }

    mutating func element(for type: String, _ property: String) -> Value {
        switch property {
        case "tags", "labels": .string(unique())
        case "members": .link(key("Member"))
        case "cards": .link(key("Card"))
        case "items":
            .embedded(EmbeddedObject(type: "Item", fields: ["text": .string(unique()), "done": .bool(next(2) == 0)]))
        default: .null
        }
    }

    /// A box with `fields`, and a code when the schema holds that required property (added during the run).
    mutating func box(_ fields: [String: Value], schema: Schema) -> Value {
        var fields = fields
        if schema[type: "Box"]?[property: "code"] != nil { fields["code"] = .string(unique()) }
        return .embedded(EmbeddedObject(type: "Box", fields: fields))
    }

    mutating func createValues(_ type: String, _ key: PrimaryKey, schema: Schema) -> [String: Value] {
        var values: [String: Value] = ["_id": key.value]
        switch type {
        case "Card":
            if next(2) == 0 { values["title"] = .string(unique()) }
            if next(3) == 0 { values["count"] = .int(Int64(next(100))) }
            if next(3) == 0 { values["tags"] = .list([.string(unique()), .string(unique())]) }
            if next(4) == 0 { values["box"] = box(["label": .string(unique())], schema: schema) }
        case "Member":
            if next(2) == 0 { values["name"] = .string(unique()) }
        case "Note":
            if next(2) == 0 { values["text"] = .string(unique()) }
        default:
            if next(2) == 0 { values["name"] = .string(unique()) }
        }
        return values
    }

    /// Performs one random operation in `txn`. Operations that do not apply (no object to edit) fall back to a
    /// create.
    mutating func perform(_ txn: Transaction, journal: inout WriteJournal) throws {
        let type = type()
        let key = key(type)
        let name = "\(type)[\(key)]"
        guard txn.schema[type: type] != nil else { return }  // Note, removed for now
        let exists = try txn.object(type, primaryKey: key) != nil
        var kind = kind()
        if !exists && kind != .schemaChange { kind = .create }
        switch kind {
        case .create:
            if exists {
                try txn.upsert(type, createValues(type, key, schema: txn.schema))
                journal.listsShrunk.insert(name)
            } else {
                let values = createValues(type, key, schema: txn.schema)
                try txn.create(type, values)
                for case .string(let text) in values["tags"]?.listValue ?? [] {
                    journal.listValues[name, default: []].insert(text)
                }
            }
        case .set:
            switch type {
            case "Card" where next(8) == 0:
                // A write to an extra property, which may race with its removal or rename.
                let extras = (Workload.extraProperties.map(\.name) + [Workload.rename.to]).filter {
                    txn.schema[type: "Card"]?[property: $0] != nil
                }
                guard !extras.isEmpty else { return }
                let property = extras[next(extras.count)]
                try txn.update(type, primaryKey: key, [property: Workload.extraValue(property, next(1000))])
            case "Card":
                let number = next(1000)
                let mixed: [Value] = [
                    .int(Int64(number)), .double(Double(number) / 8), .string(unique()), .bool(number % 2 == 0), .null,
                    .decimal(Decimal(number) / 100), .date(Date(timeIntervalSince1970: Double(number))),
                    .data(Data([UInt8(number % 256)])),
                    // A link to a card that may be erased (it then reads as null, rule 7), and collections of mixed
                    // values written whole.
                    .typedLink(type: "Card", key: Workload.key(type: "Card", index: next(Workload.keysPerType))),
                    .list([
                        .int(Int64(number)),
                        .typedLink(type: "Card", key: Workload.key(type: "Card", index: next(Workload.keysPerType))),
                    ]),
                    .dictionary(["n": .int(Int64(number)), "l": .list([.string(unique())])]),
                ]
                let choices: [(String, Value)] = [
                    ("title", .string(unique())), ("done", .bool(next(2) == 0)),
                    ("note", next(4) == 0 ? .null : .string(unique())),
                    ("count", .int(Int64(next(1000)))), ("anything", mixed[next(mixed.count)]),
                ]
                let (property, value) = choices[next(choices.count)]
                try txn.update(type, primaryKey: key, [property: value])
            case "Member":
                try txn.update(
                    type, primaryKey: key, next(2) == 0 ? ["name": .string(unique())] : ["score": .int(Int64(next(50)))]
                )
            case "Note":
                try txn.update(type, primaryKey: key, ["text": .string(unique())])
            default:
                try txn.update(type, primaryKey: key, ["name": .string(unique())])
            }
        case .erase:
            _ = try txn.delete(type, primaryKey: key)
            journal.listsShrunk.insert(name)
        case .addInteger:
            var property = type == "Card" ? "count" : (type == "Member" ? "score" : nil)
            // An added property, which objects created before it hold no value for (an increment counts from its
            // default), and whose concurrent additions may bring different defaults. A null one cannot be incremented.
            if type == "Card", next(4) == 0, txn.schema[type: "Card"]?[property: "extraNumber"] != nil,
                try txn.object(type, primaryKey: key)?["extraNumber"] != .null
            {
                property = "extraNumber"
            }
            if let property {
                try txn.increment([.property(property)], of: type, primaryKey: key, by: Int64(next(21)) - 10)
            }
        case .listInsert, .listSet, .listErase, .listMove, .listClear:
            let property = listProperty(type)
            guard !property.isEmpty else { return }
            let path: PropertyPath = [.property(property)]
            let count = try txn.object(type, primaryKey: key)?[property].listValue?.count ?? 0
            // Positions count the list as read (a list of links without its links to erased objects), as this
            // count does.
            switch kind {
            case .listInsert:
                let value = element(for: type, property)
                try txn.insert(value, at: next(count + 1), into: path, of: type, primaryKey: key)
                if case .string(let text) = value { journal.listValues[name, default: []].insert(text) }
            case .listSet where count > 0:
                let value = element(for: type, property)
                try txn.replaceElement(at: next(count), with: value, in: path, of: type, primaryKey: key)
                if case .string(let text) = value { journal.listValues[name, default: []].insert(text) }
                journal.listsShrunk.insert("\(name).\(property)")
            case .listErase where count > 0:
                try txn.removeElement(at: next(count), from: path, of: type, primaryKey: key)
                journal.listsShrunk.insert("\(name).\(property)")
            case .listMove where count > 1:
                try txn.moveElement(from: next(count), to: next(count), in: path, of: type, primaryKey: key)
            case .listClear:
                try txn.removeAllElements(in: path, of: type, primaryKey: key)
                journal.listsShrunk.insert("\(name).\(property)")
            default:
                break
            }
        case .setAdd, .setRemove:
            guard type == "Card" else { return }
            let flag = ["red", "green", "blue", "gray"][next(4)]
            var flags = try txn.object(type, primaryKey: key)?["flags"].listValue ?? []
            if kind == .setAdd {
                flags.append(.string(flag))
                journal.setAdds[name, default: []].insert(flag)
            } else {
                flags.removeAll { $0 == .string(flag) }
                journal.setRemovals.insert("\(name).flags.\(flag)")
            }
            try txn.update(type, primaryKey: key, ["flags": .list(flags)])
        case .dictionarySet, .dictionaryErase:
            guard type == "Card" else { return }
            let entry = ["a", "b", "c"][next(3)]
            let property = next(2) == 0 ? "counts" : "places"
            var entries = try txn.object(type, primaryKey: key)?[property].dictionaryValue ?? [:]
            if kind == .dictionarySet {
                if property == "counts" {
                    entries[entry] = .int(Int64(next(100)))
                } else if case .embedded(var item)? = entries[entry], next(2) == 0 {
                    // The same instance, one field changed: written field by field (rule 6).
                    if next(2) == 0 { item["text"] = .string(unique()) } else { item["done"] = .bool(next(2) == 0) }
                    entries[entry] = .embedded(item)
                } else {
                    entries[entry] = .embedded(EmbeddedObject(type: "Item", fields: ["text": .string(unique())]))
                }
                journal.dictionarySets["\(name).\(property)", default: []].insert(entry)
            } else {
                entries[entry] = nil
                journal.dictionaryErasures.insert("\(name).\(property).\(entry)")
            }
            try txn.update(type, primaryKey: key, [property: .dictionary(entries)])
        case .embedded:
            guard type == "Card" else { return }
            let card = try txn.object(type, primaryKey: key)
            // Box.size comes and goes with schema changes.
            let hasSize = txn.schema[type: "Box"]?[property: "size"] != nil
            switch next(4) {
            case 0:
                let inner =
                    next(2) == 0
                    ? Value.null : .embedded(EmbeddedObject(type: "Inner", fields: ["tag": .string(unique())]))
                var fields: [String: Value] = ["label": .string(unique()), "inner": inner]
                let size = Value.int(Int64(next(10)))
                if hasSize { fields["size"] = size }
                try txn.set(box(fields, schema: txn.schema), at: ["box"], of: type, primaryKey: key)
            case 1 where card?["box"].embeddedValue != nil && hasSize:
                try txn.set(.int(Int64(next(100))), at: ["box", "size"], of: type, primaryKey: key)
            case 2 where card?["box"].embeddedValue?["inner"].embeddedValue != nil:
                try txn.set(.string(unique()), at: ["box", "inner", "tag"], of: type, primaryKey: key)
            default:
                let items = card?["items"].listValue?.count ?? 0
                if items > 0 {
                    try txn.set(
                        .bool(next(2) == 0), at: ["items", .index(next(items)), "done"], of: type, primaryKey: key)
                } else if card?["box"].embeddedValue != nil {
                    try txn.set(.string(unique()), at: ["box", "label"], of: type, primaryKey: key)
                }
            }
        case .link:
            switch type {
            case "Card":
                try txn.update(type, primaryKey: key, ["owner": next(5) == 0 ? .null : .link(self.key("Member"))])
            case "Board": try txn.insert(.link(self.key("Card")), at: 0, into: ["cards"], of: type, primaryKey: key)
            default: break
            }
        case .schemaChange:
            guard let card = txn.schema[type: "Card"] else { return }
            switch next(7) {
            case 0:
                // A migration drops an extra property, racing with additions of it and writes to it (rule 8).
                let name = Workload.removableProperties[next(Workload.removableProperties.count)]
                if card[property: name] != nil { try txn.emit(.removeProperty(type: "Card", name: name)) }
            case 2:
                // A migration drops a property of an embedded type, or a later one adds it back: the embedded objects
                // that replicas write meanwhile carry values for it (rule 8).
                guard let box = txn.schema[type: "Box"] else { return }
                if box[property: "code"] == nil && next(8) == 0 {
                    // A later release adds a required property without a default to the embedded type (its
                    // migration sets it on the objects it holds): replicas that have not seen it write boxes
                    // without it, and must be integrated in any order.
                    try txn.emit(.addProperty(type: "Box", .scalar("code", .string)))
                } else if box[property: "size"] != nil {
                    try txn.emit(.removeProperty(type: "Box", name: "size"))
                } else {
                    try txn.addProperty(.scalar("size", .int, optional: true), to: "Box")
                }
            case 3:
                // A migration drops a whole type, or a later one adds it back, while replicas write its objects; or it
                // replaces the type (as a change of its primary key does), which every replica runs when it updates.
                if txn.schema[type: "Note"] != nil {
                    try txn.emit(.removeType("Note"))
                    if next(2) == 0, let note = Workload.schema[type: "Note"] { try txn.addType(note) }
                } else if let note = Workload.schema[type: "Note"] {
                    try txn.addType(note)
                }
            case 1:
                let (from, to) = Workload.rename
                guard card[property: from] != nil && card[property: to] == nil else { return }
                if next(3) == 0 {
                    // A replica of the app version that renamed, which declares the new name before it has seen the
                    // rename (a new install): the addition is the renamed property, in whatever order they merge.
                    try txn.addProperty(.scalar(to, .string, optional: true, indexed: next(2) == 0), to: "Card")
                } else {
                    // A migration renames a property; writes that did not see the rename follow it.
                    try txn.emit(.renameProperty(type: "Card", from: from, to: to))
                }
            default:
                // Replicas that add one property concurrently may pick different indexes and defaults for it: every
                // replica must end with the same definition (rule 8).
                var property = Workload.extraProperties[next(Workload.extraProperties.count)]
                switch next(3) {
                case 0: property.isIndexed = true
                case 1:
                    // Two defaults for extraNumber, so that creates bring different ones, and increments made on
                    // either must count on whichever stands.
                    property.defaultValue =
                        property.name == "extraNumber" && next(2) == 0 ? 3 : Workload.extraDefaults[property.name]
                default: break
                }
                let renamed = property.name == Workload.rename.from && card[property: Workload.rename.to] != nil
                if card[property: property.name] == nil && !renamed {
                    try txn.addProperty(property, to: "Card")
                } else if property.name == "extraNumber", let current = card[property: property.name] {
                    // A migration changes the default, concurrently with creates that bring the one before: increments
                    // on either default count on whichever stands.
                    var redefined = current
                    redefined.defaultValue = current.defaultValue == 3 ? 7 : 3
                    try txn.emit(.redefineProperty(type: "Card", redefined))
                }
            }
        }
    }
}
