public import TributaryModel

/// An object read from a replica, by property name: for code that has no model type (tools, the daemon), and the
/// form every typed read goes through.
///
/// A value type: it is a copy of the object as of the snapshot that read it, and never changes.
public struct DynamicObject: Hashable, Sendable, CustomStringConvertible {
    /// The object's type name.
    public let type: String
    /// The object's primary key.
    public let primaryKey: PrimaryKey
    /// Every property's value, the primary key included (under its property name).
    public let values: [String: Value]

    public init(type: String, primaryKey: PrimaryKey, values: [String: Value]) {
        self.type = type
        self.primaryKey = primaryKey
        self.values = values
    }

    /// The value of a property (``Value/null`` for an unknown name).
    public subscript(property: String) -> Value { values[property] ?? .null }

    public var description: String {
        let fields = values.keys.sorted().map { "\($0): \(values[$0]!)" }
        return "\(type)[\(primaryKey)] {" + fields.joined(separator: ", ") + "}"
    }
}

/// One step of a ``PropertyPath``: a property name, or a position in a list.
public enum PathComponent: Hashable, Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    CustomStringConvertible
{
    case property(String)
    case index(Int)

    public init(stringLiteral value: String) { self = .property(value) }
    public init(integerLiteral value: Int) { self = .index(value) }

    public var description: String {
        switch self {
        case .property(let name): name
        case .index(let index): "[\(index)]"
        }
    }
}

/// A path from an object to one of its properties, through embedded objects and list positions:
/// `["address", "city"]`, `["tasks", 2, "title"]`.
public typealias PropertyPath = [PathComponent]
