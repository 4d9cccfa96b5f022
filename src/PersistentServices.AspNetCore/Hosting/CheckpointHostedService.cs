using System.Diagnostics;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Log;

namespace PersistentServices.Hosting;

/// <summary>
/// Takes the service checkpoints (docs/checkpoints.md): one whenever <see cref="PersistentServicesOptions.ServiceCheckpointInterval"/>
/// passed and the log grew, or the log grew <see cref="PersistentServicesOptions.ServiceCheckpointLogBytes"/>; each moves
/// the anchor and truncates the log. And drains the service when the host stops (SIGTERM): from
/// <see cref="IHostApplicationLifetime.ApplicationStopping"/> on, new persistent, read-only and session requests get 503
/// with <c>Retry-After</c>; persistent requests already running finish; then every session and shared variable is
/// checkpointed and a clean-shutdown service checkpoint is forced, so the next start, whatever its code, replays
/// nothing. All within the host's shutdown timeout (<c>HostOptions.ShutdownTimeout</c>, 30 s by default, like
/// Kubernetes' default grace period).
/// </summary>
internal sealed partial class CheckpointHostedService(PersistentRuntime runtime, ServiceAvailability availability, IHostApplicationLifetime lifetime, ILogger<CheckpointHostedService> logger) : BackgroundService
{
    private static readonly TimeSpan Poll = TimeSpan.FromSeconds(1);

    public override Task StartAsync(CancellationToken cancellationToken)
    {
        lifetime.ApplicationStopping.Register(availability.BeginDrain);
        return base.StartAsync(cancellationToken);
    }

    public override async Task StopAsync(CancellationToken cancellationToken)
    {
        if (runtime.IsDisposed)
        {
            // Stopped after the host was disposed (WebApplicationFactory does that): the log is closed, nothing to drain.
            return;
        }

        // Calls of running requests are retried while the drain waits for them; when the shutdown timeout ends it (or there
        // was nothing to drain), they stop, and their requests are finished after the restart.
        using var timedOut = cancellationToken.Register(availability.AbandonCalls);
        try
        {
            availability.BeginDrain();
            await base.StopAsync(cancellationToken).ConfigureAwait(false);
            await DrainAsync(cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            availability.AbandonCalls();
        }
    }

    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        var options = runtime.Options;
        var lastAt = runtime.Time.GetTimestamp();
        var lastTail = -1L;
        Checkpoints.ServiceCheckpointer? lastCheckpointer = null;
        using var timer = new PeriodicTimer(Poll, runtime.Time);
        try
        {
            while (await timer.WaitForNextTickAsync(stoppingToken).ConfigureAwait(false))
            {
                // No log or checkpointer: not open yet, or a fenced primary closed them to rejoin as a replica (docs/replication.md, "Demotion").
                if (!availability.CanServe(RequestKind.BackgroundWork) || runtime.OpenLog is not { } log || runtime.OpenCheckpointer is not { } checkpointer)
                {
                    continue;
                }

                if (!ReferenceEquals(checkpointer, lastCheckpointer))
                {
                    // What was logged since recovery's own checkpoint counts (not only what follows the first tick): requests
                    // served in the first second would otherwise wait for the log to grow again before any checkpoint. A
                    // demoted primary promoted again opened its log anew: counted from that recovery's checkpoint.
                    lastCheckpointer = checkpointer;
                    lastTail = checkpointer.TailAfterCheckpoint;
                }

                var grown = log.TailAddress - lastTail;
                if (grown >= options.ServiceCheckpointLogBytes || (grown > 0 && runtime.Time.GetElapsedTime(lastAt) >= options.ServiceCheckpointInterval))
                {
                    lastTail = log.TailAddress;
                    lastAt = runtime.Time.GetTimestamp();
                    await TakeAsync(checkpointer, stoppingToken).ConfigureAwait(false);
                }
            }
        }
        catch (OperationCanceledException) when (stoppingToken.IsCancellationRequested)
        {
        }
    }

    private async Task TakeAsync(Checkpoints.ServiceCheckpointer checkpointer, CancellationToken cancellationToken)
    {
        try
        {
            await checkpointer.TakeAsync(cleanShutdown: false, cancellationToken).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException or IOException)
        {
            // A fault of the log is the runtime's to report (503, unhealthy); the anchor still names the previous checkpoint.
            CheckpointFailed(logger, ex);
        }
    }

    private async Task DrainAsync(CancellationToken cancellationToken)
    {
        if (availability.Stage != RecoveryStage.Draining || availability.LogFault is not null)
        {
            return;
        }

        var started = Stopwatch.GetTimestamp();
        try
        {
            while (availability.Executing > 0)
            {
                await Task.Delay(10, cancellationToken).ConfigureAwait(false);
            }

            // Sessions still replaying after a restart (a SIGTERM soon after a crash: a rolling upgrade's, or a restarter's)
            // finish their replay first: the checkpoint below skips a session that is not ready, and the next start, of
            // another build perhaps, would replay its requests (the bookstore's kills and upgrades saw five sessions diverge
            // so). Their calls are still retried while the host drains.
            var replaying = runtime.Sessions.All.Where(s => !s.Ready.IsCompleted).Select(s => s.Ready).ToList();
            if (replaying.Count > 0)
            {
                await Task.WhenAll(replaying).WaitAsync(cancellationToken).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
                cancellationToken.ThrowIfCancellationRequested();
            }

            var result = await runtime.Checkpointer.CheckpointEverythingAsync(cancellationToken).ConfigureAwait(false);
            Drained(logger, result.Sessions, result.Variables, result.Lsn, (long)Stopwatch.GetElapsedTime(started).TotalMilliseconds);
        }
        catch (OperationCanceledException)
        {
            DrainTimedOut(logger, availability.Executing, (long)Stopwatch.GetElapsedTime(started).TotalMilliseconds);
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException or IOException)
        {
            CheckpointFailed(logger, ex);
        }
    }

    [LoggerMessage(1391, LogLevel.Information,
        "Drained: every request finished; {Sessions} sessions and {Variables} shared variables checkpointed; clean-shutdown checkpoint at LSN {Lsn} ({ElapsedMs} ms). The next start replays nothing.")]
    private static partial void Drained(ILogger logger, int sessions, int variables, long lsn, long elapsedMs);

    [LoggerMessage(1392, LogLevel.Warning,
        "The host's shutdown timeout ended the drain after {ElapsedMs} ms with {Executing} persistent requests still running: nothing is lost, the next start replays what was not checkpointed")]
    private static partial void DrainTimedOut(ILogger logger, int executing, long elapsedMs);

    [LoggerMessage(1393, LogLevel.Error, "A service checkpoint failed; the anchor still names the previous one")]
    private static partial void CheckpointFailed(ILogger logger, Exception exception);
}
