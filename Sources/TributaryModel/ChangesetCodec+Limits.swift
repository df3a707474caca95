extension ChangesetCodec {
    /// Why a changeset would not decode under some ``DecodingLimits``.
    public struct LimitProblem: Error, Hashable, Sendable, CustomStringConvertible {
        /// The instruction that holds what is over a limit, or `nil` when the header is (too many instructions,
        /// names or context entries).
        public var instructionIndex: Int?
        /// What is over which limit.
        public var message: String

        public var description: String {
            instructionIndex.map { "instruction \($0): \(message)" } ?? message
        }
    }

    /// Encodes `changeset`, or tells why its encoding would not decode under `limits`.
    ///
    /// A writer encodes what it is about to store or send with this, so that nothing is written that its readers
    /// refuse: a log entry that cannot be decoded again is lost to replay, verify and every peer. It asks what
    /// ``decode(_:limits:)`` asks of the same bytes (counts, nesting, value sizes). Each instruction's nesting and
    /// counts are checked in memory before it is encoded, walking into nested values only and no deeper than the
    /// limit, so a value nested without bound is named rather than recursed into; a changeset of flat objects costs a
    /// look at each field. The sizes of its strings, data and keys are checked only when its encoding is larger than
    /// the largest value. The header (instructions, names, context entries) is then read back from the encoding.
    public static func encode(_ changeset: Changeset, within limits: DecodingLimits) throws(LimitProblem) -> [UInt8] {
        var instructions = InstructionEncoding(capacity: 64 + changeset.instructions.count * 48)
        for instruction in changeset.instructions { try instructions.append(instruction, within: limits) }
        return try instructions.changeset(changeset.header, within: limits)
    }
}

extension ChangesetCodec.InstructionEncoding {
    /// ``append(_:)``, or why `instruction` would not decode under `limits` (as ``ChangesetCodec/encode(_:within:)``
    /// checks it). After it throws, the encoding is not to be used. Returns how many bytes the instruction took.
    @discardableResult
    public mutating func append(_ instruction: Instruction, within limits: DecodingLimits)
        throws(ChangesetCodec.LimitProblem) -> Int
    {
        let index = count
        if let message = LimitWalker(limits: limits, checksBytes: false).problem(in: instruction) {
            throw ChangesetCodec.LimitProblem(instructionIndex: index, message: message)
        }
        let bytes = append(instruction)
        // Only an instruction whose encoding is larger than the largest value can hold a value over it.
        if bytes > limits.maximumValueBytes,
            let message = LimitWalker(limits: limits, checksBytes: true).problem(in: instruction)
        {
            throw ChangesetCodec.LimitProblem(instructionIndex: index, message: message)
        }
        return bytes
    }

    /// ``changeset(_:)``, or why its header would not decode under `limits` (too many instructions, names or context
    /// entries); each instruction was checked as it was appended.
    public func changeset(_ header: ChangesetCodec.Header, within limits: DecodingLimits)
        throws(ChangesetCodec.LimitProblem) -> [UInt8]
    {
        let encoded = changeset(header)
        do {
            _ = try ChangesetCodec.decodeHeader(encoded, limits: limits)
        } catch {
            throw ChangesetCodec.LimitProblem(instructionIndex: nil, message: error.message)
        }
        return encoded
    }
}

/// The instruction-level bounds of ``ChangesetCodec/decode(_:limits:)``, asked of values in memory. Each check
/// names the decoder's own words for what it refuses.
private struct LimitWalker {
    let limits: DecodingLimits
    /// Whether the sizes of strings, data and keys are checked too (only a changeset whose encoding is larger than
    /// the largest value can hold one over it).
    let checksBytes: Bool

    static let maximumPropertiesPerType = BinaryReader.maximumPropertiesPerType

    func problem(in instruction: Instruction) -> String? {
        switch instruction {
        case .addType(let type):
            if type.properties.count > Self.maximumPropertiesPerType {
                return "type '\(type.name)' has \(type.properties.count) properties, more than the "
                    + "\(Self.maximumPropertiesPerType) a changeset may define"
            }
            for property in type.properties {
                if let problem = defaultProblem(property, of: type.name) { return problem }
            }
            return nil
        case .addProperty(let type, let property), .redefineProperty(let type, let property):
            return defaultProblem(property, of: type)
        case .removeProperty, .renameProperty, .removeType, .setSchemaVersion, .migrated, .omitted:
            return nil
        case .create(let type, let key, let fields, let defaults):
            if let problem = keyProblem(key) { return "the primary key of \(type): \(problem)" }
            return fieldsProblem(fields, of: type) ?? fieldsProblem(defaults, of: type)
        case .erase(let type, let key):
            return keyProblem(key).map { "the primary key of \(type): \($0)" }
        case .set(let path, let value), .listInsert(let path, _, let value), .listSet(let path, _, let value):
            if let problem = pathProblem(path) { return problem }
            return valueProblem(value, depth: 0).map { "\(path): \($0)" }
        case .dictionarySet(let path, let key, let value):
            if let problem = pathProblem(path) ?? (checksBytes ? bytesProblem(key.utf8.count, "a key") : nil) {
                return problem
            }
            return valueProblem(value, depth: 0).map { "\(path)['\(key.prefix(64))']: \($0)" }
        case .addInteger(let path, _, _), .listErase(let path, _), .listMove(let path, _, _), .listClear(let path),
            .dictionaryErase(let path, _):
            return pathProblem(path)
        }
    }

