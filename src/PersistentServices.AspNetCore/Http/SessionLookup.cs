using Microsoft.AspNetCore.Http;
using PersistentServices.Hosting;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>Finds the session a request names, as its owner sees it, and waits until it has replayed (a DI singleton).</summary>
internal sealed class SessionLookup(PersistentRuntime runtime, SessionOwners owners)
{
    /// <summary>
    /// The live session <paramref name="id"/> when the caller may use it. A session bound to a principal answers only that
    /// principal; to anyone else it does not exist (its buffered reply never leaks). A key session (Idempotency-Key) is
    /// never found this way: only its key reaches it, so no session-protocol request, read or <c>DELETE</c> can use or end it.
    /// </summary>
    public bool TryFindOwned(HttpContext context, SessionId id, out Session session)
        => runtime.Sessions.TryGet(id, out session) && !session.Ended && !IdempotencyKeys.IdempotencyKey.IsKeySession(session) &&
           owners.Owns(context.User, session);

    /// <summary>
    /// Waits until <paramref name="session"/> finished its replay (at once for sessions started after recovery), at most
    /// <see cref="PersistentServicesOptions.ReplyTimeout"/> for an end client (a calling service waits as long as it takes,
    /// as for its call's execution, <see cref="ReplyTimeouts"/>). False when the client went away, the wait timed out, or
    /// the replay failed (then 503 was written: the request was not admitted, nothing of it ran).
    /// </summary>
    public async ValueTask<bool> WaitUntilReplayedAsync(HttpContext context, Session session, bool fromService = false)
    {
        var ready = session.Ready;
        if (ready.IsCompletedSuccessfully)
        {
            return true;
        }

        // Its client is here: replay it before the sessions nobody waits for.
        runtime.Replays?.Prioritize(session);
        var timeout = ReplyTimeouts.For(runtime, fromService);
        try
        {
            await (timeout == Timeout.InfiniteTimeSpan ? ready.WaitAsync(context.RequestAborted) : ready.WaitAsync(timeout, runtime.Time, context.RequestAborted))
                .ConfigureAwait(false);
            return true;
        }
        catch (OperationCanceledException) when (context.RequestAborted.IsCancellationRequested)
        {
            return false;
        }
        catch (TimeoutException) when (!ready.IsCompleted)
        {
            // Still replaying (its recovery, or an orphan rollback waiting for a member): the request was not admitted.
            await ProtocolProblems.UnavailableAsync(context,
                $"The session is still being recovered (replayed, or rolled back after a member's crash) and was not ready within ReplyTimeout ({timeout.TotalMilliseconds:0} ms). " +
                "Nothing of this request ran: retry the same request.").ConfigureAwait(false);
            return false;
        }
        catch (Exception) when (session.Diverged is not null && IdempotencyKeys.IdempotencyKey.IsKeySession(session))
        {
            await ProtocolProblems.WriteAsync(context, 500, "idempotency-key-diverged", "Idempotency-Key's request already ran; its reply is lost",
                "The request with this Idempotency-Key already ran before a restart, but replaying it did not reproduce it (the service's code changed, " +
                "or the endpoint is not deterministic), so its reply cannot be given. Do not send the operation again under a new key: it would run twice. " +
                "Repeats of this key get this answer until the key's retention ends (then 410 idempotency-key-expired).").ConfigureAwait(false);
            return false;
        }
        catch (Exception) when (session.Diverged is { } divergence)
        {
            // A session quarantined before the last restart is known from its marker, which names no request (Sequence 0).
            await ProtocolProblems.WriteAsync(context, 500, "session-diverged", "Session could not be recovered",
                (divergence.Sequence > 0
                    ? $"After a restart, replaying request {divergence.Sequence} of this session (LSN {divergence.Lsn}) did not reproduce what it did before "
                    : "At an earlier restart, replaying this session did not reproduce what it did before ") +
                "(the service's code changed, or the endpoint is not deterministic). The session is quarantined: start a new session. " +
                "Other sessions are not affected.").ConfigureAwait(false);
            return false;
        }
        catch (Exception)
        {
            await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
            return false;
        }
    }
}
