using System;
using System.Collections.Generic;
using System.Threading;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.CSharp.Syntax;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators.Replay;

/// <summary>
/// The HTTP clients of one compilation whose sends are persistent calls (docs/calls.md), so PS0202 does not report them:
/// registrations whose <c>AddHttpClient(...)</c> chain has <c>.AddPersistentCalls()</c>, read from source. A send is
/// through such a client when its receiver is, as far as the analyzer can see in source,
/// <list type="bullet">
/// <item><c>IHttpClientFactory.CreateClient("name")</c> with a constant name registered that way, or with the variable
///   (local, parameter, readonly field) whose value the registration named, directly or through a local variable every
///   assignment of which is such a call;</item>
/// <item>the <c>HttpClient</c> injected into a typed client registered that way (<c>AddHttpClient&lt;TClient&gt;()</c>, or
///   <c>AddHttpClient&lt;TClient, TImplementation&gt;()</c>: into the implementation): a constructor parameter of that class
///   (a primary constructor's included), or a readonly field or get-only property of the class written only in its
///   constructors and initializers, from such parameters.</item>
/// </list>
/// Everything else stays reported.
/// </summary>
internal sealed class PersistentCallClients
{
    /// <summary>How many locals deep a receiver is traced (a local assigned from another local, and so on).</summary>
    private const int MaxLocalDepth = 4;

    private readonly HashSet<string> _names = new(StringComparer.Ordinal);
    private readonly HashSet<ISymbol> _nameVariables = new(SymbolEqualityComparer.Default);
    private readonly HashSet<INamedTypeSymbol> _typedClients = new(SymbolEqualityComparer.Default);

    /// <summary>True when no registration in the compilation has <c>AddPersistentCalls()</c>.</summary>
    public bool IsEmpty => _names.Count == 0 && _nameVariables.Count == 0 && _typedClients.Count == 0;

    /// <summary>Reads one <c>AddPersistentCalls()</c> call: the <c>AddHttpClient</c> at the start of its builder chain.</summary>
    public void Add(IInvocationOperation addPersistentCalls)
    {
        var method = addPersistentCalls.TargetMethod.ReducedFrom ?? addPersistentCalls.TargetMethod;
        if (method.Name != "AddPersistentCalls"
            || method.ContainingType is not { } containing
            || !KnownSymbols.IsNamespace(containing.ContainingNamespace, "Microsoft.Extensions.DependencyInjection"))
        {
            return;
        }

        // Down the chain: services.AddHttpClient(...).ConfigureHttpClient(...).AddPersistentCalls().
        var current = Operations.GetReceiver(addPersistentCalls);
        for (var depth = 0; depth < 32 && current is IInvocationOperation invocation; depth++)
        {
            var target = invocation.TargetMethod.ReducedFrom ?? invocation.TargetMethod;
            if (target.Name == "AddHttpClient"
                && target.ContainingType is { } type
                && KnownSymbols.IsNamespace(type.ContainingNamespace, "Microsoft.Extensions.DependencyInjection"))
            {
                AddRegistration(invocation, invocation.TargetMethod);
                return;
            }

            current = Operations.GetReceiver(invocation);
        }
    }

    /// <summary>True when <paramref name="receiver"/> (the client a send goes through) is a persistent-calls client.</summary>
    public bool IsPersistentClient(IOperation? receiver, SourceIndex source, CancellationToken cancellationToken)
        => !IsEmpty && IsPersistentClient(receiver, source, 0, cancellationToken);

    private void AddRegistration(IInvocationOperation addHttpClient, IMethodSymbol method)
    {
        foreach (var argument in addHttpClient.Arguments)
        {
            if (argument.Parameter?.Name == "name")
            {
                if (argument.Value.ConstantValue is { HasValue: true, Value: string name })
                {
                    _names.Add(name);
                }
                else if (NameVariable(argument.Value) is { } variable)
                {
                    _nameVariables.Add(variable);
                }
            }
        }

        // AddHttpClient<TClient>(): the client is injected into TClient; AddHttpClient<TClient, TImplementation>(): into the implementation.
        if (method.TypeArguments.Length > 0 && method.TypeArguments[method.TypeArguments.Length - 1] is INamedTypeSymbol injectedInto)
        {
            _typedClients.Add(injectedInto.OriginalDefinition);
        }
    }

