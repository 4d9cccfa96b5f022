using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators.Replay;

/// <summary>Small helpers over IOperation trees.</summary>
internal static class Operations
{
    public static IOperation? SkipConversions(IOperation? operation)
    {
        while (operation is IConversionOperation conversion)
        {
            operation = conversion.Operand;
        }

        return operation;
    }

    public static bool IsInNameOf(IOperation operation)
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

    /// <summary>True for <c>this</c> (written or implicit) as a receiver.</summary>
    public static bool IsThis(IOperation? operation)
        => SkipConversions(operation) is IInstanceReferenceOperation { ReferenceKind: InstanceReferenceKind.ContainingTypeInstance };

    /// <summary>The receiver of a call: its instance, or the first argument of an extension method.</summary>
    public static IOperation? GetReceiver(IInvocationOperation invocation)
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

    /// <summary>How a method appears in a message: <c>Clock.Now()</c>, <c>Clock.Now</c> (a getter), <c>new Order()</c>.</summary>
    public static string Display(IMethodSymbol method)
    {
        var typeName = method.ContainingType?.Name ?? string.Empty;
        switch (method.MethodKind)
        {
            case MethodKind.Constructor:
                return "new " + typeName + "()";
            case MethodKind.StaticConstructor:
                return typeName + " (static constructor)";
            case MethodKind.PropertyGet when method.AssociatedSymbol is IPropertySymbol property:
                return typeName + "." + (property.IsIndexer ? "this[]" : property.Name);
            case MethodKind.PropertySet when method.AssociatedSymbol is IPropertySymbol property:
                return typeName + "." + (property.IsIndexer ? "this[]" : property.Name) + " (set)";
            default:
                return typeName + "." + method.Name + "()";
        }
    }

    /// <summary>A type as a message shows it: <c>List&lt;T&gt;</c>, <c>Dictionary&lt;TKey, TValue&gt;</c>.</summary>
    public static string DisplayType(ITypeSymbol type) => type.OriginalDefinition.ToDisplayString(TypeFormat);

    private static readonly SymbolDisplayFormat TypeFormat = new(
        typeQualificationStyle: SymbolDisplayTypeQualificationStyle.NameAndContainingTypes,
        genericsOptions: SymbolDisplayGenericsOptions.IncludeTypeParameters,
        miscellaneousOptions: SymbolDisplayMiscellaneousOptions.UseSpecialTypes);
}
