import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The most anonymous memory (heap, not the mapped database files) a piece of work holds beyond what the process held
/// when it started: `RssAnon` of `/proc/self/status`, sampled every half millisecond on a thread of its own. Freed
/// heap is handed back to the system first (`malloc_trim`), so that what the work allocates shows as growth rather
/// than reusing what earlier work freed. Linux only; elsewhere the figure is 0.
enum TransientMemory {
    /// Runs `body` and returns the peak growth of the process's anonymous memory while it ran, in bytes.
    static func peakGrowth(_ body: () throws -> Void) rethrows -> Int {
        trim()
        let start = residentAnonymous()
        let peak = Peak(start)
        let sampler = Thread {
            while !peak.stopped {
                peak.raise(residentAnonymous())
                usleep(500)
            }
        }
        sampler.start()
        defer { peak.stop() }
        try body()
        peak.raise(residentAnonymous())
        return max(0, peak.value - start)
    }

    /// The process's resident anonymous memory, in bytes.
    static func residentAnonymous() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("RssAnon:") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            return fields.count > 1 ? (Int(fields[1]) ?? 0) * 1024 : 0
        }
        return 0
    }

    /// glibc's `malloc_trim(0)`, found at run time (Swift's Glibc module does not declare it).
    private static func trim() {
        #if canImport(Glibc)
            typealias Trim = @convention(c) (Int) -> Int32
            if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") {
                _ = unsafeBitCast(symbol, to: Trim.self)(0)
            }
        #endif
    }

    private final class Peak: @unchecked Sendable {
        private let lock = NSLock()
        private var highest: Int
        private var done = false

        init(_ start: Int) { highest = start }

        var value: Int { lock.withLock { highest } }
        var stopped: Bool { lock.withLock { done } }
        func raise(_ sample: Int) { lock.withLock { highest = max(highest, sample) } }
        func stop() { lock.withLock { done = true } }
    }
}
