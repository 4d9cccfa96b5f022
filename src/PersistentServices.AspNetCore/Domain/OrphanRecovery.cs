using Microsoft.Extensions.Logging;
using PersistentServices.Checkpoints;
using PersistentServices.Hosting;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace PersistentServices.Domain;

/// <summary>
/// Orphan recovery while the service runs ([MSP §4.1–4.2]): when a member's crash took back state that a session or a
/// shared variable depends on, the session rolls back (its requests wait meanwhile; one admitted but not started is
/// void, its client retries): it returns to its latest checkpoint (or its start), replays its position stream up to the
/// first orphan record, writes an end-of-skip record and goes on from there; a shared variable rolls back along its
/// backward chain. Triggered by a distributed flush that found the orphan, by an orphan message, and by every recovered
/// state number learned (all sessions and variables are checked).
/// </summary>
/// <remarks>
/// One rollback per session at a time. A trigger while it runs makes it run once more afterwards (the number learned
/// meanwhile may concern records its replay had already passed). A rollback waits for a replay of the session under way
/// (its recovery replay) to finish first. When the request a rollback runs live again is abandoned (a member refused its
/// call as an orphan because its own rollback has not finished, or was out of reach), the request stays unanswered (503)
/// and the rollback runs again after a pause, doubling up to <see cref="MaxRetryDelay"/>, until it completes.
/// </remarks>
internal sealed partial class OrphanRecovery(PersistentRuntime runtime, SessionReplayer replayer, ReplayPipeline pipeline, Quarantines quarantines, ILogger<OrphanRecovery> logger)
{
    /// <summary>The first pause before a rollback runs an abandoned request again.</summary>
    public static readonly TimeSpan FirstRetryDelay = TimeSpan.FromMilliseconds(200);

    /// <summary>The longest pause between two runs of an abandoned request.</summary>
    public static readonly TimeSpan MaxRetryDelay = TimeSpan.FromSeconds(5);

    /// <summary>
    /// Rollbacks of one session for one lost state after which orphan recovery gives up on the session (quarantines it):
    /// after a rollback the session no longer depends on that state, and nothing known to be lost can become a dependency
    /// again (messages, call replies and shared writes that carry it are refused), so a session that keeps coming back to
    /// it is caught in a loop that only a defect can cause; each turn replays the session and appends records.
    /// </summary>
    public const int MaxRollbacksPerLoss = 16;

    private readonly Lock _gate = new();
    private readonly Dictionary<SessionId, Run> _runs = [];
    private readonly System.Runtime.CompilerServices.ConditionalWeakTable<Session, LossCount> _losses = new();

    /// <summary>Rolls back <paramref name="session"/>; a trigger while it rolls back makes it roll back once more afterwards.</summary>
    public void Schedule(Session session, RecoveredStateNumber lost)
    {
        if (session.Ended || session.Diverged is not null)
        {
            return;
        }

        int times;
        lock (_gate)
        {
            if (_runs.TryGetValue(session.Id, out var running))
            {
                running.Again = true; // a rollback under way looks again; not one more rollback for this loss
                return;
            }

            var count = _losses.GetOrCreateValue(session);
            times = count.Lost == lost ? ++count.Times : count.Times = 1;
            count.Lost = lost;
        }

        if (times > MaxRollbacksPerLoss)
        {
            GiveUp(session, lost, times - 1);
            return;
        }

        Start(session, lost, TimeSpan.Zero);
    }

    /// <summary>
    /// The request a rollback runs again keeps being abandoned for lost state or a refused call number
    /// (<paramref name="cause"/>): quarantined as <see cref="GiveUp(Session, RecoveredStateNumber, int)"/> does.
    /// </summary>
    private void GiveUp(Session session, Exception cause, int runs)
    {
        if (cause is OrphanException orphan)
        {
            GiveUp(session, orphan.Lost, runs);
            return;
        }

        var error = new ReplayDivergenceException(
            $"Session {session.TraceTag} was rolled back and its last request run again {runs} times, and each time it was abandoned ({cause.Message}): " +
            "orphan recovery does not converge for it, so it is quarantined (its requests get session-diverged) instead of running it again without end. " +
            "The other sessions go on. This is a defect: please report it with the service's log.",
            session.TraceTag, session.RecoveryLsn);
        quarantines.Quarantine(session, error, logger);
        GaveUpRerunning(logger, session.TraceTag, runs, cause.Message);
    }

