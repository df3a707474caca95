import ArgumentParser
import Tributary
import TributaryModel

struct Objects: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the objects of one type, as a table or JSON lines.",
        discussion: """
            Reads the replica's current state (its views, as of the last commit). --where takes a query in the \
            Realm Query Language, with its SORT, DISTINCT and LIMIT clauses:
              tributary-log objects DIR ChatMessage --where 'author == "ada" SORT(timestamp DESC) LIMIT(5)'
            The table has one column per property, the primary key first, then the schema's order; cells longer \
            than 40 characters are cut with …. With --json, one JSON object per line with every value in full \
            (dates, ObjectIDs, UUIDs, data and links tagged as {"$date": ...}, {"$oid": ...}, {"$uuid": ...}, \
            {"$binary": ...}, {"$link": ...}).

            \(ExitStatus.help)
            """)

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "The object type.")
    var type: String

    @Option(name: .customLong("where"), help: "A query in the Realm Query Language.")
    var query: String?

    @OptionGroup var output: OutputOptions

    func run() throws {
        try reportingFailures {
            let opened = try replica.open()
            defer { opened.close() }
            let (objects, schema) = try opened.read { snapshot in
                let schema = snapshot.schema
                _ = try requireType(type, in: schema)
                let objects =
                    try query.map { try snapshot.objects(type, where: $0, arguments: []) } ?? snapshot.objects(type)
                return (objects, schema)
            }
            guard let objectType = schema[type: type] else { return }
            let names =
                (objectType.primaryKey.map { [$0] } ?? [])
                + objectType.properties.map(\.name).filter { $0 != objectType.primaryKey }
            if output.json {
                for object in objects {
                    emit(JSON.object(names.map { ($0, json(object[$0])) }).rendered)
                }
                return
            }
            for line in table(names, objects.map { object in names.map { truncated(text(object[$0]), 40) } }) {
                emit(line)
            }
        }
    }
}
