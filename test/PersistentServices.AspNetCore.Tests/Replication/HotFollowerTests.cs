using System.Net;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;
using PersistentServices.Replication;

namespace PersistentServices.AspNetCore.Tests.Replication;

/// <summary>
/// A replica's hot follower (docs/replication.md, "Hot followers"): a primary ships to a replica in the same test process
/// and a second replica (three applications, each its own log); the replica replays every answered request as it arrives, and its promotion
/// takes the scan over where the follower stopped, with nothing left to replay; the sessions it serves then hold exactly
/// what the primary acknowledged. A replay on the replica that diverges throws the follower's state away, and the
/// promotion recovers the copy as a restart does.
/// </summary>
public sealed class HotFollowerTests : IDisposable
{
    private const string PeerKey = "hot-follower-test-peer-key-0123456789ab";

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    /// <summary>Node <paramref name="index"/> of a group of three on <paramref name="ports"/> (a promotion needs a majority to take its term).</summary>
    private Task<TestServer> StartAsync(int index, int[] ports, TestBehavior? behavior = null)
        => ReplicationTestNode.StartAsync(
            Path.Combine(_dir.Path, $"node{index}"), PeerKey, index == 0 ? ReplicationRole.Primary : ReplicationRole.Replica, ports[index], ports.Where((_, i) => i != index), behavior);

    private static async Task WaitUntilAsync(Func<bool> done, Func<string> why)
    {
        var deadline = DateTime.UtcNow.AddSeconds(30);
        while (!done())
        {
            Assert.True(DateTime.UtcNow < deadline, why());
            await Task.Delay(20, Ct);
        }
    }

    private static async Task PromoteAsync(TestServer replica, long term)
    {
        using var promote = ReplicationEndpointsTests.Shipment($"term={term};node={ReplicationEndpointsTests.ThisNode}", [], key: PeerKey, path: ReplicationEndpoints.PromotePath);
        using var response = await replica.Client.SendAsync(promote, Ct);
        Assert.True(response.StatusCode == HttpStatusCode.OK, await response.Content.ReadAsStringAsync(Ct));
    }

    /// <summary>The next request of the session at <paramref name="server"/>, once it serves (a promoted node recovers first).</summary>
    private static async Task<System.Text.Json.JsonElement> SendWhenServingAsync(TestServer server, string path, string session, long seq, object body)
    {
        var deadline = DateTime.UtcNow.AddSeconds(30);
        while (true)
        {
            var (response, json) = await server.SendAsync(HttpMethod.Post, path, session, seq, body);
            using (response)
            {
                if (response.StatusCode == HttpStatusCode.OK)
                {
                    return json;
                }

                Assert.True(DateTime.UtcNow < deadline, $"request {seq} was not answered within 30 s: {(int)response.StatusCode}");
            }

            await Task.Delay(20, Ct);
        }
    }

