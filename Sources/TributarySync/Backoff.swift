/// How long to wait before reconnecting: exponential backoff with full jitter. The ceiling doubles from `initial`
/// after each failed attempt up to `maximum`, and each wait is drawn uniformly between zero and the ceiling, so that
/// many clients cut off at once do not all come back at once.
public struct ReconnectBackoff: Sendable, Hashable {
    /// The first ceiling. Default: 1 second.
    public var initial: Duration
    /// The largest ceiling. Default: 5 minutes.
    public var maximum: Duration
    /// Failed attempts since the last session that opened.
    public private(set) var attempts = 0

    public init(initial: Duration = .seconds(1), maximum: Duration = .seconds(300)) {
        self.initial = initial
        self.maximum = maximum
    }

    /// The current ceiling: `initial` doubled once per failed attempt, at most `maximum`.
    public var ceiling: Duration {
        var ceiling = initial
        for _ in 0..<min(attempts, 62) {
            ceiling = ceiling * 2
            if ceiling >= maximum { return maximum }
        }
        return min(ceiling, maximum)
    }

    /// The wait before the next attempt, drawn with `random` (a value in 0...1), and counts the attempt.
    public mutating func next(random: Double) -> Duration {
        let wait = ceiling * min(max(random, 0), 1)
        attempts += 1
        return wait
    }

    /// A session opened: the next failure starts from `initial` again.
    public mutating func reset() { attempts = 0 }
}
