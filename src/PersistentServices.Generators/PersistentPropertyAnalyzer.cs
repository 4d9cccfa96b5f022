using System.Collections.Generic;
using System.Collections.Immutable;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.Diagnostics;

namespace PersistentServices.Generators;

/// <summary>
/// Reports PS0001–PS0006 and PS0101 on <c>[SessionState]</c> and <c>[Shared]</c> properties. The generator applies the
/// same rules (<see cref="PersistentPropertyGenerator"/> implements only properties without errors).
/// </summary>
[DiagnosticAnalyzer(LanguageNames.CSharp)]
public sealed class PersistentPropertyAnalyzer : DiagnosticAnalyzer
{
    /// <inheritdoc/>
    public override ImmutableArray<DiagnosticDescriptor> SupportedDiagnostics { get; } =
    [
        Descriptors.PropertyNotPartial,
        Descriptors.TypeNotPartial,
        Descriptors.UnsupportedDeclaringType,
        Descriptors.UnsupportedPropertyShape,
        Descriptors.SharedPlacement,
        Descriptors.BothSessionStateAndShared,
        Descriptors.MutableSharedType,
    ];

    /// <inheritdoc/>
    public override void Initialize(AnalysisContext context)
    {
        context.ConfigureGeneratedCodeAnalysis(GeneratedCodeAnalysisFlags.None);
        context.EnableConcurrentExecution();
        context.RegisterSymbolAction(AnalyzeProperty, SymbolKind.Property);
    }

    private static void AnalyzeProperty(SymbolAnalysisContext context)
    {
        var property = (IPropertySymbol)context.Symbol;
        if (property.PartialDefinitionPart is not null)
        {
            // An implementation part: its definition part is analyzed (attributes of both parts are merged there).
            return;
        }

        var (sessionState, shared) = PropertyValidator.GetKinds(property);
        if (!sessionState && !shared)
        {
            return;
        }

        var problems = new List<PropertyProblem>();
        PropertyValidator.Validate(property, sessionState, shared, includeWarnings: true, problems, context.CancellationToken);
        if (problems.Count == 0)
        {
            return;
        }

        var location = GetLocation(property);
        foreach (var problem in problems)
        {
            context.ReportDiagnostic(Diagnostic.Create(problem.Descriptor, location, problem.Arguments));
        }
    }

    private static Location GetLocation(IPropertySymbol property)
    {
        foreach (var location in property.Locations)
        {
            if (location.IsInSource && location.SourceTree is { } tree && !KnownSymbols.IsGeneratedByUs(tree))
            {
                return location;
            }
        }

        return property.Locations.IsEmpty ? Location.None : property.Locations[0];
    }
}
