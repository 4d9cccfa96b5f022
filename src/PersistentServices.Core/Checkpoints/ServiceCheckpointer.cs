using System.Diagnostics;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;
using PersistentServices.SharedState;

namespace PersistentServices.Checkpoints;

/// <summary>What one service checkpoint did.</summary>
internal sealed record ServiceCheckpointResult(long Lsn, long ScanFrom, int Sessions, int Variables, int ForcedSessions, int ForcedVariables, long TruncatedUntil, TimeSpan Elapsed,
    long AtRestScanFrom = 0, int SessionsAtRest = 0, int VariablesAtRest = 0); // at rest: the positions recovery will read directly (below AtRestScanFrom)

/// <summary>
/// The fuzzy service checkpoint, the anchor and log truncation (MSP §3.4; Phoenix/App §4.3):
/// <list type="number">
/// <item>sessions and shared variables whose latest checkpoint is older than <c>idleAfter</c> service checkpoints get a
///   new one (an idle session only when no request of it runs), so the start point keeps moving;</item>
/// <item>a record lists where each live session's and shared variable's recovery starts (its latest checkpoint, or its
///   start) and their minimum, the scan start; nothing is blocked while it is built;</item>
/// <item>once the record is durable its LSN is written to the anchor; then the log is truncated below the scan start.</item>
/// </list>
/// With <c>atRest</c> (a service outside a domain; docs/checkpoints.md "Sessions at rest"), two refinements bound the
/// recovery scan by the service checkpoint interval rather than by <c>idleAfter</c> intervals: a session with records
/// after its latest checkpoint that no request holds right now is checkpointed at every service checkpoint, and sessions
/// at rest (nothing logged after their checkpoint) are listed in the record, so recovery reads their checkpoints directly
/// and scans only from the lowest position of everything else. They still hold the log back until their next forced
/// checkpoint, after <c>idleAfter</c> service checkpoints.
/// A crash between any two steps is safe: until the anchor names the new checkpoint, the previous one (and the log
/// above its scan start) is still there; truncation happens only below a durable, anchored checkpoint.
/// </summary>
internal sealed partial class ServiceCheckpointer(DurableLog log, string directory, SessionTable sessions, SharedStateStore shared, int idleAfter, ILogger logger, bool atRest = false) : IDisposable
{
    /// <summary>
    /// Positions listed in the record, each kind (the record must fit in a page whatever the number of sessions; recovery
    /// needs only the scan start).
    /// </summary>
    private const int ListedPositions = 4096;

    /// <summary>Session checkpoints a drain takes at once (<see cref="CheckpointEverythingAsync"/>).</summary>
    private const int DrainParallelism = 64;

    private readonly SemaphoreSlim _gate = new(1, 1);
    private long _taken;

    public void Dispose() => _gate.Dispose();

    /// <summary>Called before a session is checkpointed here (a domain's distributed flush); false skips it this time.</summary>
    public Func<Session, CancellationToken, Task<bool>>? BeforeSessionCheckpoint { get; set; }

    /// <summary>The service's epoch, written in each checkpoint.</summary>
    public long Epoch { get; set; }

    /// <summary>
    /// In a service domain, the recovered state numbers the service knows: each checkpoint lists them, so truncating the log
    /// below its scan start forgets none ([MSP §3.4]). Null outside a domain.
    /// </summary>
    public Domain.RecoveredStates? Recovered { get; set; }

    /// <summary>LSN of the newest anchored service checkpoint (0 before the first).</summary>
    public long AnchoredLsn { get; private set; }

    /// <summary>The log's tail right after the latest service checkpoint record was appended: what the log grew by since is new.</summary>
    public long TailAfterCheckpoint { get; private set; }

    /// <summary>
    /// Holds service checkpoints back until the returned value is disposed, after the one under way (if any) is done: a
    /// switchover hands the log over, so nothing may be appended to it meanwhile.
    /// </summary>
    public async Task<IDisposable> HoldAsync(CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        return new Held(_gate);
    }

    private sealed class Held(SemaphoreSlim gate) : IDisposable
    {
        private int _released;

        public void Dispose()
        {
            if (Interlocked.Exchange(ref _released, 1) == 0)
            {
                gate.Release();
            }
        }
    }

    /// <summary>Service checkpoints taken since start.</summary>
    public long Taken => Interlocked.Read(ref _taken);

