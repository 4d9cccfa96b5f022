using System.Collections.Immutable;

namespace PersistentServices.Generators.Replay;

/// <summary>What one method's own body does: its findings and its calls into methods of the same compilation.</summary>
internal sealed class MethodFacts
{
    public MethodFacts(ImmutableArray<ReplayFinding> findings, ImmutableArray<CallEdge> edges)
    {
        Findings = findings;
        Edges = edges;
    }

    public ImmutableArray<ReplayFinding> Findings { get; }

    public ImmutableArray<CallEdge> Edges { get; }
}
