import Logging
import Synchronization

/// Keeps the lines logged through its logger, with their metadata (the logger's and the line's), and passes each to
/// `onLine` as it is logged.
final class LogCapture: Sendable {
    struct Line: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: [String: String]
    }

    private let lines = Mutex<[Line]>([])
    private let onLine: @Sendable (Line) -> Void

    init(onLine: @escaping @Sendable (Line) -> Void = { _ in }) { self.onLine = onLine }

    /// Every line so far.
    var all: [Line] { lines.withLock { $0 } }

    /// A logger that logs every level here.
    var logger: Logger { Logger(label: "tributaryd-test") { _ in Handler(capture: self) } }

    fileprivate func append(_ line: Line) {
        lines.withLock { $0.append(line) }
        onLine(line)
    }

    private struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        var metadataProvider: Logger.MetadataProvider?

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { $1 }
            capture.append(
                Line(level: event.level, message: "\(event.message)", metadata: merged.mapValues { "\($0)" }))
        }
    }
}
