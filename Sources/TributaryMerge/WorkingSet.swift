public import TributaryModel

/// Where the merge engine reads object records that it has not loaded yet.
public protocol RecordSource {
    /// The stored record of an object, or `nil`.
    func loadRecord(type: String, primaryKey: PrimaryKey) throws -> ObjectRecord?
    /// The primary keys of every stored record of a type, in key order.
    func loadPrimaryKeys(ofType type: String) throws -> [PrimaryKey]
    /// The causal dots of the changeset with origin dot `dot`: every relay dot it was adopted as (an app that
    /// uploaded it to two relays before it heard of either adoption has two), in the order they were recorded.
    ///
    /// - Throws: when they cannot be read (damage, a storage error): answered wrongly, a merge would decide unlike
    ///   its peers.
    func causalDots(ofOrigin dot: Dot) throws -> [Dot]
}

extension RecordSource {
    public func causalDots(ofOrigin dot: Dot) throws -> [Dot] { [] }
}

/// A source with nothing stored: what a replay of a log, or an oracle, starts from.
public struct EmptyRecordSource: RecordSource {
    public init() {}
    public func loadRecord(type: String, primaryKey: PrimaryKey) throws -> ObjectRecord? { nil }
    public func loadPrimaryKeys(ofType type: String) throws -> [PrimaryKey] { [] }
}

/// A type name and primary key: which object a record belongs to.
public struct RecordKey: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var type: String
    public var primaryKey: PrimaryKey

    public init(type: String, primaryKey: PrimaryKey) {
        self.type = type
        self.primaryKey = primaryKey
    }

    /// Hashes the primary key alone: a replica has few types, and hashing the type's name too doubles the cost of
    /// every working-set lookup. Keys of different types with equal primary keys are told apart by `==`.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(primaryKey)
    }

    public static func < (lhs: RecordKey, rhs: RecordKey) -> Bool {
        lhs.type != rhs.type ? lhs.type < rhs.type : lhs.primaryKey < rhs.primaryKey
    }

    public var description: String { Self.describe(type: type, primaryKey: primaryKey) }

    /// `Type[primaryKey]`, as errors name an object; `Type[?]` for a key that could not be read.
    public static func describe(type: String, primaryKey: PrimaryKey?) -> String {
        "\(type)[\(primaryKey.map(\.description) ?? "?")]"
    }
}

/// The record a create makes of an object that has none, with plain values only, before it is built: the create's
/// values, where each lands (in name order) and the create's stamp. Most such records are never read or changed again
/// in their working set (a replay, a large import): they are encoded straight from the values, without being built.
struct NewRecord {
    /// Each field, in name order: a position in `explicit` (stamped `stamp`) or in `defaults` (stamped zero).
    let order: [(isDefault: Bool, index: Int)]
    let explicit: [FieldValue]
    let defaults: [FieldValue]
    let stamp: Stamp

    /// The record: one that exists, with a register per field.
    func built() -> ObjectRecord {
        var fields = FieldTable()
        fields.reserveCapacity(order.count)
        for (isDefault, index) in order {
            let field = isDefault ? defaults[index] : explicit[index]
            let register = Register(value: .scalar(field.value), stamp: isDefault ? .zero : stamp)
            _ = fields.appendInOrder(field.name, .register(register))  // in name order: always appended
        }
        return ObjectRecord(exists: true, fields: fields)
    }

    /// The record's stored form: ``built()``'s `encoded()`, without building it.
    func encoded() -> [UInt8] { ObjectRecord.encodedNew(order, explicit: explicit, defaults: defaults, stamp: stamp) }
}

/// Where the values of a create land in a new record, worked out for one create and kept for the next: valid for a
/// create of the same type that names the same properties in the same order, while each is still the property it
/// was (``holds(for:explicit:defaults:)`` checks).
struct NewRecordPlan {
    let typeName: String
    let primaryKey: String?
    let explicitNames: [String]
    let defaultNames: [String]
    /// The position in the type's properties of each name given; `nil` for the primary key and names it lacks.
    let explicitPositions: [Int?]
    let defaultPositions: [Int?]
    let order: [(isDefault: Bool, index: Int)]

