using System.Globalization;
using System.Net;
using System.Text;
using System.Text.Json;
using Microsoft.Extensions.Logging;
using Polly;
using Polly.Retry;
using Polly.Timeout;
using PersistentServices.Calls;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Domain;

/// <summary>
/// This service's place in its service domain ([MSP §3.1, §4]; docs/domains.md): who the members are, the recovered
/// state numbers it knows, the distributed log flush, and the signed messages it sends members (flush, recovered state
/// numbers). One per service; inactive when <see cref="DomainOptions.Members"/> is empty.
/// </summary>
internal sealed partial class ServiceDomain : IDisposable
{
    public const string FlushPath = "/ps/domain/flush";
    public const string RecoveredPath = "/ps/domain/recovered";

    private readonly PersistentRuntime _runtime;
    private readonly ILogger _logger;
    private readonly HttpClient _http;
    private readonly ResiliencePipeline<HttpResponseMessage> _flushPipeline;

    /// <summary>The named client (<see cref="IHttpClientFactory"/>) the domain's messages go out on, registered by <c>AddPersistentServices</c>.</summary>
    public const string HttpClientName = "PersistentServices.Domain";

    public ServiceDomain(PersistentRuntime runtime, IHttpClientFactory httpClients, ILogger logger)
    {
        _runtime = runtime;
        _logger = logger;
        var options = runtime.Options;

        // One handler for the service's life (PooledConnectionIdleTimeout 1 min) and the flush timeout: HttpClientName's
        // registration (PersistentServicesServiceCollectionExtensions).
        _http = httpClients.CreateClient(HttpClientName);

        // A member that restarts is out of reach (connection refused) and then recovering (503) for a moment: the flush asks
        // again until FlushTimeout has passed in all, so the reply that needs it waits instead of failing at once.
        _flushPipeline = new ResiliencePipelineBuilder<HttpResponseMessage> { TimeProvider = runtime.Time }
            .AddTimeout(options.Domain.FlushTimeout)
            .AddRetry(new RetryStrategyOptions<HttpResponseMessage>
            {
                MaxRetryAttempts = int.MaxValue,
                BackoffType = DelayBackoffType.Exponential,
                UseJitter = true,
                Delay = TimeSpan.FromMilliseconds(25),
                MaxDelay = TimeSpan.FromMilliseconds(500),
                ShouldHandle = static args => ValueTask.FromResult(args.Outcome switch
                {
                    { Exception: DomainUnavailableException } => true,
                    { Result.StatusCode: HttpStatusCode.ServiceUnavailable } => true,
                    _ => false,
                }),
            })
            .Build();
    }

    /// <summary>Whether this service belongs to a domain.</summary>
    public bool Enabled => _runtime.Options.Domain.Members.Count > 0;

    public string Self => _runtime.Options.ServiceName;

    public IDictionary<string, Uri> Members => _runtime.Options.Domain.Members;

    /// <summary>The recovered state numbers this service knows, its own among them.</summary>
    public RecoveredStates Recovered { get; } = new();

    /// <summary>Called with each recovered state number learned while running (orphan checks of sessions and shared variables).</summary>
    public Func<RecoveredStateNumber, Task>? OnLearned { get; set; }

    public bool IsMember(string service) => Enabled && Members.ContainsKey(service);

    public void Dispose() => _http.Dispose();

