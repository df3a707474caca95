// The readers of stored records checked against each other: the test suite replays its regression cases through
// this, and the record fuzz target (Tools/fuzz) runs it on every input. It uses no testing library, so that the fuzz
// target can compile it as it is.
import Foundation
import TributaryMerge
import TributaryModel

/// A schema whose `Task` has the properties the sample and regression records hold: scalars of every kind, a
/// list of ints, a link, a list of embedded objects, an embedded object, and one the records never hold.
enum ReaderAgreement {
    static let task = ObjectSchema(
        name: "Task",
        properties: [
            .scalar("_id", .int), .scalar("title", .string), .scalar("count", .int), .scalar("ratio", .double),
            .scalar("token", .uuid, optional: true), .scalar("none", .string, optional: true), .scalar("when", .date),
            .scalar("blob", .data), .scalar("oid", .objectId, optional: true), .scalar("flag", .bool),
            .scalar("missing", .int, default: .int(5)), Property("values", .scalar(.int), list: true),
            Property("owner", .link("Task")), Property("members", .embedded("Member"), list: true),
            Property("image", .embedded("Photo")), Property("tags", .scalar(.string), list: true),
        ])
    static let schema = Schema(
        version: 1,
        types: [
            task, .embedded("Member", properties: [.scalar("userName", .string)]),
            .embedded(
                "Photo",
                properties: [
                    .scalar("date", .date), .scalar("picture", .data), Property("nested", .embedded("Inner")),
                ]),
            .embedded("Inner", properties: [Property("tags", .scalar(.string), list: true)]),
        ])

    /// Every property; the scalar ones only; none but the primary key; a mask shorter than the properties.
    static let masks: [[Bool]?] = [
        nil, task.properties.map { !$0.isList && $0.kind.objectType == nil }, task.properties.map { _ in false },
        task.properties.dropLast(3).map { _ in true },
    ]
    static let projectors = masks.map { RecordProjector(type: task, schema: schema, wanted: $0) }

    /// Values compared by their encoding: a double may be NaN, which `==` never equals.
    static func encoding(_ values: [Value]?) -> [UInt8]? {
        guard let values else { return nil }
        var writer = BinaryWriter()
        var names = NameTable.inline
        for value in values { writer.value(value, &names) }
        return writer.bytes
    }

