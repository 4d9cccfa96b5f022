using PersistentServices.Sessions;

namespace PersistentServices.Tests.Sessions;

public sealed class SessionTableTests
{
    private static readonly DateTimeOffset Now = new(2026, 11, 24, 12, 0, 0, TimeSpan.Zero);
    private static readonly byte[] Anonymous = [];

    private static Session NewSession(byte[]? owner = null) => new(SessionId.NewRandom(), owner ?? Anonymous, Now, replaying: false);

    private static BufferedReply Reply(int bodyBytes) => new(200, [new("Content-Type", ["application/json"])], new byte[bodyBytes]);

    [Fact]
    public async Task TryReserve_ConcurrentStarts_NeverExceedTheCap()
    {
        var table = new SessionTable();
        var granted = 0;
        await Task.WhenAll(Enumerable.Range(0, 8).Select(_ => Task.Run(() =>
        {
            for (var i = 0; i < 1000; i++)
            {
                if (table.TryReserve(Anonymous, 100, null) == StartRefusal.None)
                {
                    Interlocked.Increment(ref granted);
                    Assert.True(table.TryAddReserved(NewSession()));
                }
            }
        }, TestContext.Current.CancellationToken)));

        Assert.Equal(100, granted);
        Assert.Equal(100, table.Count);
        Assert.Equal(100, table.Slots);
        Assert.Equal(StartRefusal.ServiceFull, table.TryReserve(Anonymous, 100, null));
    }

    [Fact]
    public void TryReserve_PerOwnerCap_CountsReservationsAndLiveSessions_AndReleasesOnEndOrFailure()
    {
        var table = new SessionTable();
        byte[] alice = [.. Enumerable.Repeat((byte)1, 32)];
        byte[] bob = [.. Enumerable.Repeat((byte)2, 32)];

        Assert.Equal(StartRefusal.None, table.TryReserve(alice, 10, 2));
        var first = NewSession(alice);
        Assert.True(table.TryAddReserved(first));
        Assert.Equal(StartRefusal.None, table.TryReserve(alice, 10, 2));
        Assert.Equal(StartRefusal.OwnerFull, table.TryReserve(alice, 10, 2));
        Assert.Equal(StartRefusal.None, table.TryReserve(bob, 10, 2));
        Assert.Equal(StartRefusal.None, table.TryReserve(Anonymous, 10, 2));
        Assert.Equal(4, table.Slots);

        table.ReleaseReserved(alice);
        Assert.Equal(1, table.CountOf(alice));
        Assert.Equal(StartRefusal.None, table.TryReserve(alice, 10, 2));
        table.ReleaseReserved(alice);
        table.Remove(first.Id);
        Assert.Equal(0, table.CountOf(alice));
        Assert.Empty(table.SessionsOf(alice));
        Assert.Equal(2, table.Slots);
    }

    [Fact]
    public void NeverUsed_CountsSessionsUntilTheirFirstRequest()
    {
        var table = new SessionTable();
        var session = NewSession();
        table.TryAdd(session);
        table.TryAdd(NewSession());
        Assert.Equal(2, table.NeverUsed);

        Assert.Equal(AdmitOutcome.Execute, session.Admit(1, new byte[32]).Outcome);
        Assert.Equal(1, table.NeverUsed);
        table.Remove(session.Id);
        Assert.Equal(1, table.NeverUsed);
    }

    [Fact]
    public void HeldBytes_FollowTheLastReply_ReservedBeforeItIsLogged_ReleasedWhenReplacedOrEnded()
    {
        var table = new SessionTable(new SessionMemory(budgetBytes: 10_000, maxBufferedReplyBytes: 4_000));
        var session = NewSession();
        table.TryAdd(session);

        session.Admit(1, [1]);
        var small = Reply(1000);
        Assert.True(session.TryHoldInMemory(small, out _));
        Assert.Equal(small.MemoryBytes, table.Memory.HeldBytes);
        session.Complete(small);
        Assert.Equal(small.MemoryBytes, table.Memory.HeldBytes);
        Assert.Equal(small.MemoryBytes, session.HeldBytes);

        // Too large for memory: logged in full, held as its location only.
        session.Admit(2, [2]);
        Assert.Equal(0, table.Memory.HeldBytes);
        var large = Reply(5000);
        Assert.False(session.TryHoldInMemory(large, out var reason));
        Assert.Equal("size", reason);
        large.Location = new ReplyLocation(4096, 4096);
        session.Complete(large);
        Assert.True(session.LastReply!.InLog);
        Assert.Equal(0, table.Memory.HeldBytes);

        // An abandoned request gives its reservation back.
        session.Admit(3, [3]);
        Assert.True(session.TryHoldInMemory(Reply(2000), out _));
        session.Abandon(new InvalidOperationException("log faulted"));
        Assert.Equal(0, table.Memory.HeldBytes);
    }

    [Fact]
    public void TryReserve_OverTheBudget_IsRefusedWithReasonBudget()
    {
        var memory = new SessionMemory(budgetBytes: 5_000, maxBufferedReplyBytes: 4_000);
        Assert.True(memory.TryReserve(3_000, out _));
        Assert.False(memory.TryReserve(3_000, out var reason));
        Assert.Equal("budget", reason);
        memory.Release(3_000);
        Assert.True(memory.TryReserve(3_000, out _));
        Assert.Equal(1, memory.LoggedInFull);
    }

    [Fact]
    public void Remove_ReleasesTheSessionsHeldBytes()
    {
        var table = new SessionTable(new SessionMemory(10_000, 4_000));
        var session = NewSession();
        table.TryAdd(session);
        session.Admit(1, [1]);
        var reply = Reply(1000);
        session.TryHoldInMemory(reply, out _);
        session.Complete(reply);
        Assert.True(table.Memory.HeldBytes > 0);

        Assert.True(session.TryEnd());
        table.Remove(session.Id);
        Assert.Equal(0, table.Memory.HeldBytes);
    }
}
