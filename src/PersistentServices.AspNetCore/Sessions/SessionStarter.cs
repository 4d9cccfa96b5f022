using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Http;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Sessions;

/// <summary>
/// Starting a session: its start is logged and forced before anyone learns of it, then it joins the table (a DI
/// singleton; the session endpoints start a client's sessions with it, the header resolver a calling service's).
/// </summary>
internal sealed partial class SessionStarter(PersistentRuntime runtime, SessionLookup lookup, SessionOwners owners, SessionExpiryService expiry)
{
    /// <summary>
    /// Logs and forces <paramref name="session"/>'s start and adds it; false when the log could not make it durable. With
    /// <paramref name="reserved"/>, its slot was taken by <see cref="SessionTable.TryReserve"/> and is given back unless
    /// the session joins the table. Waits as long as the start takes to be durable (a calling service's session).
    /// </summary>
    public async ValueTask<bool> StartAsync(Session session, ILogger logger, bool reserved = false)
        => await StartWithinAsync(session, logger, Timeout.InfiniteTimeSpan, reserved).ConfigureAwait(false) == SessionStart.Started;

    /// <summary>
    /// As <see cref="StartAsync"/>, within <paramref name="replyTimeout"/> (<see cref="ReplyTimeouts"/>): when the start
    /// is not durable by then (with synchronous replication: too few replicas answer), <see cref="SessionStart.Pending"/>
    /// and nothing started. The session never joins the table, its slot is given back, and its end is appended right after
    /// its start (reason <c>Expired</c>: it was never handed out), so a node that replays the log (a promoted replica, a
    /// restart) drops it too once the end is there; if only the start reached a node, that node holds a session nobody
    /// knows the id of, until <see cref="PersistentServicesOptions.UnusedSessionRetention"/> expires it. A session start
    /// carries no key a retry could repeat it by, so a 503 must mean that nothing started (docs/protocol.md, "Sessions").
    /// </summary>
    public async ValueTask<SessionStart> StartWithinAsync(Session session, ILogger logger, TimeSpan replyTimeout, bool reserved = false)
    {
        var added = false;
        var starting = runtime.Sessions.BeginStart(runtime.Log.TailAddress);
        try
        {
            var lsn = SessionRecords.AppendStarted(runtime.Log, session, session.StartedAt);
            if (!await ReplyTimeouts.WithinAsync(runtime.Log.WaitUntilDurableAsync(lsn, CancellationToken.None), replyTimeout, runtime.Time).ConfigureAwait(false))
            {
                AspNetCoreEvents.SessionStartPending(logger, session.TraceTag, (long)replyTimeout.TotalMilliseconds);
                EndUnstarted(session, logger);
                return SessionStart.Pending;
            }

            added = reserved ? runtime.Sessions.TryAddReserved(session) : runtime.Sessions.TryAdd(session);
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
        {
            AspNetCoreEvents.SessionResourceUnavailable(logger, ex);
            return SessionStart.Unavailable;
        }
        finally
        {
            runtime.Sessions.EndStart(starting);
            if (reserved && !added)
            {
                runtime.Sessions.ReleaseReserved(session.Owner);
            }
        }

        AspNetCoreEvents.SessionStarted(logger, session.TraceTag);
        return SessionStart.Started;
    }

    /// <summary>The end of a start that was answered 503: appended, not waited for (it becomes durable with the start, or the log faulted and nothing of either counts).</summary>
    private void EndUnstarted(Session session, ILogger logger)
    {
        long lsn;
        try
        {
            lsn = SessionRecords.AppendEnded(runtime.Log, session, SessionEndReason.Expired, runtime.Time.GetUtcNow());
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
        {
            return; // the log faulted meanwhile: the service restarts, and nothing was handed out
        }

        _ = EndedAsync();

        async Task EndedAsync()
        {
            try
            {
                await runtime.Log.WaitUntilDurableAsync(lsn, CancellationToken.None).ConfigureAwait(false);
                AspNetCoreEvents.SessionStartAbandoned(logger, session.TraceTag);
            }
            catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
            {
                // The log faulted or closed first: nothing of the start was acknowledged.
            }
        }
    }

    /// <summary>
    /// A verified call from another service names a session this service does not have yet: the session that calls from
    /// that caller's session use (docs/calls.md), owned by the calling service, numbered from the call's number. Null
    /// (with the refusal written) when it cannot be started; the existing session when a concurrent attempt won.
    /// </summary>
    public async ValueTask<Session?> StartForCallerAsync(HttpContext context, SessionId id, long firstSequence, ILogger logger)
    {
        if (runtime.Sessions.TryGet(id, out var existing))
        {
            return lookup.TryFindOwned(context, id, out existing) ? existing : null;
        }

        // A calling service counts against MaxSessions like any client (not against MaxSessionsPerOwner: one caller
        // session per session of the calling service is its normal use).
        if (owners.Of(context.User) is not { } owner)
        {
            await owners.UnidentifiedAsync(context).ConfigureAwait(false);
            return null;
        }

        var session = new Session(id, owner, runtime.Time.GetUtcNow(), replaying: false, codec: runtime.Codec);
        if (runtime.Sessions.TryReserve(session.Owner, Http.IdempotencyKeys.IdempotencyKeySessions.TableCap(runtime), maxPerOwner: null) != StartRefusal.None)
        {
            context.Response.Headers.RetryAfter = expiry.RetryAfterSeconds(runtime.Time.GetUtcNow(), null).ToString(System.Globalization.CultureInfo.InvariantCulture);
            runtime.Metrics.SessionsRefused.Add(1, new KeyValuePair<string, object?>("reason", "max_sessions"));
            await ProtocolProblems.WriteAsync(context, 429, "too-many-sessions", "Too many sessions",
                $"The service holds its maximum of {runtime.Options.MaxSessions} live sessions.").ConfigureAwait(false);
            return null;
        }

        session.StartNumberingAt(firstSequence);
        if (!await StartAsync(session, logger, reserved: true).ConfigureAwait(false))
        {
            await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
            return null;
        }

        expiry.NoteStarted(session);

        return lookup.TryFindOwned(context, id, out var owned) ? owned : null;
    }

    /// <summary>
    /// 429 at a cap (docs/protocol.md, "Limits"), with a <c>Retry-After</c> that says when a slot really frees: when the
    /// earliest-expiring session or remembered key (the caller's own, at its share) expires.
    /// </summary>
    public Task RefuseAsync(HttpContext context, StartRefusal refusal, byte[] bucket, bool byAddress, ILogger logger, string what = "live sessions")
    {
        var options = runtime.Options;
        var shareFull = refusal == StartRefusal.OwnerFull;
        var retryAfter = expiry.RetryAfterSeconds(runtime.Time.GetUtcNow(), shareFull ? bucket : null);
        context.Response.Headers.RetryAfter = retryAfter.ToString(System.Globalization.CultureInfo.InvariantCulture);
        var option = !shareFull ? "MaxSessions" : byAddress ? "MaxSessionsPerAddress" : "MaxSessionsPerOwner";
        runtime.Metrics.SessionsRefused.Add(1, new KeyValuePair<string, object?>("reason",
            !shareFull ? "max_sessions" : byAddress ? "max_sessions_per_address" : "max_sessions_per_owner"));
        SessionRefused(logger, option, retryAfter);
        return shareFull
            ? ProtocolProblems.WriteAsync(context, 429, "too-many-owner-sessions", byAddress ? "Too many sessions for this client address" : "Too many sessions for this principal",
                $"You hold the maximum of {(byAddress ? options.EffectiveMaxSessionsPerAddress : options.EffectiveMaxSessionsPerOwner)} {what} per " +
                $"{(byAddress ? "anonymous client address" : "principal")} ({option}), sessions and remembered Idempotency-Keys together: end a session " +
                $"(DELETE {options.SessionsPath}/{{id}}) or retry in {retryAfter} s, when your earliest one expires.")
            : ProtocolProblems.WriteAsync(context, 429, "too-many-sessions", "Too many sessions",
                $"The service holds its maximum of {options.MaxSessions} {what} (sessions and remembered Idempotency-Keys together); a slot frees in " +
                $"{retryAfter} s, when the next one expires (or sooner, when a client ends its session).");
    }

    [LoggerMessage(1112, LogLevel.Debug, "Refused a session start: {Cap} reached; Retry-After {RetryAfterSeconds} s")]
    private static partial void SessionRefused(ILogger logger, string cap, long retryAfterSeconds);
}

/// <summary>How a session start ended (<see cref="SessionStarter.StartWithinAsync"/>).</summary>
internal enum SessionStart
{
    /// <summary>Durable and in the table: its id may be handed out.</summary>
    Started,

    /// <summary>The log could not make it durable (faulted or closed): 503, nothing started.</summary>
    Unavailable,

    /// <summary>Not durable within the reply timeout (too few replicas answer): 503 <c>reply-pending</c>, nothing started.</summary>
    Pending,
}
