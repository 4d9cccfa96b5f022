using System.Diagnostics;
using System.Globalization;
using System.Net.Http.Headers;
using System.Net.Sockets;
using System.Text;
using System.Text.Json;

namespace PersistentServices.CrashHarness;

/// <summary>
/// One client session: starts a session, then sends add operations one at a time (sequence numbers 1, 2, 3, …),
/// retrying each with the same number and the same body bytes until it is answered, and keeps the model of what was
/// acknowledged. At the end it reads the session's state and compares it with the model.
/// </summary>
internal sealed class ClientSession
{
    /// <summary>Attempts of one request before the harness gives up on it (a liveness violation).</summary>
    private const int MaxAttempts = 5000;

    private static readonly MediaTypeHeaderValue Json = new("application/json");

    private readonly int _index;
    private readonly Options _options;
    private readonly HttpClient _http;
    private readonly RunStats _stats;
    private readonly Random _amounts;
    private readonly Random _jitter;
    private readonly List<(string OpId, long Amount)> _acknowledged = [];
    private readonly List<InventoryAck> _inventoryAcks = [];
    private long _total;

    public ClientSession(int index, Options options, HttpClient http, RunStats stats)
    {
        _index = index;
        _options = options;
        _http = http;
        _stats = stats;
        _amounts = new Random(unchecked((options.Seed * 1_000_003) + index));
        _jitter = new Random(unchecked((options.Seed * 7_919) - index));
    }

    /// <summary>The session id, once started.</summary>
    public string? Id { get; private set; }

    /// <summary>Operations acknowledged with 200 and consistent with the model, in order.</summary>
    public int AcknowledgedCount => _acknowledged.Count;

    /// <summary>Inventory scenario: every acknowledged adjustment with what its reply said (read once the session stopped).</summary>
    public IReadOnlyList<InventoryAck> InventoryAcks => _inventoryAcks;

    /// <summary>Inventory scenario: the latest acknowledged adjustment (read by the kill loop while the session runs).</summary>
    public InventoryAck? LastInventoryAck => Volatile.Read(ref _lastInventoryAck);

    private InventoryAck? _lastInventoryAck;

    /// <summary>The operation sent but never acknowledged (at most one: the client waits for each reply).</summary>
    public (string OpId, long Amount)? InFlight { get; private set; }

    private string Name => $"session {_index.ToString(CultureInfo.InvariantCulture)} ({Id ?? "not started"})";

    /// <summary>
    /// Runs until <paramref name="stopNewOps"/> (the in-flight operation is finished first), <paramref name="stop"/>
    /// (abandons it), or a violation.
    /// </summary>
    public async Task RunAsync(CancellationToken stopNewOps, CancellationToken stop)
    {
        try
        {
            Id = await StartSessionAsync(stop).ConfigureAwait(false);
            for (var seq = 1L; Id is not null && !stopNewOps.IsCancellationRequested; seq++)
            {
                var opId = $"s{_index.ToString(CultureInfo.InvariantCulture)}-{seq.ToString(CultureInfo.InvariantCulture)}";
                if (_options.Scenario == Scenario.Inventory)
                {
                    var sku = "sku-" + _amounts.Next(0, InventoryChecker.Skus).ToString(CultureInfo.InvariantCulture);
                    var delta = _amounts.Next(-3, 6);
                    InFlight = (opId, delta);
                    var adjustStarted = Stopwatch.GetTimestamp();
                    if (!await AdjustAsync(seq, opId, sku, delta, stop).ConfigureAwait(false))
                    {
                        return;
                    }

                    InFlight = null;
                    _stats.Acknowledged(Stopwatch.GetElapsedTime(adjustStarted).TotalMilliseconds);
                    continue;
                }

                var amount = (long)_amounts.Next(1, 1001);
                InFlight = (opId, amount);
                var addStarted = Stopwatch.GetTimestamp();
                if (!await AddAsync(seq, opId, amount, stop).ConfigureAwait(false))
                {
                    return;
                }

                _acknowledged.Add((opId, amount));
                _total += amount;
                InFlight = null;
                _stats.Acknowledged(Stopwatch.GetElapsedTime(addStarted).TotalMilliseconds);
            }
        }
        catch (OperationCanceledException) when (stop.IsCancellationRequested)
        {
            // Stopped by the harness; the in-flight operation (if any) stays unacknowledged.
        }
    }

