using System.Text.Json;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Http;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Sessions;

/// <summary>
/// The session resource as ordinary endpoints (docs/protocol.md, "Sessions"): <c>POST {SessionsPath}</c> starts a
/// session, <c>DELETE {SessionsPath}/{id}</c> ends one; any other method gets 405. Mapped by
/// <c>UsePersistentServices()</c> as one route group, so an application adds conventions to it like to any endpoint
/// (rate limiting, authorization).
/// </summary>
internal static class SessionEndpoints
{
    public static RouteGroupBuilder Map(IEndpointRouteBuilder endpoints, string sessionsPath)
    {
        var group = endpoints.MapGroup(sessionsPath);
        group.MapPost("", StartAsync).WithDisplayName("PersistentServices: start a session");
        group.MapDelete("/{id}", EndAsync).WithDisplayName("PersistentServices: end a session");
        group.Map("", MethodNotAllowedAsync).WithOrder(1).WithDisplayName("PersistentServices: session resource");
        group.Map("/{id}", MethodNotAllowedAsync).WithOrder(1).WithDisplayName("PersistentServices: session");
        return group;
    }

    private static async Task StartAsync(HttpContext context)
    {
        var runtime = context.RequestServices.GetRequiredService<PersistentRuntime>();
        var logger = Logger(context);
        if (!runtime.Availability.CanServe(RequestKind.SessionResource))
        {
            AspNetCoreEvents.SessionResourceUnavailable(logger, runtime.Availability.LogFault ?? runtime.Availability.Failure);
            await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
            return;
        }

        var options = runtime.Options;
        var owners = context.RequestServices.GetRequiredService<SessionOwners>();
        var starter = context.RequestServices.GetRequiredService<SessionStarter>();
        if (owners.Of(context.User) is not { } owner)
        {
            await owners.UnidentifiedAsync(context).ConfigureAwait(false);
            return;
        }

        var (bucket, share, byAddress) = owners.AdmissionBucket(context, owner);
        var refusal = runtime.Sessions.TryReserve(bucket, Http.IdempotencyKeys.IdempotencyKeySessions.TableCap(runtime), share);
        if (refusal != StartRefusal.None)
        {
            await starter.RefuseAsync(context, refusal, bucket, byAddress, logger).ConfigureAwait(false);
            return;
        }

        var session = new Session(SessionId.NewRandom((byte?)options.InstanceOrdinal), owner, runtime.Time.GetUtcNow(), replaying: false, codec: runtime.Codec) { AdmissionBucket = bucket };
        // An end client's start answers within ReplyTimeout, as its requests do: while too few replicas answer, 503
        // reply-pending and nothing started (SessionStarter.StartWithinAsync).
        switch (await starter.StartWithinAsync(session, logger, ReplyTimeouts.For(runtime, fromService: false), reserved: true).ConfigureAwait(false))
        {
            case SessionStart.Unavailable:
                await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
                return;
            case SessionStart.Pending:
                await ProtocolProblems.ReplyPendingAsync(context, ProtocolProblems.SessionStartPendingDetail).ConfigureAwait(false);
                return;
        }

        context.RequestServices.GetRequiredService<SessionExpiryService>().NoteStarted(session);
        var id = session.IdText;
        var response = context.Response;
        response.StatusCode = StatusCodes.Status201Created;
        response.Headers.Location = $"{context.Request.PathBase}{options.SessionsPath}/{id}";
        response.Headers[ProtocolHeaders.Session] = id;
        response.ContentType = "application/json";
        await response.Body.WriteAsync(JsonSerializer.SerializeToUtf8Bytes(new
        {
            sessionId = id,
            nextSequence = 1,
            idleRetentionSeconds = (long)options.SessionIdleRetention.TotalSeconds,
            unusedRetentionSeconds = (long)options.UnusedSessionRetention.TotalSeconds,
        }), CancellationToken.None).ConfigureAwait(false);
    }

    private static async Task EndAsync(HttpContext context, string id)
    {
        var runtime = context.RequestServices.GetRequiredService<PersistentRuntime>();
        var logger = Logger(context);
        if (!SessionId.TryParse(id, out var sessionId))
        {
            await ProtocolProblems.WriteAsync(context, 400, "session-id", "Malformed session id",
                $"A session id has {SessionId.TextLength} base64url characters.").ConfigureAwait(false);
            return;
        }

        var lookup = context.RequestServices.GetRequiredService<SessionLookup>();
        if (!lookup.TryFindOwned(context, sessionId, out var session))
        {
            await ProtocolProblems.SessionNotFoundAsync(context).ConfigureAwait(false);
            return;
        }

        if (!runtime.Availability.CanServe(RequestKind.SessionResource))
        {
            AspNetCoreEvents.SessionResourceUnavailable(logger, runtime.Availability.LogFault ?? runtime.Availability.Failure);
            await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
            return;
        }

        // A quarantined session (its replay diverged) can be ended by its owner: its slot and records are let go.
        if (session.Diverged is not null && context.RequestServices.GetRequiredService<Quarantines>().End(session, SessionEndReason.ClientEnded, logger))
        {
            context.Response.StatusCode = StatusCodes.Status204NoContent;
            return;
        }

        if (!await lookup.WaitUntilReplayedAsync(context, session).ConfigureAwait(false))
        {
            return;
        }

        if (!session.TryEnd())
        {
            await ProtocolProblems.WriteAsync(context, 409, "session-busy", "Session busy",
                "A request of this session is still executing; end the session after its reply.").ConfigureAwait(false);
            return;
        }

        try
        {
            var lsn = SessionRecords.AppendEnded(runtime.Log, session, SessionEndReason.ClientEnded, runtime.Time.GetUtcNow());
            await runtime.Log.WaitUntilDurableAsync(lsn, CancellationToken.None).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
        {
            AspNetCoreEvents.SessionResourceUnavailable(logger, ex);
            await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
            return;
        }

        runtime.Sessions.Remove(sessionId);
        AspNetCoreEvents.SessionEnded(logger, session.TraceTag, "ended by the client");
        context.Response.StatusCode = StatusCodes.Status204NoContent;
    }

    private static Task MethodNotAllowedAsync(HttpContext context)
    {
        var options = context.RequestServices.GetRequiredService<PersistentRuntime>().Options;
        var isSession = context.Request.RouteValues.ContainsKey("id");
        context.Response.Headers.Allow = isSession ? "DELETE" : "POST";
        return ProtocolProblems.WriteAsync(context, 405, "method-not-allowed", "Method not allowed",
            $"POST {options.SessionsPath} starts a session; DELETE {options.SessionsPath}/{{id}} ends one.");
    }

    private static ILogger Logger(HttpContext context)
        => context.RequestServices.GetRequiredService<ILoggerFactory>().CreateLogger("PersistentServices.Sessions");
}
