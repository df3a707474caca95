import Foundation
import Tributary
import TributaryModel

// Rendering shared by the subcommands: values, primary keys, instructions and times as text and as JSON.
//
// JSON keys are stable and come in a fixed order. Values that JSON has no type for are tagged, in the manner of
// MongoDB's Extended JSON: {"$date": "2023-11-14T22:13:20.000Z"}, {"$oid": "…"}, {"$uuid": "…"},
// {"$binary": "<base64>"}, {"$link": <primary key>}, {"$double": "NaN"}.

// MARK: JSON

/// A JSON value whose objects keep their keys in the order given, so output is byte-for-byte stable.
enum JSON {
    case null
    case bool(Bool)
    case int(Int64)
    case uint(UInt64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object([(String, JSON)])

    /// The compact rendering: one line, no spaces.
    var rendered: String {
        var output = ""
        write(to: &output)
        return output
    }

    func write(to output: inout String) {
        switch self {
        case .null: output += "null"
        case .bool(let value): output += value ? "true" : "false"
        case .int(let value): output += String(value)
        case .uint(let value): output += String(value)
        case .double(let value):
            if value.isFinite {
                output += value == value.rounded() && abs(value) < 1e15 ? String(format: "%.1f", value) : "\(value)"
            } else {
                JSON.object([("$double", .string(value.isNaN ? "NaN" : value < 0 ? "-Infinity" : "Infinity"))])
                    .write(to: &output)
            }
        case .string(let value): JSON.writeString(value, to: &output)
        case .array(let elements):
            output += "["
            for (index, element) in elements.enumerated() {
                if index > 0 { output += "," }
                element.write(to: &output)
            }
            output += "]"
        case .object(let members):
            output += "{"
            for (index, (key, value)) in members.enumerated() {
                if index > 0 { output += "," }
                JSON.writeString(key, to: &output)
                output += ":"
                value.write(to: &output)
            }
            output += "}"
        }
    }

    static func writeString(_ text: String, to output: inout String) { JSONText.quote(text, into: &output) }
}

// MARK: Time

/// `2023-11-14T22:13:20.000Z`: milliseconds since 1970 as a UTC time, without Foundation's formatters (the list of a
/// million changesets formats a million of them).
func utcTimestamp(milliseconds: Int64) -> String {
    let (days, msOfDay) = floorDivision(milliseconds, 86_400_000)
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let dayOfEra = z - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let mp = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * mp + 2) / 5 + 1
    let month = mp < 10 ? mp + 3 : mp - 9
    let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
    let hours = msOfDay / 3_600_000
    let minutes = msOfDay / 60_000 % 60
    let seconds = msOfDay / 1000 % 60
    let millis = msOfDay % 1000
    return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(hours, 2)):\(pad(minutes, 2)):\(pad(seconds, 2))."
        + "\(pad(millis, 3))Z"
}

private func floorDivision(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
    var quotient = a / b
    var remainder = a % b
    if remainder < 0 {
        quotient -= 1
        remainder += b
    }
    return (quotient, remainder)
}

private func pad(_ value: Int64, _ width: Int) -> String {
    let digits = String(value)
    return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
}

/// A changeset's stamp as a readable UTC time (the hybrid clock's logical counter is left out).
func readableTime(_ time: HybridTime) -> String {
    utcTimestamp(milliseconds: Int64(clamping: time.milliseconds))
}

func readableTime(_ date: Date) -> String {
    utcTimestamp(milliseconds: Int64((date.timeIntervalSince1970 * 1000).rounded(.down)))
}

// MARK: Values as text

/// A string in double quotes, with quotes, backslashes and control characters escaped: output stays one line.
func quoted(_ text: String) -> String {
    var output = "\""
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\"": output += "\\\""
        case "\\": output += "\\\\"
        case "\n": output += "\\n"
        case "\r": output += "\\r"
        case "\t": output += "\\t"
        case _ where scalar.value < 0x20 || scalar.value == 0x7F:
            output += String(format: "\\u{%x}", scalar.value)
        default: output.unicodeScalars.append(scalar)
        }
    }
    return output + "\""
}

