using System.Collections.Generic;
using System.Collections.Immutable;
using System.Linq;
using System.Threading;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.CSharp;
using Microsoft.CodeAnalysis.CSharp.Syntax;

namespace PersistentServices.Generators;

/// <summary>
/// Implements <c>[SessionState]</c> and <c>[Shared]</c> partial properties: one file per declaring type with a static key
/// (or shared variable) field per property and the implementation part that reads and writes through it. Properties
/// with an error (PS0001–PS0006, reported by <see cref="PersistentPropertyAnalyzer"/>) are skipped.
/// </summary>
[Generator(LanguageNames.CSharp)]
public sealed class PersistentPropertyGenerator : IIncrementalGenerator
{
    /// <summary>Tracking name of the step that yields the valid [SessionState] properties.</summary>
    public const string SessionStatePropertiesStep = "SessionStateProperties";

    /// <summary>Tracking name of the step that yields the valid [Shared] properties.</summary>
    public const string SharedPropertiesStep = "SharedProperties";

    /// <summary>Tracking name of the step that groups the properties into one model per declaring type (one file each).</summary>
    public const string TypesStep = "PersistentTypes";

    private static readonly SymbolDisplayFormat TypeFormat = SymbolDisplayFormat.FullyQualifiedFormat
        .AddMiscellaneousOptions(SymbolDisplayMiscellaneousOptions.IncludeNullableReferenceTypeModifier);

    private static readonly SymbolDisplayFormat NamespaceFormat = new(
        globalNamespaceStyle: SymbolDisplayGlobalNamespaceStyle.Omitted,
        typeQualificationStyle: SymbolDisplayTypeQualificationStyle.NameAndContainingTypesAndNamespaces,
        miscellaneousOptions: SymbolDisplayMiscellaneousOptions.EscapeKeywordIdentifiers);

    /// <inheritdoc/>
    public void Initialize(IncrementalGeneratorInitializationContext context)
    {
        var sessionState = context.SyntaxProvider
            .ForAttributeWithMetadataName(
                KnownSymbols.SessionStateAttributeFullName,
                static (node, _) => node is PropertyDeclarationSyntax,
                static (syntaxContext, cancellationToken) => CreateModel(syntaxContext, StateKind.SessionState, cancellationToken))
            .Where(static model => model is not null)
            .Select(static (model, _) => model!)
            .WithTrackingName(SessionStatePropertiesStep);

        var shared = context.SyntaxProvider
            .ForAttributeWithMetadataName(
                KnownSymbols.SharedAttributeFullName,
                static (node, _) => node is PropertyDeclarationSyntax,
                static (syntaxContext, cancellationToken) => CreateModel(syntaxContext, StateKind.Shared, cancellationToken))
            .Where(static model => model is not null)
            .Select(static (model, _) => model!)
            .WithTrackingName(SharedPropertiesStep);

        var types = sessionState.Collect()
            .Combine(shared.Collect())
            .SelectMany(static (pair, _) => GroupByType(pair.Left, pair.Right))
            .WithTrackingName(TypesStep);

        context.RegisterSourceOutput(types, static (output, type) => output.AddSource(type.HintName, SourceEmitter.Emit(type)));
    }

    private static PropertyModel? CreateModel(GeneratorAttributeSyntaxContext context, StateKind kind, CancellationToken cancellationToken)
    {
        if (context.TargetSymbol is not IPropertySymbol property
            || context.TargetNode is not PropertyDeclarationSyntax declaration
            || !PropertyValidator.CanGenerate(property, cancellationToken))
        {
            return null;
        }

        var containingTypes = new List<ContainingTypeModel>();
        var keyParts = new List<string>();
        for (var type = property.ContainingType; type is not null; type = type.ContainingType)
        {
            containingTypes.Add(new ContainingTypeModel(GetDeclarationKeywords(type), Escape(type.Name)));
            keyParts.Add(type.Name);
        }

        containingTypes.Reverse();
        keyParts.Reverse();

        var ns = property.ContainingType.ContainingNamespace;
        var typeKey = string.Join(".", keyParts);
        string? namespaceName = null;
        if (ns is { IsGlobalNamespace: false })
        {
            namespaceName = ns.ToDisplayString(NamespaceFormat);
            typeKey = GetUnescapedName(ns) + "." + typeKey;
        }

        var prefix = kind == StateKind.SessionState ? "__PersistentServices_SessionState_" : "__PersistentServices_Shared_";
        return new PropertyModel(
            TypeKey: typeKey,
            Namespace: namespaceName,
            ContainingTypes: new EquatableArray<ContainingTypeModel>([.. containingTypes]),
            Kind: kind,
            Modifiers: GetModifiers(declaration.Modifiers),
            TypeName: property.Type.ToDisplayString(TypeFormat),
            Name: Escape(property.Name),
            FieldName: prefix + property.Name,
            KeyName: typeKey + "." + property.Name,
            GetterModifiers: GetAccessorModifiers(declaration, SyntaxKind.GetAccessorDeclaration),
            SetterModifiers: GetAccessorModifiers(declaration, SyntaxKind.SetAccessorDeclaration));
    }

