using System.Globalization;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text.Json;

namespace Bookstore.Buyer;

/// <summary>
/// The client side of the session protocol (docs/protocol.md), all of it, for one service: start a session
/// (<c>POST /ps/sessions</c>), number each request (<c>PS-Session</c>, <c>PS-Seq</c>), and after a connection error, a
/// timeout or a <c>503</c> resend <b>the same request with the same number</b> until a reply arrives: the service runs
/// it once and answers a resend with the reply it gave. A reply that echoes <c>PS-Seq</c> consumed the number; a
/// read-only endpoint's reply does not echo it, and the next request uses the same number. An exactly-once client
/// library will replace this class.
/// <para>
/// With <paramref name="plain"/> it also plays a client that never retries (<c>--plain-clients</c>, README.md): the
/// first send of each request is what such a client would have got, and any error or non-2xx answer to it is counted in
/// <see cref="ClientErrors"/>. The launcher still completes the request afterwards with the same number (which executes
/// nothing twice), so that the run goes on and the reconciliation stays exact; the count is what a browser or
/// <c>curl</c> would have shown its user.
/// </para>
/// </summary>
internal sealed class SessionClient(string service, Uri baseAddress, Action<string>? onRetry = null, bool plain = false, IEnumerable<IEnumerable<Uri>>? groups = null) : IDisposable
{
    private static readonly JsonSerializerOptions Json = new(JsonSerializerDefaults.Web);
    private static readonly TimeSpan AttemptTimeout = TimeSpan.FromSeconds(20);

    // With replicas each attempt goes to the service's primary (a node refusing or answering 503 replica is passed over):
    // the library's handler for plain HttpClients.
    private readonly HttpClient _http = new(new PersistentServices.ReplicationGroupsHandler(groups ?? [])
    {
        InnerHandler = new SocketsHttpHandler { ConnectTimeout = TimeSpan.FromSeconds(2) },
    })
    {
        // Paths are sent relative to it, so a base with a path (a service behind the gateway: http://gw/bookseller/) keeps it.
        BaseAddress = baseAddress.AbsoluteUri.EndsWith('/') ? baseAddress : new Uri(baseAddress.AbsoluteUri + "/"),
        Timeout = Timeout.InfiniteTimeSpan,
    };

    private string? _session;
    private long _next = 1;
    private string? _firstFailed;

    public string Service => service;

    /// <summary>Resends so far (each one a connection error, timeout or 503 that the protocol absorbed).</summary>
    public int Retries { get; private set; }

    /// <summary>Requests whose first send failed or got a non-2xx answer: the errors a client that never retries shows.</summary>
    public int ClientErrors { get; private set; }

    /// <summary>The first few of those, for the summary.</summary>
    public List<string> ErrorSamples { get; } = [];

    /// <summary>Every request's first send and final answer (<see cref="System.Diagnostics.Stopwatch"/> timestamps).</summary>
    public List<(long Sent, long Answered)> Requests { get; } = [];

    public async Task StartAsync(CancellationToken cancellationToken)
    {
        // Executes nothing, so a lost reply is harmless: start another.
        _session = await RetryAsync(async token =>
        {
            using var response = await _http.PostAsync("ps/sessions", null, token);
            if (response.StatusCode != HttpStatusCode.Created)
            {
                return (false, "");
            }

            return (true, response.Headers.GetValues("PS-Session").Single());
        }, "start a session", cancellationToken);
        _next = 1;
    }