    /// <summary>The session keeps depending on <paramref name="lost"/> after every rollback: quarantined (reported: log, health, metric), not rolled back again.</summary>
    private void GiveUp(Session session, RecoveredStateNumber lost, int rollbacks)
    {
        var error = new ReplayDivergenceException(
            $"Session {session.TraceTag} depended on state of '{lost.Service}' that its crash took back (epoch {lost.State.Epoch}, recovered to LSN {lost.State.Lsn}) " +
            $"again after each of {rollbacks} rollbacks: orphan recovery does not converge for it, so it is quarantined (its requests get session-diverged) " +
            "instead of rolling back without end. The other sessions go on. This is a defect: please report it with the service's log.",
            session.TraceTag, session.RecoveryLsn);
        quarantines.Quarantine(session, error, logger);
        GaveUp(logger, session.TraceTag, lost.Service, lost.State.Epoch, lost.State.Lsn, rollbacks);
    }

    /// <summary>
    /// The replay of a recovered session abandoned the request the crash cut short (<see cref="ReplayTailAbandonedException"/>),
    /// or a live request was abandoned without an orphan to roll back for (a member refused its call, or was out of reach):
    /// after a pause the session rolls back and runs it again (by then the member that refused it may have rolled back).
    /// </summary>
    public void ScheduleAfterAbandonedTail(Session session) => Start(session, null, FirstRetryDelay);

    /// <summary>A recovered state number was learned: every session and shared variable that depended on what it lost rolls back.</summary>
    public async Task OnLearnedAsync(RecoveredStateNumber lost)
    {
        foreach (var session in runtime.Sessions.All)
        {
            if (!session.Ended && session.Dv.IsOrphan(lost))
            {
                Schedule(session, lost);
            }
        }

        foreach (var variable in runtime.Shared.VariableNames())
        {
            await runtime.Shared.RollBackOrphanAsync(variable, lost, runtime.Domain.Recovered).ConfigureAwait(false);
        }
    }

    /// <summary>Waits for every rollback under way (tests, drain).</summary>
    public Task WhenIdleAsync()
    {
        lock (_gate)
        {
            return Task.WhenAll(_runs.Values.Select(r => r.Task));
        }
    }

    private void Start(Session session, RecoveredStateNumber? lost, TimeSpan delay)
    {
        if (session.Ended)
        {
            return;
        }

        lock (_gate)
        {
            if (_runs.TryGetValue(session.Id, out var running))
            {
                running.Again = true;
                return;
            }

            var run = new Run();
            _runs[session.Id] = run;
            run.Task = Task.Run(() => RunAsync(session, run, lost, delay));
        }
    }

    private async Task RunAsync(Session session, Run run, RecoveredStateNumber? lost, TimeSpan delay)
    {
        var abandonedRuns = 0;

        // Runs again whose request was abandoned for lost state (an orphan) or a member's refusal of its call's number: each
        // is a rollback that did not converge. Past MaxRollbacksPerLoss in a row the session is quarantined (the loop ends);
        // runs abandoned because a member was out of reach, or its DV or signature refused, wait on without count.
        var unsettledRuns = 0;
        while (true)
        {
            if (delay > TimeSpan.Zero)
            {
                await Task.Delay(delay, runtime.Time).ConfigureAwait(false);
            }

            lock (_gate)
            {
                run.Again = false;
            }

            var abandonedBy = await RollBackAsync(session, lost).ConfigureAwait(false);
            var abandoned = abandonedBy is not null;
            if (abandonedBy is OrphanException or Calls.CallRefusedException { Numbering: true })
            {
                if (++unsettledRuns > MaxRollbacksPerLoss)
                {
                    lock (_gate)
                    {
                        _runs.Remove(session.Id);
                    }

                    GiveUp(session, abandonedBy, unsettledRuns - 1);
                    return;
                }
            }
            else if (!abandoned)
            {
                unsettledRuns = 0;
            }

            lock (_gate)
            {
                if ((!abandoned && !run.Again) || session.Ended || !runtime.Availability.CanServe(RequestKind.BackgroundWork))
                {
                    _runs.Remove(session.Id);
                    return;
                }
            }

            lost = null;
            delay = abandoned
                ? TimeSpan.FromTicks(Math.Min(MaxRetryDelay.Ticks, FirstRetryDelay.Ticks << Math.Min(++abandonedRuns, 10)))
                : TimeSpan.Zero;
        }
    }

