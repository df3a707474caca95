import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Serializes write transactions within the process, and catches a write started inside another write on the same
/// thread, which would otherwise deadlock.
final class WriteLock: Sendable {
    private let mutex = Mutex<Void>(())
    private let owner = Atomic<UInt>(0)

    private static func currentThread() -> UInt {
        #if canImport(Darwin)
            UInt(bitPattern: pthread_self())
        #else
            UInt(pthread_self())
        #endif
    }

    /// - Throws: ``TributaryError/Code/nestedWrite`` when the calling thread holds the lock already; else what
    ///   `body` throws.
    func withLock<T>(_ body: () throws -> T) throws -> T {
        let me = Self.currentThread()
        guard owner.load(ordering: .relaxed) != me else {
            throw TributaryError(
                .nestedWrite,
                "a write, integration or rebuild was started inside a write on the same replica and thread, where it "
                    + "would wait for itself: do the work in the outer transaction instead")
        }
        return try mutex.withLock { _ in
            owner.store(me, ordering: .relaxed)
            defer { owner.store(0, ordering: .relaxed) }
            return try body()
        }
    }

    /// Whether the calling thread is inside a write.
    var isHeldByCurrentThread: Bool { owner.load(ordering: .relaxed) == Self.currentThread() }
}
