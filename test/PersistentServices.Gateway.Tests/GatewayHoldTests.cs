using System.Collections.Concurrent;
using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Text.Json;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;

namespace PersistentServices.Gateway.Tests;

/// <summary>
/// The hold-and-resend loop and the resend rule, against scripted upstreams (Kestrel on 127.0.0.1): what is resent, with
/// which identity, and what is never resent.
/// </summary>
public sealed class GatewayHoldTests : IAsyncDisposable
{
    private const string PeerKey = "gateway-hold-tests-peer-key-0123456789";
    private readonly List<WebApplication> _apps = [];

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public async ValueTask DisposeAsync()
    {
        foreach (var app in _apps)
        {
            await app.DisposeAsync();
        }
    }

    /// <summary>An upstream that answers each attempt with the script's step (the last step repeats), recording what it saw.</summary>
    private async Task<(string Address, ConcurrentQueue<(string? Key, string? Session, string Body)> Seen)> UpstreamAsync(params Func<HttpContext, Task>[] script)
    {
        var (address, seen, _) = await RecordingUpstreamAsync(script);
        return (address, seen);
    }

    /// <summary><see cref="UpstreamAsync"/>, also recording each attempt's request headers.</summary>
    private async Task<(string Address, ConcurrentQueue<(string? Key, string? Session, string Body)> Seen, ConcurrentQueue<IHeaderDictionary> Headers)> RecordingUpstreamAsync(params Func<HttpContext, Task>[] script)
    {
        var seen = new ConcurrentQueue<(string?, string?, string)>();
        var headers = new ConcurrentQueue<IHeaderDictionary>();
        var builder = WebApplication.CreateSlimBuilder();
        builder.Logging.ClearProviders();
        builder.WebHost.UseUrls("http://127.0.0.1:0");
        var app = builder.Build();
        var attempt = -1;
        app.Run(async context =>
        {
            using var reader = new StreamReader(context.Request.Body);
            var body = await reader.ReadToEndAsync();
            headers.Enqueue(new HeaderDictionary(context.Request.Headers.ToDictionary(h => h.Key, h => h.Value)));
            seen.Enqueue((context.Request.Headers["Idempotency-Key"].FirstOrDefault(), context.Request.Headers["PS-Session"].FirstOrDefault(), body));
            var step = script[Math.Min(Interlocked.Increment(ref attempt), script.Length - 1)];
            await step(context);
        });
        await app.StartAsync(Ct);
        _apps.Add(app);
        return (app.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.First(), seen, headers);
    }

    private async Task<HttpClient> GatewayAsync(string address, bool persistent, TimeSpan? holdTime = null, Action<PersistentGatewayOptions>? configure = null, string? from = null)
    {
        var builder = WebApplication.CreateSlimBuilder();
        builder.Logging.ClearProviders();
        builder.WebHost.UseUrls("http://127.0.0.1:0");
        builder.Services.AddPersistentGateway(o =>
        {
            o.Services["svc"] = new GatewayServiceOptions { Persistent = persistent };
            o.Services["svc"].PlainPaths.Add("/plain");
            o.Services["svc"].Instances["0"] = address;
            o.RetryDelay = TimeSpan.FromMilliseconds(10);
            o.MaxRetryDelay = TimeSpan.FromMilliseconds(20);
            o.HoldTime = holdTime ?? TimeSpan.FromSeconds(30);
            o.PeerKey = PeerKey;
            configure?.Invoke(o);
        });
        var app = builder.Build();
        app.MapPersistentGateway();
        await app.StartAsync(Ct);
        _apps.Add(app);
        var gateway = app.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.First();
        _gateway = gateway;
        return ClientFrom(from ?? "127.0.0.1", gateway);
    }

    private string? _gateway;

    /// <summary>A client whose connections come from <paramref name="local"/> (any 127.0.0.0/8 address is this host's).</summary>
    private static HttpClient ClientFrom(string local, string baseAddress) => new(new SocketsHttpHandler
    {
        ConnectCallback = async (context, cancellationToken) =>
        {
            var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
            try
            {
                socket.Bind(new IPEndPoint(IPAddress.Parse(local), 0));
                await socket.ConnectAsync(context.DnsEndPoint, cancellationToken);
                return new NetworkStream(socket, ownsSocket: true);
            }
            catch
            {
                socket.Dispose();
                throw;
            }
        },
    })
    { BaseAddress = new Uri(baseAddress) };

