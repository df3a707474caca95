import TributaryLog
import TributaryMerge
import TributaryModel
import TributaryStorage
import TributaryViews

/// The objects whose writes a daemon refused in one of an app's changesets (a permission rule, or the session's
/// subscriptions), kept until the app received their compensating writes (``Replica/refusals(of:after:)``).
///
/// A daemon stores them in the commit that stores the reduced changeset (``IncomingChangesets/refusals``), so a
/// connection that drops, or a daemon that stops, between that commit and the correction's arrival loses nothing. A
/// daemon of a cluster appends them with the changeset to the shared log, and every daemon that applies the entry
/// stores them: an app that moves to another daemon before receiving the correction receives it there.
package struct RefusalRecord: Sendable, Hashable {
    /// The app whose session uploaded the changeset.
    package var device: ReplicaID
    /// The changeset whose writes were refused.
    package var changeset: Dot
    /// The objects, encoded as stored (``objects(_:)``).
    package var objects: [UInt8]

    package init(device: ReplicaID, changeset: Dot, objects: [UInt8]) {
        self.device = device
        self.changeset = changeset
        self.objects = objects
    }

    /// One record per changeset of `refused` (each object's write refused in the changesets it names).
    package static func records(
        of device: ReplicaID, _ refused: [(type: String, primaryKey: PrimaryKey, refused: [Dot])]
    ) -> [RefusalRecord] {
        var byDot: [Dot: [RecordKey]] = [:]
        for entry in refused {
            for dot in entry.refused {
                byDot[dot, default: []].append(RecordKey(type: entry.type, primaryKey: entry.primaryKey))
            }
        }
        return byDot.sorted { $0.key < $1.key }.map { dot, keys in
            var writer = BinaryWriter()
            writer.varint(keys.count)
            for key in keys {
                writer.string(key.type)
                writer.primaryKey(key.primaryKey)
            }
            return RefusalRecord(device: device, changeset: dot, objects: writer.bytes)
        }
    }

    /// The objects of a stored record.
    ///
    /// - Throws: ``TributaryError`` with ``TributaryError/Code-swift.struct/corrupted`` when they do not decode.
    func keys() throws -> [RecordKey] {
        do {
            var reader = BinaryReader(objects, subject: "refused writes of \(changeset)")
            let count = try reader.count("refused writes", maximum: .max, minimumBytesEach: 3)
            var keys: [RecordKey] = []
            for _ in 0..<count {
                keys.append(RecordKey(type: try reader.string("type"), primaryKey: try reader.primaryKey()))
            }
            guard reader.isAtEnd else {
                throw TributaryError(.corrupted, "the refused writes of \(changeset) have bytes after their objects")
            }
            return keys
        } catch {
            throw TributaryError.wrap(error)
        }
    }
}

extension Replica {
    static let refusalsPrefix = Array("refusals/".utf8)

    static func refusalsPrefix(of device: ReplicaID) -> [UInt8] {
        refusalsPrefix + withUnsafeBytes(of: device.rawValue.bigEndian) { Array($0) }
    }

    /// Stores `records` in `txn` (the commit of the changesets they judged). A record stored before for the same
    /// changeset is kept: the first judgement is the one the stored changeset reflects.
    func storeRefusals(_ records: [RefusalRecord], in txn: TributaryStorageWriteTransaction) throws {
        for record in records {
            // One that does not decode (a damaged row of a shared log) is left out: kept, it would fail every later
            // session of its app; failing the commit would stop the changesets with it.
            guard (try? record.keys()) != nil else { continue }
            let key = Self.refusalsPrefix(of: record.device) + ChangesetLog.originKey(record.changeset)
            guard try txn.get(identity, key: key) == nil else { continue }
            try txn.put(identity, key: key, value: record.objects)
        }
    }

    /// The refused writes stored for `changesets` of `device`'s (each named by its own dot), without forgetting any:
    /// in a cluster, a changeset uploaded again may have been judged first by another daemon, and what the log keeps
    /// of it is that judgement.
    package func refusals(of device: ReplicaID, changesets: [Dot]) throws -> [(
        type: String, primaryKey: PrimaryKey, refused: [Dot]
    )] {
        let prefix = Self.refusalsPrefix(of: device)
        var byKey: [RecordKey: [Dot]] = [:]
        do {
            try environment.read { txn in
                for dot in Set(changesets) {
                    guard let value = try txn.get(identity, key: prefix + ChangesetLog.originKey(dot)) else { continue }
                    let record = RefusalRecord(device: device, changeset: dot, objects: Array(value))
                    for key in try record.keys() { byKey[key, default: []].append(dot) }
                }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
        return byKey.sorted { $0.key < $1.key }.map { ($0.key.type, $0.key.primaryKey, $0.value.sorted()) }
    }

    /// The refused writes of `device`'s changesets after its own sequence `acknowledged`, for compensating writes
    /// sent again; those through `acknowledged` are forgotten (the device received them).
    package func refusals(of device: ReplicaID, after acknowledged: UInt64) throws -> [(
        type: String, primaryKey: PrimaryKey, refused: [Dot]
    )] {
        let prefix = Self.refusalsPrefix(of: device)
        var stale: [[UInt8]] = []
        var byKey: [RecordKey: [Dot]] = [:]
        do {
            try environment.read { txn in
                try txn.scan(identity, from: prefix, to: ViewStore.prefixEnd(prefix)) { key, value in
                    guard key.count == prefix.count + 16 else { return true }
                    let dot = ChangesetLog.dot(fromOriginKey: key, at: prefix.count)
                    if dot.sequence <= acknowledged {
                        stale.append(Array(key))
                        return true
                    }
                    let record = RefusalRecord(device: device, changeset: dot, objects: Array(value))
                    for key in try record.keys() { byKey[key, default: []].append(dot) }
                    return true
                }
            }
            if !stale.isEmpty {
                try writeLock.withLock {
                    try environment.write { txn in for key in stale { _ = try txn.delete(identity, key: key) } }
                }
            }
        } catch {
            throw TributaryError.wrap(error)
        }
        return byKey.sorted { $0.key < $1.key }.map { ($0.key.type, $0.key.primaryKey, $0.value) }
    }
}