    private bool IsPersistentClient(IOperation? receiver, SourceIndex source, int depth, CancellationToken cancellationToken)
    {
        switch (Operations.SkipConversions(receiver))
        {
            case IInvocationOperation invocation:
                return IsCreateClientOfPersistentName(invocation);
            case ILocalReferenceOperation local when depth < MaxLocalDepth:
                return AllAssignmentsArePersistent(local.Local, source, depth, cancellationToken);
            case IParameterReferenceOperation parameter:
                return IsInjectedParameter(parameter.Parameter);
            case IFieldReferenceOperation field when IsThisOrImplicit(field.Instance):
                return IsInjectedMember(field.Field, field.Field.ContainingType, source, cancellationToken);
            case IPropertyReferenceOperation property when IsThisOrImplicit(property.Instance) && !property.Property.IsIndexer:
                return IsInjectedMember(property.Property, property.Property.ContainingType, source, cancellationToken);
            default:
                return false;
        }
    }

    private bool IsCreateClientOfPersistentName(IInvocationOperation invocation)
    {
        var method = invocation.TargetMethod.ReducedFrom ?? invocation.TargetMethod;
        if (method.Name != "CreateClient" || method.ContainingType is not { } type)
        {
            return false;
        }

        // IHttpClientFactory.CreateClient(name); HttpClientFactoryExtensions.CreateClient(factory) is the default name "".
        if (KnownSymbols.Is(type, "System.Net.Http", "IHttpClientFactory"))
        {
            foreach (var argument in invocation.Arguments)
            {
                if (argument.Parameter?.Name == "name")
                {
                    return argument.Value.ConstantValue is { HasValue: true, Value: string name }
                        ? _names.Contains(name)
                        : NameVariable(argument.Value) is { } variable && _nameVariables.Contains(variable);
                }
            }

            return false;
        }

        return KnownSymbols.Is(type, "System.Net.Http", "HttpClientFactoryExtensions") && _names.Contains(string.Empty);
    }

    /// <summary>
    /// A client name held in a variable (<c>AddHttpClient(next, ...)</c> and <c>CreateClient(next)</c>, names read from
    /// configuration): the local, parameter or field that holds it. A send through <c>CreateClient</c> with the same variable
    /// as a registration with <c>AddPersistentCalls()</c> is through that client. Null for any other expression.
    /// </summary>
    private static ISymbol? NameVariable(IOperation value)
        => Operations.SkipConversions(value) switch
        {
            ILocalReferenceOperation local => local.Local,
            IParameterReferenceOperation parameter => parameter.Parameter,
            IFieldReferenceOperation { Field: { IsReadOnly: true } or { IsConst: true } } field => field.Field,
            _ => null,
        };

    /// <summary>A constructor parameter of a typed client class (a primary constructor's included).</summary>
    private bool IsInjectedParameter(IParameterSymbol parameter)
        => parameter.ContainingSymbol is IMethodSymbol { MethodKind: MethodKind.Constructor } constructor
           && constructor.ContainingType is { } type
           && _typedClients.Contains(type.OriginalDefinition)
           && KnownSymbols.IsOrDerivesFrom(parameter.Type, "System.Net.Http", "HttpMessageInvoker");

    private static bool IsThisOrImplicit(IOperation? instance)
        => Operations.SkipConversions(instance) is IInstanceReferenceOperation { ReferenceKind: InstanceReferenceKind.ContainingTypeInstance };

    /// <summary>
    /// A field or property of a typed client class that is written only in that class's constructors and initializers,
    /// and only from its constructors' parameters (<c>private readonly HttpClient _http = http;</c>, <c>_http = http;</c>).
    /// </summary>
    private bool IsInjectedMember(ISymbol member, INamedTypeSymbol? type, SourceIndex source, CancellationToken cancellationToken)
    {
        var unchangeable = member switch
        {
            IFieldSymbol field => field.IsReadOnly,
            IPropertySymbol property => property.SetMethod is null,
            _ => false,
        };
        if (type is null || member.IsStatic || !unchangeable || !_typedClients.Contains(type.OriginalDefinition))
        {
            return false;
        }

        var writes = 0;
        foreach (var reference in type.DeclaringSyntaxReferences)
        {
            if (reference.GetSyntax(cancellationToken) is not TypeDeclarationSyntax declaration)
            {
                continue;
            }

            var model = source.GetModel(reference.SyntaxTree);
            foreach (var node in declaration.DescendantNodes())
            {
                switch (node)
                {
                    case VariableDeclaratorSyntax { Initializer: { } initializer } declarator
                        when SymbolEqualityComparer.Default.Equals(model.GetDeclaredSymbol(declarator, cancellationToken), member):
                        if (!IsInjectedValue(model.GetOperation(initializer.Value, cancellationToken)))
                        {
                            return false;
                        }

                        writes++;
                        break;
                    case PropertyDeclarationSyntax { Initializer: { } propertyInitializer } property
                        when SymbolEqualityComparer.Default.Equals(model.GetDeclaredSymbol(property, cancellationToken), member):
                        if (!IsInjectedValue(model.GetOperation(propertyInitializer.Value, cancellationToken)))
                        {
                            return false;
                        }

                        writes++;
                        break;
                    case IdentifierNameSyntax identifier when identifier.Identifier.ValueText == member.Name
                        && SymbolEqualityComparer.Default.Equals(model.GetSymbolInfo(identifier, cancellationToken).Symbol, member):
                        switch (IsWrite(model.GetOperation(ReferenceNode(identifier), cancellationToken), out var value))
                        {
                            case WriteKind.None:
                                break;
                            case WriteKind.Simple when node.FirstAncestorOrSelf<ConstructorDeclarationSyntax>() is not null && IsInjectedValue(value):
                                writes++;
                                break;
                            default:
                                return false;
                        }

                        break;
                }
            }
        }

        return writes > 0;
    }