func text(_ key: PrimaryKey) -> String {
    switch key {
    case .string(let string): quoted(string)
    case .int(let int): String(int)
    case .uuid(let uuid): uuid.uuidString
    case .objectId(let id): id.description
    }
}

func text(_ value: Value) -> String {
    switch value {
    case .null: return "null"
    case .bool(let bool): return bool ? "true" : "false"
    case .int(let int): return String(int)
    case .double(let double): return "\(double)"
    case .string(let string): return quoted(string)
    case .data(let data):
        if data.count <= 16 { return "x'" + data.map { String(format: "%02x", $0) }.joined() + "'" }
        return "<\(data.count) bytes>"
    case .date(let date): return readableTime(date)
    case .uuid(let uuid): return uuid.uuidString
    case .objectId(let id): return "ObjectId(\(id))"
    case .decimal(let decimal): return decimal.canonicalText
    case .float(let float): return "\(float)"
    case .link(let key): return "-> \(text(key))"
    case .typedLink(let type, let key): return "-> \(text(type: type, primaryKey: key))"
    case .embedded(let object):
        return "{"
            + object.fields.keys.sorted().map { "\($0): \(text(object.fields[$0] ?? .null))" }.joined(separator: ", ")
            + "}"
    case .list(let elements): return "[" + elements.map(text).joined(separator: ", ") + "]"
    case .dictionary(let entries):
        return "["
            + entries.keys.sorted().map { "\(quoted($0)): \(text(entries[$0] ?? .null))" }.joined(separator: ", ")
            + "]"
    }
}

/// `Type["key"]`.
func text(type: String, primaryKey: PrimaryKey) -> String { "\(type)[\(text(primaryKey))]" }

/// `{name: "Ada", tags: ["x"]}`, fields in the order given.
func text(_ fields: [FieldValue]) -> String {
    "{" + fields.map { "\($0.name): \(text($0.value))" }.joined(separator: ", ") + "}"
}

// MARK: Values as JSON

func json(_ key: PrimaryKey) -> JSON { json(key.value) }

func json(_ value: Value) -> JSON {
    switch value {
    case .null: return .null
    case .bool(let bool): return .bool(bool)
    case .int(let int): return .int(int)
    case .double(let double): return .double(double)
    case .string(let string): return .string(string)
    case .data(let data): return .object([("$binary", .string(data.base64EncodedString()))])
    case .date(let date): return .object([("$date", .string(readableTime(date)))])
    case .uuid(let uuid): return .object([("$uuid", .string(uuid.uuidString))])
    case .objectId(let id): return .object([("$oid", .string(id.description))])
    case .decimal(let decimal): return .object([("$numberDecimal", .string(decimal.canonicalText))])
    case .float(let float): return .double(Double(float))
    case .link(let key): return .object([("$link", json(key))])
    case .typedLink(let type, let key):
        return .object([("$link", .object([("type", .string(type)), ("key", json(key))]))])
    case .embedded(let object):
        return .object(object.fields.keys.sorted().map { ($0, json(object.fields[$0] ?? .null)) })
    case .list(let elements): return .array(elements.map(json))
    case .dictionary(let entries): return .object(entries.keys.sorted().map { ($0, json(entries[$0] ?? .null)) })
    }
}

func json(_ fields: [FieldValue]) -> JSON { .object(fields.map { ($0.name, json($0.value)) }) }

func json(_ object: DynamicObject, schema: Schema) -> JSON {
    .object(orderedPropertyNames(of: object, schema: schema).map { ($0, json(object[$0])) })
}

/// An object's property names: the schema's declaration order, then any others by name.
func orderedPropertyNames(of object: DynamicObject, schema: Schema) -> [String] {
    let declared = schema[type: object.type]?.properties.map(\.name) ?? []
    let known = Set(declared)
    return declared + object.values.keys.filter { !known.contains($0) }.sorted()
}

