import Foundation
import Testing
import TributaryModel
import TributaryTestSupport
import TributaryTestTags

@testable import Tributary

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A full disk is one named error (`.diskFull`, with the replica's path), loses no acknowledged
/// commit, leaves the replica readable and verifiable, and the same open replica commits again once space is freed.
///
/// Two ways to fill the disk: a real 8 MiB tmpfs (needs root; skipped with the reason otherwise), and a child process
/// under `RLIMIT_FSIZE` with SIGXFSZ ignored, where LMDB sees a short write (EIO) or EFBIG.
@Suite("Disk full", .serialized, .tags(.drill, .slow))
struct DiskFullDrillTests {
    static func configuration() -> Replica.Configuration {
        var configuration = Replica.Configuration()
        configuration.durability = .full
        return configuration
    }

    /// Free bytes on the file system holding `path`, for unprivileged users.
    static func freeBytes(_ path: String) -> Int {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return -1 }
        return Int(info.f_bavail) * Int(info.f_frsize)
    }

    @Test("an 8 MiB tmpfs fills: .diskFull, nothing acknowledged lost, the same replica commits once space is freed")
    func tmpfsFills() async throws {
        try await offThePool {
            let mountPoint = TemporaryDirectory("disk-full-tmpfs")
            let rc = "size=8m".withCString { options in
                mount("tmpfs", mountPoint.path, "tmpfs", 0, options)
            }
            if rc != 0 {
                let reason = String(cString: strerror(errno))
                print("disk full, tmpfs: skipped, mount(2) of a tmpfs failed: \(reason) (needs root or CAP_SYS_ADMIN)")
                try Test.cancel("mount(2) of a tmpfs failed: \(reason); the RLIMIT_FSIZE variant still runs")
            }
            defer {
                if umount2(mountPoint.path, 0) != 0 { umount2(mountPoint.path, Int32(MNT_DETACH)) }
            }
            let directory = (mountPoint.path as NSString).appendingPathComponent("replica")
            let ballast = (mountPoint.path as NSString).appendingPathComponent("ballast")
            // Room to free later.
            #expect(FileManager.default.createFile(atPath: ballast, contents: Data(repeating: 7, count: 2 << 20)))

            var acknowledged: [UInt64: UInt64] = [:]
            var failures: [TributaryError] = []
            do {
                let replica = try Replica.open(
                    directory: directory, schema: Fixtures.chatSchema, configuration: Self.configuration())
                defer { replica.close() }
                var workload = ChatWorkload(seed: 8, prefix: "fill")
                var stateWhenFull: UInt64 = 0
                var lastWhenFull: UInt64 = 0
                for _ in 0..<2_000 {
                    do {
                        try replica.write { txn in try workload.run(200, in: txn, textLength: 300) }
                        acknowledged[replica.lastLocalSequence] = try ReplicaDigest.changeset(
                            replica, at: replica.lastLocalSequence)
                    } catch let error as TributaryError {
                        failures.append(error)
                        break
                    }
                }
                let error = try #require(failures.first, "8 MiB of tmpfs never filled")
                print(
                    "disk full, tmpfs: full after \(acknowledged.count) commits, \(Self.freeBytes(mountPoint.path)) bytes free: \(error.message)"
                )
                #expect(error.code == .diskFull, "\(error.code): \(error.message)")
                #expect(error.message.contains("disk full writing"), "\(error.message)")
                #expect(error.message.contains("bytes free"), "\(error.message)")
                #expect(error.message.contains(directory), "the error does not name the replica: \(error.message)")
                // tmpfs reports a short write (EIO) as often as ENOSPC; both are .diskFull and the remedy names the disk.
                #expect(
                    error.message.contains("disk space"), "the message does not say the disk is full: \(error.message)")
                #expect(Self.freeBytes(mountPoint.path) < 1 << 20, "the disk is not actually full")

                // Full, but readable, verifiable, and holding every acknowledged commit.
                lastWhenFull = replica.lastLocalSequence
                #expect(lastWhenFull == acknowledged.keys.max())
                stateWhenFull = try ReplicaDigest.objects(replica)
                #expect(try replica.verify().passed)
                // Writing again while full fails the same way and changes nothing.
                workload = try ChatWorkload(seed: 9, prefix: "again", replica: replica)
                #expect(throws: TributaryError.self) {
                    try replica.write { txn in try workload.run(200, in: txn, textLength: 300) }
                }
                #expect(replica.lastLocalSequence == lastWhenFull)
                #expect(try ReplicaDigest.objects(replica) == stateWhenFull)

                // Free space: the same open replica commits again.
                try FileManager.default.removeItem(atPath: ballast)
                workload = try ChatWorkload(seed: 10, prefix: "freed", replica: replica)
                for _ in 0..<3 {
                    try replica.write { txn in try workload.run(100, in: txn, textLength: 300) }
                    acknowledged[replica.lastLocalSequence] = try ReplicaDigest.changeset(
                        replica, at: replica.lastLocalSequence)
                }
                #expect(replica.lastLocalSequence == lastWhenFull + 3)
                #expect(try replica.verify().passed)
            }

            // Reopened: every acknowledged commit is there.
            let replica = try Replica.open(
                directory: directory, schema: Fixtures.chatSchema, configuration: Self.configuration())
            defer { replica.close() }
            #expect(replica.lastLocalSequence == acknowledged.keys.max())
            for (sequence, digest) in acknowledged {
                #expect(
                    try ReplicaDigest.changeset(replica, at: sequence) == digest, "seq \(sequence) differs after reopen"
                )
            }
            #expect(try replica.verify().passed)
        }
    }

    @Test("a child under RLIMIT_FSIZE: .diskFull with the path, nothing acknowledged lost, commits again after")
    func fileSizeLimit() async throws {
        try await offThePool {
            let executable = try #require(
                ChildExecutable.path(), "tributary-crash-child is not next to the test binary")
            let directory = TemporaryDirectory("disk-full-fsize")
            let limit = 3 << 20
            let child = try ChildProcess(
                executable: executable,
                arguments: [
                    "write", directory.path, "--durability", "full", "--seed", "12", "--big-every", "0", "--max-ops",
                    "300",
                    "--text", "300", "--file-size-limit", "\(limit)", "--after-error", "3", "--max-txns", "10000",
                ],
                stderrPath: directory.path + ".stderr")
            defer { try? FileManager.default.removeItem(atPath: directory.path + ".stderr") }
            let exit = child.waitForExit(timeout: 300)
            let lines = child.lines
            #expect(
                exit == .exited(0),
                "the child ended with \(exit.map(\.description) ?? "a timeout"): \(lines.suffix(4)) \(child.standardError)"
            )
            if exit == nil { child.killAndWait() }

            let errors = lines.filter { $0.hasPrefix("ERROR") }
            #expect(errors.count == 1, "\(errors)")
            let error = try #require(errors.first)
            print("disk full, RLIMIT_FSIZE \(limit) bytes: \(error)")
            #expect(error.hasPrefix("ERROR diskFull "), "the error is not named disk full: \(error)")
            #expect(error.contains(directory.path), "the error does not name the replica: \(error)")
            #expect(error.contains("disk space"), "the message does not say the disk is full: \(error)")
            let errorIndex = try #require(lines.firstIndex(of: error))
            let acks = lines.enumerated().compactMap { index, line -> (Int, UInt64, String)? in
                let fields = line.split(separator: " ")
                guard fields.count == 3, fields[0] == "ACK", let sequence = UInt64(fields[1]) else { return nil }
                return (index, sequence, String(fields[2]))
            }
            let before = acks.filter { $0.0 < errorIndex }
            let after = acks.filter { $0.0 > errorIndex }
            #expect(before.count >= 2, "the limit was hit before two commits")
            #expect(after.count == 3, "the child did not commit again once the limit was lifted: \(lines.suffix(5))")
            // The failed transaction left nothing: the commits after it take the very next sequence numbers.
            if let lastBefore = before.last, let firstAfter = after.first {
                #expect(firstAfter.1 == lastBefore.1 + 1)
            }

            let replica = try Replica.open(
                directory: directory.path, schema: Fixtures.chatSchema, configuration: Self.configuration())
            defer { replica.close() }
            #expect(replica.lastLocalSequence == acks.last?.1)
            for (_, sequence, digest) in acks {
                #expect(
                    ReplicaDigest.hex(try ReplicaDigest.changeset(replica, at: sequence)) == digest,
                    "seq \(sequence) differs")
            }
            #expect(try replica.verify().passed)
            let size =
                (try FileManager.default.attributesOfItem(atPath: directory.appending("data.mdb"))[.size] as? Int) ?? 0
            print(
                "disk full, RLIMIT_FSIZE: \(before.count) commits before the limit, \(after.count) after; data.mdb is \(size) bytes"
            )
        }
    }
}
