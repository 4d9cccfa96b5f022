using System.Diagnostics;

namespace PersistentServices.Client.Tests;

/// <summary>When the application stops (its service provider is disposed): idle sessions are ended at the service, pending ones kept.</summary>
public sealed class PersistentSessionClientStopTests : IDisposable
{
    private readonly TempDirectory _dir = new();
    private readonly FakeSessionServer _server = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose()
    {
        _server.Dispose();
        _dir.Dispose();
    }

    [Fact]
    public async Task DisposeAsync_IdleSessions_EndedAtTheService_AndNotTakenUpByTheNextStart()
    {
        await using (var host = ClientHost.Start(_dir.Path, _server))
        {
            _server.Hold = new TaskCompletionSource();
            var calls = Enumerable.Range(0, 3).Select(i => host.PostAsync($"c{i}")).ToList();
            while (_server.SessionsStarted < 3)
            {
                await Task.Delay(5, Ct);
            }

            _server.Hold.SetResult();
            await Task.WhenAll(calls);
        }

        Assert.Equal(["s1", "s2", "s3"], _server.Ended.Order());

        await using (var host = ClientHost.Start(_dir.Path, _server))
        {
            await host.PostAsync("after");
        }

        // A new session, not one of the ended ones (whose first attempt would have found it gone).
        Assert.Equal(4, _server.SessionsStarted);
        Assert.DoesNotContain(_server.Received, r => r.Session is "s1" or "s2" or "s3" && r.Sequence == 2);
    }

    [Fact]
    public async Task DisposeAsync_SessionWithAPendingRequest_KeptForRecoverAsync()
    {
        await using (var host = ClientHost.Start(_dir.Path, _server, options => options.MaxRetryAttempts = 1))
        {
            _server.UnavailableNext = 2;
            await Assert.ThrowsAsync<HttpRequestException>(() => host.PostAsync("pending", operationId: "op-1"));
        }

        Assert.Empty(_server.Ended);

        await using (var host = ClientHost.Start(_dir.Path, _server))
        {
            var recovered = new List<RecoveredReply>();
            await foreach (var reply in host.Client.RecoverAsync(Ct))
            {
                recovered.Add(reply);
            }

            Assert.Equal("op-1", Assert.Single(recovered).OperationId);
            Assert.Equal(1, _server.Executions["pending"]);
        }

        // Once its reply was handed back the session is idle again, and the next stop ends it.
        Assert.Equal(["s1"], _server.Ended);
    }

    [Fact]
    public async Task DisposeAsync_ServiceDoesNotAnswerTheEnd_BoundedByCloseSessionsTimeout_SessionKept()
    {
        var host = ClientHost.Start(_dir.Path, _server, options => options.CloseSessionsTimeout = TimeSpan.FromMilliseconds(200));
        await host.PostAsync("a");
        _server.DeleteHold = new TaskCompletionSource();

        var stopping = Stopwatch.StartNew();
        await host.DisposeAsync();
        stopping.Stop();
        _server.DeleteHold.SetResult();

        Assert.True(stopping.Elapsed < TimeSpan.FromSeconds(10), $"stopping took {stopping.Elapsed}");
        Assert.Empty(_server.Ended);

        // Not marked closed: the next start takes the session up again.
        await using var again = ClientHost.Start(_dir.Path, _server);
        await again.PostAsync("b");
        Assert.Equal(1, _server.SessionsStarted);
    }

    [Fact]
    public async Task DisposeAsync_CloseSessionsTimeoutZero_SessionsLeftToExpire()
    {
        await using (var host = ClientHost.Start(_dir.Path, _server, options => options.CloseSessionsTimeout = TimeSpan.Zero))
        {
            await host.PostAsync("a");
        }

        Assert.Empty(_server.Ended);
    }
}
