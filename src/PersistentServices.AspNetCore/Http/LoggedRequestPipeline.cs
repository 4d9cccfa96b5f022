using System.Diagnostics;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// The one pipeline of a logged request, live (<see cref="PersistentRequestHandler"/>) or replayed
/// (<see cref="SessionReplayer"/>): begin (<see cref="MergeDv"/>, the request's place, <see cref="BeginExecution"/>),
/// run (<see cref="EndpointRunner"/>), log the reply (<see cref="LogReply"/>), make it safe. What differs between the
/// two paths is the hooks (<see cref="ILoggedRequestHooks{TRequest}"/>), listed there side by side ([MSP §3.1–3.2, §4.1];
/// [Phoenix/App Algorithm 3]).
/// </summary>
internal sealed class LoggedRequestPipeline(PersistentRuntime runtime, ILogger<LoggedRequestPipeline> logger)
{
    /// <summary>
    /// Runs <paramref name="request"/> through the steps, <paramref name="next"/> being the endpoint pipeline. Returns the
    /// captured reply (also in <see cref="LoggedRequestContext.Reply"/>). Whatever a step or a hook throws propagates:
    /// what it means (abandon, divergence, orphan) is the caller's to decide, as it was before the pipeline.
    /// </summary>
    public async Task<CapturedReply> RunAsync<TRequest>(TRequest request, ILoggedRequestHooks<TRequest> hooks, RequestDelegate next)
        where TRequest : LoggedRequestContext
    {
        // Begin.
        MergeDv(request.Session, request.IncomingDv);
        var position = hooks.Place(request);
        request.Execution = BeginExecution(request.Session, position, request.Cursor);
        request.Activity?.SetTag(PersistentServicesTracing.LsnTagName, position.RequestLsn);
        await hooks.BegunAsync(request).ConfigureAwait(false);

        // Run: the endpoint under capture, with the logged body and a lifetime its client cannot abort.
        var mode = request.Cursor is null ? ExecutionMode.Live : ExecutionMode.Replay;
        request.Reply = await EndpointRunner.RunAsync(request.HttpContext, next, new PersistentScope(request.Session, mode, request.Execution), request.Body, logger)
            .ConfigureAwait(false);
        hooks.Ran(request);

        // Log the reply, then make it safe to leave.
        if (hooks.LogsReply(request))
        {
            var replyLsn = LogReply(request.Execution, request.Reply.Reply);
            request.ReplyLsn = replyLsn;
            request.Activity?.AddEvent(new ActivityEvent("persistentservices.reply.appended"));
            await hooks.MakeSafeAsync(request, replyLsn).ConfigureAwait(false);
        }

        return request.Reply;
    }

    /// <summary>
    /// Begin, part 1: the DV the request arrived with joins the session's (pruned of what is known durable), so that a
    /// recovered state number learned later finds the session an orphan when it depends on what a caller lost. Null: nothing to merge.
    /// </summary>
    internal void MergeDv(Session session, Domain.DependencyVector? arrived)
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
    internal RequestExecution BeginExecution(Session session, LoggedPosition position, ReplayCursor? cursor)
    {
        // A replica's hot follower replays before any log is open: its replays append nothing (RequestExecution.Log).
        var execution = new RequestExecution(cursor is null ? runtime.Log : runtime.OpenLog, runtime.Options.ServiceName, runtime.Epoch, session, position, cursor);
        execution.Advance(position.RequestLsn);
        return execution;
    }

    /// <summary>
    /// The short reply record ([Phoenix/App Algorithm 3]), appended (not forced), and the reply's hash recorded as the
    /// analysis scan records it: a rollback's replay then compares the request's replayed reply with it, and never takes
    /// the request, when it is the session's last, for one a crash cut short (run on live, its reply logged twice;
    /// RollbackOfLiveRequestsTests). Returns the reply record's LSN (what making the reply safe waits for).
    /// </summary>
    internal long LogReply(RequestExecution execution, BufferedReply reply)
    {
        var lsn = SessionRecords.AppendReply(runtime.Log, execution.Session, execution.Position, reply);
        execution.Session.LoggedReplies[execution.Position.Sequence] = (reply.StatusCode, reply.Hash);
        return lsn;
    }
}