    /// <summary>Reads the session's state and compares it with the model.</summary>
    public async Task<Verdict> VerifyAsync(CancellationToken stop)
    {
        var verdict = new Verdict();
        if (Id is null || _options.Scenario == Scenario.Inventory)
        {
            return verdict; // the inventory is checked once for all sessions (InventoryChecker)
        }

        var reply = await SendAsync(() =>
        {
            var request = new HttpRequestMessage(HttpMethod.Get, _options.StatePath);
            request.Headers.Add("PS-Session", Id);
            return request;
        }, "GET state", stop).ConfigureAwait(false);
        if (reply is null)
        {
            verdict.Violations.Add($"{Name}: final state not readable");
            return verdict;
        }

        if (reply.Status == 404 && _acknowledged.Count > 0)
        {
            verdict.Lost = _acknowledged.Count;
            verdict.Findings.Add($"{Name}: LOST all {_acknowledged.Count} acknowledged ops: GET {_options.StatePath} answered 404 {Shorten(reply.Body)}");
            return verdict;
        }

        if (reply.Status != 200 || !TryParseState(reply.Body, out var total, out var operations))
        {
            verdict.Violations.Add($"{Name}: GET {_options.StatePath} answered {reply.Status} {Shorten(reply.Body)}");
            return verdict;
        }

        var counts = new Dictionary<string, int>(StringComparer.Ordinal);
        foreach (var op in operations)
        {
            counts[op] = counts.GetValueOrDefault(op) + 1;
        }

        foreach (var (op, count) in counts.Where(c => c.Value > 1))
        {
            verdict.Duplicated++;
            verdict.Findings.Add($"{Name}: DUPLICATED op {op} executed {count} times");
        }

        foreach (var (op, amount) in _acknowledged.Where(a => !counts.ContainsKey(a.OpId)))
        {
            verdict.Lost++;
            verdict.Findings.Add($"{Name}: LOST acknowledged op {op} (amount {amount})");
        }

        var acknowledged = _acknowledged.Select(a => a.OpId).ToHashSet(StringComparer.Ordinal);
        var expectedTotal = _total;
        var unknown = counts.Keys.Where(op => !acknowledged.Contains(op)).ToList();
        if (unknown.Count == 1 && InFlight is { } inFlight && unknown[0] == inFlight.OpId && counts[unknown[0]] == 1 && operations[^1] == unknown[0])
        {
            verdict.UnacknowledgedApplied = true;
            expectedTotal += inFlight.Amount;
            verdict.Findings.Add($"{Name}: op {inFlight.OpId} was applied but never acknowledged (the client stopped waiting for it)");
        }
        else if (unknown.Count > 0)
        {
            verdict.Violations.Add($"{Name}: ops the client never sent or already abandoned: {string.Join(", ", unknown.Take(10))}");
        }

        var order = operations.Where(acknowledged.Contains).Distinct(StringComparer.Ordinal).ToList();
        var expectedOrder = _acknowledged.Select(a => a.OpId).Where(counts.ContainsKey).ToList();
        if (!order.SequenceEqual(expectedOrder, StringComparer.Ordinal))
        {
            verdict.Violations.Add($"{Name}: operations out of acknowledgement order: {string.Join(", ", operations.Take(20))}…");
        }

        if (verdict.Lost == 0 && verdict.Duplicated == 0 && total != expectedTotal)
        {
            verdict.Violations.Add($"{Name}: total {total}, expected {expectedTotal} (the sum of the acknowledged amounts)");
        }

        return verdict;
    }

    private async Task<string?> StartSessionAsync(CancellationToken stop)
    {
        var reply = await SendAsync(() => new HttpRequestMessage(HttpMethod.Post, _options.SessionsPath), "start session", stop).ConfigureAwait(false);
        if (reply is null)
        {
            return null;
        }

        string? id = null;
        if (reply.Status == 201)
        {
            try
            {
                using var json = JsonDocument.Parse(reply.Body);
                id = json.RootElement.TryGetProperty("sessionId", out var value) ? value.GetString() : null;
            }
            catch (Exception ex) when (ex is JsonException or InvalidOperationException)
            {
                id = null;
            }
        }

        if (id is null)
        {
            _stats.Violation($"{Name}: POST {_options.SessionsPath} answered {reply.Status} {Shorten(reply.Body)}");
            return null;
        }

        _stats.Add(Counter.SessionsStarted);
        return id;
    }

