public import TributaryModel

/// The field states of a record or an embedded object, by property name.
///
/// Kept sorted by name, as `String` orders names: the order the record encoding stores them in, so encoding needs no
/// sort and decoding appends. An object has a few fields, so a name is found by comparing names, not by hashing them:
/// a record costs one allocation for its fields instead of a hash table's.
public struct FieldTable: Hashable, Sendable, ExpressibleByDictionaryLiteral {
    fileprivate struct Entry: Hashable, Sendable {
        var name: String
        var state: FieldState
    }

    private var entries: [Entry] = []
    /// The states kept under shapes other than their property's definition (rule 8), sorted by name, then shape.
    /// Empty unless replicas defined a property differently.
    public private(set) var sideFields: [SideField] = []

    public init() {}

    /// A table of the given fields; a name given twice keeps its last state.
    public init(dictionaryLiteral elements: (String, FieldState)...) {
        for (name, state) in elements { self[name] = state }
    }

    /// The fields of a dictionary.
    public init(_ fields: [String: FieldState]) {
        entries = fields.map { Entry(name: $0.key, state: $0.value) }.sorted { $0.name < $1.name }
    }

    public var count: Int { entries.count }
    public var isEmpty: Bool { entries.isEmpty }

    public mutating func reserveCapacity(_ capacity: Int) { entries.reserveCapacity(capacity) }

    /// The last name in the table, the greatest.
    public var lastName: String? { entries.last?.name }

    /// The field names, sorted.
    public var names: [String] { entries.map(\.name) }
    /// The field states, in name order.
    public var states: some Collection<FieldState> { entries.lazy.map(\.state) }