    private static Task Problem(HttpContext context, int status, string type)
    {
        context.Response.StatusCode = status;
        context.Response.Headers.RetryAfter = "1";
        context.Response.ContentType = "application/problem+json";
        return context.Response.WriteAsync($$"""{"type":"urn:persistentservices:problem:{{type}}","status":{{status}}}""");
    }

    private static Task Ok(HttpContext context) => context.Response.WriteAsync("done");

    private static Task Abort(HttpContext context)
    {
        context.Abort();
        return Task.CompletedTask;
    }

    private static HttpRequestMessage Post(string path, string body, string? session = null, long? seq = null)
    {
        var request = new HttpRequestMessage(HttpMethod.Post, path) { Content = new StringContent(body, Encoding.UTF8, "application/json") };
        if (session is not null)
        {
            request.Headers.Add("PS-Session", session);
            request.Headers.Add("PS-Seq", seq!.Value.ToString(System.Globalization.CultureInfo.InvariantCulture));
        }

        return request;
    }

    [Fact]
    public async Task AnInstanceOfReplicas_ARequestAReplicaRefuses_GoesToTheNextNode_AndTheNextRequestStraightToThePrimary()
    {
        // A replication group (docs/replication.md): a replica answers 503 replica and executes nothing; the gateway tries
        // the group's next node at once, with the same identity, and then keeps sending to the node that served.
        var (replica, replicaSeen) = await UpstreamAsync(c => Problem(c, 503, "replica"));
        var (primary, primarySeen) = await UpstreamAsync(Ok);
        using var client = await GatewayAsync($"{replica},{primary}", persistent: true);

        using (var response = await client.SendAsync(Post("/deposit", """{"amount":5}""", session: "AAAAAAAAAAAAAAAAAAAAAA", seq: 1), Ct))
        {
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
            Assert.Equal("done", await response.Content.ReadAsStringAsync(Ct));
        }

        using (var response = await client.SendAsync(Post("/deposit", """{"amount":6}""", session: "AAAAAAAAAAAAAAAAAAAAAA", seq: 2), Ct))
        {
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        }

        Assert.Single(replicaSeen);
        Assert.Equal([("""{"amount":5}"""), ("""{"amount":6}""")], primarySeen.Select(s => s.Body));
        Assert.All(primarySeen, s => Assert.Equal("AAAAAAAAAAAAAAAAAAAAAA", s.Session));
    }

    [Fact]
    public async Task AnInstanceOfReplicas_ANodeThatKeepsARequestUnanswered_IsPassedOverAfterNodeResponseTimeout_WithTheSameIdentity()
    {
        // A hung primary (paused, cut off) accepts the request and answers nothing: after NodeResponseTimeout the gateway
        // sends it, with the same identity, to the group's next node (the one the group promoted meanwhile). Before, it
        // waited for the hung node as long as the client did.
        var hung = new TaskCompletionSource();
        var (stalled, stalledSeen) = await UpstreamAsync(async c => await hung.Task.WaitAsync(c.RequestAborted));
        var (primary, primarySeen) = await UpstreamAsync(Ok);
        using var client = await GatewayAsync($"{stalled},{primary}", persistent: true, configure: o => o.NodeResponseTimeout = TimeSpan.FromMilliseconds(200));

        using var response = await client.SendAsync(Post("/deposit", """{"amount":5}""", session: "AAAAAAAAAAAAAAAAAAAAAA", seq: 1), Ct);

        hung.TrySetResult();
        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Single(stalledSeen);
        Assert.Equal(("AAAAAAAAAAAAAAAAAAAAAA", """{"amount":5}"""), (primarySeen.Single().Session, primarySeen.Single().Body));
    }

