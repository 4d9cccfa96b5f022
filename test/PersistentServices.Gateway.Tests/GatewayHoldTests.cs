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
    public async Task RefusedConnection_HeldUntilTheHoldTime_Then503WithRetryAfter_AndTheGeneratedKey()
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

    private static async Task WaitUntilAsync(Func<bool> condition)
    {
        for (var i = 0; i < 500 && !condition(); i++)
        {
            await Task.Delay(10, Ct);
        }

        Assert.True(condition());
    }
}
