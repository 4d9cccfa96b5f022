using System;
using System.Collections.Generic;
using System.Threading;
using Microsoft.CodeAnalysis;

namespace PersistentServices.Generators;

/// <summary>
/// Decides whether a type is immutable for PS0101, and if not, why. The rules are in docs/diagnostics.md#ps0101.
/// </summary>
internal static class ImmutabilityChecker
{
    private static readonly string[] MutableCollectionNamespaces =
    [
        "System.Collections",
        "System.Collections.Generic",
        "System.Collections.Concurrent",
        "System.Collections.ObjectModel",
        "System.Collections.Specialized",
    ];

    /// <summary>Immutable library types the structural check cannot prove immutable (private caches) or need not walk.</summary>
    private static readonly (string Namespace, string Name)[] KnownImmutableTypes =
    [
        ("System", "DateTimeOffset"),
        ("System", "TimeSpan"),
        ("System", "Guid"),
        ("System", "DateOnly"),
        ("System", "TimeOnly"),
        ("System", "Half"),
        ("System", "Int128"),
        ("System", "UInt128"),
        ("System", "Index"),
        ("System", "Range"),
        ("System", "Uri"),
        ("System", "Version"),
        ("System.Text", "Rune"),
        ("System.Numerics", "BigInteger"),
        ("System.Numerics", "Complex"),
    ];

    /// <summary>Null when <paramref name="type"/> is immutable; otherwise why it is not (a phrase for the message).</summary>
    public static string? GetMutableReason(ITypeSymbol type, CancellationToken cancellationToken)
        => Check(type, new HashSet<ITypeSymbol>(SymbolEqualityComparer.Default), cancellationToken);

    private static string? Check(ITypeSymbol type, HashSet<ITypeSymbol> visited, CancellationToken cancellationToken)
    {
        cancellationToken.ThrowIfCancellationRequested();
        switch (type.SpecialType)
        {
            case SpecialType.System_Boolean:
            case SpecialType.System_Char:
            case SpecialType.System_SByte:
            case SpecialType.System_Byte:
            case SpecialType.System_Int16:
            case SpecialType.System_UInt16:
            case SpecialType.System_Int32:
            case SpecialType.System_UInt32:
            case SpecialType.System_Int64:
            case SpecialType.System_UInt64:
            case SpecialType.System_Decimal:
            case SpecialType.System_Single:
            case SpecialType.System_Double:
            case SpecialType.System_String:
            case SpecialType.System_IntPtr:
            case SpecialType.System_UIntPtr:
            case SpecialType.System_DateTime:
                return null;
            case SpecialType.System_Object:
                return "'object' can refer to any object, including a mutable one";
        }

        switch (type.TypeKind)
        {
            case TypeKind.Error:
            case TypeKind.TypeParameter:
            case TypeKind.Enum:
            case TypeKind.Delegate:
                return null;
            case TypeKind.Dynamic:
                return "'dynamic' can refer to any object, including a mutable one";
            case TypeKind.Array:
                return "arrays are mutable (use ImmutableArray<T>)";
            case TypeKind.Pointer:
            case TypeKind.FunctionPointer:
                return "pointers are not values";
        }

        if (type is not INamedTypeSymbol named)
        {
            return null;
        }

        if (named.OriginalDefinition.SpecialType == SpecialType.System_Nullable_T)
        {
            return Check(named.TypeArguments[0], visited, cancellationToken);
        }

        if (named.IsTupleType)
        {
            foreach (var element in named.TupleElements)
            {
                var reason = Check(element.Type, visited, cancellationToken);
                if (reason is not null)
                {
                    return $"tuple element '{element.Name}' has mutable type '{element.Type.ToDisplayString()}' ({reason})";
                }
            }

            return null;
        }

        foreach (var (ns, name) in KnownImmutableTypes)
        {
            if (KnownSymbols.Is(named, ns, name))
            {
                return null;
            }
        }

        if (IsImmutableCollection(named))
        {
            return CheckTypeArguments(named, visited, cancellationToken);
        }

        if (IsInMutableCollectionNamespace(named))
        {
            if (KnownSymbols.Is(named, "System.Collections.Generic", "KeyValuePair`2"))
            {
                return CheckTypeArguments(named, visited, cancellationToken);
            }

            return named.TypeKind == TypeKind.Interface
                ? $"'{named.ToDisplayString()}' is an interface, and the collection behind it may be mutable (use a type from System.Collections.Immutable)"
                : $"'{named.ToDisplayString()}' is a mutable collection (use a type from System.Collections.Immutable)";
        }

        if (named.TypeKind == TypeKind.Interface)
        {
            return $"'{named.ToDisplayString()}' is an interface, and the object behind it may be mutable";
        }

        // Cycle guard: a type already being checked (or checked and found immutable) counts as immutable here.
        if (!visited.Add(named))
        {
            return null;
        }

        return CheckMembers(named, visited, cancellationToken);
    }

