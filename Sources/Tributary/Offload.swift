import Dispatch

/// Runs `body`, which blocks (a durable LMDB commit), on a thread of its own, so that Swift concurrency's few
/// threads are never held by a disk sync.
package func offload<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
    }
}
