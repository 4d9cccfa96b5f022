using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Http;
using PersistentServices.Log;

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
    /// the session joins the table.
    /// </summary>
    public async ValueTask<bool> StartAsync(Session session, ILogger logger, bool reserved = false)
    {
        var added = false;
        var starting = runtime.Sessions.BeginStart(runtime.Log.TailAddress);
        try
        {
            var lsn = SessionRecords.AppendStarted(runtime.Log, session, session.StartedAt);
            await runtime.Log.WaitUntilDurableAsync(lsn, CancellationToken.None).ConfigureAwait(false);
            added = reserved ? runtime.Sessions.TryAddReserved(session) : runtime.Sessions.TryAdd(session);
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
        {
            AspNetCoreEvents.SessionResourceUnavailable(logger, ex);
            return false;
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
        return true;
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
        if (runtime.Sessions.TryReserve(session.Owner, runtime.Options.MaxSessions, maxPerOwner: null) != StartRefusal.None)
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