    [Fact]
    public async Task AReplica_ReplaysWhatThePrimaryAnswered_AndItsPromotionReplaysNothingMore_ServingExactlyWhatWasAcknowledged()
    {
        int[] ports = PersistentServices.TestSupport.LoopbackPorts.Free(3);
        var behavior = new TestBehavior();
        await using var replica = await StartAsync(1, ports, behavior);
        await using var other = await StartAsync(2, ports);
        await using var primary = await StartAsync(0, ports);
        var session = await primary.StartSessionAsync();
        long total = 0;
        for (var seq = 1; seq <= 20; seq++)
        {
            total += seq;
            var (response, body) = await primary.SendAsync(HttpMethod.Post, "/counter/add", session, seq, new AddAmount($"op{seq}", seq));
            using (response)
            {
                Assert.Equal(HttpStatusCode.OK, response.StatusCode);
                Assert.Equal(total, body.GetProperty("total").GetInt64());
            }
        }

        // Every answered request is replayed on the replica, before any promotion.
        var follower = replica.App.Services.GetRequiredService<HotFollower>();
        await WaitUntilAsync(() => follower.Replayed >= 20 && follower.LagRequests == 0,
            () => $"the follower replayed {follower.Replayed} of 20 requests ({follower.LagRequests} waiting, stopped: {follower.StoppedBecause})");
        Assert.Equal(20, Enumerable.Range(1, 20).Sum(i => behavior.Count($"counter:op{i}")));
        using (var status = await replica.Client.SendAsync(ReplicationEndpointsTests.StatusRequest(PeerKey), Ct))
        {
            var replay = System.Text.Json.JsonDocument.Parse(await status.Content.ReadAsStringAsync(Ct)).RootElement.GetProperty("replica").GetProperty("replay");
            Assert.True(replay.GetProperty("following").GetBoolean());
            Assert.Equal(0, replay.GetProperty("lagRequests").GetInt64());
            Assert.True(replay.GetProperty("replayed").GetInt64() >= 20);
        }

        await PromoteAsync(replica, term: 2);

        // The retry of the last request gets the reply the follower's replay rebuilt; the next one runs once, on top of all 20.
        var retried = await SendWhenServingAsync(replica, "/counter/add", session, 20, new AddAmount("op20", 20));
        Assert.Equal(total, retried.GetProperty("total").GetInt64());
        var next = await SendWhenServingAsync(replica, "/counter/add", session, 21, new AddAmount("op21", 21));
        Assert.Equal(total + 21, next.GetProperty("total").GetInt64());
        Assert.Equal(1, behavior.Count("counter:op21"));
        Assert.Equal(1, behavior.Count("counter:op20")); // replayed once by the follower, never again

        var runtime = replica.App.Services.GetRequiredService<PersistentRuntime>();
        Assert.NotNull(follower.HandedOverAt);
        Assert.Equal(follower.HandedOverAt, runtime.Analysis!.ScannedFrom);

        // The open's verification walk went on from what the follower had verified of the copy: the whole log then.
        Assert.Equal(follower.HandedOverAt, runtime.Log.OpenReport.VerifiedBefore);
        Assert.Empty(runtime.Log.OpenReport.Problems);
    }

    [Fact]
    public async Task AReplayThatDivergesOnTheReplica_StopsTheFollower_AndThePromotionRecoversTheCopyAsARestartDoes()
    {
        int[] ports = PersistentServices.TestSupport.LoopbackPorts.Free(3);
        var behavior = new TestBehavior { Salt = "-changed" }; // this replica's build answers /cart/add differently
        await using var replica = await StartAsync(1, ports, behavior);
        await using var other = await StartAsync(2, ports);
        await using var primary = await StartAsync(0, ports);
        var diverging = await primary.StartSessionAsync();
        var counting = await primary.StartSessionAsync();
        var (added, _) = await primary.SendAsync(HttpMethod.Post, "/cart/add", diverging, 1, new AddItem("book"));
        using (added)
        {
            Assert.Equal(HttpStatusCode.OK, added.StatusCode);
        }

        var (counted, _) = await primary.SendAsync(HttpMethod.Post, "/counter/add", counting, 1, new AddAmount("op1", 5));
        using (counted)
        {
            Assert.Equal(HttpStatusCode.OK, counted.StatusCode);
        }

        var follower = replica.App.Services.GetRequiredService<HotFollower>();
        await WaitUntilAsync(() => follower.StoppedBecause is not null, () => $"the follower did not stop (replayed {follower.Replayed})");
        Assert.Contains("different reply", follower.StoppedBecause, StringComparison.Ordinal);

        await PromoteAsync(replica, term: 2);

        // Recovered as at a restart: the other session serves, the diverging one is quarantined as recovery always does.
        var next = await SendWhenServingAsync(replica, "/counter/add", counting, 2, new AddAmount("op2", 7));
        Assert.Equal(12, next.GetProperty("total").GetInt64());
        Assert.Null(follower.HandedOverAt);
        var runtime = replica.App.Services.GetRequiredService<PersistentRuntime>();
        Assert.True(runtime.Sessions.All.Single(s => s.Diverged is not null || s.QuarantineReason is not null) is not null);
    }