    /// <summary>Sends one add until it is answered; true when it was acknowledged consistently with the model.</summary>
    private async Task<bool> AddAsync(long seq, string opId, long amount, CancellationToken stop)
    {
        var where = $"{Name} seq {seq.ToString(CultureInfo.InvariantCulture)} op {opId} amount {amount}";
        var reply = await SendOperationAsync(seq, opId, string.Create(CultureInfo.InvariantCulture, $$"""{"opId":"{{opId}}","amount":{{amount}}}"""), where, stop).ConfigureAwait(false);
        if (reply is null)
        {
            return false;
        }

        if (!TryParseAddReply(reply.Body, out var total, out var operations))
        {
            _stats.Violation($"{where}: unreadable 200 reply {Shorten(reply.Body)}");
            return false;
        }

        if (total != _total + amount || operations != _acknowledged.Count + 1)
        {
            _stats.Violation($"{where}: reply total={total} operations={operations} PS-Seq={reply.Sequence} replayed={reply.Replayed}, " +
                $"expected total={_total + amount} operations={_acknowledged.Count + 1} (one serial application of the acknowledged ops)");
            return false;
        }

        return true;
    }

    /// <summary>Inventory scenario: sends one adjustment until it is answered and records what the reply said.</summary>
    private async Task<bool> AdjustAsync(long seq, string opId, string sku, int delta, CancellationToken stop)
    {
        var where = $"{Name} seq {seq.ToString(CultureInfo.InvariantCulture)} op {opId} {sku} {delta:+0;-0}";
        var reply = await SendOperationAsync(seq, opId, string.Create(CultureInfo.InvariantCulture, $$"""{"opId":"{{opId}}","sku":"{{sku}}","delta":{{delta}}}"""), where, stop).ConfigureAwait(false);
        if (reply is null)
        {
            return false;
        }

        try
        {
            using var json = JsonDocument.Parse(reply.Body);
            var root = json.RootElement;
            var ack = new InventoryAck(opId, sku, delta, root.GetProperty("ticket").GetInt64(), root.GetProperty("version").GetInt64(), root.GetProperty("quantity").GetInt32());
            if (root.GetProperty("opId").GetString() != opId || root.GetProperty("sku").GetString() != sku)
            {
                _stats.Violation($"{where}: the reply is for another operation: {Shorten(reply.Body)}");
                return false;
            }

            _inventoryAcks.Add(ack);
            Volatile.Write(ref _lastInventoryAck, ack);
            return true;
        }
        catch (Exception ex) when (ex is JsonException or InvalidOperationException or KeyNotFoundException or FormatException)
        {
            _stats.Violation($"{where}: unreadable 200 reply {Shorten(reply.Body)}");
            return false;
        }
    }

    /// <summary>
    /// Sends one numbered operation of this session until it is answered (every retry sends exactly the same bytes);
    /// null unless it was answered 200 (anything else is recorded as a violation).
    /// </summary>
    private async Task<Reply?> SendOperationAsync(long seq, string opId, string json, string where, CancellationToken stop)
    {
        var body = Encoding.UTF8.GetBytes(json);
        var seqText = seq.ToString(CultureInfo.InvariantCulture);
        var reply = await SendAsync(() =>
        {
            var request = new HttpRequestMessage(HttpMethod.Post, _options.AddPath) { Content = new ByteArrayContent(body) };
            request.Content.Headers.ContentType = Json;
            request.Headers.Add("PS-Session", Id);
            request.Headers.Add("PS-Seq", seqText);
            return request;
        }, $"seq {seqText} op {opId}", stop).ConfigureAwait(false);
        if (reply is null)
        {
            return null;
        }

        if (reply.Status != 200)
        {
            _stats.Violation($"{where}: status {reply.Status}{(reply.Replayed ? " (replayed)" : "")} {Shorten(reply.Body)}");
            return null;
        }

        if (reply.Sequence is { } echoed && echoed != seqText)
        {
            _stats.Violation($"{where}: the reply carries PS-Seq {echoed}");
            return null;
        }

        if (reply.Replayed)
        {
            _stats.Add(Counter.Replayed);
        }

        return reply;
    }

