using System.Collections.Concurrent;
using System.Net;
using System.Text.Json;
using Microsoft.AspNetCore.Authorization;
using Microsoft.AspNetCore.Builder;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Http.IdempotencyKeys;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.Sessions;

/// <summary>
/// Issue 32, finding 7: no endpoint listed, inspected, discarded or released a quarantined session. The admin endpoints
/// (<c>MapPersistentServicesAdmin</c>) do, over Kestrel, behind the application's policy, and each repair is logged in the
/// service's log (the next start sees it) and to ILogger with the acting principal. A session is quarantined as
/// <see cref="Recovery.QuarantineTests"/> does it: a request, a crash, and a build whose reply differs (the salt).
/// </summary>
public sealed class AdminEndpointsTests : IDisposable
{
    private const string Problem = "urn:persistentservices:problem:";
    private const string Operator = "operator";
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();
    private readonly CapturingLoggerProvider _logs = new();

    public void Dispose()
    {
        _dir.Dispose();
    }

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    [Fact]
    public async Task Discard_QuarantinedSession_IsFoundInspectedAndEnded_ClientGets404_HealthHealthy_LogTruncatesPastIt()
    {
        var session = await QuarantineAsync("a");
        await using (var server = await StartAsync(o => o.IdleCheckpointAfter = 1))
        {
            await server.RecoveryCompletion;
            var tag = server.Session(session).TraceTag;
            Assert.Equal("Degraded", await HealthAsync(server));

            // Find it: listed with its state and reason; the quarantined filter finds it alone.
            var (status, list) = await AdminAsync(server, HttpMethod.Get, "/ps/admin/sessions?state=quarantined");
            Assert.Equal(HttpStatusCode.OK, status);
            var listed = Assert.Single(list.GetProperty("sessions").EnumerateArray());
            Assert.Equal(tag, listed.GetProperty("tag").GetString());
            Assert.Equal("session", listed.GetProperty("kind").GetString());
            Assert.Equal("quarantined", listed.GetProperty("state").GetString());
            Assert.Contains("request 1", listed.GetProperty("quarantineReason").GetString(), StringComparison.Ordinal);
            Assert.Equal(1, listed.GetProperty("lastSequence").GetInt64());
            Assert.Equal("", listed.GetProperty("owner").GetString()); // anonymous
            Assert.Equal(1, list.GetProperty("quarantined").GetInt32());
            Assert.DoesNotContain(session, list.GetRawText(), StringComparison.Ordinal); // ids of anonymous sessions are secrets

            // Inspect it: the request that led to the quarantine and its reply, then the marker; a body only when asked for.
            var (_, shown) = await AdminAsync(server, HttpMethod.Get, $"/ps/admin/sessions/{tag}");
            var records = shown.GetProperty("history").GetProperty("records").EnumerateArray().ToList();
            var request = Assert.Single(records, r => r.GetProperty("kind").GetString() == "request");
            Assert.Equal("POST", request.GetProperty("method").GetString());
            Assert.Equal("/cart/add", request.GetProperty("path").GetString());
            Assert.Equal(1, request.GetProperty("sequence").GetInt64());
            Assert.True(request.GetProperty("bodyBytes").GetInt32() > 0);
            Assert.False(request.TryGetProperty("body", out _));
            Assert.Equal(200, Assert.Single(records, r => r.GetProperty("kind").GetString() == "reply").GetProperty("status").GetInt32());
            Assert.Contains(records, r => r.GetProperty("kind").GetString() == "checkpoint" &&
                r.GetProperty("detail").GetString()!.StartsWith("quarantine marker: ", StringComparison.Ordinal));
            Assert.False(shown.TryGetProperty("id", out _)); // named by its tag: its id is not given out
            var (_, withBodies) = await AdminAsync(server, HttpMethod.Get, $"/ps/admin/sessions/{tag}?bodies=true");
            Assert.Contains("\"item\":\"a\"", withBodies.GetProperty("history").GetProperty("records").EnumerateArray()
                .Single(r => r.GetProperty("kind").GetString() == "request").GetProperty("body").GetString(), StringComparison.Ordinal);

            // Discard it: ended; its client's next request gets 404, health is Healthy again, the log is let go past it.
            var marker = server.Session(session).RecoveryLsn;
            var (discarded, outcome) = await AdminAsync(server, HttpMethod.Post, $"/ps/admin/sessions/{tag}/discard");
            Assert.Equal(HttpStatusCode.OK, discarded);
            Assert.Equal("ended", outcome.GetProperty("outcome").GetString());
            var (gone, problem) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" });
            Assert.Equal(HttpStatusCode.NotFound, gone.StatusCode);
            Assert.Equal(Problem + "session-not-found", problem.GetProperty("type").GetString());
            Assert.Equal("Healthy", await HealthAsync(server));
            Assert.Equal(0, server.Runtime.QuarantinedSessions);
            Assert.Contains(_logs.Lines, l => l.EventId == 1160 && l.Message.Contains($"Operator {Operator} discarded quarantined session {tag}", StringComparison.Ordinal));

            var (again, _) = await AdminAsync(server, HttpMethod.Post, $"/ps/admin/sessions/{tag}/discard");
            Assert.Equal(HttpStatusCode.NotFound, again);

            for (var i = 0; i < 3; i++)
            {
                var other = await server.StartSessionAsync();
                await server.SendAsync(HttpMethod.Post, "/counter/add", other, 1, new { opId = "o" + i, amount = 1 });
                await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            }

            Assert.True(server.Runtime.Log.BeginAddress > marker, $"the log's begin {server.Runtime.Log.BeginAddress} did not move past the discarded session's marker {marker}");
            await server.CrashAsync();
        }

        // The discard was logged: the next start knows nothing of the session.
        await using (var server = await StartAsync())
        {
            await server.RecoveryCompletion;
            Assert.Equal(0, server.Runtime.QuarantinedSessions);
            Assert.Equal("Healthy", await HealthAsync(server));
            var (gone, _) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" });
            Assert.Equal(HttpStatusCode.NotFound, gone.StatusCode);
        }

        Assert.Equal(2, _behavior.Count("cart/add:a")); // its execution and its one replay, none after
    }

