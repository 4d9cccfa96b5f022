using System.Collections.Concurrent;
using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.AspNetCore.Tests.TestSupport;

namespace PersistentServices.AspNetCore.Tests.Calls;

/// <summary>
/// Calls between services over Kestrel, signed with the peer key (docs/calls.md, "Who may call"; issue 32, finding 3): a
/// call is signed for its callee, so a captured call sent to another service of the deployment that maps the same path
/// is refused there; a caller whose clock is ahead by more than the small future skew is refused; a key rotation and an
/// upgrade from the v1 format pass through states where two keys or two formats are accepted, without a refused call.
/// </summary>
public sealed class PeerCallTests : IDisposable
{
    private const string Key1 = "peer-call-tests-key-one-0123456789abcdef";
    private const string Key2 = "peer-call-tests-key-two-0123456789abcdef";
    private const string Key3 = "peer-call-tests-key-three-0123456789abcd";

    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();

    public void Dispose() => _dir.Dispose();

    /// <summary>
    /// Finding 3: the v1 signature covered method, path, caller, session, number, role, DV and body, not the callee. A call
    /// A made to B, captured and sent as it is to C (another service of the deployment with the same key and the same
    /// path), executed at C. Now it names B and C refuses it (401 peer-signature, logged); B still answers it as a retry.
    /// </summary>
    [Fact]
    public async Task CapturedCall_SentToAnotherServiceMappingTheSamePath_Is401AndLogged_AndNotExecuted()
    {
        var cLog = new ListLoggerProvider();
        await using var b = await StartCalleeAsync("B", o => o.Calls.PeerKey = Key1);
        await using var c = await StartCalleeAsync("C", o => o.Calls.PeerKey = Key1, cLog);
        var recorder = new Recorder();
        await using var a = await StartCallerAsync("A", "B", b, o => o.Calls.PeerKey = Key1, recorder: recorder);

        Assert.Equal(200, await PayAsync(a, "op-1"));
        Assert.Equal(1, _behavior.Count("counter:op-1"));
        var captured = Assert.Single(recorder.Requests);

        using var atC = await c.Client.SendAsync(captured.Copy(), TestContext.Current.CancellationToken);

        var text = await atC.Content.ReadAsStringAsync(TestContext.Current.CancellationToken);
        Assert.True(atC.StatusCode == HttpStatusCode.Unauthorized, $"C answered {(int)atC.StatusCode}: {text}");
        var problem = JsonDocument.Parse(text).RootElement;
        Assert.Equal("urn:persistentservices:problem:peer-signature", problem.GetProperty("type").GetString());
        Assert.Contains("signed for service 'B', not for this one", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
        Assert.Equal(1, _behavior.Count("counter:op-1"));
        Assert.Contains(cLog.Messages(1108), m => m.Contains("'A'", StringComparison.Ordinal) && m.Contains("signed for service 'B'", StringComparison.Ordinal));

        // The same bytes to B, within the window: a retry of the same call, answered with its reply, not executed again.
        using var atB = await b.Client.SendAsync(captured.Copy(), TestContext.Current.CancellationToken);
        Assert.Equal(HttpStatusCode.OK, atB.StatusCode);
        Assert.Equal("true", atB.Headers.TryGetValues("PS-Replayed", out var replayed) ? replayed.Single() : null);
        Assert.Equal(1, _behavior.Count("counter:op-1"));
    }

    /// <summary>The signature covers the body's Content-Type: the same bytes under another type are another request.</summary>
    [Fact]
    public async Task CapturedCall_WithAnotherContentType_Is401()
    {
        await using var b = await StartCalleeAsync("B", o => o.Calls.PeerKey = Key1);
        var recorder = new Recorder();
        await using var a = await StartCallerAsync("A", "B", b, o => o.Calls.PeerKey = Key1, recorder: recorder);
        Assert.Equal(200, await PayAsync(a, "op-1"));

        using var changed = Assert.Single(recorder.Requests).Copy();
        Assert.Equal("application/json; charset=utf-8", changed.Content!.Headers.ContentType?.ToString());
        changed.Content.Headers.ContentType = new System.Net.Http.Headers.MediaTypeHeaderValue("application/json"); // the endpoint accepts it too
        using var response = await b.Client.SendAsync(changed, TestContext.Current.CancellationToken);

        var text = await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken);
        Assert.True(response.StatusCode == HttpStatusCode.Unauthorized, $"B answered {(int)response.StatusCode}: {text}");
        Assert.Contains("does not match", JsonDocument.Parse(text).RootElement.GetProperty("detail").GetString(), StringComparison.Ordinal);
        Assert.Equal(1, _behavior.Count("counter:op-1"));
    }