    /// <summary>The node whose operation is the reference: <c>this.x</c> for the name in <c>this.x</c>.</summary>
    private static SyntaxNode ReferenceNode(IdentifierNameSyntax identifier)
        => identifier.Parent is MemberAccessExpressionSyntax access && access.Name == identifier ? access : identifier;

    /// <summary>True when <paramref name="value"/> is a parameter of a typed client's constructor.</summary>
    private bool IsInjectedValue(IOperation? value)
        => Operations.SkipConversions(value) is IParameterReferenceOperation parameter && IsInjectedParameter(parameter.Parameter);

    /// <summary>True when every value the local ever holds is a persistent-calls client (its initializer and each assignment).</summary>
    private bool AllAssignmentsArePersistent(ILocalSymbol local, SourceIndex source, int depth, CancellationToken cancellationToken)
    {
        if (local.IsRef || local.DeclaringSyntaxReferences.IsEmpty)
        {
            return false;
        }

        var values = 0;
        foreach (var reference in local.DeclaringSyntaxReferences)
        {
            var declaration = reference.GetSyntax(cancellationToken);
            var model = source.GetModel(reference.SyntaxTree);
            if (declaration is not VariableDeclaratorSyntax declarator)
            {
                return false; // out var, pattern, foreach, catch: a value the analyzer does not trace
            }

            if (declarator.Initializer is { } initializer)
            {
                if (!IsPersistentClient(model.GetOperation(initializer.Value, cancellationToken), source, depth + 1, cancellationToken))
                {
                    return false;
                }

                values++;
            }

            // Every later write in the local's scope (the block, or the body, that declares it).
            var scope = (SyntaxNode?)declarator.FirstAncestorOrSelf<BlockSyntax>() ?? declarator.SyntaxTree.GetRoot(cancellationToken);
            foreach (var identifier in scope.DescendantNodes())
            {
                if (identifier is not IdentifierNameSyntax name || name.Identifier.ValueText != local.Name
                    || !SymbolEqualityComparer.Default.Equals(model.GetSymbolInfo(name, cancellationToken).Symbol, local))
                {
                    continue;
                }

                switch (IsWrite(model.GetOperation(ReferenceNode(name), cancellationToken), out var value))
                {
                    case WriteKind.None:
                        break;
                    case WriteKind.Simple when IsPersistentClient(value, source, depth + 1, cancellationToken):
                        values++;
                        break;
                    default:
                        return false;
                }
            }
        }

        return values > 0;
    }

    private enum WriteKind
    {
        None,
        Simple,
        Other,
    }

    /// <summary>Whether a reference to a variable writes it: a plain assignment (with its value), another write (ref, out, compound, deconstruction), or a read.</summary>
    private static WriteKind IsWrite(IOperation? reference, out IOperation? value)
    {
        value = null;
        if (reference is null)
        {
            return WriteKind.None;
        }

        var current = reference;
        while (current.Parent is IConversionOperation or ITupleOperation)
        {
            current = current.Parent;
        }

        switch (current.Parent)
        {
            case ISimpleAssignmentOperation assignment when ReferenceEquals(assignment.Target, current):
                value = assignment.Value;
                return ReferenceEquals(current, reference) ? WriteKind.Simple : WriteKind.Other;
            case IAssignmentOperation assignment when ReferenceEquals(assignment.Target, current):
                return WriteKind.Other;
            case IArgumentOperation { Parameter.RefKind: RefKind.Ref or RefKind.Out }:
                return WriteKind.Other;
            case IDeclarationExpressionOperation:
                return WriteKind.Other;
            default:
                return WriteKind.None;
        }
    }
}
