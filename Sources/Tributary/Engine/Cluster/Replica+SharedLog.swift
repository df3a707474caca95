public import Foundation
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
        let uuid = epoch.uuid
        let bytes: [UInt8] =
            [
                uuid.0, uuid.1, uuid.2, uuid.3, uuid.4, uuid.5, uuid.6, uuid.7, uuid.8, uuid.9, uuid.10, uuid.11,
                uuid.12, uuid.13, uuid.14, uuid.15,
            ] + (0..<8).map { UInt8(truncatingIfNeeded: position >> (56 - 8 * $0)) }
        do {
            try environment.write { txn in try txn.put(identity, key: Self.sharedLogPositionKey, value: bytes) }
        } catch {
            throw TributaryError.wrap(error)
        }
    }
}