    /// <summary>One rollback; what abandoned the request it ran live again (the session is ready, that request unanswered), or null.</summary>
    private async Task<Exception?> RollBackAsync(Session session, RecoveredStateNumber? lost)
    {
        // A replay of this session under way (its recovery replay, which may still run its last request live) finishes
        // first: a reset beneath it would make it replay a stream being replaced, and its end would leave the session at
        // the recovery point (expecting its first number again).
        await session.Ready.ConfigureAwait(ConfigureAwaitOptions.SuppressThrowing);
        if (session.Ended || session.Diverged is not null)
        {
            return null;
        }

        if (lost is { } known)
        {
            RollingBack(logger, session.TraceTag, known.Service, known.State.Epoch, known.State.Lsn);
        }
        else
        {
            RunningAgain(logger, session.TraceTag);
        }

        session.BeginRollback();
        await session.ExecutionLock.WaitAsync().ConfigureAwait(false);
        try
        {
            // What the session logged last (an abandoned request) must be readable: replay reads it from the log.
            if (runtime.Log.TailAddress > runtime.Log.DurableUntil)
            {
                await runtime.Log.WaitUntilDurableAsync(runtime.Log.TailAddress - 1).ConfigureAwait(false);
            }

            // Back to where the session's recovery starts, then replay: the replay stops at the first orphan record.
            var start = await runtime.Log.ReadAsync(session.RecoveryLsn).ConfigureAwait(false);
            if (start.Kind == RecordKind.SessionCheckpoint)
            {
                var checkpoint = start.Parse(SessionCheckpoint.Parser);
                await SessionCheckpoints.ReadStateAsync(runtime.Log, checkpoint, session.RecoveryLsn, CancellationToken.None).ConfigureAwait(false);
                session.ResetToRecoveryPoint(checkpoint, 0);
            }
            else
            {
                session.ResetToRecoveryPoint(null, start.Kind == RecordKind.SessionStarted ? start.Parse(SessionStarted.Parser).FirstSequence : 0);
            }

            var (router, next) = await pipeline.Ready.ConfigureAwait(false);
            await replayer.ReplayAsync(session, router.Value, next, preloaded: null, CancellationToken.None).ConfigureAwait(false);
            return null;
        }
        catch (ReplayTailAbandonedException abandoned)
        {
            // The session is ready with that request unanswered; the caller runs the rollback again after a pause.
            return abandoned.InnerException ?? abandoned;
        }
        catch (Exception ex) when (ex is not OutOfMemoryException)
        {
            // The rollback could not finish (the log faulted, a replay diverged): the session cannot be trusted any more.
            RollbackFailed(logger, session.TraceTag, ex);
            session.FailReplay(ex);
            return null;
        }
        finally
        {
            session.ExecutionLock.Release();
        }
    }

    private sealed class LossCount
    {
        public RecoveredStateNumber? Lost { get; set; }

        public int Times { get; set; }
    }

    private sealed class Run
    {
        public Task Task { get; set; } = Task.CompletedTask;

        public bool Again { get; set; }
    }

    [LoggerMessage(1371, LogLevel.Warning, "Session {SessionTag} depends on state of '{Service}' that its crash took back (epoch {Epoch}, recovered to LSN {Lsn}): rolling it back")]
    private static partial void RollingBack(ILogger logger, string sessionTag, string service, long epoch, long lsn);

    [LoggerMessage(1372, LogLevel.Error, "The rollback of orphan session {SessionTag} failed; its requests get 503")]
    private static partial void RollbackFailed(ILogger logger, string sessionTag, Exception exception);

    [LoggerMessage(1377, LogLevel.Error,
        "Session {SessionTag} still depends on lost state of '{Service}' (epoch {Epoch}, recovered to LSN {Lsn}) after {Rollbacks} rollbacks for it: quarantined instead of rolling back again")]
    private static partial void GaveUp(ILogger logger, string sessionTag, string service, long epoch, long lsn, int rollbacks);

    [LoggerMessage(1387, LogLevel.Error,
        "Session {SessionTag}'s last request was run again {Runs} times by its rollback and abandoned each time ({Cause}): quarantined instead of running it again")]
    private static partial void GaveUpRerunning(ILogger logger, string sessionTag, int runs, string cause);

    [LoggerMessage(1374, LogLevel.Warning, "Session {SessionTag} rolls back again (a recovered state number was learned while it rolled back, or the request it ran live again was abandoned)")]
    private static partial void RunningAgain(ILogger logger, string sessionTag);
}
