namespace PersistentServices.AspNetCore.Tests.TestSupport;

/// <summary>
/// A clock that moves only when a test moves it: <see cref="TimeProvider.GetUtcNow"/>, <see cref="TimeProvider.GetTimestamp"/>
/// and the timers it creates (<c>Task.WaitAsync(timeout, time)</c>, <c>Task.Delay(…, time)</c>) all follow
/// <see cref="Advance"/>. For timeouts a test must pass deterministically (<see cref="FakeTimeProvider"/> drives no timers).
/// </summary>
internal sealed class ManualTimeProvider(DateTimeOffset start) : TimeProvider
{
    private readonly Lock _gate = new();
    private readonly List<ManualTimer> _timers = [];
    private TimeSpan _elapsed;

    public override DateTimeOffset GetUtcNow()
    {
        lock (_gate)
        {
            return start + _elapsed;
        }
    }

    public override long TimestampFrequency => TimeSpan.TicksPerSecond;

    public override long GetTimestamp()
    {
        lock (_gate)
        {
            return _elapsed.Ticks;
        }
    }

    /// <summary>Timers waiting to fire (a test waits for a wait to have begun before it moves the clock).</summary>
    public int PendingTimers
    {
        get
        {
            lock (_gate)
            {
                return _timers.Count(t => t.Due is not null);
            }
        }
    }

    public override ITimer CreateTimer(TimerCallback callback, object? state, TimeSpan dueTime, TimeSpan period)
    {
        var timer = new ManualTimer(this, callback, state);
        timer.Change(dueTime, period);
        return timer;
    }

    /// <summary>Moves the clock on; every timer due by then fires (on the caller's thread).</summary>
    public void Advance(TimeSpan by)
    {
        List<ManualTimer> due;
        lock (_gate)
        {
            _elapsed += by;
            due = [.. _timers.Where(t => t.Due <= _elapsed)];
            foreach (var timer in due)
            {
                timer.Due = timer.Period is { } period && period > TimeSpan.Zero && period != Timeout.InfiniteTimeSpan ? _elapsed + period : null;
            }
        }

        foreach (var timer in due)
        {
            timer.Fire();
        }
    }

    private sealed class ManualTimer(ManualTimeProvider clock, TimerCallback callback, object? state) : ITimer
    {
        public TimeSpan? Due { get; set; }

        public TimeSpan? Period { get; private set; }

        public bool Change(TimeSpan dueTime, TimeSpan period)
        {
            lock (clock._gate)
            {
                if (!clock._timers.Contains(this))
                {
                    clock._timers.Add(this);
                }

                Due = dueTime == Timeout.InfiniteTimeSpan ? null : clock._elapsed + dueTime;
                Period = period;
            }

            return true;
        }

        public void Fire() => callback(state);

        public void Dispose()
        {
            lock (clock._gate)
            {
                clock._timers.Remove(this);
            }
        }

        public ValueTask DisposeAsync()
        {
            Dispose();
            return default;
        }
    }
}
