using System.Text.Json;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging.Abstractions;
using Microsoft.Extensions.Options;

namespace PersistentServices.Client.Tests;

/// <summary>The exactly-once client against a hand-written session server, with its store on a real log.</summary>
public sealed class PersistentSessionClientTests : IDisposable
{
    private readonly TempDirectory _dir = new();
    private readonly FakeSessionServer _server = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose()
    {
        _server.Dispose();
        _dir.Dispose();
    }

    private static long Seq(string reply) => JsonDocument.Parse(reply).RootElement.GetProperty("seq").GetInt64();

    private static async Task<List<RecoveredReply>> RecoverAllAsync(PersistentSessionClient client)
    {
        var replies = new List<RecoveredReply>();
        await foreach (var reply in client.RecoverAsync(Ct))
        {
            replies.Add(reply);
        }

        return replies;
    }

    [Fact]
    public async Task SendAsync_SequentialCalls_NumberedInOneSession_EachExecutedOnce()
    {
        await using var host = ClientHost.Start(_dir.Path, _server);

        var first = await host.PostAsync("a");
        var second = await host.PostAsync("b");

        Assert.Equal(1, Seq(first));
        Assert.Equal(2, Seq(second));
        Assert.Equal(1, _server.SessionsStarted);
        Assert.Equal(1, _server.Executions["a"]);
        Assert.Equal(0, await host.Client.CountPendingAsync(Ct));
    }

    [Fact]
    public async Task SendAsync_ReplyLostAfterTheEffect_RetriedWithTheSameIds_ExecutedOnce()
    {
        await using var host = ClientHost.Start(_dir.Path, _server);
        _server.LoseRepliesNext = 2;

        var reply = await host.PostAsync("lost");

        Assert.Equal(1, _server.Executions["lost"]);
        Assert.Equal(3, _server.Received.Count);
        Assert.All(_server.Received, r => Assert.Equal(("s1", 1L), r));
        Assert.Equal(1, JsonDocument.Parse(reply).RootElement.GetProperty("count").GetInt32());
    }

    [Fact]
    public async Task SendAsync_503WithRetryAfter_SentAgainUntilAnswered()
    {
        await using var host = ClientHost.Start(_dir.Path, _server);
        _server.UnavailableNext = 3;

        var reply = await host.PostAsync("recovering");

        Assert.Equal(1, Seq(reply));
        Assert.Equal(4, _server.Received.Count);
        Assert.Equal(1, _server.Executions["recovering"]);
    }

    [Fact]
    public async Task SendAsync_ReplyHeadersAndStatus_AreThoseTheServiceSent()
    {
        await using var host = ClientHost.Start(_dir.Path, _server);
        using var request = new HttpRequestMessage(HttpMethod.Post, "/op") { Content = new StringContent("h") };

        using var response = await host.Http.SendAsync(request, Ct);

        Assert.Equal(System.Net.HttpStatusCode.OK, response.StatusCode);
        Assert.Equal("kept", response.Headers.GetValues("X-Reply").Single());
        Assert.Equal("application/json", response.Content.Headers.ContentType?.MediaType);
    }

    [Fact]
    public async Task SendAsync_ConcurrentCalls_UseAPoolOfSessions_OneRequestAtATimeEach()
    {
        await using var host = ClientHost.Start(_dir.Path, _server, options => options.MaxSessionsPerService = 4);
        _server.Hold = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);

        var calls = Enumerable.Range(0, 12).Select(i => host.PostAsync("c" + i)).ToList();
        while (_server.Received.Count < 4)
        {
            await Task.Delay(5, Ct);
        }

        await Task.Delay(50, Ct);
        var heldAtOnce = _server.Received.Count;
        _server.Hold.SetResult();
        await Task.WhenAll(calls);