    private static string? CheckTypeArguments(INamedTypeSymbol type, HashSet<ITypeSymbol> visited, CancellationToken cancellationToken)
    {
        foreach (var argument in type.TypeArguments)
        {
            var reason = Check(argument, visited, cancellationToken);
            if (reason is not null)
            {
                return $"its type argument '{argument.ToDisplayString()}' is mutable ({reason})";
            }
        }

        return null;
    }

    /// <summary>
    /// Classes and records: every instance property get-only or init-only, every instance field readonly, all of
    /// immutable types (base classes included). Structs are copied on every read, so only their members' types count.
    /// </summary>
    private static string? CheckMembers(INamedTypeSymbol type, HashSet<ITypeSymbol> visited, CancellationToken cancellationToken)
    {
        var isStruct = type.TypeKind == TypeKind.Struct;
        for (var current = type; current is not null && current.SpecialType != SpecialType.System_Object; current = current.BaseType)
        {
            foreach (var member in current.GetMembers())
            {
                if (member.IsStatic || member.IsImplicitlyDeclared)
                {
                    continue;
                }

                switch (member)
                {
                    case IFieldSymbol field:
                    {
                        if (!isStruct && !field.IsReadOnly && !field.IsConst)
                        {
                            return $"its field '{field.Name}' is not readonly";
                        }

                        var reason = Check(field.Type, visited, cancellationToken);
                        if (reason is not null)
                        {
                            return $"its field '{field.Name}' has mutable type '{field.Type.ToDisplayString()}' ({reason})";
                        }

                        break;
                    }

                    case IPropertySymbol property when !property.IsIndexer:
                    {
                        if (!isStruct && property.SetMethod is { IsInitOnly: false })
                        {
                            return $"its property '{property.Name}' has a setter";
                        }

                        var reason = Check(property.Type, visited, cancellationToken);
                        if (reason is not null)
                        {
                            return $"its property '{property.Name}' has mutable type '{property.Type.ToDisplayString()}' ({reason})";
                        }

                        break;
                    }
                }
            }

            if (isStruct)
            {
                break;
            }
        }

        return null;
    }

    /// <summary>Top-level types of System.Collections.Immutable and System.Collections.Frozen (not their nested builders).</summary>
    private static bool IsImmutableCollection(INamedTypeSymbol type)
        => type.ContainingType is null
           && (KnownSymbols.IsNamespace(type.ContainingNamespace, "System.Collections.Immutable")
               || KnownSymbols.IsNamespace(type.ContainingNamespace, "System.Collections.Frozen"));

    private static bool IsInMutableCollectionNamespace(INamedTypeSymbol type)
    {
        var outermost = type;
        while (outermost.ContainingType is not null)
        {
            outermost = outermost.ContainingType;
        }

        if (KnownSymbols.IsNamespace(outermost.ContainingNamespace, "System.Collections.Immutable")
            || KnownSymbols.IsNamespace(outermost.ContainingNamespace, "System.Collections.Frozen"))
        {
            // Builders and enumerators nested in immutable collections are mutable.
            return true;
        }

        foreach (var ns in MutableCollectionNamespaces)
        {
            if (KnownSymbols.IsNamespace(outermost.ContainingNamespace, ns))
            {
                return true;
            }
        }

        return false;
    }
}
