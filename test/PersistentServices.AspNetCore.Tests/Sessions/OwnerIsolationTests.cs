using System.Net;
using System.Text.Json;
using PersistentServices.AspNetCore.Tests.TestSupport;

namespace PersistentServices.AspNetCore.Tests.Sessions;

/// <summary>
/// Issue 32, finding 1: an authenticated principal without a name identifier, <c>sub</c> or name claim (the usual API-key
/// handler: only <c>client_id</c>) was treated as anonymous, so tenant B sending tenant A's Idempotency-Key got A's reply,
/// B could use A's session, and an anonymous <c>DELETE</c> ended it. Owners fail closed now.
/// </summary>
public sealed class OwnerIsolationTests : IAsyncLifetime
{
    private const string Problem = "urn:persistentservices:problem:";
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();
    private TestServer _server = null!;

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public ValueTask InitializeAsync() => ValueTask.CompletedTask;

    public async ValueTask DisposeAsync()
    {
        if (_server is not null)
        {
            await _server.DisposeAsync();
        }

        _dir.Dispose();
    }

    private static async Task<(HttpStatusCode Status, string Text)> SendAsync(TestServer server, HttpMethod method, string path, string? client = null,
        string? key = null, string? session = null, long? sequence = null, object? json = null)
    {
        using var request = TestServer.Request(method, path, session, sequence, json);
        if (client is not null)
        {
            request.Headers.TryAddWithoutValidation("X-Test-Client", client);
        }

        if (key is not null)
        {
            request.Headers.TryAddWithoutValidation("Idempotency-Key", key);
        }

        using var response = await server.Client.SendAsync(request, Ct);
        return (response.StatusCode, await response.Content.ReadAsStringAsync(Ct));
    }

    private static string Type(string text) => JsonDocument.Parse(text).RootElement.GetProperty("type").GetString()!;

    [Fact]
    public async Task UnidentifiedPrincipal_GetsNoSessionAndNoKey_403NamingTheOption()
    {
        _server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);

        var (start, startText) = await SendAsync(_server, HttpMethod.Post, "/ps/sessions", client: "tenant-a");
        Assert.Equal(HttpStatusCode.Forbidden, start);
        Assert.Equal(Problem + "owner-unidentified", Type(startText));
        Assert.Contains("OwnerClaimType", startText, StringComparison.Ordinal);

        var (keyed, keyedText) = await SendAsync(_server, HttpMethod.Post, "/counter/add", client: "tenant-a", key: "\"k-1\"", json: new { opId = "a1", amount = 5 });
        Assert.Equal(HttpStatusCode.Forbidden, keyed);
        Assert.Equal(Problem + "owner-unidentified", Type(keyedText));
        Assert.Equal(0, _behavior.Count("counter:a1"));
    }

    [Fact]
    public async Task TenantsIdentifiedByAConfiguredClaim_NeverShareKeysOrSessions_NorDoAnonymousCallers()
    {
        _server = await TestServer.StartAsync(_dir.Path, o => o.OwnerClaimType = "client_id", behavior: _behavior);

        // Tenant A's keyed request runs; B and an anonymous caller sending A's key each run their own (never A's reply).
        var (a, _) = await SendAsync(_server, HttpMethod.Post, "/counter/add", client: "tenant-a", key: "\"shared-key\"", json: new { opId = "op", amount = 5 });
        Assert.Equal(HttpStatusCode.OK, a);
        var (b, _) = await SendAsync(_server, HttpMethod.Post, "/counter/add", client: "tenant-b", key: "\"shared-key\"", json: new { opId = "op", amount = 5 });
        Assert.Equal(HttpStatusCode.OK, b);
        var (anon, _) = await SendAsync(_server, HttpMethod.Post, "/counter/add", key: "\"shared-key\"", json: new { opId = "op", amount = 5 });
        Assert.Equal(HttpStatusCode.OK, anon);
        Assert.Equal(3, _behavior.Count("counter:op")); // three executions: nobody got another's stored reply
        var (againA, _) = await SendAsync(_server, HttpMethod.Post, "/counter/add", client: "tenant-a", key: "\"shared-key\"", json: new { opId = "op", amount = 5 });
        Assert.Equal(HttpStatusCode.OK, againA);
        Assert.Equal(3, _behavior.Count("counter:op")); // A's own repeat: its stored reply

        // A's session: B cannot use it, an anonymous caller cannot end it; A can.
        var (started, startedText) = await SendAsync(_server, HttpMethod.Post, "/ps/sessions", client: "tenant-a");
        Assert.Equal(HttpStatusCode.Created, started);
        var session = JsonDocument.Parse(startedText).RootElement.GetProperty("sessionId").GetString()!;
        var (byB, byBText) = await SendAsync(_server, HttpMethod.Post, "/counter/add", client: "tenant-b", session: session, sequence: 1, json: new { opId = "s1", amount = 1 });
        Assert.Equal(HttpStatusCode.NotFound, byB);
        Assert.Equal(Problem + "session-not-found", Type(byBText));
        var (endAnon, _) = await SendAsync(_server, HttpMethod.Delete, $"/ps/sessions/{session}");
        Assert.Equal(HttpStatusCode.NotFound, endAnon);
        var (useA, _) = await SendAsync(_server, HttpMethod.Post, "/counter/add", client: "tenant-a", session: session, sequence: 1, json: new { opId = "s1", amount = 1 });
        Assert.Equal(HttpStatusCode.OK, useA);
        var (endA, _) = await SendAsync(_server, HttpMethod.Delete, $"/ps/sessions/{session}", client: "tenant-a");
        Assert.Equal(HttpStatusCode.NoContent, endA);
    }

    [Fact]
    public async Task RequireAuthenticatedOwner_RefusesAnonymousKeys()
    {
        _server = await TestServer.StartAsync(_dir.Path, o => o.IdempotencyKeys.RequireAuthenticatedOwner = true, behavior: _behavior);

        var (anon, anonText) = await SendAsync(_server, HttpMethod.Post, "/counter/add", key: "\"k\"", json: new { opId = "x", amount = 1 });
        Assert.Equal(HttpStatusCode.Unauthorized, anon);
        Assert.Equal(Problem + "idempotency-key-anonymous", Type(anonText));
        Assert.Equal(0, _behavior.Count("counter:x"));
    }

    [Theory]
    [InlineData("a, b")]
    [InlineData("a,b")]
    public async Task KeyWithACommaOutsideQuotes_Is400_AsTwoHeaderLinesAre(string value)
    {
        _server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        var (status, text) = await SendAsync(_server, HttpMethod.Post, "/counter/add", key: value, json: new { opId = "c", amount = 1 });
        Assert.Equal(HttpStatusCode.BadRequest, status);
        Assert.Equal(Problem + "idempotency-key-malformed", Type(text));
    }
}
