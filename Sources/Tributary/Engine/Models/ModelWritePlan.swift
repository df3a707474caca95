import Foundation
import TributaryModel

/// The fast path of a model write: a model's values encoded straight into the positions of its type's create plan,
/// without the tree of nodes and the dictionaries of ``ModelCoding/valuesAndAside(of:type:schema:declared:names:)``.
///
/// It applies when the app's release declares exactly the properties the schema holds for the type, and no other
/// release renamed or redefined any of them (``ModelNames`` is empty): the general path then writes every property of
/// the type, under its own name, which is what this one writes. A transaction works it out once per model type while
/// its schema stays the same. Anything out of the ordinary (a hand-written `encode(to:)` that uses nested or unkeyed
/// containers, a key the type lacks, a value the property cannot hold) makes ``values(of:)`` return `nil`, and the
/// general path writes the model or names the fault, so both paths give the same values and the same errors.
final class ModelWritePlan {
    /// The type's create plan: its properties other than the primary key, in the order a create lists its fields.
    let create: Transaction.CreatePlan
    /// The primary key's slot in the values: after the create plan's properties.
    var keySlot: Int { create.properties.count }
    /// The property of each slot (the primary key's last).
    let properties: [Property]
    /// Each property's slot, by name.
    let slots: [String: Int]
    /// How each slot's scalar value is conformed to its property.
    let conversions: [ModelCoding.ScalarConversion]
    /// What a slot holds when the model encodes nothing for it, as ``ModelCoding`` conforms a missing value: an empty
    /// list or dictionary for a collection, null otherwise.
    let absent: [Value]
    /// The type, as the transaction's schema holds it.
    let type: ObjectSchema
    let schema: Schema
    /// What this release of the app declared (embedded objects leave out what it does not know), or `nil`.
    let declared: Schema?
    /// Reused by every write with this plan (a model's `encode(to:)` cannot start another write).
    private let encoder: PositionalEncoder

    /// `nil` when the type has no primary key.
    init?(type: ObjectSchema, schema: Schema, declared: Schema?) {
        guard let keyName = type.primaryKey, let keyProperty = type[property: keyName] else { return nil }
        self.type = type
        self.schema = schema
        self.declared = declared
        create = Transaction.CreatePlan(type)
        properties = create.properties + [keyProperty]
        var slots: [String: Int] = [:]
        for (slot, property) in properties.enumerated() { slots[property.name] = slot }
        self.slots = slots
        conversions = properties.map(ModelCoding.scalarConversion(of:))
        absent = properties.map { $0.isList ? .list([]) : $0.isDictionary ? .dictionary([:]) : .null }
        encoder = PositionalEncoder()
    }

    /// The values of `object` by slot (the create plan's properties, then the primary key), each as the property
    /// stores it, or `nil` for the general path.
    func values<M: Encodable>(of object: M) -> [Value]? {
        // A model whose encoding writes another through this plan: the general path takes the inner one.
        guard encoder.plan == nil else { return nil }
        encoder.start(self)
        defer { encoder.finish() }
        do { try object.encode(to: encoder) } catch { return nil }
        return encoder.failed ? nil : encoder.values
    }

    /// `values` (from ``values(of:)``) by property name, as ``ModelCoding`` gives a model's values.
    func dictionary(_ values: [Value]) -> [String: Value] {
        var dictionary: [String: Value] = [:]
        dictionary.reserveCapacity(values.count)
        for (slot, property) in properties.enumerated() { dictionary[property.name] = values[slot] }
        return dictionary
    }

    /// Conforms one value the model encoded to the property of `slot`, as ``ModelCoding`` does; `nil` when it does
    /// not conform (the general path names the fault).
    fileprivate func conform(_ value: Value, slot: Int) -> Value? {
        if let conformed = ModelCoding.conformScalar(value, conversions[slot]) { return conformed }
        let property = properties[slot]
        return try? ModelCoding.conform(
            value.isNull ? .null : .value(value), to: property, schema: schema, declared: declared,
            path: "\(type.name).\(property.name)")
    }

    /// Conforms a value that encodes itself (an embedded object, a list, a dictionary) to the property of `slot`.
    fileprivate func conform<T: Encodable>(encoding value: T, slot: Int, codingPath: [any CodingKey]) -> Value? {
        guard let node = try? TreeEncoder.encode(value, codingPath: codingPath) else { return nil }
        let property = properties[slot]
        return try? ModelCoding.conform(
            node.resolved, to: property, schema: schema, declared: declared, path: "\(type.name).\(property.name)")
    }
}