    [Fact]
    public async Task AnInstanceOfReplicas_ANodeThatRefusesTheConnection_IsPassedOver_EvenForARequestWithoutIdentity()
    {
        // A node that is down never got the request: the next node of the group takes it, whatever the request is.
        using var closed = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        closed.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        var down = $"http://127.0.0.1:{((IPEndPoint)closed.LocalEndPoint!).Port}"; // bound, never listening: refused
        var (primary, primarySeen) = await UpstreamAsync(Ok);
        using var client = await GatewayAsync($"{down},{primary}", persistent: false);

        using var response = await client.SendAsync(Post("/plain", "x", session: "AAAAAAAAAAAAAAAAAAAAAA", seq: 1), Ct);

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Single(primarySeen);
    }

    [Fact]
    public async Task UnkeyedRequest_ToAPersistentService_GetsAKey_HeldThroughUnavailable_ResentWithTheSameKeyAndBody()
    {
        var (address, seen) = await UpstreamAsync(c => Problem(c, 503, "unavailable"), c => Problem(c, 503, "reply-pending"), Ok);
        using var client = await GatewayAsync(address, persistent: true);

        using var response = await client.SendAsync(Post("/deposit", """{"amount":5}"""), Ct);

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal("done", await response.Content.ReadAsStringAsync(Ct));
        Assert.Equal("0", response.Headers.GetValues("PS-Gateway-Instance").Single());
        var attempts = seen.ToList();
        Assert.Equal(3, attempts.Count);
        Assert.StartsWith("ps-gateway-", attempts[0].Key, StringComparison.Ordinal);
        Assert.All(attempts, a => Assert.Equal((attempts[0].Key, """{"amount":5}"""), (a.Key, a.Body)));
    }

    [Fact]
    public async Task SessionRequest_LostMidRequest_IsResentWithItsNumber()
    {
        var (address, seen) = await UpstreamAsync(Abort, Ok);
        using var client = await GatewayAsync(address, persistent: true);

        using var response = await client.SendAsync(Post("/tally", "{}", "AAAAAAAAAAAAAAAAAAAAAA", 4), Ct);

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal(2, seen.Count);
        Assert.All(seen, a => Assert.Equal(("AAAAAAAAAAAAAAAAAAAAAA", (string?)null), (a.Session, a.Key)));
    }

    [Fact]
    public async Task UnkeyedRequest_ToAServiceNotDeclaredPersistent_LostMidRequest_IsNeverResent_502()
    {
        var (address, seen) = await UpstreamAsync(Abort, Ok);
        using var client = await GatewayAsync(address, persistent: false);

        using var response = await client.SendAsync(Post("/work", "{}"), Ct);

        Assert.Equal(HttpStatusCode.BadGateway, response.StatusCode);
        Assert.Equal("urn:persistentservices:problem:gateway-outcome-unknown",
            JsonDocument.Parse(await response.Content.ReadAsStringAsync(Ct)).RootElement.GetProperty("type").GetString());
        Assert.Single(seen);
        Assert.Null(seen.Single().Key); // no key was added: the service does not honour one
    }

    [Fact]
    public async Task SafeRequest_LostMidRequest_IsNeverResent_EvenToAPersistentService()
    {
        var (address, seen) = await UpstreamAsync(Abort, Ok);
        using var client = await GatewayAsync(address, persistent: true);

        using var response = await client.GetAsync("/balances", Ct);

        Assert.Equal(HttpStatusCode.BadGateway, response.StatusCode);
        Assert.Single(seen);
    }

    [Fact]
    public async Task SafeRequest_WithAKey_LostMidRequest_IsNeverResent()
    {
        var (address, seen) = await UpstreamAsync(Abort, Ok);
        using var client = await GatewayAsync(address, persistent: true);
        using var request = new HttpRequestMessage(HttpMethod.Get, "/report");
        request.Headers.Add("Idempotency-Key", "op-1");

        using var response = await client.SendAsync(request, Ct);

        Assert.Equal(HttpStatusCode.BadGateway, response.StatusCode);
        Assert.Single(seen);
    }

