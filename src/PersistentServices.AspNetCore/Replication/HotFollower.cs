using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Checkpoints;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Sessions;
using PersistentServices.SharedState;

namespace PersistentServices.Replication;

/// <summary>
/// What a hot follower hands to its replica's promotion: the analysis scan so far, the shared state it rolled forward, and
/// what of the copy's files it verified (the open's verification walk goes on from there).
/// </summary>
internal sealed record FollowerHandoff(AnalysisProgress Progress, SharedStateStore Shared, VerifiedPrefix Verified);

/// <summary>
/// A replica's hot follower (docs/replication.md, "Hot followers"; issue 37): while this process is a replica, it runs
/// recovery on the copy of the log as the copy grows, so that a promotion recovers only the tail. After every durable
/// change of the copy it applies the new committed records with the analysis scan's own rules (<see cref="AnalysisScan"/>,
/// sessions rebuilt in <see cref="PersistentRuntime.Sessions"/>, shared variables rolled forward in a store of its own), and
/// replays every request whose reply is logged through the same replay pipeline recovery uses
/// (<see cref="SessionReplayer.ReplayAheadAsync"/>). The promotion takes over the scan and the store
/// (<see cref="HandOverAsync"/>): it opens the copy as its log, applies what the follower had not, and replays each
/// session's remaining requests (normally none, or the one its client was waiting for).
/// </summary>
/// <remarks>
/// The follower is an optimization that can always be thrown away: it appends nothing and serves nothing. A reset of the
/// copy (total recovery), a cut back of it (an older primary's tail removed, which the follower may have applied already:
/// <see cref="ReplicaLog.Cuts"/>, counted with the resets in <see cref="ReplicaLog.Snapshot"/>) or a copy truncated past it
/// makes it start over, its sessions, shared state and verified prefix thrown away; anything else that goes wrong (a replay that
/// diverges or fails, a replay the promotion had to cut short) discards its state, and the promotion recovers as a restart
/// does. Functional calls a replayed request makes again ([Phoenix/App] Algorithm 4) go out from the replica as they would
/// from a recovery.
/// </remarks>
internal sealed partial class HotFollower(
    PersistentRuntime runtime,
    ReplicationNode replication,
    SessionReplayer replayer,
    ReplayPipeline pipeline,
    ILogger<HotFollower> logger) : IAsyncDisposable
{
    /// <summary>Record bytes read from the copy in one step at most (a restarted replica catches up on a long copy in steps).</summary>
    private const long StepBytes = 16L << 20;

    /// <summary>How long a promotion lets a replay under way finish before it cuts it short (the follower's state is then thrown away).</summary>
    private static readonly TimeSpan HandOverGrace = TimeSpan.FromSeconds(2);

    private CancellationTokenSource _stop = new();
    private CancellationTokenSource _abandon = new();
    private readonly Lock _gate = new();
    private int _started;
    private Task _loop = Task.CompletedTask;
    private ReplicaLog? _replica;
    private LogOptions? _logOptions;
    private AnalysisProgress? _progress;
    private SharedStateStore? _shared;
    private VerifiedPrefix? _verified;
    private int _resets;
    private string? _stoppedBecause;
    private long _durableUntil;
    private long _waiting;
    private long _replayed;
    private long _behindSince;
    private int _disposed;

    /// <summary>Whether this process follows its copy (a replica, not a witness, outside the replay check).</summary>
    public bool Running { get; private set; }

    /// <summary>The first byte of the copy not applied yet (0 before the follower starts).</summary>
    public long AppliedUntil => Volatile.Read(ref _progress)?.Next ?? 0;

    /// <summary>Bytes of the copy's durable log the follower has not applied.</summary>
    public long LagBytes => Math.Max(0, Volatile.Read(ref _durableUntil) - AppliedUntil);

    /// <summary>Answered requests of the copy not replayed yet (what a promotion now would replay besides the requests still running).</summary>
    public long LagRequests => Volatile.Read(ref _waiting);

    /// <summary>How long the follower has been behind the copy (0 when it has replayed everything it can).</summary>
    public TimeSpan LagTime => Volatile.Read(ref _behindSince) is var since and > 0 ? runtime.Time.GetElapsedTime(since) : TimeSpan.Zero;

    /// <summary>Requests replayed ahead since start.</summary>
    public long Replayed => Volatile.Read(ref _replayed);

    /// <summary>Where the promotion took the scan over from the follower, or null (it recovered as a restart does).</summary>
    public long? HandedOverAt { get; private set; }

    /// <summary>Why the follower stopped before a promotion (its state was thrown away), or null.</summary>
    public string? StoppedBecause => Volatile.Read(ref _stoppedBecause);

    /// <summary>Starts following this replica's copy, once the application's pipeline is built (a replica only).</summary>
    public void Start()
    {
        if (replication.Role != ReplicationRole.Replica || replication.Replica is not { } replica)
        {
            return;
        }

        if (Interlocked.Increment(ref _started) > 1)
        {
            // Again, on a demoted primary's copy (docs/replication.md, "Demotion"): the previous run ended with its promotion.
            _stop.Dispose();
            _abandon.Dispose();
            _stop = new();
            _abandon = new();
            lock (_gate)
            {
                DiscardLocked();
            }

            _resets = 0;
            _stoppedBecause = null;
            HandedOverAt = null;
        }
        else
        {
            runtime.Metrics.ObserveFollower(() => (LagBytes, LagRequests, LagTime.TotalSeconds));
        }

        _replica = replica;
        _logOptions = runtime.Options.BuildLogOptions();
        Running = true;
        replication.Follower = this;
        _loop = Task.Run(RunAsync);
    }

    private async Task RunAsync()
    {
        RequestDelegate router;
        RequestDelegate next;
        try
        {
            var ready = await pipeline.Ready.WaitAsync(_stop.Token).ConfigureAwait(false);
            router = ready.Router.Value;
            next = ready.Next;
        }
        catch (OperationCanceledException)
        {
            return;
        }

        // Replays enter the follower's store: the service's own is not there before a promotion (ServingShared is null).
        async Task EnteredAsync(HttpContext context)
        {
            using (SharedStateStore.Enter(_shared!))
            {
                await next(context).ConfigureAwait(false);
            }
        }

        // A promotion opens the copy as a DurableLog, whose code this process has not run yet: run it once on a scratch log
        // now, so the open in the failover's path runs compiled (DurableLog.WarmUpAsync). A failure costs only that.
        try
        {
            await DurableLog.WarmUpAsync(_logOptions!, _stop.Token).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (_stop.IsCancellationRequested)
        {
            return;
        }
        catch (Exception ex)
        {
            FollowerEvents.WarmUpFailed(logger, ex);
        }

        FollowerEvents.Started(logger, _replica!.Directory);
        while (!_stop.IsCancellationRequested)
        {
            var changed = _replica!.Changed;
            try
            {
                if (!await StepAsync(router, EnteredAsync).ConfigureAwait(false))
                {
                    await changed.WaitAsync(_stop.Token).ConfigureAwait(false);
                }
            }
            catch (OperationCanceledException) when (_stop.IsCancellationRequested)
            {
                return;
            }
            catch (Exception ex) when (ex is IOException or LogCorruptionException or ObjectDisposedException && !_stop.IsCancellationRequested)
            {
                // The copy moved under the read (truncated, reset): start over from its anchor at its next change.
                FollowerEvents.StartsOver(logger, ex.Message);
                Discard();
                await changed.WaitAsync(_stop.Token).ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
            }
            catch (Exception ex)
            {
                // A replay that diverged or failed (a replica of another build, as in a rolling upgrade whose replies differ):
                // thrown away; a promotion meanwhile recovers as a restart would. Once the copy anchors a newer checkpoint the
                // follower starts over from it, as a recovery would start there: after a switchover's checkpoint of every
                // session (ReplicationOptions.CheckpointBeforeSwitchover) nothing of the old build is left to replay.
                Volatile.Write(ref _stoppedBecause, ex.Message);
                FollowerEvents.Stopped(logger, ex);
                var anchor = _replica!.Anchor;
                Discard();
                try
                {
                    await AnchoredAfterAsync(anchor).ConfigureAwait(false);
                }
                catch (OperationCanceledException) when (_stop.IsCancellationRequested)
                {
                    return;
                }

                Volatile.Write(ref _stoppedBecause, null);
                FollowerEvents.StartsOver(logger, $"a newer checkpoint is anchored in the copy than {anchor?.ToString(System.Globalization.CultureInfo.InvariantCulture) ?? "none"}, the anchor when its replay stopped");
            }
        }
    }

    /// <summary>Completes when the copy's anchored checkpoint is another than <paramref name="anchor"/>.</summary>
    private async Task AnchoredAfterAsync(long? anchor)
    {
        while (true)
        {
            var changed = _replica!.Changed;
            if (_replica.Anchor != anchor)
            {
                return;
            }

            await changed.WaitAsync(_stop.Token).ConfigureAwait(false);
        }
    }

    /// <summary>One step: what the copy holds beyond the follower is applied, and what is ready replayed. False when there was nothing to do.</summary>
    private async Task<bool> StepAsync(RequestDelegate router, RequestDelegate next)
    {
        var replica = _replica!;
        var (begin, durableUntil, resets, isEmpty) = replica.Snapshot();
        Volatile.Write(ref _durableUntil, durableUntil);
        if (isEmpty)
        {
            return false;
        }

        if (_progress is { } current && (resets != _resets || begin > current.Next))
        {
            FollowerEvents.StartsOver(logger, resets != _resets ? "the copy was reset or cut back" : $"the copy begins at {begin}, after {current.Next}");
            Discard();
        }

        if (_progress is null)
        {
            // As recovery would start: from the anchored checkpoint (written here once the copy holds it), or from the log's
            // first record when it was never truncated.
            if (AnchorFile.Read(replica.Directory) is null && begin != FasterEntryLayout.FirstValidAddress)
            {
                return false;
            }

            var shared = new SharedStateStore(null, runtime.Options.ServiceName, runtime.Options.SharedCheckpointInterval, logger, runtime.Codec);
            using var source = new CopySource(replica.Directory, _logOptions!, begin, durableUntil);
            var progress = await AnalysisScan.StartAsync(source, replica.Directory, runtime.Sessions, shared, readAtRest: true, captured: null, recovered: null,
                AnalysisScan.DefaultKeepBudgetBytes, _stop.Token).ConfigureAwait(false);

            // What the scan starts after is verified once, as the open's walk would (so a promotion's open walks only what
            // the follower has not): up to the last commit before the scan's start; the steps below go on from there.
            var verified = LogRecoveryScanner.VerifyFrom(replica.Directory, _logOptions!, VerifiedPrefix.At(begin), progress.Next, visitor: null);
            lock (_gate)
            {
                _shared = shared;
                _resets = resets;
                _verified = verified;
                Volatile.Write(ref _progress, progress);
            }
        }

        var scan = _progress!;
        var moved = false;
        var from = _verified!.Until;
        if (from < durableUntil)
        {
            // The copy's files are verified as they are applied: every entry checked as the open's walk checks it, the walk's
            // state carried from step to step (LogRecoveryScanner.VerifyFrom).
            var batch = new CommittedRecords();
            var verified = LogRecoveryScanner.VerifyFrom(replica.Directory, _logOptions!, _verified, Math.Min(durableUntil, from + StepBytes), batch);
            if (verified.Until <= from && durableUntil > from + StepBytes)
            {
                // No commit inside the step (a group commit larger than it): the whole rest at once.
                batch = new CommittedRecords();
                verified = LogRecoveryScanner.VerifyFrom(replica.Directory, _logOptions!, _verified, durableUntil, batch);
            }

            foreach (var record in batch.Records)
            {
                if (record.Lsn >= verified.Until)
                {
                    break;
                }

                // Records before the scan's start (the first step after the start, which verified up to a commit before it)
                // were the checkpoint's to account for, not the scan's.
                if (record.Lsn >= scan.Next)
                {
                    scan.Apply(record);
                }
            }

            lock (_gate)
            {
                _verified = verified;
            }

            if (verified.Until > scan.Next)
            {
                // What now waits to be replayed is counted before the applied end moves, so a reader never sees the copy
                // applied with its new requests' lag not yet counted (a promotion or a status read in between).
                Volatile.Write(ref _waiting, Pending().Waiting);
                scan.Next = verified.Until;
                moved = true;
            }
        }

        moved |= await ReplayReadyAsync(router, next).ConfigureAwait(false);
        return moved;
    }

    /// <summary>
    /// What waits now: answered requests a promotion would replay (one still running on the primary is the tail any takeover
    /// runs), and the bytes of the records kept for them (counted against the scan's budget: replayed records were let go).
    /// </summary>
    private (long Waiting, long Kept) Pending()
    {
        long waiting = 0;
        long kept = 0;
        foreach (var session in runtime.Sessions.All)
        {
            foreach (var position in session.PositionStream)
            {
                waiting += session.LoggedReplies.ContainsKey(position.Sequence) ? 1 : 0;
                kept += (position.RequestRecord?.Body.Length ?? 0) + (position.AuxRecords?.Sum(r => (long)r.Body.Length) ?? 0);
            }
        }

        return (waiting, kept);
    }

    /// <summary>Replays every session's requests that are ready (<see cref="SessionReplayer.ReadyToReplayAhead"/>); true when any was.</summary>
    private async Task<bool> ReplayReadyAsync(RequestDelegate router, RequestDelegate next)
    {
        var any = false;
        foreach (var session in runtime.Sessions.All.ToList())
        {
            if (_stop.IsCancellationRequested)
            {
                break;
            }

            var ready = SessionReplayer.ReadyToReplayAhead(session);
            if (ready > 0)
            {
                await replayer.ReplayAheadAsync(session, ready, router, next, _abandon.Token).ConfigureAwait(false);
                Interlocked.Add(ref _replayed, ready);
                any = true;
            }
        }

        var (waiting, kept) = Pending();
        _progress!.Applier.KeptBytes = kept;
        Volatile.Write(ref _waiting, waiting);
        var behind = waiting > 0 || _progress.Next < Volatile.Read(ref _durableUntil);
        Volatile.Write(ref _behindSince, !behind ? 0 : Volatile.Read(ref _behindSince) is var since and > 0 ? since : runtime.Time.GetTimestamp());
        return any;
    }

    /// <summary>
    /// The promotion: stops following (a replay under way finishes, or is cut short after a grace, which throws the state
    /// away) and hands over the scan and the shared state when they still describe the copy the promotion opens (its
    /// begin at or before where the follower stopped, its durable end at or after); else null, with every session the follower rebuilt
    /// removed, and the promotion recovers as a restart does.
    /// </summary>
    public async Task<FollowerHandoff?> HandOverAsync()
    {
        if (!Running)
        {
            return null;
        }

        Running = false;
        await _stop.CancelAsync().ConfigureAwait(false);
        _abandon.CancelAfter(HandOverGrace);
        await _loop.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        var replica = _replica!;
        var (begin, durableUntil, resets, _) = replica.Snapshot();
        lock (_gate)
        {
            if (_progress is not { } progress || _shared is not { } shared || _verified is not { } verified || _stoppedBecause is not null || resets != _resets ||
                begin > progress.Next || durableUntil < progress.Next)
            {
                var why = _stoppedBecause ?? (_progress is null ? "it had not started" : "the copy changed under it");
                DiscardLocked();
                FollowerEvents.NotHandedOver(logger, why);
                return null;
            }

            FollowerEvents.HandedOver(logger, progress.Next, durableUntil, Replayed, LagRequests);
            HandedOverAt = progress.Next;
            progress.ResumedAt = progress.Next;
            progress.Elapsed = TimeSpan.Zero;
            _progress = null;
            _shared = null;
            _verified = null;
            return new FollowerHandoff(progress, shared, verified);
        }
    }

    /// <summary>The promotion could not use what it was handed (its log does not continue the copy): every rebuilt session goes.</summary>
    public void Reject(FollowerHandoff handoff, string why)
    {
        ArgumentNullException.ThrowIfNull(handoff);
        RemoveSessions();
        FollowerEvents.NotHandedOver(logger, why);
    }

    private void Discard()
    {
        lock (_gate)
        {
            DiscardLocked();
        }
    }

    private void DiscardLocked()
    {
        Volatile.Write(ref _progress, null);
        _shared = null;
        _verified = null;
        Volatile.Write(ref _waiting, 0);
        Volatile.Write(ref _behindSince, 0);
        RemoveSessions();
    }

    private void RemoveSessions()
    {
        foreach (var session in runtime.Sessions.All.ToList())
        {
            runtime.Sessions.Remove(session.Id);
        }
    }

    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        await _stop.CancelAsync().ConfigureAwait(false);
        await _abandon.CancelAsync().ConfigureAwait(false);
        await _loop.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        _stop.Dispose();
        _abandon.Dispose();
    }

    /// <summary>
    /// Single records of the copy (the anchor, those at rest), read from its files through one reader: a scan that starts
    /// with thousands of sessions at rest read each with a reader of its own before (a directory listing and a page read
    /// per record), and took 2 to 12 s with 400 to 2,500 sessions in the gateway nemesis, which a promotion then waited for.
    /// </summary>
    private sealed class CopySource(string directory, LogOptions options, long begin, long durableUntil) : AnalysisScan.IRecordSource, IDisposable
    {
        private readonly LogRecoveryScanner _reader = LogRecoveryScanner.OpenReader(directory, options);

        public long BeginAddress => begin;

        public long DurableUntil => durableUntil;

        public int MaxRecordBytes => options.MaxRecordBytes;

        public ValueTask<LogRecord> ReadAsync(long lsn, CancellationToken cancellationToken)
            => lsn >= begin && lsn < durableUntil && _reader.TryRead(lsn) is { } record
                ? ValueTask.FromResult(record)
                : throw new LogCorruptionException($"The replica's copy holds no intact record at LSN {lsn} (it holds [{begin}, {durableUntil})).", lsn);

        public void Dispose() => _reader.Dispose();
    }

    /// <summary>The records of one walk over the copy.</summary>
    private sealed class CommittedRecords : ILogScanVisitor
    {
        public List<LogRecord> Records { get; } = [];

        public void Record(RecordHeader header, ReadOnlySpan<byte> body) => Records.Add(LogRecord.FromVerified(header, body.ToArray()));

        public void Committed(long until)
        {
            // The walk's result says where its last commit ends (LogRecoveryScanner.VerifyFrom).
        }
    }

    /// <summary>The follower's log messages (event ids 1450–1454 and 1458).</summary>
    private static partial class FollowerEvents
    {
        [LoggerMessage(1450, LogLevel.Information, "Replication: the hot follower replays the copy in '{Directory}' as it arrives")]
        public static partial void Started(ILogger logger, string directory);

        [LoggerMessage(1451, LogLevel.Information, "Replication: the hot follower starts over ({Reason})")]
        public static partial void StartsOver(ILogger logger, string reason);

        [LoggerMessage(1452, LogLevel.Warning, "Replication: the hot follower stopped; until the copy anchors a newer checkpoint, from which it starts over, a promotion recovers this copy as a restart does")]
        public static partial void Stopped(ILogger logger, Exception error);

        [LoggerMessage(1453, LogLevel.Information,
            "Replication: the hot follower hands over at {AppliedUntil} of the copy's {DurableUntil}, {Replayed} requests replayed ahead, {Waiting} left for the promotion's replay")]
        public static partial void HandedOver(ILogger logger, long appliedUntil, long durableUntil, long replayed, long waiting);

        [LoggerMessage(1454, LogLevel.Warning, "Replication: the hot follower hands nothing over ({Reason}); the promotion recovers the copy as a restart does")]
        public static partial void NotHandedOver(ILogger logger, string reason);

        [LoggerMessage(1458, LogLevel.Warning,
            "Replication: warming the log's code on a scratch log failed; a promotion opens the copy with that code not yet compiled (tens of milliseconds more)")]
        public static partial void WarmUpFailed(ILogger logger, Exception error);
    }
}
