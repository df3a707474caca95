#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A pthread reader-writer lock.
///
/// Storage operations take it shared; growing the LMDB map takes it exclusively, because
/// `mdb_env_set_mapsize` unmaps and remaps the file and no page pointer may be in use meanwhile.
///
/// `@unchecked Sendable`: the pthread lock is itself thread-safe, and the pointer is allocated once
/// and freed only in `deinit`, when no thread can hold a reference.
final class ReadWriteLock: @unchecked Sendable {
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>

    init() {
        lock = .allocate(capacity: 1)
        lock.initialize(to: pthread_rwlock_t())
        let rc = pthread_rwlock_init(lock, nil)
        precondition(rc == 0, "pthread_rwlock_init failed: \(rc)")
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    func withSharedLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }

    func withExclusiveLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }
}
