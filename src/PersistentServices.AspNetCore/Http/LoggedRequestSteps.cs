using PersistentServices.Hosting;
using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// The steps of a logged request that live execution (<see cref="PersistentRequestHandler"/>) and replay
/// (<see cref="Recovery.SessionReplayer"/>) share, in one place so the two cannot drift apart (issue 33: live once did
/// not record its reply hash, replay did). In order: <see cref="MergeDv"/> and <see cref="BeginExecution"/> (begin),
/// then the endpoint runs (<see cref="EndpointRunner"/>), then <see cref="LogReply"/>. What differs is around them: live
/// admits before and makes the reply safe and sends it after; replay checks for divergence and cuts orphans after.
/// </summary>
internal static class LoggedRequestSteps
{
    /// <summary>
    /// Begin, part 1: the DV the request arrived with joins the session's (pruned of what is known durable), so that a
    /// recovered state number learned later finds the session an orphan when it depends on what a caller lost. Null: nothing to merge.
    /// </summary>
    public static void MergeDv(PersistentRuntime runtime, Session session, Domain.DependencyVector? arrived)
    {
        if (arrived is { } dv)
        {
            session.Dv = session.Dv.Merge(dv).Prune(runtime.Domain.Recovered);
        }
    }

    /// <summary>
    /// Begin, part 2: the request's execution at its logged position (its records are appended from there), live
    /// (<paramref name="cursor"/> null) or replayed from its logged records.
    /// </summary>
    public static RequestExecution BeginExecution(PersistentRuntime runtime, Session session, LoggedPosition position, ReplayCursor? cursor)
    {
        var execution = new RequestExecution(runtime.Log, runtime.Options.ServiceName, runtime.Epoch, session, position, cursor);
        execution.Advance(position.RequestLsn);
        return execution;
    }

    /// <summary>
    /// The short reply record ([Phoenix/App Algorithm 3]), appended (not forced), and the reply's hash recorded as the
    /// analysis scan records it: a rollback's replay then compares the request's replayed reply with it, and never takes
    /// the request, when it is the session's last, for one a crash cut short (run on live, its reply logged twice).
    /// Returns the reply record's LSN (what making the reply safe waits for).
    /// </summary>
    public static long LogReply(PersistentRuntime runtime, RequestExecution execution, BufferedReply reply)
    {
        var lsn = SessionRecords.AppendReply(runtime.Log, execution.Session, execution.Position, reply);
        execution.Session.LoggedReplies[execution.Position.Sequence] = (reply.StatusCode, reply.Hash);
        return lsn;
    }
}
