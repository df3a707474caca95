import Foundation

/// A value in a `Codable` model: a mixed property (Realm's `AnyRealmValue`). Inside a replica it is stored as it
/// is; outside (a `JSONEncoder`, say) it encodes as the plain value it holds: null, a boolean, a number, or a string
/// (data as base64, a date as seconds since 1970, ids, decimals and links as their text). Decoding outside a
/// replica reads those back as null, a boolean, an integer, a double or a string.
extension Value: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let bool = try? container.decode(Bool.self) {
            self = .bool(bool)
        } else if let int = try? container.decode(Int64.self) {
            self = .int(int)
        } else if let double = try? container.decode(Double.self) {
            self = .double(double)
        } else {
            self = .string(try container.decode(String.self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let bool): try container.encode(bool)
        case .int(let int): try container.encode(int)
        case .double(let double): try container.encode(double)
        case .float(let float): try container.encode(float)
        case .decimal(let decimal): try container.encode(decimal.canonicalText)
        case .string(let string): try container.encode(string)
        case .data(let data): try container.encode(data.base64EncodedString())
        case .date(let date): try container.encode(date.timeIntervalSince1970)
        case .uuid(let uuid): try container.encode(uuid.uuidString)
        case .objectId(let id): try container.encode(id.description)
        case .link(.int(let int)), .typedLink(_, .int(let int)): try container.encode(int)
        case .link(.string(let string)), .typedLink(_, .string(let string)): try container.encode(string)
        case .link(.uuid(let uuid)), .typedLink(_, .uuid(let uuid)): try container.encode(uuid.uuidString)
        case .link(.objectId(let id)), .typedLink(_, .objectId(let id)): try container.encode(id.description)
        case .embedded, .list, .dictionary: try container.encode(description)
        }
    }
}
