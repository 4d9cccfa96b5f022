using System.Collections.Concurrent;
using Microsoft.Extensions.Logging;
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
internal sealed partial class OrphanRecovery(PersistentRuntime runtime, SessionReplayer replayer, ReplayPipeline pipeline, ILogger<OrphanRecovery> logger)
{
    private readonly ConcurrentDictionary<SessionId, Task> _running = new();

    /// <summary>Rolls back <paramref name="session"/> once (a second trigger while it rolls back joins the first).</summary>
    public void Schedule(Session session, RecoveredStateNumber lost)
    {
        if (session.Ended)
        {
            return;
        }

        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        if (!_running.TryAdd(session.Id, done.Task))
        {
            return;
        }

        _ = Task.Run(async () =>
        {
            try
            {
                await RollBackAsync(session, lost).ConfigureAwait(false);
            }
            finally
            {
                _running.TryRemove(session.Id, out Task? _);
                done.TrySetResult();
            }
        });
    }

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
            await runtime.Shared.RollBackOrphanAsync(variable, lost).ConfigureAwait(false);
        }
    }

    /// <summary>Waits for every rollback under way (tests, drain).</summary>
    public Task WhenIdleAsync() => Task.WhenAll(_running.Values);

    private async Task RollBackAsync(Session session, RecoveredStateNumber lost)
    {
        RollingBack(logger, session.TraceTag, lost.Service, lost.State.Epoch, lost.State.Lsn);
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
                session.ResetToRecoveryPoint(start.Parse(SessionCheckpoint.Parser), 0);
            }
            else
            {
                session.ResetToRecoveryPoint(null, start.Kind == RecordKind.SessionStarted ? start.Parse(SessionStarted.Parser).FirstSequence : 0);
            }

            var (router, next) = await pipeline.Ready.ConfigureAwait(false);
            await replayer.ReplayAsync(session, router.Value, next, preloaded: null, CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is not OutOfMemoryException)
        {
            // The rollback could not finish (the log faulted, a replay diverged): the session cannot be trusted any more.
            RollbackFailed(logger, session.TraceTag, ex);
            session.FailReplay(ex);
        }
        finally
        {
            session.ExecutionLock.Release();
        }
    }

    [LoggerMessage(1371, LogLevel.Warning, "Session {SessionTag} depends on state of '{Service}' that its crash took back (epoch {Epoch}, recovered to LSN {Lsn}): rolling it back")]
    private static partial void RollingBack(ILogger logger, string sessionTag, string service, long epoch, long lsn);

    [LoggerMessage(1372, LogLevel.Error, "The rollback of orphan session {SessionTag} failed; its requests get 503")]
    private static partial void RollbackFailed(ILogger logger, string sessionTag, Exception exception);
}
