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

    /// <summary>With a cut point known (the primary's term history), an older primary's tail is cut back; nothing else changes.</summary>
    [Theory]
    [InlineData("Different", 2, false, "Cut")] // the old primary's unacknowledged tail past where term 3 began: cut back, not reset
    [InlineData("Ahead", 2, false, "Cut")]
    [InlineData("Different", 1, false, "Cut")]
    [InlineData("Same", 2, false, "Partial")]
    [InlineData("BelowBegin", 2, false, "Total")]
    [InlineData("Different", 3, false, "Refuse")] // the refusal comes first: this term's bytes are never cut away either
    [InlineData("Ahead", 3, false, "Refuse")]
    [InlineData("Different", 2, true, "Refuse")]
    public void Decide_WithACutPoint_ForAPrimaryOfTerm3(string tail, long replicaContentTerm, bool primaryLogNew, string expected)
        => Assert.Equal(Enum.Parse<CatchUp>(expected), Decide(Replica(replicaContentTerm), Enum.Parse<TailComparison>(tail), term: 3, primaryLogNew, cut: 6000));

    /// <summary>The cut point is where the first term after the replica's content term began in the primary's log, when both logs hold it and the replica holds more.</summary>
    [Theory]
    [InlineData(2, 64, 20_000, 6000L)] // term 3 began at 6000 here; the replica (of term 2) holds [64, 10000)
    [InlineData(1, 64, 20_000, 4000L)] // term 2 began at 4000: a replica of term 1 is cut there
    [InlineData(3, 64, 20_000, null)] // no term after 3 here
    [InlineData(2, 7000, 20_000, null)] // this log begins after the cut point: what is below it is not here to compare
    [InlineData(2, 64, 5000, null)] // this log ends before it (cannot be: a term begins inside its log)
    [InlineData(2, 6000, 20_000, null)] // the cut point at this log's begin: no byte below it to compare
    public void CutPoint_IsWhereTheNextTermBegan(long replicaContentTerm, long primaryBegin, long primaryEnd, long? expected)
    {
        var history = TermHistory.Of(new TermStart(1, 64), new TermStart(2, 4000), new TermStart(3, 6000));
        Assert.Equal(expected, CutPoint(history, Replica(replicaContentTerm), primaryBegin, primaryEnd));
    }

    [Fact]
    public void CutPoint_IsNone_WhenTheReplicaEndsAtOrBeforeIt_OrBeginsAfterIt()
    {
        var history = TermHistory.Of(new TermStart(1, 64), new TermStart(3, 6000));
        Assert.Null(CutPoint(history, Replica(2) with { DurableUntil = 6000 }, 64, 20_000));
        Assert.Null(CutPoint(history, Replica(2) with { Begin = 6500 }, 64, 20_000));
        Assert.Null(CutPoint(TermHistory.Empty, Replica(2), 64, 20_000));
        Assert.Equal(6000, CutPoint(history, Replica(2) with { Begin = 5800 }, 64, 20_000)); // 200 bytes below it to compare
    }
}
