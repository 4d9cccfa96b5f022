using System.Diagnostics;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Sessions;

namespace PersistentServices.Recovery;

/// <summary>
/// MSP crash recovery (seed 000 §4.3, Fig. 12) as a hosted service. Before the server accepts traffic: open the log
/// (verifying it) and run the analysis scan. Once the application has started: accept new sessions at once while the
/// recovered sessions replay in parallel; a request of a session still replaying waits for it. A replay that fails or
/// diverges stops the service with an error naming the session and LSN (fail-stop).
/// </summary>
internal sealed class RecoveryHostedService(
    PersistentRuntime runtime,
    ReplayPipeline pipeline,
    SessionReplayer replayer,
    IHostApplicationLifetime lifetime,
    ILogger<RecoveryHostedService> logger) : IHostedService, IDisposable
{
    private readonly CancellationTokenSource _stopping = new();
    private Task _replay = Task.CompletedTask;

    /// <summary>Completes when every recovered session has replayed (or recovery failed).</summary>
    public Task Completion => _replay;

    public async Task StartAsync(CancellationToken cancellationToken)
    {
        try
        {
            await runtime.OpenAndAnalyzeAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is not OperationCanceledException || !cancellationToken.IsCancellationRequested)
        {
            if (FailStop.StopAfterStart(runtime, lifetime, logger, ex))
            {
                return;
            }

            AspNetCoreEvents.RecoveryFailed(logger, ex);
            throw;
        }

        var analysis = runtime.Analysis!;
        AspNetCoreEvents.AnalysisDone(logger, analysis.Sessions, analysis.Requests, analysis.RecordsScanned, (long)analysis.Elapsed.TotalMilliseconds);
        lifetime.ApplicationStarted.Register(() => _replay = Task.Run(ReplayAllAsync));
    }

    public async Task StopAsync(CancellationToken cancellationToken)
    {
        await _stopping.CancelAsync().ConfigureAwait(false);
        await _replay.WaitAsync(cancellationToken).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
    }

    public void Dispose() => _stopping.Dispose();

    private async Task ReplayAllAsync()
    {
        var started = Stopwatch.GetTimestamp();
        // Sessions that crashed inside an update hold variables others wait for: replay them first.
        var sessions = runtime.Sessions.All.Where(s => !s.Ready.IsCompleted).OrderByDescending(s => s.HoldsReservations).ToList();
        if (!pipeline.IsBuilt)
        {
            AspNetCoreEvents.PipelineMissing(logger);
            Stop(new InvalidOperationException("UsePersistentServices() was not called: logged requests cannot be replayed."), sessions);
            return;
        }

        var (router, next) = await pipeline.Ready.ConfigureAwait(false);
        long requests = 0;
        try
        {
            await Parallel.ForEachAsync(
                sessions,
                new ParallelOptions { MaxDegreeOfParallelism = runtime.Options.ReplayParallelism, CancellationToken = _stopping.Token },
                async (session, token) => Interlocked.Add(ref requests, await replayer.ReplayAsync(session, router.Value, next, token).ConfigureAwait(false))).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (_stopping.IsCancellationRequested)
        {
            return;
        }
        catch (Exception ex)
        {
            Stop(ex, sessions);
            return;
        }

        runtime.MarkReady();
        PersistentServicesMetrics.RecoveryReplayDuration.Record(Stopwatch.GetElapsedTime(started).TotalSeconds);
        AspNetCoreEvents.ReplayDone(logger, sessions.Count, requests, (long)Stopwatch.GetElapsedTime(started).TotalMilliseconds);
    }

    private void Stop(Exception error, List<Session> sessions)
    {
        foreach (var session in sessions)
        {
            runtime.Shared.ReleaseReservations(session.Id);
        }

        AspNetCoreEvents.RecoveryFailed(logger, error);
        runtime.Fail(error);
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
