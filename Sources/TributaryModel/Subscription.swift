/// One query of a flexible-sync subscription set: the objects of ``type`` that match ``query`` (a Realm Query
/// Language predicate) are held by the device that subscribes.
///
/// A subscription is named (``name`` is not `nil`: a later one of the same name replaces it) or anonymous (a second
/// one with the same type and query is the same subscription).
public struct Subscription: Sendable, Hashable, CustomStringConvertible {
    /// The name the app gave it, or `nil` for an anonymous subscription.
    public var name: String?
    /// The object type it selects.
    public var type: String
    /// The predicate, in the Realm Query Language, without SORT, DISTINCT or LIMIT (`conversationID == 'c1'`).
    /// `TRUEPREDICATE` selects every object of the type.
    public var query: String

    public init(name: String? = nil, type: String, query: String) {
        self.name = name
        self.type = type
        self.query = query
    }

    public var description: String {
        (name.map { "\"\($0)\": " } ?? "") + "\(type) where \(query)"
    }
}

extension BinaryWriter {
    /// A list of subscriptions: a count, then each one's name (empty for anonymous), type and query as strings.
    package mutating func subscriptions(_ subscriptions: [Subscription]) {
        varint(subscriptions.count)
        for subscription in subscriptions {
            string(subscription.name ?? "")
            string(subscription.type)
            string(subscription.query)
        }
    }
}

extension BinaryReader {
    /// Reads what ``BinaryWriter/subscriptions(_:)`` wrote: at most `maximum` subscriptions, each string at most
    /// `maximumText` bytes.
    package mutating func subscriptions(maximum: Int, maximumText: Int) throws(ChangesetDecodingError)
        -> [Subscription]
    {
        // Each takes at least three one-byte lengths.
        let count = try self.count("subscriptions", maximum: maximum, minimumBytesEach: 3)
        var result: [Subscription] = []
        result.reserveCapacity(count)
        for _ in 0..<count {
            let name = try boundedText("subscription name", maximum: maximumText)
            let type = try boundedText("subscription type", maximum: maximumText)
            let query = try boundedText("subscription query", maximum: maximumText)
            result.append(Subscription(name: name.isEmpty ? nil : name, type: type, query: query))
        }
        return result
    }

    private mutating func boundedText(_ what: String, maximum: Int) throws(ChangesetDecodingError) -> String {
        let length = try count(what + " length", maximum: maximum)
        let slice = try rawBytes(length, what)
        guard let string = String(validating: slice, as: UTF8.self) else {
            throw error(.invalidValue, "\(what) is not valid UTF-8")
        }
        return string
    }
}