    /// <summary>
    /// The distributed log flush ([MSP §3.1]): before a message leaves the domain (a reply to an end client, a call out of
    /// the domain, a checkpoint), every service in <paramref name="dv"/> makes its log durable up to its entry, in parallel;
    /// this service locally. Throws <see cref="OrphanException"/> when a dependency was lost, <see cref="DomainUnavailableException"/>
    /// when a member cannot be reached in time: the message is then not sent.
    /// </summary>
    public async Task FlushAsync(DependencyVector dv, CancellationToken cancellationToken)
    {
        if (Recovered.FindOrphan(dv) is { } known)
        {
            throw new OrphanException(known);
        }

        // This service's own force and every member's flush run at once: the flush costs the slowest of them, not their sum.
        // The members' requests go out first: a local force may write on this thread before it returns (the group commit's
        // leader does), and the members' forces should not wait for that write.
        List<Task>? flushes = null;
        StateId? own = null;
        foreach (var (service, state) in dv.Entries)
        {
            if (service == Self)
            {
                if (state.Epoch == _runtime.Epoch && state.Lsn >= _runtime.Log.DurableUntil)
                {
                    own = state;
                }
            }
            else if (IsMember(service))
            {
                (flushes ??= []).Add(FlushRemoteAsync(service, state, cancellationToken));
            }
        }

        if (own is { } local)
        {
            _runtime.Metrics.Forces.Add(1, new KeyValuePair<string, object?>("reason", "flush"));
            var force = _runtime.Log.WaitUntilDurableAsync(local.Lsn, cancellationToken);
            if (flushes is null)
            {
                await force.ConfigureAwait(false);
                return;
            }

            flushes.Add(force.AsTask());
        }

        if (flushes is not null)
        {
            await Task.WhenAll(flushes).ConfigureAwait(false);
        }
    }

    private async Task FlushRemoteAsync(string service, StateId state, CancellationToken cancellationToken)
    {
        _runtime.Metrics.DomainMessages.Add(1, new KeyValuePair<string, object?>("kind", "flush"));
        var body = Encoding.UTF8.GetBytes($"{state.Epoch.ToString(CultureInfo.InvariantCulture)}.{state.Lsn.ToString(CultureInfo.InvariantCulture)}");
        HttpResponseMessage answer;
        try
        {
            answer = await _flushPipeline.ExecuteAsync(
                static (state, token) => new ValueTask<HttpResponseMessage>(state.Domain.SendAsync(state.Service, HttpMethod.Post, FlushPath, state.Body, token)),
                (Domain: this, Service: service, Body: body), cancellationToken).ConfigureAwait(false);
        }
        catch (TimeoutRejectedException ex)
        {
            throw new DomainUnavailableException(
                $"Member '{service}' did not confirm the distributed flush within {_runtime.Options.Domain.FlushTimeout.TotalMilliseconds:0} ms (out of reach or recovering).", ex);
        }

        using var response = answer;
        if (response.StatusCode == HttpStatusCode.OK)
        {
            return;
        }

        if (response.StatusCode == HttpStatusCode.Conflict &&
            long.TryParse(await response.Content.ReadAsStringAsync(cancellationToken).ConfigureAwait(false), NumberStyles.None, CultureInfo.InvariantCulture, out var recovered))
        {
            var lost = new RecoveredStateNumber(service, new StateId(state.Epoch, recovered));
            await LearnAsync([lost], cancellationToken).ConfigureAwait(false);
            throw new OrphanException(lost);
        }

        throw new DomainUnavailableException($"Member '{service}' answered the distributed flush with {(int)response.StatusCode}.");
    }

    /// <summary>
    /// Answers a member's flush request for this service's state <paramref name="epoch"/>.<paramref name="lsn"/>: null
    /// when it is durable (after waiting), the recovered LSN when that state was lost in a crash.
    /// </summary>
    public async Task<long?> FlushLocalAsync(long epoch, long lsn, CancellationToken cancellationToken)
    {
        if (epoch == _runtime.Epoch)
        {
            if (lsn >= _runtime.Log.DurableUntil && lsn < _runtime.Log.TailAddress)
            {
                _runtime.Metrics.Forces.Add(1, new KeyValuePair<string, object?>("reason", "flush"));
                await _runtime.Log.WaitUntilDurableAsync(lsn, cancellationToken).ConfigureAwait(false);
            }

            return null;
        }

        // A past epoch: lost past where it recovered. Its number is always known (logged at the recovery that ended it, and
        // listed in every service checkpoint since); should it not be (a log written before checkpoints listed them, then
        // truncated), the state is not called durable: the flush is refused, and what depends on it stays unsent.
        if (Recovered.RecoveredLsn(Self, epoch) is not { } r)
        {
            UnknownOwnEpoch(_logger, epoch, lsn);
            throw new DomainUnavailableException(
                $"This service does not know where its epoch {epoch} ended (its recovered state number is not in its log any more), so it cannot confirm {epoch}.{lsn} durable.");
        }

        return lsn > r ? r : null;
    }

