public import TributaryModel

/// The stored state of one object: its values and the merge metadata that lets any replica integrate any
/// concurrent change and reach the same state (docs/MergeSemantics.md).
///
/// Records are values. They are encoded with every collection sorted, so two replicas holding the same
/// record hold the same bytes.
public struct ObjectRecord: Hashable, Sendable {
    /// Whether the object exists (it was created and is not erased).
    public var exists: Bool
    /// The erases of this object that no later erase has seen: a write survives only if its causal context
    /// covers every one of them (rule 2). Sorted.
    public var erasures: [Dot]
    /// Property states by name.
    public var fields: FieldTable

    public init(exists: Bool = false, erasures: [Dot] = [], fields: FieldTable = [:]) {
        self.exists = exists
        self.erasures = erasures
        self.fields = fields
    }
}

/// The state of one property.
public enum FieldState: Hashable, Sendable {
    /// A single value (scalar, link or embedded object), last writer wins.
    case register(Register)
    /// A list.
    case list(ListState)
    /// A dictionary: each key merged as a field (rule 1).
    case dictionary(DictionaryState)
}

extension FieldState {
    /// Lets `body` change, in place, each embedded object instance the state holds itself: a register's, a list
    /// element's, a dictionary entry's (not those nested in them: `body` goes further when it needs to).
    public mutating func updateEmbedded(_ body: (inout StoredValue) throws -> Void) rethrows {
        switch self {
        case .register(var register):
            guard case .embedded = register.value else { return }
            self = .register(Register(value: .scalar(.null), stamp: register.stamp))  // `register` the only reference
            defer { self = .register(register) }
            try body(&register.value)
        case .list(var list):
            guard list.elements.values.contains(where: { if case .embedded = $0.value { true } else { false } }) else {
                return
            }
            self = .list(ListState())
            defer { self = .list(list) }
            for id in list.elements.keys {
                guard var value = list.elements[id]?.value, case .embedded = value else { continue }
                try body(&value)
                list.elements[id]?.value = value
            }
        case .dictionary(var dictionary):
            guard dictionary.entries.values.contains(where: { if case .embedded? = $0.value { true } else { false } })
            else { return }
            self = .dictionary(DictionaryState())
            defer { self = .dictionary(dictionary) }
            for key in dictionary.entries.keys {
                guard var value = dictionary.entries[key]?.value, case .embedded = value else { continue }
                try body(&value)
                dictionary.entries[key]?.value = value
            }
        }
    }
}

/// A dictionary: the latest write of each key (a value, or an erase), and the stamp of the latest write of the whole
/// dictionary, which replaced every key written before it. Every change is "the later stamp wins", so replicas that
/// apply the same writes in any order hold the same state (rule 1, key by key).
public struct DictionaryState: Hashable, Sendable {
    /// Each key's latest write. An erased key stays, as an entry without a value, so that an earlier write of it
    /// delivered later still loses.
    public var entries: [String: DictionaryEntry]
    /// The stamp of the latest write of the whole dictionary (``Stamp/zero`` when none): writes of keys made before it
    /// no longer count.
    public var replaced: Stamp

    public init(entries: [String: DictionaryEntry] = [:], replaced: Stamp = .zero) {
        self.entries = entries
        self.replaced = replaced
    }

    /// A write of `key` (a value, or `nil` for an erase) made at `stamp`: it counts unless the key's last write or
    /// the last write of the whole dictionary is later. Of two writes with one stamp (one changeset), the later one.
    public mutating func write(_ key: String, _ value: StoredValue?, at stamp: Stamp) {
        guard stamp >= replaced else { return }
        if let current = entries[key], current.stamp > stamp { return }
        entries[key] = DictionaryEntry(value: value, stamp: stamp)
    }

    /// A write of the whole dictionary made at `stamp`: the keys written before it go, `values` take their places,
    /// and later writes of keys stay.
    public mutating func replace(with values: [String: StoredValue], at stamp: Stamp) {
        guard stamp >= replaced else { return }
        replaced = stamp
        entries = entries.filter { $0.value.stamp >= stamp }
        for key in values.keys.sorted() { write(key, values[key], at: stamp) }
    }

    /// The keys that hold a value, with their values.
    public var values: [String: StoredValue] { entries.compactMapValues(\.value) }
}

/// One key's latest write in a dictionary: its value (a scalar or link, or an embedded object instance whose fields
/// merge one by one while it stays the same instance, rule 6), or `nil` when it erased the key.
public struct DictionaryEntry: Hashable, Sendable {
    public var value: StoredValue?
    public var stamp: Stamp

    public init(value: StoredValue?, stamp: Stamp) {
        self.value = value
        self.stamp = stamp
    }
}

/// A last-writer-wins value with its stamp, and the increments added on top of it (rule 4).
public struct Register: Hashable, Sendable {
    public var value: StoredValue
    /// The stamp of the write that set `value`; ``Stamp/zero`` for a value filled from a default.
    public var stamp: Stamp
    /// The sum of increments made on top of this very value (their `base` is `stamp`).
    public var addend: Int64

    public init(value: StoredValue, stamp: Stamp, addend: Int64 = 0) {
        self.value = value
        self.stamp = stamp
        self.addend = addend
    }
}

/// A stored value: a scalar (or link, or null), or an embedded object instance with its own field states.
public enum StoredValue: Hashable, Sendable {
    case scalar(Value)
    case embedded(EmbeddedState)
}

/// An embedded object instance. Its fields merge one by one while it stays the same instance (rule 6).
public struct EmbeddedState: Hashable, Sendable {
    public var id: ElementID
    public var type: String
    public var fields: FieldTable

    public init(id: ElementID, type: String, fields: FieldTable) {
        self.id = id
        self.type = type
        self.fields = fields
    }
}

/// A list: positions in a Fugue tree, and elements that each occupy one position (rule 5).
///
/// Positions (slots) are never removed: they fix the order of everything inserted next to them. An element
/// that moved leaves its old slot empty. An erased element is removed outright: every instruction that names an
/// element does nothing when it is missing, and causal delivery means an element an instruction names but the list
/// lacks can only be an erased one (its insert arrived first), so a concurrent set or move of it finds it gone on
/// every replica alike.
public struct ListState: Hashable, Sendable {
    public var slots: [ElementID: Slot]
    public var elements: [ElementID: ListElement]

    public init(slots: [ElementID: Slot] = [:], elements: [ElementID: ListElement] = [:]) {
        self.slots = slots
        self.elements = elements
    }
}

/// A position in a list's Fugue tree.
public struct Slot: Hashable, Sendable {
    public var id: ElementID
    /// The parent position, or `nil` for the root.
    public var parent: ElementID?
    public var side: ListAnchor.Side
    /// Orders siblings: earlier first, then by id.
    public var stamp: Stamp

    public init(id: ElementID, parent: ElementID?, side: ListAnchor.Side, stamp: Stamp) {
        self.id = id
        self.parent = parent
        self.side = side
        self.stamp = stamp
    }
}

/// A list element: its value and its position, each last writer wins.
public struct ListElement: Hashable, Sendable {
    public var id: ElementID
    public var value: StoredValue
    public var valueStamp: Stamp
    /// The slot the element occupies.
    public var position: ElementID
    public var positionStamp: Stamp

    public init(id: ElementID, value: StoredValue, valueStamp: Stamp, position: ElementID, positionStamp: Stamp) {
        self.id = id
        self.value = value
        self.valueStamp = valueStamp
        self.position = position
        self.positionStamp = positionStamp
    }
}
