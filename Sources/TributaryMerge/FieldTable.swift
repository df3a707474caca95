import TributaryModel

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