    private func defaultProblem(_ property: Property, of type: String) -> String? {
        guard let value = property.defaultValue else { return nil }
        return valueProblem(value, depth: 0).map { "the default of \(type).\(property.name): \($0)" }
    }

    private func fieldsProblem(_ fields: [FieldValue], of type: String) -> String? {
        if fields.count > limits.maximumElements {
            return "\(fields.count) fields of \(type), more than \(limits.maximumElements)"
        }
        // Read in place: a commit of many flat objects passes here for each, and copying its fields costs.
        return fields.withUnsafeBufferPointer { fields in
            for index in fields.indices where checksBytes || fields[index].value.isNested {
                if let problem = valueProblem(fields[index].value, depth: 0) {
                    return "\(type).\(fields[index].name): \(problem)"
                }
            }
            return nil
        }
    }

    private func pathProblem(_ path: FieldPath) -> String? {
        if let problem = keyProblem(path.primaryKey) { return "the primary key of \(path.type): \(problem)" }
        if path.steps.count > limits.maximumDepth {
            return "\(path) reaches \(path.steps.count) embedded objects deep, more than \(limits.maximumDepth)"
        }
        return nil
    }

    private func keyProblem(_ key: PrimaryKey) -> String? {
        guard checksBytes, case .string(let string) = key else { return nil }
        return bytesProblem(string.utf8.count, "a string")
    }

    private func bytesProblem(_ count: Int, _ what: String) -> String? {
        count > limits.maximumValueBytes
            ? "\(what) of \(count) bytes, over the limit of \(limits.maximumValueBytes)" : nil
    }

    /// Why `value`, at nesting `depth` (0 for a field's value), would not decode. A list or embedded object at the
    /// deepest level decodes only when empty. Recursion stops there, so a value nested without bound is named, not
    /// walked.
    private func valueProblem(_ value: Value, depth: Int) -> String? {
        if !checksBytes && !value.isNested { return nil }
        switch value {
        case .null, .bool, .int, .double, .date, .uuid, .objectId, .decimal, .float:
            return nil
        case .string(let string):
            return bytesProblem(string.utf8.count, "a string")
        case .data(let data):
            return bytesProblem(data.count, "data")
        case .link(let key), .typedLink(_, let key):
            return keyProblem(key).map { "a link: \($0)" }
        case .embedded(let object):
            if object.fields.count > limits.maximumElements {
                return
                    "an embedded \(object.type) of \(object.fields.count) fields, more than \(limits.maximumElements)"
            }
            if !object.fields.isEmpty, depth >= limits.maximumDepth { return nestingProblem }
            for name in object.fields.keys.sorted() {
                if let field = object.fields[name], let problem = valueProblem(field, depth: depth + 1) {
                    return "\(object.type).\(name): \(problem)"
                }
            }
            return nil
        case .list(let elements):
            if elements.count > limits.maximumElements {
                return "a list of \(elements.count) elements, more than \(limits.maximumElements)"
            }
            if !elements.isEmpty, depth >= limits.maximumDepth { return nestingProblem }
            for (index, element) in elements.enumerated() {
                if let problem = valueProblem(element, depth: depth + 1) { return "element \(index): \(problem)" }
            }
            return nil
        case .dictionary(let entries):
            if entries.count > limits.maximumElements {
                return "a dictionary of \(entries.count) entries, more than \(limits.maximumElements)"
            }
            if !entries.isEmpty, depth >= limits.maximumDepth { return nestingProblem }
            for key in entries.keys.sorted() {
                if checksBytes, let problem = bytesProblem(key.utf8.count, "a key") { return problem }
                if let entry = entries[key], let problem = valueProblem(entry, depth: depth + 1) {
                    return "key '\(key.prefix(64))': \(problem)"
                }
            }
            return nil
        }
    }

    private var nestingProblem: String {
        "lists and embedded objects nest more than \(limits.maximumDepth) levels deep"
    }
}

extension Value {
    /// Whether it is a list or an embedded object, which may hold values of its own.
    fileprivate var isNested: Bool {
        switch self {
        case .list, .embedded, .dictionary: true
        default: false
        }
    }
}
