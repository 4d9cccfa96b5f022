using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.CSharp.Syntax;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators.Replay;

/// <summary>
/// The dependency-injection registrations of one compilation, read from its source: which types are singletons
/// (their instance fields outlive the request, PS0102) and which implementation types stand behind a service type (so
/// a call through an injected interface is followed into its implementation). Recognized:
/// <c>AddSingleton</c>/<c>AddScoped</c>/<c>AddTransient</c> (generic, <c>typeof</c>, instance and factory forms),
/// their <c>TryAdd</c> and <c>Keyed</c> variants, <c>ServiceDescriptor.Singleton/Scoped/Transient</c>, and
/// <c>AddHostedService</c>, and typed HTTP clients (<c>AddHttpClient&lt;TClient, TImplementation&gt;</c>, transient).
/// [SharedState] classes count as singletons too. It also reads which HTTP clients have <c>AddPersistentCalls()</c>
/// (<see cref="CallClients"/>).
/// </summary>
internal sealed class ServiceRegistry
{
    private static readonly HashSet<string> RegistrationNames = new(StringComparer.Ordinal)
    {
        "AddSingleton", "TryAddSingleton", "AddKeyedSingleton", "TryAddKeyedSingleton", "AddHostedService",
        "AddScoped", "TryAddScoped", "AddKeyedScoped", "TryAddKeyedScoped",
        "AddTransient", "TryAddTransient", "AddKeyedTransient", "TryAddKeyedTransient",
        "Singleton", "Scoped", "Transient", "KeyedSingleton", "KeyedScoped", "KeyedTransient",
        "AddHttpClient", "AddPersistentCalls",
    };

    private readonly HashSet<INamedTypeSymbol> _singletons = new(SymbolEqualityComparer.Default);
    private readonly HashSet<INamedTypeSymbol> _singletonsAndBases = new(SymbolEqualityComparer.Default);
    private readonly Dictionary<INamedTypeSymbol, List<INamedTypeSymbol>> _implementations = new(SymbolEqualityComparer.Default);

    private ServiceRegistry()
    {
    }

    /// <summary>The HTTP clients registered with <c>AddPersistentCalls()</c>: their sends are persistent calls (PS0202 is silent).</summary>
    public PersistentCallClients CallClients { get; } = new();

    /// <summary>Reads the registrations of every (non-generated) tree of the compilation.</summary>
    public static ServiceRegistry Scan(SourceIndex source, CancellationToken cancellationToken)
    {
        var registry = new ServiceRegistry();
        foreach (var tree in source.Compilation.SyntaxTrees)
        {
            if (KnownSymbols.IsGeneratedByUs(tree))
            {
                continue;
            }

            SemanticModel? model = null;
            foreach (var node in tree.GetRoot(cancellationToken).DescendantNodes())
            {
                if (node is InvocationExpressionSyntax invocation && GetName(invocation.Expression) is { } name && RegistrationNames.Contains(name))
                {
                    model ??= source.GetModel(tree);
                    if (model.GetOperation(invocation, cancellationToken) is IInvocationOperation operation)
                    {
                        if (name == "AddPersistentCalls")
                        {
                            registry.CallClients.Add(operation);
                        }
                        else
                        {
                            registry.Add(operation);
                        }
                    }
                }
            }
        }

        foreach (var singleton in registry._singletons)
        {
            for (var type = singleton; type is not null && type.SpecialType != SpecialType.System_Object; type = type.BaseType)
            {
                registry._singletonsAndBases.Add(type.OriginalDefinition);
            }
        }

        return registry;
    }

    /// <summary>
    /// True when the instance fields declared in <paramref name="type"/> outlive a request: the type (or a type
    /// derived from it) is registered as a singleton, or it is a [SharedState] class.
    /// </summary>
    public bool IsSingleton(INamedTypeSymbol type)
        => _singletonsAndBases.Contains(type.OriginalDefinition) || KnownSymbols.HasAttribute(type.OriginalDefinition, KnownSymbols.SharedStateAttribute);