    [Fact]
    public async Task KeyedRequest_ToAPlainPath_LostMidRequest_IsNeverResent()
    {
        var (address, seen) = await UpstreamAsync(Abort, Ok);
        using var client = await GatewayAsync(address, persistent: true);
        using var request = Post("/plain/work", "{}");
        request.Headers.Add("Idempotency-Key", "op-2");

        using var response = await client.SendAsync(request, Ct);

        Assert.Equal(HttpStatusCode.BadGateway, response.StatusCode);
        Assert.Single(seen);
    }

    [Theory]
    [InlineData("GET", "/ps/replication/status")]
    [InlineData("POST", "/ps/replication/switchover")]
    [InlineData("POST", "/PS/Replication/Promote")]
    [InlineData("POST", "/ps/replication/append")]
    [InlineData("POST", "/ps/consensus")]
    [InlineData("POST", "/ps/domain/flush")]
    [InlineData("GET", "/ps//replication/status/")]
    [InlineData("GET", "/ps/%72eplication/status")]
    public async Task TheControlPlane_FromOutside_Is404_AndNeverSent(string method, string path)
    {
        // Issue 51: a client of the gateway (anyone who can reach it) cannot reach the services' replication, Raft and domain
        // endpoints: they are answered by the gateway, and the instance never sees the request.
        var (address, seen) = await UpstreamAsync(Ok);
        using var client = await GatewayAsync(address, persistent: true);

        using var request = new HttpRequestMessage(new HttpMethod(method), path);
        if (method == "POST")
        {
            request.Content = new ByteArrayContent([]);
        }

        using var response = await client.SendAsync(request, Ct);

        Assert.Equal(HttpStatusCode.NotFound, response.StatusCode);
        Assert.Equal("application/problem+json", response.Content.Headers.ContentType?.MediaType);
        Assert.Contains("urn:persistentservices:problem:gateway-control-plane", await response.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);
        Assert.Empty(seen);
    }

    [Fact]
    public async Task TheControlPlane_WhenForwardControlPlaneIsSet_IsForwarded_AndOtherPsPathsAlways()
    {
        var (address, seen) = await UpstreamAsync(Ok);
        using var client = await GatewayAsync(address, persistent: true, configure: o => o.ForwardControlPlane = true);

        using var status = await client.GetAsync("/ps/replication/status", Ct);
        Assert.Equal(HttpStatusCode.OK, status.StatusCode);

        using var closed = await GatewayAsync(address, persistent: true);
        using var plain = await closed.GetAsync("/ps/replicationist", Ct); // not under the control plane's paths
        Assert.Equal(HttpStatusCode.OK, plain.StatusCode);
        Assert.Equal(2, seen.Count);
    }

    [Fact]
    public async Task OtherProblems_PassThrough_AsTheyCame()
    {
        var (address, seen) = await UpstreamAsync(c => Problem(c, 409, "sequence-gap"));
        using var client = await GatewayAsync(address, persistent: true);

        using var response = await client.SendAsync(Post("/tally", "{}", "AAAAAAAAAAAAAAAAAAAAAA", 9), Ct);

        Assert.Equal(HttpStatusCode.Conflict, response.StatusCode);
        Assert.Equal("1", response.Headers.GetValues("Retry-After").Single());
        Assert.Contains("sequence-gap", await response.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);
        Assert.Single(seen);
    }

    [Fact]
    public async Task RefusedConnection_HeldUntilTheHoldTime_Then503WithRetryAfter_AndTheGeneratedKey_NothingRan()
    {
        int port;
        using (var listener = new TcpListener(IPAddress.Loopback, 0))
        {
            listener.Start();
            port = ((IPEndPoint)listener.LocalEndpoint).Port;
        }

        using var client = await GatewayAsync($"http://127.0.0.1:{port}", persistent: true, holdTime: TimeSpan.FromMilliseconds(300));

        using var response = await client.SendAsync(Post("/deposit", "{}"), Ct);

        Assert.Equal(HttpStatusCode.ServiceUnavailable, response.StatusCode);
        Assert.Equal("1", response.Headers.GetValues("Retry-After").Single());
        Assert.StartsWith("ps-gateway-", response.Headers.GetValues("Idempotency-Key").Single(), StringComparison.Ordinal);
        Assert.Equal("urn:persistentservices:problem:unavailable",
            JsonDocument.Parse(await response.Content.ReadAsStringAsync(Ct)).RootElement.GetProperty("type").GetString());
    }

