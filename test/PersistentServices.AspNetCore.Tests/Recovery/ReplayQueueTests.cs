using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.Recovery;

public sealed class ReplayQueueTests
{
    private static Session NewSession() => new(SessionId.NewRandom(), [], DateTimeOffset.UnixEpoch, replaying: true);

    [Fact]
    public void TryTake_InLogOrder_ButASessionWhoseClientWaitsGoesFirst_AndEachSessionOnce()
    {
        var sessions = Enumerable.Range(0, 5).Select(_ => NewSession()).ToArray();
        var queue = new ReplayQueue(sessions);

        Assert.True(queue.TryTake(out var first));
        Assert.Same(sessions[0], first);
        queue.Prioritize(sessions[4]);
        queue.Prioritize(sessions[0]); // already replaying: nothing changes

        var order = new List<Session>();
        while (queue.TryTake(out var next))
        {
            order.Add(next);
        }

        Assert.Equal([sessions[4], sessions[1], sessions[2], sessions[3]], order);
    }

    [Fact]
    public void Prioritize_ASessionTheQueueDoesNotHold_IsNeverTaken()
    {
        // A session holding reservations replays on a thread of its own, outside the queue: its waiting client must not
        // make a worker replay it a second time beside the first (CI: a holder's requests executed twice, replay diverged).
        var queued = NewSession();
        var holder = NewSession();
        var queue = new ReplayQueue([queued]);

        queue.Prioritize(holder);

        Assert.True(queue.TryTake(out var taken));
        Assert.Same(queued, taken);
        Assert.False(queue.TryTake(out _));
    }
}