/// The encoder of ``ModelWritePlan``: the top-level keyed container stores each value in its property's slot.
private final class PositionalEncoder: Encoder {
    var codingPath: [any CodingKey] { [] }
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    /// The plan that owns this encoder, while it encodes a model (held only then: the plan holds the encoder).
    private(set) var plan: ModelWritePlan?
    /// The value of each slot: what the model encoded, conformed, or the slot's absent value.
    var values: [Value] = []
    /// Whether the model encoded something this path leaves to the general one.
    var failed = false
    /// The keys in the order the last model encoded them, with their slots: the next model of the type encodes the
    /// same keys in the same order, so each is compared with one name instead of looked up.
    private var keyOrder: [(name: String, slot: Int)] = []
    private var next = 0

    func start(_ plan: ModelWritePlan) {
        self.plan = plan
        failed = false
        next = 0
        if values.count == plan.absent.count {
            for slot in values.indices { values[slot] = plan.absent[slot] }
        } else {
            values = plan.absent
        }
    }

    func finish() { plan = nil }

    /// The slot of the property `name`, if the type has one.
    @inline(__always)
    func slot(_ name: String) -> Int? {
        if next < keyOrder.count, keyOrder[next].name == name {
            next += 1
            return keyOrder[next - 1].slot
        }
        guard let slot = plan?.slots[name] else { return nil }
        // Learn the order from the first model, or relearn it from here on.
        keyOrder.removeSubrange(min(next, keyOrder.count)...)
        keyOrder.append((name, slot))
        next = keyOrder.count
        return slot
    }

    func set(_ value: Value, forKey name: String) {
        guard let plan, let slot = slot(name), let conformed = plan.conform(value, slot: slot) else {
            failed = true
            return
        }
        values[slot] = conformed
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        KeyedEncodingContainer(PositionalKeyedContainer<Key>(encoder: self))
    }

    /// Not an object: left to the general path, which names the fault.
    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        failed = true
        return TreeEncoder(codingPath: []).unkeyedContainer()
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        failed = true
        return TreeEncoder(codingPath: []).singleValueContainer()
    }
}

private struct PositionalKeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let encoder: PositionalEncoder
    var codingPath: [any CodingKey] { [] }

    mutating func encodeNil(forKey key: Key) throws { encoder.set(.null, forKey: key.stringValue) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { encoder.set(.bool(value), forKey: key.stringValue) }
    mutating func encode(_ value: String, forKey key: Key) throws {
        encoder.set(.string(value), forKey: key.stringValue)
    }
    mutating func encode(_ value: Double, forKey key: Key) throws {
        encoder.set(.double(value), forKey: key.stringValue)
    }
    mutating func encode(_ value: Float, forKey key: Key) throws {
        encoder.set(.double(Double(value)), forKey: key.stringValue)
    }
    mutating func encode(_ value: Int, forKey key: Key) throws {
        encoder.set(.int(Int64(value)), forKey: key.stringValue)
    }
    mutating func encode(_ value: Int64, forKey key: Key) throws { encoder.set(.int(value), forKey: key.stringValue) }
    mutating func encode(_ value: Int32, forKey key: Key) throws {
        encoder.set(.int(Int64(value)), forKey: key.stringValue)
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        // Computed as the object is read, never written.
        if value is any LinkingObjectsValue { return }
        let name = key.stringValue
        let direct: Value?
        do { direct = try TreeEncoder.directValue(value, codingPath: []) } catch {
            // A value out of range (an unsigned integer over Int64.max): the general path names it.
            encoder.failed = true
            return
        }
        if let direct {
            encoder.set(direct, forKey: name)
            return
        }
        guard let plan = encoder.plan, let slot = encoder.slot(name),
            let conformed = plan.conform(encoding: value, slot: slot, codingPath: [key])
        else {
            encoder.failed = true
            return
        }
        encoder.values[slot] = conformed
    }

    /// Hand-written encodings with nested containers take the general path.
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
        -> KeyedEncodingContainer<NestedKey>
    {
        encoder.failed = true
        return TreeEncoder(codingPath: []).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        encoder.failed = true
        return TreeEncoder(codingPath: []).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        encoder.failed = true
        return TreeEncoder(codingPath: [])
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        encoder.failed = true
        return TreeEncoder(codingPath: [])
    }
}