    /// <summary>
    /// A client named otherwise than its callee's service (the bookstore's "tax" client of "taxcalculator"): with
    /// <c>AddPersistentCalls()</c> the call is signed for "tax" and refused by the callee, which names the reason; with
    /// <c>AddPersistentCalls("B")</c> it is signed for the callee and runs.
    /// </summary>
    [Fact]
    public async Task ClientNamedOtherwiseThanItsCallee_RefusedWithTheReason_UnlessAddPersistentCallsNamesTheCallee()
    {
        var bLog = new ListLoggerProvider();
        await using var b = await StartCalleeAsync("B", o => o.Calls.PeerKey = Key1, bLog);
        await using (var unnamed = await StartCallerAsync("A", "bank", b, o => o.Calls.PeerKey = Key1))
        {
            Assert.Equal(401, await PayAsync(unnamed, "op-1"));
            Assert.Contains(bLog.Messages(1108), m => m.Contains("signed for service 'bank'", StringComparison.Ordinal) &&
                                                      m.Contains("AddPersistentCalls(", StringComparison.Ordinal));
            Assert.Equal(0, _behavior.Count("counter:op-1"));
        }

        await using var named = await StartCallerAsync("A2", "bank", b, o => o.Calls.PeerKey = Key1, calleeService: "B");
        Assert.Equal(200, await PayAsync(named, "op-2"));
        Assert.Equal(1, _behavior.Count("counter:op-2"));
    }

    /// <summary>
    /// The past window stays 5 minutes (a retry is signed again); the future is bounded by SignatureFutureSkew (5 s): a caller
    /// whose clock is 30 s ahead was accepted before (anything within 5 minutes either way) and is refused now, with the
    /// reason logged; 2 s ahead is accepted.
    /// </summary>
    [Fact]
    public async Task CallerClockAhead_BeyondTheFutureSkew_Is401_WithinIt_Accepted()
    {
        var bLog = new ListLoggerProvider();
        await using var b = await StartCalleeAsync("B", o => o.Calls.PeerKey = Key1, bLog);
        var clock = new ShiftedTimeProvider(TimeSpan.FromSeconds(30));
        await using var a = await StartCallerAsync("A", "B", b, o => o.Calls.PeerKey = Key1, time: clock);

        Assert.Equal(401, await PayAsync(a, "op-ahead"));
        Assert.Equal(0, _behavior.Count("counter:op-ahead"));
        Assert.Contains(bLog.Messages(1108), m => m.Contains("ahead of this service's clock", StringComparison.Ordinal) &&
                                                  m.Contains("SignatureFutureSkew", StringComparison.Ordinal));

        clock.Offset = TimeSpan.FromSeconds(2);
        Assert.Equal(200, await PayAsync(a, "op-near"));
        Assert.Equal(1, _behavior.Count("counter:op-near"));
    }