    [Fact]
    public async Task Release_QuarantinedSessionById_ServesAgainWithNoState_ItsLastRequestGets410_AndThatSurvivesARestart()
    {
        var session = await QuarantineAsync("a");
        await using (var server = await StartAsync())
        {
            await server.RecoveryCompletion;
            var (status, released) = await AdminAsync(server, HttpMethod.Post, $"/ps/admin/sessions/{session}/release");
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal("released", released.GetProperty("outcome").GetString());
            Assert.Equal("live", released.GetProperty("session").GetProperty("state").GetString());
            Assert.Contains(_logs.Lines, l => l.EventId == 1161 && l.Message.Contains($"Operator {Operator} released", StringComparison.Ordinal));
            Assert.Equal("Healthy", await HealthAsync(server));

            // Shown by id, the id is in the answer (its caller knew it already).
            var (_, shown) = await AdminAsync(server, HttpMethod.Get, $"/ps/admin/sessions/{session}");
            Assert.Equal(session, shown.GetProperty("id").GetString());
            Assert.Equal(410, shown.GetProperty("lastReply").GetProperty("status").GetInt32());

            var executions = _behavior.Count("cart/add:a");
            var (retry, lost) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });
            Assert.Equal(HttpStatusCode.Gone, retry.StatusCode);
            Assert.Equal(Problem + "session-released", lost.GetProperty("type").GetString());
            Assert.Equal(executions, _behavior.Count("cart/add:a")); // never executed again