func json(_ vector: VersionVector) -> JSON {
    .array(
        vector.entries.map {
            .object([("replica", .string($0.replica.description)), ("originSequence", .uint($0.sequence))])
        })
}

func text(_ vector: VersionVector) -> String {
    vector.entries.isEmpty
        ? "[]" : "[" + vector.entries.map { "\($0.replica):\($0.sequence)" }.joined(separator: ", ") + "]"
}

// MARK: Instructions

/// A list element's or embedded object's id as `origin:sequence/instruction.counter`: the changeset that made it,
/// the instruction's index in that changeset, and the element's place among those the instruction made.
func text(_ id: ElementID) -> String {
    "\(id.origin):\(id.sequence)/\(id.index >> 24).\(id.index & (ElementID.maximumPerInstruction - 1))"
}

/// The stamp an increment's base value was written with: `default` for a value filled from a default.
func text(base: Stamp) -> String {
    base == .zero ? "default" : "\(base.replica):\(readableTime(base.time))"
}

func text(_ anchor: ListAnchor) -> String {
    (anchor.side == .left ? "left of " : "right of ") + (anchor.parent.map(text) ?? "root")
}

/// `address<id>.city`: the path inside the object, without the object.
func relativePath(_ path: FieldPath) -> String {
    path.steps.map { "\($0.property)<\(text($0.id))>." }.joined() + path.property
}

/// `User["u1"].address<id>.city`.
func text(_ path: FieldPath) -> String {
    text(type: path.type, primaryKey: path.primaryKey) + "." + relativePath(path)
}

/// One instruction in one line, naming its object: `set User["u1"].age = 36`.
func text(_ instruction: Instruction) -> String {
    switch instruction {
    case .addType(let type): return "add type \(type)"
    case .addProperty(let type, let property): return "add property \(type).\(property)"
    case .removeProperty(let type, let name): return "remove property \(type).\(name)"
    case .renameProperty(let type, let from, let to): return "rename property \(type).\(from) to \(to)"
    case .redefineProperty(let type, let property): return "redefine property \(type).\(property)"
    case .removeType(let type): return "remove type \(type)"
    case .setSchemaVersion(let version): return "set schema version \(version)"
    case .migrated(let version): return "migrated to schema version \(version)"
    case .omitted: return "omitted"
    default:
        guard let object = instruction.object else { return "?" }
        return describe(instruction, object: text(type: object.type, primaryKey: object.primaryKey))
    }
}

/// What an instruction did to the object it touches, without naming the object: `set age = 36`.
func relativeText(_ instruction: Instruction) -> String {
    switch instruction {
    case .removeType(let type):
        return "remove type \(type) (erases every \(type), unless a copy of this removal merged first)"
    default: return instruction.object == nil ? text(instruction) : describe(instruction, object: nil)
    }
}

/// An object instruction, naming its object when `object` is given.
private func describe(_ instruction: Instruction, object: String?) -> String {
    func target(_ path: FieldPath) -> String { (object.map { $0 + "." } ?? "") + relativePath(path) }
    let subject = object.map { " " + $0 } ?? ""
    switch instruction {
    case .create(_, _, let fields, let defaults):
        return "create\(subject) \(text(fields))" + (defaults.isEmpty ? "" : " defaults \(text(defaults))")
    case .erase:
        return "erase\(subject)"
    case .set(let path, let value):
        return "set \(target(path)) = \(text(value))"
    case .addInteger(let path, let delta, let base):
        let base = object == nil ? "" : " (base \(text(base: base)))"
        return "add \(target(path)) \(delta < 0 ? "-" : "+")= \(delta.magnitude)\(base)"
    case .listInsert(let path, let anchor, let value):
        return "insert \(text(value)) into \(target(path)) \(text(anchor))"
    case .listSet(let path, let element, let value):
        return "replace \(target(path))<\(text(element))> with \(text(value))"
    case .listErase(let path, let element):
        return "remove \(target(path))<\(text(element))>"
    case .listMove(let path, let element, let anchor):
        return "move \(target(path))<\(text(element))> to \(text(anchor))"
    case .listClear(let path):
        return "clear \(target(path))"
    case .dictionarySet(let path, let key, let value):
        return "set \(target(path))[\(quoted(key))] = \(text(value))"
    case .dictionaryErase(let path, let key):
        return "erase \(target(path))[\(quoted(key))]"
    default:
        return "?"
    }
}

