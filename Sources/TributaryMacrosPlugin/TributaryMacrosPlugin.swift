// The compiler plugin behind `@Model` and `@EmbeddedModel`. The compiler finds a macro by the plugin's module name,
// so the two types live here and hand the work to TributaryMacrosExpansion, which tests link directly.
import SwiftCompilerPlugin
public import SwiftSyntax
public import SwiftSyntaxMacros
import TributaryMacrosExpansion

@main
struct TributaryMacrosPlugin: CompilerPlugin {
    let providingMacros: [any Macro.Type] = [ModelMacro.self, EmbeddedModelMacro.self]
}

/// `@Model`: conforms a struct to `Model` and gives it `initialValues`.
public struct ModelMacro: ExtensionMacro {
    public static func expansion(
        of node: AttributeSyntax, attachedTo declaration: some DeclGroupSyntax,
        providingExtensionsOf type: some TypeSyntaxProtocol, conformingTo protocols: [TypeSyntax],
        in context: some MacroExpansionContext
    ) throws -> [ExtensionDeclSyntax] {
        try TributaryMacrosExpansion.ModelMacro.expansion(
            of: node, attachedTo: declaration, providingExtensionsOf: type, conformingTo: protocols, in: context)
    }
}

/// `@EmbeddedModel`: conforms a struct to `EmbeddedModel` and gives it `initialValues`.
public struct EmbeddedModelMacro: ExtensionMacro {
    public static func expansion(
        of node: AttributeSyntax, attachedTo declaration: some DeclGroupSyntax,
        providingExtensionsOf type: some TypeSyntaxProtocol, conformingTo protocols: [TypeSyntax],
        in context: some MacroExpansionContext
    ) throws -> [ExtensionDeclSyntax] {
        try TributaryMacrosExpansion.EmbeddedModelMacro.expansion(
            of: node, attachedTo: declaration, providingExtensionsOf: type, conformingTo: protocols, in: context)
    }
}