            var (next, reply) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" });
            Assert.Equal(HttpStatusCode.OK, next.StatusCode);
            Assert.Equal(1, reply.GetProperty("count").GetInt32()); // its state was reset
            await server.CrashAsync();
        }

        await using (var server = await StartAsync())
        {
            await server.RecoveryCompletion;
            Assert.Equal(0, server.Runtime.QuarantinedSessions);
            var (third, reply) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 3, new { item = "c" });
            Assert.Equal(HttpStatusCode.OK, third.StatusCode);
            Assert.Equal(2, reply.GetProperty("count").GetInt32());
        }
    }

    [Fact]
    public async Task Discard_QuarantinedKey_BecomesAnExpiredKey_NeverRunAgain_AlsoAfterARestart()
    {
        await using (var server = await StartAsync())
        {
            using var first = KeyRequest("k-1");
            using var reply = await server.Client.SendAsync(first, Ct);
            Assert.Equal(HttpStatusCode.OK, reply.StatusCode);
            await server.CrashAsync();
        }

        _behavior.Salt = "-changed";
        await using (var server = await StartAsync())
        {
            await server.RecoveryCompletion;
            var (_, keys) = await AdminAsync(server, HttpMethod.Get, "/ps/admin/sessions?kind=key");
            var key = Assert.Single(keys.GetProperty("sessions").EnumerateArray());
            Assert.Equal("quarantined", key.GetProperty("state").GetString());
            var tag = key.GetProperty("tag").GetString();

            var (status, outcome) = await AdminAsync(server, HttpMethod.Post, $"/ps/admin/sessions/{tag}/discard");
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal("expired-key", outcome.GetProperty("outcome").GetString());
            Assert.Equal("expired-key", outcome.GetProperty("session").GetProperty("state").GetString());
            Assert.Equal(0, server.Runtime.QuarantinedSessions);

            using var repeat = KeyRequest("k-1");
            using var gone = await server.Client.SendAsync(repeat, Ct);
            Assert.Equal(HttpStatusCode.Gone, gone.StatusCode);
            var text = await gone.Content.ReadAsStringAsync(Ct);
            Assert.Contains(Problem + "idempotency-key-expired", text, StringComparison.Ordinal);
            Assert.Contains("do not send the operation again under a new key", text, StringComparison.Ordinal);
            await server.CrashAsync();
        }

        await using (var server = await StartAsync())
        {
            await server.RecoveryCompletion;
            using var again = KeyRequest("k-1");
            using var stillGone = await server.Client.SendAsync(again, Ct);
            Assert.Equal(HttpStatusCode.Gone, stillGone.StatusCode);
        }

        Assert.Equal(2, _behavior.Count("cart/add:keyed")); // its one execution and its replay at the first restart

        static HttpRequestMessage KeyRequest(string key)
        {
            var request = TestServer.Request(HttpMethod.Post, "/cart/add", null, null, new { item = "keyed" });
            request.Headers.TryAddWithoutValidation("Idempotency-Key", $"\"{key}\"");
            return request;
        }
    }

    [Fact]
    public async Task List_PagesByTraceTag_AndBadInputGetsProblemDetails()
    {
        await using var server = await StartAsync();
        var sessions = new List<string>();
        for (var i = 0; i < 5; i++)
        {
            sessions.Add(await server.StartSessionAsync());
        }

        var (used, _) = await server.SendAsync(HttpMethod.Post, "/cart/add", sessions[0], 1, new { item = "x" });
        Assert.Equal(HttpStatusCode.OK, used.StatusCode);

        var seen = new List<string>();
        string? after = null;
        do
        {
            var (status, page) = await AdminAsync(server, HttpMethod.Get, "/ps/admin/sessions?limit=2" + (after is null ? "" : "&after=" + after));
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(5, page.GetProperty("total").GetInt32());
            seen.AddRange(page.GetProperty("sessions").EnumerateArray().Select(s => s.GetProperty("tag").GetString()!));
            after = page.TryGetProperty("next", out var cursor) ? cursor.GetString() : null; // absent on the last page
        }
        while (after is not null);

        Assert.Equal(sessions.Select(s => server.Session(s).TraceTag).Order(StringComparer.Ordinal), seen);
        var (_, neverUsed) = await AdminAsync(server, HttpMethod.Get, "/ps/admin/sessions?state=never-used");
        Assert.Equal(4, neverUsed.GetProperty("matched").GetInt32());

        foreach (var query in new[] { "?limit=0", "?limit=1001", "?limit=x", "?state=bogus", "?kind=all", "?after=zz", "?state=live&state=live" })
        {
            var (status, problem) = await AdminAsync(server, HttpMethod.Get, "/ps/admin/sessions" + query);
            Assert.True(status == HttpStatusCode.BadRequest, query);
            Assert.Equal(Problem + "admin-query", problem.GetProperty("type").GetString());
        }

        var live = server.Session(sessions[0]).TraceTag;
        await ExpectProblemAsync(server, HttpMethod.Get, "/ps/admin/sessions/not-a-session", HttpStatusCode.BadRequest, "session-reference");
        await ExpectProblemAsync(server, HttpMethod.Get, "/ps/admin/sessions/0123456789ab", HttpStatusCode.NotFound, "session-not-found");
        await ExpectProblemAsync(server, HttpMethod.Get, $"/ps/admin/sessions/{live}?bodies=maybe", HttpStatusCode.BadRequest, "admin-query");
        await ExpectProblemAsync(server, HttpMethod.Post, $"/ps/admin/sessions/{live}/discard", HttpStatusCode.Conflict, "session-not-quarantined");
        await ExpectProblemAsync(server, HttpMethod.Post, $"/ps/admin/sessions/{live}/release", HttpStatusCode.Conflict, "session-not-quarantined");
        await ExpectProblemAsync(server, HttpMethod.Post, "/ps/admin/sessions/0123456789ab/discard", HttpStatusCode.NotFound, "session-not-found");
        await ExpectProblemAsync(server, HttpMethod.Delete, "/ps/admin/sessions", HttpStatusCode.MethodNotAllowed, "method-not-allowed");
        await ExpectProblemAsync(server, HttpMethod.Get, $"/ps/admin/sessions/{live}/discard", HttpStatusCode.MethodNotAllowed, "method-not-allowed");

        // Still served: a refused repair changed nothing.
        var (next, _) = await server.SendAsync(HttpMethod.Post, "/cart/add", sessions[0], 2, new { item = "y" });
        Assert.Equal(HttpStatusCode.OK, next.StatusCode);
    }

    [Fact]
    public async Task Admin_WithoutThePolicy_IsNeverServed()
    {
        var session = await QuarantineAsync("a");
        await using (var server = await StartAsync())
        {
            await server.RecoveryCompletion;
            var tag = server.Session(session).TraceTag;
            foreach (var (user, expected) in new[] { ((string?)null, HttpStatusCode.Unauthorized), ("mallory", HttpStatusCode.Forbidden) })
            {
                // Refused by the authorization middleware (the usual case): the admin-forbidden problem too (issue 55: an empty 401/403).
                var (list, listProblem) = await AdminAsync(server, HttpMethod.Get, "/ps/admin/sessions", user);
                Assert.Equal(expected, list);
                Assert.Equal(JsonValueKind.Object, listProblem.ValueKind);
                Assert.Equal(Problem + "admin-forbidden", listProblem.GetProperty("type").GetString());
                Assert.Equal((int)expected, listProblem.GetProperty("status").GetInt32());
                var (discard, discardProblem) = await AdminAsync(server, HttpMethod.Post, $"/ps/admin/sessions/{tag}/discard", user);
                Assert.Equal(expected, discard);
                Assert.Equal(Problem + "admin-forbidden", discardProblem.GetProperty("type").GetString());
            }

            Assert.Equal(1, server.Runtime.QuarantinedSessions);
            Assert.Equal(4, _logs.Lines.Count(l => l.EventId == 1164 && l.Message.Contains("refused by the authorization middleware", StringComparison.Ordinal)));

            // Not the admin endpoints: the application's own refusals are left as ASP.NET writes them.
            using var other = await server.Client.GetAsync("/ops-only", Ct);
            Assert.Equal(HttpStatusCode.Unauthorized, other.StatusCode);
            Assert.Empty(await other.Content.ReadAsStringAsync(Ct));
        }

        // An application that opens the group (AllowAnonymous) still does not open it: the handlers check the policy again.
        await using (var server = await StartAsync(admin: app => app.MapPersistentServicesAdmin("ops").AllowAnonymous()))
        {
            await server.RecoveryCompletion;
            var tag = server.Session(session).TraceTag;
            var (list, problem) = await AdminAsync(server, HttpMethod.Get, "/ps/admin/sessions", user: null);
            Assert.Equal(HttpStatusCode.Unauthorized, list);
            Assert.Equal(Problem + "admin-forbidden", problem.GetProperty("type").GetString());
            var (discard, _) = await AdminAsync(server, HttpMethod.Post, $"/ps/admin/sessions/{tag}/discard", user: "mallory");
            Assert.Equal(HttpStatusCode.Forbidden, discard);
            Assert.Equal(1, server.Runtime.QuarantinedSessions);
            Assert.Contains(_logs.Lines, l => l.EventId == 1164);
        }

        // Authorization placed before authentication (WebApplication adds it first when the application does not): closed for everyone.
        await using (var server = await StartAsync(admin: app => app.MapPersistentServicesAdmin("ops"), useAuthorization: false))
        {
            await server.RecoveryCompletion;
            var (status, _) = await AdminAsync(server, HttpMethod.Post, $"/ps/admin/sessions/{server.Session(session).TraceTag}/discard");
            Assert.NotEqual(HttpStatusCode.OK, status);
            Assert.Equal(1, server.Runtime.QuarantinedSessions);
        }
    }

    [Fact]
    public void MapPersistentServicesAdmin_WithoutAPolicy_OrAnUnknownOne_OrWithoutAuthorization_Throws()
    {
        var app = Build(authorization: true);
        Assert.Throws<ArgumentException>(() => app.MapPersistentServicesAdmin(""));
        Assert.Throws<ArgumentException>(() => app.MapPersistentServicesAdmin("  "));
        Assert.Throws<ArgumentException>(() => app.MapPersistentServicesAdmin("ops", "ps/admin"));
        Assert.Throws<ArgumentException>(() => app.MapPersistentServicesAdmin("ops", "/ps/{tenant}"));
        var unknown = Assert.Throws<InvalidOperationException>(() => app.MapPersistentServicesAdmin("opz"));
        Assert.Contains("no authorization policy named 'opz'", unknown.Message, StringComparison.Ordinal);
        Assert.NotNull(app.MapPersistentServicesAdmin("ops"));

        var noAuthorization = Assert.Throws<InvalidOperationException>(() => Build(authorization: false).MapPersistentServicesAdmin("ops"));
        Assert.Contains("AddAuthorization", noAuthorization.Message, StringComparison.Ordinal);

        static WebApplication Build(bool authorization)
        {
            var builder = WebApplication.CreateBuilder();
            builder.Services.AddPersistentServices(o => o.LogDirectory = Path.Combine(Path.GetTempPath(), "ps-unused-" + Guid.NewGuid().ToString("N")));
            if (authorization)
            {
                builder.Services.AddAuthorization(o => o.AddPolicy("ops", p => p.RequireUserName(Operator)));
            }

            return builder.Build();
        }
    }

    [Fact]
    public void KeySessionConstants_AreTheIdempotencyKeysOwn()
    {
        Assert.Equal(IdempotencyKey.KeySessionOwnerVersion, KeySessions.OwnerVersion);
        Assert.Equal(IdempotencyKey.LegacyKeySessionOwnerVersion, KeySessions.LegacyOwnerVersion);
        Assert.True(IdempotencyKeySessions.IsExpiredMarker(QuarantineRepair.OperatorExpiredKeyReply()));
        Assert.True(KeySessions.IsExpiredMarker(IdempotencyKeySessions.ExpiredReply(new IdempotencyKeyOptions())));
    }

    /// <summary>A session with one request, crashed, then quarantined by a build whose reply differs (the salt stays set).</summary>
    private async Task<string> QuarantineAsync(string item)
    {
        string session;
        await using (var server = await StartAsync())
        {
            session = await server.StartSessionAsync();
            var (added, _) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item });
            Assert.Equal(HttpStatusCode.OK, added.StatusCode);
            await server.CrashAsync();
        }

        _behavior.Salt = "-changed";
        return session;
    }

    private Task<TestServer> StartAsync(Action<PersistentServicesOptions>? options = null, Action<WebApplication>? admin = null, bool useAuthorization = true)
        => TestServer.StartAsync(_dir.Path, options, build: builder =>
        {
            builder.Services.AddAuthorization(o => o.AddPolicy("ops", p => p.RequireUserName(Operator)));
            builder.Logging.AddProvider(_logs);
        }, beforePersistentServices: app =>
        {
            if (useAuthorization)
            {
                app.UseAuthorization();
            }

            (admin ?? (a => a.MapPersistentServicesAdmin("ops")))(app);
            app.MapGet("/ops-only", () => "ops").RequireAuthorization("ops");
        }, behavior: _behavior);

    private static async Task<(HttpStatusCode Status, JsonElement Body)> AdminAsync(TestServer server, HttpMethod method, string path, string? user = Operator)
    {
        using var request = new HttpRequestMessage(method, path);
        if (user is not null)
        {
            request.Headers.Add("X-Test-User", user);
        }

        using var response = await server.Client.SendAsync(request, Ct);
        var text = await response.Content.ReadAsStringAsync(Ct);
        return (response.StatusCode, text.Length == 0 ? default : JsonDocument.Parse(text).RootElement.Clone());
    }

    private static async Task ExpectProblemAsync(TestServer server, HttpMethod method, string path, HttpStatusCode status, string type)
    {
        var (actual, problem) = await AdminAsync(server, method, path);
        Assert.True(status == actual, $"{method} {path}: {actual} {problem}");
        Assert.Equal(Problem + type, problem.GetProperty("type").GetString());
    }

    private static async Task<string> HealthAsync(TestServer server)
    {
        using var response = await server.Client.GetAsync("/health/ready", Ct);
        return await response.Content.ReadAsStringAsync(Ct);
    }

    /// <summary>Keeps every log line of the servers it is added to.</summary>
    private sealed class CapturingLoggerProvider : ILoggerProvider
    {
        private readonly ConcurrentQueue<(int EventId, string Message)> _lines = new();

        public IReadOnlyList<(int EventId, string Message)> Lines => [.. _lines];

        public ILogger CreateLogger(string categoryName) => new Logger(_lines);

        public void Dispose()
        {
        }

        private sealed class Logger(ConcurrentQueue<(int EventId, string Message)> lines) : ILogger
        {
            public IDisposable? BeginScope<TState>(TState state)
                where TState : notnull => null;

            public bool IsEnabled(LogLevel logLevel) => logLevel >= LogLevel.Information;

            public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
                => lines.Enqueue((eventId.Id, formatter(state, exception)));
        }
    }
}
