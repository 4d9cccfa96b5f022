using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Runtime.CompilerServices;
using System.Text.Json;
using Microsoft.Extensions.Logging;
using PersistentServices.Checkpoints;

namespace PersistentServices.Client;

/// <summary>
/// The exactly-once side of one named <see cref="HttpClient"/> (<c>AddPersistentSessions</c>, docs/client.md): its
/// durable store and its sessions. Requests sent through the client are stored before they are sent, numbered in a
/// session, sent again with the same numbers until a reply arrives, and their replies stored before they are handed
/// over. Resolve it as a keyed service under the client's name to recover after a crash of the client process.
/// </summary>
public sealed class PersistentSessionClient : IAsyncDisposable
{
    // Crash points (tests only: armed by a test program's registered CrashPoints, docs/client.md): the client's steps of [EOS middleware Fig. 2]; the table in
    // docs/client.md ("Crash points") maps each step t0..t12 to one of these or to the service's points.

    /// <summary>t0: the application made a request; nothing is stored or sent.</summary>
    internal const string CrashRequestCreated = "client.request.created";

    /// <summary>t0: a session was opened at the service for it; nothing of the request is stored.</summary>
    internal const string CrashSessionOpened = "client.session.opened";

    /// <summary>t1: the request is stored (forced), not sent.</summary>
    internal const string CrashRequestStored = "client.request.stored";

    /// <summary>t2: an attempt's request is written and flushed to the connection, no reply read.</summary>
    internal const string CrashRequestSent = "client.request.sent";

    /// <summary>t7: a reply's status and headers arrived, its body not read, nothing stored.</summary>
    internal const string CrashReplyReceived = "client.reply.received";

    /// <summary>
    /// t8 of a resend by <see cref="RecoverAsync"/>: the reply is stored (forced), not handed over; its session is back in the
    /// pool (t9' on its next request). On a live call t8 and t12 are one forced write (<see cref="CrashReplyDelivered"/>).
    /// </summary>
    internal const string CrashReplyStored = "client.reply.stored";

    /// <summary>t12 (Fig. 1's t8'), and t8 of a live call: the entry is marked as handed over (forced), and the call has not returned.</summary>
    internal const string CrashReplyDelivered = "client.reply.delivered";

    private const string SessionHeader = "PS-Session";
    private const string SequenceHeader = "PS-Seq";
    /// <summary>The services' problem types (docs/protocol.md, "Errors"; the service's ProtocolProblems.TypePrefix).</summary>
    internal const string ProblemPrefix = "urn:persistentservices:problem:";

    /// <summary>Never stored (credentials): each attempt takes them from the request being sent, as the handlers before this one set them.</summary>
    private static readonly HashSet<string> Unstored = new(StringComparer.OrdinalIgnoreCase) { "Authorization", "Proxy-Authorization", "Cookie", SessionHeader, SequenceHeader };

    /// <summary>Headers HttpClient computes per message.</summary>
    private static readonly HashSet<string> Computed = new(StringComparer.OrdinalIgnoreCase) { "Content-Length", "Transfer-Encoding", "Host", "Connection" };

    private readonly string _name;
    private readonly PersistentClientOptions _options;
    private readonly IHttpClientFactory _factory;
    private readonly ILogger _logger;
    private readonly SessionPool _pool;
    private readonly SemaphoreSlim _opening = new(1, 1);
    private readonly KeyValuePair<string, object?> _tag;
    private readonly Checkpoints.CrashPoints _crashPoints;
    private readonly ClientMetrics _metrics;
    private ClientStore? _store;
    private int _disposed;

    internal PersistentSessionClient(string name, PersistentClientOptions options, IHttpClientFactory factory, ILogger logger, ClientMetrics metrics, Checkpoints.CrashPoints? crashPoints = null)
    {
        _metrics = metrics;
        _crashPoints = crashPoints ?? Checkpoints.CrashPoints.None;
        _name = name;
        _options = options;
        _factory = factory;
        _logger = logger;
        _pool = new SessionPool(options.MaxSessionsPerService);
        _tag = ClientMetrics.Tag(name);
        Groups = new Replication.ReplicationGroupRouter(options.ReplicationGroups, new ClientGroupEvents(logger, metrics, name));
    }

    /// <summary>The replication groups this client follows (<see cref="PersistentClientOptions.ReplicationGroups"/>): each attempt goes to its group's serving node.</summary>
    internal Replication.ReplicationGroupRouter Groups { get; }