    /// <summary>Takes one service checkpoint; <paramref name="cleanShutdown"/> marks the one a graceful drain takes.</summary>
    public async Task<ServiceCheckpointResult> TakeAsync(bool cleanShutdown, CancellationToken cancellationToken)
    {
        await _gate.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            var started = Stopwatch.GetTimestamp();
            var (forcedSessions, forcedVariables) = await CheckpointStaleAsync(cancellationToken).ConfigureAwait(false);

            var record = new ServiceCheckpoint { Epoch = Epoch, CleanShutdown = cleanShutdown };
            var scanFrom = long.MaxValue;

            // The recovered state numbers known now; one learned after this is logged at or above loggedFrom, where the
            // scan of the next recovery meets it.
            if (Recovered is { } recovered)
            {
                var (known, loggedFrom) = recovered.Snapshot(() => log.TailAddress);
                foreach (var number in known)
                {
                    record.Recovered.Add(new RecoveredState { Service = number.Service, Epoch = number.State.Epoch, Lsn = number.State.Lsn });
                }

                scanFrom = loggedFrom;
            }

            // Replies kept in the log that sessions may still need lie below their recovery position (docs/capacity.md):
            // the log is kept from the lowest, but recovery does not scan them.
            var retainFrom = long.MaxValue;

            // Positions are listed up to ListedPositions of each kind and while they fit half a record (long variable names,
            // small MaxRecordBytes); the counts say how many there were. Recovery needs only the scan start.
            var listBudget = log.MaxRecordBytes / 2;
            var listed = 0;

            // Sessions at rest are listed up to a quarter of a record; the scan then starts at the lowest position of the rest,
            // and never above the tail before any session was looked at (a record logged after that lies at or above it).
            var atRestScanFrom = log.TailAddress;

            // A session whose start is logged but who is not in the table yet is seen by neither loop: the scan starts at or
            // below its record, or it would be lost, and truncation would drop its start (read after the tail: a start
            // announced later logs above the tail).
            var startsInFlight = sessions.OldestStartInFlight;
            var atRestBudget = atRest ? log.MaxRecordBytes / 4 : 0;
            var atRestListed = 0;
            foreach (var session in sessions.Enumerate())
            {
                var lsn = session.RecoveryLsn;
                if (session.Ended || lsn == 0)
                {
                    continue;
                }

                if (atRestListed < atRestBudget && IsAtRest(session, lsn))
                {
                    var restPosition = new CheckpointPosition { SessionId = session.IdBytes, Lsn = lsn };
                    atRestListed += restPosition.CalculateSize() + 4;
                    record.AtRest.Add(restPosition);
                }
                else
                {
                    atRestScanFrom = Math.Min(atRestScanFrom, lsn);
                }

                if (record.SessionCount++ < ListedPositions && listed < listBudget)
                {
                    var position = new CheckpointPosition { SessionId = session.IdBytes, Lsn = lsn };
                    listed += position.CalculateSize() + 4;
                    if (listed < listBudget)
                    {
                        record.Sessions.Add(position);
                    }
                }

                scanFrom = Math.Min(scanFrom, lsn);
                retainFrom = Math.Min(retainFrom, session.RetainLsn);
            }

            // Shared variables at rest likewise (their latest record is their checkpoint), when the list has room.
            var variablesAtRest = new HashSet<string>(StringComparer.Ordinal);
            if (atRest)
            {
                foreach (var (name, lsn) in shared.VariablesAtRest())
                {
                    var restPosition = new CheckpointPosition { Variable = name, Lsn = lsn };
                    var size = restPosition.CalculateSize() + 4;
                    if (atRestListed + size >= atRestBudget)
                    {
                        break;
                    }

                    atRestListed += size;
                    record.AtRest.Add(restPosition);
                    variablesAtRest.Add(name);

                    // The log is kept from it even if the variable moves on before the loop below reads its position.
                    scanFrom = Math.Min(scanFrom, lsn);
                }
            }

            foreach (var (name, lsn) in shared.RecoveryPositions())
            {
                if (record.VariableCount++ < ListedPositions && listed < listBudget)
                {
                    var position = new CheckpointPosition { Variable = name, Lsn = lsn };
                    listed += position.CalculateSize() + 4;
                    if (listed < listBudget)
                    {
                        record.Variables.Add(position);
                    }
                }

                scanFrom = Math.Min(scanFrom, lsn);
                if (!variablesAtRest.Contains(name))
                {
                    atRestScanFrom = Math.Min(atRestScanFrom, lsn);
                }
            }

            scanFrom = Math.Min(scanFrom, startsInFlight);
            if (atRest)
            {
                record.AtRestScanFromLsn = Math.Min(atRestScanFrom, startsInFlight);
            }

            // 0: nothing to recover before this record itself.
            record.ScanFromLsn = scanFrom == long.MaxValue ? 0 : scanFrom;
            var checkpointLsn = log.Append(RecordKind.ServiceCheckpoint, record);
            var tailAfter = log.TailAddress;
            var truncateTo = Math.Min(record.ScanFromLsn == 0 ? checkpointLsn : record.ScanFromLsn, retainFrom);
            log.CrashPoints.Hit(CrashPoints.ServiceCheckpointAppended);
            // This disk only: a checkpoint acknowledges nothing to a client, and the anchor names it only for this log's own
            // recovery (a replica writes its anchor once it holds the record: docs/replication.md), so a primary whose
            // replicas are away still checkpoints, truncates and drains.
            await log.WaitUntilLocallyDurableAsync(checkpointLsn, cancellationToken).ConfigureAwait(false);
            log.CrashPoints.Hit(CrashPoints.ServiceCheckpointDurable);
            AnchorFile.Write(directory, checkpointLsn, log.FileMode);
            AnchoredLsn = checkpointLsn;
            TailAfterCheckpoint = tailAfter;
            log.CrashPoints.Hit(CrashPoints.AnchorWritten);

            foreach (var session in sessions.All)
            {
                session.NoteServiceCheckpoint();
            }

            shared.CountServiceCheckpoint();
            var truncated = 0L;
            if (truncateTo > log.BeginAddress)
            {
                await log.TruncateUntilAsync(truncateTo, cancellationToken).ConfigureAwait(false);
                truncated = truncateTo;
                log.CrashPoints.Hit(CrashPoints.LogTruncated);
            }

            Interlocked.Increment(ref _taken);
            log.Metrics?.ServiceCheckpoints.Add(1);
            // What recovery will read directly: the positions at rest below where its scan starts (those at or above it the
            // scan meets anyway), as the analysis scan counts them, so this line says what the next recovery does.
            var readDirectly = record.AtRestScanFromLsn == 0 ? [] : record.AtRest.Where(p => p.Lsn < record.AtRestScanFromLsn).ToList();
            var variablesReadDirectly = readDirectly.Count(p => !string.IsNullOrEmpty(p.Variable));
            var result = new ServiceCheckpointResult(checkpointLsn, record.ScanFromLsn == 0 ? checkpointLsn : record.ScanFromLsn, record.SessionCount, record.VariableCount, forcedSessions, forcedVariables,
                truncated, Stopwatch.GetElapsedTime(started), record.AtRestScanFromLsn, readDirectly.Count - variablesReadDirectly, variablesReadDirectly);
            Taken_(logger, result.Lsn, result.ScanFrom, result.AtRestScanFrom == 0 ? result.ScanFrom : result.AtRestScanFrom, result.SessionsAtRest, result.VariablesAtRest,
                result.Sessions, result.Variables, forcedSessions, forcedVariables, (long)result.Elapsed.TotalMilliseconds);
            return result;
        }
        finally
        {
            _gate.Release();
        }
    }

    /// <summary>
    /// A graceful drain: every session (none is executing any more) and every shared variable is checkpointed, then one
    /// service checkpoint marks the clean shutdown. The next start restores them all and replays nothing.
    /// </summary>
    public async Task<ServiceCheckpointResult> CheckpointEverythingAsync(CancellationToken cancellationToken)
    {
        // In parallel: in a service domain each session's checkpoint waits for a distributed flush of its DV first, which
        // for a member out of reach takes FlushTimeout (5 s by default) before it gives up; one after the other, ten sessions
        // that depend on a stopped member held the drain past the host's 30 s shutdown timeout (issue 49: a SIGTERM of two
        // members took 20-30 s).
        var due = sessions.All.Where(session => !session.Ended && session.Ready.IsCompletedSuccessfully &&
                                                 (session.PositionStream.Count > 0 || session.RecoveryLsn < log.BeginAddress || session.LoggedBytesSinceCheckpoint > 0)).ToList();
        await Parallel.ForEachAsync(due, new ParallelOptions { MaxDegreeOfParallelism = DrainParallelism, CancellationToken = cancellationToken },
            async (session, token) => await CheckpointIdleSessionAsync(session, wait: true, token).ConfigureAwait(false)).ConfigureAwait(false);

        await shared.CheckpointAllAsync(cancellationToken).ConfigureAwait(false);
        log.CrashPoints.Hit(CrashPoints.DrainCheckpointed);
        return await TakeAsync(cleanShutdown: true, cancellationToken).ConfigureAwait(false);
    }

    private async Task<(int Sessions, int Variables)> CheckpointStaleAsync(CancellationToken cancellationToken)
    {
        var forcedSessions = 0;
        foreach (var session in sessions.All)
        {
            // With at-rest lists, a session with records after its checkpoint is checkpointed now if no request holds it: it
            // is then at rest, and the next recovery scans none of its records before this point.
            if (session.QuarantineReason is { } reason && session.Diverged is not null && !session.Ended)
            {
                // A quarantined session's marker is carried forward so the log's start moves past it: it is all that is kept
                // of the session, and it never changes. Not after idleAfter service checkpoints, as an idle session's checkpoint
                // is (issue 55: the marker then held the log's begin, and everything logged after it, for idleAfter service
                // checkpoints, 4 minutes by default, at every carry), but at each service checkpoint once one was taken since
                // it was logged: one small record per quarantined session and checkpoint, and the begin follows the checkpoints.
                if (session.ServiceCheckpointsSinceCheckpoint >= 1)
                {
                    var marker = SessionCheckpoints.CaptureQuarantineMarker(session, reason);
                    session.ContinueFromCheckpoint(log.Append(RecordKind.SessionCheckpoint, marker), marker);
                    forcedSessions++;
                }

                continue;
            }

            var due = session.ServiceCheckpointsSinceCheckpoint >= idleAfter ||
                      (atRest && (session.LoggedBytesSinceCheckpoint > 0 || session.PositionStream.Count > 0));
            if (due && !session.Ended && session.Ready.IsCompletedSuccessfully &&
                await CheckpointIdleSessionAsync(session, wait: false, cancellationToken).ConfigureAwait(false))
            {
                forcedSessions++;
            }
        }

        var forcedVariables = await shared.CheckpointStaleAsync(idleAfter, cancellationToken).ConfigureAwait(false);
        return (forcedSessions, forcedVariables);
    }

    /// <summary>
    /// True when nothing of <paramref name="session"/> follows <paramref name="lsn"/> (its checkpoint or start) in the log:
    /// recovery may read that one record instead of scanning from it. Checked under the execution lock (every record of a
    /// session is appended under it), so a request that starts afterwards logs at or above the tail read before.
    /// </summary>
    private static bool IsAtRest(Session session, long lsn)
    {
        if (!session.Ready.IsCompletedSuccessfully || session.HoldsReservations || !session.ExecutionLock.Wait(0, CancellationToken.None))
        {
            return false;
        }

        try
        {
            return !session.Ended && session.IsBetweenRequests && session.PositionStream.Count == 0 && session.LoggedBytesSinceCheckpoint == 0 &&
                   session.RecoveryLsn == lsn;
        }
        finally
        {
            session.ExecutionLock.Release();
        }
    }

    /// <summary>Checkpoints a session between two of its requests: at once when none runs, else (with <paramref name="wait"/>) after it.</summary>
    private async Task<bool> CheckpointIdleSessionAsync(Session session, bool wait, CancellationToken cancellationToken)
    {
        // The DV flushed is the one the checkpoint holds: a request that ran between the flush and the lock below merged
        // a DV nobody flushed, and a checkpoint holding it could be an orphan ([MSP §3.2]); the session is then left for the next pass.
        var flushed = session.Dv;
        if (BeforeSessionCheckpoint is { } before && !await before(session, cancellationToken).ConfigureAwait(false))
        {
            return false;
        }

        if (wait)
        {
            await session.ExecutionLock.WaitAsync(cancellationToken).ConfigureAwait(false);
        }
        else if (!session.ExecutionLock.Wait(0, CancellationToken.None))
        {
            return false;
        }

        try
        {
            if (session.Ended || !ReferenceEquals(session.Dv, flushed))
            {
                return false;
            }

            // An idle session's reply kept in the log is copied forward so it stops holding the log back; the drain
            // (wait) references it where it is: it truncates nothing further, and copying every reply would slow it.
            return (wait ? SessionCheckpoints.Take(log, session) : await SessionCheckpoints.TakeIdleAsync(log, session, cancellationToken).ConfigureAwait(false)) != 0;
        }
        finally
        {
            session.ExecutionLock.Release();
        }
    }

    [LoggerMessage(1390, LogLevel.Information,
        "Service checkpoint at LSN {Lsn}: the log is kept from {ScanFrom}, recovery scans from {ScanStart} ({AtRest} sessions and {VariablesAtRest} shared variables at rest read directly); {Sessions} sessions, {Variables} shared variables; forced {ForcedSessions} idle sessions and {ForcedVariables} variables; {ElapsedMs} ms")]
    private static partial void Taken_(ILogger logger, long lsn, long scanFrom, long scanStart, int atRest, int variablesAtRest, int sessions, int variables, int forcedSessions, int forcedVariables, long elapsedMs);
}
