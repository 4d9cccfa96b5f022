using System.Net;
using System.Text;
using System.Text.Json;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging.Abstractions;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Http.IdempotencyKeys;

namespace PersistentServices.AspNetCore.Tests.Http.IdempotencyKeys;

/// <summary>
/// Issue 50, finding 1: the keys a gateway generates for requests without identity counted against the gateway's one
/// address (MaxSessionsPerAddress) and were kept 48 hours, so a gateway stopped serving after 10,000 plain requests. A key
/// the gateway signs with the peer key (<see cref="GatewayKeySignature"/>) is now counted in the gateway keys' own share
/// and forgotten after <c>IdempotencyKeys.GatewayKeyRetention</c>; a key without a valid signature stays the client's own.
/// </summary>
public sealed class GatewayKeyTests : IAsyncLifetime
{
    private const string PeerKey = "gateway-key-tests-peer-key-0123456789";
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();
    private readonly FakeTimeProvider _time = new(new DateTimeOffset(2026, 12, 8, 12, 0, 0, TimeSpan.Zero));
    private TestServer _server = null!;

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public async ValueTask InitializeAsync() => _server = await TestServer.StartAsync(_dir.Path, options =>
    {
        options.MaxSessions = 4; // fewer than the gateway keys below: they are counted besides it
        options.MaxSessionsPerAddress = 2;
        options.IdempotencyKeys.MaxGatewayKeys = 6;
        options.Calls.PeerKey = PeerKey;
    }, _time, behavior: _behavior);

    public async ValueTask DisposeAsync()
    {
        await _server.DisposeAsync();
        _dir.Dispose();
    }

    private async Task<HttpResponseMessage> SendAsync(string key, string opId, string? signWith)
    {
        using var request = TestServer.Request(HttpMethod.Post, "/counter/add", null, null, new { opId, amount = 1 });
        request.Headers.TryAddWithoutValidation("Idempotency-Key", key);
        if (signWith is not null)
        {
            request.Headers.TryAddWithoutValidation(GatewayKeySignature.Header,
                GatewayKeySignature.Sign(Encoding.UTF8.GetBytes(signWith), _time.GetUtcNow().ToUnixTimeMilliseconds(), "POST", "/counter/add", key));
        }

        return await _server.Client.SendAsync(request, Ct);
    }

    [Fact]
    public async Task SignedGatewayKeys_AreCountedApartFromTheAddress_AndForgottenAfterTheirWindow()
    {
        // Five generated keys from one address whose own share is 2, in a table of 4: all served, each run once.
        for (var i = 0; i < 5; i++)
        {
            using var response = await SendAsync($"ps-gateway-k{i}", $"g{i}", PeerKey);
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        }

        using (var again = await SendAsync("ps-gateway-k0", "g0", PeerKey))
        {
            Assert.Equal(HttpStatusCode.OK, again.StatusCode);
            Assert.Equal("true", again.Headers.GetValues("PS-Replayed").Single());
        }

        // The address's own share and the table are untouched: two keys of its own, then 429 (its share), and a session.
        using (var own1 = await SendAsync("own-1", "o1", signWith: null))
        using (var own2 = await SendAsync("own-2", "o2", signWith: null))
        using (var own3 = await SendAsync("own-3", "o3", signWith: null))
        {
            Assert.Equal((HttpStatusCode.OK, HttpStatusCode.OK, (HttpStatusCode)429), (own1.StatusCode, own2.StatusCode, own3.StatusCode));
        }

        using (var otherAddress = new HttpClient(new SocketsHttpHandler
        {
            ConnectCallback = async (context, token) =>
            {
                var socket = new System.Net.Sockets.Socket(System.Net.Sockets.AddressFamily.InterNetwork, System.Net.Sockets.SocketType.Stream, System.Net.Sockets.ProtocolType.Tcp);
                socket.Bind(new IPEndPoint(IPAddress.Parse("127.0.0.2"), 0));
                await socket.ConnectAsync(context.DnsEndPoint, token);
                return new System.Net.Sockets.NetworkStream(socket, ownsSocket: true);
            },
        }) { BaseAddress = _server.Client.BaseAddress })
        using (var started = await otherAddress.PostAsync("/ps/sessions", null, Ct))
        {
            Assert.Equal(HttpStatusCode.Created, started.StatusCode);
        }

        // After the window the generated keys are forgotten (and their slots free); the clients' own keys are kept.
        var keySessions = _server.App.Services.GetRequiredService<IdempotencyKeySessions>();
        _time.Advance(TimeSpan.FromMinutes(1) - TimeSpan.FromSeconds(1));
        Assert.Equal(0, (await keySessions.ExpireAsync(NullLogger.Instance, Ct)).Forgotten);
        _time.Advance(TimeSpan.FromSeconds(2));
        Assert.Equal(5, (await keySessions.ExpireAsync(NullLogger.Instance, Ct)).Forgotten);
        Assert.Equal(3, _server.Runtime.Sessions.Count);
        Assert.All(Enumerable.Range(0, 5), i => Assert.Equal(1, _behavior.Count($"counter:g{i}")));
    }

    [Fact]
    public async Task GatewayKeysBeyondTheirShare_Get503Unavailable_NothingRuns()
    {
        for (var i = 0; i < 6; i++)
        {
            using var response = await SendAsync($"ps-gateway-f{i}", $"f{i}", PeerKey);
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        }

        using var refused = await SendAsync("ps-gateway-f6", "f6", PeerKey);

        Assert.Equal(HttpStatusCode.ServiceUnavailable, refused.StatusCode);
        Assert.Equal("urn:persistentservices:problem:unavailable",
            JsonDocument.Parse(await refused.Content.ReadAsStringAsync(Ct)).RootElement.GetProperty("type").GetString());
        Assert.Equal(0, _behavior.Count("counter:f6"));
    }

    [Theory]
    [InlineData("another-peer-key-that-is-long-enough-0123")]
    [InlineData(null)]
    public async Task AKeyWithoutAValidGatewaySignature_IsTheClientsOwn_CountedInItsAddressShare(string? signWith)
    {
        // An outsider cannot put a key into the gateway's scope: a forged or missing signature fails closed.
        using var first = await SendAsync("ps-gateway-x1", "x1", signWith);
        using var second = await SendAsync("ps-gateway-x2", "x2", signWith);
        using var third = await SendAsync("ps-gateway-x3", "x3", signWith);

        Assert.Equal((HttpStatusCode.OK, HttpStatusCode.OK, (HttpStatusCode)429), (first.StatusCode, second.StatusCode, third.StatusCode));
    }

    [Fact]
    public async Task OneKeyValue_SignedAndUnsigned_NamesTwoSessions()
    {
        // The gateway's scope is apart from the clients': a client's own key never finds a generated key's reply, nor the reverse.
        using var signed = await SendAsync("ps-gateway-same", "s1", PeerKey);
        using var unsigned = await SendAsync("ps-gateway-same", "s2", signWith: null);

        Assert.Equal((HttpStatusCode.OK, HttpStatusCode.OK), (signed.StatusCode, unsigned.StatusCode));
        Assert.False(unsigned.Headers.Contains("PS-Replayed"));
        Assert.Equal((1, 1), (_behavior.Count("counter:s1"), _behavior.Count("counter:s2")));
    }
}
