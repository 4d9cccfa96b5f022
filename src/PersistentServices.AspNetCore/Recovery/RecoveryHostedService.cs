using System.Diagnostics;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Sessions;

namespace PersistentServices.Recovery;

/// <summary>
/// MSP crash recovery (MSP §4.3, Fig. 12) as a hosted service. Before any request is served: open the log (verifying
/// it), run the analysis scan from the anchored service checkpoint, take a service checkpoint; the server starts
/// listening meanwhile, and the persistence middleware holds requests until this part is done. Once the
/// application has started: accept new sessions at once while the recovered sessions replay in parallel, a session
/// whose client waits first; a request of a session still replaying waits for it. A session whose replay diverges is
/// quarantined (<see cref="PersistentServicesOptions.OnDivergence"/>); a replay that cannot run, or a logged shared value
/// the code cannot read, stops the service with an error naming the session and LSN (fail-stop).
/// </summary>
internal sealed class RecoveryHostedService(
    PersistentRuntime runtime,
    ServiceAvailability availability,
    LogOpener opener,
    ReplayPipeline pipeline,
    SessionReplayer replayer,
    Quarantines quarantines,
    Replication.ReplicationNode replication,
    Replication.HotFollower follower,
    IHostApplicationLifetime lifetime,
    ILogger<RecoveryHostedService> logger,
    Testing.ReplayCheckRun? replayCheck = null) : IHostedLifecycleService, IDisposable
{
    private readonly CancellationTokenSource _stopping = new();
    private Task _replay = Task.CompletedTask;
    private Task _promotion = Task.CompletedTask;
    private Task _demotions = Task.CompletedTask;
    private int _disposed;

    /// <summary>Completes when every recovered session has replayed (or recovery failed).</summary>
    public Task Completion => _replay;

    public Task StartingAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    /// <summary>
    /// Returns at once: the server starts listening while recovery's first part (verification, the analysis scan) runs,
    /// and the persistence middleware holds every request until that part is done (<see cref="StartedAsync"/>).
    /// </summary>
    public Task StartAsync(CancellationToken cancellationToken)
    {
        if (runtime.CrashPoints.Armed is { } point)
        {
            AspNetCoreEvents.CrashPointArmed(logger, point, runtime.CrashPoints.HitsToPass);
        }

        _ = opener.StartOpening();
        return Task.CompletedTask;
    }

    /// <summary>
    /// After every hosted service's start (the server listens): waits for the analysis; the host is started after it. A
    /// replica (docs/replication.md) starts at once and recovers when it is promoted, in the background.
    /// </summary>
    public Task StartedAsync(CancellationToken cancellationToken)
    {
        if (replication.Enabled && replayCheck is null && !runtime.Domain.Enabled)
        {
            // A primary fenced by a newer term rejoins its group as a replica in this process (docs/replication.md, "Demotion").
            _demotions = Task.Run(DemoteWhenFencedAsync, CancellationToken.None);
        }

        if (!replication.WaitsForPromotion)
        {
            return RecoverAsync(cancellationToken);
        }

        WaitForPromotion();
        return Task.CompletedTask;
    }

    /// <summary>As a replica: its hot follower replays its copy as it arrives, and recovery runs once it is promoted, in the background.</summary>
    private void WaitForPromotion()
    {
        // Not in the replay check, which replays one recovery in a sandbox.
        if (replayCheck is null)
        {
            follower.Start();
        }

        _promotion = Task.Run(async () =>
        {
            try
            {
                await RecoverAsync(_stopping.Token).ConfigureAwait(false);
            }
            catch (Exception ex) when (!_stopping.IsCancellationRequested)
            {
                // Not fail-stopped (no exit code: a test host): the failure is logged; the service answers 503 until it stops.
                AspNetCoreEvents.RecoveryFailed(logger, ex);
            }
            catch (OperationCanceledException)
            {
                // Stopped before a promotion.
            }
        }, CancellationToken.None);
    }

    /// <summary>
    /// Each time this node, as a primary, is fenced by a newer term (a failover it did not see coming, a switchover it made):
    /// it demotes itself and rejoins as a replica, without a restart (docs/replication.md, "Demotion"; issue 51). Its
    /// running persistent requests end first (they fail: its log faulted, so none is acknowledged), then the open, the
    /// replay of recovered sessions and the shippers; the runtime closes what recovery opened; the directory reopens as a
    /// replica's copy, whose hot follower replays it as it arrives; and recovery waits for a promotion as a replica's does.
    /// A demotion that fails leaves the node fenced (503, liveness failing), as before: a restart makes it a replica.
    /// </summary>
    private async Task DemoteWhenFencedAsync()
    {
        while (true)
        {
            try
            {
                await replication.FencedAsync(_stopping.Token).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                return;
            }

            var started = Stopwatch.GetTimestamp();
            var term = replication.Term;
            availability.IsRejoining = true;
            try
            {
                AspNetCoreEvents.Demoting(logger, term, availability.Executing);
                var deadline = Stopwatch.GetTimestamp() + (long)(DemotionDrainTimeout.TotalSeconds * Stopwatch.Frequency);
                while (availability.Executing > 0 && Stopwatch.GetTimestamp() < deadline)
                {
                    await Task.Delay(10, _stopping.Token).ConfigureAwait(false);
                }

                await replication.HandoverEnded.ConfigureAwait(false); // a switchover that fenced this node finishes its answer first
                await opener.QuiesceAsync().ConfigureAwait(false);
                await _replay.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
                await _promotion.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
                if (_stopping.IsCancellationRequested)
                {
                    return;
                }

                await replication.StopShippingAsync().ConfigureAwait(false);
                await runtime.CloseForRejoinAsync().ConfigureAwait(false);
                replication.RejoinAsReplica();
                _replay = Task.CompletedTask;
                _ = opener.Rearm();
                WaitForPromotion();
                AspNetCoreEvents.Demoted(logger, term, replication.Term, (long)Stopwatch.GetElapsedTime(started).TotalMilliseconds);
            }
            catch (OperationCanceledException) when (_stopping.IsCancellationRequested)
            {
                return;
            }
            catch (Exception ex)
            {
                // Left fenced: it answers 503 replica and its liveness fails, so a restarter makes it a replica as before.
                availability.IsRejoining = false;
                AspNetCoreEvents.DemotionFailed(logger, term, ex);
                return;
            }
        }
    }

    /// <summary>How long a demotion lets persistent requests that run (and fail: the log faulted) end before it closes the log.</summary>
    private static readonly TimeSpan DemotionDrainTimeout = TimeSpan.FromSeconds(10);

    private async Task RecoverAsync(CancellationToken cancellationToken)
    {
        try
        {
            await opener.StartOpening().WaitAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            // The host is stopping before recovery's first part ended (a SIGTERM while it started): the start ends here
            // without failing, and the stop runs as usual, the server first; requests meanwhile get 503 (recovering). Thrown,
            // the host's start failed and its services were disposed while the server still took requests: each got a 500
            // (ObjectDisposedException), found by the domain kill test (issue 49).
            AspNetCoreEvents.StoppedWhileRecovering(logger);
            return;
        }
        catch (Exception ex) when (replication.IsFenced && !runtime.Domain.Enabled && replayCheck is null)
        {
            // Fenced while the log opened: the open refused to serve it (ReplicationNode.LogOpened), and the node demotes itself.
            AspNetCoreEvents.ReplayEndedByFence(logger, ex.Message);
            return;
        }
        catch (Exception ex) when (ex is not OperationCanceledException || !cancellationToken.IsCancellationRequested)
        {
            if (FailStop.StopAfterStart(availability, runtime.Options, lifetime, logger, ex))
            {
                return;
            }

            AspNetCoreEvents.RecoveryFailed(logger, ex);
            throw;
        }

        var analysis = runtime.Analysis!;
        AspNetCoreEvents.AnalysisDone(logger, analysis.Sessions, analysis.SessionsReadAtRest, analysis.VariablesReadAtRest, analysis.Requests, analysis.RecordsScanned, analysis.ScannedFrom,
            (long)analysis.Elapsed.TotalMilliseconds, analysis.StatesReadFromParts);
        lifetime.ApplicationStarted.Register(() => _replay = Task.Run(replayCheck is null ? ReplayAllAsync : () => replayCheck.RunAsync(runtime, ReplayAllAsync)));
    }

    public Task StoppingAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public Task StoppedAsync(CancellationToken cancellationToken) => Task.CompletedTask;

    public async Task StopAsync(CancellationToken cancellationToken)
    {
        // WebApplicationFactory stops its host again after disposing it (found with the endpoint benchmark template):
        // nothing is left to stop then.
        if (Volatile.Read(ref _disposed) != 0)
        {
            return;
        }

        await _stopping.CancelAsync().ConfigureAwait(false);
        await _demotions.WaitAsync(cancellationToken).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        await _promotion.WaitAsync(cancellationToken).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        await _replay.WaitAsync(cancellationToken).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
    }

    public void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) == 0)
        {
            _stopping.Dispose();
        }
    }

    private async Task ReplayAllAsync()
    {
        var started = Stopwatch.GetTimestamp();
        var sessions = runtime.Sessions.All.Where(s => !s.Ready.IsCompleted).ToList();
        replayCheck?.Prepare(sessions);
        if (!pipeline.IsBuilt)
        {
            AspNetCoreEvents.PipelineMissing(logger);
            Stop(new InvalidOperationException("UsePersistentServices() was not called: logged requests cannot be replayed."), sessions);
            return;
        }

        var (router, next) = await pipeline.Ready.ConfigureAwait(false);
        long requests = 0;
        Exception? failure = null;
        using var run = CancellationTokenSource.CreateLinkedTokenSource(_stopping.Token);

        async Task ReplayAsync(Session session, IReadOnlyList<LoadedRequest>? preloaded)
        {
            if (session.QuarantineReason is not null)
            {
                // Marked quarantined before the restart: nothing of it is replayed (its records were let go).
                quarantines.Quarantine(session, Quarantines.FromMarker(session), logger, logMarker: false);
                return;
            }

            try
            {
                Interlocked.Add(ref requests, await replayer.ReplayAsync(session, router.Value, next, preloaded, run.Token).ConfigureAwait(false));
            }
            catch (ReplayTailAbandonedException) when (runtime.Orphans is { } orphans)
            {
                // The request the crash cut short could not finish live (a member refused its call as an orphan, or was out
                // of reach): only this session waits for it; it rolls back and runs it again once the domain allows.
                orphans.ScheduleAfterAbandonedTail(session);
            }
            catch (ReplayTailAbandonedException)
            {
                // Outside a domain (a call that failed with an error not retried): as when that happens live, the request stays
                // unanswered (retries of its number get 503) and the next restart runs it again; every other session goes on.
            }
            catch (ReplayDivergenceException divergence) when (runtime.Options.OnDivergence == DivergencePolicy.QuarantineSession)
            {
                // Only this session: its requests get session-diverged; every other session and the shared state go on. Its
                // marker lets the log go past it (not in the replay check, whose sandbox keeps nothing).
                quarantines.Quarantine(session, divergence, logger, logMarker: replayCheck is null);
                AspNetCoreEvents.SessionQuarantined(logger, session.TraceTag, divergence.Sequence, divergence.Lsn, divergence);
            }
        }

        async Task FailAsync(Exception error)
        {
            if (Interlocked.CompareExchange(ref failure, error, null) is null)
            {
                availability.Fail(error);
                runtime.Shared.AbortReservations();
                await run.CancelAsync().ConfigureAwait(false);
            }
        }

        // Sessions that crashed inside an update hold variables that others, and other holders' live tails, wait for:
        // each replays at once on a thread of its own, outside ReplayParallelism, with its records read beforehand, so a
        // chain of holders waiting for one another finishes on any core count and no replay slot or thread-pool thread
        // ever waits for a reservation. The first failure anywhere cancels the rest.
        async Task ReplayHolderAsync(Session session)
        {
            try
            {
                var loaded = await replayer.LoadAllAsync(session, run.Token).ConfigureAwait(false);
                await Task.Factory.StartNew(
                    () => ReplayAsync(session, loaded).GetAwaiter().GetResult(),
                    run.Token, TaskCreationOptions.LongRunning, TaskScheduler.Default).ConfigureAwait(false);
            }
            catch (Exception ex) when (ex is not OperationCanceledException || !run.IsCancellationRequested)
            {
                await FailAsync(ex).ConfigureAwait(false);
            }
        }

        // The others: ReplayParallelism workers, in log order, except that a session whose client waits goes first.
        var queue = new ReplayQueue(sessions.Where(s => !s.HoldsReservations));
        runtime.Replays = queue;
        async Task WorkAsync()
        {
            try
            {
                while (!run.IsCancellationRequested && queue.TryTake(out var session))
                {
                    await ReplayAsync(session, null).ConfigureAwait(false);

                    // A session whose records the scan kept replays without awaiting anything: give the thread back between
                    // sessions, so new requests queued on the thread pool are served while recovery goes on (on two cores the
                    // workers would otherwise hold every thread until the pool adds one, about half a second later).
                    await Task.Yield();
                }
            }
            catch (Exception ex) when (ex is not OperationCanceledException || !run.IsCancellationRequested)
            {
                await FailAsync(ex).ConfigureAwait(false);
            }
        }

        var holders = sessions.Where(s => s.HoldsReservations).Select(ReplayHolderAsync).ToList();
        var workers = Enumerable.Range(0, Math.Min(runtime.Options.ReplayParallelism, Math.Max(queue.Count, 1))).Select(_ => Task.Run(WorkAsync)).ToList();
        await Task.WhenAll(workers.Concat(holders)).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        runtime.Replays = null;
        if (failure is not null)
        {
            Stop(failure, sessions);
            return;
        }

        if (_stopping.IsCancellationRequested)
        {
            return;
        }

        availability.MarkReady();
        runtime.Metrics.RecoveryReplayDuration.Record(Stopwatch.GetElapsedTime(started).TotalSeconds);
        AspNetCoreEvents.ReplayDone(logger, sessions.Count, requests, (long)Stopwatch.GetElapsedTime(started).TotalMilliseconds);
    }

    private void Stop(Exception error, List<Session> sessions)
    {
        if (replication.IsFenced && !runtime.Domain.Enabled && replayCheck is null)
        {
            // The replay failed because this primary was fenced meanwhile (its log faulted): it demotes itself instead of stopping.
            AspNetCoreEvents.ReplayEndedByFence(logger, error.Message);
            return;
        }

        availability.Fail(error);
        runtime.Shared.AbortReservations();
        AspNetCoreEvents.RecoveryFailed(logger, error);
        foreach (var session in sessions)
        {
            session.FailReplay(error);
        }

        if (runtime.Options.RecoveryFailureExitCode is { } exitCode)
        {
            Environment.ExitCode = exitCode;
        }

        lifetime.StopApplication();
    }
}