    init(type: ObjectSchema, explicit: [FieldValue], defaults: [FieldValue], order: [(isDefault: Bool, index: Int)]) {
        func position(_ field: FieldValue) -> Int? {
            field.name == type.primaryKey ? nil : type.position(ofProperty: field.name)
        }
        typeName = type.name
        primaryKey = type.primaryKey
        explicitNames = explicit.map(\.name)
        defaultNames = defaults.map(\.name)
        explicitPositions = explicit.map(position)
        defaultPositions = defaults.map(position)
        self.order = order
    }

    /// Whether the plan holds for a create of `type` with these values: the same type and names (as `String`s, which
    /// is how they are placed), each still the property it was.
    func holds(for type: ObjectSchema, explicit: [FieldValue], defaults: [FieldValue]) -> Bool {
        guard typeName == type.name, primaryKey == type.primaryKey, explicit.count == explicitNames.count,
            defaults.count == defaultNames.count
        else { return false }
        func same(_ fields: [FieldValue], _ names: [String], _ positions: [Int?]) -> Bool {
            for index in fields.indices {
                let name = names[index]
                guard fields[index].name == name else { return false }
                if let position = positions[index] {
                    guard position < type.properties.count, type.properties[position].name == name else { return false }
                } else if name != type.primaryKey && type.position(ofProperty: name) != nil {
                    return false
                }
            }
            return true
        }
        return same(explicit, explicitNames, explicitPositions) && same(defaults, defaultNames, defaultPositions)
    }
}

/// A record a working set changed: its key, and its record before and after.
///
/// The record after may be known only as its encoding (a new object created with plain values, encoded straight from
/// them): ``after`` then decodes it, and ``encodedAfter()`` hands the bytes over as they are.
public struct RecordChange: Sendable {
    public let key: RecordKey
    /// The record before (as the working set's source held it), or `nil`.
    public let before: ObjectRecord?
    private let builtAfter: ObjectRecord?
    private let storedAfter: [UInt8]?

    /// A change to `after` (`nil`: the record is removed).
    public init(key: RecordKey, before: ObjectRecord?, after: ObjectRecord?) {
        self.key = key
        self.before = before
        builtAfter = after
        storedAfter = nil
    }

    /// A change to the record encoded as `encodedAfter`.
    public init(key: RecordKey, before: ObjectRecord?, encodedAfter: [UInt8]) {
        self.key = key
        self.before = before
        builtAfter = nil
        storedAfter = encodedAfter
    }

    /// The record after, or `nil` when it is removed.
    public var after: ObjectRecord? {
        // Bytes this process encoded from a record's values (``NewRecord``): they decode.
        builtAfter ?? storedAfter.flatMap { try? ObjectRecord(decoding: $0) }
    }

    /// The stored form of the record after, or `nil` when it is removed.
    public func encodedAfter() -> [UInt8]? { storedAfter ?? builtAfter?.encoded() }

    /// Whether the record after is held as its encoding (for tests).
    var holdsEncoding: Bool { storedAfter != nil }
}

/// The records and schema a transaction (or an integration) works on: records are loaded from a
/// ``RecordSource`` on first use and kept, changed, in memory until the caller writes them back.
public struct WorkingSet {
    public let source: any RecordSource
    /// The schema, as changed so far.
    public var schema: Schema
    /// Whether the schema changed.
    public private(set) var schemaChanged = false

    /// The latest create's record, kept as its values until the next create (a write often changes the object it
    /// has just created, and building the record from its values costs less than decoding its bytes), with the
    /// position of its entry. Every other record a create made is kept as its bytes until something needs it.
    private var latestCreate: (position: Int, record: NewRecord)?
    /// The plan of the latest create that made a new record, for the next one.
    private var newRecordPlan: NewRecordPlan?

