using System.Globalization;
using System.Text.Json;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>Protocol errors as RFC 9457 problem details (docs/protocol.md, "Errors"): every refusal of the protocol is written here.</summary>
internal static class ProtocolProblems
{
    public const string TypePrefix = "urn:persistentservices:problem:";

    public static Task WriteAsync(HttpContext context, int status, string type, string title, string detail, long? expectedSequence = null)
    {
        var response = context.Response;
        if (response.HasStarted)
        {
            return Task.CompletedTask;
        }

        response.StatusCode = status;
        response.ContentType = "application/problem+json";
        if (expectedSequence is { } expected)
        {
            response.Headers[ProtocolHeaders.ExpectedSequence] = expected.ToString(CultureInfo.InvariantCulture);
        }

        var body = Problem(status, type, title, detail, expectedSequence);
        response.ContentLength = body.Length;
        return response.Body.WriteAsync(body, CancellationToken.None).AsTask();
    }

    private static byte[] Problem(int status, string type, string title, string detail, long? expectedSequence)
    {
        var problem = new Dictionary<string, object?>
        {
            ["type"] = TypePrefix + type,
            ["title"] = title,
            ["status"] = status,
            ["detail"] = detail,
        };
        if (expectedSequence is { } next)
        {
            problem["expectedSequence"] = next; // only the numbering refusals carry it
        }

        return JsonSerializer.SerializeToUtf8Bytes(problem);
    }

    private const string ReplyPendingDetail =
        "The request is executing and has not finished yet (it may wait for another service that is down or recovering): retry the same " +
        "request (the same session and number, or the same Idempotency-Key) to get its reply. It is not executed again.";

    /// <summary>The detail of a session start's <c>reply-pending</c>: nothing started, start another (<see cref="Sessions.SessionStarter"/>).</summary>
    public const string SessionStartPendingDetail =
        "The session's start was not durable at the replicas this service requires within ReplyTimeout (too few of them answer): nothing " +
        "started and no session id is given; start a session again (POST the session resource) once they are back.";

    /// <summary>The detail of a read-only request's <c>reply-pending</c>: what it shows is not durable yet; ask again (<see cref="ReadOnlyRequestHandler"/>).</summary>
    public const string ReadOnlyPendingDetail =
        "What this reply shows is not durable yet at the replicas this service requires (too few of them answer within ReplyTimeout): " +
        "nothing was changed; send the request again to get the answer once they are back.";

    /// <summary>
    /// 503 <c>reply-pending</c>: the request executes, past <see cref="PersistentServicesOptions.ReplyTimeout"/>; a retry of it
    /// gets its reply. <paramref name="detail"/> says what a retry means where it is not that request's own (a session start, a
    /// read-only request: <see cref="ReplyTimeouts"/>).
    /// </summary>
    public static Task ReplyPendingAsync(HttpContext context, string? detail = null)
    {
        context.Response.Headers.RetryAfter = "1";
        return WriteAsync(context, 503, "reply-pending", "Reply not ready yet", detail ?? ReplyPendingDetail);
    }

    /// <summary>
    /// The same, written straight to the client's response features while the request's endpoint still runs (it writes into
    /// a capture that replaced them in the request's features), and completed: the client has its answer, the execution goes on.
    /// </summary>
    public static async Task ReplyPendingAsync(IHttpResponseFeature response, IHttpResponseBodyFeature body, bool http1)
    {
        if (response.HasStarted)
        {
            return;
        }

        var bytes = Problem(503, "reply-pending", "Reply not ready yet", ReplyPendingDetail, null);
        response.StatusCode = 503;
        response.Headers.RetryAfter = "1";
        if (http1)
        {
            // An HTTP/1.x connection serves its next request only once this one's middleware returns (when the execution
            // ends): the client must not send its retry on it, or the retry would wait for the very execution it asks about.
            response.Headers.Connection = "close";
        }

        response.Headers.ContentType = "application/problem+json";
        response.Headers.ContentLength = bytes.Length;
        await body.Writer.WriteAsync(bytes).ConfigureAwait(false);
        await body.CompleteAsync().ConfigureAwait(false);
    }

