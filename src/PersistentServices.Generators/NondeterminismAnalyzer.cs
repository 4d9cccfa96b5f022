using System;
using System.Collections.Concurrent;
using System.Collections.Immutable;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.Diagnostics;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators;

/// <summary>
/// Reports PS0201: clocks, random numbers, new GUIDs and stopwatches used in persistent code, where a replayed request
/// would see a different value. What counts as persistent code and which APIs are detected: docs/diagnostics.md#ps0201.
/// </summary>
[DiagnosticAnalyzer(LanguageNames.CSharp)]
public sealed class NondeterminismAnalyzer : DiagnosticAnalyzer
{
    /// <inheritdoc/>
    public override ImmutableArray<DiagnosticDescriptor> SupportedDiagnostics { get; } = [Descriptors.NondeterministicApi];

    /// <inheritdoc/>
    public override void Initialize(AnalysisContext context)
    {
        context.ConfigureGeneratedCodeAnalysis(GeneratedCodeAnalysisFlags.None);
        context.EnableConcurrentExecution();
        context.RegisterCompilationStartAction(static start =>
        {
            var persistentTypes = new ConcurrentDictionary<INamedTypeSymbol, bool>(SymbolEqualityComparer.Default);
            start.RegisterOperationAction(
                operationContext => AnalyzeOperation(operationContext, persistentTypes),
                OperationKind.PropertyReference,
                OperationKind.FieldReference,
                OperationKind.MethodReference,
                OperationKind.Invocation,
                OperationKind.ObjectCreation);
        });
    }

    private static void AnalyzeOperation(OperationAnalysisContext context, ConcurrentDictionary<INamedTypeSymbol, bool> persistentTypes)
    {
        var operation = context.Operation;
        var api = Describe(operation);
        if (api is null
            || IsReceiverReported(operation)
            || IsInNameOf(operation)
            || !IsPersistentCode(operation, context.ContainingSymbol, persistentTypes))
        {
            return;
        }

        context.ReportDiagnostic(Diagnostic.Create(Descriptors.NondeterministicApi, operation.Syntax.GetLocation(), api));
    }

    /// <summary>The API's display name when <paramref name="operation"/> uses a nondeterministic API; otherwise null.</summary>
    private static string? Describe(IOperation? operation)
    {
        switch (operation)
        {
            case IPropertyReferenceOperation reference:
                return IsNondeterministicMember(reference.Property) ? reference.Property.ContainingType.Name + "." + reference.Property.Name : null;
            case IFieldReferenceOperation reference:
                return IsNondeterministicMember(reference.Field) ? reference.Field.ContainingType.Name + "." + reference.Field.Name : null;
            case IInvocationOperation invocation:
                return IsNondeterministicMember(invocation.TargetMethod) ? invocation.TargetMethod.ContainingType.Name + "." + invocation.TargetMethod.Name + "()" : null;
            case IMethodReferenceOperation reference:
                return IsNondeterministicMember(reference.Method) ? reference.Method.ContainingType.Name + "." + reference.Method.Name + "()" : null;
            case IObjectCreationOperation creation when creation.Type is { } type && IsAlwaysNondeterministicType(type):
                return "new " + type.Name + "()";
            default:
                return null;
        }
    }

    private static bool IsNondeterministicMember(ISymbol member)
    {
        var type = member.ContainingType;
        if (type is null)
        {
            return false;
        }

        if (IsAlwaysNondeterministicType(type))
        {
            return true;
        }

        var name = member.Name;
        if (KnownSymbols.Is(type, "System", "DateTime"))
        {
            return member.IsStatic && name is "Now" or "UtcNow" or "Today";
        }

        if (KnownSymbols.Is(type, "System", "DateTimeOffset"))
        {
            return member.IsStatic && name is "Now" or "UtcNow";
        }

        if (KnownSymbols.Is(type, "System", "Guid"))
        {
            return member.IsStatic && name is "NewGuid" or "CreateVersion7";
        }

        if (KnownSymbols.Is(type, "System", "Environment"))
        {
            return name is "TickCount" or "TickCount64";
        }

        return false;
    }

