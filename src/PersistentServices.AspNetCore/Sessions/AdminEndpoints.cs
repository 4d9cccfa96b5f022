using System.Globalization;
using System.Security.Claims;
using System.Text.Json;
using System.Text.Json.Serialization;
using Microsoft.AspNetCore.Authorization;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.Hosting;
using PersistentServices.Http;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Sessions;

/// <summary>
/// The operator's endpoints (docs/operations.md, "Operator repair"), mapped only by
/// <c>MapPersistentServicesAdmin(policy)</c> and always behind that authorization policy:
/// <list type="bullet">
/// <item><c>GET {pattern}/sessions</c>: the live sessions, by trace tag, paged (<c>limit</c>, <c>after</c>), filtered by
///   <c>state</c> and <c>kind</c>;</item>
/// <item><c>GET {pattern}/sessions/{tag-or-id}</c>: one session and its logged records (bodies only with <c>bodies=true</c>);</item>
/// <item><c>POST {pattern}/sessions/{tag-or-id}/discard</c> and <c>/release</c>: repair a quarantined session
///   (<see cref="QuarantineRepair"/>), durably, logged with the acting principal.</item>
/// </list>
/// Every error is a problem detail, as the protocol's are (<see cref="ProtocolProblems"/>).
/// </summary>
internal static partial class AdminEndpoints
{
    /// <summary>Most sessions one page lists.</summary>
    public const int MaxPage = 1000;

    /// <summary>Sessions a page lists when <c>limit</c> is not given.</summary>
    public const int DefaultPage = 100;

    /// <summary>Most records <c>show</c> lists (<c>limit</c>); the default.</summary>
    public const int MaxRecords = 10_000;

    public const int DefaultRecords = 1000;

    private static readonly JsonSerializerOptions Json = new(JsonSerializerDefaults.Web) { DefaultIgnoreCondition = JsonIgnoreCondition.WhenWritingNull };

    public static RouteGroupBuilder Map(IEndpointRouteBuilder endpoints, string pattern, string policy)
    {
        var group = endpoints.MapGroup(pattern);

        // Always behind the application's policy: the authorization middleware checks it, and each handler checks it again
        // (Authorized), so that neither a missing UseAuthorization() nor a later AllowAnonymous() can open these endpoints.
        group.RequireAuthorization(policy);
        group.WithMetadata(new AdminEndpointMetadata(policy)); // the middleware's refusals are problems too (AdminAuthorizationResultHandler)
        group.MapGet("/sessions", context => ListAsync(context, policy)).WithDisplayName("PersistentServices admin: list sessions");
        group.MapGet("/sessions/{session}", context => ShowAsync(context, policy)).WithDisplayName("PersistentServices admin: show a session");
        group.MapPost("/sessions/{session}/discard", context => RepairAsync(context, policy, RepairAction.Discard))
            .WithDisplayName("PersistentServices admin: discard a quarantined session");
        group.MapPost("/sessions/{session}/release", context => RepairAsync(context, policy, RepairAction.Release))
            .WithDisplayName("PersistentServices admin: release a quarantined session");
        group.Map("/sessions", context => MethodNotAllowedAsync(context, policy, "GET")).WithOrder(1).WithDisplayName("PersistentServices admin: sessions");
        group.Map("/sessions/{session}", context => MethodNotAllowedAsync(context, policy, "GET")).WithOrder(1).WithDisplayName("PersistentServices admin: a session");
        group.Map("/sessions/{session}/discard", context => MethodNotAllowedAsync(context, policy, "POST")).WithOrder(1).WithDisplayName("PersistentServices admin: discard");
        group.Map("/sessions/{session}/release", context => MethodNotAllowedAsync(context, policy, "POST")).WithOrder(1).WithDisplayName("PersistentServices admin: release");
        return group;
    }

