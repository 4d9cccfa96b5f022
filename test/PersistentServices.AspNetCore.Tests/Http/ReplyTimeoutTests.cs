using System.Diagnostics;
using System.Net;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using PersistentServices.AspNetCore.Tests.TestSupport;

namespace PersistentServices.AspNetCore.Tests.Http;

/// <summary>
/// <see cref="PersistentServicesOptions.ReplyTimeout"/>: a client waits at most that long for its request's execution (a
/// call to a service that is down is retried until it answers, docs/calls.md); then it gets 503 <c>reply-pending</c>
/// while the execution goes on, and a retry of the same request gets the one reply. Issue 38: clients waited minutes.
/// </summary>
public sealed class ReplyTimeoutTests : IAsyncLifetime
{
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();
    private TestServer _server = null!;

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public async ValueTask InitializeAsync()
    {
        _server = await TestServer.StartAsync(_dir.Path, o => o.ReplyTimeout = TimeSpan.FromMilliseconds(300), behavior: _behavior);
    }

    public async ValueTask DisposeAsync()
    {
        _behavior.Gate.TrySetResult();
        await _server.DisposeAsync();
        _dir.Dispose();
    }

    [Fact]
    public async Task ExecutionLongerThanTheReplyTimeout_ClientGetsReplyPending_TheExecutionGoesOn_ARetryGetsTheOneReply()
    {
        var session = await _server.StartSessionAsync();
        var before = await _server.SendAsync(HttpMethod.Get, "/shared", session, null);
        var total = before.Body.GetProperty("total").GetInt64();

        // The endpoint waits for the gate: the client is answered after the reply timeout, and told to retry.
        var started = Stopwatch.StartNew();
        var (first, firstBody) = await _server.SendAsync(HttpMethod.Post, "/shared/add-gated", session, 1, new { amount = 5, opId = "g1" });
        Assert.Equal(HttpStatusCode.ServiceUnavailable, first.StatusCode);
        Assert.Equal("urn:persistentservices:problem:reply-pending", firstBody.GetProperty("type").GetString());
        Assert.Equal(TimeSpan.FromSeconds(1), first.Headers.RetryAfter?.Delta);
        Assert.True(first.Headers.ConnectionClose == true, "an HTTP/1.1 client must not send its retry on the connection the execution still holds");
        Assert.True(started.Elapsed < TimeSpan.FromSeconds(5), $"answered after {started.Elapsed.TotalMilliseconds:0} ms");

        // A retry while it still runs waits as long, and is told the same.
        var (second, secondBody) = await _server.SendAsync(HttpMethod.Post, "/shared/add-gated", session, 1, new { amount = 5, opId = "g1" });
        Assert.Equal(HttpStatusCode.ServiceUnavailable, second.StatusCode);
        Assert.Equal("urn:persistentservices:problem:reply-pending", secondBody.GetProperty("type").GetString());
        Assert.Equal(0, _behavior.Count("shared/add-gated:completed"));

        // The execution finishes; the next retry gets its reply, and the reply's OnCompleted runs once, with that retry.
        _behavior.Gate.SetResult();
        HttpResponseMessage reply;
        System.Text.Json.JsonElement body;
        var deadline = DateTime.UtcNow.AddSeconds(10);
        do
        {
            (reply, body) = await _server.SendAsync(HttpMethod.Post, "/shared/add-gated", session, 1, new { amount = 5, opId = "g1" });
        }
        while (reply.StatusCode == HttpStatusCode.ServiceUnavailable && DateTime.UtcNow < deadline);

        Assert.Equal(HttpStatusCode.OK, reply.StatusCode);
        Assert.Equal(total + 5, body.GetProperty("total").GetInt64());
        var after = await _server.SendAsync(HttpMethod.Get, "/shared", session, null);
        Assert.Equal(total + 5, after.Body.GetProperty("total").GetInt64());
        await WaitForAsync(() => _behavior.Count("shared/add-gated:completed") == 1);

        // Once answered, a retry gets the same reply again at once; the session goes on with its next number.
        var (again, againBody) = await _server.SendAsync(HttpMethod.Post, "/shared/add-gated", session, 1, new { amount = 5, opId = "g1" });
        Assert.Equal(HttpStatusCode.OK, again.StatusCode);
        Assert.Equal(body.GetRawText(), againBody.GetRawText());
        var (next, _) = await _server.SendAsync(HttpMethod.Post, "/shared/add", session, 2, new { amount = 1, opId = "n2" });
        Assert.Equal(HttpStatusCode.OK, next.StatusCode);
        Assert.Equal(1, _behavior.Count("shared/add-gated:completed"));
    }

