import ArgumentParser
import Foundation
import Tributary
import TributaryModel
import TributarySync

/// A chat participant on a replica of its own that syncs through a daemon.
struct SyncDemo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Write chat messages on a replica that syncs through tributaryd, and show everyone's.",
        discussion: """
            Opens (or creates) the replica in DIRECTORY, connects it to the daemon, writes --messages messages as \
            --author, waits until the daemon holds them durably and until everything the daemon holds has been \
            downloaded, then prints the chat: every author's messages, whichever replica wrote them. Writes made \
            while the daemon is down are kept and uploaded when it is back. With --watch it stays connected and \
            prints each message as it arrives (Ctrl-C to stop).

            Try it: start a daemon (swift run tributaryd ./daemon-data), then run this twice with two directories \
            and two authors.
            """)

    @Argument(help: "The app's replica directory (created if missing).")
    var directory: String

    @Option(help: "The daemon's address: ws://HOST:PORT, or wss://HOST:PORT over TLS.")
    var daemon = "ws://127.0.0.1:7400"

    @Option(
        name: .customLong("ca"),
        help: "A certificate authority (PEM) to trust for a wss:// daemon's certificate, besides the system's roots.")
    var certificateAuthority: String?

    @Option(help: "The author of the messages written.")
    var author = ProcessInfo.processInfo.hostName

    @Option(help: "How many messages to write.")
    var messages = 3

    @Option(help: "The access token, if the daemon requires one.")
    var token: String?

    @Flag(help: "Stay connected and print messages as they arrive.")
    var watch = false

    @Option(help: "Give up waiting for the daemon after this many seconds.")
    var timeout = 30.0

    func validate() throws {
        guard (0...100_000).contains(messages) else {
            throw ValidationError("--messages must be between 0 and 100000, got \(messages).")
        }
    }

    func run() async throws {
        let endpoint = try SyncEndpoint(parsing: daemon)
        let replica = try Replica.open(directory: directory, schema: LocalDemo.schema)
        print("Replica \(replica.replicaID) at \(directory), syncing with \(endpoint)")
        var configuration = SyncConfiguration()
        configuration.tls.certificateAuthorityFiles = certificateAuthority.map { [$0] } ?? []
        let session = replica.connect(
            to: endpoint, credentials: token.map { .token($0) } ?? .none, configuration: configuration)
        let stateReporter = Task {
            for await state in session.states() { print("  sync: \(state)") }
        }

        let existing = try replica.count("ChatMessage")
        if messages > 0 {
            try await replica.write { txn in
                try txn.upsert("User", ["_id": .string(author), "displayName": .string(author), "presence": "online"])
                for index in 0..<messages {
                    let id = "\(replica.replicaID)-\(existing + index)"
                    try txn.create(
                        "ChatMessage",
                        [
                            "_id": .string(id), "conversationID": "demo", "author": .string(author),
                            "text": .string("Message \(existing + index + 1) from \(author)"),
                            "timestamp": .date(Date()), "sender": .link(.string(author)),
                        ])
                }
            }
            print("Wrote \(messages) messages as \(author)")
        }
        do {
            try await within(timeout) { try await session.waitForUpload() }
            print("Uploaded: the daemon holds them durably")
            try await within(timeout) { try await session.waitForDownload() }
            print("Downloaded everything the daemon holds")
        } catch {
            print("Not synced yet (\(error)); the writes are kept and upload when the daemon is reachable")
        }
        try printChat(replica)
        if watch {
            print("Watching for new messages (Ctrl-C to stop)")
            var shown = Set(try await replica.read { try $0.objects("ChatMessage") }.map(\.primaryKey))
            for try await change in replica.observe("ChatMessage", where: "TRUEPREDICATE SORT(timestamp ASC)") {
                for message in change.results where !shown.contains(message.primaryKey) {
                    shown.insert(message.primaryKey)
                    print("  \(message["author"].stringValue ?? "?"): \(message["text"].stringValue ?? "")")
                }
            }
        }
        stateReporter.cancel()
        await session.close()
    }

    func printChat(_ replica: Replica) throws {
        let all = try replica.read { snapshot in
            try snapshot.objects("ChatMessage", where: "TRUEPREDICATE SORT(timestamp ASC)")
        }
        var byAuthor: [String: Int] = [:]
        for message in all { byAuthor[message["author"].stringValue ?? "?", default: 0] += 1 }
        print(
            "Chat: \(all.count) messages, "
                + byAuthor.sorted { $0.key < $1.key }.map { "\($0.value) from \($0.key)" }.joined(separator: ", "))
        for message in all.suffix(10) {
            print("  \(message["author"].stringValue ?? "?"): \(message["text"].stringValue ?? "")")
        }
        let report = try replica.verify()
        print("Verify: \(report)")
    }

    func within(_ seconds: Double, _ body: @escaping @Sendable () async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                throw ValidationError("no answer from the daemon in \(Int(seconds)) s")
            }
            try await group.next()
            group.cancelAll()
        }
    }
}