    [Fact]
    public async Task TheService_SeesTheClientsAddress_InXForwardedFor_NeverWhatTheClientWrote()
    {
        var (address, _, headers) = await RecordingUpstreamAsync(Ok);
        using var client = await GatewayAsync(address, persistent: true, from: "127.0.0.3");
        using var request = Post("/deposit", "{}");
        request.Headers.Add("X-Forwarded-For", "203.0.113.9");
        request.Headers.Add("Forwarded", "for=203.0.113.9");

        using var response = await client.SendAsync(request, Ct);

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        var seen = headers.Single();
        Assert.Equal("127.0.0.3", seen["X-Forwarded-For"].ToString());
        Assert.Equal("http", seen["X-Forwarded-Proto"].ToString());
        Assert.Equal(new Uri(_gateway!).Authority, seen["X-Forwarded-Host"].ToString());
        Assert.False(seen.ContainsKey("Forwarded"));
        Assert.False(seen.ContainsKey("X-Forwarded-Prefix")); // the service has no path prefix
    }

    [Fact]
    public async Task OneClientsBodies_StopAtItsShare_AnotherClientIsStillServed()
    {
        var release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var (address, seen) = await UpstreamAsync(async c => { await release.Task; await Ok(c); });
        using var flooder = await GatewayAsync(address, persistent: true, configure: o =>
        {
            o.MaxRequestBodyBytes = 1000;
            o.MaxBufferedBytes = 10_000;
            o.MaxBufferedBytesPerClient = 2000;
        });
        using var other = ClientFrom("127.0.0.2", _gateway!);
        var body = new string('x', 1000);

        // Two bodies of the flooder are held at the (stalled) instance: its share is full.
        var held = new[] { flooder.SendAsync(Post("/deposit", body), Ct), flooder.SendAsync(Post("/deposit", body), Ct) };
        await WaitUntilAsync(() => seen.Count == 2);
        using (var refused = await flooder.SendAsync(Post("/deposit", body), Ct))
        {
            Assert.Equal(HttpStatusCode.ServiceUnavailable, refused.StatusCode);
            Assert.Equal("1", refused.Headers.GetValues("Retry-After").Single());
            Assert.Contains("MaxBufferedBytesPerClient", await refused.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);
        }

        Assert.Equal(2, seen.Count); // the refused request was never sent

        // Another address is still served while the flooder's share is full.
        var served = other.SendAsync(Post("/deposit", body), Ct);
        await WaitUntilAsync(() => seen.Count == 3);
        release.SetResult();
        using (var reply = await served)
        {
            Assert.Equal(HttpStatusCode.OK, reply.StatusCode);
        }

        foreach (var response in await Task.WhenAll(held))
        {
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
            response.Dispose();
        }
    }

    [Fact]
    public async Task OneKey_InEverySpelling_GoesToOneInstance()
    {
        // Issue 50, finding 2: the gateway hashed the raw header, so K and "K" (one key for the service) went to different
        // instances, and both ran. It now routes by the key as the service parses it.
        var (first, firstSeen) = await UpstreamAsync(Ok);
        var (second, secondSeen) = await UpstreamAsync(Ok);
        using var client = await GatewayAsync(first, persistent: true, configure: o => o.Services["svc"].Instances["1"] = second);

        for (var k = 0; k < 8; k++)
        {
            foreach (var spelling in (string[])[$"key-{k}", $"\"key-{k}\"", $"  key-{k} ", $" \"key-{k}\" "])
            {
                using var request = Post("/deposit", "{}");
                request.Headers.TryAddWithoutValidation("Idempotency-Key", spelling);
                using var response = await client.SendAsync(request, Ct);
                Assert.Equal(HttpStatusCode.OK, response.StatusCode);
            }

            // All four spellings of key-k reached the same instance.
            var at = firstSeen.Count(s => Unquoted(s.Key) == $"key-{k}") + 10 * secondSeen.Count(s => Unquoted(s.Key) == $"key-{k}");
            Assert.True(at is 4 or 40, $"key-{k}: {at % 10} at instance 0, {at / 10} at instance 1");
        }

        Assert.NotEmpty(firstSeen);
        Assert.NotEmpty(secondSeen);
    }