    /// A record as loaded and as changed since.
    private struct Entry {
        var key: RecordKey
        /// The record now; `nil` when there is none, or when a create made it and it is not built yet (`unbuilt`, or
        /// the latest create's).
        var current: ObjectRecord?
        var original: ObjectRecord?
        var changed: Bool
        /// The record now as its stored form, when a create made it and nothing built it since (``createNew(_:_:)``),
        /// unless it is the latest create's; `current` is then nil.
        var unbuilt: [UInt8]? = nil
    }
    /// The entries, in the order they were first used; an entry never moves, so its position stays good.
    private var entries: [Entry] = []
    /// Where each key's entry is.
    private var positions = PositionTable()
    private var changedCount = 0
    /// Adoptions recorded by changesets applied in this working set, not yet stored: relay dots by origin dot.
    public private(set) var adoptions: [Dot: [Dot]] = [:]

    /// Where a working set too large to keep in memory writes its changes, and from how many records on.
    ///
    /// A rebuild of the views replays the whole log into one working set: without a spill it would hold every object
    /// in memory at once. With one, ``spillIfNeeded()`` hands the changes to `write` (which stores them where the
    /// ``source`` then loads them from) and starts over empty, so memory stays in proportion to `threshold`.
    public struct Spill {
        public let threshold: Int
        public let write: ([RecordChange]) throws -> Void

        public init(threshold: Int, write: @escaping ([RecordChange]) throws -> Void) {
            self.threshold = max(1, threshold)
            self.write = write
        }
    }

    /// The spill, if this working set has one; `nil` keeps every record in memory until the caller takes them.
    public var spill: Spill?

    public init(source: any RecordSource, schema: Schema) {
        self.source = source
        self.schema = schema
    }

    /// The current record of an object.
    public mutating func record(_ key: RecordKey) throws -> ObjectRecord? {
        let position = try position(of: key)
        try buildIfUnbuilt(position)
        return entries[position].current
    }

    /// Builds the record of an entry a create left unbuilt, for a reader or a writer that needs the record.
    private mutating func buildIfUnbuilt(_ position: Int) throws {
        if let latestCreate, latestCreate.position == position {
            entries[position].current = latestCreate.record.built()
            self.latestCreate = nil
        } else if let bytes = entries[position].unbuilt {
            entries[position].current = try ObjectRecord(decoding: bytes)
            entries[position].unbuilt = nil
        }
    }

    /// Whether the entry holds a record a create made and nothing built since.
    private func isUnbuilt(_ position: Int) -> Bool {
        entries[position].unbuilt != nil || latestCreate?.position == position
    }

    /// Keeps the latest create's record as its bytes, like the others.
    private mutating func encodeLatestCreate() {
        guard let latestCreate else { return }
        entries[latestCreate.position].unbuilt = latestCreate.record.encoded()
        self.latestCreate = nil
    }

    /// Sets the record of an object that has none, here or in the source, to the one `make` describes; `make` runs
    /// only then (given the plan of the latest such create, to use or replace, and the schema), and may return `nil`
    /// to leave the record to the caller. Returns whether it set the record. The record is built only if it is read
    /// or changed again in this working set; otherwise it is encoded straight from the create's values.
    mutating func createNew(
        _ key: RecordKey, _ make: (inout NewRecordPlan?, borrowing Schema) throws -> NewRecord?
    ) throws -> Bool {
        let position = try position(of: key)
        guard entries[position].current == nil, !isUnbuilt(position), let record = try make(&newRecordPlan, schema)
        else {
            return false
        }
        encodeLatestCreate()
        latestCreate = (position, record)
        if !entries[position].changed {
            entries[position].changed = true
            changedCount += 1
        }
        return true
    }