    /// <summary>Sends one request of the session until its reply arrives; throws on a reply that is an error of the endpoint or of the protocol.</summary>
    public async Task<T> PostAsync<T>(string path, object? body, CancellationToken cancellationToken)
    {
        var session = _session ?? throw new InvalidOperationException("Start the session first.");
        var bytes = JsonSerializer.SerializeToUtf8Bytes(body ?? new { }, Json); // the same bytes in every resend
        var number = _next;
        var (status, text, consumed) = await RetryAsync(async token =>
        {
            using var request = new HttpRequestMessage(HttpMethod.Post, path.TrimStart('/')) { Content = new ByteArrayContent(bytes) };
            request.Content.Headers.ContentType = new MediaTypeHeaderValue("application/json");
            request.Headers.Add("PS-Session", session);
            request.Headers.Add("PS-Seq", number.ToString(CultureInfo.InvariantCulture));
            using var response = await _http.SendAsync(request, token);
            var echoed = response.Headers.TryGetValues("PS-Seq", out var values) && values.Single() == number.ToString(CultureInfo.InvariantCulture);
            if (!echoed && response.StatusCode is HttpStatusCode.ServiceUnavailable or HttpStatusCode.TooManyRequests or HttpStatusCode.BadGateway)
            {
                return (false, default); // recovering, stopping, or the log faulted: resend the same request
            }

            return (true, (response.StatusCode, await response.Content.ReadAsStringAsync(token), echoed));
        }, $"{path} (#{number})", cancellationToken);

        if (consumed)
        {
            _next = number + 1;
        }

        if (plain && _firstFailed is null && status != HttpStatusCode.OK)
        {
            CountClientError($"{path}: {(int)status}");
        }

        if (status != HttpStatusCode.OK)
        {
            throw new InvalidOperationException($"{service} answered {path} (#{number}) with {(int)status}: {text}");
        }

        return JsonSerializer.Deserialize<T>(text, Json) ?? throw new InvalidOperationException($"{service} answered {path} with an empty body");
    }

    /// <summary>A read-only request of this session (not numbered, not logged).</summary>
    public async Task<T> GetAsync<T>(string path, CancellationToken cancellationToken)
        => await RetryAsync(async token =>
        {
            using var request = new HttpRequestMessage(HttpMethod.Get, path.TrimStart('/'));
            if (_session is not null)
            {
                request.Headers.Add("PS-Session", _session);
            }

            using var response = await _http.SendAsync(request, token);
            if (response.StatusCode is HttpStatusCode.ServiceUnavailable or HttpStatusCode.TooManyRequests)
            {
                return (false, default!);
            }

            response.EnsureSuccessStatusCode();
            return (true, (await response.Content.ReadFromJsonAsync<T>(Json, token))!);
        }, path, cancellationToken);

    public void Dispose() => _http.Dispose();

    /// <summary>Repeats <paramref name="attempt"/> until it reports done; connection errors and timeouts count as "not yet".</summary>
    private async Task<T> RetryAsync<T>(Func<CancellationToken, Task<(bool Done, T Result)>> attempt, string what, CancellationToken cancellationToken)
    {
        var delay = TimeSpan.FromMilliseconds(50);
        var sent = System.Diagnostics.Stopwatch.GetTimestamp();
        _firstFailed = null;
        while (true)
        {
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(cancellationToken);
            timeout.CancelAfter(AttemptTimeout);
            string why;
            try
            {
                var (done, result) = await attempt(timeout.Token);
                if (done)
                {
                    Requests.Add((sent, System.Diagnostics.Stopwatch.GetTimestamp()));
                    return result;
                }

                why = "service unavailable";
            }
            catch (HttpRequestException ex)
            {
                why = ex.HttpRequestError.ToString();
            }
            catch (IOException ex)
            {
                why = ex.GetType().Name;
            }
            catch (OperationCanceledException) when (!cancellationToken.IsCancellationRequested)
            {
                why = "timeout";
            }

            if (plain && _firstFailed is null)
            {
                _firstFailed = why;
                CountClientError($"{what}: {why}");
            }

            Retries++;
            onRetry?.Invoke($"{service}: {what}: {why}, resending");
            await Task.Delay(delay, cancellationToken);
            delay = TimeSpan.FromMilliseconds(Math.Min(delay.TotalMilliseconds * 2, 1000));
        }
    }

    private void CountClientError(string text)
    {
        ClientErrors++;
        if (ErrorSamples.Count < 5)
        {
            ErrorSamples.Add($"{service} {text}");
        }
    }
}