    /// <summary>The implementation types registered for <paramref name="serviceType"/> in this compilation.</summary>
    public IReadOnlyList<INamedTypeSymbol> GetImplementations(INamedTypeSymbol serviceType)
        => _implementations.TryGetValue(serviceType.OriginalDefinition, out var list) ? list : [];

    private static string? GetName(ExpressionSyntax expression) => expression switch
    {
        MemberAccessExpressionSyntax member => member.Name.Identifier.ValueText,
        MemberBindingExpressionSyntax binding => binding.Name.Identifier.ValueText,
        SimpleNameSyntax simple => simple.Identifier.ValueText,
        _ => null,
    };

    private void Add(IInvocationOperation invocation)
    {
        var method = invocation.TargetMethod;
        var containing = method.ContainingType;
        if (containing is null
            || !(KnownSymbols.IsNamespace(containing.ContainingNamespace, "Microsoft.Extensions.DependencyInjection")
                 || KnownSymbols.IsNamespace(containing.ContainingNamespace, "Microsoft.Extensions.DependencyInjection.Extensions")))
        {
            return;
        }

        var singleton = method.Name.IndexOf("Singleton", StringComparison.Ordinal) >= 0 || method.Name == "AddHostedService";
        ITypeSymbol? service = null;
        var implementations = new List<ITypeSymbol>();

        if (method.TypeArguments.Length >= 1)
        {
            service = method.TypeArguments[0];
        }

        if (method.TypeArguments.Length >= 2)
        {
            implementations.Add(method.TypeArguments[1]);
        }

        ITypeSymbol? typeofService = null;
        foreach (var argument in invocation.Arguments)
        {
            var value = Operations.SkipConversions(argument.Value);
            switch (argument.Parameter?.Name)
            {
                case "serviceType" when value is ITypeOfOperation typeOf:
                    typeofService = typeOf.TypeOperand;
                    break;
                case "implementationType" when value is ITypeOfOperation typeOf:
                    implementations.Add(typeOf.TypeOperand);
                    break;
                case "implementationInstance" when value?.Type is { } instanceType:
                    implementations.Add(instanceType);
                    break;
                case "implementationFactory" when value is IDelegateCreationOperation { Target: IAnonymousFunctionOperation factory }:
                    AddReturnedTypes(factory, implementations);
                    break;
                case "implementationFactory" when value is IAnonymousFunctionOperation factory:
                    AddReturnedTypes(factory, implementations);
                    break;
            }
        }

        service ??= typeofService;
        if (service is null)
        {
            return;
        }

        if (implementations.Count == 0)
        {
            implementations.Add(service);
        }

        foreach (var implementation in implementations)
        {
            if (implementation is not INamedTypeSymbol named || named.TypeKind is TypeKind.Interface or TypeKind.Error)
            {
                continue;
            }

            if (singleton)
            {
                _singletons.Add(named.OriginalDefinition);
            }

            if (service is INamedTypeSymbol serviceType)
            {
                if (!_implementations.TryGetValue(serviceType.OriginalDefinition, out var list))
                {
                    list = [];
                    _implementations.Add(serviceType.OriginalDefinition, list);
                }

                if (!list.Contains(named.OriginalDefinition, SymbolEqualityComparer.Default))
                {
                    list.Add(named.OriginalDefinition);
                }
            }
        }
    }

    private static void AddReturnedTypes(IAnonymousFunctionOperation factory, List<ITypeSymbol> types)
    {
        foreach (var operation in factory.Body.Descendants())
        {
            if (operation is IReturnOperation { ReturnedValue: { } returned } && IsDirectlyIn(operation, factory)
                && Operations.SkipConversions(returned)?.Type is { } type)
            {
                types.Add(type);
            }
        }
    }

    private static bool IsDirectlyIn(IOperation operation, IAnonymousFunctionOperation function)
    {
        for (var current = operation.Parent; current is not null; current = current.Parent)
        {
            if (current is IAnonymousFunctionOperation or ILocalFunctionOperation)
            {
                return ReferenceEquals(current, function);
            }
        }

        return false;
    }
}