    [Fact]
    public async Task ARequestForASessionStillReplaying_IsAnswered503WithinTheReplyTimeout_NothingRuns_ARetryOnceReadyRunsIt()
    {
        // Issue 49: a request for a session still replaying (its recovery, or an orphan rollback waiting for a member)
        // waited without bound (30 s and more while a member was down). It is answered within ReplyTimeout now, and not admitted.
        var session = await _server.StartSessionAsync();
        _behavior.Gate.SetResult();
        var (first, _) = await _server.SendAsync(HttpMethod.Post, "/shared/add", session, 1, new { amount = 1, opId = "r1" });
        Assert.Equal(HttpStatusCode.OK, first.StatusCode);
        var replaying = _server.Session(session);
        replaying.BeginRollback();

        var started = Stopwatch.StartNew();
        var (waited, waitedBody) = await _server.SendAsync(HttpMethod.Post, "/shared/add", session, 2, new { amount = 1, opId = "r2" });
        Assert.Equal(HttpStatusCode.ServiceUnavailable, waited.StatusCode);
        Assert.Equal("urn:persistentservices:problem:unavailable", waitedBody.GetProperty("type").GetString());
        Assert.True(started.Elapsed < TimeSpan.FromSeconds(10), $"answered after {started.Elapsed.TotalMilliseconds:0} ms");
        Assert.Equal(1, replaying.LastSequence);

        replaying.FinishReplay(null);
        var (retried, _) = await _server.SendAsync(HttpMethod.Post, "/shared/add", session, 2, new { amount = 1, opId = "r2" });
        Assert.Equal(HttpStatusCode.OK, retried.StatusCode);
    }

    [Fact]
    public async Task ARequestWaitingForASessionsReplay_WhenTheHostStops_IsAnswered503AtOnce_NotAtTheShutdownTimeout()
    {
        // Issue 49: a member SIGTERMed while it started stopped before it replayed (event 1209); a calling member's request
        // waiting for a session's replay (no bound for a service) held the server's stop for its whole 30 s shutdown
        // timeout. Here an end client's wait (the default 30 s ReplyTimeout) shows the same: the stop ends it.
        await _server.DisposeAsync();
        var logs = new ListLoggerProvider();
        _server = await TestServer.StartAsync(_dir.Path, behavior: _behavior, build: b => b.Logging.AddProvider(logs));
        var session = await _server.StartSessionAsync();
        _behavior.Gate.SetResult();
        var (first, _) = await _server.SendAsync(HttpMethod.Post, "/shared/add", session, 1, new { amount = 1, opId = "s1" });
        Assert.Equal(HttpStatusCode.OK, first.StatusCode);
        var replaying = _server.Session(session);
        replaying.BeginRollback();

        var sending = _server.SendAsync(HttpMethod.Post, "/shared/add", session, 2, new { amount = 1, opId = "s2" });
        // The request is in the server (ASP.NET Core's "Request starting", event 1, for /shared/add a second time): whether
        // it waits for the replay already or reaches the wait after the stop began, the stop answers it.
        await WaitForAsync(() => logs.Entries.Count(e => e.EventId == 1 && e.Message.Contains("/shared/add", StringComparison.Ordinal)) >= 2 || sending.IsCompleted);
        var started = Stopwatch.StartNew();
        _server.App.Services.GetRequiredService<Microsoft.Extensions.Hosting.IHostApplicationLifetime>().StopApplication();
        var (stopped, body) = await sending;

        Assert.Equal(HttpStatusCode.ServiceUnavailable, stopped.StatusCode);
        Assert.Equal("urn:persistentservices:problem:unavailable", body.GetProperty("type").GetString());
        Assert.True(started.Elapsed < TimeSpan.FromSeconds(10), $"answered {started.Elapsed.TotalMilliseconds:0} ms after the stop began");
        Assert.Equal(1, replaying.LastSequence);
    }

    [Fact]
    public async Task ExecutionWithinTheReplyTimeout_IsAnsweredAsBefore()
    {
        // The default reply timeout (30 s), not this class's 300 ms: the request and its log force must not have to finish
        // in 300 ms on a 2-core machine busy with the tests that run in parallel with this one.
        await _server.DisposeAsync();
        _server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        var session = await _server.StartSessionAsync();
        _behavior.Gate.SetResult();
        var (reply, _) = await _server.SendAsync(HttpMethod.Post, "/shared/add-gated", session, 1, new { amount = 1, opId = "q1" });

        Assert.Equal(HttpStatusCode.OK, reply.StatusCode);
        Assert.Null(reply.Headers.ConnectionClose);
    }

    [Theory]
    [InlineData("reply", "ReplyTimeout")]
    [InlineData("drain", "DrainRetryTime")]
    public async Task InvalidTimeouts_FailAtStartup_NamingTheOption(string which, string option)
    {
        var error = await Assert.ThrowsAsync<OptionsValidationException>(() => TestServer.StartAsync(System.IO.Path.Combine(_dir.Path, "other"), o =>
        {
            if (which == "reply")
            {
                o.ReplyTimeout = TimeSpan.FromMilliseconds(10);
            }
            else
            {
                o.Calls.DrainRetryTime = TimeSpan.FromSeconds(-1);
            }
        }, behavior: _behavior));
        Assert.Contains(option, error.Message, StringComparison.Ordinal);
    }

    private static async Task WaitForAsync(Func<bool> condition)
    {
        var deadline = DateTime.UtcNow.AddSeconds(10);
        while (!condition())
        {
            Assert.True(DateTime.UtcNow < deadline, "the condition did not hold within 10 s");
            await Task.Delay(10, Ct);
        }
    }
}
