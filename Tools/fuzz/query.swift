// Queries in the Realm Query Language, as apps pass them: parsing and checking give a query or an error, never a
// trap; a query's positional predicate (what a scan runs on values by position) answers as plain evaluation does, on
// every sample object; SORT, DISTINCT and LIMIT run.
import Foundation
import TributaryModel
import TributaryQuery

private let task = ObjectSchema(
    name: "Task",
    properties: [
        .scalar("_id", .int), .scalar("title", .string), .scalar("count", .int),
        .scalar("ratio", .double, optional: true),
        .scalar("when", .date), .scalar("flag", .bool), .scalar("blob", .data), .scalar("token", .uuid, optional: true),
        .scalar("oid", .objectId, optional: true), Property("tags", .scalar(.string), list: true),
        Property("owner", .link("Person")),
    ])
private let person = ObjectSchema(
    name: "Person", primaryKey: "name", properties: [.scalar("name", .string), .scalar("age", .int)])
private let schema = Schema(version: 1, types: [task, person])

/// Arguments `$0` to `$4`.
private let arguments: [Value] = [.int(3), .string("Milk"), .null, .list([.int(1), .int(3)]), .double(.nan)]

private let objects: [[String: Value]] = [
    [
        "_id": 1, "title": "milk", "count": 3, "ratio": 0.5, "when": .date(Date(timeIntervalSince1970: 100)),
        "flag": true, "blob": .data(Data([1, 2])), "token": .null, "oid": .null, "tags": .list(["a", "b"]),
        "owner": .link(.string("ann")),
    ],
    [
        "_id": 2, "title": "Mïlk café", "count": -7, "ratio": .double(.nan),
        "when": .date(Date(timeIntervalSince1970: -5)),
        "flag": false, "blob": .data(Data()),
        "token": .uuid(UUID(uuid: (1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6))),
        "oid": .objectId(ObjectID(bytes: Array(0..<12))!), "tags": .list([]), "owner": .null,
    ],
    [
        "_id": 3, "title": "", "count": .int(.max), "ratio": .null, "when": .date(Date(timeIntervalSince1970: 0)),
        "flag": true, "blob": .data(Data([0xFF])), "token": .null, "oid": .null, "tags": .list(["MILK"]),
        "owner": .link(.string("bob")),
    ],
]

private let source: InMemoryObjectSource = {
    var source = InMemoryObjectSource()
    source.insert(type: "Person", primaryKey: .string("ann"), ["name": "ann", "age": 30])
    source.insert(type: "Person", primaryKey: .string("bob"), ["name": "bob", "age": .null])
    return source
}()

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: OpaquePointer?, _ argv: OpaquePointer?) -> CInt {
    let queries = [
        "count > $0 AND title CONTAINS[c] 'milk'", "ratio BETWEEN {0, 1} OR NOT flag == true", "count IN $3",
        "title ==[c] $1 SORT(count DESC) DISTINCT(flag) LIMIT(2)", "owner.age >= 18", "ANY tags BEGINSWITH 'a'",
        "tags.@count > 1", "when < $0 || token == nil", "blob != $2 && oid == nil", "ratio == $4",
        "TRUEPREDICATE SORT(title ASC)",
    ]
    writeSeeds(queries.map { Array($0.utf8) })
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: input(data, size), as: UTF8.self)
    guard let query = try? Query(text, arguments: arguments, type: task, schema: schema) else { return 0 }
    if let positional = query.positionalPredicate(for: task) {
        for object in objects {
            let values = task.properties.map { object[$0.name] ?? .null }
            let plain = query.matches(object, source: source)
            guard positional.matches(values) == plain else {
                wrong("'\(text)' on object \(object["_id"] ?? .null): positional \(!plain), plain \(plain)")
            }
        }
    }
    _ = query.apply(to: objects.enumerated().map { (PrimaryKey.int(Int64($0.offset + 1)), $0.element) }, source: source)
    return 0
}
