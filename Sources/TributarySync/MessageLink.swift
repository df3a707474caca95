package import Tributary

/// Where a session writes its messages: one binary WebSocket message each, or an in-memory queue in tests.
package protocol MessageWriter: Sendable {
    /// Sends one message: handed to the connection on the caller's actor, in call order, before waiting for it to
    /// be written.
    nonisolated(nonsending) func send(_ message: [UInt8]) async throws
    /// Closes the connection (after the messages sent so far).
    func close() async
    /// Closes the connection now, without a word: a write failed. What was already received is still read.
    func abort()
}

/// How a session integrates the batches it receives.
package protocol BatchIntegrator: Sendable {
    /// Integrates `changesets` (adopted when `adopt`: an app's upload at its daemon) in one durable commit. When
    /// `author` is set, every changeset must name it as its author (see ``IncomingChangesets/requiredAuthor``).
    /// `refusals`, the writes the daemon refused in judging the upload, are stored in the same commit
    /// (``IncomingChangesets/refusals``).
    func integrate(_ changesets: [[UInt8]], adopt: Bool, author: String?, refusals: [RefusalRecord]) async throws
        -> IntegrationReport
}

/// Integrates each batch in a commit of its own: what an app does with its downloads.
package struct DirectIntegrator: BatchIntegrator {
    package let replica: Replica

    package init(replica: Replica) { self.replica = replica }

    package func integrate(_ changesets: [[UInt8]], adopt: Bool, author: String?, refusals: [RefusalRecord])
        async throws -> IntegrationReport
    {
        var batch = IncomingChangesets(changesets, adopt: adopt, requiredAuthor: author)
        batch.refusals = refusals
        let replica = replica
        return try await offload { [batch] in try replica.integrate(batches: [batch])[0].get() }
    }
}
