using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Http;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Recovery;

/// <summary>
/// Replays one session's logged requests, in order, through the application's own endpoint pipeline (routing, model
/// binding, filters, a fresh DI scope), in process (seed 000 §4.1 "Logged Request Replay"; seed 001 §2.5). Replies are
/// discarded except the last, which becomes the buffered reply. Each replayed reply is compared with the logged reply
/// hash, when one was logged; a difference stops recovery.
/// </summary>
internal sealed class SessionReplayer(PersistentRuntime runtime, IServiceScopeFactory scopes, ILogger<SessionReplayer> logger)
{
    public async Task<long> ReplayAsync(Session session, RequestDelegate router, RequestDelegate next, CancellationToken cancellationToken)
    {
        BufferedReply? last = null;
        long replayed = 0;
        var positions = session.PositionStream;
        for (var i = 0; i < positions.Count; i++)
        {
            var position = positions[i];
            var record = (await runtime.Log.ReadAsync(position.RequestLsn, cancellationToken).ConfigureAwait(false)).Parse(LoggedRequest.Parser);
            var aux = new List<LogRecord>(position.Aux.Count);
            foreach (var lsn in position.Aux)
            {
                aux.Add(await runtime.Log.ReadAsync(lsn, cancellationToken).ConfigureAwait(false));
            }

            // The last request may have been cut short by the crash (no reply logged): past its records it runs live.
            var lastAndUnanswered = i == positions.Count - 1 && !session.LoggedReplies.ContainsKey(record.Sequence);
            if (lastAndUnanswered && !session.HoldsReservations)
            {
                // It may run past its log (live): wait until the sessions that crashed inside an update finished theirs.
                await runtime.Shared.WhenUnreservedAsync().WaitAsync(cancellationToken).ConfigureAwait(false);
            }

            var cursor = new ReplayCursor(aux, lastAndUnanswered, session.Id.ToString(), record.Sequence, position.RequestLsn);
            var execution = new RequestExecution(runtime.Log, runtime.Options.ServiceName, runtime.Epoch, session, position, cursor);
            execution.Advance(position.RequestLsn);
            last = await ReplayOneAsync(execution, record, router, next).ConfigureAwait(false);
            replayed++;
            if (lastAndUnanswered)
            {
                await LogReplyAsync(execution, last, cancellationToken).ConfigureAwait(false);
            }
        }

        runtime.Shared.ReleaseReservations(session.Id);
        session.FinishReplay(last);
        return replayed;
    }

    /// <summary>
    /// The crash cut the last request short; its replay finished it live, and its reply now becomes the buffered reply
    /// a retry receives. Like any reply to an end client it leaves only once it and everything it depends on (the
    /// request's live reads and writes) are durable (seed 000 Fig. 7): otherwise a second crash could lose the live part
    /// after a client saw its reply, and the next replay could answer differently (another ticket, another version).
    /// </summary>
    private async Task LogReplyAsync(RequestExecution execution, BufferedReply reply, CancellationToken cancellationToken)
    {
        var session = execution.Session;
        var replyLsn = LoggedRequests.AppendReply(runtime.Log, session, execution.Position, reply);
        session.LoggedReplies[execution.Position.Sequence] = (reply.StatusCode, reply.Hash);
        await runtime.Log.WaitUntilDurableAsync(replyLsn, cancellationToken).ConfigureAwait(false);
    }

    private async Task<BufferedReply> ReplayOneAsync(RequestExecution execution, LoggedRequest record, RequestDelegate router, RequestDelegate next)
    {
        var session = execution.Session;
        var lsn = execution.Position.RequestLsn;
        var cursor = execution.Cursor!;
        var scope = scopes.CreateAsyncScope();
        await using (scope.ConfigureAwait(false))
        {
            var capture = new ResponseCapture();
            var context = LoggedRequests.CreateReplayContext(record, capture, scope.ServiceProvider);
            await router(context).ConfigureAwait(false);
            var endpoint = context.GetEndpoint();
            if (endpoint?.DisplayName != record.Endpoint || PersistenceMiddleware.RoleOf(endpoint) != EndpointRole.Persistent)
            {
                throw new ReplayDivergenceException(
                    $"Replay of request {record.Sequence} of session {session.Id} (LSN {lsn}, {record.Method} {record.Path}) routed to " +
                    $"'{endpoint?.DisplayName ?? "no endpoint"}', but it ran on '{record.Endpoint}' before the crash (a persistent endpoint was removed or renamed?).",
                    session.Id.ToString(), lsn);
            }

            using (PersistentScope.Enter(new PersistentScope(session, ExecutionMode.Replay, execution)))
            {
                try
                {
                    await next(context).ConfigureAwait(false);
                }
                catch (Exception ex)
                {
                    AspNetCoreEvents.ReplayedEndpointThrew(logger, record.Sequence, session.Id.ToString(), lsn, ex);
                    await capture.ResetAsync(StatusCodes.Status500InternalServerError).ConfigureAwait(false);
                }

                var reply = await capture.FinishAsync().ConfigureAwait(false);
                foreach (var (callback, state) in capture.OnCompletedCallbacks)
                {
                    await callback(state).ConfigureAwait(false);
                }

                // A divergence found by the cursor stops recovery even when the endpoint caught the exception.
                cursor.EnsureConsumed();
                if (cursor.Divergence is { } divergence)
                {
                    throw new ReplayDivergenceException(divergence, session.Id.ToString(), lsn);
                }

                if (session.LoggedReplies.TryGetValue(record.Sequence, out var logged) && !logged.Hash.AsSpan().SequenceEqual(reply.Hash))
                {
                    throw new ReplayDivergenceException(
                        $"Replay of request {record.Sequence} of session {session.Id} (LSN {lsn}, {record.Method} {record.Path}) produced status " +
                        $"{reply.StatusCode} and a different reply than the {logged.StatusCode} logged before the crash: the endpoint is not deterministic " +
                        "(time, random numbers, new ids or unlogged external state must come from the log) or its code changed.",
                        session.Id.ToString(), lsn);
                }

                return reply;
            }
        }
    }
}
