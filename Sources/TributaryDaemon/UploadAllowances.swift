import Synchronization

/// How much each user may upload: a token bucket per user, shared by all its sessions, that refills at a steady
/// rate up to a burst. A batch is taken whole or not at all, so a refused batch costs the user nothing. A batch
/// larger than the burst is taken from a full bucket and leaves it in debt, so that the rate holds on average
/// whatever the batch sizes.
final class UploadAllowances: Sendable {
    private let bytesPerSecond: Int
    private let burst: Int
    private let buckets = Mutex<[String: Bucket]>([:])

    private struct Bucket {
        var bytes: Double
        var updated: ContinuousClock.Instant
    }

    /// Buckets kept before the full (idle) ones are dropped.
    private static let pruneAbove = 10_000

    init(bytesPerSecond: Int, burst: Int) {
        self.bytesPerSecond = bytesPerSecond
        self.burst = burst
    }

    /// What `bucket` holds at `now`.
    private func refilled(_ bucket: Bucket, _ now: ContinuousClock.Instant) -> Double {
        let elapsed = now - bucket.updated
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
        return min(Double(burst), bucket.bytes + max(0, seconds) * Double(bytesPerSecond))
    }

    /// Takes `bytes` from `user`'s allowance; or, when it holds less, takes nothing and returns how long until it
    /// holds enough.
    func take(_ bytes: Int, user: String, now: ContinuousClock.Instant = .now) -> Duration? {
        buckets.withLock { buckets in
            var bucket = buckets[user] ?? Bucket(bytes: Double(burst), updated: now)
            bucket.bytes = refilled(bucket, now)
            bucket.updated = now
            let needed = Double(min(bytes, burst))
            defer {
                buckets[user] = bucket
                if buckets.count > Self.pruneAbove {
                    // A bucket that has refilled is the same as none.
                    buckets = buckets.filter { refilled($0.value, now) < Double(burst) }
                }
            }
            guard bucket.bytes >= needed else {
                return .milliseconds(Int64(((needed - bucket.bytes) / Double(bytesPerSecond) * 1000).rounded(.up)))
            }
            bucket.bytes -= Double(bytes)
            return nil
        }
    }
}