    /// <summary>The name of the <see cref="HttpClient"/> this belongs to.</summary>
    public string Name => _name;

    /// <summary>Requests stored whose reply the application has not received yet (sent by a call now, or waiting for <see cref="RecoverAsync"/>).</summary>
    public async Task<int> CountPendingAsync(CancellationToken cancellationToken = default)
        => (await OpenAsync(cancellationToken).ConfigureAwait(false)).PendingCount;

    /// <summary>
    /// After the client process restarted (or after calls failed): sends every stored request that has no reply again,
    /// with its session and number, and hands back each reply the application did not receive, oldest first. Each reply is
    /// handed back at most once, ever: it is marked as handed over in the store before it is yielded. A request whose
    /// outcome the service can no longer tell comes back with a null <see cref="RecoveredReply.Response"/>. Call it once
    /// at startup, before or while new requests are sent; requests that calls are sending at the moment are not included.
    /// </summary>
    public async IAsyncEnumerable<RecoveredReply> RecoverAsync([EnumeratorCancellation] CancellationToken cancellationToken = default)
    {
        var store = await OpenAsync(cancellationToken).ConfigureAwait(false);
        var entries = store.ClaimPending();
        for (var i = 0; i < entries.Count; i++)
        {
            var entry = entries[i];
            HttpResponseMessage? response;
            try
            {
                response = await RecoverOneAsync(store, entry, cancellationToken).ConfigureAwait(false);
            }
            catch
            {
                foreach (var left in entries.Skip(i))
                {
                    store.Release(left);
                }

                throw;
            }

            ClientEvents.ReplyRecovered(_logger, entry.Id, entry.Request.OperationId);
            _metrics.RepliesRecovered.Add(1, _tag);
            yield return new RecoveredReply(entry.Request.OperationId, new HttpMethod(entry.Request.Method), new Uri(entry.Request.Uri), response);
        }
    }

    private async Task<HttpResponseMessage?> RecoverOneAsync(ClientStore store, ClientEntry entry, CancellationToken cancellationToken)
    {
        if (entry.Reply is null)
        {
            // Through the whole handler chain of the named client, so handlers before this one (credentials) run again.
            using var http = _factory.CreateClient(_name);
            http.Timeout = Timeout.InfiniteTimeSpan;
            using var resend = new HttpRequestMessage(new HttpMethod(entry.Request.Method), entry.Request.Uri);
            resend.Options.Set(PersistentRequestOptions.ResendEntry, entry.Id);
            _metrics.Retries.Add(1, _tag);
            try
            {
                using var _ = await http.SendAsync(resend, cancellationToken).ConfigureAwait(false);
            }
            catch (PersistentRequestOutcomeUnknownException)
            {
                return null;
            }
        }

        await store.FinishAsync(entry, ClientRecordType.Delivered, CancellationToken.None).ConfigureAwait(false);
        return ToResponse(entry.Reply!, null);
    }

