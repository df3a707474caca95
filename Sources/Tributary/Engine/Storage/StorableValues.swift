import TributaryModel
import TributaryViews

/// What a new changeset may hold: string and data values (and link keys) of at most 16 MiB (Realm's limit, and the
/// standard decoding limit, which the stored schema, and so its defaults, is read under; records are read under
/// ``DecodingLimits/storedRecord``), and objects' primary keys of at most ``KeyEncoding/maximumPrimaryKeyBytes`` (what
/// fits an LMDB key). Each bound depends on the changeset alone, so every replica decides alike.
///
/// Checked on every new changeset: a local transaction's as each instruction is written (an instruction larger than
/// the value limit is looked into), a peer's before it is integrated (refusing that changeset alone). Never on
/// replay, so a log that holds what an earlier build let through still replays.
enum StorableValues {
    static let maximumValueBytes = DecodingLimits.standard.maximumValueBytes

    /// The first of `instructions` that holds a value or key the views cannot store: its index, and why.
    ///
    /// - Parameter encodedBytes: the size of the changeset's encoding. Only a changeset whose encoding is larger than
    ///   the value limit can hold a value over it, so the values of others are not walked; object keys always are.
    static func problem(in instructions: [Instruction], encodedBytes: Int) -> (index: Int, message: String)? {
        let mayHoldLargeValues = encodedBytes > maximumValueBytes
        for (index, instruction) in instructions.enumerated() {
            if let object = instruction.object,
                let problem = KeyEncoding.problem(storing: object.primaryKey, of: object.type)
            {
                return (index, problem)
            }
            if mayHoldLargeValues, let message = valueProblem(in: instruction) { return (index, message) }
        }
        return nil
    }

    /// Why a value in `instruction` (a field, a default, an element) cannot be stored, or `nil`.
    static func valueProblem(in instruction: Instruction) -> String? {
        switch instruction {
        case .create(let type, _, let fields, let defaults):
            for field in fields {
                if let problem = problem(field.value) { return "\(type).\(field.name): \(problem)" }
            }
            for field in defaults {
                if let problem = problem(field.value) { return "\(type).\(field.name): \(problem)" }
            }
        case .set(let path, let value), .listInsert(let path, _, let value), .listSet(let path, _, let value),
            .dictionarySet(let path, _, let value):
            if let problem = problem(value) { return "\(path): \(problem)" }
        case .addType(let type):
            for property in type.properties {
                if let value = property.defaultValue, let problem = problem(value) {
                    return "the default of \(type.name).\(property.name): \(problem)"
                }
            }
        case .addProperty(let type, let property), .redefineProperty(let type, let property):
            if let value = property.defaultValue, let problem = problem(value) {
                return "the default of \(type).\(property.name): \(problem)"
            }
        default:
            break
        }
        return nil
    }

    /// Why `value`, or a value inside it (in a list or an embedded object), cannot be stored; `nil` when it can.
    static func problem(_ value: Value) -> String? {
        switch value {
        case .string(let string):
            let bytes = string.utf8.count
            return bytes > maximumValueBytes
                ? "a string of \(bytes) bytes (UTF-8), over the limit of \(maximumValueBytes)" : nil
        case .data(let data):
            return data.count > maximumValueBytes
                ? "data of \(data.count) bytes, over the limit of \(maximumValueBytes)" : nil
        case .link(let key), .typedLink(_, let key):
            // A link to a key no object can have is stored like any value, and reads as null (rule 7); only its
            // size matters to the record.
            guard case .string(let string) = key, string.utf8.count > maximumValueBytes else { return nil }
            return "a link to a primary key of \(string.utf8.count) bytes, over the limit of \(maximumValueBytes)"
        case .list(let elements):
            for (index, element) in elements.enumerated() {
                if let problem = problem(element) { return "element \(index): \(problem)" }
            }
            return nil
        case .dictionary(let entries):
            for key in entries.keys.sorted() {
                if let value = entries[key], let problem = problem(value) { return "key '\(key)': \(problem)" }
            }
            return nil
        case .embedded(let object):
            for name in object.fields.keys.sorted() {
                if let value = object.fields[name], let problem = problem(value) {
                    return "\(object.type).\(name): \(problem)"
                }
            }
            return nil
        case .null, .bool, .int, .double, .date, .uuid, .objectId, .decimal, .float:
            return nil
        }
    }
}
