// The expansions of `@Model` and `@EmbeddedModel`: they read a model declaration's stored properties and write
// their constant initial values into the model's `initialValues`, which the schema takes as defaults. A library of
// its own, apart from the compiler plugin, so that tests link it without building the test bundle for the host.
import SwiftDiagnostics
import SwiftParser
public import SwiftSyntax
import SwiftSyntaxBuilder
public import SwiftSyntaxMacros

/// `@Model`: conforms a struct to `Model` and gives it `initialValues`.
public struct ModelMacro: ExtensionMacro {
    public static func expansion(
        of node: AttributeSyntax, attachedTo declaration: some DeclGroupSyntax,
        providingExtensionsOf type: some TypeSyntaxProtocol, conformingTo protocols: [TypeSyntax],
        in context: some MacroExpansionContext
    ) throws -> [ExtensionDeclSyntax] {
        InitialValues.extensions(
            protocolName: "Model", primaryKey: "_id", declaration, type, conforms: !protocols.isEmpty, context)
    }
}

/// `@EmbeddedModel`: conforms a struct to `EmbeddedModel` and gives it `initialValues`.
public struct EmbeddedModelMacro: ExtensionMacro {
    public static func expansion(
        of node: AttributeSyntax, attachedTo declaration: some DeclGroupSyntax,
        providingExtensionsOf type: some TypeSyntaxProtocol, conformingTo protocols: [TypeSyntax],
        in context: some MacroExpansionContext
    ) throws -> [ExtensionDeclSyntax] {
        InitialValues.extensions(
            protocolName: "EmbeddedModel", primaryKey: nil, declaration, type, conforms: !protocols.isEmpty, context)
    }
}

struct MacroMessage: DiagnosticMessage {
    let message: String
    let severity: DiagnosticSeverity
    var diagnosticID: MessageID { MessageID(domain: "Tributary", id: severity == .error ? "error" : "warning") }
}

enum InitialValues {
    static func extensions(
        protocolName: String, primaryKey defaultPrimaryKey: String?, _ declaration: some DeclGroupSyntax,
        _ type: some TypeSyntaxProtocol, conforms: Bool, _ context: some MacroExpansionContext
    ) -> [ExtensionDeclSyntax] {
        guard let structure = declaration.as(StructDeclSyntax.self) else {
            context.diagnose(
                Diagnostic(
                    node: Syntax(declaration),
                    message: MacroMessage(
                        message: "@\(protocolName) applies to a struct: Tributary's models are Codable structs",
                        severity: .error)))
            return []
        }
        var primaryKey = defaultPrimaryKey
        var entries: [String] = []
        for member in structure.memberBlock.members {
            guard let variable = member.decl.as(VariableDeclSyntax.self) else { continue }
            let isStatic = variable.modifiers.contains {
                $0.name.tokenKind == .keyword(.static) || $0.name.tokenKind == .keyword(.class)
            }
            if isStatic {
                // `static let primaryKeyProperty = "id"`: that property's initial value is no default.
                for binding in variable.bindings
                where binding.pattern.as(IdentifierPatternSyntax.self)?.identifier.text == "primaryKeyProperty" {
                    if let literal = binding.initializer?.value.as(StringLiteralExprSyntax.self),
                        let name = literal.representedLiteralValue
                    {
                        primaryKey = name
                    }
                }
                continue
            }
            // A `let` with an initial value is not decoded, so it is no property of the schema.
            guard variable.bindingSpecifier.tokenKind == .keyword(.var) else { continue }
            for binding in variable.bindings {
                guard let name = binding.pattern.as(IdentifierPatternSyntax.self)?.identifier.text,
                    isStored(binding), let value = binding.initializer?.value, name != primaryKey
                else { continue }
                guard isConstant(value) else {
                    context.diagnose(
                        Diagnostic(
                            node: Syntax(value),
                            message: MacroMessage(
                                message:
                                    "the initial value of '\(name)' is computed when a value is made, so it is not a "
                                    + "schema default; declare one in defaultValues if objects that gain '\(name)' "
                                    + "in a migration need one",
                                severity: .warning)))
                    continue
                }
                let expression =
                    binding.typeAnnotation.map { "(\(value.trimmedDescription) as \($0.type.trimmedDescription))" }
                    ?? value.trimmedDescription
                entries.append("\"\(name)\": \(expression)")
            }
        }
        let conformance = conforms ? ": Tributary.\(protocolName)" : ""
        let values = entries.isEmpty ? "[:]" : "[\n" + entries.map { "    \($0)," }.joined(separator: "\n") + "\n]"
        let extensionDecl: DeclSyntax = """
            extension \(type.trimmed)\(raw: conformance) {
                /// The constant initial values of the declaration's stored properties: the schema's defaults.
                public static var initialValues: [String: any Encodable] {
            \(raw: values)
                }
            }
            """
        guard let result = extensionDecl.as(ExtensionDeclSyntax.self) else { return [] }
        return [result]
    }

    /// Whether the binding stores its value: no accessors, or only observers.
    static func isStored(_ binding: PatternBindingSyntax) -> Bool {
        guard let block = binding.accessorBlock else { return true }
        guard case .accessors(let accessors) = block.accessors else { return false }
        return accessors.allSatisfy {
            $0.accessorSpecifier.tokenKind == .keyword(.willSet) || $0.accessorSpecifier.tokenKind == .keyword(.didSet)
        }
    }

    /// Whether an initial value is the same every time it is evaluated: literals, negated numbers, arrays of those,
    /// and enum cases or constants named through a type (`.open`, `Status.open`), but not `.now`.
    static func isConstant(_ expression: ExprSyntax) -> Bool {
        if expression.is(BooleanLiteralExprSyntax.self) || expression.is(IntegerLiteralExprSyntax.self)
            || expression.is(FloatLiteralExprSyntax.self) || expression.is(NilLiteralExprSyntax.self)
        {
            return true
        }
        if let string = expression.as(StringLiteralExprSyntax.self) {
            return string.segments.allSatisfy { $0.is(StringSegmentSyntax.self) }
        }
        if let prefix = expression.as(PrefixOperatorExprSyntax.self) {
            return prefix.operator.text == "-" && isConstant(prefix.expression)
        }
        if let array = expression.as(ArrayExprSyntax.self) {
            return array.elements.allSatisfy { isConstant($0.expression) }
        }
        if let tuple = expression.as(TupleExprSyntax.self), tuple.elements.count == 1, let only = tuple.elements.first {
            return only.label == nil && isConstant(only.expression)
        }
        if let member = expression.as(MemberAccessExprSyntax.self) {
            guard member.declName.baseName.text != "now" else { return false }
            guard let base = member.base else { return true }
            return base.is(DeclReferenceExprSyntax.self)
                || base.as(MemberAccessExprSyntax.self).map {
                    isConstant(ExprSyntax($0))
                } == true
        }
        return false
    }
}
