using System.Net;
using System.Text.Json;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Options;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;
using PersistentServices.Log;
using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.Recovery;

/// <summary>Recovery by replay after the service restarts on the same log (the kill tests are in the crash harness).</summary>
public sealed class RecoveryTests : IDisposable
{
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static string[] Items(JsonElement body) => [.. body.GetProperty("items").EnumerateArray().Select(e => e.GetString()!)];

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task Restart_SessionStateAndBufferedReplySurvive_DuplicateExecutesNothing()
    {
        string session;
        string lastReply;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });
            lastReply = (await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" })).Body.GetRawText();

            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Availability.Stage);
            var executions = _behavior.Count("cart/add:b");

            var (cart, cartBody) = await server.SendAsync(HttpMethod.Get, "/cart", session, null);
            var (duplicate, duplicateBody) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" });
            var (stale, _) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });
            var (next, nextBody) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 3, new { item = "c" });

            Assert.Equal(["a", "b"], Items(cartBody));
            Assert.Equal(lastReply, duplicateBody.GetRawText());
            Assert.Equal("true", duplicate.Headers.GetValues("PS-Replayed").Single());
            Assert.Equal(executions, _behavior.Count("cart/add:b"));
            Assert.Equal(HttpStatusCode.Gone, stale.StatusCode);
            Assert.Equal(["a", "b", "c"], Items(nextBody));
        }
    }

    [Fact]
    public async Task Restart_MinimalApiEndpoint_ReplaysWithItsBody()
    {
        string session;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/counter/add", session, 1, new { opId = "a", amount = 5 });
            await server.SendAsync(HttpMethod.Post, "/counter/add", session, 2, new { opId = "b", amount = 7 });

            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Availability.Stage);
            var (_, body) = await server.SendAsync(HttpMethod.Get, "/counter", session, null);
            Assert.Equal(12, body.GetProperty("total").GetInt64());
        }
    }

    /// <summary>
    /// The server listens while recovery verifies and scans the log (docs/operations.md "Start time after a crash"):
    /// requests that come meanwhile, persistent, read-only or plain, are held until the scan is done, then served
    /// exactly as after any restart; none is refused or sees a half-recovered service.
    /// </summary>
    [Fact]
    public async Task Restart_RequestsDuringTheAnalysis_AreHeldUntilItIsDone_ThenServedExactly()
    {
        string session;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/counter/add", session, 1, new { opId = "a", amount = 5 });
            await server.CrashAsync();
        }

        // The log's open waits here (its device is created before FASTER opens it) until the test lets it go.
        var open = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var (restarted, started) = await TestServer.StartListeningAsync(_dir.Path, o => o.Log.DeviceFactory = (basePath, io) =>
        {
            open.Task.Wait(TimeSpan.FromSeconds(30));
            return DurableLog.CreateDefaultDevice(basePath, io);
        }, behavior: _behavior);
        await using (restarted)
        {
            var plain = restarted.SendAsync(HttpMethod.Get, "/plain", null, null);
            var add = restarted.SendAsync(HttpMethod.Post, "/counter/add", session, 2, new { opId = "b", amount = 7 });
            var read = restarted.SendAsync(HttpMethod.Get, "/counter", session, null);
            await Task.Delay(300, Ct);
            Assert.False(plain.IsCompleted || add.IsCompleted || read.IsCompleted || started.IsCompleted, "a request was answered before the analysis scan");
            Assert.Equal(RecoveryStage.Scanning, restarted.Availability.Stage);

            open.SetResult();
            await started;
            Assert.Equal(HttpStatusCode.OK, (await plain).Response.StatusCode);
            var (addResponse, addBody) = await add;
            Assert.Equal(HttpStatusCode.OK, addResponse.StatusCode);
            Assert.Equal(12, addBody.GetProperty("total").GetInt64());
            var (readResponse, readBody) = await read;
            Assert.Equal(HttpStatusCode.OK, readResponse.StatusCode);
            Assert.True(readBody.GetProperty("total").GetInt64() is 5 or 12, readBody.GetRawText());
            var (retry, retryBody) = await restarted.SendAsync(HttpMethod.Post, "/counter/add", session, 2, new { opId = "b", amount = 7 });
            Assert.Equal(HttpStatusCode.OK, retry.StatusCode);
            Assert.Equal(12, retryBody.GetProperty("total").GetInt64()); // the logged reply: not run again
        }
    }

    [Fact]
    public async Task Restart_ManySessions_ReplayInParallelToTheirOwnState()
    {
        var expected = new Dictionary<string, string[]>();
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            var sessions = await Task.WhenAll(Enumerable.Range(0, 40).Select(_ => server.StartSessionAsync()));
            await Task.WhenAll(sessions.Select(async (session, s) =>
            {
                var items = new List<string>();
                for (var i = 1; i <= 15; i++)
                {
                    var item = $"s{s}-i{i}";
                    var (response, _) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, i, new { item });
                    Assert.Equal(HttpStatusCode.OK, response.StatusCode);
                    items.Add(item);
                }

                lock (expected)
                {
                    expected[session] = [.. items];
                }
            }));

            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.ReplayParallelism = 4, behavior: _behavior))
        {
            Assert.Equal(40, server.Runtime.Analysis!.Sessions);
            Assert.Equal(600, server.Runtime.Analysis.Requests);
            await server.RecoveryCompletion;
            foreach (var (session, items) in expected)
            {
                var (_, body) = await server.SendAsync(HttpMethod.Get, "/cart", session, null);
                Assert.Equal(items, Items(body));
            }
        }
    }

    [Fact]
    public async Task Restart_RequestOfAReplayingSession_WaitsForIt_WhileNewSessionsAreServed()
    {
        string session;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            _behavior.Gate.SetResult();
            await server.SendAsync(HttpMethod.Post, "/cart/slow", session, 1);

            await server.CrashAsync();
        }

        _behavior.Reset(); // the replay of /cart/slow now blocks on a fresh gate
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            while (_behavior.Count("cart/slow") == 0)
            {
                await Task.Delay(10, Ct);
            }

            var waiting = server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "after" });
            var fresh = await server.StartSessionAsync();
            var (freshReply, _) = await server.SendAsync(HttpMethod.Post, "/cart/add", fresh, 1, new { item = "new" });
            var (health, _) = await server.SendAsync(HttpMethod.Get, "/health/ready", null, null);
            Assert.Equal(HttpStatusCode.OK, freshReply.StatusCode);
            Assert.Equal(HttpStatusCode.OK, health.StatusCode);
            await Task.Delay(100, Ct);
            Assert.False(waiting.IsCompleted, "a request of a replaying session waits for its replay");

            _behavior.Gate.SetResult();
            var (reply, body) = await waiting;
            Assert.Equal(HttpStatusCode.OK, reply.StatusCode);
            Assert.Equal(["slow", "after"], Items(body));
        }
    }

    [Fact]
    public async Task Restart_ReplayRunsAsTheLoggedPrincipal()
    {
        string session;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            session = await server.StartSessionAsync(user: "alice");
            await server.SendAsync(HttpMethod.Post, "/cart/whoami", session, 1, user: "alice");
            await server.SendAsync(HttpMethod.Post, "/cart/whoami", session, 2, user: "alice");

            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Availability.Stage);

            var (_, body) = await server.SendAsync(HttpMethod.Get, "/cart", session, null, user: "alice");
            var (other, _) = await server.SendAsync(HttpMethod.Get, "/cart", session, null, user: "mallory");

            Assert.Equal(["alice", "alice"], Items(body));
            Assert.Equal(HttpStatusCode.NotFound, other.StatusCode);
        }
    }

    [Fact]
    public async Task Restart_ReplayProducesAnotherReply_OnlyThatSessionIsQuarantined_TheOthersServe()
    {
        string diverging;
        string healthy;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            diverging = await server.StartSessionAsync();
            healthy = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/cart/add", diverging, 1, new { item = "a" });
            await server.SendAsync(HttpMethod.Post, "/counter/add", healthy, 1, new { opId = "h1", amount = 5 });
            await server.CrashAsync();
        }

        _behavior.Salt = "-changed"; // /cart/add now answers differently: not deterministic, or its code changed
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            await server.RecoveryCompletion;

            Assert.Equal(RecoveryStage.Ready, server.Availability.Stage);
            Assert.Equal(1, server.Runtime.QuarantinedSessions);
            var (refused, problem) = await server.SendAsync(HttpMethod.Post, "/cart/add", diverging, 2, new { item = "b" });
            Assert.Equal(HttpStatusCode.InternalServerError, refused.StatusCode);
            Assert.Equal("urn:persistentservices:problem:session-diverged", problem.GetProperty("type").GetString());
            Assert.Contains("request 1", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);

            var (served, body) = await server.SendAsync(HttpMethod.Post, "/counter/add", healthy, 2, new { opId = "h2", amount = 1 });
            Assert.Equal(HttpStatusCode.OK, served.StatusCode);
            Assert.Equal(6, body.GetProperty("total").GetInt64());
            var (health, _) = await server.SendAsync(HttpMethod.Get, "/health/ready", null, null);
            Assert.Equal(HttpStatusCode.OK, health.StatusCode); // degraded still serves
            Assert.False(server.App.Services.GetRequiredService<IHostApplicationLifetime>().ApplicationStopping.IsCancellationRequested);
        }
    }

    [Fact]
    public async Task Restart_ReplayProducesAnotherReply_WithFailStop_RecoveryStopsNamingSessionAndLsn()
    {
        string session;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });
            await server.CrashAsync();
        }

        _behavior.Salt = "-changed";
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.OnDivergence = DivergencePolicy.FailStop, behavior: _behavior))
        {
            await server.RecoveryCompletion;

            Assert.Equal(RecoveryStage.Failed, server.Availability.Stage);
            var error = Assert.IsType<ReplayDivergenceException>(server.Availability.Failure);

            // Named by its trace tag (a short hash): an anonymous session's id is a bearer secret and never logged.
            var tag = PersistentServices.Diagnostics.PersistentServicesTracing.SessionTag(SessionId.TryParse(session, out var id) ? id : default);
            Assert.Equal(tag, error.SessionId);
            Assert.Equal(1, error.Sequence);
            Assert.Contains($"LSN {error.Lsn}", error.Message, StringComparison.Ordinal);
            Assert.Contains(tag, error.Message, StringComparison.Ordinal);
            Assert.DoesNotContain(session, error.Message, StringComparison.Ordinal);
            Assert.True(server.App.Services.GetRequiredService<IHostApplicationLifetime>().ApplicationStopping.IsCancellationRequested, "the service stops itself");
        }
    }

    [Fact]
    public async Task GracefulStop_ThenANewVersionWhoseRepliesDiffer_StartsWithEveryStateAndBufferedReplyIntact_ReplayingNothing()
    {
        string session;
        string lastReply;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/cart/add", session, 1, new { item = "a" });
            lastReply = (await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" })).Body.GetRawText();
        }

        _behavior.Salt = "-v2"; // the new version's replies differ
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Availability.Stage);
            Assert.True(server.Runtime.Analysis!.CleanShutdown);
            Assert.Equal(0, server.Runtime.Analysis.Requests); // nothing to replay: every session was checkpointed by the drain
            Assert.Equal(0, server.Runtime.QuarantinedSessions);

            // The retry of the last request gets exactly the bytes the old version sent; the state is the old state.
            var (retry, retryBody) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 2, new { item = "b" });
            Assert.Equal(HttpStatusCode.OK, retry.StatusCode);
            Assert.Equal(lastReply, retryBody.GetRawText());
            var (next, nextBody) = await server.SendAsync(HttpMethod.Post, "/cart/add", session, 3, new { item = "c" });
            Assert.Equal(HttpStatusCode.OK, next.StatusCode);
            Assert.Equal(["a", "b", "c-v2"], Items(nextBody));
        }
    }

    [Fact]
    public async Task IdleSession_ExpiresAfterTheRetention_AndStaysEndedAfterRestart()
    {
        var time = new FakeTimeProvider(DateTimeOffset.Parse("2026-01-01T00:00:00Z", System.Globalization.CultureInfo.InvariantCulture));
        string idle;
        string active;
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.SessionIdleRetention = TimeSpan.FromMinutes(10), time, behavior: _behavior))
        {
            idle = await server.StartSessionAsync();
            active = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/cart/add", idle, 1, new { item = "a" });
            time.Advance(TimeSpan.FromMinutes(6));
            await server.SendAsync(HttpMethod.Post, "/cart/add", active, 1, new { item = "b" });
            time.Advance(TimeSpan.FromMinutes(5));

            var expired = server.App.Services.GetRequiredService<SessionExpiryService>().ExpireIdleSessions();

            Assert.Equal(1, expired);
            Assert.Equal(HttpStatusCode.NotFound, (await server.SendAsync(HttpMethod.Post, "/cart/add", idle, 2, new { item = "x" })).Response.StatusCode);
            Assert.Equal(HttpStatusCode.OK, (await server.SendAsync(HttpMethod.Get, "/cart", active, null)).Response.StatusCode);
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.SessionIdleRetention = TimeSpan.FromMinutes(10), time, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(1, server.Runtime.Sessions.Count);
            Assert.Equal(HttpStatusCode.NotFound, (await server.SendAsync(HttpMethod.Get, "/cart", idle, null)).Response.StatusCode);
        }
    }

    [Fact]
    public async Task Start_WithoutALogDirectory_FailsNamingTheOption()
    {
        var error = await Assert.ThrowsAsync<OptionsValidationException>(() => TestServer.StartAsync("", behavior: _behavior));

        Assert.Contains("LogDirectory", error.Message, StringComparison.Ordinal);
    }
}