func json(_ property: Property) -> JSON {
    var members: [(String, JSON)] = [
        ("name", .string(property.name)), ("type", .string(property.typeDescription)),
        ("indexed", .bool(property.isIndexed)),
    ]
    if let value = property.defaultValue { members.append(("default", json(value))) }
    return .object(members)
}

func json(_ type: ObjectSchema) -> JSON {
    .object([
        ("name", .string(type.name)), ("embedded", .bool(type.isEmbedded)),
        ("primaryKey", type.primaryKey.map(JSON.string) ?? .null), ("properties", .array(type.properties.map(json))),
    ])
}

func json(_ id: ElementID) -> JSON { .string(text(id)) }

func json(_ anchor: ListAnchor) -> JSON {
    .object([("side", .string(anchor.side == .left ? "left" : "right")), ("parent", anchor.parent.map(json) ?? .null)])
}

func json(_ path: FieldPath) -> [(String, JSON)] {
    var members: [(String, JSON)] = [("type", .string(path.type)), ("primaryKey", json(path.primaryKey))]
    if !path.steps.isEmpty {
        members.append(
            ("embedded", .array(path.steps.map { .object([("property", .string($0.property)), ("id", json($0.id))]) })))
    }
    members.append(("property", .string(path.property)))
    return members
}

/// One instruction as a JSON object: `op` first, then its operands.
func json(_ instruction: Instruction) -> JSON {
    switch instruction {
    case .addType(let type):
        return .object([("op", .string("addType")), ("definition", json(type))])
    case .addProperty(let type, let property):
        return .object([("op", .string("addProperty")), ("type", .string(type)), ("property", json(property))])
    case .removeProperty(let type, let name):
        return .object([("op", .string("removeProperty")), ("type", .string(type)), ("property", .string(name))])
    case .renameProperty(let type, let from, let to):
        return .object([
            ("op", .string("renameProperty")), ("type", .string(type)), ("from", .string(from)), ("to", .string(to)),
        ])
    case .redefineProperty(let type, let property):
        return .object([("op", .string("redefineProperty")), ("type", .string(type)), ("property", json(property))])
    case .removeType(let type):
        return .object([("op", .string("removeType")), ("type", .string(type))])
    case .setSchemaVersion(let version):
        return .object([("op", .string("setSchemaVersion")), ("version", .uint(version))])
    case .migrated(let version):
        return .object([("op", .string("migrated")), ("version", .uint(version))])
    case .create(let type, let key, let fields, let defaults):
        return .object([
            ("op", .string("create")), ("type", .string(type)), ("primaryKey", json(key)), ("fields", json(fields)),
            ("defaults", json(defaults)),
        ])
    case .erase(let type, let key):
        return .object([("op", .string("erase")), ("type", .string(type)), ("primaryKey", json(key))])
    case .set(let path, let value):
        return .object([("op", .string("set"))] + json(path) + [("value", json(value))])
    case .addInteger(let path, let delta, let base):
        let base = JSON.object([
            ("replica", .string(base.replica.description)), ("hybridTime", .string(base.time.description)),
        ])
        return .object([("op", .string("addInteger"))] + json(path) + [("delta", .int(delta)), ("base", base)])
    case .listInsert(let path, let anchor, let value):
        return .object(
            [("op", .string("listInsert"))] + json(path) + [("anchor", json(anchor)), ("value", json(value))])
    case .listSet(let path, let element, let value):
        return .object(
            [("op", .string("listSet"))] + json(path) + [("element", json(element)), ("value", json(value))])
    case .listErase(let path, let element):
        return .object([("op", .string("listErase"))] + json(path) + [("element", json(element))])
    case .listMove(let path, let element, let anchor):
        return .object(
            [("op", .string("listMove"))] + json(path) + [("element", json(element)), ("anchor", json(anchor))])
    case .listClear(let path):
        return .object([("op", .string("listClear"))] + json(path))
    case .dictionarySet(let path, let key, let value):
        return .object(
            [("op", .string("dictionarySet"))] + json(path) + [("key", .string(key)), ("value", json(value))])
    case .dictionaryErase(let path, let key):
        return .object([("op", .string("dictionaryErase"))] + json(path) + [("key", .string(key))])
    case .omitted:
        return .object([("op", .string("omitted"))])
    }
}

