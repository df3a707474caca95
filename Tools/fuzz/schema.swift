// Schemas: as JSON (what apps and `tributaryd` read) and in their binary form (what the views store on disk). Each
// decodes or is refused, never traps; what decodes re-encodes to a form that decodes to the same schema.
import Foundation
import TributaryModel

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: OpaquePointer?, _ argv: OpaquePointer?) -> CInt {
    let schema = Schema(
        version: 3,
        types: [
            ObjectSchema(
                name: "Task",
                properties: [
                    .scalar("_id", .objectId), .scalar("title", .string, indexed: true),
                    .scalar("count", .int, default: .int(5)), .scalar("ratio", .double, optional: true),
                    Property("tags", .scalar(.string), list: true), Property("owner", .link("Person")),
                    Property("spot", .embedded("Spot")),
                ]),
            ObjectSchema(name: "Person", primaryKey: "name", properties: [.scalar("name", .string)]),
            .embedded("Spot", properties: [.scalar("label", .string), .scalar("when", .date)]),
        ])
    var writer = BinaryWriter()
    writer.schema(schema)
    // The first byte says which form follows: 0 JSON, 1 binary.
    writeSeeds([[0] + Array(schema.jsonData()), [1] + writer.bytes])
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = input(data, size)
    guard let form = bytes.first else { return 0 }
    let body = Array(bytes.dropFirst())
    if form & 1 == 0 {
        guard let schema = try? Schema(json: body) else { return 0 }
        let json = schema.jsonData()
        guard let again = try? Schema(json: json) else { wrong("a schema's JSON does not read back") }
        guard again.jsonData() == json else { wrong("a schema's JSON reads back to another schema") }
        guard binaryRoundTrip(schema) else { wrong("a schema read from JSON does not round-trip in binary") }
    } else {
        var reader = BinaryReader(body, subject: "schema")
        guard let schema = try? reader.schema(), reader.isAtEnd else { return 0 }
        guard binaryRoundTrip(schema) else { wrong("a stored schema does not round-trip") }
    }
    return 0
}

/// Whether `schema`'s binary form decodes to a schema with the same binary form.
private func binaryRoundTrip(_ schema: Schema) -> Bool {
    var writer = BinaryWriter()
    writer.schema(schema)
    var reader = BinaryReader(writer.bytes, subject: "schema")
    guard let again = try? reader.schema(), reader.isAtEnd else { return false }
    var rewriter = BinaryWriter()
    rewriter.schema(again)
    return rewriter.bytes == writer.bytes
}
