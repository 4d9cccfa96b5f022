using Microsoft.Extensions.Logging;
using PersistentServices.Checkpoints;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;

namespace PersistentServices.Sessions;

/// <summary>
/// Quarantine as a state with an exit (docs/upgrades.md, "Quarantined sessions"). A session is quarantined when its replay
/// diverged (the code changed, or it is not deterministic) or its orphan recovery did not converge: its requests are refused
/// (<c>session-diverged</c>, for a key <c>idempotency-key-diverged</c>), every other session goes on. Its marker, a session
/// checkpoint without state, is logged at once, so the session no longer holds the log back and later recoveries
/// quarantine it again without replaying. It leaves the state by
/// <list type="bullet">
/// <item>expiring on its retention (a session's idle retention; a key's retention, after which the key is remembered as an
///   expired key: a repeat gets <c>410</c>, never a second execution);</item>
/// <item>its owner ending it (<c>DELETE</c>, 204);</item>
/// <item>an operator discarding it (ended) or releasing it (it serves again with no state, its last request answered with a
///   stand-in reply; a key becomes an expired key).</item>
/// </list>
/// A DI singleton: recovery and orphan recovery quarantine with it, a session's owner and an operator end or release with it,
/// and key expiry releases a quarantined key.
/// </summary>
internal sealed partial class Quarantines(PersistentRuntime runtime)
{
    /// <summary>Quarantines <paramref name="session"/> and logs its marker (not in the replay check's sandbox, which logs nothing for good).</summary>
    public void Quarantine(Session session, ReplayDivergenceException divergence, ILogger logger, bool logMarker = true)
    {
        runtime.Shared.ReleaseReservations(session.Id);
        if (logMarker)
        {
            try
            {
                var marker = SessionCheckpoints.CaptureQuarantineMarker(session, divergence.Message);
                var lsn = runtime.Log.Append(RecordKind.SessionCheckpoint, marker);
                session.ContinueFromCheckpoint(lsn, marker);
            }
            catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
            {
                // Not marked: the next recovery replays the session again (and quarantines it again); its records stay.
                MarkerNotLogged(logger, session.TraceTag, ex);
            }
        }

        session.Quarantine(divergence);
        runtime.Metrics.DivergedSessions.Add(1);
    }

    /// <summary>The exception a marked session is quarantined with after a restart.</summary>
    public static ReplayDivergenceException FromMarker(Session session)
        => new(session.QuarantineReason ?? "quarantined", session.TraceTag, session.RecoveryLsn);

    /// <summary>
    /// Ends a quarantined session: its slot and memory are freed, its end logged (not forced: a lost end means it is
    /// quarantined again after a restart and ends again later). False when it is not quarantined or ended already.
    /// </summary>
    public bool End(Session session, SessionEndReason reason, ILogger logger)
    {
        if (session.Diverged is null || !session.TryEnd())
        {
            return false;
        }

        try
        {
            SessionRecords.AppendEnded(runtime.Log, session, reason, runtime.Time.GetUtcNow());
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
        {
            MarkerNotLogged(logger, session.TraceTag, ex);
        }

        runtime.Sessions.Remove(session.Id);
        Ended(logger, session.TraceTag, reason.ToString());
        return true;
    }

    /// <summary>
    /// Releases a quarantined session: a checkpoint with no state and <paramref name="standIn"/> as the reply of its last
    /// request is logged, and the session serves again from there. False when it is not quarantined.
    /// </summary>
    public bool Release(Session session, BufferedReply standIn, string why, ILogger logger)
    {
        if (session.Diverged is null || session.Ended)
        {
            return false;
        }

        var record = QuarantineRepair.ReleaseCheckpoint(session, standIn);
        var lsn = runtime.Log.Append(RecordKind.SessionCheckpoint, record);
        session.ContinueFromCheckpoint(lsn, record);
        session.ReleaseQuarantine();
        Released(logger, session.TraceTag, why);
        return true;
    }

    /// <summary>The reply a released session's last request gets (a retry of it): its real reply could not be reproduced.</summary>
    public static BufferedReply ReleasedReply() => QuarantineRepair.ReleasedReply();

    [LoggerMessage(1117, LogLevel.Error, "The quarantine of session {SessionTag} could not be logged; it is quarantined again after a restart")]
    private static partial void MarkerNotLogged(ILogger logger, string sessionTag, Exception exception);

    [LoggerMessage(1118, LogLevel.Warning, "Quarantined session {SessionTag} ended ({Reason})")]
    private static partial void Ended(ILogger logger, string sessionTag, string reason);

    [LoggerMessage(1119, LogLevel.Warning, "Quarantined session {SessionTag} released ({Why}): it serves again, with no state")]
    private static partial void Released(ILogger logger, string sessionTag, string why);
}
