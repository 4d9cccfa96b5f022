using PersistentServices.Log;

namespace PersistentServices.Tests.Log;

/// <summary>The log thread's wake-up: no set is lost, a set before the wait is kept, and each wait consumes one set.</summary>
public sealed class ThreadSignalTests
{
    [Fact]
    public void IsAFutex_OnLinux()
    {
        using var signal = new ThreadSignal();
        Assert.Equal(OperatingSystem.IsLinux(), signal.IsFutex);
    }

    [Fact]
    public void Set_BeforeWait_IsKept_AndConsumedByOneWait()
    {
        using var signal = new ThreadSignal();
        signal.Set();
        signal.Set();
        signal.Wait(); // returns at once: set before

        var second = new Thread(signal.Wait) { IsBackground = true };
        second.Start();
        Assert.False(second.Join(200), "two sets before a wait count once (auto-reset): a second wait must block");
        signal.Set();
        Assert.True(second.Join(TimeSpan.FromSeconds(10)), "the set must wake the waiting thread");
    }

    [Fact]
    public void PingPong_BetweenTwoThreads_LosesNoWakeUp()
    {
        // Two threads hand a turn back and forth 50,000 times, each waking the other: one lost wake-up hangs both.
        const int Rounds = 50_000;
        using var ping = new ThreadSignal();
        using var pong = new ThreadSignal();
        var counted = 0;
        var other = new Thread(() =>
        {
            for (var i = 0; i < Rounds; i++)
            {
                ping.Wait();
                counted++;
                pong.Set();
            }
        }) { IsBackground = true };
        var first = new Thread(() =>
        {
            for (var i = 0; i < Rounds; i++)
            {
                ping.Set();
                pong.Wait();
            }
        }) { IsBackground = true };
        other.Start();
        first.Start();

        // Bounded: a lost wake-up leaves both threads asleep, and the test fails instead of hanging.
        Assert.True(first.Join(TimeSpan.FromSeconds(30)), "a wake-up was lost");
        Assert.True(other.Join(TimeSpan.FromSeconds(30)));
        Assert.Equal(Rounds, counted);
    }

    [Fact]
    public void ManySetters_OneWaiter_EveryBurstWakesIt()
    {
        // Four threads set while the waiter drains a shared counter: each burst of sets must be seen by a later wait.
        using var signal = new ThreadSignal();
        long produced = 0;
        long consumed = 0;
        const int PerSetter = 20_000;
        var setters = Enumerable.Range(0, 4).Select(_ => new Thread(() =>
        {
            for (var i = 0; i < PerSetter; i++)
            {
                Interlocked.Increment(ref produced);
                signal.Set();
            }
        }) { IsBackground = true }).ToList();
        var waiter = new Thread(() =>
        {
            while (Interlocked.Read(ref consumed) < 4 * PerSetter)
            {
                signal.Wait();
                Interlocked.Exchange(ref consumed, Interlocked.Read(ref produced));
            }
        }) { IsBackground = true };
        waiter.Start();
        setters.ForEach(t => t.Start());
        setters.ForEach(t => t.Join());
        Assert.True(waiter.Join(TimeSpan.FromSeconds(30)), "the waiter missed the last set");
        Assert.Equal(4 * PerSetter, Interlocked.Read(ref consumed));
    }
}
