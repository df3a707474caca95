import Synchronization
import TributaryProtocol

/// Deadlines for waits in tests that talk over sockets or to other processes.
package enum Deadline {
    /// Runs `body` with a deadline: a sync test that hangs fails instead. The body runs in a task of its own, which
    /// is cancelled at the deadline but not waited for: a wait that does not answer cancellation (an upload's, say)
    /// still fails the test at the deadline, naming what did not finish.
    package static func within<T: Sendable>(
        _ limit: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let outcome = Outcome<T>()
        return try await withCheckedThrowingContinuation { continuation in
            outcome.start(continuation)
            let work = Task {
                do { outcome.finish(.success(try await body())) } catch { outcome.finish(.failure(error)) }
            }
            Task {
                try? await Task.sleep(for: limit)
                work.cancel()
                outcome.finish(.failure(SyncError(.timeout, .fatal, "\(what) did not finish in \(limit)")))
            }
        }
    }

    /// The first result a ``within(_:_:_:)`` gets, handed to its caller once.
    private final class Outcome<T: Sendable>: Sendable {
        private let continuation = Mutex<CheckedContinuation<T, any Error>?>(nil)

        func start(_ continuation: CheckedContinuation<T, any Error>) {
            self.continuation.withLock { $0 = continuation }
        }

        func finish(_ result: Result<T, any Error>) {
            let waiting = continuation.withLock { waiting in
                defer { waiting = nil }
                return waiting
            }
            waiting?.resume(with: result)
        }
    }

}
