using System.Diagnostics.Metrics;
using System.Net;
using System.Threading.RateLimiting;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.RateLimiting;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;
using Microsoft.Extensions.Options;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.Sessions;

/// <summary>Admission that survives abuse (docs/capacity.md): never-used retention, caps, Retry-After, rate limiting, health, metrics.</summary>
public sealed class SessionAdmissionTests : IDisposable
{
    private static readonly DateTimeOffset Start = new(2026, 11, 24, 12, 0, 0, TimeSpan.Zero);
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static async Task<HttpResponseMessage> StartAsync(TestServer server, string? user = null, string? client = null)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, "/ps/sessions");
        if (user is not null)
        {
            request.Headers.Add("X-Test-User", user);
        }

        if (client is not null)
        {
            request.Headers.Add("X-Client", client);
        }

        return await server.Client.SendAsync(request, Ct);
    }

    private static async Task<string> SessionIdAsync(HttpResponseMessage response)
    {
        Assert.Equal(HttpStatusCode.Created, response.StatusCode);
        return response.Headers.GetValues("PS-Session").Single();
    }

    private static SessionExpiryService Expiry(TestServer server) => server.App.Services.GetRequiredService<SessionExpiryService>();

    [Fact]
    public async Task NeverUsedSession_ExpiresAfterTheUnusedRetention_AUsedOneLivesOnForTheIdleRetention()
    {
        var time = new FakeTimeProvider(Start);
        await using var server = await TestServer.StartAsync(_dir.Path, o =>
        {
            o.UnusedSessionRetention = TimeSpan.FromMinutes(1);
            o.SessionIdleRetention = TimeSpan.FromHours(1);
        }, time);
        var unused = await server.StartSessionAsync();
        var used = await server.StartSessionAsync();
        await server.SendAsync(HttpMethod.Post, "/counter/add", used, 1, new { opId = "a", amount = 1 });
        Assert.Equal(1, server.Runtime.Sessions.NeverUsed);

        time.Advance(TimeSpan.FromSeconds(61));
        Expiry(server).ExpireIdleSessions();

        var (gone, _) = await server.SendAsync(HttpMethod.Post, "/counter/add", unused, 1, new { opId = "b", amount = 1 });
        var (alive, _) = await server.SendAsync(HttpMethod.Post, "/counter/add", used, 2, new { opId = "c", amount = 1 });
        Assert.Equal(HttpStatusCode.NotFound, gone.StatusCode);
        Assert.Equal(HttpStatusCode.OK, alive.StatusCode);
        Assert.Equal(0, server.Runtime.Sessions.NeverUsed);
        Assert.Equal(1, server.Runtime.Sessions.Count);
    }

    [Fact]
    public async Task SessionOnlyRead_LivesWhileItIsRead_AndExpiresOnceTheReadsStop()
    {
        // A session used only by [PersistentReadOnly] requests (the bookstore's PriceGrabber) was expired as never used a
        // minute after its start, while its client was reading it every few seconds.
        var time = new FakeTimeProvider(Start);
        await using var server = await TestServer.StartAsync(_dir.Path, o =>
        {
            o.UnusedSessionRetention = TimeSpan.FromMinutes(1);
            o.SessionIdleRetention = TimeSpan.FromHours(1);
        }, time);
        var read = await server.StartSessionAsync();
        for (var i = 0; i < 5; i++)
        {
            time.Advance(TimeSpan.FromSeconds(40));
            Expiry(server).ExpireIdleSessions();
            var (reply, _) = await server.SendAsync(HttpMethod.Get, "/cart", read, null);
            Assert.Equal(HttpStatusCode.OK, reply.StatusCode);
        }

        time.Advance(TimeSpan.FromSeconds(61));
        Expiry(server).ExpireIdleSessions();
        var (gone, _) = await server.SendAsync(HttpMethod.Get, "/cart", read, null);
        Assert.Equal(HttpStatusCode.NotFound, gone.StatusCode);
    }

    [Fact]
    public async Task MaxSessions_Reached_429WithARetryAfterThatSaysWhenASlotFrees_ThenASessionStartsThen()
    {
        var time = new FakeTimeProvider(Start);
        await using var server = await TestServer.StartAsync(_dir.Path, o =>
        {
            o.MaxSessions = 3;
            o.MaxSessionsPerAddress = 3; // the table's cap, not one address's share (by default at most half of it)
            o.UnusedSessionRetention = TimeSpan.FromMinutes(1);
        }, time);
        for (var i = 0; i < 3; i++)
        {
            await server.StartSessionAsync();
        }

        // The sweep (every 6 s: a tenth of the unused retention) notes the next expiry: one minute after the starts.
        Expiry(server).ExpireIdleSessions();
        time.Advance(TimeSpan.FromSeconds(20));

        using var refused = await StartAsync(server);
        Assert.Equal((HttpStatusCode)429, refused.StatusCode);
        Assert.Equal(TimeSpan.FromSeconds(40), refused.Headers.RetryAfter?.Delta);
        Assert.Contains("too-many-sessions", await refused.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);

        time.Advance(TimeSpan.FromSeconds(40));
        Assert.Equal(3, Expiry(server).ExpireIdleSessions());
        await SessionIdAsync(await StartAsync(server));
    }

    [Fact]
    public async Task MaxSessionsPerOwner_CapsOnePrincipal_NotOthers_AndAnEndedSessionFreesItsSlot()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, o => o.MaxSessionsPerOwner = 2);
        var first = await SessionIdAsync(await StartAsync(server, user: "alice"));
        await SessionIdAsync(await StartAsync(server, user: "alice"));

        using var refused = await StartAsync(server, user: "alice");
        Assert.Equal((HttpStatusCode)429, refused.StatusCode);
        Assert.Contains("too-many-owner-sessions", await refused.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);
        Assert.True(refused.Headers.RetryAfter?.Delta >= TimeSpan.FromSeconds(1));
        await SessionIdAsync(await StartAsync(server, user: "bob"));
        await SessionIdAsync(await StartAsync(server));
        await SessionIdAsync(await StartAsync(server));
        await SessionIdAsync(await StartAsync(server));

        using var end = new HttpRequestMessage(HttpMethod.Delete, $"/ps/sessions/{first}");
        end.Headers.Add("X-Test-User", "alice");
        using var ended = await server.Client.SendAsync(end, Ct);
        Assert.Equal(HttpStatusCode.NoContent, ended.StatusCode);
        await SessionIdAsync(await StartAsync(server, user: "alice"));
    }

    [Fact]
    public async Task SessionEndpoints_TakeRateLimiting_OneClientIsLimitedAnotherStillGetsASession()
    {
        await using var server = await TestServer.StartAsync(_dir.Path,
            build: builder => builder.Services.AddRateLimiter(limiter =>
            {
                limiter.RejectionStatusCode = StatusCodes.Status429TooManyRequests;
                limiter.AddPolicy("per-client", context => RateLimitPartition.GetFixedWindowLimiter(
                    context.Request.Headers["X-Client"].ToString(),
                    _ => new FixedWindowRateLimiterOptions { PermitLimit = 3, Window = TimeSpan.FromMinutes(1) }));
            }),
            sessionEndpoints: sessions => sessions.RequireRateLimiting("per-client"),
            beforePersistentServices: app => app.UseRateLimiter());
        for (var i = 0; i < 3; i++)
        {
            await SessionIdAsync(await StartAsync(server, client: "flood"));
        }

        using var limited = await StartAsync(server, client: "flood");
        Assert.Equal((HttpStatusCode)429, limited.StatusCode);
        var other = await SessionIdAsync(await StartAsync(server, client: "other"));

        // Persistent requests are not behind the session endpoints' policy.
        for (var i = 1; i <= 5; i++)
        {
            var (response, _) = await server.SendAsync(HttpMethod.Post, "/counter/add", other, i, new { opId = "r" + i, amount = 1 });
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        }
    }

    [Fact]
    public async Task Health_TurnsDegradedNearMaxSessions()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, o => (o.MaxSessions, o.MaxSessionsPerAddress) = (10, 10)); // the table, not one address's share
        for (var i = 0; i < 8; i++)
        {
            await server.StartSessionAsync();
        }

        using var healthy = await server.Client.GetAsync("/health/ready", Ct);
        Assert.Equal("Healthy", await healthy.Content.ReadAsStringAsync(Ct));
        await server.StartSessionAsync();
        using var degraded = await server.Client.GetAsync("/health/ready", Ct);
        Assert.Equal("Degraded", await degraded.Content.ReadAsStringAsync(Ct));
    }

    [Fact]
    public async Task Metrics_LiveNeverUsedAndHeldBytes_AreObserved()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        var used = await server.StartSessionAsync();
        await server.StartSessionAsync();
        await server.SendAsync(HttpMethod.Post, "/counter/add", used, 1, new { opId = "m", amount = 1 });

        // The gauges of this server's meter only (from its own IMeterFactory): another service in the process has its own.
        var meters = server.App.Services.GetRequiredService<IMeterFactory>();
        using var live = new MetricCollector<int>(meters, "PersistentServices", "persistentservices.sessions.live");
        using var neverUsed = new MetricCollector<int>(meters, "PersistentServices", "persistentservices.sessions.never_used");
        using var held = new MetricCollector<long>(meters, "PersistentServices", "persistentservices.sessions.held_bytes");
        using var budget = new MetricCollector<long>(meters, "PersistentServices", "persistentservices.sessions.memory_budget");
        live.RecordObservableInstruments();
        neverUsed.RecordObservableInstruments();
        held.RecordObservableInstruments();
        budget.RecordObservableInstruments();

        Assert.Equal(2, live.LastMeasurement?.Value);
        Assert.Equal(1, neverUsed.LastMeasurement?.Value);
        Assert.True(held.LastMeasurement?.Value > 0);
        Assert.Equal(PersistentServicesOptions.DefaultSessionMemoryBudgetBytes(), budget.LastMeasurement?.Value);
        Assert.Equal(2, server.Runtime.Sessions.Count);
        Assert.Equal(1, server.Runtime.Sessions.NeverUsed);
        Assert.True(server.Runtime.Sessions.Memory.HeldBytes > 0);
        Assert.Equal(PersistentServicesOptions.DefaultSessionMemoryBudgetBytes(), server.Runtime.Sessions.Memory.BudgetBytes);
    }

    [Theory]
    [InlineData("unused", "UnusedSessionRetention")]
    [InlineData("owner", "MaxSessionsPerOwner")]
    [InlineData("budget", "SessionMemoryBudgetBytes")]
    [InlineData("reply", "MaxBufferedReplyBytes")]
    public async Task InvalidAdmissionOptions_FailAtStartup_NamingTheOption(string which, string option)
    {
        var error = await Assert.ThrowsAsync<OptionsValidationException>(() => TestServer.StartAsync(_dir.Path, o =>
        {
            switch (which)
            {
                case "unused": o.UnusedSessionRetention = o.SessionIdleRetention + TimeSpan.FromSeconds(1); break;
                case "owner": o.MaxSessionsPerOwner = 0; break;
                case "budget": o.SessionMemoryBudgetBytes = 1000; break;
                default: o.MaxBufferedReplyBytes = 1 << 20; break;
            }
        }));
        Assert.Contains(option, error.Message, StringComparison.Ordinal);
    }
}
