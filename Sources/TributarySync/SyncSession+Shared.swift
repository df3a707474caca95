import Synchronization
import Tributary
import TributaryModel
import TributaryProtocol

extension SyncSession {
    /// What the connection loop, the sessions it runs and the app's calls share, under one lock.
    final class Shared: Sendable {
        let states = Broadcast<State>(.connecting)
        let uploads: Broadcast<SyncProgress>
        let downloads = Broadcast(SyncProgress(transferred: 0, transferable: 0))
        let bootstraps = Broadcast(SyncProgress(transferred: 0, transferable: 0))
        private let inner: Mutex<Inner>

        private struct Inner {
            var driver: SessionDriver?
            var paused = false
            var closed = false
            /// An error that stopped the session until ``resume()``.
            var stopped: SyncError?
            var uploadedThrough: UInt64 = 0
            var acknowledgedThrough: UInt64 = 0
            var uploadWaiters: [(target: UInt64, continuation: CheckedContinuation<Void, any Error>)] = []
            var activeWaiters: [CheckedContinuation<SessionDriver, any Error>] = []
            var releaseWaiters: [CheckedContinuation<Void, Never>] = []
            var endError: SyncError?
            /// Whether the open connection's session is established and has not ended: the driver that
            /// ``activeDriver()`` hands out. An ended driver refuses every mark at once, so a waiter given it would ask
            /// again and again, without a pause, until the connection loop put the next one in place.
            var established = false
            /// Whether the current connection attempt reached an established session (the backoff starts over).
            var attemptEstablished = false
            var rejections: [Acknowledgement.Rejection] = []
            var downloaded: UInt64 = 0
            /// The replica the session syncs: the one it was made with, or the one a client reset put in its place.
            var replica: Replica
            var resets: [ClientResetReport] = []
            /// Which of the session's daemons it connects to now (or tries next).
            var endpointIndex = 0
            /// Whether the replica's directory counts client resets that did not help yet: the count is cleared, once,
            /// when the daemon takes an upload (not a file operation on every acknowledgement).
            var resetsCounted: Bool
        }

        init(replica: Replica) {
            inner = Mutex(
                Inner(replica: replica, resetsCounted: ClientResetter.attempts(in: replica.directory) > 0))
            uploads = Broadcast(SyncProgress(transferred: 0, transferable: replica.versionVector[replica.replicaID]))
        }

        var state: State { states.value }
        var isClosed: Bool { inner.withLock { $0.closed } }
        var isHeld: Bool { inner.withLock { $0.paused || $0.stopped != nil } }
        var rejections: [Acknowledgement.Rejection] { inner.withLock { $0.rejections } }
        var wasEstablished: Bool { inner.withLock { $0.attemptEstablished } }
        var replica: Replica { inner.withLock { $0.replica } }
        var resets: [ClientResetReport] { inner.withLock { $0.resets } }
        var endpointIndex: Int {
            get { inner.withLock { $0.endpointIndex } }
            set { inner.withLock { $0.endpointIndex = newValue } }
        }
        /// The error that stopped the session, while it is stopped.
        var stoppedError: SyncError? { inner.withLock { $0.stopped } }

        /// Puts `replica` back as the one the session syncs: the old replica opened again after a client reset failed
        /// once it had closed it.
        func restore(_ replica: Replica) {
            inner.withLock {
                $0.replica = replica
                $0.resetsCounted = true
            }
        }

        /// Puts the replica a client reset made in place of the one the session synced. Uploads waited on are of the
        /// old replica's changesets: those waits fail, naming the reset.
        func replace(with replica: Replica, report: ClientResetReport) {
            let waiters = inner.withLock { inner in
                inner.replica = replica
                inner.resets.append(report)
                inner.resetsCounted = true
                inner.uploadedThrough = 0
                inner.acknowledgedThrough = 0
                inner.rejections = []
                defer { inner.uploadWaiters.removeAll() }
                return inner.uploadWaiters.map(\.continuation)
            }
            let error = SyncError(
                .resetRequired, .retry,
                "the replica was reset (\(report)): wait for the upload of the new replica (session.replica)")
            for waiter in waiters { waiter.resume(throwing: error) }
            uploads.send(SyncProgress(transferred: 0, transferable: replica.versionVector[replica.replicaID]))
        }
        /// This replica's own sequence through which a session of this process received every acknowledgement.
        var acknowledgedThrough: UInt64 { inner.withLock { $0.acknowledgedThrough } }

        var driver: SessionDriver? {
            get { inner.withLock { $0.driver } }
            set { inner.withLock { $0.driver = newValue } }
        }

        func set(_ state: State) {
            if case .connecting = state {
                inner.withLock {
                    $0.established = false
                    $0.attemptEstablished = false
                    $0.endError = nil
                }
            }
            states.send(state)
        }

        func takeEndError() -> SyncError? { inner.withLock { $0.endError } }

