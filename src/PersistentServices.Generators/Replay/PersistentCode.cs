using System;
using System.Collections.Concurrent;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators.Replay;

/// <summary>
/// Decides what is persistent code (docs/diagnostics.md#ps0201): members of [Persistent] (also inherited),
/// [SharedState] and state-declaring types, [Persistent] methods and their overrides, [Persistent] lambdas and local
/// functions, and lambdas handed to an endpoint whose builder chain has <c>WithMetadata(new PersistentAttribute())</c> or the
/// endpoint convention <c>.Persistent()</c>.
/// One instance per compilation (it caches per type).
/// </summary>
internal sealed class PersistentCode
{
    private readonly ConcurrentDictionary<INamedTypeSymbol, bool> _persistentTypes = new(SymbolEqualityComparer.Default);

    /// <summary>The context of <paramref name="operation"/> when it is persistent code; otherwise null.</summary>
    public PersistentContext? GetContext(IOperation operation, ISymbol containingSymbol)
    {
        // Lambdas and local functions around the operation: [Persistent] on them, or a lambda handed to an endpoint
        // whose builder chain has .WithMetadata(new PersistentAttribute()) or .Persistent().
        var readOnly = false;
        for (var current = operation.Parent; current is not null; current = current.Parent)
        {
            switch (current)
            {
                case IAnonymousFunctionOperation lambda when IsOnCompletedCallback(lambda):
                    // Response.OnCompleted callbacks run once a reply reached a client, never in replay
                    // (docs/protocol.md, "Response callbacks"): what they do is not replayed.
                    return null;
                case IAnonymousFunctionOperation lambda:
                    readOnly |= KnownSymbols.HasReadOnlyAttribute(lambda.Symbol);
                    if (KnownSymbols.HasAttribute(lambda.Symbol, KnownSymbols.PersistentAttribute) || IsPassedToPersistentEndpoint(lambda))
                    {
                        return new PersistentContext(containingSymbol, lambda.Syntax, readOnly);
                    }

                    break;
                case ILocalFunctionOperation localFunction:
                    readOnly |= KnownSymbols.HasReadOnlyAttribute(localFunction.Symbol);
                    if (KnownSymbols.HasAttribute(localFunction.Symbol, KnownSymbols.PersistentAttribute))
                    {
                        return new PersistentContext(containingSymbol, localFunction.Syntax, readOnly);
                    }

                    break;
            }
        }

        readOnly |= IsReadOnlyMethod(containingSymbol as IMethodSymbol);

        // The member: a [Persistent] method (or one overriding a [Persistent] method; the attribute is inherited).
        if (HasPersistentMethodAttribute(containingSymbol as IMethodSymbol))
        {
            return new PersistentContext(containingSymbol, null, readOnly);
        }

        var type = containingSymbol as INamedTypeSymbol ?? containingSymbol.ContainingType;
        return type is not null && IsPersistentType(type) ? new PersistentContext(containingSymbol, null, readOnly) : null;
    }

    /// <summary>
    /// True when <paramref name="method"/> is itself persistent code (its uses are reported where they are, so a call
    /// into it is not followed): a [Persistent] method or override, or a member of a persistent type.
    /// </summary>
    public bool IsPersistentMember(IMethodSymbol method)
        => HasPersistentMethodAttribute(method) || (method.ContainingType is { } type && IsPersistentType(type));

    /// <summary>[Persistent] (also inherited), [SharedState], or declares a [SessionState] or [Shared] property.</summary>
    public bool IsPersistentType(INamedTypeSymbol type) => _persistentTypes.GetOrAdd(type.OriginalDefinition, ComputeIsPersistentType);

    private static bool ComputeIsPersistentType(INamedTypeSymbol type)
    {
        // [Subordinate] (Phoenix/App §3.2.1): an in-process component whose methods run inside its parent's persistent requests.
        if (KnownSymbols.HasPersistentAttribute(type) || KnownSymbols.HasAttribute(type, KnownSymbols.SharedStateAttribute) ||
            KnownSymbols.HasAttribute(type, KnownSymbols.SubordinateAttribute))
        {
            return true;
        }

        foreach (var member in type.GetMembers())
        {
            if (member is IPropertySymbol property && IsStateProperty(property))
            {
                return true;
            }
        }

        return false;
    }

    /// <summary>True for a [SessionState] or [Shared] property (the right places for state).</summary>
    public static bool IsStateProperty(IPropertySymbol property)
    {
        var definition = property.OriginalDefinition.PartialDefinitionPart ?? property.OriginalDefinition;
        return KnownSymbols.HasAttribute(definition, KnownSymbols.SessionStateAttribute)
               || KnownSymbols.HasAttribute(definition, KnownSymbols.SharedAttribute);
    }