    /// <summary>
    /// Learns recovered state numbers: each new one is logged and forced (a member must not forget it in a crash), then
    /// <see cref="OnLearned"/> checks sessions and shared variables. Returns how many were new.
    /// </summary>
    public async Task<int> LearnAsync(IEnumerable<RecoveredStateNumber> numbers, CancellationToken cancellationToken)
    {
        var learned = new List<RecoveredStateNumber>();
        long last = 0;
        foreach (var number in numbers)
        {
            if (Recovered.LearnAndLog(number, LogRecovered) is var lsn && lsn > 0)
            {
                last = lsn;
                learned.Add(number);
                LearnedRecovered(_logger, number.Service, number.State.Epoch, number.State.Lsn);
            }
        }

        if (learned.Count == 0)
        {
            return 0;
        }

        await _runtime.Log.WaitUntilDurableAsync(last, cancellationToken).ConfigureAwait(false);
        if (OnLearned is { } onLearned)
        {
            foreach (var number in learned)
            {
                await onLearned(number).ConfigureAwait(false);
            }
        }

        return learned.Count;
    }

    /// <summary>
    /// The hold before a message from a member's later epoch is taken in ([MSP §3.1, §4]): when <paramref name="dv"/> (the
    /// message's DV merged with the receiving session's) names a member at an epoch and also depends on an earlier epoch of
    /// it whose recovered state number this service does not know, that member has restarted since, and the earlier
    /// dependency may be on state its crash took back: the numbers are asked from the member (which logged them before its
    /// later epoch began) and learned (logged, forced, orphans rolled back) before the message is used. Without it, a
    /// callee answered a caller's new incarnation with the reply buffered from the caller's lost epoch whenever the caller's
    /// recovery broadcast had not arrived yet. False when a member could not be asked (out of reach within
    /// <see cref="DomainOptions.FlushTimeout"/>): the message is refused as unavailable, and sent again.
    /// </summary>
    public async Task<bool> LearnEarlierEpochsAsync(DependencyVector dv, CancellationToken cancellationToken)
    {
        List<string>? ask = null;
        foreach (var (service, state) in dv.Entries)
        {
            if (service != Self && IsMember(service) && Recovered.RecoveredLsn(service, state.Epoch) is null &&
                dv[service] is { } latest && latest.Epoch > state.Epoch && ask?.Contains(service) != true)
            {
                (ask ??= []).Add(service);
            }
        }

        if (ask is null)
        {
            return true;
        }

        foreach (var member in ask)
        {
            EarlierEpochsAsked(_logger, member);
            if (await PullRecoveredAsync(member, cancellationToken).ConfigureAwait(false) is not { } theirs)
            {
                return false;
            }

            // Not cancelled with the message: a number logged must also be checked against every session and variable.
            await LearnAsync(theirs.Where(n => n.Service == member), CancellationToken.None).ConfigureAwait(false);
        }

        // A member that answered without the number of an epoch it has left (it cannot: it logs it before the next begins)
        // is not trusted for it: refuse, and ask again with the message's next attempt.
        foreach (var (service, state) in dv.Entries)
        {
            if (ask.Contains(service) && state.Epoch < dv[service]!.Value.Epoch && Recovered.RecoveredLsn(service, state.Epoch) is null)
            {
                return false;
            }
        }

        return true;
    }

    /// <summary>Appends a <see cref="RecoveredState"/> record (not forced); its LSN.</summary>
    public long LogRecovered(RecoveredStateNumber number)
        => _runtime.Log.Append(RecordKind.RecoveredState, new RecoveredState { Service = number.Service, Epoch = number.State.Epoch, Lsn = number.State.Lsn });