        Assert.Equal(4, heldAtOnce);
        Assert.Equal(4, _server.SessionsStarted);
        Assert.Equal(1, _server.MaxConcurrentPerSession);
        Assert.All(Enumerable.Range(0, 12), i => Assert.Equal(1, _server.Executions["c" + i]));
    }

    [Fact]
    public async Task SendAsync_FirstAttemptFindsTheSessionExpired_StoredAgainInANewSession()
    {
        await using var host = ClientHost.Start(_dir.Path, _server);
        await host.PostAsync("before");
        _server.Expire["s1"] = true;

        var reply = await host.PostAsync("after");

        Assert.Equal(1, Seq(reply));
        Assert.Equal(2, _server.SessionsStarted);
        Assert.Equal(1, _server.Executions["after"]);
    }

    [Fact]
    public async Task SendAsync_RetryFindsTheSessionGone_OutcomeUnknown_NotSentAgain()
    {
        await using var host = ClientHost.Start(_dir.Path, _server);
        await host.PostAsync("before");
        _server.LoseRepliesNext = 1;
        _server.EndSessionWithLostReply = true;

        await Assert.ThrowsAsync<PersistentRequestOutcomeUnknownException>(() => host.PostAsync("gone"));

        Assert.Equal(1, _server.Executions["gone"]);
        Assert.Equal(0, await host.Client.CountPendingAsync(Ct));
    }

    [Fact]
    public async Task RecoverAsync_AfterACallGaveUp_ResendsWithTheSameIds_AndHandsTheReplyBackOnce()
    {
        await using (var host = ClientHost.Start(_dir.Path, _server, options => options.MaxRetryAttempts = 2))
        {
            await host.PostAsync("first");
            _server.UnavailableNext = 3;
            await Assert.ThrowsAsync<HttpRequestException>(() => host.PostAsync("pending", operationId: "op-42"));
            Assert.Equal(1, await host.Client.CountPendingAsync(Ct));
        }

        // The client process restarts on the same store.
        await using (var host = ClientHost.Start(_dir.Path, _server))
        {
            Assert.Equal(1, await host.Client.CountPendingAsync(Ct));
            var recovered = await RecoverAllAsync(host.Client);
            var again = await RecoverAllAsync(host.Client);
            var next = await host.PostAsync("next");

            var reply = Assert.Single(recovered);
            Assert.Equal("op-42", reply.OperationId);
            Assert.Equal(HttpMethod.Post, reply.Method);
            Assert.Equal(new Uri("http://svc.test/op"), reply.RequestUri);
            Assert.Equal(2, Seq(await reply.Response!.Content.ReadAsStringAsync(Ct)));
            Assert.Empty(again);
            Assert.Equal(3, Seq(next)); // the idle session went back to the pool; "next" acknowledged reply 2
            Assert.Equal(1, _server.SessionsStarted);
            Assert.Equal(1, _server.Executions["pending"]);
            Assert.Equal(0, await host.Client.CountPendingAsync(Ct));
        }
    }

    [Fact]
    public async Task RecoverAsync_ReplyStoredButNotHandedOver_HandedBackWithoutSendingAgain()
    {
        // The state a crash between storing the reply (t6) and handing it over leaves behind.
        await using (var store = await ClientStore.OpenAsync(_dir.Path, NullLogger.Instance, Ct))
        {
            var entry = await store.AddAsync(new StoredRequest(0, "s9", 4, "POST", "http://svc.test/op", "op-7", [], "x"u8.ToArray()), Ct);
            await store.AddReplyAsync(entry, new StoredReply(entry.Id, 201, [new("Content-Type", "text/plain")], "stored"u8.ToArray()), Ct);
        }

        await using var host = ClientHost.Start(_dir.Path, _server);
        var recovered = await RecoverAllAsync(host.Client);
        var next = await host.PostAsync("next");

        var reply = Assert.Single(recovered);
        Assert.Equal("op-7", reply.OperationId);
        Assert.Equal(System.Net.HttpStatusCode.Created, reply.Response!.StatusCode);
        Assert.Equal("stored", await reply.Response.Content.ReadAsStringAsync(Ct));
        Assert.DoesNotContain(("s9", 4L), _server.Received);
        Assert.Contains(("s9", 5L), _server.Received); // the idle session s9 takes request 5 (the fake no longer knows it: moved)
        Assert.Equal(1, Seq(next));
    }

    [Fact]
    public async Task Options_WithoutAStoreDirectory_AreRefused()
    {
        var services = new ServiceCollection();
        services.AddHttpClient("svc").AddPersistentSessions(_ => { });
        await using var provider = services.BuildServiceProvider();

        var error = Assert.Throws<OptionsValidationException>(() => provider.GetRequiredService<IOptionsMonitor<PersistentClientOptions>>().Get("svc"));

        Assert.Contains("StoreDirectory", error.Message, StringComparison.Ordinal);
    }

    [Theory]
    [InlineData(-1)]
    [InlineData(1025)]
    public async Task Options_FinishedOperationRetentionOutOfRange_IsRefusedNamingIt(int retention)
    {
        var services = new ServiceCollection();
        services.AddHttpClient("svc").AddPersistentSessions(o => { o.StoreDirectory = _dir.Path; o.FinishedOperationRetention = retention; });
        await using var provider = services.BuildServiceProvider();

        var error = Assert.Throws<OptionsValidationException>(() => provider.GetRequiredService<IOptionsMonitor<PersistentClientOptions>>().Get("svc"));

        Assert.Contains("FinishedOperationRetention", error.Message, StringComparison.Ordinal);
    }
}
