using System.Collections.Generic;
using System.Threading;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.CSharp;
using Microsoft.CodeAnalysis.CSharp.Syntax;

namespace PersistentServices.Generators;

/// <summary>One problem found with a [SessionState] or [Shared] property: a descriptor and its message arguments.</summary>
internal readonly struct PropertyProblem
{
    public PropertyProblem(DiagnosticDescriptor descriptor, params object[] arguments)
    {
        Descriptor = descriptor;
        Arguments = arguments;
    }

    public DiagnosticDescriptor Descriptor { get; }

    public object[] Arguments { get; }
}

/// <summary>
/// The rules PS0001–PS0006 and PS0101, shared by the analyzer (which reports them) and the generator (which implements
/// only properties without errors), so both always agree on what is valid.
/// </summary>
internal static class PropertyValidator
{
    /// <summary>Which of the two attributes <paramref name="property"/> carries.</summary>
    public static (bool SessionState, bool Shared) GetKinds(IPropertySymbol property)
        => (KnownSymbols.HasAttribute(property, KnownSymbols.SessionStateAttribute),
            KnownSymbols.HasAttribute(property, KnownSymbols.SharedAttribute));

    /// <summary>True when the generator can implement <paramref name="property"/> (no error-severity problem).</summary>
    public static bool CanGenerate(IPropertySymbol property, CancellationToken cancellationToken)
    {
        var (sessionState, shared) = GetKinds(property);
        if (!sessionState && !shared)
        {
            return false;
        }

        var problems = new List<PropertyProblem>();
        Validate(property, sessionState, shared, includeWarnings: false, problems, cancellationToken);
        return problems.Count == 0;
    }

    /// <summary>Adds the problems of <paramref name="property"/> to <paramref name="problems"/>.</summary>
    public static void Validate(
        IPropertySymbol property,
        bool sessionState,
        bool shared,
        bool includeWarnings,
        List<PropertyProblem> problems,
        CancellationToken cancellationToken)
    {
        var name = property.ToDisplayString();
        if (sessionState && shared)
        {
            // PS0006 first: the other rules depend on which of the two the property is meant to be.
            problems.Add(new PropertyProblem(Descriptors.BothSessionStateAndShared, name));
            return;
        }

        var attribute = sessionState ? "SessionState" : "Shared";
        var isPartial = IsDeclaredPartial(property, cancellationToken);
        if (!isPartial)
        {
            problems.Add(new PropertyProblem(Descriptors.PropertyNotPartial, name, attribute));
        }

        for (var type = property.ContainingType; type is not null; type = type.ContainingType)
        {
            if (!IsDeclaredPartial(type, cancellationToken))
            {
                problems.Add(new PropertyProblem(Descriptors.TypeNotPartial, type.ToDisplayString(), attribute, name));
                break;
            }
        }

        var typeReason = GetUnsupportedTypeReason(property.ContainingType, sessionState);
        if (typeReason is not null)
        {
            problems.Add(new PropertyProblem(Descriptors.UnsupportedDeclaringType, name, attribute, property.ContainingType.ToDisplayString(), typeReason));
        }

        var shapeReason = GetUnsupportedShapeReason(property, isPartial, cancellationToken);
        if (shapeReason is not null)
        {
            problems.Add(new PropertyProblem(Descriptors.UnsupportedPropertyShape, name, attribute, shapeReason));
        }

        if (shared)
        {
            var placementReason = GetSharedPlacementReason(property);
            if (placementReason is not null)
            {
                problems.Add(new PropertyProblem(Descriptors.SharedPlacement, name, placementReason));
            }

            if (includeWarnings)
            {
                var mutableReason = ImmutabilityChecker.GetMutableReason(property.Type, cancellationToken);
                if (mutableReason is not null)
                {
                    problems.Add(new PropertyProblem(Descriptors.MutableSharedType, property.Type.ToDisplayString(), name, mutableReason));
                }
            }
        }
    }

    private static bool IsDeclaredPartial(IPropertySymbol property, CancellationToken cancellationToken)
    {
        foreach (var reference in property.DeclaringSyntaxReferences)
        {
            if (reference.GetSyntax(cancellationToken) is BasePropertyDeclarationSyntax declaration
                && declaration.Modifiers.Any(SyntaxKind.PartialKeyword))
            {
                return true;
            }
        }

        return false;
    }