// MARK: Changesets

/// The members describing a log entry, in the order `list`, `show`, `history` and `export` print them.
func entryMembers(_ entry: LogEntrySummary, author: String?) -> [(String, JSON)] {
    var members: [(String, JSON)] = [
        ("localSequence", .uint(entry.localSequence)), ("origin", .string(entry.origin.description)),
        ("originSequence", .uint(entry.originSequence)), ("time", .string(readableTime(entry.time))),
        ("hybridTime", .string(entry.time.description)),
    ]
    if let author { members.append(("author", .string(author))) }
    members += [
        ("instructionCount", .int(Int64(entry.instructionCount))), ("storedBytes", .int(Int64(entry.storedBytes))),
        ("uncompressedBytes", .int(Int64(entry.uncompressedBytes))), ("compressed", .bool(entry.isCompressed)),
    ]
    return members
}

/// A whole changeset with its decoded instructions, as `show --json` and `export` print it.
func json(_ entry: LogEntrySummary, _ changeset: Changeset) -> JSON {
    .object(
        entryMembers(entry, author: changeset.author) + [
            ("schemaVersion", .uint(changeset.schemaVersion)), ("context", json(changeset.context)),
            ("instructions", .array(changeset.instructions.map(json))),
        ])
}

// MARK: Tables

/// `text` padded with spaces to `width` characters (on the right, or on the left for numbers).
func padded(_ text: String, _ width: Int, right: Bool = false) -> String {
    let count = text.count
    guard count < width else { return text }
    let fill = String(repeating: " ", count: width - count)
    return right ? fill + text : text + fill
}

/// `text` cut to `width` characters, ending in `…` when cut.
func truncated(_ text: String, _ width: Int) -> String {
    guard text.count > width else { return text }
    return String(text.prefix(max(0, width - 1))) + "…"
}

/// `1,234,567`.
func grouped(_ value: Int) -> String {
    let digits = String(value.magnitude)
    var result = ""
    for (index, character) in digits.enumerated() {
        if index > 0 && (digits.count - index) % 3 == 0 { result += "," }
        result.append(character)
    }
    return value < 0 ? "-" + result : result
}

/// Rows printed as columns as wide as their widest cell (for output that is collected anyway).
func table(_ header: [String], _ rows: [[String]], rightAligned: Set<Int> = []) -> [String] {
    var widths = header.map(\.count)
    for row in rows {
        for (index, cell) in row.enumerated() where index < widths.count {
            widths[index] = max(widths[index], cell.count)
        }
    }
    func line(_ cells: [String]) -> String {
        var parts: [String] = []
        for (index, cell) in cells.enumerated() {
            let last = index == cells.count - 1
            parts.append(
                last && !rightAligned.contains(index)
                    ? cell : padded(cell, widths[index], right: rightAligned.contains(index)))
        }
        return parts.joined(separator: "  ")
    }
    return [line(header)] + rows.map(line)
}