    /// <summary>Types every use of which is nondeterministic: Random, RandomNumberGenerator, Stopwatch (and derived types).</summary>
    private static bool IsAlwaysNondeterministicType(ITypeSymbol type)
        => KnownSymbols.IsOrDerivesFrom(type, "System", "Random")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Security.Cryptography", "RandomNumberGenerator")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Diagnostics", "Stopwatch");

    /// <summary>True when the receiver is itself reported (Random.Shared.Next(): report Random.Shared only).</summary>
    private static bool IsReceiverReported(IOperation operation)
    {
        var receiver = operation switch
        {
            IPropertyReferenceOperation reference => reference.Instance,
            IFieldReferenceOperation reference => reference.Instance,
            IInvocationOperation invocation => invocation.Instance,
            IMethodReferenceOperation reference => reference.Instance,
            _ => null,
        };

        return Describe(SkipConversions(receiver)) is not null;
    }

    private static bool IsInNameOf(IOperation operation)
    {
        for (var current = operation.Parent; current is not null; current = current.Parent)
        {
            if (current is INameOfOperation)
            {
                return true;
            }
        }

        return false;
    }

    private static bool IsPersistentCode(IOperation operation, ISymbol containingSymbol, ConcurrentDictionary<INamedTypeSymbol, bool> persistentTypes)
    {
        // Lambdas and local functions around the operation: [Persistent] on them, or a lambda handed to an endpoint
        // whose builder chain has .WithMetadata(new PersistentAttribute()).
        for (var current = operation.Parent; current is not null; current = current.Parent)
        {
            switch (current)
            {
                case IAnonymousFunctionOperation lambda:
                    if (KnownSymbols.HasAttribute(lambda.Symbol, KnownSymbols.PersistentAttribute) || IsPassedToPersistentEndpoint(lambda))
                    {
                        return true;
                    }

                    break;
                case ILocalFunctionOperation localFunction:
                    if (KnownSymbols.HasAttribute(localFunction.Symbol, KnownSymbols.PersistentAttribute))
                    {
                        return true;
                    }

                    break;
            }
        }

        // The member: a [Persistent] method (or one overriding a [Persistent] method; the attribute is inherited).
        for (var method = containingSymbol as IMethodSymbol; method is not null; method = method.OverriddenMethod)
        {
            if (KnownSymbols.HasAttribute(method, KnownSymbols.PersistentAttribute))
            {
                return true;
            }
        }

        var type = containingSymbol as INamedTypeSymbol ?? containingSymbol.ContainingType;
        return type is not null && persistentTypes.GetOrAdd(type, IsPersistentType);
    }

    /// <summary>[Persistent] (also inherited), [SharedState], or declares a [SessionState] or [Shared] property.</summary>
    private static bool IsPersistentType(INamedTypeSymbol type)
    {
        if (KnownSymbols.HasPersistentAttribute(type) || KnownSymbols.HasAttribute(type, KnownSymbols.SharedStateAttribute))
        {
            return true;
        }

        foreach (var member in type.GetMembers())
        {
            if (member is IPropertySymbol property
                && (KnownSymbols.HasAttribute(property, KnownSymbols.SessionStateAttribute)
                    || KnownSymbols.HasAttribute(property, KnownSymbols.SharedAttribute)))
            {
                return true;
            }
        }

        return false;
    }

    /// <summary>
    /// True when <paramref name="lambda"/> is an argument of an invocation in a fluent chain (receivers and the calls
    /// made on the result) that includes <c>WithMetadata(..., new PersistentAttribute(), ...)</c>.
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

            if (parent is IInvocationOperation call && ReferenceEquals(SkipConversions(call.Instance), outermost))
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
            return SkipConversions(instance);
        }

        if (invocation.TargetMethod.IsExtensionMethod)
        {
            foreach (var argument in invocation.Arguments)
            {
                if (argument.Parameter?.Ordinal == 0)
                {
                    return SkipConversions(argument.Value);
                }
            }
        }

        return null;
    }

    private static bool IsWithPersistentMetadata(IInvocationOperation invocation)
    {
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

    private static IOperation? SkipConversions(IOperation? operation)
    {
        while (operation is IConversionOperation conversion)
        {
            operation = conversion.Operand;
        }

        return operation;
    }
}