    /// Where the entry of an object is, loading its record from the source on first use.
    private mutating func position(of key: RecordKey) throws -> Int {
        let hash = Self.tableHash(key)
        if let position = existingPosition(of: key, hash: hash) { return position }
        let record = try source.loadRecord(type: key.type, primaryKey: key.primaryKey)
        return insert(Entry(key: key, current: record, original: record, changed: false), hash: hash)
    }

    /// The hash `positions` keeps a key under. Integer keys that differ only in their last three bits hash alike but
    /// for those bits, so their slots are neighbours: creating or reading objects with consecutive keys (a replay, an
    /// import) reads one or two cache lines of the table per eight objects, not one per object. The rest of the hash is
    /// `Hasher`'s, seeded per process, so keys still cannot be chosen to collide.
    static func tableHash(_ key: RecordKey) -> Int {
        guard case .int(let value) = key.primaryKey else { return key.hashValue }
        return (value >> 3).hashValue << 3 | Int(value & 7)
    }

    private func existingPosition(of key: RecordKey, hash: Int) -> Int? {
        entries.withUnsafeBufferPointer { entries in positions.position(hash: hash) { entries[$0].key == key } }
    }

    @discardableResult
    private mutating func insert(_ entry: Entry, hash: Int) -> Int {
        let position = entries.count
        positions.insert(hash: hash, position: position)
        entries.append(entry)
        return position
    }

    /// Replaces the record of an object (`nil` removes it).
    public mutating func setRecord(_ record: ObjectRecord?, for key: RecordKey) throws {
        let hash = Self.tableHash(key)
        if let position = existingPosition(of: key, hash: hash) {
            if !entries[position].changed { changedCount += 1 }
            entries[position].current = record
            entries[position].unbuilt = nil
            if latestCreate?.position == position { latestCreate = nil }
            entries[position].changed = true
            return
        }
        let original = try source.loadRecord(type: key.type, primaryKey: key.primaryKey)
        insert(Entry(key: key, current: record, original: original, changed: true), hash: hash)
        changedCount += 1
    }

    /// Lets `body` change the record of an object in place (`nil` for none; setting `nil` removes it). The record is
    /// moved out of the working set while `body` runs, so changing it copies nothing. When `body` returns `false`
    /// the record is not marked changed.
    public mutating func withRecord(_ key: RecordKey, _ body: (inout ObjectRecord?) throws -> Bool) throws {
        let position = try position(of: key)
        try buildIfUnbuilt(position)
        var record = entries[position].current
        entries[position].current = nil
        var changed = false
        defer {
            entries[position].current = record
            if changed && !entries[position].changed {
                entries[position].changed = true
                changedCount += 1
            }
        }
        changed = try body(&record)
    }

    /// Every key of a type: stored ones and ones this working set added.
    public mutating func keys(ofType type: String) throws -> [RecordKey] {
        var keys = Set(try source.loadPrimaryKeys(ofType: type).map { RecordKey(type: type, primaryKey: $0) })
        for position in entries.indices where entries[position].key.type == type {
            let key = entries[position].key
            if entries[position].current == nil && !isUnbuilt(position) { keys.remove(key) } else { keys.insert(key) }
        }
        return keys.sorted()
    }

    /// Records that a relay adopted the changeset with origin dot `origin` as `causal`.
    public mutating func recordAdoption(of origin: Dot, as causal: Dot) {
        if adoptions[origin]?.contains(causal) != true { adoptions[origin, default: []].append(causal) }
    }

    /// Resolves origin dots to causal dots, through this working set's adoptions and then the source's.
    public var causalResolver: CausalResolver {
        CausalResolver(adopted: adoptions, source: source)
    }

    /// Makes room for `count` more records at most (one per instruction, say), so that a large changeset does not
    /// grow the table step by step. With a spill, never for more records than it lets the working set hold.
    public mutating func reserveCapacity(forMoreRecords count: Int) {
        let total = min(entries.count + count, spill?.threshold ?? Int.max)
        positions.reserveCapacity(total)
        entries.reserveCapacity(total)
    }

