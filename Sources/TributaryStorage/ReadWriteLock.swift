import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A pthread reader-writer lock that prefers writers and lets a thread take it again while it holds it.
///
/// Storage operations take it shared; growing the LMDB map takes it exclusively, because
/// `mdb_env_set_mapsize` unmaps and remaps the file and no page pointer may be in use meanwhile.
///
/// - Writer preference: glibc's default lock prefers readers, so readers that follow each other back to back kept
///   a map growth (and with it every write) waiting for seconds to minutes (`MapGrowthDrillTests`). Once a thread
///   waits for the exclusive lock, new shared holders queue behind it.
/// - Reentrancy: with writer preference, a thread that takes the shared lock again while a writer waits would
///   deadlock; a per-thread count makes the nested shared take a no-op. A shared take on the thread that holds the
///   lock exclusively is a no-op too (for example a snapshot released while the environment closes).
///
/// `@unchecked Sendable`: the pthread lock is itself thread-safe, and the pointer is allocated once
/// and freed only in `deinit`, when no thread can hold a reference.
final class ReadWriteLock: @unchecked Sendable {
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>
    /// This thread's number of shared holds of this lock.
    private let depthKey: pthread_key_t
    /// The thread holding the lock exclusively, or 0.
    private let exclusiveOwner = Atomic<UInt>(0)

    init() {
        lock = .allocate(capacity: 1)
        lock.initialize(to: pthread_rwlock_t())
        var attributes = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attributes)
        #if canImport(Glibc)
            pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))
        #endif
        let rc = pthread_rwlock_init(lock, &attributes)
        pthread_rwlockattr_destroy(&attributes)
        precondition(rc == 0, "pthread_rwlock_init failed: \(rc)")
        var key = pthread_key_t()
        let keyRC = pthread_key_create(&key, nil)
        precondition(keyRC == 0, "pthread_key_create failed: \(keyRC)")
        depthKey = key
    }

    deinit {
        pthread_key_delete(depthKey)
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    private static func currentThread() -> UInt {
        #if canImport(Darwin)
            UInt(bitPattern: pthread_self())
        #else
            UInt(pthread_self())
        #endif
    }

    func withSharedLock<T>(_ body: () throws -> T) rethrows -> T {
        if exclusiveOwner.load(ordering: .relaxed) == Self.currentThread() { return try body() }
        let depth = Int(bitPattern: pthread_getspecific(depthKey))
        if depth == 0 { pthread_rwlock_rdlock(lock) }
        pthread_setspecific(depthKey, UnsafeRawPointer(bitPattern: depth + 1))
        defer {
            pthread_setspecific(depthKey, UnsafeRawPointer(bitPattern: depth))
            if depth == 0 { pthread_rwlock_unlock(lock) }
        }
        return try body()
    }

    func withExclusiveLock<T>(_ body: () throws -> T) rethrows -> T {
        let me = Self.currentThread()
        if exclusiveOwner.load(ordering: .relaxed) == me { return try body() }
        pthread_rwlock_wrlock(lock)
        exclusiveOwner.store(me, ordering: .relaxed)
        defer {
            exclusiveOwner.store(0, ordering: .relaxed)
            pthread_rwlock_unlock(lock)
        }
        return try body()
    }
}