    private static async Task ListAsync(HttpContext context, string policy)
    {
        if (!await AuthorizedAsync(context, policy).ConfigureAwait(false) || await NotReadableAsync(context).ConfigureAwait(false) is not { } runtime)
        {
            return;
        }

        if (!TryReadListQuery(context.Request.Query, out var state, out var kind, out var limit, out var after))
        {
            await BadQueryAsync(context,
                $"state is one of {string.Join(", ", SessionInspection.States)}; kind is session or key; limit is 1 to {MaxPage} (default {DefaultPage}); " +
                "after is the trace tag (12 hex digits) of the previous page's last session (its 'next').").ConfigureAwait(false);
            return;
        }

        var matched = new List<Session>();
        int total = 0, quarantined = 0, filtered = 0;
        foreach (var session in runtime.Sessions.Enumerate())
        {
            if (session.Ended)
            {
                continue;
            }

            total++;
            var sessionState = SessionInspection.StateOf(session, offline: false);
            quarantined += sessionState == "quarantined" ? 1 : 0;
            if ((state is null || sessionState == state) && (kind is null || SessionInspection.KindOf(session) == kind))
            {
                filtered++;
                if (after is null || string.CompareOrdinal(session.TraceTag, after) > 0)
                {
                    matched.Add(session);
                }
            }
        }

        matched.Sort(static (a, b) => string.CompareOrdinal(a.TraceTag, b.TraceTag));

        // A page never ends between two sessions with the same trace tag (48 bits of a hash), so the cursor skips none.
        var count = Math.Min(limit, matched.Count);
        while (count < matched.Count && count > 0 && matched[count].TraceTag == matched[count - 1].TraceTag)
        {
            count++;
        }

        var page = matched.Take(count).Select(s => SessionInspection.Summarize(s, offline: false)).ToList();
        ListedSessions(Logger(context), Principal(context.User), page.Count, total);
        await WriteJsonAsync(context, 200, new
        {
            total,
            quarantined,
            matched = filtered,
            sessions = page,
            next = count < matched.Count ? page[^1].Tag : null,
        }).ConfigureAwait(false);
    }

