import SwiftDiagnostics
import SwiftSyntaxBuilder
import SwiftSyntaxMacroExpansion
import SwiftSyntaxMacrosGenericTestSupport
import Testing
import TributaryMacrosExpansion

/// What `@Model` and `@EmbeddedModel` write, and what they warn about, checked on the expansion itself.
@Suite("The @Model and @EmbeddedModel expansions")
struct InitialValuesMacroTests {
    static let specs: [String: MacroSpec] = [
        "Model": MacroSpec(type: ModelMacro.self, conformances: ["Model"]),
        "EmbeddedModel": MacroSpec(type: EmbeddedModelMacro.self, conformances: ["EmbeddedModel"]),
    ]

    func expand(
        _ source: String, _ expanded: String, diagnostics: [DiagnosticSpec] = [], specs: [String: MacroSpec] = specs
    ) {
        assertMacroExpansion(
            source, expandedSource: expanded, diagnostics: diagnostics, macroSpecs: specs,
            failureHandler: { Issue.record("\($0.message)") })
    }

    @Test("Constant initial values are written out, with the declared type; the primary key and lets are left out")
    func constants() {
        expand(
            """
            @Model struct Task {
                var _id = ObjectID.generate()
                var title = ""
                var priority: Double = 1
                var status = Status.open
                var tags: [String] = []
                var owner: String? = nil
                let kind = "task"
                var count: Int
                var computed: Int { 1 }
                static let indexedProperties: Set<String> = []
            }
            """,
            """
            struct Task {
                var _id = ObjectID.generate()
                var title = ""
                var priority: Double = 1
                var status = Status.open
                var tags: [String] = []
                var owner: String? = nil
                let kind = "task"
                var count: Int
                var computed: Int { 1 }
                static let indexedProperties: Set<String> = []
            }

            extension Task: Tributary.Model {
                /// The constant initial values of the declaration's stored properties: the schema's defaults.
                public static var initialValues: [String: any Encodable] {
                    [
                        "title": "",
                        "priority": (1 as Double),
                        "status": Status.open,
                        "tags": ([] as [String]),
                        "owner": (nil as String?),
                    ]
                }
            }
            """)
    }

    @Test("A value computed anew each time is no default, and the compiler says so; a declared primary key is skipped")
    func computedValuesWarn() {
        expand(
            """
            @Model struct Event {
                static let primaryKeyProperty = "code"
                var code = "e1"
                var at = Date()
                var seen: Date = .now
                var label = "x\\(1)"
            }
            """,
            """
            struct Event {
                static let primaryKeyProperty = "code"
                var code = "e1"
                var at = Date()
                var seen: Date = .now
                var label = "x\\(1)"
            }

            extension Event: Tributary.Model {
                /// The constant initial values of the declaration's stored properties: the schema's defaults.
                public static var initialValues: [String: any Encodable] {
                    [:]
                }
            }
            """,
            diagnostics: [
                warning("at", line: 4, column: 14), warning("seen", line: 5, column: 22),
                warning("label", line: 6, column: 17),
            ])
    }

    func warning(_ name: String, line: Int, column: Int) -> DiagnosticSpec {
        DiagnosticSpec(
            message: "the initial value of '\(name)' is computed when a value is made, so it is not a schema default; "
                + "declare one in defaultValues if objects that gain '\(name)' in a migration need one",
            line: line, column: column, severity: .warning)
    }

    @Test("An embedded model: no primary key; a type that already conforms gets no second conformance")
    func embeddedAndConforming() {
        expand(
            """
            @EmbeddedModel struct History: EmbeddedModel {
                var _id = 1
                var minutes = 0
            }
            """,
            """
            struct History: EmbeddedModel {
                var _id = 1
                var minutes = 0
            }

            extension History {
                /// The constant initial values of the declaration's stored properties: the schema's defaults.
                public static var initialValues: [String: any Encodable] {
                    [
                        "_id": 1,
                        "minutes": 0,
                    ]
                }
            }
            """,
            specs: ["EmbeddedModel": MacroSpec(type: EmbeddedModelMacro.self)])
    }

    @Test("On anything but a struct the macro is an error that says why")
    func onlyStructs() {
        expand(
            """
            @Model class Task {
                var title = ""
            }
            """,
            """
            class Task {
                var title = ""
            }
            """,
            diagnostics: [
                DiagnosticSpec(
                    message: "@Model applies to a struct: Tributary's models are Codable structs", line: 1, column: 1)
            ])
    }
}
