package import Foundation
import TributaryLog
import TributaryModel
import TributaryStorage

/// Where a replica stands in a cluster's shared log (docs/design/Cluster.md): the log's epoch, the last position it
/// applied, and the changeset at that position (its origin and origin sequence), by which a follower tells whether
/// the log still holds what it applied. Stored in the identity database, in the commit that applies the entries.
package struct SharedLogPosition: Sendable, Hashable {
    package var epoch: UUID
    package var position: UInt64
    /// The changeset at ``position``; `nil` for a position stored before it was kept.
    package var last: Dot?

    package init(epoch: UUID, position: UInt64, last: Dot?) {
        self.epoch = epoch
        self.position = position
        self.last = last
    }

    /// 16 bytes of epoch, 8 of position (big-endian), then optionally 8 of origin and 8 of origin sequence.
    var bytes: [UInt8] {
        let uuid = epoch.uuid
        var bytes: [UInt8] = [
            uuid.0, uuid.1, uuid.2, uuid.3, uuid.4, uuid.5, uuid.6, uuid.7, uuid.8, uuid.9, uuid.10, uuid.11, uuid.12,
            uuid.13, uuid.14, uuid.15,
        ]
        func append(_ value: UInt64) { bytes += (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) } }
        append(position)
        if let last {
            append(last.origin.rawValue)
            append(last.sequence)
        }
        return bytes
    }

    init(bytes: [UInt8]) throws {
        guard bytes.count == 24 || bytes.count == 40 else {
            throw TributaryError(
                .corrupted, "the replica's shared-log position has \(bytes.count) bytes instead of 24 or 40")
        }
        epoch = UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
                bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
        func number(at offset: Int) -> UInt64 { bytes[offset..<offset + 8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) } }
        position = number(at: 16)
        last = bytes.count == 40 ? Dot(origin: ReplicaID(rawValue: number(at: 24)), sequence: number(at: 32)) : nil
    }
}

extension Replica {
    static let sharedLogPositionKey = Array("sharedLogPosition".utf8)

    /// Where this replica stands in the shared log it follows, or `nil` when it never followed one.
    package func sharedLogPosition() throws -> SharedLogPosition? {
        do {
            return try environment.read { txn -> SharedLogPosition? in
                guard let value = try txn.get(identity, key: Self.sharedLogPositionKey) else { return nil }
                return try SharedLogPosition(bytes: Array(value))
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Records where this replica stands in the shared log it follows.
    package func setSharedLogPosition(_ position: SharedLogPosition) throws {
        do {
            try environment.write { txn in try storeSharedLogPosition(position, in: txn) }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    func storeSharedLogPosition(_ position: SharedLogPosition, in txn: TributaryStorageWriteTransaction) throws {
        try txn.put(identity, key: Self.sharedLogPositionKey, value: position.bytes)
    }
}

/// An app's changeset as a cluster daemon appends it to the shared log: its identity and the bytes uploaded.
package struct SharedLogUpload: Sendable, Hashable {
    /// The changeset's origin and origin sequence: what the shared log recognises a retried upload by.
    package var dot: Dot
    /// The bytes as uploaded (compressed or not): what every daemon integrates from the log.
    package var body: [UInt8]
}

extension Replica {
    /// Checks an app's upload as a cluster daemon must before appending it to the shared log: every changeset
    /// decodes under the log's limits, names `requiredAuthor` when that is set, and is stamped at most
    /// `maximumClockSkew` ahead of this machine's clock. These are the checks that depend on the upload and the
    /// session alone; the ones that depend on the replica's state are made by every daemon alike when it applies the
    /// log.
    ///
    /// The clock check is made here, once, rather than by the daemons that apply the log: their clocks differ, and a
    /// changeset one of them held back while another applied it would leave their replicas different.
    ///
    /// - Throws: ``TributaryError`` with `.invalidChangeset` naming the first changeset that does not decode,
    ///   `.permissionDenied` for another author, `.clockSkew` for a changeset stamped too far ahead (nothing of the
    ///   upload may be appended then).
    package func checkUpload(_ changesets: [[UInt8]], requiredAuthor: String?, maximumClockSkew: Duration) throws
        -> [SharedLogUpload]
    {
        let skew = Configuration.skewMilliseconds(maximumClockSkew)
        let now = configuration.clock.milliseconds()
        var uploads: [SharedLogUpload] = []
        uploads.reserveCapacity(changesets.count)
        for (index, bytes) in changesets.enumerated() {
            let changeset: Changeset
            do {
                changeset = try log.received(bytes).changeset
            } catch {
                throw TributaryError(
                    .invalidChangeset,
                    "changeset \(index) of \(changesets.count) (\(bytes.count) bytes) cannot be decoded: \(error)")
            }
            try Self.checkAuthor(of: changeset, is: requiredAuthor)
            if changeset.time.milliseconds > now &+ skew {
                throw TributaryError(
                    .clockSkew,
                    "changeset \(changeset.dot) is stamped \(changeset.time.milliseconds - now) ms ahead of this "
                        + "daemon's clock, over the limit of \(skew) ms: check the device's clock; nothing of the "
                        + "upload was stored")
            }
            uploads.append(SharedLogUpload(dot: changeset.dot, body: bytes))
        }
        return uploads
    }
}
