using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.SharedState;

namespace PersistentServices.Recovery;

/// <summary>
/// Recovery's first half ([MSP Fig. 12]): opens the log (verifying it), creates the shared state store, runs the analysis
/// scan, starts and forces a new epoch and takes the checkpoint after the scan; what it opens it hands to the
/// <see cref="PersistentRuntime"/>, which holds it, and it moves <see cref="ServiceAvailability"/> from
/// <see cref="RecoveryStage.Scanning"/> to <see cref="RecoveryStage.Replaying"/> (or <see cref="RecoveryStage.Failed"/>).
/// A singleton; disposed before the runtime (it is created after it), so an open still running ends before the log closes.
/// </summary>
internal sealed class LogOpener(PersistentRuntime runtime, ServiceAvailability availability, Replication.ReplicationNode replication, Replication.HotFollower follower,
    ILogger<PersistentRuntime> logger)
    : IAsyncDisposable
{
    // The logger keeps the category the log's, the store's and the checkpointer's messages have always had (PersistentRuntime).
    private readonly Lock _openingLock = new();
    private readonly CancellationTokenSource _disposing = new();
    private Task? _opening;
    private Task _checkpointAfterOpen = Task.CompletedTask;
    private int _disposed;

    /// <summary>
    /// Opens the log and runs the analysis scan, once, on the thread pool: started by <c>UsePersistentServices()</c>, so the
    /// log's verification and scan overlap the rest of the application's startup (mapping endpoints, starting the host),
    /// and awaited by the recovery host before the server accepts traffic. Every caller gets the same task. With
    /// replication, the role is decided first (<see cref="Replication.ReplicationNode.Resolve"/>): a replica's task waits
    /// for its promotion, then opens the replica's copy of the log as this service's log.
    /// </summary>
    public Task StartOpening()
    {
        lock (_openingLock)
        {
            if (_opening is null)
            {
                try
                {
                    replication.Resolve();
                }
                catch (Exception ex)
                {
                    availability.Fail(ex);
                    return _opening = Task.FromException(ex);
                }

                _opening = Task.Run(() => OpenAndAnalyzeAsync(_disposing.Token));
            }

            return _opening;
        }
    }

    /// <summary>
    /// A fenced primary's demotion (docs/replication.md, "Demotion"): the open that made it the primary ends (it may still
    /// run: a fence during recovery), and so does the checkpoint after a promotion, before the runtime closes their log.
    /// </summary>
    public async Task QuiesceAsync()
    {
        Task? opening;
        lock (_openingLock)
        {
            opening = _opening;
        }

        if (opening is not null)
        {
            await opening.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        }

        await _checkpointAfterOpen.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
    }

    /// <summary>The demoted primary is a replica again: the next open waits for its promotion, as a replica's first did (<see cref="StartOpening"/>).</summary>
    public Task Rearm()
    {
        lock (_openingLock)
        {
            _checkpointAfterOpen = Task.CompletedTask;
            return _opening = Task.Run(() => OpenAndAnalyzeAsync(_disposing.Token));
        }
    }

    private async Task OpenAndAnalyzeAsync(CancellationToken cancellationToken)
    {
        await replication.PromotedAsync(cancellationToken).ConfigureAwait(false);
        availability.BeginOpening();
        try
        {
            var options = runtime.Options;
            var domain = runtime.Domain;

            // A promoted replica's hot follower ran recovery on the copy as it grew: its scan and shared state go on from where
            // it stopped (docs/replication.md, "Hot followers"); without it, recovery as at any start.
            var handoff = await follower.HandOverAsync().ConfigureAwait(false);

            // The verification walk keeps the records the analysis scan needs, so the scan reads nothing a second time.
            var logOptions = options.BuildLogOptions();
            var captured = handoff is not null ? new RecordCapture(handoff.Progress.Next) : AnalysisScan.CaptureFor(logOptions, readAtRest: !domain.Enabled);
            var log = await DurableLog.OpenAsync(logOptions, logger, captured, runtime.Metrics, runtime.CrashPoints, handoff?.Verified, cancellationToken).ConfigureAwait(false);

            // Where this term begins in the log, recorded before anything of it is appended (docs/replication.md, "Rejoining by cutting back").
            replication.TermStarts(log);
            runtime.LogOpened(log);
            if (handoff is not null && (log.BeginAddress > handoff.Progress.Next || log.DurableUntil < handoff.Progress.Next))
            {
                follower.Reject(handoff, $"the opened log holds [{log.BeginAddress}, {log.DurableUntil}), the follower stopped at {handoff.Progress.Next}");
                handoff = null; // the capture from its stop is only a hint: the full scan reads whatever it does not hold from the log
            }

            var shared = handoff?.Shared ?? new SharedStateStore(log, options.ServiceName, options.SharedCheckpointInterval, logger, runtime.Codec);
            if (handoff is not null)
            {
                shared.AttachLog(log);
            }

            runtime.SharedOpened(shared);
            var directory = Path.GetFullPath(options.LogDirectory);
            var durableAtOpen = log.DurableUntil;

            // Outside a domain, sessions at rest are read directly and the scan starts after them (docs/checkpoints.md); in a
            // domain the scan also relearns members' recovered states from the log, so it starts where it always did.
            var analysis = handoff is not null
                ? await AnalysisScan.ContinueAsync(log, handoff.Progress, captured, cancellationToken).ConfigureAwait(false)
                : await AnalysisScan.RunAsync(log, directory, runtime.Sessions, shared, cancellationToken, recovered: domain.Recovered, readAtRest: !domain.Enabled, captured: captured)
                    .ConfigureAwait(false);
            var checkpointer = new Checkpoints.ServiceCheckpointer(log, directory, runtime.Sessions, shared, options.IdleCheckpointAfter, logger, atRest: !domain.Enabled)
            {
                BeforeSessionCheckpoint = runtime.BeforeSessionCheckpointAsync,
            };
            runtime.Analyzed(analysis, checkpointer);
            if (domain.Enabled)
            {
                // Every service checkpoint lists the recovered state numbers known (MSP §3.4): truncation forgets none.
                checkpointer.Recovered = domain.Recovered;
            }

            if (domain.IsMember(options.ServiceName))
            {
                // A shared variable's checkpoint must never be an orphan either (MSP §3.3): its DV is flushed first.
                shared.DistributedFlush = domain.FlushAsync;
                shared.Recovered = domain.Recovered;
                shared.OrphanError = static lost => new Domain.OrphanException(lost);
            }

            // A new epoch starts with every recovery; it is forced so no two failure-free periods share one (LSNs of a
            // lost period are reused by the next).
            var epoch = analysis.LastEpoch + 1;
            runtime.Epoch = epoch;

            // In a domain, this recovery's recovered state number for the epoch that ended (MSP §4.3): everything it logged
            // is durable up to the last record before durableAtOpen; members learn it from the broadcast.
            if (domain.Enabled && analysis.LastEpoch > 0)
            {
                var own = new Domain.RecoveredStateNumber(options.ServiceName, new Domain.StateId(analysis.LastEpoch, durableAtOpen - 1));
                domain.Recovered.LearnAndLog(own, n => log.Append(RecordKind.RecoveredState, new RecoveredState { Service = n.Service, Epoch = n.State.Epoch, Lsn = n.State.Lsn }));
            }

            var epochLsn = log.Append(RecordKind.EpochStarted, new EpochStarted { Epoch = epoch, Service = options.ServiceName });
            await log.WaitUntilDurableAsync(epochLsn, cancellationToken).ConfigureAwait(false);
            shared.Epoch = epoch;
            checkpointer.Epoch = epoch;
            runtime.ServeShared();

            // "Make an MSP checkpoint" after the scan (MSP Fig. 12): the anchor moves to what this scan found. A promotion that
            // took a hot follower's state over takes it just after it serves instead (docs/replication.md, "Hot followers"):
            // the checkpoint is fuzzy, as every periodic one taken while requests run, and until it is anchored the previous
            // anchor (and the log above its scan start) is still there, so a crash meanwhile only makes the next scan longer.
            if (handoff is null)
            {
                await checkpointer.TakeAsync(cleanShutdown: false, cancellationToken).ConfigureAwait(false);
            }

            // A primary with replicas: from here on nothing is durable (so nothing is acknowledged) before they hold it.
            replication.LogOpened(log);
            availability.Opened();
            if (handoff is not null)
            {
                _checkpointAfterOpen = Task.Run(() => CheckpointAfterOpenAsync(checkpointer, cancellationToken), CancellationToken.None);
            }
        }
        catch (Exception ex)
        {
            availability.Fail(ex);
            throw;
        }
    }

    /// <summary>The checkpoint after the scan of a promotion (<see cref="OpenAndAnalyzeAsync"/>), once the service serves.</summary>
    private async Task CheckpointAfterOpenAsync(Checkpoints.ServiceCheckpointer checkpointer, CancellationToken cancellationToken)
    {
        try
        {
            await checkpointer.TakeAsync(cleanShutdown: false, cancellationToken).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (cancellationToken.IsCancellationRequested)
        {
            // Stopped first: the drain takes its own checkpoint, or the next start scans from the previous anchor.
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException or IOException)
        {
            // A fault of the log is the runtime's to report (503, unhealthy); the anchor still names the previous checkpoint.
            AspNetCoreEvents.CheckpointAfterPromotionFailed(logger, ex);
        }
    }

    /// <summary>An open still running (a host built and never started, or stopped while recovering) ends first: it owns the log.</summary>
    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        await _disposing.CancelAsync().ConfigureAwait(false);
        await QuiesceAsync().ConfigureAwait(false);
        _disposing.Dispose();
    }
}
