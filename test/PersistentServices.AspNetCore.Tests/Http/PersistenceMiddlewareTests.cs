using System.Net;
using System.Text.Json;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.Http;

/// <summary>The wire protocol (docs/protocol.md) against a real Kestrel server.</summary>
public sealed class PersistenceMiddlewareTests : IAsyncLifetime
{
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();
    private TestServer _server = null!;

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public async ValueTask InitializeAsync()
    {
        _server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
    }

    public async ValueTask DisposeAsync()
    {
        _behavior.Gate.TrySetResult();
        await _server.DisposeAsync();
        _dir.Dispose();
    }

    private static string[] Items(JsonElement body) => [.. body.GetProperty("items").EnumerateArray().Select(e => e.GetString()!)];

    /// <summary>
    /// A request counted as executing when the host begins to stop (SIGTERM) runs and is answered: the drain waits for it.
    /// Found under rolling restarts of a fresh app: one admitted the moment the drain began, still waiting for its
    /// session's lock, got 503 with an <see cref="ObjectDisposedException"/> logged as an error.
    /// </summary>
    [Fact]
    public async Task RequestAdmittedBeforeTheDrainBegan_RunsAndIsAnswered()
    {
        var session = await _server.StartSessionAsync();
        Assert.True(SessionId.TryParse(session, out var id));
        Assert.True(_server.Runtime.Sessions.TryGet(id, out var state));

        // Hold the session's execution lock, so the request is counted but has not started when the drain begins.
        await state.ExecutionLock.WaitAsync(Ct);
        var sending = _server.SendAsync(HttpMethod.Post, "/counter/add", session, 1, new { opId = "drain-1", amount = 5 });
        while (_server.Availability.Executing == 0)
        {
            await Task.Delay(5, Ct);
        }

        _server.Availability.BeginDrain();
        state.ExecutionLock.Release();
        var (response, _) = await sending;

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal(1, _behavior.Count("counter:drain-1"));

        // A request that arrives after the drain began is refused, as before.
        var (late, _) = await _server.SendAsync(HttpMethod.Post, "/counter/add", session, 2, new { opId = "drain-2", amount = 5 });
        Assert.Equal(HttpStatusCode.ServiceUnavailable, late.StatusCode);
    }

