public import Foundation
public import TributaryModel

/// A top-level object type defined by a Swift `Codable` struct.
///
/// ```swift
/// struct Task: Model {
///     var _id: String
///     var title: String
///     var priority: Int = 0
///     var tags: [String] = []
///     var assignee: Link<User>?
///     static let indexedProperties: Set<String> = ["priority"]
/// }
/// ```
/// The schema is derived from the type's `Codable` conformance: each stored property becomes a property of the
/// same name (optionals are optional, arrays are lists, ``EmbeddedModel`` values are embedded objects, ``Link``
/// values link to other objects). Give defaults, indexes, a different type name or primary key with the static
/// requirements below.
public protocol Model: Codable, Sendable {
    /// The object type's name. Default: the Swift type's name.
    static var typeName: String { get }
    /// The name of the primary key property. Default: `_id`.
    static var primaryKeyProperty: String { get }
    /// The properties with an index. Default: none.
    static var indexedProperties: Set<String> { get }
    /// Values a create fills in for properties the writer leaves out, for example when another replica creates
    /// the object with an older schema, and that objects gaining the property in a migration take. Default: none.
    static var defaultValues: [String: Value] { get }
    /// The constant initial values of the declaration's stored properties (`var isPublic = false`), which the schema
    /// takes as defaults where ``defaultValues`` gives none. The `@Model` macro (`import TributaryMacros`) fills it
    /// in from the declaration. Default: none.
    static var initialValues: [String: any Encodable] { get }
    /// For each ``LinkingObjects`` property, the link property of its source type that points at this type (Realm's
    /// `originProperty`): needed only when the source type links to this type through more than one property.
    /// Default: none.
    static var originProperties: [String: String] { get }
}

extension Model {
    public static var typeName: String { String(describing: Self.self) }
    public static var primaryKeyProperty: String { "_id" }
    public static var indexedProperties: Set<String> { [] }
    public static var defaultValues: [String: Value] { [:] }
    public static var initialValues: [String: any Encodable] { [:] }
    public static var originProperties: [String: String] { [:] }
}

extension Value {
    /// A mixed value's link to the object of the model type `type` with `primaryKey` (Realm's
    /// `AnyRealmValue.object`): `Value.typedLink(type:key:)` with the model's type name.
    public static func link<Target: Model>(to type: Target.Type, primaryKey: PrimaryKey) -> Value {
        .typedLink(type: Target.typeName, key: primaryKey)
    }
}

/// An embedded object type defined by a Swift `Codable` struct: owned by one parent object, deleted with it,
/// and merged field by field while it stays the same instance.
public protocol EmbeddedModel: Codable, Sendable, Hashable {
    /// The embedded type's name. Default: the Swift type's name.
    static var typeName: String { get }
    /// Values of fields an embedded object is made without (by another release of the app), and that embedded
    /// objects gaining the field in a migration take. Default: none.
    static var defaultValues: [String: Value] { get }
    /// The constant initial values of the declaration's stored properties, as defaults where ``defaultValues`` gives
    /// none; the `@EmbeddedModel` macro (`import TributaryMacros`) fills it in. Default: none.
    static var initialValues: [String: any Encodable] { get }
}

extension EmbeddedModel {
    public static var typeName: String { String(describing: Self.self) }
    public static var defaultValues: [String: Value] { [:] }
    public static var initialValues: [String: any Encodable] { [:] }
}

/// Marks the types that stand for a link in a model.
protocol LinkValue {
    static var targetTypeName: String { get }
    init(linkTo primaryKey: PrimaryKey)
    var primaryKey: PrimaryKey { get }
}

/// A link to an object of another (or the same) model type, by primary key.
///
/// A link whose target is deleted reads as `nil` (for a `Link<T>?` property) and leaves its list.
public struct Link<Target: Model>: Codable, Hashable, Sendable {
    /// The target's primary key.
    public var primaryKey: PrimaryKey

    public init(primaryKey: PrimaryKey) { self.primaryKey = primaryKey }

    /// A link to the object with this primary key.
    public init(_ key: some PrimaryKeyConvertible) { self.primaryKey = key.primaryKey }

    // Outside Tributary (for example with JSONEncoder), a link is its primary key's plain value.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let int = try? container.decode(Int64.self) {
            primaryKey = .int(int)
        } else {
            let text = try container.decode(String.self)
            primaryKey =
                ObjectID(hex: text).map(PrimaryKey.objectId) ?? UUID(uuidString: text).map(PrimaryKey.uuid)
                ?? .string(text)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch primaryKey {
        case .int(let int): try container.encode(int)
        case .string(let string): try container.encode(string)
        case .uuid(let uuid): try container.encode(uuid.uuidString)
        case .objectId(let id): try container.encode(id.description)
        }
    }
}

/// A value that can be a primary key: `String`, `Int`, `Int64`, `UUID`, `ObjectID` or `PrimaryKey` itself.
public protocol PrimaryKeyConvertible {
    var primaryKey: PrimaryKey { get }
}

extension String: PrimaryKeyConvertible { public var primaryKey: PrimaryKey { .string(self) } }
extension Int: PrimaryKeyConvertible { public var primaryKey: PrimaryKey { .int(Int64(self)) } }
extension Int64: PrimaryKeyConvertible { public var primaryKey: PrimaryKey { .int(self) } }
extension UUID: PrimaryKeyConvertible { public var primaryKey: PrimaryKey { .uuid(self) } }
extension ObjectID: PrimaryKeyConvertible { public var primaryKey: PrimaryKey { .objectId(self) } }
extension PrimaryKey: PrimaryKeyConvertible { public var primaryKey: PrimaryKey { self } }

extension Link: LinkValue {
    static var targetTypeName: String { Target.typeName }
    init(linkTo primaryKey: PrimaryKey) { self.init(primaryKey: primaryKey) }
}