    /// <summary>
    /// A rotation without a stop (docs/calls.md, "Rotating the peer key"): every pair of states a rolling restart passes
    /// through in each of its three steps (1: accept the new key; 2: sign with it, accept the old; 3: drop the old) calls
    /// successfully, and a callee that accepts a caller's key only as an accepted key says so (event 1379). Without the
    /// overlap, a caller and a callee with different keys refuse each other.
    /// </summary>
    [Theory]
    [InlineData("1", "1+2", 200)]     // step 1: the callee restarted first
    [InlineData("1+2", "1", 200)]     // step 1: the caller restarted first
    [InlineData("2+1", "1+2", 200)]   // step 2: the caller switched first
    [InlineData("1+2", "2+1", 200)]   // step 2: the callee switched first
    [InlineData("2", "2+1", 200)]     // step 3
    [InlineData("2+1", "2", 200)]     // step 3
    [InlineData("1", "2", 401)]       // no overlap
    [InlineData("3", "2+1", 401)]     // a key of neither
    public async Task KeyRotation_EveryPairOfStatesOfARollingRestart_Calls(string caller, string callee, int expected)
    {
        var bLog = new ListLoggerProvider();
        await using var b = await StartCalleeAsync("B", o => Keys(o, callee), bLog);
        await using var a = await StartCallerAsync("A", "B", b, o => Keys(o, caller));

        Assert.Equal(expected, await PayAsync(a, "op-1"));
        Assert.Equal(expected == 200 ? 1 : 0, _behavior.Count("counter:op-1"));
        var signsWithAccepted = expected == 200 && caller[0] != callee[0];
        Assert.Equal(signsWithAccepted ? 1 : 0, bLog.Messages(1379).Count);
        if (expected == 401)
        {
            Assert.Contains(bLog.Messages(1108), m => m.Contains(callee.Length > 1 ? "matches none of the 2 keys" : "does not match", StringComparison.Ordinal));
        }
    }

    /// <summary>
    /// A rolling upgrade from a version that signs v1 (before issue 32; <c>SignAndAccept</c> signs exactly as it did,
    /// <c>PeerSignatureTests</c> pins the bytes): every pair of states of the three steps calls successfully; a v1 call is
    /// logged once as accepted (event 1378); a v1 call to a service that refuses them (the default) is 401 with the reason.
    /// </summary>
    [Theory]
    [InlineData(LegacySignatures.SignAndAccept, LegacySignatures.SignAndAccept, 200)] // step 1 (an older caller signs the same v1)
    [InlineData(LegacySignatures.Accept, LegacySignatures.SignAndAccept, 200)]        // step 2
    [InlineData(LegacySignatures.SignAndAccept, LegacySignatures.Accept, 200)]        // step 2
    [InlineData(LegacySignatures.Refuse, LegacySignatures.Accept, 200)]               // step 3
    [InlineData(LegacySignatures.Accept, LegacySignatures.Refuse, 200)]               // step 3
    [InlineData(LegacySignatures.SignAndAccept, LegacySignatures.Refuse, 401)]        // v1 (or an older caller) to the default
    public async Task SignatureUpgrade_EveryPairOfStatesOfARollingUpgrade_Calls(LegacySignatures caller, LegacySignatures callee, int expected)
    {
        var bLog = new ListLoggerProvider();
        await using var b = await StartCalleeAsync("B", o => { o.Calls.PeerKey = Key1; o.Calls.LegacySignatures = callee; }, bLog);
        await using var a = await StartCallerAsync("A", "B", b, o => { o.Calls.PeerKey = Key1; o.Calls.LegacySignatures = caller; });

        var session = await a.StartSessionAsync();
        Assert.Equal(expected, await PayAsync(a, "op-1", session));
        Assert.Equal(expected, await PayAsync(a, "op-2", session, sequence: 2));
        Assert.Equal(expected == 200 ? 1 : 0, _behavior.Count("counter:op-1"));
        var v1 = caller == LegacySignatures.SignAndAccept;
        Assert.Equal(v1 && expected == 200 ? 1 : 0, bLog.Messages(1378).Count); // once per caller, not per call
        if (expected == 401)
        {
            Assert.Contains(bLog.Messages(1108), m => m.Contains("a v1 signature", StringComparison.Ordinal) && m.Contains("LegacySignatures", StringComparison.Ordinal));
        }
    }

    private static void Keys(PersistentServicesOptions options, string keys)
    {
        var all = keys.Split('+').Select(k => k switch { "1" => Key1, "2" => Key2, _ => Key3 }).ToList();
        options.Calls.PeerKey = all[0];
        foreach (var accepted in all.Skip(1))
        {
            options.Calls.AcceptedPeerKeys.Add(accepted);
        }
    }

    private Task<TestServer> StartCalleeAsync(string name, Action<PersistentServicesOptions> configure, ListLoggerProvider? log = null)
        => StartAsync(name, configure, log, time: null, build: null, endpoints: null);

