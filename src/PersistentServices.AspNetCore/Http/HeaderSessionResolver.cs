using Microsoft.Extensions.Logging;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// The session protocol (docs/protocol.md): <c>PS-Session</c> names a session the caller owns, <c>PS-Seq</c> the
/// request's number in it. A verified call from another service may name a session this service does not have yet: its
/// first call on behalf of one of its sessions starts it (<see cref="SessionStarter.StartForCallerAsync"/>).
/// </summary>
internal sealed class HeaderSessionResolver(PersistentServicesOptions options, SessionLookup lookup, SessionStarter starter, ILogger logger) : ISessionResolver
{
    public async ValueTask<bool> IdentifyAsync(PersistentRequest request)
    {
        var context = request.HttpContext;
        if (!ProtocolHeaders.TryGetSession(context.Request, out var sessionId, out _, out var error))
        {
            await ProtocolProblems.WriteAsync(context, 400, "session-header", "Session header missing or malformed",
                error ?? IdempotencyKeys.IdempotencyKeyAdmission.SessionHeaderDetail(options)).ConfigureAwait(false);
            return false;
        }

        if (!ProtocolHeaders.TryGetSequence(context.Request, out var sequence, out error))
        {
            await ProtocolProblems.WriteAsync(context, 400, "sequence-header", "Sequence header missing or malformed", error!).ConfigureAwait(false);
            return false;
        }

        request.SessionId = sessionId;
        request.Sequence = sequence;
        return true;
    }

    public async ValueTask<Session?> ResolveAsync(PersistentRequest request)
    {
        var context = request.HttpContext;
        if (lookup.TryFindOwned(context, request.SessionId, out var session))
        {
            return session;
        }

        // A service's first call on behalf of one of its sessions opens the session it calls on (its last-call table entry).
        if (request.Caller is not null && await starter.StartForCallerAsync(context, request.SessionId, request.Sequence, logger).ConfigureAwait(false) is { } started)
        {
            return started;
        }

        if (!context.Response.HasStarted)
        {
            await ProtocolProblems.SessionNotFoundAsync(context).ConfigureAwait(false);
        }

        return null;
    }

    public ValueTask<bool> DecidedAsync(PersistentRequest request) => ValueTask.FromResult(true);
}