    /// <summary>The handler's work: a new request (stored, numbered, sent) or a resend of a stored one by <see cref="RecoverAsync"/>.</summary>
    internal async Task<HttpResponseMessage> SendAsync(
        HttpRequestMessage request, Func<HttpRequestMessage, CancellationToken, Task<HttpResponseMessage>> inner, CancellationToken cancellationToken)
    {
        if (request.Options.TryGetValue(PersistentRequestOptions.Passthrough, out var passthrough) && passthrough)
        {
            return await inner(request, cancellationToken).ConfigureAwait(false); // the client's own control request (a session's end)
        }

        var store = await OpenAsync(cancellationToken).ConfigureAwait(false);
        if (request.Options.TryGetValue(PersistentRequestOptions.ResendEntry, out var resendId))
        {
            if (!store.TryGet(resendId, out var stored))
            {
                throw new InvalidOperationException($"Request {resendId} is not pending in the client store.");
            }

            return await CompleteAsync(store, stored, request, inner, session: null, firstAttempt: false, handOver: false, cancellationToken).ConfigureAwait(false);
        }

        if (request.RequestUri is not { IsAbsoluteUri: true } uri)
        {
            throw new InvalidOperationException("A request through persistent sessions needs an absolute address (set HttpClient.BaseAddress).");
        }

        var body = request.Content is null ? null : await request.Content.ReadAsByteArrayAsync(cancellationToken).ConfigureAwait(false);
        if (body is { Length: var length } && length > _options.MaxBodyBytes)
        {
            throw new InvalidOperationException($"The request body is {length} bytes; PersistentClientOptions.MaxBodyBytes allows {_options.MaxBodyBytes}. Nothing was stored or sent.");
        }

        request.Options.TryGetValue(PersistentRequestOptions.OperationId, out var operationId);
        if (operationId is { Length: > 256 })
        {
            throw new ArgumentException("PersistentRequestOptions.OperationId is longer than 256 characters.", nameof(request));
        }

        var started = Stopwatch.GetTimestamp();
        _crashPoints.Hit(CrashRequestCreated);
        var headers = StoredHeaders(request);
        var authority = uri.GetLeftPart(UriPartial.Authority);
        var session = await _pool.AcquireAsync(authority, ct => OpenSessionAsync(authority, inner, ct), cancellationToken).ConfigureAwait(false);
        ClientEntry entry;
        try
        {
            // t0–t1: the request is durable before it is sent for the first time.
            entry = await store.AddAsync(
                new StoredRequest(0, session.Id, session.NextSequence, request.Method.Method, uri.AbsoluteUri, operationId, headers, body), cancellationToken).ConfigureAwait(false);
        }
        catch
        {
            _pool.Return(session); // nothing was sent with its next number
            throw;
        }

        _crashPoints.Hit(CrashRequestStored);
        _metrics.RequestsSent.Add(1, _tag);
        var response = await CompleteAsync(store, entry, request, inner, session, firstAttempt: true, handOver: true, cancellationToken).ConfigureAwait(false);
        _metrics.RequestDuration.Record(Stopwatch.GetElapsedTime(started).TotalSeconds, _tag);
        return response;
    }

