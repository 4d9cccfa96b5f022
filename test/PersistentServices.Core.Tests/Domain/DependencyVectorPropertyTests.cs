using FsCheck;
using FsCheck.Fluent;
using PersistentServices.Domain;

namespace PersistentServices.Tests.Domain;

/// <summary>
/// Properties of the DV rules ([MSP §3.1, §4]) over random vectors and recovered state numbers of a three-service domain
/// with a few epochs: merging is an item-wise maximum (commutative, associative, idempotent), never hides a dependency on
/// lost state, pruning drops only what is known durable, and a vector is an orphan exactly when one of its entries lies
/// beyond what its service recovered in that epoch.
/// </summary>
public sealed class DependencyVectorPropertyTests
{
    private static readonly string[] Services = ["A", "B", "C"];

    private static Gen<(string Service, StateId State)> Entry =>
        from service in Gen.Elements(Services)
        from epoch in Gen.Choose(1, 3)
        from lsn in Gen.Choose(64, 400)
        select (service, new StateId(epoch, lsn));

    private static Gen<DependencyVector> Vector =>
        Gen.ListOf(Entry).Select(entries => entries.Aggregate(DependencyVector.Empty, (dv, e) => dv.With(e.Service, e.State)));

    private static Gen<RecoveredStates> Recovered =>
        Gen.ListOf(Entry).Select(entries =>
        {
            var recovered = new RecoveredStates();
            foreach (var (service, state) in entries)
            {
                recovered.Learn(new RecoveredStateNumber(service, state));
            }

            return recovered;
        });

    private static HashSet<(string, long, long)> Set(DependencyVector dv) => [.. dv.Entries.Select(e => (e.Key, e.Value.Epoch, e.Value.Lsn))];

    private static void Check(Property property) => property.QuickCheckThrowOnFailure();

    [Fact]
    public void Merge_IsAnItemWiseMaximum_CommutativeAssociativeIdempotent()
        => Check(Prop.ForAll(Vector.ToArbitrary(), Vector.ToArbitrary(), Vector.ToArbitrary(), (a, b, c) =>
            Set(a.Merge(b)).SetEquals(Set(b.Merge(a))) &&
            Set(a.Merge(b).Merge(c)).SetEquals(Set(a.Merge(b.Merge(c)))) &&
            Set(a.Merge(a)).SetEquals(Set(a)) &&
            a.Entries.All(e => a.Merge(b).Entries.Any(m => m.Key == e.Key && m.Value.Epoch == e.Value.Epoch && m.Value.Lsn >= e.Value.Lsn))));

    [Fact]
    public void Merge_NeverHidesADependencyOnLostState_EvenAcrossEpochs()
        => Check(Prop.ForAll(Vector.ToArbitrary(), Vector.ToArbitrary(), Recovered.ToArbitrary(), (a, b, recovered) =>
            (recovered.FindOrphan(a.Merge(b)) is not null) == (recovered.FindOrphan(a) is not null || recovered.FindOrphan(b) is not null)));

    [Fact]
    public void Prune_DropsOnlyWhatIsKnownDurable_AndKeepsEveryOrphan()
        => Check(Prop.ForAll(Vector.ToArbitrary(), Recovered.ToArbitrary(), (dv, recovered) =>
        {
            var pruned = dv.Prune(recovered);
            var dropped = Set(dv).Except(Set(pruned));
            return (recovered.FindOrphan(pruned) is not null) == (recovered.FindOrphan(dv) is not null) &&
                   dropped.All(e => recovered.RecoveredLsn(e.Item1, e.Item2) is { } r && e.Item3 <= r) &&
                   Set(pruned).IsSubsetOf(Set(dv));
        }));

    [Fact]
    public void WithOwn_KeepsEveryOtherServicesEntries_AndOnlyTheOwnEntriesOfTheCurrentEpochAndLater()
        => Check(Prop.ForAll(Vector.ToArbitrary(), Entry.ToArbitrary(), (dv, own) =>
        {
            var result = dv.WithOwn(own.Service, own.State);
            var expected = Set(dv.With(own.Service, own.State)).Where(e => e.Item1 != own.Service || e.Item2 >= own.State.Epoch);
            return Set(result).SetEquals(expected);
        }));

    [Fact]
    public void WithOwn_OneEntryPerRestartNoMore_AVectorCarriedAcrossFiftyEpochsStaysSmall()
    {
        var dv = DependencyVector.Empty.With("B", new StateId(3, 700));
        for (var epoch = 1; epoch <= 50; epoch++)
        {
            dv = dv.WithOwn("A", new StateId(epoch, 100 * epoch)).WithOwn("A", new StateId(epoch, (100 * epoch) + 5));
        }

        Assert.Equal([("A", 50L, 5005L), ("B", 3L, 700L)], Set(dv).Order());
    }

    [Fact]
    public void FindOrphan_ExactlyWhenAnEntryLiesBeyondWhatItsServiceRecoveredInThatEpoch()
        => Check(Prop.ForAll(Vector.ToArbitrary(), Recovered.ToArbitrary(), (dv, recovered) =>
            (recovered.FindOrphan(dv) is not null) ==
            dv.Entries.Any(e => recovered.RecoveredLsn(e.Key, e.Value.Epoch) is { } r && e.Value.Lsn > r) &&
            recovered.All.All(n => dv.IsOrphan(n) == dv.Entries.Any(e => e.Key == n.Service && e.Value.Epoch == n.State.Epoch && e.Value.Lsn > n.State.Lsn))));

    [Fact]
    public void Header_RoundTripsEveryVector()
        => Check(Prop.ForAll(Vector.ToArbitrary(), dv =>
            DvHeader.Parse(DvHeader.Format(dv), Services.Length * DvHeader.MaxEntriesPerMember, s => Services.Contains(s), out _) is { } parsed &&
            Set(parsed).SetEquals(Set(dv))));

    [Theory]
    [InlineData("B=1.100,X=1.1", "not a service of this domain")]
    [InlineData("B=1", "malformed")]
    [InlineData("B=one.two", "malformed")]
    [InlineData("B=-1.100", "malformed")]
    [InlineData("B=1.-100", "malformed")]
    [InlineData("B=+1.100", "malformed")]
    [InlineData("B= 1.100", "malformed")]
    [InlineData("B=1.99999999999999999999", "malformed")]
    public void Header_RefusesWhatIsNotAVectorOfThisDomain(string text, string reason)
    {
        Assert.Null(DvHeader.Parse(text, 8, s => s is "A" or "B", out var error));
        Assert.Contains(reason, error, StringComparison.Ordinal);
    }

    [Fact]
    public void Header_RefusesMoreEntriesThanTheDomainAllows()
    {
        var text = string.Join(",", Enumerable.Range(1, 9).Select(e => $"A={e}.64"));
        Assert.Null(DvHeader.Parse(text, 8, _ => true, out var error));
        Assert.Contains("entries", error, StringComparison.Ordinal);
    }
}
