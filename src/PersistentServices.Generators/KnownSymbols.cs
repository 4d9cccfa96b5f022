using System;
using Microsoft.CodeAnalysis;

namespace PersistentServices.Generators;

/// <summary>Recognizes types by metadata name (namespace and name), so the analyzers need no symbol look-ups.</summary>
internal static class KnownSymbols
{
    public const string AttributeNamespace = "PersistentServices";
    public const string SessionStateAttribute = "SessionStateAttribute";
    public const string SharedAttribute = "SharedAttribute";
    public const string SharedStateAttribute = "SharedStateAttribute";
    public const string PersistentAttribute = "PersistentAttribute";
    public const string SubordinateAttribute = "SubordinateAttribute";
    public const string PersistentReadOnlyAttribute = "PersistentReadOnlyAttribute";

    /// <summary>The obsolete name of <see cref="PersistentReadOnlyAttribute"/>; it still marks a read-only method.</summary>
    public const string ReadOnlyAttribute = "ReadOnlyAttribute";

    /// <summary>The endpoint conventions (<c>app.MapPost(...).Persistent()</c>): namespace, class and the persistent one.</summary>
    public const string ConventionsNamespace = "Microsoft.AspNetCore.Builder";
    public const string ConventionsClass = "PersistentEndpointConventionBuilderExtensions";
    public const string PersistentConvention = "Persistent";
    public const string SessionStateAttributeFullName = AttributeNamespace + "." + SessionStateAttribute;
    public const string SharedAttributeFullName = AttributeNamespace + "." + SharedAttribute;

    /// <summary>The file name suffix of the generator's outputs (hint names end with it).</summary>
    public const string GeneratedFileSuffix = ".PersistentServices.g.cs";

    /// <summary>True when <paramref name="type"/> is the top-level type <paramref name="name"/> (metadata name) in <paramref name="ns"/>.</summary>
    public static bool Is(ITypeSymbol? type, string ns, string name)
        => type is INamedTypeSymbol named
           && named.ContainingType is null
           && string.Equals(named.MetadataName, name, StringComparison.Ordinal)
           && IsNamespace(named.ContainingNamespace, ns);

    /// <summary>True when <paramref name="symbol"/> is the namespace <paramref name="ns"/> ("" for the global namespace).</summary>
    public static bool IsNamespace(INamespaceSymbol? symbol, string ns)
    {
        var current = symbol;
        var end = ns.Length;
        while (end > 0)
        {
            if (current is null || current.IsGlobalNamespace)
            {
                return false;
            }

            var dot = ns.LastIndexOf('.', end - 1);
            var start = dot + 1;
            var length = end - start;
            if (current.Name.Length != length || string.CompareOrdinal(current.Name, 0, ns, start, length) != 0)
            {
                return false;
            }

            current = current.ContainingNamespace;
            end = dot;
        }

        return current is not null && current.IsGlobalNamespace;
    }

    /// <summary>True when <paramref name="type"/> is <paramref name="ns"/>.<paramref name="name"/> or derives from it.</summary>
    public static bool IsOrDerivesFrom(ITypeSymbol? type, string ns, string name)
    {
        for (var current = type; current is not null; current = current.BaseType)
        {
            if (Is(current, ns, name))
            {
                return true;
            }
        }

        return false;
    }

    /// <summary>True when <paramref name="symbol"/> carries the PersistentServices attribute <paramref name="name"/>.</summary>
    public static bool HasAttribute(ISymbol symbol, string name)
    {
        foreach (var attribute in symbol.GetAttributes())
        {
            if (Is(attribute.AttributeClass, AttributeNamespace, name))
            {
                return true;
            }
        }

        return false;
    }

    /// <summary>True when <paramref name="symbol"/> carries [PersistentReadOnly] or its obsolete name [ReadOnly].</summary>
    public static bool HasReadOnlyAttribute(ISymbol symbol)
        => HasAttribute(symbol, PersistentReadOnlyAttribute) || HasAttribute(symbol, ReadOnlyAttribute);

    /// <summary>True when <paramref name="type"/> or a base class carries [Persistent] (the attribute is inherited).</summary>
    public static bool HasPersistentAttribute(INamedTypeSymbol type)
    {
        for (var current = type; current is not null; current = current.BaseType)
        {
            if (HasAttribute(current, PersistentAttribute))
            {
                return true;
            }
        }

        return false;
    }

    /// <summary>True when the tree was produced by this library's source generator.</summary>
    public static bool IsGeneratedByUs(SyntaxTree tree)
        => tree.FilePath.EndsWith(GeneratedFileSuffix, StringComparison.Ordinal);
}
