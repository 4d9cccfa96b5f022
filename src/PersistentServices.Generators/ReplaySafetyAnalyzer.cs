using System.Collections.Generic;
using System.Collections.Immutable;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.Diagnostics;
using Microsoft.CodeAnalysis.Operations;
using PersistentServices.Generators.Replay;

namespace PersistentServices.Generators;

/// <summary>
/// Reports what a replayed request cannot reproduce, in persistent code and in the methods of the same compilation it
/// calls (reported at the call, with the chain): PS0102 writes to memory that outlives the request and is not logged,
/// PS0201 nondeterministic APIs, PS0202 external input and process facts. What counts as persistent code and what
/// each rule detects: docs/diagnostics.md.
/// </summary>
[DiagnosticAnalyzer(LanguageNames.CSharp)]
public sealed class ReplaySafetyAnalyzer : DiagnosticAnalyzer
{
    /// <inheritdoc/>
    public override ImmutableArray<DiagnosticDescriptor> SupportedDiagnostics { get; } =
        [Descriptors.UnloggedState, Descriptors.NondeterministicApi, Descriptors.ExternalInput];

    /// <inheritdoc/>
    public override void Initialize(AnalysisContext context)
    {
        context.ConfigureGeneratedCodeAnalysis(GeneratedCodeAnalysisFlags.None);
        context.EnableConcurrentExecution();
        context.RegisterCompilationStartAction(static start =>
        {
            // One analysis per compilation: its caches (per method, per type, per tree) never outlive the compilation.
            var analysis = new ReplayAnalysis(start.Compilation);
            start.RegisterOperationAction(
                operationContext => AnalyzeOperation(operationContext, analysis),
                OperationKind.PropertyReference,
                OperationKind.FieldReference,
                OperationKind.MethodReference,
                OperationKind.Invocation,
                OperationKind.ObjectCreation,
                OperationKind.SimpleAssignment,
                OperationKind.CompoundAssignment,
                OperationKind.CoalesceAssignment,
                OperationKind.Increment,
                OperationKind.Decrement,
                OperationKind.DeconstructionAssignment,
                OperationKind.Argument);
        });
    }

    private static void AnalyzeOperation(OperationAnalysisContext context, ReplayAnalysis analysis)
    {
        var operation = context.Operation;
        if (!ReplayHazards.MayMatter(operation) || analysis.Persistent.GetContext(operation, context.ContainingSymbol) is not { } persistent)
        {
            return;
        }

        var findings = new List<ReplayFinding>();
        var edges = new List<CallEdge>();
        ReplayHazards.Classify(operation, analysis, new WriteScope(context.ContainingSymbol, persistent.Root), findings, edges, context.CancellationToken);

        foreach (var finding in findings)
        {
            // A write to a field of 'this' here is a write to the persistent object itself (a controller, created per
            // request); when that type is a singleton the write was already classified as such.
            if (finding.DependsOnReceiver || (persistent.ReadOnly && finding.IsExternalInput))
            {
                continue;
            }

            context.ReportDiagnostic(finding.CreateDiagnostic(finding.Location, string.Empty, useLocation: null));
        }

        foreach (var edge in edges)
        {
            if (analysis.IsFollowed(edge.Target))
            {
                ReportThroughCall(context, analysis, edge, persistent.ReadOnly);
            }
        }
    }

    /// <summary>Reports, at the call, the first finding of each rule reachable through it (and how many more there are).</summary>
    private static void ReportThroughCall(OperationAnalysisContext context, ReplayAnalysis analysis, CallEdge edge, bool readOnly)
    {
        var reach = analysis.GetReach(edge.Target, context.CancellationToken);
        if (reach.IsEmpty)
        {
            return;
        }

        var byRule = new Dictionary<string, (ReachedFinding First, HashSet<string> Keys)>();
        var order = new List<string>();
        foreach (var found in reach)
        {
            var reached = found;
            var finding = reached.Finding;
            if (finding.DependsOnReceiver)
            {
                if (edge.Receiver != ReceiverKind.Holder)
                {
                    continue;
                }

                finding = finding.ThroughHolder(edge.Holder!);
                reached = new ReachedFinding(finding, reached.Chain);
            }

            if (readOnly && finding.IsExternalInput)
            {
                continue;
            }

            var id = finding.Descriptor.Id;
            if (!byRule.TryGetValue(id, out var entry))
            {
                entry = (reached, new HashSet<string>());
                byRule.Add(id, entry);
                order.Add(id);
            }

            entry.Keys.Add(finding.Key);
        }

        var location = context.Operation.Syntax.GetLocation();
        foreach (var id in order)
        {
            var (first, keys) = byRule[id];
            var more = keys.Count - 1;
            var chain = first.ChainText + (more > 0 ? " (and " + more + " more through this call)" : string.Empty);
            context.ReportDiagnostic(first.Finding.CreateDiagnostic(location, chain, first.Finding.Location));
        }
    }
}
