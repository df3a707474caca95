import ArgumentParser
import Tributary
import TributaryModel

struct Diff: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show the objects created, erased and changed between two points of the log.",
        discussion: """
            Rebuilds the state as of both local sequences (0 is the empty replica) and compares them, type by type \
            in name order and object by object in primary key order:
              + Type[key]     created, then its fields, one per line
              - Type[key]     erased, then the fields it had
              ~ Type[key]     changed, then each changed field as `name: before -> after`
            Schema changes come first (`schema: ...`), and a last line counts the objects. With --json, one JSON \
            object per line: {"change": "schema" | "created" | "erased" | "changed", ...}.

            Like diff(1), exits 1 when the two states differ and 0 when they are the same. Both states are rebuilt \
            in memory.

            \(ExitStatus.help)
            """)

    @OptionGroup var replica: ReplicaOptions

    @Argument(help: "The first local sequence (0 for the empty replica).")
    var sequenceA: UInt64

    @Argument(help: "The second local sequence.")
    var sequenceB: UInt64

    @OptionGroup var output: OutputOptions

    func run() throws {
        var differs = false
        try reportingFailures {
            let opened = try replica.open()
            defer { opened.close() }
            try requireEntry(sequenceA, in: opened)
            try requireEntry(sequenceB, in: opened)
            let before = try opened.inspection.objects(asOf: sequenceA)
            let after = try opened.inspection.objects(asOf: sequenceB)
            differs = report(before, after)
        }
        if differs { throw ExitCode(ExitStatus.differences) }
    }

    /// Prints the differences; returns whether there were any.
    private func report(_ before: ReplayedObjects, _ after: ReplayedObjects) -> Bool {
        var created = 0
        var erased = 0
        var changed = 0
        let schemaChanges = after.schema.differences(from: before.schema)
        let versionChanged = before.schema.version != after.schema.version
        if versionChanged || !schemaChanges.isEmpty {
            if output.json {
                emit(
                    JSON.object([
                        ("change", .string("schema")), ("versionBefore", .uint(before.schema.version)),
                        ("versionAfter", .uint(after.schema.version)),
                        ("differences", .array(schemaChanges.map(JSON.string))),
                    ]).rendered)
            } else {
                if versionChanged { emit("schema: version \(before.schema.version) -> \(after.schema.version)") }
                for line in schemaChanges { emit("schema: \(line)") }
            }
        }

        func fields(_ object: DynamicObject, schema: Schema) -> [String] {
            let keyName = schema[type: object.type]?.primaryKey
            return orderedPropertyNames(of: object, schema: schema).filter { $0 != keyName }
        }
        func emitObject(_ change: String, _ sign: String, _ object: DynamicObject, schema: Schema) {
            if output.json {
                emit(
                    JSON.object([
                        ("change", .string(change)), ("type", .string(object.type)),
                        ("primaryKey", json(object.primaryKey)),
                        ("object", json(object, schema: schema)),
                    ]).rendered)
                return
            }
            emit("\(sign) \(text(type: object.type, primaryKey: object.primaryKey))")
            for name in fields(object, schema: schema) { emit("    \(name): \(text(object[name]))") }
        }

        var a = before.objects[...]
        var b = after.objects[...]
        while !a.isEmpty || !b.isEmpty {
            let order: Int
            switch (a.first, b.first) {
            case (let x?, let y?):
                order =
                    x.type != y.type
                    ? (x.type < y.type ? -1 : 1)
                    : (x.primaryKey == y.primaryKey ? 0 : (x.primaryKey < y.primaryKey ? -1 : 1))
            case (_?, nil): order = -1
            default: order = 1
            }
            if order < 0, let old = a.popFirst() {
                erased += 1
                emitObject("erased", "-", old, schema: before.schema)
            } else if order > 0, let new = b.popFirst() {
                created += 1
                emitObject("created", "+", new, schema: after.schema)
            } else if let old = a.popFirst(), let new = b.popFirst() {
                var names = fields(new, schema: after.schema)
                for name in fields(old, schema: before.schema) where !names.contains(name) { names.append(name) }
                let differing = names.filter { old[$0] != new[$0] }
                if differing.isEmpty { continue }
                changed += 1
                if output.json {
                    emit(
                        JSON.object([
                            ("change", .string("changed")), ("type", .string(new.type)),
                            ("primaryKey", json(new.primaryKey)),
                            (
                                "fields",
                                .array(
                                    differing.map {
                                        .object([
                                            ("name", .string($0)), ("before", json(old[$0])), ("after", json(new[$0])),
                                        ])
                                    })
                            ),
                        ]).rendered)
                } else {
                    emit("~ \(text(type: new.type, primaryKey: new.primaryKey))")
                    for name in differing { emit("    \(name): \(text(old[name])) -> \(text(new[name]))") }
                }
            }
        }
        if !output.json {
            emit(
                "\(created) created, \(erased) erased, \(changed) changed "
                    + "(local sequence \(before.localSequence) -> \(after.localSequence))")
        }
        return created + erased + changed > 0 || versionChanged || !schemaChanges.isEmpty
    }
}
