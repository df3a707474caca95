import Tributary

/// Declares a top-level model the way a Realm object reads: the struct conforms to ``Tributary/Model``, and the
/// constant initial values of its stored properties (`var isPublic = false`, `var tags: [String] = []`,
/// `var status = Status.open`) become the schema's defaults, for objects made without them (by another release or
/// the dynamic API) and for objects that gain the property in a migration.
///
/// ```swift
/// import Tributary
/// import TributaryMacros
///
/// @Model struct DailyScrum {
///     var _id = ObjectID.generate()
///     var title = ""
///     var isPublic = false
///     var history: [History] = []
/// }
/// ```
///
/// The primary key's initial value is not a default, nor is one computed anew each time (`Date()`, `.now`,
/// `UUID()`): the compiler warns about the latter, and ``Tributary/Model/defaultValues`` gives a default for them.
/// A default declared in `defaultValues` takes precedence over an initial value.
@attached(extension, conformances: Model, names: named(initialValues))
public macro Model() = #externalMacro(module: "TributaryMacrosPlugin", type: "ModelMacro")

/// Declares an embedded model the way a Realm embedded object reads: the struct conforms to
/// ``Tributary/EmbeddedModel``, and the constant initial values of its stored properties become the schema's
/// defaults (see ``Model()``).
@attached(extension, conformances: EmbeddedModel, names: named(initialValues))
public macro EmbeddedModel() = #externalMacro(module: "TributaryMacrosPlugin", type: "EmbeddedModelMacro")