        func handle(_ event: SessionEvent) {
            switch event {
            case .established:
                let (driver, waiters) = inner.withLock { inner in
                    inner.established = true
                    inner.attemptEstablished = true
                    inner.downloaded = 0
                    defer { inner.activeWaiters.removeAll() }
                    return (inner.driver, inner.activeWaiters)
                }
                states.send(.active)
                if let driver { for waiter in waiters { waiter.resume(returning: driver) } }
            case .uploaded(let through):
                let (done, uploaded) = inner.withLock { inner in
                    inner.uploadedThrough = max(inner.uploadedThrough, through)
                    let done = inner.uploadWaiters.filter { $0.target <= inner.uploadedThrough }
                    inner.uploadWaiters.removeAll { $0.target <= inner.uploadedThrough }
                    return (done, inner.uploadedThrough)
                }
                for waiter in done { waiter.continuation.resume() }
                let own = replica.versionVector[replica.replicaID]
                uploads.send(SyncProgress(transferred: min(uploaded, own), transferable: own))
            case .downloaded(let changesets, let more):
                let total = inner.withLock { inner in
                    inner.downloaded += UInt64(changesets)
                    return inner.downloaded
                }
                downloads.send(SyncProgress(transferred: total, transferable: more ? total + 1 : total))
            case .bootstrapping(let received, let total):
                bootstraps.send(SyncProgress(transferred: received, transferable: total))
            case .acknowledged(let through):
                inner.withLock { $0.acknowledgedThrough = max($0.acknowledgedThrough, through) }
            case .accepted:
                let directory = inner.withLock { inner -> String? in
                    defer { inner.resetsCounted = false }
                    return inner.resetsCounted ? inner.replica.directory : nil
                }
                if let directory { ClientResetter.clearAttempts(in: directory) }
            case .rejected(let rejections):
                inner.withLock { $0.rejections.append(contentsOf: rejections) }
            case .ended(let error):
                inner.withLock {
                    $0.endError = error
                    $0.established = false
                }
            }
        }

        func waitForUpload(through target: UInt64) async throws {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome: Result<Bool, SyncError> = inner.withLock { inner in
                    if inner.uploadedThrough >= target { return .success(true) }
                    if let failure = Self.failure(inner) { return .failure(failure) }
                    inner.uploadWaiters.append((target, continuation))
                    return .success(false)
                }
                switch outcome {
                case .success(true): continuation.resume()
                case .success(false): break
                case .failure(let error): continuation.resume(throwing: error)
                }
            }
        }

        /// The open session's driver, once there is one.
        func activeDriver() async throws -> SessionDriver {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<SessionDriver, any Error>) in
                let outcome: Result<SessionDriver?, SyncError> = inner.withLock { inner in
                    if let failure = Self.failure(inner) { return .failure(failure) }
                    if inner.established, let driver = inner.driver { return .success(driver) }
                    inner.activeWaiters.append(continuation)
                    return .success(nil)
                }
                switch outcome {
                case .success(let driver?): continuation.resume(returning: driver)
                case .success(nil): break
                case .failure(let error): continuation.resume(throwing: error)
                }
            }
        }

        func checkNotStopped() throws {
            if let failure = inner.withLock({ Self.failure($0) }) { throw failure }
        }

        private static func failure(_ inner: Inner) -> SyncError? {
            if inner.closed { return SyncError(.unavailable, .fatal, "the sync session was closed") }
            return inner.stopped
        }

        /// An error that is not retried stops the session until the app resumes it.
        func stop(_ error: SyncError) {
            let waiters = inner.withLock { inner in
                inner.stopped = error
                return takeWaiters(&inner)
            }
            states.send(.disconnected(error))
            fail(waiters, error)
        }

        func setPaused(_ paused: Bool) {
            let released = inner.withLock { inner in
                inner.paused = paused
                if !paused { inner.stopped = nil }
                defer { if !paused { inner.releaseWaiters.removeAll() } }
                return paused ? [] : inner.releaseWaiters
            }
            if paused { states.send(.paused) }
            for waiter in released { waiter.resume() }
        }

        func setClosed() {
            let (waiters, released) = inner.withLock { inner in
                inner.closed = true
                defer { inner.releaseWaiters.removeAll() }
                return (takeWaiters(&inner), inner.releaseWaiters)
            }
            fail(waiters, SyncError(.unavailable, .fatal, "the sync session was closed"))
            for waiter in released { waiter.resume() }
        }

        private func takeWaiters(_ inner: inout Inner) -> Waiters {
            defer {
                inner.uploadWaiters.removeAll()
                inner.activeWaiters.removeAll()
            }
            return Waiters(uploads: inner.uploadWaiters.map(\.continuation), active: inner.activeWaiters)
        }

        private struct Waiters {
            var uploads: [CheckedContinuation<Void, any Error>]
            var active: [CheckedContinuation<SessionDriver, any Error>]
        }

        private func fail(_ waiters: Waiters, _ error: SyncError) {
            for waiter in waiters.uploads { waiter.resume(throwing: error) }
            for waiter in waiters.active { waiter.resume(throwing: error) }
        }

        /// Returns when the session is neither paused nor stopped, or is closed.
        func waitUntilReleased() async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let wait = inner.withLock { inner in
                    guard (inner.paused || inner.stopped != nil) && !inner.closed else { return false }
                    inner.releaseWaiters.append(continuation)
                    return true
                }
                if !wait { continuation.resume() }
            }
        }

        /// Sleeps for `duration`, waking early when the session is closed, paused or resumed.
        func sleep(for duration: Duration) async {
            let deadline = ContinuousClock.now + duration
            let start = inner.withLock { ($0.paused, $0.stopped) }
            while ContinuousClock.now < deadline {
                try? await Task.sleep(for: min(.milliseconds(100), deadline - .now))
                let now = inner.withLock { ($0.paused, $0.stopped, $0.closed) }
                if now.2 || now.0 != start.0 || (now.1 == nil) != (start.1 == nil) { return }
            }
        }
    }
}