    private static bool IsDeclaredPartial(INamedTypeSymbol type, CancellationToken cancellationToken)
    {
        foreach (var reference in type.DeclaringSyntaxReferences)
        {
            if (reference.GetSyntax(cancellationToken) is TypeDeclarationSyntax declaration
                && declaration.Modifiers.Any(SyntaxKind.PartialKeyword))
            {
                return true;
            }
        }

        return false;
    }

    private static string? GetUnsupportedTypeReason(INamedTypeSymbol type, bool sessionState)
    {
        switch (type.TypeKind)
        {
            case TypeKind.Interface:
                return "interfaces are not supported; declare the property in a class";
            case TypeKind.Struct:
                return type.IsRecord
                    ? "record structs are not supported; use a class or a record class"
                    : "structs are not supported; use a class";
            case TypeKind.Class:
                break;
            default:
                return "only classes and records are supported";
        }

        for (var current = type; current is not null; current = current.ContainingType)
        {
            if (current.TypeParameters.Length > 0)
            {
                return SymbolEqualityComparer.Default.Equals(current, type)
                    ? "generic types are not supported (the property's state is named after its type)"
                    : $"it is nested in generic type '{current.ToDisplayString()}', which is not supported";
            }

            if (current.IsFileLocal)
            {
                return "file-local types are not supported (the generated part lives in another file)";
            }
        }

        if (sessionState && type.IsStatic)
        {
            return "static classes may hold [Shared] properties only; session state belongs to a controller or service instance";
        }

        return null;
    }

    private static string? GetUnsupportedShapeReason(IPropertySymbol property, bool isPartial, CancellationToken cancellationToken)
    {
        if (property.IsIndexer)
        {
            return "indexers are not supported";
        }

        if (property.ExplicitInterfaceImplementations.Length > 0)
        {
            return "explicit interface implementations are not supported";
        }

        if (property.ReturnsByRef || property.ReturnsByRefReadonly)
        {
            return "ref-returning properties are not supported";
        }

        if (property.IsAbstract)
        {
            return "abstract properties are not supported";
        }

        if (property.IsExtern)
        {
            return "extern properties are not supported";
        }

        if (property.IsRequired)
        {
            return "'required' properties are not supported";
        }

        if (property.GetMethod is null || property.SetMethod is null)
        {
            return "it needs both a get and a set accessor";
        }

        if (property.SetMethod.IsInitOnly)
        {
            return "init-only setters are not supported; use 'set'";
        }

        if (isPartial && HasHandWrittenImplementation(property, cancellationToken))
        {
            return "it already has an implementation part; remove the accessor bodies and let the source generator implement it";
        }

        return null;
    }

    /// <summary>True when a part of the property outside this generator's output has accessor or expression bodies.</summary>
    private static bool HasHandWrittenImplementation(IPropertySymbol property, CancellationToken cancellationToken)
        => HasBodies(property, cancellationToken)
           || (property.PartialImplementationPart is { } implementation && HasBodies(implementation, cancellationToken))
           || (property.PartialDefinitionPart is { } definition && HasBodies(definition, cancellationToken));

    private static bool HasBodies(IPropertySymbol property, CancellationToken cancellationToken)
    {
        foreach (var reference in property.DeclaringSyntaxReferences)
        {
            if (KnownSymbols.IsGeneratedByUs(reference.SyntaxTree)
                || reference.GetSyntax(cancellationToken) is not BasePropertyDeclarationSyntax declaration)
            {
                continue;
            }

            if (declaration is PropertyDeclarationSyntax { ExpressionBody: not null })
            {
                return true;
            }

            if (declaration.AccessorList is { } accessors)
            {
                foreach (var accessor in accessors.Accessors)
                {
                    if (accessor.Body is not null || accessor.ExpressionBody is not null)
                    {
                        return true;
                    }
                }
            }
        }

        return false;
    }

    private static string? GetSharedPlacementReason(IPropertySymbol property)
    {
        var type = property.ContainingType;
        var typeName = type.ToDisplayString();
        if (property.IsStatic)
        {
            return KnownSymbols.HasPersistentAttribute(type) || KnownSymbols.HasAttribute(type, KnownSymbols.SharedStateAttribute)
                ? null
                : $"a static [Shared] property must be declared in a type marked [Persistent] or [SharedState], and '{typeName}' is neither";
        }

        return KnownSymbols.HasAttribute(type, KnownSymbols.SharedStateAttribute)
            ? null
            : $"an instance [Shared] property must be declared in a class marked [SharedState] (registered as a singleton), and '{typeName}' is not; make the property static in a [Persistent] controller or move it to a [SharedState] class";
    }
}
