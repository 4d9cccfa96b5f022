using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Collections.Immutable;
using System.Threading;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.CSharp.Syntax;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators.Replay;

/// <summary>
/// The state of the replay analysis for one compilation: what each method of the compilation does on its own (its
/// findings and its calls, <see cref="GetFacts"/>), and what is reachable from it through calls
/// (<see cref="GetReach"/>). Both are computed once per method and cached; the caches live as long as the compilation's
/// analysis (a new instance per <c>CompilationStartAction</c>) and are safe for concurrent callers (a value computed
/// twice by two threads is the same value).
/// </summary>
internal sealed class ReplayAnalysis
{
    /// <summary>How many methods deep calls are followed from persistent code (the chain in a message is at most this long).</summary>
    public const int MaxDepth = 8;

    /// <summary>How many methods one walk visits at most (a guard against huge call graphs).</summary>
    public const int MaxMethodsPerWalk = 2000;

    private static readonly MethodFacts NoFacts = new([], []);

    private readonly ConcurrentDictionary<IMethodSymbol, MethodFacts> _facts = new(SymbolEqualityComparer.Default);
    private readonly ConcurrentDictionary<IMethodSymbol, ImmutableArray<ReachedFinding>> _reach = new(SymbolEqualityComparer.Default);
    private readonly object _registryGate = new();
    private ServiceRegistry? _registry;

    public ReplayAnalysis(Compilation compilation)
    {
        Source = new SourceIndex(compilation);
    }

    public SourceIndex Source { get; }

    public PersistentCode Persistent { get; } = new();

    /// <summary>The compilation's DI registrations, read on first use.</summary>
    public ServiceRegistry GetRegistry(CancellationToken cancellationToken)
    {
        if (Volatile.Read(ref _registry) is { } registry)
        {
            return registry;
        }

        lock (_registryGate)
        {
            // Not Lazy<T>: a cancelled scan must not be cached.
            _registry ??= ServiceRegistry.Scan(Source, cancellationToken);
            return _registry;
        }
    }

    /// <summary>True when <paramref name="method"/> has a body written in source (not an auto-property accessor).</summary>
    public static bool HasBody(IMethodSymbol method)
    {
        foreach (var reference in method.DeclaringSyntaxReferences)
        {
            switch (reference.GetSyntax())
            {
                case AccessorDeclarationSyntax accessor when accessor.Body is null && accessor.ExpressionBody is null:
                case ParameterSyntax:
                    continue;
                default:
                    return true;
            }
        }

        return false;
    }

    /// <summary>The findings and calls of <paramref name="method"/>'s own body (uses suppressed there are left out).</summary>
    public MethodFacts GetFacts(IMethodSymbol method, CancellationToken cancellationToken)
    {
        method = Normalize(method);
        if (_facts.TryGetValue(method, out var facts))
        {
            return facts;
        }

        facts = ComputeFacts(method, cancellationToken);
        return _facts.GetOrAdd(method, facts);
    }

    /// <summary>
    /// Everything reachable from a call of <paramref name="method"/>: its own findings and those of the methods it calls,
    /// up to <see cref="MaxDepth"/> methods deep, each with the shortest chain of calls that leads to it (breadth first;
    /// a method met again is not walked again, which cuts cycles). Persistent methods are not entered: their uses are
    /// reported where they are. Findings that depend on the receiver (<see cref="ReplayFinding.DependsOnReceiver"/>) are
    /// kept for the caller to decide.
    /// </summary>
    public ImmutableArray<ReachedFinding> GetReach(IMethodSymbol method, CancellationToken cancellationToken)
    {
        method = Normalize(method);
        if (_reach.TryGetValue(method, out var reach))
        {
            return reach;
        }

        reach = ComputeReach(method, cancellationToken);
        return _reach.GetOrAdd(method, reach);
    }

    /// <summary>
    /// True when a call of <paramref name="method"/> is followed: its source is in this compilation, it is not persistent
    /// code itself, and it is not a local function or lambda (their bodies are part of the body that contains them).
    /// </summary>
    public bool IsFollowed(IMethodSymbol method)
    {
        method = Normalize(method);
        return method.MethodKind is not (MethodKind.LocalFunction or MethodKind.AnonymousFunction)
               && Source.IsInSource(method)
               && !Persistent.IsPersistentMember(method);
    }

    private static IMethodSymbol Normalize(IMethodSymbol method)
    {
        method = (method.ReducedFrom ?? method).OriginalDefinition;
        return method.PartialImplementationPart ?? method;
    }

    private ImmutableArray<ReachedFinding> ComputeReach(IMethodSymbol start, CancellationToken cancellationToken)
    {
        var results = ImmutableArray.CreateBuilder<ReachedFinding>();
        var seenFindings = new HashSet<string>();
        var visited = new HashSet<(IMethodSymbol, ReceiverKind)>(new VisitComparer());
        var queue = new Queue<Step>();
        queue.Enqueue(new Step(start, ReceiverKind.This, null, ImmutableArray.Create(start)));
        visited.Add((start, ReceiverKind.This));

        while (queue.Count > 0)
        {
            cancellationToken.ThrowIfCancellationRequested();
            var step = queue.Dequeue();
            var facts = GetFacts(step.Method, cancellationToken);

            foreach (var finding in facts.Findings)
            {
                var resolved = finding;
                if (finding.DependsOnReceiver)
                {
                    switch (step.Receiver)
                    {
                        case ReceiverKind.Holder:
                            resolved = finding.ThroughHolder(step.Holder!);
                            break;
                        case ReceiverKind.None:
                            continue;
                    }
                }

                if (seenFindings.Add(resolved.Key))
                {
                    results.Add(new ReachedFinding(resolved, step.Chain));
                }
            }

            if (step.Chain.Length >= MaxDepth)
            {
                continue;
            }

            foreach (var edge in facts.Edges)
            {
                var target = Normalize(edge.Target);
                if (!IsFollowed(target))
                {
                    continue;
                }

                // The receiver seen from the start: a call on 'this' keeps the current receiver.
                var (receiver, holder) = edge.Receiver switch
                {
                    ReceiverKind.This => (step.Receiver, step.Holder),
                    ReceiverKind.Holder => (ReceiverKind.Holder, edge.Holder),
                    _ => (ReceiverKind.None, null),
                };

                if (visited.Count < MaxMethodsPerWalk && visited.Add((target, receiver)))
                {
                    queue.Enqueue(new Step(target, receiver, holder, step.Chain.Add(target)));
                }
            }
        }

        return results.ToImmutable();
    }

