import Foundation

/// A process's memory as Linux reports it in `/proc/PID/status`.
///
/// `RssAnon` is the figure that shows a leak: `VmRSS` also counts the pages of the replica's memory-mapped file, which
/// grow with the data and are the kernel's to drop.
enum ProcessMemory {
    /// A field of `/proc/PID/status` (`RssAnon`, `VmRSS`, `VmHWM`, ...) in bytes, or `nil` where there is none.
    static func field(_ name: String, of pid: Int32) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(name + ":") {
            let value = line.dropFirst(name.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" }).first
                .flatMap { Int($0) }
            return value.map { $0 * 1024 }
        }
        return nil
    }

    /// Sets the process's peak resident size (`VmHWM`) back to its current one, so that `VmHWM` afterwards is the
    /// peak since now. Returns whether the kernel took it.
    static func resetPeak(of pid: Int32) -> Bool {
        guard let handle = FileHandle(forWritingAtPath: "/proc/\(pid)/clear_refs") else { return false }
        defer { try? handle.close() }
        return (try? handle.write(contentsOf: Data("5".utf8))) != nil
    }

    static func mebibytes(_ bytes: Int) -> String { String(format: "%.1f MiB", Double(bytes) / 1_048_576) }
}
