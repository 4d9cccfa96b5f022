using System.Net;
using System.Net.Http.Headers;
using System.Net.Http.Json;
using System.Text.Json;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging.Abstractions;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Http.IdempotencyKeys;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Http.IdempotencyKeys;

/// <summary>The <c>Idempotency-Key</c> header on <c>[Persistent]</c> endpoints (docs/protocol.md, "Idempotency-Key") against a real Kestrel server.</summary>
public sealed class IdempotencyKeyTests : IAsyncLifetime
{
    private const string Problem = "urn:persistentservices:problem:";
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();
    private readonly FakeTimeProvider _time = new(new DateTimeOffset(2026, 11, 23, 12, 0, 0, TimeSpan.Zero));
    private TestServer _server = null!;

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public async ValueTask InitializeAsync()
    {
        _server = await StartAsync();
    }

    public async ValueTask DisposeAsync()
    {
        _behavior.Gate.TrySetResult();
        await _server.DisposeAsync();
        _dir.Dispose();
    }

    private Task<TestServer> StartAsync() => TestServer.StartAsync(_dir.Path, options =>
    {
        options.IdempotencyKeys.Retention = TimeSpan.FromMinutes(10);
        options.IdempotencyKeys.ExpiredKeyRetention = TimeSpan.FromMinutes(30);
    }, _time, behavior: _behavior);

    private static async Task<(HttpResponseMessage Response, string Text)> SendAsync(
        TestServer server, string path, string? key, object? json = null, string? user = null, string? session = null, long? sequence = null)
    {
        using var request = TestServer.Request(HttpMethod.Post, path, session, sequence, json, user);
        if (key is not null)
        {
            request.Headers.TryAddWithoutValidation("Idempotency-Key", key);
        }

        var response = await server.Client.SendAsync(request, Ct);
        return (response, await response.Content.ReadAsStringAsync(Ct));
    }

    private static string ProblemType(string text) => JsonDocument.Parse(text).RootElement.GetProperty("type").GetString()!;

    private static IdempotencyKeySessions KeySessionsOf(TestServer server) => server.App.Services.GetRequiredService<IdempotencyKeySessions>();

    [Fact]
    public async Task KeyRequest_FirstUse_ExecutesOnceAndEchoesNoSessionHeaders()
    {
        var (response, text) = await SendAsync(_server, "/counter/add", "\"k-first\"", new { opId = "first", amount = 5 });

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal(5, JsonDocument.Parse(text).RootElement.GetProperty("total").GetInt64());
        Assert.False(response.Headers.Contains("PS-Session"));
        Assert.False(response.Headers.Contains("PS-Seq"));
        Assert.False(response.Headers.Contains("PS-Replayed"));
        Assert.Equal(1, _behavior.Count("counter:first"));
    }

    [Fact]
    public async Task KeyRequest_RepeatOfACompletedKey_GetsTheStoredBytesAndLogsNothing()
    {
        var (first, firstText) = await SendAsync(_server, "/cart/add", "k-repeat", new { item = "apple" });
        var tail = _server.Runtime.Log.TailAddress;

        var (again, againText) = await SendAsync(_server, "/cart/add", "k-repeat", new { item = "apple" });

        Assert.Equal(first.StatusCode, again.StatusCode);
        Assert.Equal(firstText, againText);
        Assert.Equal("true", again.Headers.GetValues("PS-Replayed").Single());
        Assert.Equal(1, _behavior.Count("cart/add:apple"));
        Assert.Equal(tail, _server.Runtime.Log.TailAddress);
    }

    [Fact]
    public async Task KeyRequest_QuotedAndBareFormsOfOneKey_AreTheSameKey()
    {
        await SendAsync(_server, "/cart/add", "\"k-form\"", new { item = "pear" });

        var (again, _) = await SendAsync(_server, "/cart/add", "k-form", new { item = "pear" });

        Assert.Equal("true", again.Headers.GetValues("PS-Replayed").Single());
        Assert.Equal(1, _behavior.Count("cart/add:pear"));
    }

    [Fact]
    public async Task KeyRequest_RepeatWhileTheFirstRuns_Gets409WithRetryAfter_ThenTheReply()
    {
        var first = SendAsync(_server, "/cart/slow", "k-slow");
        while (_behavior.Count("cart/slow") == 0)
        {
            await Task.Delay(10, Ct);
        }

        var (busy, busyText) = await SendAsync(_server, "/cart/slow", "k-slow");
        _behavior.Gate.SetResult();
        var (done, doneText) = await first;
        var (after, afterText) = await SendAsync(_server, "/cart/slow", "k-slow");

        Assert.Equal(HttpStatusCode.Conflict, busy.StatusCode);
        Assert.Equal(Problem + "idempotency-key-in-use", ProblemType(busyText));
        Assert.Equal("application/problem+json", busy.Content.Headers.ContentType?.MediaType);
        Assert.Equal(TimeSpan.FromSeconds(1), busy.Headers.RetryAfter?.Delta);
        Assert.Equal(HttpStatusCode.OK, done.StatusCode);
        Assert.Equal(doneText, afterText);
        Assert.Equal(1, _behavior.Count("cart/slow"));
    }