    /// <summary>
    /// Sends the entry (the resilience pipeline inside retries it with the same ids) until a reply, stores the reply,
    /// frees the session, and hands the reply over. A failure leaves the entry pending, holding its session.
    /// </summary>
    private async Task<HttpResponseMessage> CompleteAsync(
        ClientStore store, ClientEntry entry, HttpRequestMessage carrier, Func<HttpRequestMessage, CancellationToken, Task<HttpResponseMessage>> inner,
        ClientSession? session, bool firstAttempt, bool handOver, CancellationToken cancellationToken)
    {
        session ??= new ClientSession(entry.Request.SessionId, entry.Authority, entry.Request.Sequence);
        var pooled = handOver; // a new request's session holds a pool slot; a resent one's does not
        try
        {
            var bodyFailures = 0;
            while (true)
            {
                using var attempt = ToRequest(entry.Request, carrier);
                using var response = await inner(attempt, cancellationToken).ConfigureAwait(false);
                _crashPoints.Hit(CrashReplyReceived);
                var retried = attempt.Options.TryGetValue(PersistentRequestOptions.Retried, out var r) && r;
                byte[] body;
                try
                {
                    body = await response.Content.ReadAsByteArrayAsync(cancellationToken).ConfigureAwait(false);
                }
                catch (Exception ex) when (ex is HttpRequestException or IOException && bodyFailures < _options.MaxRetryAttempts)
                {
                    // The connection dropped in the middle of the reply (the retries inside only cover the headers): the
                    // request ran, so the same ids get its buffered reply.
                    bodyFailures++;
                    firstAttempt = false;
                    _metrics.Retries.Add(1, _tag);
                    await Task.Delay(_options.RetryDelay, cancellationToken).ConfigureAwait(false);
                    continue;
                }

                if (response.StatusCode is HttpStatusCode.ServiceUnavailable or HttpStatusCode.TooManyRequests ||
                    (response.StatusCode == HttpStatusCode.Conflict && response.Headers.RetryAfter is not null))
                {
                    throw new HttpRequestException($"The service answered {(int)response.StatusCode} to every attempt.", null, response.StatusCode);
                }

                switch (ProblemType(response, body))
                {
                    case "session-not-found" when firstAttempt && !retried:
                        // Nothing of this request reached a session (it expired while idle): number it in a new one.
                        var moved = await OpenSessionAsync(entry.Authority, inner, cancellationToken).ConfigureAwait(false);
                        await store.MoveAsync(entry, moved, cancellationToken).ConfigureAwait(false);
                        ClientEvents.RequestMoved(_logger, entry.Id, entry.Authority);
                        session = moved;
                        firstAttempt = false;
                        continue;

                    case "session-not-found" or "sequence-gap" or "stale-sequence" or "sequence-reused" or "session-busy" or "session-diverged":
                        var reason = $"the service answered {(int)response.StatusCode} {ProblemType(response, body)} to request {entry.Request.Sequence} of session {entry.Request.SessionId}";
                        await store.FinishAsync(entry, ClientRecordType.Abandoned, CancellationToken.None).ConfigureAwait(false);
                        ClientEvents.RequestAbandoned(_logger, entry.Id, reason);
                        if (pooled)
                        {
                            _pool.Drop(session);
                            pooled = false;
                        }

                        throw new PersistentRequestOutcomeUnknownException(
                            $"Whether the request ran is unknown: {reason}. It is not sent again.");
                }

                if (body.Length > _options.MaxBodyBytes)
                {
                    throw new HttpRequestException($"The reply body is {body.Length} bytes; PersistentClientOptions.MaxBodyBytes allows {_options.MaxBodyBytes}: it cannot be stored.");
                }

                var reply = new StoredReply(entry.Id, (int)response.StatusCode, ReplyHeaders(response), body);
                if (handOver)
                {
                    // t8 and t12 in one forced write (docs/client.md, "Crash points"): the entry is marked as handed over
                    // before the application has the reply, so a crash can never hand it over twice, and before the session's
                    // next request acknowledges the reply to the service. A crash before the mark is durable leaves the
                    // request pending with no reply: RecoverAsync resends it and the service, which still holds the reply
                    // (nothing acknowledged it), answers it again. So the live path stores no Reply record.
                    await store.FinishAsync(entry, ClientRecordType.Delivered, CancellationToken.None).ConfigureAwait(false);
                    _metrics.RepliesStored.Add(1, _tag);
                    _crashPoints.Hit(CrashReplyDelivered);
                }
                else
                {
                    // t8 of a resend by RecoverAsync: the reply is durable before the session's next request acknowledges it;
                    // RecoverOneAsync then marks it handed over as it yields it.
                    await store.AddReplyAsync(entry, reply, CancellationToken.None).ConfigureAwait(false);
                    _metrics.RepliesStored.Add(1, _tag);
                    _crashPoints.Hit(CrashReplyStored);
                }

                session.NextSequence = entry.Request.Sequence + 1;
                if (pooled)
                {
                    _pool.Return(session);
                    pooled = false;
                }
                else
                {
                    _pool.Adopt(session);
                }

                return ToResponse(reply, carrier);
            }
        }
        catch (Exception ex) when (ex is not PersistentRequestOutcomeUnknownException)
        {
            ClientEvents.RequestPending(_logger, entry.Id, ex.GetType().Name + ": " + ex.Message);
            store.Release(entry);

            if (pooled)
            {
                _pool.Drop(session); // the session stays with its pending request
            }

            throw;
        }
    }

