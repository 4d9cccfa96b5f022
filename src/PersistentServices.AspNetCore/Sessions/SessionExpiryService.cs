using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Sessions;

/// <summary>
/// Ends sessions that expired, releasing their slots and memory: a session idle for longer than
/// <see cref="PersistentServicesOptions.SessionIdleRetention"/>, and one that never received a request within
/// <see cref="PersistentServicesOptions.UnusedSessionRetention"/> (so a flood of starts holds slots for minutes, not an
/// hour). Sweeps every tenth of the shorter retention (at least every second, at most every minute). An end is logged
/// (not forced: if it is lost in a crash, the recovered session is as old as before and expires again). Each sweep also
/// notes when the next session will expire, which is what a <c>429</c>'s <c>Retry-After</c> says. Time comes from the
/// injected <see cref="TimeProvider"/>.
/// </summary>
internal sealed partial class SessionExpiryService(PersistentRuntime runtime, ILogger<SessionExpiryService> logger) : BackgroundService
{
    // When this process began to count retention. Read-only requests keep a session alive (they set its LastActivity) but
    // are not logged, so after a restart a never-used session may have been in use a moment ago: it gets its whole
    // UnusedSessionRetention again from here.
    private readonly DateTimeOffset _started = runtime.Time.GetUtcNow();

    private long _lastSweepTicks;
    private long _nextExpiryTicks = long.MaxValue;

    /// <summary>Time between two sweeps.</summary>
    public TimeSpan Period
    {
        get
        {
            var options = runtime.Options;
            var shorter = options.UnusedSessionRetention < options.SessionIdleRetention ? options.UnusedSessionRetention : options.SessionIdleRetention;
            return TimeSpan.FromTicks(Math.Clamp(shorter.Ticks / 10, TimeSpan.TicksPerSecond, TimeSpan.TicksPerMinute));
        }
    }

    /// <summary>Ends every expired session; returns how many ended.</summary>
    public int ExpireIdleSessions()
    {
        if (!runtime.Availability.CanServe(RequestKind.BackgroundWork))
        {
            return 0;
        }

        var now = runtime.Time.GetUtcNow();
        var idle = runtime.Options.SessionIdleRetention;
        var unused = runtime.Options.UnusedSessionRetention;
        var next = DateTimeOffset.MaxValue;
        int expiredUnused = 0, expiredIdle = 0;
        foreach (var session in runtime.Sessions.Enumerate())
        {
            var expiresAt = session.ExpiresAt(idle, unused);
            if (session.NeverUsed && expiresAt < _started + unused)
            {
                expiresAt = _started + unused;
            }

            // Quarantined sessions (their replay diverged) expire like idle ones, so their records stop holding the log back.
            // Key sessions (Idempotency-Key) keep their own retention: ending one here would forget its key (Http/IdempotencyKeys/);
            // when one will be forgotten counts for Retry-After all the same.
            if (Http.IdempotencyKeys.IdempotencyKey.IsKeySession(session))
            {
                if (KeyForgottenAt(session) is var forgotten && forgotten < next && !session.Ended)
                {
                    next = forgotten;
                }

                continue;
            }

            var mayEnd = session.Ready.IsCompletedSuccessfully || session.Diverged is not null;
            var neverUsed = session.NeverUsed;
            if (!mayEnd || now < expiresAt || !session.TryEnd())
            {
                if (expiresAt < next && !session.Ended)
                {
                    next = expiresAt;
                }

                continue;
            }

            try
            {
                // No log: a fenced primary closed it meanwhile to rejoin as a replica (docs/replication.md, "Demotion").
                SessionRecords.AppendEnded(runtime.OpenLog ?? throw new LogFaultedException("The log is closed."), session, SessionEndReason.Expired, now);
            }
            catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
            {
                break;
            }

            runtime.Sessions.Remove(session.Id);
            SessionExpired(logger, session.TraceTag, neverUsed ? "never used" : "idle");
            if (neverUsed)
            {
                expiredUnused++;
            }
            else
            {
                expiredIdle++;
            }
        }

        Volatile.Write(ref _nextExpiryTicks, next == DateTimeOffset.MaxValue ? long.MaxValue : next.UtcTicks);
        Volatile.Write(ref _lastSweepTicks, now.UtcTicks);
        if (expiredUnused + expiredIdle > 0)
        {
            runtime.Metrics.SessionsExpired.Add(expiredUnused, new KeyValuePair<string, object?>("kind", "never_used"));
            runtime.Metrics.SessionsExpired.Add(expiredIdle, new KeyValuePair<string, object?>("kind", "idle"));
            Swept(logger, expiredUnused, expiredIdle, runtime.Sessions.Count);
        }

        return expiredUnused + expiredIdle;
    }