    /// Writes the changes through the ``spill`` and empties the working set, when it holds as many records as the
    /// spill's threshold. Called between instructions: no record is being changed then.
    public mutating func spillIfNeeded() throws {
        // Only the threshold is read on the way: copying the spill out would retain its closure every instruction.
        guard entries.count >= (spill?.threshold ?? Int.max), let write = spill?.write else { return }
        try write(takeChanges())
    }

    /// Replaces the schema.
    public mutating func setSchema(_ schema: Schema) {
        if schema != self.schema { schemaChanged = true }
        self.schema = schema
    }

    /// The changed records, in key order: each with its record before and after.
    public var changes: [RecordChange] {
        let (keys, changed) = changedKeys()
        // The records are copied once, into the result.
        return Self.keyOrder(keys).map { index in
            let entry = entries[changed[index]]
            if let unbuilt = entry.unbuilt {
                return RecordChange(key: keys[index], before: entry.original, encodedAfter: unbuilt)
            }
            if let latestCreate, latestCreate.position == changed[index] {
                return RecordChange(
                    key: keys[index], before: entry.original, encodedAfter: latestCreate.record.encoded())
            }
            return RecordChange(key: keys[index], before: entry.original, after: entry.current)
        }
    }

    /// ``changes``, moved out instead of copied: what a commit or a replay that is done with the working set wants.
    /// Copying a record retains everything it holds, and releases it again when the working set goes; a large
    /// import or replay spent a tenth of its time on that. The working set is left empty, with its schema.
    public mutating func takeChanges() -> [RecordChange] {
        encodeLatestCreate()
        // Not needed to take the changes: freed before they are gathered, which is when a large import holds most.
        positions.removeAll()
        let (keys, changed) = changedKeys()
        var taken: [RecordChange] = []
        taken.reserveCapacity(keys.count)
        for index in Self.keyOrder(keys) {
            let position = changed[index]
            var before: ObjectRecord? = nil
            swap(&before, &entries[position].original)
            if let unbuilt = entries[position].unbuilt {
                entries[position].unbuilt = nil
                taken.append(RecordChange(key: keys[index], before: before, encodedAfter: unbuilt))
                continue
            }
            var after: ObjectRecord? = nil
            swap(&after, &entries[position].current)
            taken.append(RecordChange(key: keys[index], before: before, after: after))
        }
        entries = []
        changedCount = 0
        return taken
    }

    /// The keys of the changed entries, in the order they were first used, and where their entries are.
    private func changedKeys() -> (keys: [RecordKey], positions: [Int]) {
        var keys: [RecordKey] = []
        var changed: [Int] = []
        keys.reserveCapacity(changedCount)
        changed.reserveCapacity(changedCount)
        for position in entries.indices where entries[position].changed {
            keys.append(entries[position].key)
            changed.append(position)
        }
        return (keys, changed)
    }

    /// The positions of `keys` in key order. Sorts positions, not keys or records: moving those retains and releases
    /// what they hold. Keys of one type with integer primary keys (a large import, a replay) sort as plain integers,
    /// several times faster than through `RecordKey`'s comparison.
    static func keyOrder(_ keys: [RecordKey]) -> [Int] {
        keys.withUnsafeBufferPointer { keys in
            guard let type = keys.first?.type else { return [] }
            var integers: [(key: Int64, position: Int)] = []
            integers.reserveCapacity(keys.count)
            for (position, key) in keys.enumerated() {
                guard key.type == type, case .int(let value) = key.primaryKey else {
                    return keys.indices.sorted { keys[$0] < keys[$1] }
                }
                integers.append((value, position))
            }
            // Keys are unique, so an unstable order of equal elements cannot arise.
            integers.sort { $0.key < $1.key }
            return integers.map(\.position)
        }
    }

    /// Whether anything changed.
    public var hasChanges: Bool { changedCount > 0 || schemaChanged }
}