    /// <summary>
    /// Sends until the service answers with anything but 503/429, retrying the same request after timeouts and
    /// connection failures; null after <see cref="MaxAttempts"/> (recorded as a violation).
    /// </summary>
    private async Task<Reply?> SendAsync(Func<HttpRequestMessage> create, string what, CancellationToken stop)
    {
        for (var attempt = 1; attempt <= MaxAttempts; attempt++)
        {
            // A new message each time: HttpClient refuses to send one twice.
            using var request = create();
            using var timeout = CancellationTokenSource.CreateLinkedTokenSource(stop);
            timeout.CancelAfter(_options.RequestTimeoutMs);
            _stats.Add(Counter.RequestsSent);
            Counter cause;
            string detail;
            try
            {
                using var response = await _http.SendAsync(request, timeout.Token).ConfigureAwait(false);
                var body = await response.Content.ReadAsStringAsync(timeout.Token).ConfigureAwait(false);
                var status = (int)response.StatusCode;
                if (status is not (503 or 429))
                {
                    return new Reply(status, body, Header(response, "PS-Replayed") == "true", Header(response, "PS-Seq"));
                }

                cause = status == 503 ? Counter.RetryUnavailable : Counter.RetryTooMany;
                detail = status.ToString(CultureInfo.InvariantCulture);
            }
            catch (OperationCanceledException) when (!stop.IsCancellationRequested)
            {
                cause = Counter.RetryTimeout;
                detail = "timeout";
            }
            catch (Exception ex) when (ex is HttpRequestException or IOException)
            {
                cause = ex.InnerException is SocketException { SocketErrorCode: SocketError.ConnectionRefused } ? Counter.RetryRefused : Counter.RetryReset;
                detail = ex.Message;
            }

            _stats.Add(cause);
            if (_options.Verbose)
            {
                Console.WriteLine($"  {Name} {what}: attempt {attempt} {cause}: {detail}");
            }

            await Task.Delay(_jitter.Next(20, 101), stop).ConfigureAwait(false);
        }

        _stats.Violation($"{Name} {what}: not answered after {MaxAttempts} attempts");
        return null;
    }

    private static string? Header(HttpResponseMessage response, string name)
        => response.Headers.TryGetValues(name, out var values) ? string.Join(',', values) : null;

    private static bool TryParseAddReply(string body, out long total, out long operations)
    {
        total = operations = 0;
        try
        {
            using var json = JsonDocument.Parse(body);
            return json.RootElement.TryGetProperty("total", out var t) && t.TryGetInt64(out total) &&
                   json.RootElement.TryGetProperty("operations", out var o) && o.TryGetInt64(out operations);
        }
        catch (Exception ex) when (ex is JsonException or InvalidOperationException)
        {
            return false;
        }
    }

    private static bool TryParseState(string body, out long total, out List<string> operations)
    {
        total = 0;
        operations = [];
        try
        {
            using var json = JsonDocument.Parse(body);
            if (!json.RootElement.TryGetProperty("total", out var t) || !t.TryGetInt64(out total) ||
                !json.RootElement.TryGetProperty("operations", out var ops) || ops.ValueKind != JsonValueKind.Array)
            {
                return false;
            }

            foreach (var op in ops.EnumerateArray())
            {
                operations.Add(op.GetString() ?? "");
            }

            return true;
        }
        catch (Exception ex) when (ex is JsonException or InvalidOperationException)
        {
            return false;
        }
    }

    private static string Shorten(string text) => text.Length <= 400 ? text : string.Concat(text.AsSpan(0, 400), "…");

    private sealed record Reply(int Status, string Body, bool Replayed, string? Sequence);
}

/// <summary>An acknowledged inventory adjustment and what its reply reported.</summary>
internal sealed record InventoryAck(string OpId, string Sku, int Delta, long Ticket, long Version, int Quantity);

/// <summary>The final check of one session.</summary>
internal sealed class Verdict
{
    /// <summary>Acknowledged operations missing from the service's state.</summary>
    public int Lost { get; set; }

    /// <summary>Operations that appear more than once in the service's state.</summary>
    public int Duplicated { get; set; }

    /// <summary>The in-flight operation, never acknowledged, appears once (allowed; reported).</summary>
    public bool UnacknowledgedApplied { get; set; }

    /// <summary>Details of lost, duplicated and unacknowledged operations.</summary>
    public List<string> Findings { get; } = [];

    /// <summary>Other contract breaks (wrong total, order, unknown operations, unreadable state).</summary>
    public List<string> Violations { get; } = [];
}
