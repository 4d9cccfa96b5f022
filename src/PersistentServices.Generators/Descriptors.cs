using Microsoft.CodeAnalysis;

namespace PersistentServices.Generators;

/// <summary>The PS diagnostics (docs/diagnostics.md has one section per id).</summary>
internal static class Descriptors
{
    public const string Category = "PersistentServices";

    /// <summary>Help links point into the repository's own documentation (one section per id).</summary>
    private const string HelpLinkBase = "docs/diagnostics.md#";

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

    public static readonly DiagnosticDescriptor UnloggedState = new(
        id: "PS0102",
        title: "Persistent code writes memory that outlives the request and is not logged",
        messageFormat: "'{0}' ({1}) is {2}{3}: it outlives the request and is not logged, so recovery cannot rebuild it and a replay may compute different results. Keep per-session state in a [SessionState] property, and state shared by all sessions in a [Shared] property, a SharedVariable or a SharedMap.",
        category: Category,
        defaultSeverity: DiagnosticSeverity.Warning,
        isEnabledByDefault: true,
        description: "Recovery rebuilds memory by replaying logged requests, sessions in another interleaving than before the crash. Static fields and properties, fields of singleton services and variables captured by an endpoint outlive the request but are neither logged nor recovered: after a crash they start empty, and a replay that reads them computes other results.",
        helpLinkUri: HelpLinkBase + "ps0102");

    public static readonly DiagnosticDescriptor NondeterministicApi = new(
        id: "PS0201",
        title: "Nondeterministic API used in persistent code",
        messageFormat: "'{0}'{1} is nondeterministic: a replayed request would see a different value. Use an injected PersistentTimeProvider, IPersistentRandom or IPersistentIdGenerator instead (each logs what it returns).",
        category: Category,
        defaultSeverity: DiagnosticSeverity.Warning,
        isEnabledByDefault: true,
        description: "Recovery re-executes logged requests and expects them to compute the same results. Clocks (also a plain TimeProvider: the one registered by default is TimeProvider.System, which logs nothing), random numbers, new GUIDs and stopwatches give different values on replay, so the recovered state would differ from the state before the crash. Uses in methods called from persistent code (in the same project) are reported at the call, with the chain of calls.",
        helpLinkUri: HelpLinkBase + "ps0201");

    public static readonly DiagnosticDescriptor ExternalInput = new(
        id: "PS0202",
        title: "External input or process fact used in persistent code",
        messageFormat: "'{0}'{1} {2}. Where its result cannot change the reply or the state, suppress this warning.",
        category: Category,
        defaultSeverity: DiagnosticSeverity.Warning,
        isEnabledByDefault: true,
        description: "Recovery re-executes logged requests. Calls to other services (except through HTTP clients registered with AddPersistentCalls(), whose replies are logged), files, databases and sockets are performed again on replay, and their answers may differ from the first time; process facts (process id, machine name, thread id) differ after a restart. The replayed request would then compute a different reply or state.",
        helpLinkUri: HelpLinkBase + "ps0202");

    /// <summary>PS0202's explanation for calls to other services over HTTP through a client without <c>AddPersistentCalls()</c>.</summary>
    public const string HttpCallExplanation = "calls another service through a client without AddPersistentCalls(): a replayed request sends the call again, and the answer may differ (and the other service may apply it twice); register the client with .AddPersistentCalls() (docs/calls.md)";

    /// <summary>PS0202's explanation for the file system.</summary>
    public const string FileExplanation = "reads or writes the file system: a replayed request does it again, and the files may have changed since";

    /// <summary>PS0202's explanation for databases.</summary>
    public const string DatabaseExplanation = "talks to a database: a replayed request runs the command again, and the data may have changed since (or a change is applied twice)";

    /// <summary>PS0202's explanation for sockets and DNS.</summary>
    public const string NetworkExplanation = "uses the network: a replayed request sends and receives again, and the answers may differ";

    /// <summary>PS0202's explanation for facts of the running process.</summary>
    public const string ProcessFactExplanation = "is a fact of the running process: it differs after a restart, so a replayed request would see a different value";
}