    private static string? Unquoted(string? raw) => raw?.Trim().Trim('"');

    [Theory]
    [InlineData("a, b")]
    [InlineData("\"unterminated")]
    [InlineData("")]
    public async Task AMalformedKey_GoesThroughUnchanged_NoKeyAdded_NeverResent(string malformed)
    {
        var (address, seen, headers) = await RecordingUpstreamAsync(Abort, Ok);
        using var client = await GatewayAsync(address, persistent: true);
        using var request = Post("/deposit", "{}");
        request.Headers.TryAddWithoutValidation("Idempotency-Key", malformed);

        using var response = await client.SendAsync(request, Ct);

        Assert.Equal(HttpStatusCode.BadGateway, response.StatusCode); // lost once; not resent: the service would refuse it anyway
        Assert.Single(seen);
        Assert.Equal(malformed, headers.Single()["Idempotency-Key"].ToString());
        Assert.False(headers.Single().ContainsKey("PS-Gateway-Signature"));
    }

    [Fact]
    public async Task ASequenceWithoutASession_GoesThroughUnchanged_NoKeyAdded()
    {
        // Issue 50, finding 3: PS-Seq without PS-Session got a fresh key per send, and two sends ran twice. The service
        // answers such a request 400 session-header; the gateway lets it.
        var (address, seen, headers) = await RecordingUpstreamAsync(c => Problem(c, 400, "session-header"));
        using var client = await GatewayAsync(address, persistent: true);
        using var request = Post("/deposit", "{}");
        request.Headers.Add("PS-Seq", "1");

        using var response = await client.SendAsync(request, Ct);

        Assert.Equal(HttpStatusCode.BadRequest, response.StatusCode);
        Assert.Single(seen);
        Assert.False(headers.Single().ContainsKey("Idempotency-Key"));
        Assert.False(response.Headers.Contains("Idempotency-Key"));
    }

    [Fact]
    public async Task AGeneratedKey_IsSignedForTheService_AndEchoedToTheClient_AClientsSignatureNeverPasses()
    {
        var (address, seen, headers) = await RecordingUpstreamAsync(Ok);
        using var client = await GatewayAsync(address, persistent: true);
        using var request = Post("/deposit?x=1", "{}");
        request.Headers.Add("PS-Gateway-Signature", "t=1,v2=00");

        using var response = await client.SendAsync(request, Ct);

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        var key = seen.Single().Key!;
        Assert.StartsWith("ps-gateway-", key, StringComparison.Ordinal);
        Assert.Equal(key, response.Headers.GetValues("Idempotency-Key").Single());
        var signature = PersistentServices.Calls.PeerSignature.Parse(headers.Single()["PS-Gateway-Signature"].ToString(), out _);
        Assert.NotNull(signature);
        var bodyHash = System.Security.Cryptography.SHA256.HashData(Array.Empty<byte>());
        var message = PersistentServices.Http.IdempotencyKeys.GatewayKeySignature.Message("POST", "/deposit?x=1", key);
        Assert.True(PersistentServices.Calls.PeerSignature.Matches(Encoding.UTF8.GetBytes(PeerKey), signature.Value.UnixMs, signature.Value.Version, message, bodyHash, signature.Value.Mac));
    }

    [Fact]
    public async Task AClientsOwnKey_IsNeverSigned_ButAGeneratedOneItResends_Is()
    {
        var (address, _, headers) = await RecordingUpstreamAsync(Ok);
        using var client = await GatewayAsync(address, persistent: true);
        foreach (var key in (string[])["order-17", "ps-gateway-AAAAAAAAAAAAAAAAAAAAAA"])
        {
            using var request = Post("/deposit", "{}");
            request.Headers.Add("Idempotency-Key", key);
            using var response = await client.SendAsync(request, Ct);
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
            Assert.False(response.Headers.Contains("Idempotency-Key")); // nothing generated, nothing echoed
        }

        var seen = headers.ToList();
        Assert.False(seen[0].ContainsKey("PS-Gateway-Signature"));
        Assert.True(seen[1].ContainsKey("PS-Gateway-Signature"));
    }