    /// What the readers disagree on for `bytes`, or `nil` when every reader accepts them or refuses them alike (with
    /// the same error) and reads the same values. Also checks that what decodes encodes to bytes that decode to the
    /// same record, and that no list holds two live elements in one slot.
    ///
    /// - Parameter only: the index in ``masks`` to read with, or `nil` for each of them (the fuzz target picks one
    ///   per input, which makes it four times as fast).
    static func disagreement(_ bytes: [UInt8], only: Int? = nil) -> String? {
        let full = Result { () throws(ChangesetDecodingError) in try ObjectRecord(decoding: bytes) }
        if case .success(let record) = full, let problem = roundTripProblem(record) { return problem }
        func same(_ error: ChangesetDecodingError, _ what: String) -> String? {
            guard case .failure(let expected) = full else { return "\(what) refuses what the decoder reads: \(error)" }
            return error == expected ? nil : "\(what) says \(error), the decoder \(expected)"
        }

        // Whether the object exists, from the header reader.
        let exists = bytes.withUnsafeBytes { bytes in
            Result { () throws(ChangesetDecodingError) in try ObjectRecord.exists(inStored: bytes) }
        }
        switch (full, exists) {
        case (.success(let record), .success(let exists)) where record.exists == exists: break
        case (.success(let record), .success(let exists)):
            return "exists(inStored:) reads \(exists), the decoder \(record.exists)"
        case (.failure(let expected), .success(let exists)):
            return "exists(inStored:) reads \(exists) where the decoder says \(expected)"
        case (_, .failure(let error)):
            if let problem = same(error, "exists(inStored:)") { return problem }
        }

        for which in only.map({ [$0] }) ?? Array(masks.indices) {
            let mask = masks[which]
            let expected: [UInt8]?
            switch full {
            case .success(let record):
                expected = encoding(record.exists ? positional(record, wanted: mask) : nil)
            case .failure:
                expected = nil
            }
            func compare(_ read: Result<[Value]?, ChangesetDecodingError>, _ what: String) -> String? {
                switch (full, read) {
                case (.success, .success(let values)):
                    let actual = encoding(values)
                    return actual == expected
                        ? nil : "\(what) (mask \(which)) reads \(values.map(\.description) ?? "a tombstone")"
                case (.failure(let error), .success(let values)):
                    return "\(what) (mask \(which)) reads \(values.map(\.description) ?? "a tombstone") where the "
                        + "decoder says \(error)"
                case (_, .failure(let error)):
                    return same(error, "\(what) (mask \(which))")
                }
            }
            let positional = Result { () throws(ChangesetDecodingError) in
                try ObjectRecord.positionalValues(decoding: bytes, of: task, in: schema, wanted: mask)
            }
            if let problem = compare(positional, "positionalValues") { return problem }

            let projector = projectors[which]
            var reused: [Value] = [.string("stale"), .int(1)]
            let projected = bytes.withUnsafeBytes { bytes in
                Result { () throws(ChangesetDecodingError) in
                    try projector.project(bytes, into: &reused) ? reused : nil
                }
            }
            if let problem = compare(projected, "the projector") { return problem }

            // What `locate` answers must hold too: a record it locates decodes, to the values it reads in place.
            var fields = RecordProjector.Fields()
            let located = bytes.withUnsafeBytes { bytes -> Result<[Value]?, ChangesetDecodingError>? in
                switch projector.locate(bytes, into: &fields) {
                case .exists:
                    return .success(
                        projector.type.properties.indices.map { projector.value(at: $0, in: bytes, fields) })
                case .tombstone: return .success(nil)
                case .needsFullDecoder: return nil
                }
            }
            if let located, let problem = compare(located, "locate") { return problem }
        }
        return nil
    }

    /// The values ``ObjectRecord/positionalValues(decoding:of:in:wanted:limits:)`` should read, from the decoded
    /// record by way of the plain reader ``ObjectRecord/values(of:in:)``.
    static func positional(_ record: ObjectRecord, wanted: [Bool]?) -> [Value] {
        let byName = record.values(of: task, in: schema)
        return task.properties.indices.map { position in
            let property = task.properties[position]
            let isWanted = wanted.map { position < $0.count && $0[position] } ?? true
            return property.name != task.primaryKey && isWanted ? byName[property.name] ?? .null : .null
        }
    }

    /// What is wrong with re-encoding a decoded record, or `nil`: the encoding decodes, and encodes to itself.
    static func roundTripProblem(_ record: ObjectRecord) -> String? {
        let encoded = record.encoded()
        guard let again = try? ObjectRecord(decoding: encoded) else { return "a decoded record re-encodes to damage" }
        guard again.encoded() == encoded else { return "a decoded record does not re-encode to the same bytes" }
        var problem: String?
        func visit(_ fields: FieldTable) {
            for (_, state) in fields {
                switch state {
                case .register(let register):
                    if case .embedded(let child) = register.value { visit(child.fields) }
                case .list(let list):
                    var occupied = Set<ElementID>()
                    for element in list.elements.values {
                        if !occupied.insert(element.position).inserted {
                            problem = "two live elements occupy slot \(element.position)"
                        }
                        if case .embedded(let child) = element.value { visit(child.fields) }
                    }
                case .dictionary:
                    continue
                }
            }
        }
        visit(record.fields)
        return problem
    }
}

extension [UInt8] {
    /// Bytes from hexadecimal text (whitespace ignored); `nil` for anything else.
    init?(hex: String) {
        let digits = hex.filter { !$0.isWhitespace }
        guard digits.count.isMultiple(of: 2) else { return nil }
        var bytes: [UInt8] = []
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            guard let byte = UInt8(digits[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        self = bytes
    }
}
