public import Foundation
import TributaryLog
import TributaryModel
import TributaryStorage

/// Where a replica stands in a cluster's shared log (docs/design/Cluster.md): the log's epoch and the last position
/// it applied. Stored in the identity database.
///
/// Written after the commit that integrated the entries up to it, not in that commit: a crash between the two makes
/// the replica apply those entries again, which integrates nothing twice (integration skips changesets the replica
/// holds).
extension Replica {
    static let sharedLogPositionKey = Array("sharedLogPosition".utf8)

    /// The shared log's epoch and the position this replica applied through, or `nil` when it never followed one.
    package func sharedLogPosition() throws -> (epoch: UUID, position: UInt64)? {
        do {
            return try environment.read { txn -> (epoch: UUID, position: UInt64)? in
                guard let value = try txn.get(identity, key: Self.sharedLogPositionKey) else { return nil }
                guard value.count == 24 else {
                    throw TributaryError(
                        .corrupted, "the replica's shared-log position has \(value.count) bytes instead of 24")
                }
                let bytes = Array(value)
                let epoch = UUID(
                    uuid: (
                        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8],
                        bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
                    ))
                let position = bytes[16..<24].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                return (epoch, position)
            }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    /// Records that this replica applied the shared log of epoch `epoch` through `position`.
    package func setSharedLogPosition(epoch: UUID, position: UInt64) throws {
        do {
            try environment.write { txn in try storeSharedLogPosition(epoch: epoch, position: position, in: txn) }
        } catch {
            throw TributaryError.wrap(error)
        }
    }

    func storeSharedLogPosition(epoch: UUID, position: UInt64, in txn: TributaryStorageWriteTransaction) throws {
        let uuid = epoch.uuid
        let bytes: [UInt8] =
            [
                uuid.0, uuid.1, uuid.2, uuid.3, uuid.4, uuid.5, uuid.6, uuid.7, uuid.8, uuid.9, uuid.10, uuid.11,
                uuid.12, uuid.13, uuid.14, uuid.15,
            ] + (0..<8).map { UInt8(truncatingIfNeeded: position >> (56 - 8 * $0)) }
        try txn.put(identity, key: Self.sharedLogPositionKey, value: bytes)
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
