using PersistentServices.Replication;
using static PersistentServices.Replication.LogShipper;

namespace PersistentServices.AspNetCore.Tests.Replication;

/// <summary>
/// How a primary catches a replica up, or refuses to touch it (docs/replication.md, "Catching up", "Which log wins"):
/// never a reset of bytes of the primary's own term that it lacks, nor by a log created at this start; a reset of an
/// older primary's unacknowledged history, and of a replica behind the begin whatever its term.
/// </summary>
public sealed class CatchUpDecisionTests
{
    private static ShipmentResult Replica(long contentTerm) => new(ShipmentOutcome.Position, Term: 3, contentTerm, Begin: 64, DurableUntil: 10_000, TailChecksum: 1);

    [Theory]
    [InlineData("Same", 3, false, "Partial")] // a replica that was away: the suffix
    [InlineData("Same", 2, false, "Partial")] // the old primary's prefix this term continues
    [InlineData("BelowBegin", 3, false, "Total")] // behind the begin, of this very term: reset is safe
    [InlineData("BelowBegin", 2, false, "Total")]
    [InlineData("Different", 2, false, "Total")] // an older primary's history past the fork
    [InlineData("Ahead", 2, false, "Total")]
    [InlineData("Different", 3, false, "Refuse")] // this term's bytes this primary lacks: it lost them
    [InlineData("Ahead", 3, false, "Refuse")]
    [InlineData("Ahead", 2, true, "Refuse")] // a log created at this start never replaces a replica's
    [InlineData("Different", 1, true, "Refuse")]
    public void Decide_ForAPrimaryOfTerm3(string tail, long replicaContentTerm, bool primaryLogNew, string expected)
        => Assert.Equal(Enum.Parse<CatchUp>(expected), Decide(Replica(replicaContentTerm), Enum.Parse<TailComparison>(tail), term: 3, primaryLogNew));
}
