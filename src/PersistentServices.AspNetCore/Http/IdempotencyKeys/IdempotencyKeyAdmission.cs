using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Hosting;
using PersistentServices.Sessions;

namespace PersistentServices.Http.IdempotencyKeys;

/// <summary>
/// Where <see cref="PersistentRequestHandler"/>'s admission meets <c>Idempotency-Key</c> (docs/client.md): which protocol
/// a request speaks, and what a repeat of a key gets. Once its key session is found, a key request is request 1 of that
/// session and takes the ordinary path (logged, executed, forced, buffered); only the answers differ:
/// <list type="table">
/// <item><term>first use</term><description>executed once; the reply echoes no session headers</description></item>
/// <item><term>repeat, completed</term><description>the stored reply, <c>PS-Replayed: true</c></description></item>
/// <item><term>repeat while the first runs</term><description><c>409 idempotency-key-in-use</c>, <c>Retry-After: 1</c></description></item>
/// <item><term>same key, other method, target or body</term><description><c>422 idempotency-key-reused</c></description></item>
/// <item><term>repeat after the retention</term><description><c>410 idempotency-key-expired</c></description></item>
/// <item><term>malformed key; key and session together</term><description><c>400 idempotency-key-malformed</c>, <c>400 idempotency-key-with-session</c></description></item>
/// <item><term>no key and no session on a <see cref="RequireIdempotencyKeyAttribute"/> endpoint</term><description><c>400 idempotency-key-missing</c></description></item>
/// </list>
/// A DI singleton (<see cref="RequestAdmission"/> classifies with it); what is a function of its arguments only is static.
/// </summary>
internal sealed class IdempotencyKeyAdmission(PersistentRuntime runtime, SessionOwners owners, GatewayKeyTrust gateways)
{
    /// <summary>
    /// Step 0 of admission. Returns false when the request was refused (written). Otherwise the returned key is the
    /// request's key (null: the request speaks the session protocol, checked by the caller as before).
    /// </summary>
    public async ValueTask<(bool Admitted, IdempotencyKey? Key)> ClassifyAsync(HttpContext context)
    {
        var options = runtime.Options.IdempotencyKeys;
        IdempotencyKey? key = null;
        var presence = options.Enabled
            ? IdempotencyKey.TryRead(context.Request, context.User, options.MaxKeyLength, runtime.Options.OwnerIdentityOptions, gateways, out key)
            : IdempotencyKey.Presence.Absent;
        var hasSession = context.Request.Headers.ContainsKey(ProtocolHeaders.Session);
        switch (presence)
        {
            case IdempotencyKey.Presence.Malformed:
                await ProtocolProblems.WriteAsync(context, 400, "idempotency-key-malformed", "Idempotency-Key malformed",
                    $"The {IdempotencyKey.HeaderName} header must be one value: a string of 1 to {options.MaxKeyLength} printable ASCII characters (space through ~), quoted (\"…\") or not.").ConfigureAwait(false);
                return (false, null);

            case IdempotencyKey.Presence.Unidentified:
                await owners.UnidentifiedAsync(context).ConfigureAwait(false);
                return (false, null);

            case IdempotencyKey.Presence.Valid when options.RequireAuthenticatedOwner && key!.Scope.Length == 0:
                await ProtocolProblems.WriteAsync(context, 401, "idempotency-key-anonymous", "Idempotency-Key needs an authenticated caller",
                    $"This service remembers {IdempotencyKey.HeaderName}s only for authenticated callers (IdempotencyKeys.RequireAuthenticatedOwner): an anonymous caller's key would be " +
                    "shared with every other anonymous caller. Authenticate, or use the session protocol.").ConfigureAwait(false);
                return (false, null);

            case IdempotencyKey.Presence.Valid when hasSession:
                await ProtocolProblems.WriteAsync(context, 400, "idempotency-key-with-session", "Idempotency-Key and session together",
                    $"A request carries either {ProtocolHeaders.Session}/{ProtocolHeaders.Sequence} (the session protocol) or {IdempotencyKey.HeaderName}, not both.").ConfigureAwait(false);
                return (false, null);

            case IdempotencyKey.Presence.Absent when !hasSession && IsRequired(context):
                await ProtocolProblems.WriteAsync(context, 400, "idempotency-key-missing", "Idempotency-Key required",
                    $"This endpoint runs a request only once per {IdempotencyKey.HeaderName}: send one unique key per operation (a UUID), and the same key when you retry it. " +
                    $"(Clients of the session protocol send {ProtocolHeaders.Session} and {ProtocolHeaders.Sequence} instead.)").ConfigureAwait(false);
                return (false, null);

            default:
                return (true, key);
        }
    }

    /// <summary>The detail of <c>400 session-header</c> when keys are accepted: both ways of making a request exactly-once.</summary>
    public static string SessionHeaderDetail(PersistentServicesOptions options)
        => options.IdempotencyKeys.Enabled
            ? $"A [Persistent] endpoint needs the {ProtocolHeaders.Session} header (start a session with POST {options.SessionsPath}) or an {IdempotencyKey.HeaderName} header."
            : $"A [Persistent] endpoint needs the {ProtocolHeaders.Session} header: start a session with POST {options.SessionsPath}.";

    /// <summary>
    /// After the session's decision on a key request: true when the handler goes on (execute, or send the stored reply, marked
    /// as a replay); otherwise the answer was written here.
    /// </summary>
    public static async ValueTask<bool> ContinueAsync(PersistentRequest request, ILogger logger)
    {
        var context = request.HttpContext;
        var admission = request.Admission;
        var session = request.Session;
        switch (admission.Outcome)
        {
            case AdmitOutcome.Execute:
                return true;

            case AdmitOutcome.Duplicate when IdempotencyKeySessions.IsExpiredMarker(admission.Reply):
            case AdmitOutcome.Mismatch when IdempotencyKeySessions.IsExpiredMarker(session.LastReply):
                IdempotencyKeyEvents.KeyRequestRefused(logger, session.TraceTag, "expired");
                await ReplyWriter.WriteAsync(context, (admission.Reply ?? session.LastReply)!.Reply!, onCompleted: null).ConfigureAwait(false);
                return false;

            case AdmitOutcome.Duplicate:
                if (admission.Reply is not null)
                {
                    context.Response.Headers[ProtocolHeaders.Replayed] = "true";
                }

                return true;

            case AdmitOutcome.DuplicateInFlight:
                IdempotencyKeyEvents.KeyRequestRefused(logger, session.TraceTag, "in use");
                context.Response.Headers.RetryAfter = "1";
                await ProtocolProblems.WriteAsync(context, 409, "idempotency-key-in-use", "Idempotency-Key in use",
                    $"A request with this {IdempotencyKey.HeaderName} is still executing; retry the same request to get its reply once it is done.").ConfigureAwait(false);
                return false;

            case AdmitOutcome.Mismatch:
                IdempotencyKeyEvents.KeyRequestRefused(logger, session.TraceTag, "reused");
                await ProtocolProblems.WriteAsync(context, 422, "idempotency-key-reused", "Idempotency-Key reused for a different request",
                    $"This {IdempotencyKey.HeaderName} was first used with a different method, target or body; a retry must repeat the request exactly, and a new operation needs a new key.").ConfigureAwait(false);
                return false;

            default:
                // The key session ended while this request was admitted (it was forgotten at that moment): retry.
                await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
                return false;
        }
    }

    private static bool IsRequired(HttpContext context)
        => context.GetEndpoint()?.Metadata.GetMetadata<RequireIdempotencyKeyAttribute>() is not null;
}
