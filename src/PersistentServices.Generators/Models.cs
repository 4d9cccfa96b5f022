namespace PersistentServices.Generators;

/// <summary>Which attribute a generated property implements.</summary>
internal enum StateKind
{
    SessionState,
    Shared,
}

/// <summary>One declaring or containing type, as reproduced in the generated part (e.g. "partial class" and "Cart").</summary>
/// <param name="Declaration">The keywords before the name: "partial class", "static partial class", "partial record", ...</param>
/// <param name="Name">The type's name, escaped when it is a keyword.</param>
internal sealed record ContainingTypeModel(string Declaration, string Name);

/// <summary>One valid [SessionState] or [Shared] property: everything the emitter needs, and nothing from Roslyn.</summary>
/// <param name="TypeKey">The declaring type's full name ("N.Outer.Inner"); groups properties into one file.</param>
/// <param name="Namespace">The namespace to declare, escaped; null for the global namespace.</param>
/// <param name="ContainingTypes">Outermost first; the last one declares the property.</param>
/// <param name="Kind">Which attribute.</param>
/// <param name="Modifiers">The property's modifiers other than 'partial' ("public static").</param>
/// <param name="TypeName">The property's type, fully qualified with nullable annotations.</param>
/// <param name="Name">The property's name, escaped when it is a keyword.</param>
/// <param name="FieldName">The generated key or variable field.</param>
/// <param name="KeyName">The state's name: the type's full name, a dot and the property's name.</param>
/// <param name="GetterModifiers">Accessor-level modifiers of the get accessor ("" when none).</param>
/// <param name="SetterModifiers">Accessor-level modifiers of the set accessor ("" when none).</param>
internal sealed record PropertyModel(
    string TypeKey,
    string? Namespace,
    EquatableArray<ContainingTypeModel> ContainingTypes,
    StateKind Kind,
    string Modifiers,
    string TypeName,
    string Name,
    string FieldName,
    string KeyName,
    string GetterModifiers,
    string SetterModifiers);

/// <summary>One generated file: a declaring type and its properties.</summary>
internal sealed record TypeModel(
    string HintName,
    string? Namespace,
    EquatableArray<ContainingTypeModel> ContainingTypes,
    EquatableArray<PropertyModel> Properties);
