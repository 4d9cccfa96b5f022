using System.Collections.Concurrent;
using System.Globalization;
using System.Net;
using System.Net.Http.Headers;
using System.Text;

namespace PersistentServices.Client.Tests;

/// <summary>
/// A hand-written server of the session protocol (docs/protocol.md) as the client's primary handler: sessions, numbers,
/// the buffered last reply, and the refusals the client must handle; faults are switched on per test.
/// </summary>
internal sealed class FakeSessionServer : HttpMessageHandler
{
    private readonly Lock _gate = new();
    private readonly Dictionary<string, SessionState> _sessions = new(StringComparer.Ordinal);
    private int _nextSession;

    /// <summary>Executions per request body (the effect the tests count).</summary>
    public ConcurrentDictionary<string, int> Executions { get; } = new(StringComparer.Ordinal);

    /// <summary>Every (session, number) received, in order, retries included.</summary>
    public ConcurrentQueue<(string Session, long Sequence)> Received { get; } = new();

    /// <summary>Answer this many persistent requests with 503 and <c>Retry-After: 0</c> before executing anything.</summary>
    public int UnavailableNext;

    /// <summary>The problem type of those 503s (a service that recovers: <c>unavailable</c>; one waiting for its replicas: <c>reply-pending</c>).</summary>
    public string UnavailableType = "unavailable";

    /// <summary>Execute, then lose this many replies (the connection drops after the effect).</summary>
    public int LoseRepliesNext;

    /// <summary>A lost reply also ends its session (it expired while the client was away).</summary>
    public bool EndSessionWithLostReply;

    /// <summary>Sessions whose next request finds them expired (404 session-not-found).</summary>
    public ConcurrentDictionary<string, bool> Expire { get; } = new(StringComparer.Ordinal);

    /// <summary>Requests wait here while set (to hold several calls at once).</summary>
    public TaskCompletionSource? Hold;

    public int MaxConcurrentPerSession;

    /// <summary>Sessions ended by <c>DELETE /ps/sessions/{id}</c>, in order.</summary>
    public ConcurrentQueue<string> Ended { get; } = new();

    /// <summary>Session ends wait here while set (a service that does not answer).</summary>
    public TaskCompletionSource? DeleteHold;

    public int SessionsStarted => Volatile.Read(ref _nextSession);

    protected override async Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
    {
        if (request.Method == HttpMethod.Post && request.RequestUri!.AbsolutePath == "/ps/sessions")
        {
            var id = "s" + Interlocked.Increment(ref _nextSession).ToString(CultureInfo.InvariantCulture);
            lock (_gate)
            {
                _sessions[id] = new SessionState();
            }

            var created = new HttpResponseMessage(HttpStatusCode.Created) { Content = new StringContent($"{{\"sessionId\":\"{id}\"}}", Encoding.UTF8, "application/json") };
            created.Headers.Add("PS-Session", id);
            return created;
        }

        if (request.Method == HttpMethod.Delete && request.RequestUri!.AbsolutePath.StartsWith("/ps/sessions/", StringComparison.Ordinal))
        {
            if (DeleteHold is { } deleteHold)
            {
                await deleteHold.Task.WaitAsync(cancellationToken);
            }

            var ended = Uri.UnescapeDataString(request.RequestUri.AbsolutePath["/ps/sessions/".Length..]);
            lock (_gate)
            {
                if (!_sessions.Remove(ended))
                {
                    return Problem(HttpStatusCode.NotFound, "session-not-found");
                }
            }

            Ended.Enqueue(ended);
            return new HttpResponseMessage(HttpStatusCode.NoContent);
        }

        var session = request.Headers.GetValues("PS-Session").Single();
        var sequence = long.Parse(request.Headers.GetValues("PS-Seq").Single(), CultureInfo.InvariantCulture);
        Received.Enqueue((session, sequence));
        var body = request.Content is null ? "" : await request.Content.ReadAsStringAsync(cancellationToken);
        if (Interlocked.Decrement(ref UnavailableNext) >= 0)
        {
            var unavailable = Problem(HttpStatusCode.ServiceUnavailable, UnavailableType);
            unavailable.Headers.RetryAfter = new RetryConditionHeaderValue(TimeSpan.Zero);
            return unavailable;
        }

        SessionState state;
        lock (_gate)
        {
            if (Expire.TryRemove(session, out _))
            {
                _sessions.Remove(session);
            }

            if (!_sessions.TryGetValue(session, out state!))
            {
                return Problem(HttpStatusCode.NotFound, "session-not-found");
            }
        }

        var running = Interlocked.Increment(ref state.Running);
        try
        {
            lock (_gate)
            {
                MaxConcurrentPerSession = Math.Max(MaxConcurrentPerSession, running);
            }

            if (Hold is { } hold)
            {
                await hold.Task.WaitAsync(cancellationToken);
            }

            string reply;
            lock (_gate)
            {
                if (sequence == state.Last && state.Reply is not null)
                {
                    if (body != state.Body)
                    {
                        return Problem(HttpStatusCode.UnprocessableEntity, "sequence-reused");
                    }

                    reply = state.Reply;
                }
                else if (sequence == state.Last + 1)
                {
                    var count = Executions.AddOrUpdate(body, 1, (_, n) => n + 1);
                    state.Last = sequence;
                    state.Body = body;
                    state.Reply = reply = $"{{\"echo\":{Json(body)},\"seq\":{sequence},\"count\":{count}}}";
                }
                else
                {
                    return Problem(sequence < state.Last ? HttpStatusCode.Gone : HttpStatusCode.Conflict, sequence < state.Last ? "stale-sequence" : "sequence-gap");
                }
            }

            if (Interlocked.Decrement(ref LoseRepliesNext) >= 0)
            {
                if (EndSessionWithLostReply)
                {
                    lock (_gate)
                    {
                        _sessions.Remove(session);
                    }
                }

                throw new HttpRequestException("The connection dropped before the reply.");
            }

            var response = new HttpResponseMessage(HttpStatusCode.OK) { Content = new StringContent(reply, Encoding.UTF8, "application/json") };
            response.Headers.Add("PS-Session", session);
            response.Headers.Add("X-Reply", "kept");
            return response;
        }
        finally
        {
            Interlocked.Decrement(ref state.Running);
        }
    }

    private static string Json(string text) => System.Text.Json.JsonSerializer.Serialize(text);

    private static HttpResponseMessage Problem(HttpStatusCode status, string type)
        => new(status)
        {
            Content = new StringContent($"{{\"type\":\"urn:persistentservices:problem:{type}\",\"status\":{(int)status}}}", Encoding.UTF8, "application/problem+json"),
        };

    private sealed class SessionState
    {
        public long Last;
        public string? Body;
        public string? Reply;
        public int Running;
    }
}
