using System.Net;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Hosting;

/// <summary>
/// A SIGTERM soon after a crash, while recovered sessions still replay (a rolling upgrade that restarts a node its restarter
/// just brought back): the drain lets the replay finish before its checkpoint. Before, the checkpoint skipped a session
/// that was not ready, the drain said "the next start replays nothing", and the next start (in the bookstore's kills and
/// upgrades, another build) replayed the session's requests, and quarantined five sessions whose replies had changed.
/// </summary>
public sealed class DrainWhileReplayingTests : IDisposable
{
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    [Fact]
    public async Task AStopWhileASessionReplays_WaitsForItsReplay_AndTheNextStartReplaysNothing()
    {
        _behavior.Gate.TrySetResult();
        var first = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        var session = await first.StartSessionAsync();
        var (answered, _) = await first.SendAsync(HttpMethod.Post, "/cart/slow", session, 1, new { });
        Assert.Equal(HttpStatusCode.OK, answered.StatusCode);
        await first.CrashAsync();

        // Restarted: the session's request replays and waits at the gate, so the session is not ready when the stop begins.
        _behavior.Reset();
        var second = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        while (_behavior.Count("cart/slow") == 0)
        {
            await Task.Delay(5, Ct);
        }

        var stopping = second.DisposeAsync().AsTask();
        while (second.Availability.Stage != RecoveryStage.Draining)
        {
            Assert.False(stopping.IsCompleted, "the host stopped before its drain began");
            await Task.Delay(5, Ct);
        }

        Assert.False(stopping.IsCompleted);
        _behavior.Gate.TrySetResult();
        await stopping;

        // The drain's checkpoint held the session: nothing of it is replayed again.
        await using var third = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        await third.RecoveryCompletion;
        Assert.Equal(0, third.Runtime.Analysis!.Requests);
        Assert.Equal(1, _behavior.Count("cart/slow"));
    }
}