    public const string StoppingDetail = "The service is stopping (a graceful drain): retry the same request; it is served by the next instance, nothing was executed.";

    /// <summary>
    /// 503: the service cannot make requests durable (recovering, stopping, or its log failed). Nothing was acknowledged.
    /// On a replica (docs/replication.md), and on a primary handing its role over to one (a switchover), the type is
    /// <c>replica</c>: another node of its group is (or is about to be) the primary, and a gateway or client that knows the
    /// group sends the request there (docs/gateway.md).
    /// </summary>
    public static Task UnavailableAsync(HttpContext context, string? detail = null)
    {
        context.Response.Headers.RetryAfter = "1";
        if (context.RequestServices?.GetService(typeof(Hosting.ServiceAvailability)) is Hosting.ServiceAvailability { AnswersAsReplica: true })
        {
            return WriteAsync(context, 503, "replica", "A replica",
                "This node is a replica (or a primary handing its role to one): it serves nothing until it is promoted. Send the same request to the primary of its group: nothing was executed here.");
        }

        return WriteAsync(context, 503, "unavailable", "Service unavailable", detail ??
            "The service cannot make requests durable right now (recovering, stopping, or its log failed and it must restart). Retry the same request: nothing was acknowledged.");
    }

    public static Task SessionNotFoundAsync(HttpContext context)
        => WriteAsync(context, 404, "session-not-found", "Session not found",
            "No live session with this id belongs to the caller: it was never started, it ended or expired, or it belongs to another principal. Start a new session.");

    public static Task BodyTooLargeAsync(HttpContext context, int limit)
        => WriteAsync(context, 413, "body-too-large", "Request body too large",
            $"A persistent request body may have at most {limit} bytes (PersistentServicesOptions.MaxRequestBodyBytes); nothing was logged or executed.");

    public static Task HeadersTooLargeAsync(HttpContext context, int limit)
        => WriteAsync(context, 431, "request-too-large", "Request headers too large to log",
            $"The request's headers, query and claims exceed {limit} bytes (PersistentServicesOptions.MaxLoggedHeaderBytes); nothing was logged or executed.");

    /// <summary>The admission refused the request's number (docs/protocol.md, "A persistent request").</summary>
    public static Task RefusedAsync(HttpContext context, Admission admission, long sequence) => admission.Outcome switch
    {
        AdmitOutcome.Stale => WriteAsync(context, 410, "stale-sequence", "Request number already answered",
            $"Request {sequence} is older than the session's last request; its reply is gone and it is never executed again. The next request is {admission.ExpectedSequence}.",
            admission.ExpectedSequence),
        AdmitOutcome.Gap => WriteAsync(context, 409, "sequence-gap", "Request number skips ahead",
            $"Request {sequence} skips numbers; the session expects request {admission.ExpectedSequence} next (or a retry of {admission.ExpectedSequence - 1}).",
            admission.ExpectedSequence),
        AdmitOutcome.Busy => BusyAsync(context, admission, sequence),
        AdmitOutcome.Mismatch => WriteAsync(context, 422, "sequence-reused", "Request number reused for a different request",
            $"Request {sequence} was already received with a different method, path, query or body; a retry must repeat the request exactly.",
            admission.ExpectedSequence),
        _ => SessionNotFoundAsync(context),
    };

    /// <summary>409 with <c>Retry-After</c>: the session's previous request still runs; a caller retries (a peer service's retry pipeline does).</summary>
    private static Task BusyAsync(HttpContext context, Admission admission, long sequence)
    {
        context.Response.Headers.RetryAfter = "1";
        return WriteAsync(context, 409, "session-busy", "Previous request still executing",
            $"Request {sequence - 1} of this session is still executing; one request at a time per session. Retry request {sequence - 1} to get its reply.",
            admission.ExpectedSequence);
    }
}
