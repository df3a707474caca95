public import TributaryModel

/// An object read from a replica, by property name: for code that has no model type (tools, the daemon), and the
/// form every typed read goes through.
///
/// A value type: it is a copy of the object as of the snapshot that read it, and never changes. An object read from
/// a replica keeps its values by property position, as its type declares them, and finds a property by name through
/// the type's index; ``values`` builds the dictionary only when asked.
public struct DynamicObject: Hashable, Sendable, CustomStringConvertible {
    /// The object's type name.
    public let type: String
    /// The object's primary key.
    public let primaryKey: PrimaryKey
    /// The type whose properties' order `positionalValues` follows, for an object read from a replica; `nil` for one
    /// made from values by name, which `namedValues` holds. (Stored properties rather than an enum: reading one
    /// property then retains nothing.)
    private let positionalType: PositionalType?
    /// One value per property of the type, in its order: the primary key's and resolved links included.
    private let positionalValues: [Value]
    /// `nil` for an object read from a replica, so that copying one retains nothing for it.
    private let namedValues: [String: Value]?

    /// The type whose properties' order positional values follow: shared by every object a read returns, so that
    /// making one copies nothing but a reference.
    final class PositionalType: Sendable {
        let schema: ObjectSchema
        /// `schema.name`, kept apart, as is the index: reading either through `schema` copies the whole definition.
        let name: String
        /// Finds a property's position by name.
        let index: PropertyIndex
        /// Whether the type has computed properties (``LinkingObjects``), which a read as a model fills in.
        let hasLinkingObjects: Bool
        /// The properties' names, in order.
        var names: [String] { index.names }

        init(_ schema: ObjectSchema) {
            self.schema = schema
            name = schema.name
            index = schema.propertyIndex
            hasLinkingObjects = !schema.linkingObjects.isEmpty
        }
    }

    public init(type: String, primaryKey: PrimaryKey, values: [String: Value]) {
        self.type = type
        self.primaryKey = primaryKey
        self.positionalType = nil
        self.positionalValues = []
        self.namedValues = values
    }

    /// An object with one value per property of `schema`, in its order.
    init(schema: PositionalType, primaryKey: PrimaryKey, positional values: [Value]) {
        self.type = schema.name
        self.primaryKey = primaryKey
        self.positionalType = schema
        self.positionalValues = values
        self.namedValues = nil
    }

    /// Every property's value, the primary key included (under its property name).
    public var values: [String: Value] {
        guard let type = positionalType else { return namedValues ?? [:] }
        var result: [String: Value] = Dictionary(minimumCapacity: positionalValues.count)
        for (name, value) in zip(type.names, positionalValues) { result[name] = value }
        return result
    }

    /// The value of a property (`Value/null` for an unknown name).
    public subscript(property: String) -> Value {
        guard let type = positionalType else { return namedValues?[property] ?? .null }
        guard let position = type.index.position(of: property), position < positionalValues.count else { return .null }
        return positionalValues[position]
    }

    /// The object's values by position and their type, when it holds them so.
    var positional: (type: PositionalType, values: [Value])? {
        positionalType.map { ($0, positionalValues) }
    }

    /// Whether the object's type is known to have no computed properties (``LinkingObjects``), without a lookup in a
    /// schema: true of an object a read returned, whose type is that read's.
    var lacksLinkingObjects: Bool { positionalType.map { !$0.hasLinkingObjects } ?? false }

    /// The value of the property at `position` in `type` (the object's type): read in place when the object holds
    /// its values by position, as every object a read returns does.
    @inline(__always)
    func value(atPosition position: Int, of type: ObjectSchema) -> Value {
        guard positionalType != nil else {
            return position < type.properties.count ? namedValues?[type.properties[position].name] ?? .null : .null
        }
        return position < positionalValues.count ? positionalValues[position] : .null
    }

    /// Equal objects have the same type, primary key and values by name, however they are held. Values compare as they
    /// store (`Value/storesAlike(_:)`): a string in the other Unicode normalization, or -0.0 for 0.0, is a change,
    /// and a NaN equals itself.
    public static func == (lhs: DynamicObject, rhs: DynamicObject) -> Bool {
        guard lhs.type == rhs.type, lhs.primaryKey == rhs.primaryKey else { return false }
        if let leftType = lhs.positionalType, let rightType = rhs.positionalType,
            case (let leftValues, let rightValues) = (lhs.positionalValues, rhs.positionalValues),
            leftType === rightType
                || {
                    let (left, right) = (leftType.schema, rightType.schema)
                    return left.properties.count == right.properties.count
                        && left.properties.indices.allSatisfy({ left.properties[$0].name == right.properties[$0].name })
                }()
        {
            return leftValues.count == rightValues.count
                && zip(leftValues, rightValues).allSatisfy { $0.storesAlike($1) }
        }
        let (left, right) = (lhs.values, rhs.values)
        return left.count == right.count
            && left.allSatisfy { name, value in right[name].map(value.storesAlike) ?? false }
    }

    /// Hashes the type and primary key: equal objects have equal ones, and the values need no dictionary.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(type)
        hasher.combine(primaryKey)
    }

    public var description: String {
        let values = self.values
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