    private static ImmutableArray<TypeModel> GroupByType(ImmutableArray<PropertyModel> sessionState, ImmutableArray<PropertyModel> shared)
    {
        if (sessionState.IsEmpty && shared.IsEmpty)
        {
            return [];
        }

        // Grouped in first-seen order (syntax tree order); within a type, [SessionState] before [Shared], each in declaration order.
        var groups = new Dictionary<string, List<PropertyModel>>(System.StringComparer.Ordinal);
        var order = new List<string>();
        foreach (var property in sessionState.Concat(shared))
        {
            if (!groups.TryGetValue(property.TypeKey, out var list))
            {
                list = [];
                groups.Add(property.TypeKey, list);
                order.Add(property.TypeKey);
            }

            list.Add(property);
        }

        var builder = ImmutableArray.CreateBuilder<TypeModel>(order.Count);
        foreach (var key in order)
        {
            var properties = groups[key];
            var first = properties[0];
            builder.Add(new TypeModel(
                key + KnownSymbols.GeneratedFileSuffix,
                first.Namespace,
                first.ContainingTypes,
                new EquatableArray<PropertyModel>([.. properties])));
        }

        return builder.MoveToImmutable();
    }

    private static string GetDeclarationKeywords(INamedTypeSymbol type)
    {
        var keyword = type.TypeKind switch
        {
            TypeKind.Struct when type.IsRecord => "record struct",
            TypeKind.Struct => "struct",
            TypeKind.Interface => "interface",
            _ when type.IsRecord => "record",
            _ => "class",
        };

        return type.IsStatic ? "static partial " + keyword : "partial " + keyword;
    }

    private static string GetModifiers(SyntaxTokenList modifiers)
    {
        var kept = new List<string>();
        foreach (var modifier in modifiers)
        {
            switch (modifier.Kind())
            {
                case SyntaxKind.PublicKeyword:
                case SyntaxKind.PrivateKeyword:
                case SyntaxKind.ProtectedKeyword:
                case SyntaxKind.InternalKeyword:
                case SyntaxKind.StaticKeyword:
                case SyntaxKind.NewKeyword:
                case SyntaxKind.VirtualKeyword:
                case SyntaxKind.OverrideKeyword:
                case SyntaxKind.SealedKeyword:
                case SyntaxKind.UnsafeKeyword:
                    kept.Add(modifier.Text);
                    break;
            }
        }

        return string.Join(" ", kept);
    }

    private static string GetAccessorModifiers(PropertyDeclarationSyntax declaration, SyntaxKind accessorKind)
    {
        var accessor = declaration.AccessorList?.Accessors.FirstOrDefault(a => a.IsKind(accessorKind));
        return accessor is null ? string.Empty : string.Join(" ", accessor.Modifiers.Select(m => m.Text));
    }

    private static string GetUnescapedName(INamespaceSymbol ns)
        => ns.ContainingNamespace is { IsGlobalNamespace: false } parent ? GetUnescapedName(parent) + "." + ns.Name : ns.Name;

    private static string Escape(string identifier)
        => SyntaxFacts.GetKeywordKind(identifier) != SyntaxKind.None || SyntaxFacts.GetContextualKeywordKind(identifier) != SyntaxKind.None
            ? "@" + identifier
            : identifier;
}