    /// <summary>
    /// A caller: its client (named <paramref name="client"/>) calls <paramref name="callee"/>'s <c>/counter/add</c> from its
    /// persistent <c>/pay</c>, which answers with the call's status. A <paramref name="recorder"/> sees each attempt as sent.
    /// </summary>
    private Task<TestServer> StartCallerAsync(string name, string client, TestServer callee, Action<PersistentServicesOptions> configure,
        string? calleeService = null, Recorder? recorder = null, TimeProvider? time = null)
        => StartAsync(name, configure, log: null, time, build: builder =>
        {
            var http = builder.Services.AddHttpClient(client, c => c.BaseAddress = callee.Client.BaseAddress);
            http = calleeService is null ? http.AddPersistentCalls() : http.AddPersistentCalls(calleeService);
            if (recorder is not null)
            {
                http.AddHttpMessageHandler(() => recorder);
            }
        }, endpoints: app => app.MapPost("/pay", [Persistent] async (AddAmount body, IHttpClientFactory clients) =>
        {
#pragma warning disable PS0202 // the client has AddPersistentCalls() (above): its calls are logged and deduplicated
            using var reply = await clients.CreateClient(client).PostAsJsonAsync("/counter/add", body);
#pragma warning restore PS0202
            return Results.Ok(new { status = (int)reply.StatusCode });
        }));

    private async Task<TestServer> StartAsync(string name, Action<PersistentServicesOptions> configure, ListLoggerProvider? log, TimeProvider? time,
        Action<WebApplicationBuilder>? build, Action<WebApplication>? endpoints)
    {
        var server = await TestServer.StartAsync(Path.Combine(_dir.Path, name), o =>
        {
            o.ServiceName = name;
            o.Calls.RetryDelay = TimeSpan.FromMilliseconds(20);
            o.Calls.MaxRetryDelay = TimeSpan.FromMilliseconds(200);
            configure(o);
        }, time, builder =>
        {
            if (log is not null)
            {
                builder.Logging.AddProvider(log);
            }

            build?.Invoke(builder);
        }, beforePersistentServices: endpoints, behavior: _behavior);
        await server.RecoveryCompletion;
        return server;
    }

    /// <summary>Makes a payment at a caller (in a new session unless given one); the status its call to the callee got.</summary>
    private static async Task<int> PayAsync(TestServer caller, string opId, string? session = null, long sequence = 1)
    {
        session ??= await caller.StartSessionAsync();
        var (response, body) = await caller.SendAsync(HttpMethod.Post, "/pay", session, sequence, new AddAmount(opId, 1));
        Assert.True(response.StatusCode == HttpStatusCode.OK, $"the caller answered {(int)response.StatusCode}: {body}");
        return body.GetProperty("status").GetInt32();
    }

    /// <summary>The innermost handler of a caller's client: keeps each request as it goes out (signed), and sends it on.</summary>
    private sealed class Recorder : DelegatingHandler
    {
        public ConcurrentQueue<Captured> Requests { get; } = new();

        protected override async Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        {
            var body = request.Content is null ? null : await request.Content.ReadAsByteArrayAsync(cancellationToken);
            Requests.Enqueue(new Captured(request.Method, request.RequestUri!.PathAndQuery,
                [.. request.Headers.Select(h => (h.Key, h.Value.ToArray()))],
                request.Content is null ? [] : [.. request.Content.Headers.Select(h => (h.Key, h.Value.ToArray()))],
                body));
            return await base.SendAsync(request, cancellationToken);
        }
    }

    private sealed record Captured(HttpMethod Method, string PathAndQuery, (string Name, string[] Values)[] Headers, (string Name, string[] Values)[] ContentHeaders, byte[]? Body)
    {
        /// <summary>The same request, byte for byte, to send to any server.</summary>
        public HttpRequestMessage Copy()
        {
            var request = new HttpRequestMessage(Method, PathAndQuery);
            foreach (var (name, values) in Headers)
            {
                request.Headers.TryAddWithoutValidation(name, values);
            }

            if (Body is not null)
            {
                request.Content = new ByteArrayContent(Body);
                foreach (var (name, values) in ContentHeaders)
                {
                    request.Content.Headers.TryAddWithoutValidation(name, values);
                }
            }

            return request;
        }
    }
}