    [Fact]
    public async Task ARequestLostAfterItWasSent_HeldPastTheHoldTime_Gets504OutcomeUnknown_WithTheKeyToResendUnder()
    {
        // Issue 50, finding 5: after the hold the client got "503 ... Retry the same request" for deposits that had run.
        var (address, seen) = await UpstreamAsync(Abort);
        using var client = await GatewayAsync(address, persistent: true, holdTime: TimeSpan.FromMilliseconds(300));

        using var response = await client.SendAsync(Post("/deposit", """{"amount":5}"""), Ct);

        Assert.Equal(HttpStatusCode.GatewayTimeout, response.StatusCode);
        var key = response.Headers.GetValues("Idempotency-Key").Single();
        Assert.All(seen, s => Assert.Equal(key, s.Key));
        var problem = JsonDocument.Parse(await response.Content.ReadAsStringAsync(Ct)).RootElement;
        Assert.Equal("urn:persistentservices:problem:outcome-unknown", problem.GetProperty("type").GetString());
        Assert.Contains(key, problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
        Assert.False(response.Headers.Contains("Retry-After"));
    }

    [Fact]
    public async Task ADeclaredBodyOverTheShare_IsRefusedBeforeItsBytesArrive()
    {
        // Issue 50, finding 4: the gateway allocated Content-Length and read the whole body before it took the budget, so
        // trickling connections took memory beyond MaxBufferedBytes. Now a declared length is taken up front.
        var release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var (address, seen) = await UpstreamAsync(async c => { await release.Task; await Ok(c); });
        using var client = await GatewayAsync(address, persistent: true, configure: o =>
        {
            o.MaxRequestBodyBytes = 1000;
            o.MaxBufferedBytes = 10_000;
            o.MaxBufferedBytesPerClient = 2000;
        });
        var forwarder = _apps[^1].Services.GetRequiredService<GatewayForwarder>();
        var held = new[] { client.SendAsync(Post("/deposit", new string('x', 1000)), Ct), client.SendAsync(Post("/deposit", new string('x', 1000)), Ct) };
        await WaitUntilAsync(() => seen.Count == 2);

        // Headers announcing 1000 bytes and 10 of them: the answer comes before the rest is sent.
        var reply = await RawAsync(new Uri(_gateway!), "POST /deposit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n0123456789");
        Assert.StartsWith("HTTP/1.1 503", reply, StringComparison.Ordinal);
        Assert.Contains("Retry-After: 1", reply, StringComparison.Ordinal);
        Assert.Equal(2000, forwarder.BufferedBytes);

        // A body without a declared length is counted as it arrives: the first chunk over the share is refused.
        var chunked = await RawAsync(new Uri(_gateway!), "POST /deposit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n");
        Assert.StartsWith("HTTP/1.1 503", chunked, StringComparison.Ordinal);
        Assert.Equal(2, seen.Count);

        release.SetResult();
        foreach (var response in await Task.WhenAll(held))
        {
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
            response.Dispose();
        }

        await WaitUntilAsync(() => forwarder.BufferedBytes == 0);
    }

    /// <summary>Writes <paramref name="text"/> on a new connection and returns the response's head, without sending more.</summary>
    private static async Task<string> RawAsync(Uri address, string text)
    {
        using var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await socket.ConnectAsync(address.Host, address.Port, Ct);
        await socket.SendAsync(Encoding.ASCII.GetBytes(text), Ct);
        var buffer = new byte[4096];
        var received = new StringBuilder();
        while (!received.ToString().Contains("\r\n\r\n", StringComparison.Ordinal))
        {
            var n = await socket.ReceiveAsync(buffer, Ct);
            if (n == 0)
            {
                break;
            }

            received.Append(Encoding.ASCII.GetString(buffer, 0, n));
        }

        return received.ToString();
    }

    private static async Task WaitUntilAsync(Func<bool> condition)
    {
        for (var i = 0; i < 500 && !condition(); i++)
        {
            await Task.Delay(10, Ct);
        }

        Assert.True(condition());
    }
}