    private static async Task ShowAsync(HttpContext context, string policy)
    {
        if (!await AuthorizedAsync(context, policy).ConfigureAwait(false) || await NotReadableAsync(context).ConfigureAwait(false) is not { } runtime)
        {
            return;
        }

        var query = context.Request.Query;
        var bodies = false;
        var limit = DefaultRecords;
        if ((query.TryGetValue("bodies", out var bodiesValue) && (bodiesValue is not [{ } flag] || !bool.TryParse(flag, out bodies))) ||
            (query.TryGetValue("limit", out var limits) && !TryNumber(limits, 1, MaxRecords, out limit)))
        {
            await BadQueryAsync(context, $"bodies is true or false (default false); limit is the most records listed, 1 to {MaxRecords} (default {DefaultRecords}).").ConfigureAwait(false);
            return;
        }

        var (session, byId) = await FindAsync(context, runtime.Sessions).ConfigureAwait(false);
        if (session is null)
        {
            return;
        }

        var logger = Logger(context);
        ShowedSession(logger, Principal(context.User), session.TraceTag, bodies);
        SessionHistory history;
        try
        {
            // What was appended so far is made durable first (a quarantine marker is appended without a force): show reads
            // the committed log only.
            var log = runtime.Log;
            if (log.TailAddress > log.DurableUntil)
            {
                await log.WaitUntilDurableAsync(log.TailAddress - 1, context.RequestAborted).ConfigureAwait(false);
            }

            history = await SessionInspection.ReadHistoryAsync(runtime.Log, session, SessionInspection.HistoryStart(runtime.Log, session), bodies, limit, context.RequestAborted)
                .ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
        {
            await ProtocolProblems.UnavailableAsync(context, "The log cannot be read now (the service is stopping, or its log failed).").ConfigureAwait(false);
            return;
        }

        var held = session.LastReply;
        var reply = held?.Reply;
        var shown = bodies && reply is { Body.Length: > 0 } ? reply.Body.AsMemory(0, Math.Min(reply.Body.Length, SessionInspection.MaxBodyShown)) : default;
        var text = shown.IsEmpty ? null : SessionInspection.AsText(shown.Span);
        await WriteJsonAsync(context, 200, new
        {
            id = byId ? session.IdText : null, // only to whoever named the session by its id
            session = SessionInspection.Summarize(session, offline: false),
            lastReply = held is null ? null : new
            {
                status = reply?.StatusCode,
                bodyBytes = reply?.Body.Length,
                inLog = held.InLog,
                lsn = held.InLog ? held.Location.Lsn : (long?)null,
                body = text,
                bodyBase64 = !shown.IsEmpty && text is null ? Convert.ToBase64String(shown.Span) : null,
            },
            history = new { from = history.From, until = history.Until, cut = history.Cut, records = history.Records },
        }).ConfigureAwait(false);
    }

    private static async Task RepairAsync(HttpContext context, string policy, RepairAction action)
    {
        if (!await AuthorizedAsync(context, policy).ConfigureAwait(false))
        {
            return;
        }

        var runtime = context.RequestServices.GetRequiredService<PersistentRuntime>();
        var logger = Logger(context);
        if (!runtime.Availability.CanServe(RequestKind.Repair))
        {
            await ProtocolProblems.UnavailableAsync(context,
                "The service cannot log a repair now (recovering, stopping, or its log failed): retry once it serves, or repair the stopped log with psctl.").ConfigureAwait(false);
            return;
        }

        var (session, _) = await FindAsync(context, runtime.Sessions).ConfigureAwait(false);
        if (session is null)
        {
            return;
        }

        var principal = Principal(context.User);
        var verb = action == RepairAction.Discard ? "discard" : "release";
        if (session.Diverged is not { } divergence)
        {
            RepairRefused(logger, principal, verb, session.TraceTag, SessionInspection.StateOf(session, offline: false));
            await NotQuarantinedAsync(context, session, verb).ConfigureAwait(false);
            return;
        }

        var reason = session.QuarantineReason ?? divergence.Message;
        var outcome = QuarantineRepair.OutcomeOf(session, action);
        var quarantines = context.RequestServices.GetRequiredService<Quarantines>();
        var why = $"{verb} by {principal}";
        bool done;
        try
        {
            done = outcome == RepairOutcome.Ended
                ? quarantines.End(session, SessionEndReason.OperatorDiscarded, logger)
                : quarantines.Release(session, QuarantineRepair.StandInFor(session), why, logger);
            if (done)
            {
                // Answered once durable: a repair the operator was told about is not undone by a crash.
                var log = runtime.Log;
                if (log.TailAddress > log.DurableUntil)
                {
                    await log.WaitUntilDurableAsync(log.TailAddress - 1, CancellationToken.None).ConfigureAwait(false);
                }
            }
        }
        catch (Exception ex) when (ex is LogFaultedException or ObjectDisposedException)
        {
            await ProtocolProblems.UnavailableAsync(context,
                "The repair could not be made durable (the log failed or the service is stopping); after the restart the session is quarantined again: repeat it then.").ConfigureAwait(false);
            return;
        }

        if (!done)
        {
            // Another operator (or its owner, or its expiry) got there first.
            if (session.Ended)
            {
                await NotFoundAsync(context).ConfigureAwait(false);
            }
            else
            {
                RepairRefused(logger, principal, verb, session.TraceTag, SessionInspection.StateOf(session, offline: false));
                await NotQuarantinedAsync(context, session, verb).ConfigureAwait(false);
            }

            return;
        }

        var outcomeText = OutcomeText(outcome);
        if (action == RepairAction.Discard)
        {
            Discarded(logger, principal, session.TraceTag, SessionInspection.KindOf(session), reason, outcomeText);
        }
        else
        {
            Released(logger, principal, session.TraceTag, SessionInspection.KindOf(session), reason, outcomeText);
        }

        await WriteJsonAsync(context, 200, new
        {
            action = verb,
            outcome = outcomeText,
            tag = session.TraceTag,
            session = outcome == RepairOutcome.Ended ? null : SessionInspection.Summarize(session, offline: false),
        }).ConfigureAwait(false);
    }

    /// <summary>The text of an outcome in replies and logs.</summary>
    public static string OutcomeText(RepairOutcome outcome) => outcome switch
    {
        RepairOutcome.Ended => "ended",
        RepairOutcome.Released => "released",
        _ => "expired-key",
    };

    /// <summary>
    /// The policy, checked again in the handler: the group requires it from the authorization middleware, but an endpoint an
    /// application later marked <c>AllowAnonymous</c>, or a pipeline whose authorization runs before authentication, would let
    /// a request through; here it is refused (401 or 403), never served. A policy that is not registered throws.
    /// </summary>
    private static async Task<bool> AuthorizedAsync(HttpContext context, string policy)
    {
        var authorization = context.RequestServices.GetRequiredService<IAuthorizationService>();
        var result = await authorization.AuthorizeAsync(context.User, context, policy).ConfigureAwait(false);
        if (result.Succeeded)
        {
            return true;
        }

        await RefuseAsync(context, policy, byMiddleware: false).ConfigureAwait(false);
        return false;
    }

    /// <summary>
    /// The refusal of an admin request (<c>401</c> anonymous, <c>403</c> authenticated): the <c>admin-forbidden</c> problem and
    /// event 1164, whether the authorization middleware refused it (<paramref name="byMiddleware"/>, the usual case) or the
    /// endpoint's own check did (the request got past the middleware).
    /// </summary>
    public static Task RefuseAsync(HttpContext context, string policy, bool byMiddleware)
    {
        var authenticated = context.User.Identity?.IsAuthenticated == true;
        AdminRefused(Logger(context), Principal(context.User), policy, context.Request.Path.Value ?? "", byMiddleware
            ? "refused by the authorization middleware"
            : "the request reached the endpoint, which refused it: is app.UseAuthorization() missing or placed before authentication, or was AllowAnonymous added to the admin endpoints?");
        return ProtocolProblems.WriteAsync(context, authenticated ? 403 : 401, "admin-forbidden", "Not authorized",
            $"The PersistentServices admin endpoints require the authorization policy '{policy}'.");
    }

    /// <summary>The runtime when sessions can be listed (recovered: replaying, ready or draining); else writes 503 and returns null.</summary>
    private static async Task<PersistentRuntime?> NotReadableAsync(HttpContext context)
    {
        var runtime = context.RequestServices.GetRequiredService<PersistentRuntime>();
        if (runtime.Availability.CanServe(RequestKind.SessionInspection))
        {
            return runtime;
        }

        await ProtocolProblems.UnavailableAsync(context, "The service's sessions are not known yet, or no longer (it is opening its log, its recovery failed, or its log failed).")
            .ConfigureAwait(false);
        return null;
    }

    /// <summary>The session the route names, or null when a problem was written (400 malformed or ambiguous, 404).</summary>
    private static async Task<(Session? Session, bool ById)> FindAsync(HttpContext context, SessionTable sessions)
    {
        var reference = context.Request.RouteValues["session"] as string ?? "";
        switch (SessionInspection.Find(sessions, reference, out var session))
        {
            case SessionMatch.Found:
                return (session, reference.Length == SessionId.TextLength);
            case SessionMatch.Ambiguous:
                await ProtocolProblems.WriteAsync(context, 400, "session-ambiguous", "Trace tag names more than one session",
                    "Two live sessions share this trace tag (a short hash): name the session by its id.").ConfigureAwait(false);
                return (null, false);
            case SessionMatch.Malformed:
                await ProtocolProblems.WriteAsync(context, 400, "session-reference", "Malformed session reference",
                    $"Name a session by its trace tag ({SessionInspection.TagLength} hex digits, as logs and the session list show it) or by its id " +
                    $"({SessionId.TextLength} base64url characters).").ConfigureAwait(false);
                return (null, false);
            default:
                await NotFoundAsync(context).ConfigureAwait(false);
                return (null, false);
        }
    }

    private static Task NotFoundAsync(HttpContext context)
        => ProtocolProblems.WriteAsync(context, 404, "session-not-found", "Session not found",
            "No live session has this trace tag or id: it was never started, or it ended or expired.");

    private static Task NotQuarantinedAsync(HttpContext context, Session session, string verb)
        => ProtocolProblems.WriteAsync(context, 409, "session-not-quarantined", "Session not quarantined",
            $"Session {session.TraceTag} is {SessionInspection.StateOf(session, offline: false)}, not quarantined: only a quarantined session can be {verb}d.");

    private static Task BadQueryAsync(HttpContext context, string detail)
        => ProtocolProblems.WriteAsync(context, 400, "admin-query", "Malformed query", detail);

    private static async Task MethodNotAllowedAsync(HttpContext context, string policy, string allow)
    {
        if (!await AuthorizedAsync(context, policy).ConfigureAwait(false))
        {
            return;
        }

        context.Response.Headers.Allow = allow;
        await ProtocolProblems.WriteAsync(context, 405, "method-not-allowed", "Method not allowed",
            "GET …/sessions lists sessions, GET …/sessions/{tag-or-id} shows one, POST …/sessions/{tag-or-id}/discard and …/release repair a quarantined one.")
            .ConfigureAwait(false);
    }

    /// <summary>The list's query: <c>state</c>, <c>kind</c>, <c>limit</c> and the cursor <c>after</c>, each at most once; false when one is malformed.</summary>
    private static bool TryReadListQuery(IQueryCollection query, out string? state, out string? kind, out int limit, out string? after)
    {
        state = kind = after = null;
        limit = DefaultPage;
        if ((query.TryGetValue("state", out var states) && !TryOneOf(states, SessionInspection.States, out state)) ||
            (query.TryGetValue("kind", out var kinds) && !TryOneOf(kinds, SessionInspection.Kinds, out kind)) ||
            (query.TryGetValue("limit", out var limits) && !TryNumber(limits, 1, MaxPage, out limit)))
        {
            return false;
        }

        if (query.TryGetValue("after", out var afters))
        {
            if (afters is not [{ } cursor] || !SessionInspection.IsTag(cursor))
            {
                return false;
            }

            after = cursor.ToLowerInvariant();
        }

        return true;
    }

    private static bool TryOneOf(Microsoft.Extensions.Primitives.StringValues values, IReadOnlyList<string> allowed, out string? value)
    {
        value = values is [{ } one] && allowed.Contains(one, StringComparer.Ordinal) ? one : null;
        return value is not null;
    }

    private static bool TryNumber(Microsoft.Extensions.Primitives.StringValues values, int min, int max, out int value)
    {
        value = 0;
        return values is [{ } text] && int.TryParse(text, NumberStyles.None, CultureInfo.InvariantCulture, out value) && value >= min && value <= max;
    }

    private static Task WriteJsonAsync(HttpContext context, int status, object value)
    {
        var body = JsonSerializer.SerializeToUtf8Bytes(value, Json);
        context.Response.StatusCode = status;
        context.Response.ContentType = "application/json";
        context.Response.ContentLength = body.Length;
        return context.Response.Body.WriteAsync(body, CancellationToken.None).AsTask();
    }

    /// <summary>Who acts, for the log: the principal's name, else its identifying claim, else its authentication type.</summary>
    private static string Principal(ClaimsPrincipal user)
        => user.Identity is not { IsAuthenticated: true } identity ? "(anonymous)"
            : identity.Name ?? user.FindFirst(ClaimTypes.NameIdentifier)?.Value ?? user.FindFirst("sub")?.Value ?? $"(a {identity.AuthenticationType} principal without a name)";

    private static ILogger Logger(HttpContext context)
        => context.RequestServices.GetRequiredService<ILoggerFactory>().CreateLogger("PersistentServices.Admin");

    [LoggerMessage(1160, LogLevel.Warning, "Operator {Principal} discarded quarantined session {SessionTag} ({Kind}; quarantined because: {Reason}): {Outcome}")]
    private static partial void Discarded(ILogger logger, string principal, string sessionTag, string kind, string reason, string outcome);

    [LoggerMessage(1161, LogLevel.Warning, "Operator {Principal} released quarantined session {SessionTag} ({Kind}; quarantined because: {Reason}): {Outcome}")]
    private static partial void Released(ILogger logger, string principal, string sessionTag, string kind, string reason, string outcome);

    [LoggerMessage(1162, LogLevel.Information, "Operator {Principal} inspected session {SessionTag} (bodies: {Bodies})")]
    private static partial void ShowedSession(ILogger logger, string principal, string sessionTag, bool bodies);

    [LoggerMessage(1163, LogLevel.Information, "Operator {Principal} was refused the {Action} of session {SessionTag}: it is {State}, not quarantined")]
    private static partial void RepairRefused(ILogger logger, string principal, string action, string sessionTag, string state);

    [LoggerMessage(1164, LogLevel.Warning,
        "Refused an admin request to {Path} from {Principal}: the authorization policy '{Policy}' does not allow it ({Where})")]
    private static partial void AdminRefused(ILogger logger, string principal, string policy, string path, string where);

    [LoggerMessage(1165, LogLevel.Debug, "Operator {Principal} listed {Count} of {Total} sessions")]
    private static partial void ListedSessions(ILogger logger, string principal, int count, int total);
}