    [Fact]
    public async Task KeyRequest_SameKeyOtherBodyOrTarget_Gets422AndExecutesNothing()
    {
        await SendAsync(_server, "/cart/add", "k-reuse", new { item = "a" });

        var (otherBody, otherBodyText) = await SendAsync(_server, "/cart/add", "k-reuse", new { item = "b" });
        var (otherTarget, _) = await SendAsync(_server, "/counter/add", "k-reuse", new { opId = "x", amount = 1 });

        Assert.Equal(HttpStatusCode.UnprocessableEntity, otherBody.StatusCode);
        Assert.Equal(Problem + "idempotency-key-reused", ProblemType(otherBodyText));
        Assert.Equal(HttpStatusCode.UnprocessableEntity, otherTarget.StatusCode);
        Assert.Equal(0, _behavior.Count("cart/add:b"));
        Assert.Equal(0, _behavior.Count("counter:x"));
    }

    [Fact]
    public async Task RequiredKey_Missing_Gets400AndExecutesNothing()
    {
        var tail = _server.Runtime.Log.TailAddress;

        var (response, text) = await SendAsync(_server, "/counter/add-keyed", key: null, new { opId = "nokey", amount = 1 });

        Assert.Equal(HttpStatusCode.BadRequest, response.StatusCode);
        Assert.Equal(Problem + "idempotency-key-missing", ProblemType(text));
        Assert.Equal(0, _behavior.Count("counter:nokey"));
        Assert.Equal(tail, _server.Runtime.Log.TailAddress);
    }

    [Fact]
    public async Task RequiredKey_Present_Executes()
    {
        var (response, _) = await SendAsync(_server, "/counter/add-keyed", "k-required", new { opId = "keyed", amount = 1 });

        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal(1, _behavior.Count("counter:keyed"));
    }

    [Theory]
    [InlineData("\"unterminated")]
    [InlineData("a\"b")]
    [InlineData("\"\"")]
    public async Task KeyRequest_MalformedKey_Gets400BeforeAnythingIsLogged(string key)
    {
        var tail = _server.Runtime.Log.TailAddress;

        var (response, text) = await SendAsync(_server, "/cart/add", key, new { item = "m" });

        Assert.Equal(HttpStatusCode.BadRequest, response.StatusCode);
        Assert.Equal(Problem + "idempotency-key-malformed", ProblemType(text));
        Assert.Equal(tail, _server.Runtime.Log.TailAddress);
        Assert.Equal(0, _behavior.Count("cart/add:m"));
    }

    [Fact]
    public async Task KeyRequest_KeyLongerThanTheLimit_Gets400()
    {
        var (atLimit, _) = await SendAsync(_server, "/cart/add", new string('k', 255), new { item = "long" });
        var (overLimit, text) = await SendAsync(_server, "/cart/add", new string('k', 256), new { item = "longer" });

        Assert.Equal(HttpStatusCode.OK, atLimit.StatusCode);
        Assert.Equal(HttpStatusCode.BadRequest, overLimit.StatusCode);
        Assert.Equal(Problem + "idempotency-key-malformed", ProblemType(text));
        Assert.Equal(0, _behavior.Count("cart/add:longer"));
    }

    [Fact]
    public async Task KeyRequest_WithASessionToo_Gets400()
    {
        var session = await _server.StartSessionAsync();

        var (response, text) = await SendAsync(_server, "/cart/add", "k-both", new { item = "both" }, session: session, sequence: 1);

        Assert.Equal(HttpStatusCode.BadRequest, response.StatusCode);
        Assert.Equal(Problem + "idempotency-key-with-session", ProblemType(text));
        Assert.Equal(0, _behavior.Count("cart/add:both"));
    }

    [Fact]
    public async Task KeyRequest_SameKeyFromAnotherPrincipal_IsAnotherKey_AndNeverSeesTheFirstReply()
    {
        var (alice, aliceText) = await SendAsync(_server, "/cart/whoami", "k-shared", user: "alice");
        var (bob, bobText) = await SendAsync(_server, "/cart/whoami", "k-shared", user: "bob");
        var (anonymous, anonymousText) = await SendAsync(_server, "/cart/whoami", "k-shared");

        Assert.Equal(HttpStatusCode.OK, alice.StatusCode);
        Assert.Contains("alice", aliceText, StringComparison.Ordinal);
        Assert.Equal(HttpStatusCode.OK, bob.StatusCode);
        Assert.Contains("bob", bobText, StringComparison.Ordinal);
        Assert.DoesNotContain("alice", bobText, StringComparison.Ordinal);
        Assert.False(bob.Headers.Contains("PS-Replayed"));
        Assert.DoesNotContain("alice", anonymousText, StringComparison.Ordinal);
        Assert.False(anonymous.Headers.Contains("PS-Replayed"));
    }

