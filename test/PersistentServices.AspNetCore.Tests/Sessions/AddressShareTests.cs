using System.Net;
using System.Net.Sockets;
using System.Text.Json;
using PersistentServices.AspNetCore.Tests.TestSupport;

namespace PersistentServices.AspNetCore.Tests.Sessions;

/// <summary>
/// Issue 32, finding 4: anonymous session starts and fresh Idempotency-Keys from one client filled MaxSessions and locked
/// every other client out for up to 48 hours (an expired key keeps its slot). Now one client address holds at most its
/// share (MaxSessionsPerAddress, by default a tenth of MaxSessions, at least 100), sessions and keys together, and another
/// client (here from 127.0.0.2) is still served; the refusal's Retry-After says when the flooder's own earliest slot frees.
/// </summary>
public sealed class AddressShareTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    /// <summary>A client whose connections come from <paramref name="address"/> (a loopback address of its own).</summary>
    private static HttpClient ClientFrom(TestServer server, string address) => new(new SocketsHttpHandler
    {
        ConnectCallback = async (context, token) =>
        {
            var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
            try
            {
                socket.Bind(new IPEndPoint(IPAddress.Parse(address), 0));
                await socket.ConnectAsync(context.DnsEndPoint, token);
                return new NetworkStream(socket, ownsSocket: true);
            }
            catch
            {
                socket.Dispose();
                throw;
            }
        },
    })
    { BaseAddress = server.Client.BaseAddress };

    [Fact]
    public async Task OneAddressFloodingSessionsAndKeys_GetsItsShare_AnotherAddressIsStillServed()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, o => o.MaxSessions = 1000); // default share: 100
        using var flooder = ClientFrom(server, "127.0.0.1");
        using var other = ClientFrom(server, "127.0.0.2");

        // The flooder's sessions and keys together stop at its share, well before the table is full.
        var granted = 0;
        HttpResponseMessage? refused = null;
        for (var i = 0; i < 150 && refused is null; i++)
        {
            HttpResponseMessage response;
            if (i % 2 == 0)
            {
                response = await flooder.PostAsync("/ps/sessions", null, Ct);
            }
            else
            {
                using var keyed = new HttpRequestMessage(HttpMethod.Post, "/counter/add") { Content = System.Net.Http.Json.JsonContent.Create(new { opId = "f" + i, amount = 1 }) };
                keyed.Headers.TryAddWithoutValidation("Idempotency-Key", $"\"flood-{i}\"");
                response = await flooder.SendAsync(keyed, Ct);
            }

            if (response.StatusCode == (HttpStatusCode)429)
            {
                refused = response;
            }
            else
            {
                Assert.True(response.IsSuccessStatusCode, $"request {i}: {(int)response.StatusCode}");
                granted++;
            }
        }

        Assert.NotNull(refused);
        Assert.Equal(100, granted);
        var problem = JsonDocument.Parse(await refused.Content.ReadAsStringAsync(Ct)).RootElement;
        Assert.Equal("urn:persistentservices:problem:too-many-owner-sessions", problem.GetProperty("type").GetString());
        Assert.Contains("MaxSessionsPerAddress", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);

        // Honest: the flooder's earliest slot frees when its never-used sessions expire (one minute), not in a second and
        // not in 48 hours.
        var retryAfter = refused.Headers.RetryAfter?.Delta;
        Assert.True(retryAfter is { } delta && delta > TimeSpan.FromSeconds(1) && delta <= TimeSpan.FromMinutes(1) + TimeSpan.FromSeconds(10), $"Retry-After {retryAfter}");

        // Another client still gets a session and a key.
        using var started = await other.PostAsync("/ps/sessions", null, Ct);
        Assert.Equal(HttpStatusCode.Created, started.StatusCode);
        using var otherKeyed = new HttpRequestMessage(HttpMethod.Post, "/counter/add") { Content = System.Net.Http.Json.JsonContent.Create(new { opId = "o1", amount = 1 }) };
        otherKeyed.Headers.TryAddWithoutValidation("Idempotency-Key", "\"other-1\"");
        using var keyedReply = await other.SendAsync(otherKeyed, Ct);
        Assert.Equal(HttpStatusCode.OK, keyedReply.StatusCode);
        Assert.Equal(102, server.Runtime.Sessions.Count);
    }

    [Fact]
    public async Task OnASmallTable_OneAnonymousAddressFlooding_LeavesRoom_AnAuthenticatedClientStillStartsASession()
    {
        // Issue 55: with MaxSessions 20 the default share was "at least 100", the whole table: one anonymous address took it
        // all and an authenticated client got 429. The default share is now at most half the table.
        await using var server = await TestServer.StartAsync(_dir.Path, o => o.MaxSessions = 20);
        Assert.Equal(10, server.Runtime.Options.EffectiveMaxSessionsPerAddress);
        using var flooder = ClientFrom(server, "127.0.0.1");

        var granted = 0;
        HttpResponseMessage? refused = null;
        for (var i = 0; i < 40 && refused is null; i++)
        {
            HttpResponseMessage response;
            if (i % 2 == 0)
            {
                response = await flooder.PostAsync("/ps/sessions", null, Ct);
            }
            else
            {
                using var keyed = new HttpRequestMessage(HttpMethod.Post, "/counter/add") { Content = System.Net.Http.Json.JsonContent.Create(new { opId = "f" + i, amount = 1 }) };
                keyed.Headers.TryAddWithoutValidation("Idempotency-Key", $"\"flood-{i}\"");
                response = await flooder.SendAsync(keyed, Ct);
            }

            if (response.StatusCode == (HttpStatusCode)429)
            {
                refused = response;
            }
            else
            {
                Assert.True(response.IsSuccessStatusCode, $"request {i}: {(int)response.StatusCode}");
                granted++;
            }
        }

        Assert.NotNull(refused);
        Assert.Equal(10, granted);
        var problem = JsonDocument.Parse(await refused.Content.ReadAsStringAsync(Ct)).RootElement;
        Assert.Equal("urn:persistentservices:problem:too-many-owner-sessions", problem.GetProperty("type").GetString());

        // An authenticated client, from the flooder's own address, still starts a session and uses a key.
        using var start = new HttpRequestMessage(HttpMethod.Post, "/ps/sessions");
        start.Headers.Add("X-Test-User", "alice");
        using var started = await flooder.SendAsync(start, Ct);
        Assert.Equal(HttpStatusCode.Created, started.StatusCode);
        using var aliceKeyed = new HttpRequestMessage(HttpMethod.Post, "/counter/add") { Content = System.Net.Http.Json.JsonContent.Create(new { opId = "a1", amount = 1 }) };
        aliceKeyed.Headers.TryAddWithoutValidation("Idempotency-Key", "\"alice-1\"");
        aliceKeyed.Headers.Add("X-Test-User", "alice");
        using var keyedReply = await flooder.SendAsync(aliceKeyed, Ct);
        Assert.Equal(HttpStatusCode.OK, keyedReply.StatusCode);
        Assert.Equal(12, server.Runtime.Sessions.Count);
    }
}
