// tributary-demo: creates a local replica directory, writes a chat's worth of objects, and prints what it stored;
// `tributary-demo sync` does the same through a daemon, so that several replicas share one chat.
import ArgumentParser
import Foundation
import Tributary
import TributaryModel

@main
struct TributaryDemo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tributary-demo",
        abstract: "Try Tributary: a local replica, or replicas that sync through tributaryd.",
        subcommands: [LocalDemo.self, SyncDemo.self], defaultSubcommand: LocalDemo.self)
}

struct LocalDemo: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "local",
        abstract: "Create a local replica, write a few hundred chat objects, and show what was stored (the default).")

    @Option(help: "Replica directory (created if missing).")
    var directory = "./tributary-demo-data"

    @Option(help: "How many chat messages to write.")
    var messages = 300

    @Flag(help: "Delete the directory first.")
    var fresh = false

    func validate() throws {
        guard (1...1_000_000).contains(messages) else {
            throw ValidationError("--messages must be between 1 and 1000000, got \(messages).")
        }
    }

    static let schema = Schema(
        version: 1,
        types: [
            ObjectSchema(
                name: "User",
                properties: [
                    .scalar("_id", .string), .scalar("displayName", .string, indexed: true),
                    .scalar("presence", .string, default: "offline"),
                ]),
            ObjectSchema(
                name: "ChatMessage",
                properties: [
                    .scalar("_id", .string), .scalar("conversationID", .string, indexed: true),
                    .scalar("author", .string), .scalar("text", .string),
                    .scalar("timestamp", .date, indexed: true), .scalar("isHighPriority", .bool, default: false),
                    Property("sender", .link("User")),
                    Property("reactions", .scalar(.string), list: true),
                ]),
        ])

    func run() throws {
        if fresh { try? FileManager.default.removeItem(atPath: directory) }
        let replica = try Replica.open(directory: directory, schema: Self.schema)
        print("Replica \(replica.replicaID) at \(directory)")

        let users = ["ada", "alan", "grace", "edsger", "barbara"]
        let start = Date()
        try replica.write { txn in
            for user in users {
                try txn.upsert(
                    "User", ["_id": .string(user), "displayName": .string(user.capitalized), "presence": "online"])
            }
        }
        let base = try replica.count("ChatMessage")
        let perTransaction = 25
        var written = 0
        while written < messages {
            try replica.write { txn in
                for offset in 0..<min(perTransaction, messages - written) {
                    let number = base + written + offset
                    let author = users[number % users.count]
                    try txn.create(
                        "ChatMessage",
                        [
                            "_id": .string("m\(number)"), "conversationID": .string("c\(number % 7)"),
                            "author": .string(author), "text": .string("Message \(number) from \(author): hello!"),
                            "timestamp": .date(Date(timeIntervalSince1970: 1_700_000_000 + Double(number))),
                            "sender": .link(.string(author)),
                            "reactions": number % 3 == 0 ? ["👍"] : [],
                        ])
                }
            }
            written += perTransaction
        }
        let seconds = Date().timeIntervalSince(start)

        let messageCount = try replica.count("ChatMessage")
        let statistics = try replica.inspection.logStatistics()
        let report = try replica.verify()
        print(
            "Wrote \(messages) messages in \((messages + perTransaction - 1) / perTransaction) transactions in \(String(format: "%.2f", seconds)) s"
        )
        print("Objects: \(try replica.count("User")) users, \(messageCount) messages")
        if let sample = try replica.object("ChatMessage", primaryKey: .string("m\(base)")) {
            print("Sample: \(sample)")
        }
        print("Log: \(statistics.changesets) changesets, \(statistics.instructions) instructions")
        print(
            "Log size: \(statistics.storedBytes) bytes stored, \(statistics.uncompressedBytes) bytes uncompressed "
                + "(compression ratio \(String(format: "%.2f", statistics.compressionRatio)))")
        print("Storage: \(replica.storageStatistics.usedBytes) bytes in data.mdb pages")
        print("Verify: \(report)")
        if !report.passed { throw ExitCode.failure }
    }
}

extension Replica {
    func count(_ type: String) throws -> Int { try read { try $0.count(type) } }
}
