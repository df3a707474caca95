import Foundation
import Synchronization
import Testing
import TributaryLog
import TributaryModel
import TributaryStorage
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

/// The map starts small and grows by itself while readers hold snapshots; a transaction bigger
/// than the cap fails with `.mapFull` and a larger cap lets it through; a map grown by another process is adopted.
@Suite("Map growth", .serialized, .tags(.drill, .slow))
struct MapGrowthDrillTests {
    /// A pool of compressible text (words from a small vocabulary), sliced for message texts without building
    /// strings word by word.
    static let pool: [UInt8] = {
        var random = SplitMix64(seed: 5)
        let words = (0..<256).map { i in "w\(i)x\(random.next() % 1000)" }
        var text = ""
        while text.utf8.count < 2 << 20 { text += words[Int(random.next() % 256)] + " " }
        return Array(text.utf8)
    }()

    static func text(_ random: inout SplitMix64, length: Int) -> String {
        let start = Int(random.next() % UInt64(pool.count - length))
        return String(decoding: pool[start..<(start + length)], as: UTF8.self)
    }

    /// Random letters: barely compressible.
    static func noise(_ random: inout SplitMix64, length: Int) -> String {
        var bytes = [UInt8](repeating: 0, count: length)
        for i in 0..<length { bytes[i] = UInt8(ascii: "a") + UInt8(random.next() % 26) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// What the readers and the writer share.
    final class Shared: Sendable {
        /// expected[k]: the number of messages once the counter reads k. Set before the k-th write begins.
        let expected = Mutex<[Int]>([0])
        let stop = Atomic<Bool>(false)
        let problems = Mutex<[String]>([])
        let readsDone = Atomic<Int>(0)
        let snapshotsHeld = Atomic<Int>(0)
        let finished = Atomic<Int>(0)
    }

    @Test("1 MiB map grows to the 64 MiB cap under 60 MiB of writes while 8 readers hold snapshots")
    func growsUnderReaders() async throws {
        try await offThePool {
            let directory = TemporaryDirectory("map-growth-grow")
            var configuration = Replica.Configuration()
            configuration.durability = .none
            configuration.initialSizeBytes = 1 << 20
            configuration.maximumSizeBytes = 64 << 20
            let replica = try Replica.open(
                directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
            try replica.write { txn in try txn.create("User", ["_id": "counter", "name": "counter", "age": 0]) }
            let base = replica.lastLocalSequence
            #expect(replica.storageStatistics.mapSize == 1 << 20)

            let shared = Shared()
            var threads: [Thread] = []
            // The readers give up after two minutes, so a starved writer shows as a failure, not a hang (the writes
            // alone take a few seconds).
            let readersDeadline = Date().addingTimeInterval(120)
            for reader in 0..<8 {
                let thread = Thread {
                    defer { shared.finished.add(1, ordering: .relaxed) }
                    var random = SplitMix64(seed: UInt64(reader))
                    while !shared.stop.load(ordering: .relaxed) && Date() < readersDeadline {
                        do {
                            if reader < 6 {
                                // A consistent view: the counter, its copy and the message count belong to one commit.
                                try replica.read { snapshot in
                                    let counter = try snapshot.object("User", primaryKey: .string("counter"))
                                    let k = Int(counter?["karma"].intValue ?? -1)
                                    let copy = Int(counter?["age"].intValue ?? 0)
                                    if k != copy {
                                        shared.problems.withLock {
                                            $0.append("snapshot holds counter \(k) and its copy \(copy)")
                                        }
                                    }
                                    guard reader >= 4 else { return }
                                    let count = try snapshot.count("ChatMessage")
                                    let want = shared.expected.withLock { k >= 0 && k < $0.count ? $0[k] : -1 }
                                    if count != want {
                                        shared.problems.withLock {
                                            $0.append(
                                                "snapshot at counter \(k) holds \(count) messages, expected \(want)")
                                        }
                                    }
                                }
                                usleep(UInt32(reader >= 4 ? 5_000 : random.next() % 2_000))
                            } else {
                                // A long-lived storage snapshot held across commits and map growths: what it sees never
                                // changes until it is released.
                                let snapshot = try replica.environment.snapshot()
                                shared.snapshotsHeld.add(1, ordering: .relaxed)
                                let first = try snapshot.read { txn in
                                    (try replica.log.count(in: txn), try replica.log.head(in: txn))
                                }
                                for _ in 0..<(1 + Int(random.next() % 5)) {
                                    usleep(UInt32(2_000 + random.next() % 20_000))
                                    let again = try snapshot.read { txn in
                                        (try replica.log.count(in: txn), try replica.log.head(in: txn))
                                    }
                                    if again.0 != first.0 || again.1 != first.1 {
                                        shared.problems.withLock {
                                            $0.append("a held snapshot changed from \(first) to \(again)")
                                        }
                                    }
                                }
                                snapshot.release()
                            }
                            shared.readsDone.add(1, ordering: .relaxed)
                        } catch {
                            shared.problems.withLock { $0.append("reader \(reader): \(error)") }
                        }
                    }
                }
                threads.append(thread)
                thread.start()
            }

            var random = SplitMix64(seed: 77)
            var live: [String: UInt64] = [:]  // message id -> hash of its text
            var liveOrder: [String] = []
            var written = 0
            var transactions = 0
            var sizes: [Int] = [replica.storageStatistics.mapSize]
            let target = 60 << 20
            let started = Date()
            while written < target {
                // Plan the transaction: creates, text replacements and deletes.
                var creates: [(String, String)] = []
                var updates: [(String, String)] = []
                var deletes: [String] = []
                for _ in 0..<(1 + Int(random.next() % 12)) {
                    let length = 1_024 + Int(random.next() % 15_360)
                    let roll = random.next() % 10
                    if roll < 4 || liveOrder.count < 50 {
                        creates.append(("m\(transactions)-\(creates.count)", Self.text(&random, length: length)))
                    } else if roll < 8 {
                        let id = liveOrder[Int(random.next() % UInt64(liveOrder.count))]
                        if !updates.contains(where: { $0.0 == id }) && !deletes.contains(id) {
                            updates.append((id, Self.text(&random, length: length)))
                        }
                    } else {
                        let id = liveOrder[Int(random.next() % UInt64(liveOrder.count))]
                        if !updates.contains(where: { $0.0 == id }) && !deletes.contains(id) { deletes.append(id) }
                    }
                }
                // Keep the live set near 12 MiB: past it, deletes win.
                let liveBytes = live.count * 8_700
                if liveBytes > 12 << 20,
                    let victim = liveOrder.first(where: { id in
                        !deletes.contains(id) && !updates.contains { $0.0 == id }
                    })
                {
                    deletes.append(victim)
                }
                shared.expected.withLock { $0.append(live.count + creates.count - deletes.count) }
                try replica.write { txn in
                    for (id, text) in creates {
                        try txn.create(
                            "ChatMessage",
                            [
                                "_id": .string(id), "author": "counter", "text": .string(text), "conversationID": "c",
                                "timestamp": .date(Date(timeIntervalSince1970: 1_700_000_000)),
                            ])
                    }
                    for (id, text) in updates {
                        try txn.set(.string(text), at: ["text"], of: "ChatMessage", primaryKey: .string(id))
                    }
                    for id in deletes { try txn.delete("ChatMessage", primaryKey: .string(id)) }
                    try txn.increment(["karma"], of: "User", primaryKey: .string("counter"), by: 1)
                    try txn.set(.int(Int64(transactions + 1)), at: ["age"], of: "User", primaryKey: .string("counter"))
                }
                transactions += 1
                for (id, text) in creates + updates {
                    if live[id] == nil { liveOrder.append(id) }
                    live[id] = XXHash64.hash(Array(text.utf8))
                    written += text.utf8.count
                }
                for id in deletes {
                    live[id] = nil
                    liveOrder.removeAll { $0 == id }
                }
                let size = replica.storageStatistics.mapSize
                if size != sizes.last {
                    sizes.append(size)
                    print(
                        "map growth: grew to \(size >> 20) MiB after \(written >> 20) MiB written, \(transactions) transactions, \(String(format: "%.1f", Date().timeIntervalSince(started))) s"
                    )
                }
            }
            let seconds = Date().timeIntervalSince(started)
            #expect(Date() < readersDeadline, "the writer needed \(seconds) s: the readers starved it")
            shared.stop.store(true, ordering: .relaxed)
            while shared.finished.load(ordering: .relaxed) < threads.count { usleep(1_000) }

            let statistics = replica.storageStatistics
            print(
                "map growth: wrote \(written >> 20) MiB in \(transactions) transactions in \(String(format: "%.1f", seconds)) s; map "
                    + "\(sizes.map { "\($0 >> 20)" }.joined(separator: " -> ")) MiB, \(statistics.usedBytes >> 20) MiB used; "
                    + "\(shared.readsDone.load(ordering: .relaxed)) reads, \(shared.snapshotsHeld.load(ordering: .relaxed)) long snapshots"
            )
            let found = shared.problems.withLock { $0 }
            #expect(found.isEmpty, "\(found.count) reader problems, first: \(found.prefix(3))")
            #expect(sizes.count >= 6, "the map grew only \(sizes.count - 1) times")
            #expect(statistics.mapSize <= 64 << 20)
            #expect(shared.readsDone.load(ordering: .relaxed) > 100)

            // No lost or doubled transaction, every message as last written.
            #expect(replica.lastLocalSequence == base + UInt64(transactions))
            #expect(try replica.object("User", primaryKey: .string("counter"))?["karma"] == .int(Int64(transactions)))
            let messages = try replica.objects("ChatMessage")
            #expect(messages.count == live.count)
            var mismatched = 0
            for message in messages {
                let id = message.primaryKey.value.stringValue ?? ""
                if live[id] != XXHash64.hash(Array((message["text"].stringValue ?? "").utf8)) { mismatched += 1 }
            }
            #expect(mismatched == 0)
            let report = try replica.verify()
            #expect(report.passed, "\(report)")
            #expect(report.changesetsChecked == Int(replica.lastLocalSequence))
        }
    }

    /// Growing the map needs every other storage call in the process to finish first. Readers that never pause must
    /// not keep the writer waiting forever (a reader-preferring lock would): the writer's growth has to get its turn.
    @Test("back-to-back readers do not starve a write that grows the map")
    func growthIsNotStarvedByReaders() async throws {
        try await offThePool {
            let directory = TemporaryDirectory("map-growth-starve")
            var configuration = Replica.Configuration()
            configuration.durability = .none
            configuration.initialSizeBytes = 1 << 20
            configuration.maximumSizeBytes = 64 << 20
            let replica = try Replica.open(
                directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
            defer { replica.close() }
            try replica.write { txn in try txn.create("User", ["_id": "u", "name": "reader target"]) }
            let shared = Shared()
            var threads: [Thread] = []
            for _ in 0..<4 {
                let thread = Thread {
                    defer { shared.finished.add(1, ordering: .relaxed) }
                    while !shared.stop.load(ordering: .relaxed) {
                        _ = try? replica.read { try $0.object("User", primaryKey: .string("u")) }
                        shared.readsDone.add(1, ordering: .relaxed)
                    }
                }
                threads.append(thread)
                thread.start()
            }
            // The writer: 8 MiB in 64 transactions, so the 1 MiB map grows at least three times.
            let writesDone = Shared()
            let writer = Thread {
                var random = SplitMix64(seed: 1)
                for i in 0..<64 {
                    let text = MapGrowthDrillTests.noise(&random, length: 128 << 10)
                    do {
                        try replica.write { txn in
                            try txn.create(
                                "ChatMessage",
                                [
                                    "_id": .string("m\(i)"), "author": "u", "text": .string(text),
                                    "conversationID": "c",
                                    "timestamp": .date(Date(timeIntervalSince1970: 0)),
                                ])
                        }
                    } catch {
                        writesDone.problems.withLock { $0.append("\(error)") }
                    }
                    writesDone.readsDone.add(1, ordering: .relaxed)
                }
                writesDone.finished.add(1, ordering: .relaxed)
            }
            writer.start()
            let started = Date()
            // Alone, the writes take about 2 s in a debug build (4 with the readers on 2 cores); starved, they took 38 s.
            let deadline = started.addingTimeInterval(20)
            while writesDone.finished.load(ordering: .relaxed) == 0 && Date() < deadline { usleep(10_000) }
            let writesInTime = writesDone.readsDone.load(ordering: .relaxed)
            let seconds = Date().timeIntervalSince(started)
            shared.stop.store(true, ordering: .relaxed)
            while shared.finished.load(ordering: .relaxed) < threads.count { usleep(1_000) }
            while writesDone.finished.load(ordering: .relaxed) == 0 { usleep(1_000) }
            print(
                "map growth, starvation: \(writesInTime) of 64 writes done in \(String(format: "%.1f", seconds)) s while 4 readers ran "
                    + "\(shared.readsDone.load(ordering: .relaxed)) reads; map \(replica.storageStatistics.mapSize >> 20) MiB"
            )
            #expect(
                writesInTime == 64,
                "the writer was starved: \(writesInTime) of 64 writes in \(seconds) s while readers ran")
            #expect(writesDone.problems.withLock { $0 }.isEmpty)
            #expect(replica.storageStatistics.mapSize >= 8 << 20)
        }
    }

    @Test("a transaction bigger than the cap fails with .mapFull naming both sizes; a larger cap lets it through")
    func transactionBiggerThanTheCap() async throws {
        try await offThePool {
            let directory = TemporaryDirectory("map-growth-cap")
            let cap = 8 << 20
            var configuration = Replica.Configuration()
            configuration.durability = .none
            configuration.initialSizeBytes = 1 << 20
            configuration.maximumSizeBytes = cap
            var random = SplitMix64(seed: 3)
            // 12 MiB of barely compressible text in 24 messages: the log and the views each need most of it.
            let texts = (0..<24).map { _ in Self.noise(&random, length: 512 << 10) }
            let big: @Sendable (Transaction) throws -> Void = { txn in
                for (index, text) in texts.enumerated() {
                    try txn.create(
                        "ChatMessage",
                        [
                            "_id": .string("big\(index)"), "author": "a", "text": .string(text), "conversationID": "c",
                            "timestamp": .date(Date(timeIntervalSince1970: 0)),
                        ])
                }
            }
            do {
                let replica = try Replica.open(
                    directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
                defer { replica.close() }
                try replica.write { txn in try txn.create("User", ["_id": "u1", "name": "Ada"]) }
                let before = replica.lastLocalSequence
                let objectsBefore = try ReplicaDigest.objects(replica)
                do {
                    try replica.write(big)
                    Issue.record("a 12 MiB transaction committed under an 8 MiB cap")
                } catch let error as TributaryError {
                    print("map growth, cap: \(error.message)")
                    #expect(error.code == .mapFull, "\(error.code): \(error.message)")
                    #expect(error.message.contains("\(cap)"), "the cap is not named: \(error.message)")
                    #expect(error.message.contains("maximum"), "\(error.message)")
                    #expect(error.message.contains(directory.path), "the path is not named: \(error.message)")
                }
                #expect(replica.storageStatistics.mapSize == cap)
                #expect(replica.lastLocalSequence == before)
                #expect(try ReplicaDigest.objects(replica) == objectsBefore)
                #expect(try replica.verify().passed)
                // Small writes still fit.
                try replica.write { txn in try txn.create("User", ["_id": "u2", "name": "Alan"]) }
            }
            // Reopened with a larger cap, the same transaction commits.
            configuration.maximumSizeBytes = 64 << 20
            let replica = try Replica.open(
                directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
            defer { replica.close() }
            try replica.write(big)
            #expect(try replica.read { try $0.count("ChatMessage") } == 24)
            #expect(replica.storageStatistics.mapSize > cap)
            #expect(try replica.verify().passed)
        }
    }

    @Test("a map grown by another process is adopted by the next read and the next write")
    func mapGrownByAnotherProcess() async throws {
        try await offThePool {
            let executable = try #require(
                ChildExecutable.path(), "tributary-crash-child is not next to the test binary")
            let directory = TemporaryDirectory("map-growth-cross")
            var configuration = Replica.Configuration()
            configuration.durability = .full
            configuration.initialSizeBytes = 1 << 20
            configuration.maximumSizeBytes = 64 << 20
            let replica = try Replica.open(
                directory: directory.path, schema: Fixtures.chatSchema, configuration: configuration)
            defer { replica.close() }
            try replica.write { txn in try txn.create("User", ["_id": "u0", "name": "before"]) }
            let initial = replica.storageStatistics.mapSize
            #expect(initial == 1 << 20)

            for (round, bytes) in [(1, 4 << 20), (2, 12 << 20)] {
                let child = try ChildProcess(
                    executable: executable, arguments: ["grow-map", directory.path, "\(bytes)"],
                    stderrPath: directory.path + ".stderr")
                let exit = child.waitForExit(timeout: 120)
                #expect(exit == .exited(0), "\(child.lines) \(child.standardError)")
                let grew = try #require(
                    child.lines.first { $0.hasPrefix("GREW") }, "\(child.lines) \(child.standardError)")
                let childMap = Int(grew.split(separator: " ")[1]) ?? 0
                print(
                    "map growth, cross-process round \(round): the child grew the map to \(childMap >> 20) MiB; ours was \(replica.storageStatistics.mapSize >> 20) MiB"
                )
                #expect(childMap > replica.storageStatistics.mapSize)

                if round == 1 {
                    // The next read adopts the new size, then the next write.
                    #expect(try replica.objects("User").count == round)
                    try replica.write { txn in try txn.create("User", ["_id": .string("u\(round)"), "name": "after"]) }
                } else {
                    // The next write adopts it directly.
                    try replica.write { txn in try txn.create("User", ["_id": .string("u\(round)"), "name": "after"]) }
                    #expect(try replica.objects("User").count == round + 1)
                }
                #expect(replica.storageStatistics.mapSize >= childMap)
            }
            try? FileManager.default.removeItem(atPath: directory.path + ".stderr")
            #expect(try replica.verify().passed)
        }
    }
}