    /// <summary>A session started: it may be the next to expire (when no other session was live at the last sweep).</summary>
    public void NoteStarted(Session session)
    {
        var expiresAt = session.ExpiresAt(runtime.Options.SessionIdleRetention, runtime.Options.UnusedSessionRetention).UtcTicks;
        var next = Volatile.Read(ref _nextExpiryTicks);
        while (expiresAt < next)
        {
            var seen = Interlocked.CompareExchange(ref _nextExpiryTicks, expiresAt, next);
            if (seen == next)
            {
                return;
            }

            next = seen;
        }
    }

    /// <summary>
    /// Seconds until a slot really frees by expiry, for <c>Retry-After</c>: until the sweep that ends the earliest-expiring
    /// session (of <paramref name="owner"/> when given, else of the service), as the last sweep saw them. At least 1. A
    /// client ending its session (<c>DELETE</c>) frees one sooner.
    /// </summary>
    public long RetryAfterSeconds(DateTimeOffset now, byte[]? owner = null)
    {
        long expiry;
        if (owner is null)
        {
            expiry = Volatile.Read(ref _nextExpiryTicks);
        }
        else
        {
            var idle = runtime.Options.SessionIdleRetention;
            var unused = runtime.Options.UnusedSessionRetention;
            expiry = long.MaxValue;
            foreach (var session in runtime.Sessions.SessionsOf(owner))
            {
                var at = Http.IdempotencyKeys.IdempotencyKey.IsKeySession(session) ? KeyForgottenAt(session) : session.ExpiresAt(idle, unused);
                if (at != DateTimeOffset.MaxValue)
                {
                    expiry = Math.Min(expiry, at.UtcTicks);
                }
            }
        }

        var period = Period.Ticks;
        var lastSweep = Volatile.Read(ref _lastSweepTicks);
        if (lastSweep == 0)
        {
            lastSweep = now.UtcTicks;
        }

        long freesAt;
        if (expiry == long.MaxValue)
        {
            freesAt = lastSweep + period;
        }
        else
        {
            // The first sweep at or after the expiry (sweeps run every period from the last one).
            var periods = expiry <= lastSweep ? 1 : (expiry - lastSweep + period - 1) / period;
            freesAt = lastSweep + periods * period;
        }

        return Math.Max(1, (long)Math.Ceiling(TimeSpan.FromTicks(freesAt - now.UtcTicks).TotalSeconds));
    }

    /// <summary>When a key session's slot frees: its key is forgotten after both retentions (never, with an infinite one).</summary>
    private DateTimeOffset KeyForgottenAt(Session session)
    {
        var keys = runtime.Options.IdempotencyKeys;
        if (Http.IdempotencyKeys.IdempotencyKey.IsGatewayKeySession(session))
        {
            return session.LastActivity + keys.GatewayKeyRetention;
        }

        return keys.ExpiredKeyRetention == Timeout.InfiniteTimeSpan ? DateTimeOffset.MaxValue : session.LastActivity + keys.Retention + keys.ExpiredKeyRetention;
    }

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        using var timer = new PeriodicTimer(Period, runtime.Time);
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false))
            {
                ExpireIdleSessions();
            }
        }
        catch (OperationCanceledException)
        {
        }
    }

    [LoggerMessage(1120, LogLevel.Debug, "Ended session {SessionTag} (expired: {Kind})")]
    private static partial void SessionExpired(ILogger logger, string sessionTag, string kind);

    [LoggerMessage(1121, LogLevel.Information, "Expired {NeverUsed} never-used and {Idle} idle sessions; {Live} live")]
    private static partial void Swept(ILogger logger, int neverUsed, int idle, int live);
}