    /// Where `name` is, or where it would go to keep the names sorted.
    private func position(of name: String) -> (index: Int, found: Bool) {
        // Most tables are small: compare for equality first, which is cheap, and order only when needed. A record
        // being built gets its fields in name order: each new one goes last.
        if entries.count <= 8 {
            for index in entries.indices {
                if entries[index].name == name { return (index, true) }
            }
            if let last = entries.last, last.name < name { return (entries.endIndex, false) }
            let index = entries.firstIndex { name < $0.name } ?? entries.endIndex
            return (index, false)
        }
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].name < name { low = middle + 1 } else { high = middle }
        }
        return (low, low < entries.count && entries[low].name == name)
    }

    /// The state of a field; setting `nil` removes the field.
    public subscript(name: String) -> FieldState? {
        get {
            let (index, found) = position(of: name)
            return found ? entries[index].state : nil
        }
        set {
            let (index, found) = position(of: name)
            switch (found, newValue) {
            case (true, let state?): entries[index].state = state
            case (true, nil): entries.remove(at: index)
            case (false, let state?): insert(Entry(name: name, state: state), at: index)
            case (false, nil): break
            }
        }
        _modify {
            let (index, found) = position(of: name)
            var state: FieldState?
            if found {
                // Move the state out, so that changing it in place copies nothing it holds.
                state = entries[index].state
                entries[index].state = Self.placeholder
            }
            defer {
                switch (found, state) {
                case (true, let state?): entries[index].state = state
                case (true, nil): entries.remove(at: index)
                case (false, let state?): insert(Entry(name: name, state: state), at: index)
                case (false, nil): break
                }
            }
            yield &state
        }
    }

    private mutating func insert(_ entry: Entry, at index: Int) {
        // Appending is the common case (a record being built) and cheaper than a general insert.
        if index == entries.endIndex { entries.append(entry) } else { entries.insert(entry, at: index) }
    }

    private static let placeholder = FieldState.register(Register(value: .scalar(.null), stamp: .zero))

    /// Adds a field whose name sorts after every name in the table: what a decoder reading sorted names does.
    /// Returns `false`, changing nothing, when the name does not sort after the last one.
    public mutating func appendInOrder(_ name: String, _ state: FieldState) -> Bool {
        if let last = entries.last, !(last.name < name) { return false }
        entries.append(Entry(name: name, state: state))
        return true
    }

    /// Calls `body` with each field in name order, reading them where they are instead of copying each one out as
    /// iterating does: what an encoder walking every record wants.
    func forEachField(_ body: (String, FieldState) -> Void) {
        entries.withUnsafeBufferPointer { entries in
            for index in entries.indices { body(entries[index].name, entries[index].state) }
        }
    }

    /// The state kept for `name` under `shape`, a shape other than its definition's (rule 8); setting `nil` removes
    /// it.
    public subscript(name: String, shape shape: PropertyShape) -> FieldState? {
        get { sideFields.first { $0.name == name && $0.shape == shape }?.state }
        set {
            let index = sideFields.firstIndex { $0.name == name && $0.shape == shape }
            switch (index, newValue) {
            case (let index?, let state?): sideFields[index].state = state
            case (let index?, nil): sideFields.remove(at: index)
            case (nil, let state?):
                let side = SideField(name: name, shape: shape, state: state)
                let at = sideFields.firstIndex { ($0.name, $0.shape) > (name, shape) } ?? sideFields.endIndex
                sideFields.insert(side, at: at)
            case (nil, nil): break
            }
        }
    }

    /// The state of `name` under `shape` when given (kept aside), else its state in the usual place, which is
    /// changed in place.
    public subscript(name: String, shape: PropertyShape?) -> FieldState? {
        get { shape.map { self[name, shape: $0] } ?? self[name] }
        set {
            if let shape { self[name, shape: shape] = newValue } else { self[name] = newValue }
        }
        _modify {
            if let shape {
                var state = self[name, shape: shape]
                defer { self[name, shape: shape] = state }
                yield &state
            } else {
                yield &self[name]
            }
        }
    }

    /// Every state of `name`: the one under its definition's shape (`visible`), and those kept under other shapes.
    public func states(of name: String, visible: PropertyShape) -> [PropertyShape: FieldState] {
        var states: [PropertyShape: FieldState] = [:]
        for side in sideFields where side.name == name { states[side.shape] = side.state }
        if let state = self[name] { states[visible] = state }
        return states
    }

    /// Replaces every state of `name` with `states`: the one under `visible` in its usual place, the others aside.
    public mutating func setStates(_ states: [PropertyShape: FieldState], of name: String, visible: PropertyShape) {
        removeStates(of: name)
        self[name] = states[visible]
        for (shape, state) in states where shape != visible { self[name, shape: shape] = state }
    }

    /// Removes every state of `name`, under any shape.
    public mutating func removeStates(of name: String) {
        removeValue(forKey: name)
        if !sideFields.isEmpty { sideFields.removeAll { $0.name == name } }
    }

    /// Adds a side state whose (name, shape) sorts after every one in the table: what a decoder reading sorted
    /// sides does. Returns `false`, changing nothing, when it does not.
    public mutating func appendSideInOrder(_ side: SideField) -> Bool {
        if let last = sideFields.last, !((last.name, last.shape) < (side.name, side.shape)) { return false }
        sideFields.append(side)
        return true
    }

    /// Removes a field and returns its state, if it had one.
    @discardableResult
    public mutating func removeValue(forKey name: String) -> FieldState? {
        let (index, found) = position(of: name)
        return found ? entries.remove(at: index).state : nil
    }
}

extension FieldTable: Sequence {
    public typealias Element = (key: String, value: FieldState)

    public struct Iterator: IteratorProtocol {
        fileprivate var base: IndexingIterator<[Entry]>

        public mutating func next() -> Element? {
            base.next().map { ($0.name, $0.state) }
        }
    }

    public func makeIterator() -> Iterator { Iterator(base: entries.makeIterator()) }

    public var underestimatedCount: Int { entries.count }
}

/// A property's state kept under a shape other than its definition's: what a replica wrote under another definition
/// of the property (docs/MergeSemantics.md, rule 8). It merges as any state does, and shows only if a definition of
/// its shape becomes the property's.
public struct SideField: Hashable, Sendable {
    public var name: String
    public var shape: PropertyShape
    public var state: FieldState

    public init(name: String, shape: PropertyShape, state: FieldState) {
        self.name = name
        self.shape = shape
        self.state = state
    }
}