    [Fact]
    public async Task KeySession_IsNotReachableThroughTheSessionProtocol()
    {
        await SendAsync(_server, "/cart/add", "k-hidden", new { item = "hidden" });
        var keySession = IdempotencyKey.Derive([], "k-hidden").ToString();

        var (response, _) = await _server.SendAsync(HttpMethod.Post, "/cart/add", keySession, 1, new { item = "hidden" });
        using var end = await _server.Client.DeleteAsync("/ps/sessions/" + keySession, Ct);

        Assert.Equal(HttpStatusCode.NotFound, response.StatusCode);
        Assert.Equal(HttpStatusCode.NotFound, end.StatusCode);
        Assert.Equal(1, _behavior.Count("cart/add:hidden"));
    }

    [Fact]
    public async Task KeyRequest_AfterACrash_RepeatGetsTheSameBytesAndTheEffectIsNotRepeated()
    {
        var (first, firstText) = await SendAsync(_server, "/counter/add", "k-crash", new { opId = "crash", amount = 7 });
        await _server.CrashAsync();

        _server = await StartAsync();
        await _server.RecoveryCompletion;
        Assert.Equal(RecoveryStage.Ready, _server.Availability.Stage);
        var (again, againText) = await SendAsync(_server, "/counter/add", "k-crash", new { opId = "crash", amount = 7 });
        var (reused, _) = await SendAsync(_server, "/counter/add", "k-crash", new { opId = "crash", amount = 8 });

        Assert.Equal(HttpStatusCode.OK, first.StatusCode);
        Assert.Equal(firstText, againText);
        Assert.Equal("true", again.Headers.GetValues("PS-Replayed").Single());
        Assert.Equal(HttpStatusCode.UnprocessableEntity, reused.StatusCode);
    }

    [Fact]
    public async Task KeyRequest_AfterTheRetention_Gets410NeverASecondExecution_EvenAfterARestart()
    {
        await SendAsync(_server, "/cart/add", "k-old", new { item = "old" });
        _time.Advance(TimeSpan.FromMinutes(11));

        var (expired, forgotten) = await KeySessionsOf(_server).ExpireAsync(NullLogger.Instance, Ct);
        var (gone, goneText) = await SendAsync(_server, "/cart/add", "k-old", new { item = "old" });
        var (goneOther, _) = await SendAsync(_server, "/cart/add", "k-old", new { item = "other" });
        await _server.CrashAsync();
        _server = await StartAsync();
        await _server.RecoveryCompletion;
        var (goneAfterRestart, _) = await SendAsync(_server, "/cart/add", "k-old", new { item = "old" });

        Assert.Equal((1, 0), (expired, forgotten));
        Assert.Equal(HttpStatusCode.Gone, gone.StatusCode);
        Assert.Equal(Problem + "idempotency-key-expired", ProblemType(goneText));
        Assert.Equal(HttpStatusCode.Gone, goneOther.StatusCode);
        Assert.Equal(HttpStatusCode.Gone, goneAfterRestart.StatusCode);
        Assert.Equal(1, _behavior.Count("cart/add:old"));
        Assert.Equal(0, _behavior.Count("cart/add:other"));
    }

    [Fact]
    public async Task KeyRequest_AfterBothRetentions_TheKeyIsForgottenAndNamesANewRequest()
    {
        await SendAsync(_server, "/cart/add", "k-forgotten", new { item = "once" });
        _time.Advance(TimeSpan.FromMinutes(11));
        await KeySessionsOf(_server).ExpireAsync(NullLogger.Instance, Ct);
        _time.Advance(TimeSpan.FromMinutes(30));

        var (_, forgotten) = await KeySessionsOf(_server).ExpireAsync(NullLogger.Instance, Ct);
        var (fresh, _) = await SendAsync(_server, "/cart/add", "k-forgotten", new { item = "once" });

        Assert.Equal(1, forgotten);
        Assert.Equal(HttpStatusCode.OK, fresh.StatusCode);
        Assert.Equal(2, _behavior.Count("cart/add:once"));
    }

    [Fact]
    public async Task KeyRequest_WhenKeysAreDisabled_TheHeaderIsIgnoredAndASessionIsNeeded()
    {
        await _server.DisposeAsync();
        _server = await TestServer.StartAsync(_dir.Path, options => options.IdempotencyKeys.Enabled = false, behavior: _behavior);

        var (response, text) = await SendAsync(_server, "/cart/add", "k-off", new { item = "off" });

        Assert.Equal(HttpStatusCode.BadRequest, response.StatusCode);
        Assert.Equal(Problem + "session-header", ProblemType(text));
    }

    [Theory]
    [InlineData(4)]
    [InlineData(4096)]
    public async Task Options_MaxKeyLengthOutOfRange_RefusedAtStartup(int length)
    {
        await _server.DisposeAsync();
        using var other = new TempDirectory();

        var error = await Assert.ThrowsAnyAsync<Exception>(() => TestServer.StartAsync(other.Path, options => options.IdempotencyKeys.MaxKeyLength = length, behavior: _behavior));

        Assert.Contains("MaxKeyLength", error.Message, StringComparison.Ordinal);
        _server = await StartAsync();
    }
}