    private async Task<ClientSession> OpenSessionAsync(
        string authority, Func<HttpRequestMessage, CancellationToken, Task<HttpResponseMessage>> inner, CancellationToken cancellationToken)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, new Uri(new Uri(authority), _options.SessionsPath));
        using var response = await inner(request, cancellationToken).ConfigureAwait(false);
        if (response.StatusCode != HttpStatusCode.Created)
        {
            throw new HttpRequestException($"Starting a session at {request.RequestUri} answered {(int)response.StatusCode}.", null, response.StatusCode);
        }

        var id = response.Headers.TryGetValues(SessionHeader, out var values) ? values.FirstOrDefault() : null;
        id ??= (await response.Content.ReadFromJsonAsync<JsonElement>(cancellationToken).ConfigureAwait(false)).GetProperty("sessionId").GetString();
        if (string.IsNullOrEmpty(id))
        {
            throw new HttpRequestException($"Starting a session at {request.RequestUri} returned no session id.");
        }

        ClientEvents.SessionOpened(_logger, id, authority);
        _crashPoints.Hit(CrashSessionOpened);
        return new ClientSession(id, authority, 1);
    }

    private async ValueTask<ClientStore> OpenAsync(CancellationToken cancellationToken)
    {
        if (Volatile.Read(ref _store) is { } open)
        {
            return open;
        }

        ObjectDisposedException.ThrowIf(Volatile.Read(ref _disposed) != 0, this);
        await _opening.WaitAsync(cancellationToken).ConfigureAwait(false);
        try
        {
            if (_store is null)
            {
                var store = await ClientStore.OpenAsync(_options.StoreDirectory, _logger, cancellationToken, _options.FinishedOperationRetention).ConfigureAwait(false);
                foreach (var session in store.IdleSessions)
                {
                    _pool.Adopt(session);
                }

                Volatile.Write(ref _store, store);
            }

            return _store;
        }
        finally
        {
            _opening.Release();
        }
    }

    /// <summary>
    /// The pool's idle sessions (their last reply is stored, nothing of theirs is pending) are ended at their services, all
    /// at once, bounded by <see cref="PersistentClientOptions.CloseSessionsTimeout"/>; each one ended (or already unknown
    /// there) is marked closed in the store so the next start does not take it up again. One that fails stays in the store:
    /// the next start uses it again, or, if the service dropped it meanwhile, moves its first request to a new session.
    /// </summary>
    private async Task<int> EndIdleSessionsAsync(ClientStore store, CancellationToken cancellationToken)
    {
        if (_options.CloseSessionsTimeout <= TimeSpan.Zero)
        {
            return 0;
        }

        var idle = _pool.TakeIdle();
        if (idle.Count == 0)
        {
            return 0;
        }

        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
        timeout.CancelAfter(_options.CloseSessionsTimeout);
        var closed = new List<ClientSession>();
        try
        {
            using var http = _factory.CreateClient(_name);
            await Task.WhenAll(idle.Select(async session =>
            {
                var address = new Uri(new Uri(session.Authority), _options.SessionsPath.TrimEnd('/') + "/" + Uri.EscapeDataString(session.Id));
                using var end = new HttpRequestMessage(HttpMethod.Delete, address);
                end.Options.Set(PersistentRequestOptions.Passthrough, true);
                try
                {
                    using var response = await http.SendAsync(end, timeout.Token).ConfigureAwait(false);
                    if (response.StatusCode is HttpStatusCode.NoContent or HttpStatusCode.NotFound or HttpStatusCode.OK)
                    {
                        lock (closed)
                        {
                            closed.Add(session);
                        }
                    }
                    else
                    {
                        ClientEvents.SessionNotClosed(_logger, session.Id, session.Authority, $"the service answered {(int)response.StatusCode}");
                    }
                }
                catch (Exception ex)
                {
                    // Whatever went wrong, the application is stopping: the session stays in the store, as after a crash.
                    ClientEvents.SessionNotClosed(_logger, session.Id, session.Authority, ex.GetType().Name + ": " + ex.Message);
                }
            })).ConfigureAwait(false);
        }
        catch (ObjectDisposedException)
        {
            // The application's container already disposed the handler chain: the sessions stay, as after a crash.
        }

        if (closed.Count > 0)
        {
            await store.CloseSessionsAsync(closed.Select(s => s.Id), CancellationToken.None).ConfigureAwait(false);
            _metrics.SessionsClosed.Add(closed.Count, _tag);
            ClientEvents.SessionsClosed(_logger, closed.Count, idle.Count);
        }

        return closed.Count;
    }

    /// <summary>The body of an attempt while <see cref="CrashRequestSent"/> is armed: written and flushed to the connection, then the crash point.</summary>
    private sealed class SentCrashPointContent(byte[] body, Checkpoints.CrashPoints crashPoints) : HttpContent
    {
        protected override async Task SerializeToStreamAsync(Stream stream, TransportContext? context)
        {
            await stream.WriteAsync(body).ConfigureAwait(false);
            await stream.FlushAsync().ConfigureAwait(false);
            crashPoints.Hit(CrashRequestSent);
        }

        protected override bool TryComputeLength(out long length)
        {
            length = body.Length;
            return true;
        }
    }

    private static List<KeyValuePair<string, string>> StoredHeaders(HttpRequestMessage request)
    {
        var headers = new List<KeyValuePair<string, string>>();
        IEnumerable<KeyValuePair<string, IEnumerable<string>>> all = request.Headers;
        if (request.Content is not null)
        {
            all = all.Concat(request.Content.Headers);
        }

        foreach (var (name, values) in all)
        {
            if (!Unstored.Contains(name) && !Computed.Contains(name))
            {
                headers.AddRange(values.Select(v => new KeyValuePair<string, string>(name, v)));
            }
        }

        return headers;
    }

    private HttpRequestMessage ToRequest(StoredRequest stored, HttpRequestMessage carrier)
    {
        var message = new HttpRequestMessage(new HttpMethod(stored.Method), stored.Uri) { Version = carrier.Version, VersionPolicy = carrier.VersionPolicy };
        if (stored.Body is not null)
        {
            message.Content = _crashPoints.IsArmed(CrashRequestSent) ? new SentCrashPointContent(stored.Body, _crashPoints) : new ByteArrayContent(stored.Body);
        }

        foreach (var (name, value) in stored.Headers)
        {
            if (!message.Headers.TryAddWithoutValidation(name, value))
            {
                message.Content?.Headers.TryAddWithoutValidation(name, value);
            }
        }

        foreach (var (name, values) in carrier.Headers.Where(h => Unstored.Contains(h.Key) && h.Key is not (SessionHeader or SequenceHeader)))
        {
            message.Headers.TryAddWithoutValidation(name, values);
        }

        message.Headers.TryAddWithoutValidation(SessionHeader, stored.SessionId);
        message.Headers.TryAddWithoutValidation(SequenceHeader, stored.Sequence.ToString(CultureInfo.InvariantCulture));
        return message;
    }

    private static List<KeyValuePair<string, string>> ReplyHeaders(HttpResponseMessage response)
    {
        var headers = new List<KeyValuePair<string, string>>();
        foreach (var (name, values) in response.Headers.Concat(response.Content.Headers))
        {
            if (!Computed.Contains(name))
            {
                headers.AddRange(values.Select(v => new KeyValuePair<string, string>(name, v)));
            }
        }

        return headers;
    }

    private static HttpResponseMessage ToResponse(StoredReply reply, HttpRequestMessage? request)
    {
        var response = new HttpResponseMessage((HttpStatusCode)reply.StatusCode) { Content = new ByteArrayContent(reply.Body), RequestMessage = request };
        foreach (var (name, value) in reply.Headers)
        {
            if (!response.Headers.TryAddWithoutValidation(name, value))
            {
                response.Content.Headers.TryAddWithoutValidation(name, value);
            }
        }

        return response;
    }

    private static string? ProblemType(HttpResponseMessage response, byte[] body)
    {
        if ((int)response.StatusCode < 400 || response.Content.Headers.ContentType?.MediaType != "application/problem+json")
        {
            return null;
        }

        try
        {
            using var document = JsonDocument.Parse(body);
            return document.RootElement.TryGetProperty("type", out var type) && type.GetString() is { } text && text.StartsWith(ProblemPrefix, StringComparison.Ordinal)
                ? text[ProblemPrefix.Length..]
                : null;
        }
        catch (JsonException)
        {
            return null;
        }
    }

    /// <summary>
    /// Ends this client's idle sessions at their services (<c>DELETE /ps/sessions/{id}</c>, all at once, within
    /// <see cref="PersistentClientOptions.CloseSessionsTimeout"/>), so the services drop their last replies now rather than
    /// after their idle retention; sessions with a request awaiting its reply are kept for <see cref="RecoverAsync"/>.
    /// A host calls it when it stops (<c>AddPersistentSessions</c> registers a hosted service); an application without a
    /// host calls it before it disposes its service provider (the provider disposes the handlers it needs). Call it when no
    /// more requests are sent: a later request opens a new session.
    /// </summary>
    /// <returns>The number of sessions ended (or already unknown at their services).</returns>
    public async Task<int> CloseIdleSessionsAsync(CancellationToken cancellationToken = default)
        => Volatile.Read(ref _store) is { } store ? await EndIdleSessionsAsync(store, cancellationToken).ConfigureAwait(false) : 0;

    /// <summary>
    /// Closes the store (what it holds stays for the next start). Idle sessions still in the pool are ended first, when the
    /// named client's handlers still work (see <see cref="CloseIdleSessionsAsync(CancellationToken)"/>).
    /// </summary>
    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }

        await _opening.WaitAsync().ConfigureAwait(false);
        try
        {
            if (_store is { } store)
            {
                await EndIdleSessionsAsync(store, CancellationToken.None).ConfigureAwait(false);
                await store.DisposeAsync().ConfigureAwait(false);
            }
        }
        finally
        {
            _opening.Release();
        }
    }
}
