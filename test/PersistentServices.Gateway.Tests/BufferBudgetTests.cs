using System.Net;

namespace PersistentServices.Gateway.Tests;

/// <summary>The bodies kept for resending: a total bound and one share per client address.</summary>
public sealed class BufferBudgetTests
{
    private static readonly IPAddress A = IPAddress.Parse("10.0.0.1");
    private static readonly IPAddress B = IPAddress.Parse("10.0.0.2");

    [Fact]
    public void OneClient_StopsAtItsShare_AnotherClientIsStillServed()
    {
        var budget = new BufferBudget(total: 1000, perClient: 300);

        Assert.Equal(BufferBudget.Refusal.None, budget.TryTake(A, 200));
        Assert.Equal(BufferBudget.Refusal.Client, budget.TryTake(A, 200));
        Assert.Equal(BufferBudget.Refusal.None, budget.TryTake(B, 300));
        Assert.Equal(500, budget.Held);

        budget.Return(A, 200);
        Assert.Equal(BufferBudget.Refusal.None, budget.TryTake(A, 300));
    }

    [Fact]
    public void TheTotal_BindsBeforeTheShares()
    {
        var budget = new BufferBudget(total: 500, perClient: 300);
        Assert.Equal(BufferBudget.Refusal.None, budget.TryTake(A, 300));
        Assert.Equal(BufferBudget.Refusal.None, budget.TryTake(B, 200));

        Assert.Equal(BufferBudget.Refusal.Total, budget.TryTake(IPAddress.Parse("10.0.0.3"), 1));
    }

    [Fact]
    public void EmptyBodies_TakeNothing_AndAClientHoldingNothingIsForgotten()
    {
        var budget = new BufferBudget(total: 100, perClient: 100);
        Assert.Equal(BufferBudget.Refusal.None, budget.TryTake(A, 0));
        Assert.Equal(0, budget.Clients);

        Assert.Equal(BufferBudget.Refusal.None, budget.TryTake(A, 60));
        Assert.Equal(1, budget.Clients);
        budget.Return(A, 60);
        Assert.Equal((0L, 0), (budget.Held, budget.Clients));
    }

    [Fact]
    public void AnIPv6Client_IsCountedByIts64_AndAMappedIPv4ClientAsItsIPv4Address()
    {
        var budget = new BufferBudget(total: 1000, perClient: 100);
        Assert.Equal(BufferBudget.Refusal.None, budget.TryTake(IPAddress.Parse("2001:db8:1:2::1"), 100));
        Assert.Equal(BufferBudget.Refusal.Client, budget.TryTake(IPAddress.Parse("2001:db8:1:2:ffff::9"), 1)); // same /64
        Assert.Equal(BufferBudget.Refusal.None, budget.TryTake(IPAddress.Parse("2001:db8:1:3::1"), 100));   // next /64

        Assert.Equal(BufferBudget.Refusal.None, budget.TryTake(A, 100));
        Assert.Equal(BufferBudget.Refusal.Client, budget.TryTake(A.MapToIPv6(), 1));
        Assert.NotEqual(BufferBudget.Key(IPAddress.IPv6Loopback), BufferBudget.Key(IPAddress.Parse("0.0.0.0")));
        Assert.NotEqual(BufferBudget.Key(null), BufferBudget.Key(A));
    }
}
