public import TributaryModel

/// Where a query finds the objects that links point to.
///
/// A link ``Value`` holds only its target's primary key; the schema says the target's type. When a key path
/// goes through a link (`author.name == $0`), the evaluator asks the source for the target's fields. A link
/// whose target the source does not have reads as null, and is left out of a list of links.
///
/// The source is read during ``Query/matches(_:source:)`` and ``Query/apply(to:source:)`` only, and never
/// stored. Storage layers conform a read transaction to it; tests and in-memory callers use
/// ``InMemoryObjectSource``.
///
/// ```swift
/// struct Snapshot: QueryObjectSource {
///     var objects: [String: [PrimaryKey: [String: Value]]]
///     func object(type: String, primaryKey: PrimaryKey) -> [String: Value]? {
///         objects[type]?[primaryKey]
///     }
/// }
/// ```
public protocol QueryObjectSource {
    /// The fields of the object of type `type` with primary key `primaryKey`, or `nil` when there is none.
    ///
    /// - Parameters:
    ///   - type: The name of a top-level object type of the schema.
    ///   - primaryKey: The primary key a link holds.
    /// - Returns: The object's property values by name, its primary key property included.
    func object(type: String, primaryKey: PrimaryKey) -> [String: Value]?

    /// The objects of type `type` whose property `property` (a link, or a list of links) points at the object with
    /// primary key `primaryKey`, for backlinks (`@links.Type.property`). An object whose list holds the link more than
    /// once is there once per link, as Realm counts backlinks.
    ///
    /// - Returns: The objects' property values by name, their primary key property included, in any order.
    func objects(type: String, linkingTo primaryKey: PrimaryKey, through property: String) -> [[String: Value]]
}

/// A ``QueryObjectSource`` over objects held in memory, by type and primary key.
///
/// ```swift
/// var source = InMemoryObjectSource()
/// source.insert(type: "Person", primaryKey: .string("ada"), ["_id": "ada", "name": "Ada"])
/// let query = try Query("author.name == 'Ada'", type: book, schema: schema)
/// query.matches(bookFields, source: source)
/// ```
public struct InMemoryObjectSource: QueryObjectSource, Hashable, Sendable {
    /// The objects, by type name and primary key.
    public var objects: [String: [PrimaryKey: [String: Value]]]

    /// A source holding `objects`; empty by default, for queries that follow no links.
    public init(objects: [String: [PrimaryKey: [String: Value]]] = [:]) {
        self.objects = objects
    }

    /// Adds or replaces one object.
    public mutating func insert(type: String, primaryKey: PrimaryKey, _ fields: [String: Value]) {
        objects[type, default: [:]][primaryKey] = fields
    }

    public func object(type: String, primaryKey: PrimaryKey) -> [String: Value]? {
        objects[type]?[primaryKey]
    }

    public func objects(type: String, linkingTo primaryKey: PrimaryKey, through property: String) -> [[String: Value]] {
        (objects[type] ?? [:]).sorted { $0.key < $1.key }.flatMap { _, fields in
            let count = linkedKeys(fields[property] ?? .null).count { $0 == primaryKey }
            return Array(repeating: fields, count: count)
        }
    }
}

/// The primary keys `value` links to: one for a link, one per link for a list of links (a key listed twice is here
/// twice), none for any other value. What a link property contributes to backlinks.
package func linkedKeys(_ value: Value) -> [PrimaryKey] {
    switch value {
    case .link(let key): [key]
    case .list(let elements): elements.compactMap(\.linkValue)
    default: []
    }
}