    /// <summary>Sends <paramref name="numbers"/> to a member; true once it acknowledged them.</summary>
    public async Task<bool> SendRecoveredAsync(string member, IReadOnlyList<RecoveredStateNumber> numbers, CancellationToken cancellationToken)
    {
        _runtime.Metrics.DomainMessages.Add(1, new KeyValuePair<string, object?>("kind", "recovered"));
        var body = RecoveredWire.Serialize(numbers);
        try
        {
            using var response = await SendAsync(member, HttpMethod.Post, RecoveredPath, body, cancellationToken).ConfigureAwait(false);
            return response.IsSuccessStatusCode;
        }
        catch (DomainUnavailableException)
        {
            return false;
        }
    }

    /// <summary>The recovered state numbers a member knows (asked at start: the broadcasts sent while this service was down).</summary>
    public async Task<IReadOnlyList<RecoveredStateNumber>?> PullRecoveredAsync(string member, CancellationToken cancellationToken)
    {
        try
        {
            using var response = await SendAsync(member, HttpMethod.Get, RecoveredPath, [], cancellationToken).ConfigureAwait(false);
            if (!response.IsSuccessStatusCode)
            {
                return null;
            }

            // A member's answer is read as strictly as its messages are (DomainEndpoints): an answer this version cannot read
            // is asked again later, never taken half (a missing field read as 0) or thrown out of the domain's hosted service.
            var body = await response.Content.ReadAsByteArrayAsync(cancellationToken).ConfigureAwait(false);
            return RecoveredWire.Parse(body, IsMember, out _);
        }
        catch (Exception ex) when (ex is DomainUnavailableException or HttpRequestException or IOException ||
                                   ex is OperationCanceledException && !cancellationToken.IsCancellationRequested)
        {
            return null;
        }
    }

    /// <summary>
    /// Verifies a domain message from a member, signed with the peer key for this service (<c>PS-Callee</c>; a message to
    /// another member is refused here); the member's name, or null with <paramref name="error"/>.
    /// </summary>
    public string? VerifyMember(Microsoft.AspNetCore.Http.HttpContext context, ReadOnlySpan<byte> body, out string? error)
    {
        var request = context.Request;
        var caller = request.Headers[Http.ProtocolHeaders.Caller].ToString();
        if (!IsMember(caller))
        {
            error = $"a caller '{(caller.Length > DvHeader.MaxServiceNameLength ? caller[..DvHeader.MaxServiceNameLength] : caller)}' that is not a member of this domain";
            return null;
        }

        error = _runtime.Peers.Verify(request.Headers[Http.ProtocolHeaders.Signature].ToString() is { Length: > 0 } s ? s : null,
            Message(request.Method, request.Path.Value + request.QueryString.Value, caller, request.Headers[Http.ProtocolHeaders.Callee].ToString(),
                request.Headers.ContentType.ToString()),
            body);
        return error is null ? caller : null;
    }

    private async Task<HttpResponseMessage> SendAsync(string member, HttpMethod method, string path, byte[] body, CancellationToken cancellationToken)
    {
        if (!Members.TryGetValue(member, out var address))
        {
            throw new DomainUnavailableException($"'{member}' is not a member of this domain.");
        }

        using var request = new HttpRequestMessage(method, new Uri(address, path));
        if (body.Length > 0 || method == HttpMethod.Post)
        {
            request.Content = new ByteArrayContent(body);
        }

        request.Headers.TryAddWithoutValidation(Http.ProtocolHeaders.Caller, Self);
        request.Headers.TryAddWithoutValidation(Http.ProtocolHeaders.Callee, member);
        request.Headers.TryAddWithoutValidation(Http.ProtocolHeaders.Signature, _runtime.Peers.Sign(Message(method.Method, path, Self, member, ""), body));
        try
        {
            return await _http.SendAsync(request, cancellationToken).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException && !cancellationToken.IsCancellationRequested)
        {
            throw new DomainUnavailableException($"Member '{member}' at {address} could not be reached: {ex.Message}", ex);
        }
    }

    /// <summary>What a domain message's signature covers: no session, number or DV; the role <c>domain</c>.</summary>
    private static PeerMessage Message(string method, string pathAndQuery, string caller, string callee, string contentType)
        => new(method, pathAndQuery, caller, callee, Session: "", Sequence: "", Role: "domain", Dv: "", contentType);