    private MethodFacts ComputeFacts(IMethodSymbol method, CancellationToken cancellationToken)
    {
        if (!Source.IsInSource(method) || method.IsAbstract || method.IsExtern)
        {
            return NoFacts;
        }

        var bodies = new List<IOperation>();
        var withInitializers = method.MethodKind == MethodKind.Constructor && method.IsImplicitlyDeclared;
        foreach (var reference in method.DeclaringSyntaxReferences)
        {
            if (Source.IsGenerated(reference.SyntaxTree))
            {
                continue;
            }

            var node = reference.GetSyntax(cancellationToken);
            switch (node)
            {
                case TypeDeclarationSyntax:
                    // A primary or implicit constructor: its body is the member initializers.
                    withInitializers = true;
                    continue;
                case ParameterSyntax:
                    // A record's positional property accessor.
                    continue;
                case ConstructorDeclarationSyntax constructor:
                    withInitializers |= constructor.Initializer is null || constructor.Initializer.ThisOrBaseKeyword.ValueText == "base";
                    break;
            }

            if (Source.GetModel(reference.SyntaxTree).GetOperation(node, cancellationToken) is { } body)
            {
                bodies.Add(body);
            }
        }

        if (withInitializers && method.MethodKind == MethodKind.Constructor)
        {
            AddInstanceInitializers(method.ContainingType, bodies, cancellationToken);
        }

        if (bodies.Count == 0)
        {
            return NoFacts;
        }

        var scope = new WriteScope(method, root: null);
        var findings = new List<ReplayFinding>();
        var edges = new List<CallEdge>();
        foreach (var body in bodies)
        {
            foreach (var operation in body.DescendantsAndSelf())
            {
                ReplayHazards.Classify(operation, this, scope, findings, edges, cancellationToken);
            }
        }

        var kept = ImmutableArray.CreateBuilder<ReplayFinding>(findings.Count);
        foreach (var finding in findings)
        {
            if (!Source.IsSuppressed(finding.Descriptor.Id, finding.Location, method, cancellationToken))
            {
                kept.Add(finding);
            }
        }

        return new MethodFacts(kept.ToImmutable(), edges.ToImmutableArray());
    }

    private void AddInstanceInitializers(INamedTypeSymbol type, List<IOperation> bodies, CancellationToken cancellationToken)
    {
        foreach (var reference in type.DeclaringSyntaxReferences)
        {
            if (Source.IsGenerated(reference.SyntaxTree) || reference.GetSyntax(cancellationToken) is not TypeDeclarationSyntax declaration)
            {
                continue;
            }

            var model = Source.GetModel(reference.SyntaxTree);
            foreach (var member in declaration.Members)
            {
                switch (member)
                {
                    case FieldDeclarationSyntax field when !IsStatic(field.Modifiers):
                        foreach (var variable in field.Declaration.Variables)
                        {
                            if (variable.Initializer is { } initializer && model.GetOperation(initializer, cancellationToken) is { } operation)
                            {
                                bodies.Add(operation);
                            }
                        }

                        break;
                    case PropertyDeclarationSyntax { Initializer: { } initializer } property when !IsStatic(property.Modifiers):
                        if (model.GetOperation(initializer, cancellationToken) is { } propertyOperation)
                        {
                            bodies.Add(propertyOperation);
                        }

                        break;
                }
            }
        }
    }

    private static bool IsStatic(SyntaxTokenList modifiers)
    {
        foreach (var modifier in modifiers)
        {
            if (modifier.ValueText is "static" or "const")
            {
                return true;
            }
        }

        return false;
    }

    private sealed class Step
    {
        public Step(IMethodSymbol method, ReceiverKind receiver, StatePlace? holder, ImmutableArray<IMethodSymbol> chain)
        {
            Method = method;
            Receiver = receiver;
            Holder = holder;
            Chain = chain;
        }

        public IMethodSymbol Method { get; }

        public ReceiverKind Receiver { get; }

        public StatePlace? Holder { get; }

        public ImmutableArray<IMethodSymbol> Chain { get; }
    }

    private sealed class VisitComparer : IEqualityComparer<(IMethodSymbol Method, ReceiverKind Receiver)>
    {
        public bool Equals((IMethodSymbol Method, ReceiverKind Receiver) x, (IMethodSymbol Method, ReceiverKind Receiver) y)
            => x.Receiver == y.Receiver && SymbolEqualityComparer.Default.Equals(x.Method, y.Method);

        public int GetHashCode((IMethodSymbol Method, ReceiverKind Receiver) obj)
            => (SymbolEqualityComparer.Default.GetHashCode(obj.Method) * 31) + (int)obj.Receiver;
    }
}
