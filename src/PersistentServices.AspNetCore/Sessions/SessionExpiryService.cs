using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Sessions;

/// <summary>
/// Ends sessions idle for longer than <see cref="PersistentServicesOptions.SessionIdleRetention"/>, releasing their
/// memory. The end is logged (not forced: if it is lost in a crash, the recovered session is idle as before and
/// expires again). Time comes from the injected <see cref="TimeProvider"/>.
/// </summary>
internal sealed class SessionExpiryService(PersistentRuntime runtime, ILogger<SessionExpiryService> logger) : BackgroundService
{
    /// <summary>Ends every idle session; returns how many ended.</summary>
    public int ExpireIdleSessions()
    {
        if (!runtime.IsAvailable)
        {
            return 0;
        }

        var now = runtime.Time.GetUtcNow();
        var retention = runtime.Options.SessionIdleRetention;
        var expired = 0;
        foreach (var session in runtime.Sessions.All)
        {
            // Quarantined sessions (their replay diverged) expire like idle ones, so their records stop holding the log back.
            // Key sessions (Idempotency-Key) keep their own retention: ending one here would forget its key (Http/IdempotencyKeys/).
            if (Http.IdempotencyKeys.IdempotencyKey.IsKeySession(session) ||
                (!session.Ready.IsCompletedSuccessfully && session.Diverged is null) || now - session.LastActivity < retention || !session.TryEnd())
            {
                continue;
            }

            try
            {
                SessionRecords.AppendEnded(runtime.Log, session, SessionEndReason.Expired, now);
            }
            catch (LogFaultedException)
            {
                return expired;
            }

            runtime.Sessions.Remove(session.Id);
            AspNetCoreEvents.SessionEnded(logger, session.TraceTag, "idle for longer than the retention");
            expired++;
        }

        return expired;
    }

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        var period = TimeSpan.FromTicks(Math.Clamp(runtime.Options.SessionIdleRetention.Ticks / 10, TimeSpan.TicksPerSecond, TimeSpan.TicksPerMinute));
        using var timer = new PeriodicTimer(period, runtime.Time);
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
}