    /// <summary>
    /// Recovered state numbers on the wire (<c>POST</c> and <c>GET /ps/domain/recovered</c>): a JSON array of
    /// <c>{"Service": name, "Epoch": e, "Lsn": n}</c>, the names as written (the format every version has sent). Read
    /// strictly: a null entry, a field missing, null, unknown or spelled otherwise, an epoch below 1 or a negative LSN
    /// make the whole message malformed, and nothing of it is learned.
    /// </summary>
    internal sealed record RecoveredWire(string Service, long Epoch, long Lsn)
    {
        private static readonly JsonSerializerOptions Strict = new()
        {
            RespectNullableAnnotations = true,
            RespectRequiredConstructorParameters = true,
            UnmappedMemberHandling = System.Text.Json.Serialization.JsonUnmappedMemberHandling.Disallow,
            AllowDuplicateProperties = false,
        };

        public static byte[] Serialize(IEnumerable<RecoveredStateNumber> numbers)
            => JsonSerializer.SerializeToUtf8Bytes(numbers.Select(n => new RecoveredWire(n.Service, n.State.Epoch, n.State.Lsn)).ToArray(), Strict);

        /// <summary>The numbers of members (others are left out); null with <paramref name="error"/> for a malformed message.</summary>
        public static List<RecoveredStateNumber>? Parse(ReadOnlySpan<byte> json, Func<string, bool> isMember, out string? error)
        {
            RecoveredWire?[]? wire;
            try
            {
                wire = JsonSerializer.Deserialize<RecoveredWire?[]>(json, Strict);
            }
            catch (JsonException ex)
            {
                error = $"a body that is not a JSON array of {{Service, Epoch, Lsn}} ({ex.Message})";
                return null;
            }

            if (wire is null)
            {
                error = "a null body (a JSON array of {Service, Epoch, Lsn} is expected)";
                return null;
            }

            var numbers = new List<RecoveredStateNumber>(wire.Length);
            for (var i = 0; i < wire.Length; i++)
            {
                switch (wire[i])
                {
                    case null:
                        error = $"a null entry at index {i}";
                        return null;
                    case { Epoch: < 1 } w:
                        error = $"epoch {w.Epoch} at index {i} (epochs start at 1)";
                        return null;
                    case { Lsn: < 0 } w:
                        error = $"a negative LSN ({w.Lsn}) at index {i}";
                        return null;
                    case var w when isMember(w.Service):
                        numbers.Add(new RecoveredStateNumber(w.Service, new StateId(w.Epoch, w.Lsn)));
                        break;
                }
            }

            error = null;
            return numbers;
        }
    }

    [LoggerMessage(1385, LogLevel.Information,
        "A message depends on an earlier epoch of member '{Member}' whose end this service does not know: asking the member for its recovered state numbers before using it")]
    private static partial void EarlierEpochsAsked(ILogger logger, string member);

    [LoggerMessage(1384, LogLevel.Error,
        "A member asked for a flush of this service's epoch {Epoch} (LSN {Lsn}), whose recovered state number this service no longer knows (a log written before service checkpoints listed them): refused as not durable")]
    private static partial void UnknownOwnEpoch(ILogger logger, long epoch, long lsn);

    [LoggerMessage(1370, LogLevel.Warning, "Learned that service '{Service}' recovered epoch {Epoch} only up to LSN {Lsn}: whatever depended on later state of it is an orphan")]
    private static partial void LearnedRecovered(ILogger logger, string service, long epoch, long lsn);
}

/// <summary>A message, session or value depends on state a crash of a member took back (<see cref="Lost"/>).</summary>
internal sealed class OrphanException(RecoveredStateNumber lost)
    : Http.RequestAbandonedException($"It depends on state of '{lost.Service}' that its crash took back (epoch {lost.State.Epoch}, recovered to LSN {lost.State.Lsn}).")
{
    public RecoveredStateNumber Lost { get; } = lost;
}

/// <summary>A member needed for a distributed flush or a domain message could not be reached in time.</summary>
internal sealed class DomainUnavailableException(string message, Exception? inner = null) : Http.RequestAbandonedException(message, inner);
