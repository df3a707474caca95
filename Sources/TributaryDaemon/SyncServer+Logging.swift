import Logging
import Synchronization
import TributaryProtocol
import TributarySync

extension SyncServer {
    /// The open sessions by role, for the `tributary_sessions_open` gauge.
    static func count(roles: [SyncRole]) -> (apps: Int, peers: Int) {
        roles.reduce(into: (apps: 0, peers: 0)) { count, role in
            switch role {
            case .app: count.apps += 1
            case .peer: count.peers += 1
            }
        }
    }

    /// Logs each change of a peer link's state (connected, disconnected and why) until the task is cancelled.
    static func logStates(of link: SyncSession, to peer: SyncEndpoint, _ logger: Logger) async {
        var logger = logger
        logger[metadataKey: "peer"] = "\(peer)"
        var previous: SyncSession.State?
        // A link that keeps failing the same way is logged once at warning, then at debug on each retry.
        var lastFailure: String?
        for await state in link.states() {
            defer { previous = state }
            guard state != previous else { continue }
            switch state {
            case .active:
                lastFailure = nil
                logger.info("peer link connected")
            case .disconnected(let error):
                let failure = "\(state)"
                logger.log(
                    level: failure == lastFailure ? .debug : .warning, "peer link \(failure)",
                    metadata: error.map { ["error": "\($0.code)"] })
                lastFailure = failure
            case .connecting:
                // Every attempt passes through here: logged only when it is news, not on each retry.
                if previous == nil || previous == .active { logger.debug("peer link connecting") }
            case .paused, .closed, .resetting:
                logger.info("peer link \(state)")
            }
        }
    }
}

/// Short ids for the connections a daemon serves: unique within the process, in the order they arrived.
enum SessionIdentifiers {
    private static let counter = Atomic<UInt64>(0)

    static func next() -> String {
        "c" + String(counter.add(1, ordering: .relaxed).newValue, radix: 36)
    }
}
