using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Http;
using PersistentServices.Log;

namespace PersistentServices.Sessions;

/// <summary>Starting a session: its start is logged and forced before anyone learns of it, then it joins the table.</summary>
internal static class SessionStart
{
    /// <summary>Logs and forces <paramref name="session"/>'s start and adds it; false when the log could not make it durable.</summary>
    public static async ValueTask<bool> StartAsync(PersistentRuntime runtime, Session session, ILogger logger)
    {
        try
        {
            var lsn = SessionRecords.AppendStarted(runtime.Log, session, session.StartedAt);
            await runtime.Log.WaitUntilDurableAsync(lsn, CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
        {
            AspNetCoreEvents.SessionResourceUnavailable(logger, ex);
            return false;
        }

        runtime.Sessions.TryAdd(session);
        AspNetCoreEvents.SessionStarted(logger, session.TraceTag);
        return true;
    }

    /// <summary>
    /// A verified call from another service names a session this service does not have yet: the session that calls from
    /// that caller's session use (docs/calls.md), owned by the calling service, numbered from the call's number. Null
    /// (with the refusal written) when it cannot be started; the existing session when a concurrent attempt won.
    /// </summary>
    public static async ValueTask<Session?> StartForCallerAsync(PersistentRuntime runtime, HttpContext context, SessionId id, long firstSequence, ILogger logger)
    {
        if (runtime.Sessions.Count >= runtime.Options.MaxSessions)
        {
            context.Response.Headers.RetryAfter = "1";
            await ProtocolProblems.WriteAsync(context, 429, "too-many-sessions", "Too many sessions",
                $"The service holds its maximum of {runtime.Options.MaxSessions} live sessions.").ConfigureAwait(false);
            return null;
        }

        var session = new Session(id, SessionOwner.Of(context.User), runtime.Time.GetUtcNow(), replaying: false, codec: runtime.Codec);
        session.StartNumberingAt(firstSequence);
        if (runtime.Sessions.TryGet(id, out var existing))
        {
            return SessionLookup.TryFindOwned(runtime, context, id, out existing) ? existing : null;
        }

        if (!await StartAsync(runtime, session, logger).ConfigureAwait(false))
        {
            await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
            return null;
        }

        return SessionLookup.TryFindOwned(runtime, context, id, out var owned) ? owned : null;
    }
}