    [Fact]
    public async Task ACutOfTheCopy_MakesTheFollowerStartOver_AndThePromotionServesExactlyWhatWasAcknowledged()
    {
        int[] ports = PersistentServices.TestSupport.LoopbackPorts.Free(3);
        var behavior = new TestBehavior();
        await using var replica = await StartAsync(1, ports, behavior);
        await using var other = await StartAsync(2, ports);
        await using var primary = await StartAsync(0, ports);
        var session = await primary.StartSessionAsync();
        var copy = replica.App.Services.GetRequiredService<ReplicationNode>().Replica!;
        var primaryLog = primary.App.Services.GetRequiredService<PersistentRuntime>().Log;
        long total = 0;
        async Task SendAsync(int seq)
        {
            total += seq;
            var (response, body) = await primary.SendAsync(HttpMethod.Post, "/counter/add", session, seq, new AddAmount($"op{seq}", seq));
            using (response)
            {
                Assert.Equal(HttpStatusCode.OK, response.StatusCode);
                Assert.Equal(total, body.GetProperty("total").GetInt64());
            }
        }

        for (var seq = 1; seq <= 10; seq++)
        {
            await SendAsync(seq);
        }

        // A place in the copy where a commit ends, and the checksum of the bytes below it (the primary's are the same).
        long cut = 0;
        uint cutSum = 0;
        await WaitUntilAsync(() =>
        {
            var until = copy.DurableUntil;
            var sum = copy.TailChecksum();
            (cut, cutSum) = (until, sum);
            return until == primaryLog.LocalDurableUntil && copy.DurableUntil == until;
        }, () => $"the copy holds until {copy.DurableUntil}, the primary {primaryLog.LocalDurableUntil}");

        for (var seq = 11; seq <= 20; seq++)
        {
            await SendAsync(seq);
        }

        var follower = replica.App.Services.GetRequiredService<HotFollower>();
        await WaitUntilAsync(() => follower.AppliedUntil > cut && follower.LagRequests == 0 && follower.Replayed >= 20,
            () => $"the follower applied until {follower.AppliedUntil} (replayed {follower.Replayed})");
        var replayedBefore = follower.Replayed;

        // Cut the copy back below what the follower applied (as a primary cuts an older primary's tail): it starts over.
        var header = ReplicationMessages.Describe(new Shipment(1, cut, copy.Begin, 0, false, ReadOnlyMemory<byte>.Empty, Cut: cut, CutSum: cutSum));
        using (var response = await replica.Client.SendAsync(ReplicationEndpointsTests.Shipment(header, [], key: PeerKey), Ct))
        {
            Assert.True(response.StatusCode == HttpStatusCode.OK, await response.Content.ReadAsStringAsync(Ct));
        }

        Assert.Equal(1, copy.Cuts);

        // The primary's next shipment finds the copy shorter and ships the rest again from its end (its own bytes), and the
        // follower replays the copy from its start.
        await SendAsync(21);
        await WaitUntilAsync(() => copy.DurableUntil >= primaryLog.LocalDurableUntil && follower.LagRequests == 0 && follower.AppliedUntil >= copy.DurableUntil &&
                                   follower.Replayed > replayedBefore,
            () => $"after the cut to {cut}: the copy holds until {copy.DurableUntil}, the follower applied until {follower.AppliedUntil}, replayed {follower.Replayed} ({replayedBefore} before); " +
                  $"the primary: {System.Text.Json.JsonSerializer.Serialize(ReplicationEndpoints.Status(primary.App.Services.GetRequiredService<ReplicationNode>()), ReplicationJson.Default.ReplicationStatus)}");

        // Started over: requests 11 to 20, past the cut point, replayed again with 21 (a follower that kept its state would replay 21 only).
        Assert.True(follower.Replayed >= replayedBefore + 11, $"replayed {follower.Replayed}, {replayedBefore} before the cut");

        await PromoteAsync(replica, term: 2);
        var next = await SendWhenServingAsync(replica, "/counter/add", session, 22, new AddAmount("op22", 22));
        Assert.Equal(total + 22, next.GetProperty("total").GetInt64());
        Assert.Equal(1, behavior.Count("counter:op22"));
    }
}