    private static bool HasPersistentMethodAttribute(IMethodSymbol? method)
    {
        for (var current = method; current is not null; current = current.OverriddenMethod)
        {
            if (KnownSymbols.HasAttribute(current, KnownSymbols.PersistentAttribute))
            {
                return true;
            }
        }

        return false;
    }

    private static bool IsReadOnlyMethod(IMethodSymbol? method)
    {
        for (var current = method; current is not null; current = current.OverriddenMethod)
        {
            if (KnownSymbols.HasReadOnlyAttribute(current))
            {
                return true;
            }
        }

        return false;
    }

    /// <summary>True when <paramref name="lambda"/> is a callback handed to <c>HttpResponse.OnCompleted</c>.</summary>
    private static bool IsOnCompletedCallback(IAnonymousFunctionOperation lambda)
    {
        IOperation? current = lambda.Parent;
        while (current is IDelegateCreationOperation or IConversionOperation)
        {
            current = current.Parent;
        }

        return current is IArgumentOperation { Parent: IInvocationOperation invocation } &&
               invocation.TargetMethod.Name == "OnCompleted" &&
               invocation.TargetMethod.ContainingType is { Name: "HttpResponse" } type &&
               type.ContainingNamespace?.ToDisplayString() == "Microsoft.AspNetCore.Http";
    }

    /// <summary>
    /// True when <paramref name="lambda"/> is an argument of an invocation in a fluent chain (receivers and the calls
    /// made on the result) that includes <c>WithMetadata(..., new PersistentAttribute(), ...)</c> or <c>.Persistent()</c>.
    /// </summary>
    private static bool IsPassedToPersistentEndpoint(IAnonymousFunctionOperation lambda)
    {
        var current = lambda.Parent;
        while (current is IDelegateCreationOperation or IConversionOperation)
        {
            current = current.Parent;
        }

        if (current is not IArgumentOperation { Parent: IInvocationOperation invocation })
        {
            return false;
        }

        // Up: the calls made on this invocation's result (app.MapPost(...).WithMetadata(...)).
        var outermost = invocation;
        while (true)
        {
            var parent = outermost.Parent;
            while (parent is IConversionOperation)
            {
                parent = parent.Parent;
            }

            if (parent is IInvocationOperation call && ReferenceEquals(Operations.SkipConversions(call.Instance), outermost))
            {
                outermost = call;
            }
            else if (parent is IArgumentOperation { Parent: IInvocationOperation extensionCall } argument
                     && extensionCall.TargetMethod.IsExtensionMethod
                     && argument.Parameter?.Ordinal == 0)
            {
                outermost = extensionCall;
            }
            else
            {
                break;
            }
        }

        // Down: every call of the chain, from the outermost through the receivers (app.MapGroup(...).WithMetadata(...).MapPost(...)).
        for (var call = outermost; call is not null; call = GetReceiver(call) as IInvocationOperation)
        {
            if (IsWithPersistentMetadata(call))
            {
                return true;
            }
        }

        return false;
    }

    private static IOperation? GetReceiver(IInvocationOperation invocation)
    {
        if (invocation.Instance is { } instance)
        {
            return Operations.SkipConversions(instance);
        }

        if (invocation.TargetMethod.IsExtensionMethod)
        {
            foreach (var argument in invocation.Arguments)
            {
                if (argument.Parameter?.Ordinal == 0)
                {
                    return Operations.SkipConversions(argument.Value);
                }
            }
        }

        return null;
    }

    private static bool IsWithPersistentMetadata(IInvocationOperation invocation)
    {
        // The endpoint convention adds the same metadata as the attribute (PersistentEndpointConventionBuilderExtensions).
        if (string.Equals(invocation.TargetMethod.Name, KnownSymbols.PersistentConvention, StringComparison.Ordinal)
            && KnownSymbols.Is(invocation.TargetMethod.ContainingType, KnownSymbols.ConventionsNamespace, KnownSymbols.ConventionsClass))
        {
            return true;
        }

        if (!string.Equals(invocation.TargetMethod.Name, "WithMetadata", StringComparison.Ordinal))
        {
            return false;
        }

        foreach (var argument in invocation.Arguments)
        {
            if (invocation.TargetMethod.IsExtensionMethod && argument.Parameter?.Ordinal == 0)
            {
                continue;
            }

            foreach (var descendant in argument.DescendantsAndSelf())
            {
                if (descendant is IObjectCreationOperation creation
                    && KnownSymbols.Is(creation.Type, KnownSymbols.AttributeNamespace, KnownSymbols.PersistentAttribute))
                {
                    return true;
                }
            }
        }

        return false;
    }
}
