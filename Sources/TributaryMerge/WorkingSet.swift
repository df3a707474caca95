public import TributaryModel

/// Where the merge engine reads object records that it has not loaded yet.
public protocol RecordSource {
    /// The stored record of an object, or `nil`.
    func loadRecord(type: String, primaryKey: PrimaryKey) throws -> ObjectRecord?
    /// The primary keys of every stored record of a type, in key order.
    func loadPrimaryKeys(ofType type: String) throws -> [PrimaryKey]
    /// The causal dot of the changeset with origin dot `dot`, when a relay adopted it; `nil` otherwise.
    func causalDot(ofOrigin dot: Dot) -> Dot?
}

extension RecordSource {
    public func causalDot(ofOrigin dot: Dot) -> Dot? { nil }
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

    public var description: String { "\(type)[\(primaryKey)]" }
}

/// A record a working set changed: its key, and its record before and after.
///
/// The record after may be known only as its encoding (a new object created with plain values is encoded straight
/// from them): ``after`` then decodes it, and ``encodedAfter()`` hands the bytes over as they are.
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
        // Bytes this process encoded from a record's values: they decode.
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

    /// A record as loaded and as changed since.
    private struct Entry {
        var key: RecordKey
        /// The record now; `nil` when there is none, or when it is held as `encoded` until someone reads it.
        var current: ObjectRecord?
        var original: ObjectRecord?
        var changed: Bool
        /// The record now, as its stored form, when it was made so (``createEncoded(_:_:)``); `current` is then nil.
        var encoded: [UInt8]? = nil
    }
    /// The entries, in the order they were first used; an entry never moves, so its position stays good.
    private var entries: [Entry] = []
    /// Where each key's entry is. Positions, not entries: growing the table then moves small values.
    private var positions: [RecordKey: Int] = [:]
    private var changedCount = 0
    /// Adoptions recorded by changesets applied in this working set, not yet stored.
    public private(set) var adoptions: [Dot: Dot] = [:]

    /// Where a working set too large to keep in memory writes its changes, and from how many records on.
    ///
    /// A rebuild of the views replays the whole log into one working set: without a spill it would hold every object
    /// in memory at once. With one, ``spillIfNeeded()`` hands the changes to `write` (which stores them where the
    /// ``source`` then loads them from) and starts over empty, so memory stays in proportion to `threshold`.
    public struct Spill {
        public var threshold: Int
        public var write: ([RecordChange]) throws -> Void

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
        try decodeIfEncoded(position)
        return entries[position].current
    }

    /// Turns an entry held as its encoding into its record, for a reader or a writer that needs the record.
    private mutating func decodeIfEncoded(_ position: Int) throws {
        guard let encoded = entries[position].encoded else { return }
        entries[position].current = try ObjectRecord(decoding: encoded)
        entries[position].encoded = nil
    }

    /// Sets the record of an object that has none, here or in the source, to the one `encode` returns the stored
    /// form of; `encode` runs only then, and may return `nil` to leave the record to the caller. Returns whether it
    /// set the record. The record is decoded only if it is read or changed again in this working set.
    public mutating func createEncoded(_ key: RecordKey, _ encode: () throws -> [UInt8]?) throws -> Bool {
        let position = try position(of: key)
        guard entries[position].current == nil, entries[position].encoded == nil, let bytes = try encode() else {
            return false
        }
        entries[position].encoded = bytes
        if !entries[position].changed {
            entries[position].changed = true
            changedCount += 1
        }
        return true
    }

    /// Where the entry of an object is, loading its record from the source on first use.
    private mutating func position(of key: RecordKey) throws -> Int {
        // One probe of the table whether the key is there or not: a new key's slot is claimed as it is looked up.
        let next = entries.count
        let position = Self.claim(&positions[key, default: next], next)
        guard position == next else { return position }
        do {
            let record = try source.loadRecord(type: key.type, primaryKey: key.primaryKey)
            entries.append(Entry(key: key, current: record, original: record, changed: false))
        } catch {
            positions[key] = nil
            throw error
        }
        return position
    }

    /// The position in `slot`, which holds `next` when the lookup that gave it inserted it.
    private static func claim(_ slot: inout Int, _ next: Int) -> Int { slot }

    @discardableResult
    private mutating func insert(_ entry: Entry) -> Int {
        let position = entries.count
        positions[entry.key] = position
        entries.append(entry)
        return position
    }

    /// Replaces the record of an object (`nil` removes it).
    public mutating func setRecord(_ record: ObjectRecord?, for key: RecordKey) throws {
        if let position = positions[key] {
            if !entries[position].changed { changedCount += 1 }
            entries[position].current = record
            entries[position].encoded = nil
            entries[position].changed = true
            return
        }
        let original = try source.loadRecord(type: key.type, primaryKey: key.primaryKey)
        insert(Entry(key: key, current: record, original: original, changed: true))
        changedCount += 1
    }

    /// Lets `body` change the record of an object in place (`nil` for none; setting `nil` removes it). The record is
    /// moved out of the working set while `body` runs, so changing it copies nothing. When `body` returns `false`
    /// the record is not marked changed.
    public mutating func withRecord(_ key: RecordKey, _ body: (inout ObjectRecord?) throws -> Bool) throws {
        let position = try position(of: key)
        try decodeIfEncoded(position)
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
        for entry in entries where entry.key.type == type {
            if entry.current == nil && entry.encoded == nil { keys.remove(entry.key) } else { keys.insert(entry.key) }
        }
        return keys.sorted()
    }

    /// Records that a relay adopted the changeset with origin dot `origin` as `causal`.
    public mutating func recordAdoption(of origin: Dot, as causal: Dot) {
        adoptions[origin] = causal
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
            if let encoded = entry.encoded { return RecordChange(key: keys[index], before: entry.original, encodedAfter: encoded) }
            return RecordChange(key: keys[index], before: entry.original, after: entry.current)
        }
    }

    /// ``changes``, moved out instead of copied: what a commit or a replay that is done with the working set wants.
    /// Copying a record retains everything it holds, and releases it again when the working set goes; a large
    /// import or replay spent a tenth of its time on that. The working set is left empty, with its schema.
    public mutating func takeChanges() -> [RecordChange] {
        let (keys, changed) = changedKeys()
        var taken: [RecordChange] = []
        taken.reserveCapacity(keys.count)
        for index in Self.keyOrder(keys) {
            let position = changed[index]
            var before: ObjectRecord? = nil
            swap(&before, &entries[position].original)
            if let encoded = entries[position].encoded {
                entries[position].encoded = nil
                taken.append(RecordChange(key: keys[index], before: before, encodedAfter: encoded))
                continue
            }
            var after: ObjectRecord? = nil
            swap(&after, &entries[position].current)
            taken.append(RecordChange(key: keys[index], before: before, after: after))
        }
        entries = []
        positions = [:]
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
