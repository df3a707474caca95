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

            Where replicas defined a property with different types, the values written under the definition that \
            lost are kept aside and do not show: the table lists them in a last column, "aside", and JSON under \
            "$aside" (property, the type they were written as, value).

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
            let (objects, schema, aside) = try opened.read { snapshot in
                let schema = snapshot.schema
                _ = try requireType(type, in: schema)
                let objects =
                    try query.map { try snapshot.objects(type, where: $0, arguments: []) } ?? snapshot.objects(type)
                // Only a type with a property defined two ways can have values aside.
                let conflicted = schema.losingDefinitions.keys.contains { $0.type == type }
                let aside = try objects.map {
                    conflicted ? try snapshot.valuesAside(type, primaryKey: $0.primaryKey) : []
                }
                return (objects, schema, aside)
            }
            guard let objectType = schema[type: type] else { return }
            let names =
                (objectType.primaryKey.map { [$0] } ?? [])
                + objectType.properties.map(\.name).filter { $0 != objectType.primaryKey }
            if output.json {
                for (object, aside) in zip(objects, aside) {
                    var fields = names.map { ($0, json(object[$0])) }
                    if !aside.isEmpty {
                        fields.append(
                            (
                                "$aside",
                                .array(
                                    aside.map {
                                        .object([
                                            ("property", .string($0.property)), ("type", .string($0.shape.description)),
                                            ("value", json($0.value)),
                                        ])
                                    })
                            ))
                    }
                    emit(JSON.object(fields).rendered)
                }
                return
            }
            let anyAside = aside.contains { !$0.isEmpty }
            let rows = zip(objects, aside).map { object, aside in
                names.map { truncated(text(object[$0]), 40) }
                    + (anyAside
                        ? [aside.map { "\($0.property) as \($0.shape): \(text($0.value))" }.joined(separator: "; ")]
                        : [])
            }
            for line in table(names + (anyAside ? ["aside"] : []), rows) { emit(line) }
        }
    }
}
