using System.Net;
using System.Text.Json;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Replication;

namespace PersistentServices.AspNetCore.Tests.Replication;

/// <summary>
/// A synchronous primary whose replicas do not answer (docs/replication.md, "Bounded waits"): a session start and a
/// read-only request that shows state not yet replicated answer <c>503 reply-pending</c> within ReplyTimeout, as a
/// persistent request does, on the injected clock (<see cref="ManualTimeProvider"/>: the timeout passes when the test moves
/// it). The replicas' return is the watermark hearing from one (<see cref="ReplicationWatermark.Report"/>).
/// </summary>
public sealed class BoundedReplicationWaitsTests : IDisposable
{
    private const string PeerKey = "bounded-waits-test-peer-key-0123456789";
    private static readonly TimeSpan ReplyTimeout = TimeSpan.FromSeconds(5);

    private readonly TempDirectory _dir = new();
    private readonly ManualTimeProvider _time = new(new DateTimeOffset(2026, 12, 2, 12, 0, 0, TimeSpan.Zero));
    private readonly ListLoggerProvider _logs = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task ASessionStart_WhileTooFewReplicasAnswer_Gets503ReplyPendingWithinReplyTimeout_NothingStarts_AndAStartOnceTheyAreBackServes()
    {
        await using var server = await StartPrimaryAsync();
        var watermark = server.App.Services.GetRequiredService<ReplicationNode>().Watermark!;
        Assert.Equal(1, watermark.Required);

        using (var pending = await AfterReplyTimeoutAsync(() => server.Client.PostAsync("/ps/sessions", null, Ct)))
        {
            var problem = await ProblemAsync(pending);
            Assert.Equal(HttpStatusCode.ServiceUnavailable, pending.StatusCode);
            Assert.EndsWith("reply-pending", problem.GetProperty("type").GetString(), StringComparison.Ordinal);
            Assert.Contains("nothing started", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
            Assert.False(pending.Headers.Contains("PS-Session"));
        }

        // Nothing started: no session in the table, its slot given back, the start ended in the log (event 1122 says so).
        Assert.Equal(0, server.Runtime.Sessions.Count);
        Assert.Single(_logs.Messages(1122));

        // The replicas are back: a new start is acknowledged and its session serves.
        watermark.Report(0, long.MaxValue / 2);
        var session = await server.StartSessionAsync();
        var (reply, _) = await server.SendAsync(HttpMethod.Post, "/counter/add", session, 1, new { opId = "a", amount = 3 });
        Assert.Equal(HttpStatusCode.OK, reply.StatusCode);
        Assert.Equal(1, server.Runtime.Sessions.Count);
    }

    [Fact]
    public async Task AReadOnlyRequest_ShowingStateNotYetReplicated_Gets503ReplyPendingWithinReplyTimeout_AndARetryOnceReplicatedGetsTheAnswer()
    {
        await using var server = await StartPrimaryAsync();
        var log = server.Runtime.Log;
        var watermark = server.App.Services.GetRequiredService<ReplicationNode>().Watermark!;

        // Two sessions while a replica holds everything so far.
        var writer = await StartReplicatedAsync(server, watermark);
        var reader = await StartReplicatedAsync(server, watermark);

        // The replicas stop answering: a write of a shared value gets 503 reply-pending (it goes on, in memory only here).
        var (written, _) = await AfterReplyTimeoutAsync(() => server.SendAsync(HttpMethod.Post, "/shared/add", writer, 1, new { opId = "w", amount = 7 }));
        Assert.Equal(HttpStatusCode.ServiceUnavailable, written.StatusCode);

        // A read-only request that shows it: 503 reply-pending within ReplyTimeout, not a wait until the replicas return.
        var (unread, problem) = await AfterReplyTimeoutAsync(() => server.SendAsync(HttpMethod.Get, "/shared", reader, null));
        Assert.Equal(HttpStatusCode.ServiceUnavailable, unread.StatusCode);
        Assert.EndsWith("reply-pending", problem.GetProperty("type").GetString(), StringComparison.Ordinal);
        Assert.Contains("send the request again", problem.GetProperty("detail").GetString(), StringComparison.Ordinal);
        Assert.Single(_logs.Messages(1123));

        // Replicated: the retry gets the answer, and so does the writer's.
        watermark.Report(0, log.TailAddress);
        var (answered, body) = await server.SendAsync(HttpMethod.Get, "/shared", reader, null);
        Assert.Equal(HttpStatusCode.OK, answered.StatusCode);
        Assert.Equal(7, body.GetProperty("total").GetInt64());
        var (resent, _) = await server.SendAsync(HttpMethod.Post, "/shared/add", writer, 1, new { opId = "w", amount = 7 });
        Assert.Equal(HttpStatusCode.OK, resent.StatusCode);
    }

    /// <summary>Starts a session, the watermark moved to the log's tail (a replica that holds everything) until it is acknowledged.</summary>
    private static async Task<string> StartReplicatedAsync(TestServer server, ReplicationWatermark watermark)
    {
        var start = server.StartSessionAsync();
        while (!start.IsCompleted)
        {
            watermark.Report(0, server.Runtime.Log.TailAddress);
            await Task.Delay(5, Ct);
        }

        return await start;
    }

    /// <summary>Sends; once the request waits on the clock (its reply timeout's timer is set), moves the clock past ReplyTimeout and returns the answer.</summary>
    private async Task<T> AfterReplyTimeoutAsync<T>(Func<Task<T>> send)
    {
        var before = _time.PendingTimers;
        var answer = send();
        var deadline = DateTime.UtcNow.AddSeconds(10);
        while (_time.PendingTimers <= before && !answer.IsCompleted)
        {
            Assert.True(DateTime.UtcNow < deadline, "the request never waited on the reply timeout's clock (it waits without a bound)");
            await Task.Delay(10, Ct);
        }

        _time.Advance(ReplyTimeout);
        return await answer.WaitAsync(TimeSpan.FromSeconds(10), Ct);
    }

    private static async Task<JsonElement> ProblemAsync(HttpResponseMessage response)
        => JsonDocument.Parse(await response.Content.ReadAsStringAsync(Ct)).RootElement.Clone();

    private Task<TestServer> StartPrimaryAsync()
        => TestServer.StartAsync(_dir.Path, o =>
        {
            o.ServiceName = "orders";
            o.ReplyTimeout = ReplyTimeout;
            o.Calls.PeerKey = PeerKey;
            o.Replication.Role = ReplicationRole.Primary;
            o.Replication.Replicas.Add(new Uri("http://127.0.0.1:1/")); // nobody there: the replicas do not answer
            o.Replication.Replicas.Add(new Uri("http://127.0.0.1:2/"));
        }, _time, build: b => b.Logging.AddProvider(_logs));
}