    [Fact]
    public async Task PersistentRequest_NextSequence_ExecutesOnceAndEchoesTheProtocolHeaders()
    {
        var session = await _server.StartSessionAsync();

        var (response, body) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "apple" });

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal(["apple"], Items(body));
        Assert.Equal(session, response.Headers.GetValues("PS-Session").Single());
        Assert.Equal("1", response.Headers.GetValues("PS-Seq").Single());
        Assert.False(response.Headers.Contains("PS-Replayed"));
        Assert.Equal(1, _behavior.Count("cart/add:apple"));
    }

    [Fact]
    public async Task Duplicate_OfTheLastRequest_GetsTheBufferedReplyAndExecutesNothing()
    {
        var session = await _server.StartSessionAsync();
        var (first, firstBody) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "pear" });
        var tail = _server.Runtime.Log.TailAddress;

        var (again, againBody) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "pear" });

        Assert.Equal(first.StatusCode, again.StatusCode);
        Assert.Equal(firstBody.GetRawText(), againBody.GetRawText());
        Assert.Equal("true", again.Headers.GetValues("PS-Replayed").Single());
        Assert.Equal(1, _behavior.Count("cart/add:pear"));
        Assert.Equal(tail, _server.Runtime.Log.TailAddress);
    }

    [Fact]
    public async Task Duplicate_WhileTheOriginalStillExecutes_WaitsAndGetsTheSameReply()
    {
        var session = await _server.StartSessionAsync();
        var original = _server.SendAsync(HttpMethod.Post, "/cart/slow", session, 1);
        while (_behavior.Count("cart/slow") == 0)
        {
            await Task.Delay(10, Ct);
        }

        var duplicate = _server.SendAsync(HttpMethod.Post, "/cart/slow", session, 1);
        await Task.Delay(100, Ct);
        Assert.False(duplicate.IsCompleted, "the duplicate waits for the original");
        _behavior.Gate.SetResult();

        var (a, aBody) = await original;
        var (b, bBody) = await duplicate;
        Assert.Equal(HttpStatusCode.OK, a.StatusCode);
        Assert.Equal(aBody.GetRawText(), bBody.GetRawText());
        Assert.Equal(1, _behavior.Count("cart/slow"));
    }

    [Fact]
    public async Task NextRequest_WhileThePreviousExecutes_IsRefusedAsBusy()
    {
        var session = await _server.StartSessionAsync();
        var original = _server.SendAsync(HttpMethod.Post, "/cart/slow", session, 1);
        while (_behavior.Count("cart/slow") == 0)
        {
            await Task.Delay(10, Ct);
        }

        var (busy, body) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "x" });
        _behavior.Gate.SetResult();
        await original;

        Assert.Equal(HttpStatusCode.Conflict, busy.StatusCode);
        Assert.Equal("urn:persistentservices:problem:session-busy", body.GetProperty("type").GetString());
        Assert.Equal(0, _behavior.Count("cart/add:x"));
    }

    [Fact]
    public async Task OlderSequence_GetsGoneAndNeverReExecutes()
    {
        var session = await _server.StartSessionAsync();
        await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });
        await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" });

        var (response, body) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });

        Assert.Equal(HttpStatusCode.Gone, response.StatusCode);
        Assert.Equal("urn:persistentservices:problem:stale-sequence", body.GetProperty("type").GetString());
        Assert.Equal("3", response.Headers.GetValues("PS-Expected-Seq").Single());
        Assert.Equal(1, _behavior.Count("cart/add:a"));
    }

    [Fact]
    public async Task SequenceGap_IsRefusedWithTheExpectedNumber()
    {
        var session = await _server.StartSessionAsync();

        var (response, body) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 3, new { item = "a" });

        Assert.Equal(HttpStatusCode.Conflict, response.StatusCode);
        Assert.Equal("urn:persistentservices:problem:sequence-gap", body.GetProperty("type").GetString());
        Assert.Equal(1, body.GetProperty("expectedSequence").GetInt64());
        Assert.Equal(0, _behavior.Count("cart/add:a"));
    }

    [Fact]
    public async Task SameSequence_DifferentRequest_IsRefused()
    {
        var session = await _server.StartSessionAsync();
        await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });

        var (response, _) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "b" });

        Assert.Equal(HttpStatusCode.UnprocessableEntity, response.StatusCode);
        Assert.Equal(0, _behavior.Count("cart/add:b"));
    }

    [Theory]
    [InlineData(null, "1")]
    [InlineData("not-a-session", "1")]
    [InlineData("AAAAAAAAAAAAAAAAAAAAAA", null)]
    [InlineData("AAAAAAAAAAAAAAAAAAAAAA", "0")]
    [InlineData("AAAAAAAAAAAAAAAAAAAAAA", "-1")]
    [InlineData("AAAAAAAAAAAAAAAAAAAAAA", "1.5")]
    [InlineData("AAAAAAAAAAAAAAAAAAAAAA", "99999999999999999999")]
    public async Task MalformedOrMissingHeaders_Get400BeforeAnythingIsLogged(string? session, string? sequence)
    {
        var tail = _server.Runtime.Log.TailAddress;
        using var request = new HttpRequestMessage(HttpMethod.Post, "/cart/add") { Content = System.Net.Http.Json.JsonContent.Create(new { item = "z" }) };
        if (session is not null)
        {
            request.Headers.TryAddWithoutValidation("PS-Session", session);
        }

        if (sequence is not null)
        {
            request.Headers.TryAddWithoutValidation("PS-Seq", sequence);
        }

        using var response = await _server.Client.SendAsync(request, Ct);

        Assert.Equal(HttpStatusCode.BadRequest, response.StatusCode);
        Assert.Equal(tail, _server.Runtime.Log.TailAddress);
        Assert.Equal(0, _behavior.Count("cart/add:z"));
    }

    [Fact]
    public async Task UnknownSession_Gets404()
    {
        var (response, body) = await _server.SendAsync(HttpMethod.Post, "/cart/add", "AAAAAAAAAAAAAAAAAAAAAA", 1, new { item = "a" });

        Assert.Equal(HttpStatusCode.NotFound, response.StatusCode);
        Assert.Equal("urn:persistentservices:problem:session-not-found", body.GetProperty("type").GetString());
        Assert.False(body.TryGetProperty("expectedSequence", out _), "only the numbering refusals carry expectedSequence");
    }

    [Fact]
    public async Task SessionOfAnotherPrincipal_DoesNotExistForThem_AndTheBufferedReplyNeverLeaks()
    {
        var session = await _server.StartSessionAsync(user: "alice");
        var (own, _) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "secret" }, user: "alice");

        var (mallory, _) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "secret" }, user: "mallory");
        var (anonymous, _) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "secret" });
        var (readOnly, _) = await _server.SendAsync(HttpMethod.Get, "/cart", session, null, user: "mallory");

        Assert.Equal(HttpStatusCode.OK, own.StatusCode);
        Assert.Equal(HttpStatusCode.NotFound, mallory.StatusCode);
        Assert.Equal(HttpStatusCode.NotFound, anonymous.StatusCode);
        Assert.Equal(HttpStatusCode.NotFound, readOnly.StatusCode);
        Assert.Equal(1, _behavior.Count("cart/add:secret"));
    }

    [Fact]
    public async Task OversizedBody_Gets413BeforeAnythingIsLogged()
    {
        var session = await _server.StartSessionAsync();
        var tail = _server.Runtime.Log.TailAddress;

        var (response, _) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = new string('x', 70_000) });

        Assert.Equal(HttpStatusCode.RequestEntityTooLarge, response.StatusCode);
        Assert.Equal(tail, _server.Runtime.Log.TailAddress);
        var (next, _) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "small" });
        Assert.Equal(HttpStatusCode.OK, next.StatusCode);
    }

    [Fact]
    public async Task OversizedHeaders_Get431ProblemDetailsBeforeAnythingIsLogged()
    {
        await _server.DisposeAsync();
        _server = await TestServer.StartAsync(_dir.Path, o => o.MaxLoggedHeaderBytes = 4096, behavior: _behavior);
        var session = await _server.StartSessionAsync();
        var tail = _server.Runtime.Log.TailAddress;

        using var request = TestServer.Request(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });
        request.Headers.TryAddWithoutValidation("X-Big", new string('h', 6000));
        using var response = await _server.Client.SendAsync(request, TestContext.Current.CancellationToken);

        Assert.Equal(HttpStatusCode.RequestHeaderFieldsTooLarge, response.StatusCode);
        Assert.Equal("application/problem+json", response.Content.Headers.ContentType?.MediaType);
        Assert.Contains("urn:persistentservices:problem:request-too-large", await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken), StringComparison.Ordinal);
        Assert.Equal(tail, _server.Runtime.Log.TailAddress);
    }

    [Fact]
    public async Task SessionResource_WrongMethodOnASession_Gets405WithAllowDelete()
    {
        var session = await _server.StartSessionAsync();

        var (response, body) = await _server.SendAsync(HttpMethod.Get, "/ps/sessions/" + session, null, null);

        Assert.Equal(HttpStatusCode.MethodNotAllowed, response.StatusCode);
        Assert.Equal("DELETE", string.Join(",", response.Content.Headers.Allow));
        Assert.Equal("urn:persistentservices:problem:method-not-allowed", body.GetProperty("type").GetString());
    }

    [Fact]
    public async Task EndpointThrows_ReplyIs500_AndItsRetryGetsTheSame500WithoutRunningAgain()
    {
        var session = await _server.StartSessionAsync();

        var (first, _) = await _server.SendAsync(HttpMethod.Post, "/cart/throw", session, 1);
        var (retry, _) = await _server.SendAsync(HttpMethod.Post, "/cart/throw", session, 1);

        Assert.Equal(HttpStatusCode.InternalServerError, first.StatusCode);
        Assert.Equal(HttpStatusCode.InternalServerError, retry.StatusCode);
        Assert.Equal(1, _behavior.Count("cart/throw"));
    }

    [Fact]
    public async Task ReadOnly_SeesSessionState_LogsNothing()
    {
        var session = await _server.StartSessionAsync();
        await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "tea" });
        var tail = _server.Runtime.Log.TailAddress;
        var commits = _server.Runtime.Log.Commits;

        var (response, body) = await _server.SendAsync(HttpMethod.Get, "/cart", session, null);

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal(["tea"], Items(body));
        Assert.Equal(tail, _server.Runtime.Log.TailAddress);
        Assert.Equal(commits, _server.Runtime.Log.Commits);
    }

    [Fact]
    public async Task ReadOnly_TryingToChangeSessionState_Fails()
    {
        var session = await _server.StartSessionAsync();

        var (response, _) = await _server.SendAsync(HttpMethod.Post, "/cart/try-write", session, null);
        var (cart, body) = await _server.SendAsync(HttpMethod.Get, "/cart", session, null);

        Assert.Equal(HttpStatusCode.InternalServerError, response.StatusCode);
        Assert.Empty(Items(body));
    }

    [Fact]
    public async Task ReadOnly_ReadingSessionStateWithoutASession_Is400SessionRequired()
    {
        var tail = _server.Runtime.Log.TailAddress;

        var (response, body) = await _server.SendAsync(HttpMethod.Get, "/cart", session: null, sequence: null);

        Assert.Equal(HttpStatusCode.BadRequest, response.StatusCode);
        Assert.Equal("application/problem+json", response.Content.Headers.ContentType?.MediaType);
        Assert.Equal("urn:persistentservices:problem:session-required", body.GetProperty("type").GetString());
        Assert.Equal(tail, _server.Runtime.Log.TailAddress);
    }

    [Fact]
    public async Task PlainEndpoint_IsUntouched()
    {
        var tail = _server.Runtime.Log.TailAddress;

        var (response, body) = await _server.SendAsync(HttpMethod.Get, "/plain", null, null);

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.True(body.GetProperty("plain").GetBoolean());
        Assert.False(response.Headers.Contains("PS-Session"));
        Assert.Equal(tail, _server.Runtime.Log.TailAddress);
    }

    [Fact]
    public async Task MinimalApi_PersistentAndReadOnlyEndpoints_Work()
    {
        var session = await _server.StartSessionAsync();

        await _server.SendAsync(HttpMethod.Post, "/counter/add", session, 1, new { opId = "a", amount = 5 });
        var (added, addBody) = await _server.SendAsync(HttpMethod.Post, "/counter/add", session, 2, new { opId = "b", amount = 7 });
        var (read, readBody) = await _server.SendAsync(HttpMethod.Get, "/counter", session, null);

        Assert.Equal(HttpStatusCode.OK, added.StatusCode);
        Assert.Equal(12, addBody.GetProperty("total").GetInt64());
        Assert.Equal(12, readBody.GetProperty("total").GetInt64());
    }

    [Fact]
    public async Task EndSession_Then404_AndItsMemoryIsReleased()
    {
        var session = await _server.StartSessionAsync();
        await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });

        var (ended, _) = await _server.SendAsync(HttpMethod.Delete, "/ps/sessions/" + session, null, null);
        var (after, _) = await _server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" });

        Assert.Equal(HttpStatusCode.NoContent, ended.StatusCode);
        Assert.Equal(HttpStatusCode.NotFound, after.StatusCode);
        Assert.Equal(0, _server.Runtime.Sessions.Count);
    }

    [Fact]
    public async Task ClientDisconnectsMidRequest_TheRequestStillCompletes_AndItsRetryGetsTheReply()
    {
        var session = await _server.StartSessionAsync();
        using (var cts = CancellationTokenSource.CreateLinkedTokenSource(Ct))
        {
            using var request = TestServer.Request(HttpMethod.Post, "/cart/slow", session, 1);
            var send = _server.Client.SendAsync(request, cts.Token);
            while (_behavior.Count("cart/slow") == 0)
            {
                await Task.Delay(10, Ct);
            }

            await cts.CancelAsync();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => send);
        }

        _behavior.Gate.SetResult();
        var (retry, body) = await _server.SendAsync(HttpMethod.Post, "/cart/slow", session, 1);

        Assert.Equal(HttpStatusCode.OK, retry.StatusCode);
        Assert.Equal(["slow"], Items(body));
        Assert.Equal(1, _behavior.Count("cart/slow"));
    }

    [Fact]
    public async Task DifferentSessions_RunConcurrently()
    {
        var first = await _server.StartSessionAsync();
        var second = await _server.StartSessionAsync();
        var slow = _server.SendAsync(HttpMethod.Post, "/cart/slow", first, 1);
        while (_behavior.Count("cart/slow") == 0)
        {
            await Task.Delay(10, Ct);
        }

        var (other, _) = await _server.SendAsync(HttpMethod.Post, "/cart/add", second, 1, new { item = "fast" });

        Assert.Equal(HttpStatusCode.OK, other.StatusCode);
        Assert.False(slow.IsCompleted);
        _behavior.Gate.SetResult();
        await slow;
    }

    [Fact]
    public async Task SessionResource_WrongMethod_Gets405()
    {
        var (response, body) = await _server.SendAsync(HttpMethod.Get, "/ps/sessions", null, null);

        Assert.Equal(HttpStatusCode.MethodNotAllowed, response.StatusCode);
        Assert.Equal("POST", string.Join(",", response.Content.Headers.Allow));
        Assert.Equal("urn:persistentservices:problem:method-not-allowed", body.GetProperty("type").GetString());
    }

    [Fact]
    public async Task TooManySessions_Gets429()
    {
        await _server.DisposeAsync();
        _server = await TestServer.StartAsync(_dir.Path, o => (o.MaxSessions, o.MaxSessionsPerAddress) = (2, 2), behavior: _behavior); // the table, not one address's share
        await _server.StartSessionAsync();
        await _server.StartSessionAsync();

        var (response, _) = await _server.SendAsync(HttpMethod.Post, "/ps/sessions", null, null);

        Assert.Equal(HttpStatusCode.TooManyRequests, response.StatusCode);
    }
}
