using Microsoft.CodeAnalysis;

namespace PersistentServices.Generators;

/// <summary>The PS diagnostics (docs/diagnostics.md has one section per id).</summary>
internal static class Descriptors
{
    public const string Category = "PersistentServices";

    private const string HelpLinkBase = "https://github.com/persistentservices/persistentservices/blob/main/docs/diagnostics.md#";

    public static readonly DiagnosticDescriptor PropertyNotPartial = new(
        id: "PS0001",
        title: "[SessionState] and [Shared] properties must be partial",
        messageFormat: "[{1}] property '{0}' must be declared 'partial' with accessors but no bodies, so that the source generator can implement it",
        category: Category,
        defaultSeverity: DiagnosticSeverity.Error,
        isEnabledByDefault: true,
        description: "The source generator implements [SessionState] and [Shared] properties as the implementation part of a C# partial property. A property without the 'partial' modifier cannot be implemented and would silently hold an ordinary, non-persistent value.",
        helpLinkUri: HelpLinkBase + "ps0001");

    public static readonly DiagnosticDescriptor TypeNotPartial = new(
        id: "PS0002",
        title: "The type containing a [SessionState] or [Shared] property must be partial",
        messageFormat: "Type '{0}' must be declared 'partial' because it contains [{1}] property '{2}'",
        category: Category,
        defaultSeverity: DiagnosticSeverity.Error,
        isEnabledByDefault: true,
        description: "The generated implementation is a second part of the declaring type, and of every type it is nested in. Each of them must therefore be declared 'partial'.",
        helpLinkUri: HelpLinkBase + "ps0002");

    public static readonly DiagnosticDescriptor UnsupportedDeclaringType = new(
        id: "PS0003",
        title: "Unsupported type for a [SessionState] or [Shared] property",
        messageFormat: "[{1}] property '{0}' cannot be declared in type '{2}': {3}",
        category: Category,
        defaultSeverity: DiagnosticSeverity.Error,
        isEnabledByDefault: true,
        description: "[SessionState] and [Shared] properties are supported in non-generic classes and records (also when nested, as long as no containing type is generic or file-local). Structs, record structs and interfaces are not supported; static classes may hold [Shared] properties only.",
        helpLinkUri: HelpLinkBase + "ps0003");

    public static readonly DiagnosticDescriptor UnsupportedPropertyShape = new(
        id: "PS0004",
        title: "Unsupported shape of a [SessionState] or [Shared] property",
        messageFormat: "[{1}] property '{0}' is not supported: {2}",
        category: Category,
        defaultSeverity: DiagnosticSeverity.Error,
        isEnabledByDefault: true,
        description: "The source generator implements plain partial properties with a get and a set accessor and no bodies. Indexers, init-only setters, missing accessors, ref returns, abstract, extern and required properties, explicit interface implementations and properties whose implementation part is written by hand are not supported.",
        helpLinkUri: HelpLinkBase + "ps0004");

    public static readonly DiagnosticDescriptor SharedPlacement = new(
        id: "PS0005",
        title: "[Shared] property declared in the wrong kind of type",
        messageFormat: "[Shared] property '{0}' is not allowed here: {1}",
        category: Category,
        defaultSeverity: DiagnosticSeverity.Error,
        isEnabledByDefault: true,
        description: "A static [Shared] property must be declared in a [Persistent] controller or a [SharedState] class; an instance [Shared] property must be declared in a [SharedState] class, which is registered as a singleton.",
        helpLinkUri: HelpLinkBase + "ps0005");

    public static readonly DiagnosticDescriptor BothSessionStateAndShared = new(
        id: "PS0006",
        title: "A property cannot be both [SessionState] and [Shared]",
        messageFormat: "Property '{0}' cannot be both [SessionState] and [Shared]: choose per-session state or one value shared by all sessions",
        category: Category,
        defaultSeverity: DiagnosticSeverity.Error,
        isEnabledByDefault: true,
        description: "[SessionState] gives each session its own value; [Shared] gives all sessions one value. A property is one or the other.",
        helpLinkUri: HelpLinkBase + "ps0006");

    public static readonly DiagnosticDescriptor MutableSharedType = new(
        id: "PS0101",
        title: "The type of a [Shared] property is mutable",
        messageFormat: "The type '{0}' of [Shared] property '{1}' is mutable: {2}; shared values are treated as immutable (a write must replace the value), so use an immutable type",
        category: Category,
        defaultSeverity: DiagnosticSeverity.Warning,
        isEnabledByDefault: true,
        description: "Shared variables are value-logged on every read and write. Changing an object read from a [Shared] property in place bypasses the log, so recovery and other sessions would not see the change. Use immutable types (primitives, strings, enums, System.Collections.Immutable, records with get-only or init-only properties of immutable types) and write a new value to change it.",
        helpLinkUri: HelpLinkBase + "ps0101");

    public static readonly DiagnosticDescriptor NondeterministicApi = new(
        id: "PS0201",
        title: "Nondeterministic API used in persistent code",
        messageFormat: "'{0}' is nondeterministic: a replayed request would see a different value. Use the injected TimeProvider, random or id source from PersistentServices instead.",
        category: Category,
        defaultSeverity: DiagnosticSeverity.Warning,
        isEnabledByDefault: true,
        description: "Recovery re-executes logged requests and expects them to compute the same results. Clocks, random numbers, new GUIDs and stopwatches give different values on replay, so the recovered state would differ from the state before the crash.",
        helpLinkUri: HelpLinkBase + "ps0201");
}
