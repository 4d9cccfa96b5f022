using System.Net;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Replication;

namespace PersistentServices.AspNetCore.Tests.Replication;

/// <summary>
/// A switchover in a group of three whose third node does not listen (issue 51): the target takes the new term before it
/// claims it, so the primary's heartbeat to it may be answered with that term before the target's claim reaches the primary.
/// The primary's claim endpoint is held here until its shipper to the target has had that answer, which makes the race a
/// certainty instead of a chance.
/// </summary>
public sealed class SwitchoverTests : IDisposable
{
    private const string PeerKey = "switchover-test-peer-key-0123456789abcdef";

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    [Fact]
    public async Task AHeartbeatAnsweredWithTheTargetsTerm_BeforeThePrimaryVoted_DoesNotFenceIt_AndTheSwitchoverHandsOver()
    {
        // Before: the answer fenced the primary, which then answered the target's claim 503 (no longer a primary, not a
        // replica): one vote of three, the promotion refused, the switchover answered "fenced meanwhile", no primary left.
        var (primary, target, result) = await SwitchOverWhileTheTargetsTermReachesThePrimaryFirstAsync(loseTheClaim: false);
        await using (primary)
        await using (target)
        {
            var node = primary.App.Services.GetRequiredService<ReplicationNode>();
            Assert.True(result.Done, $"{result.Why}");
            Assert.Equal(2, result.Term);
            Assert.Equal(ReplicationRole.Primary, target.App.Services.GetRequiredService<ReplicationNode>().Role);
            Assert.Equal(ReplicationRole.Replica, node.Role); // fenced by the handover itself, once the target was promoted
            Assert.Equal(2, TermFile.Read(Path.Combine(_dir.Path, "node0"))!.Value.Term);

            // And it demotes itself in its process: a replica of term 2, its log closed and its directory opened as a copy.
            await WaitUntilAsync(() => node.Replica is { Term: 2 }, () => $"the old primary did not rejoin as a replica (stage {primary.Availability.Stage})");
            Assert.Null(primary.Runtime.OpenLog);
        }
    }

    [Fact]
    public async Task ARefusedSwitchoverWhoseTargetTookTheTerm_ThePrimarysShipperAsksAgain_AndItsNextAnswerFencesIt()
    {
        // The target took term 2 and its claim found no majority (the primary's grant lost, the third node away): the primary
        // is not fenced while it hands over, and its shipper to the target does not stop at the answer that carries term 2
        // (before, it stopped for good: the primary served on in term 1 with no shipper to the target, which it never heard
        // of again). Once the switchover is refused, the shipper's next answer fences it, as any newer term does.
        var (primary, target, result) = await SwitchOverWhileTheTargetsTermReachesThePrimaryFirstAsync(loseTheClaim: true);
        await using (primary)
        await using (target)
        {
            var node = primary.App.Services.GetRequiredService<ReplicationNode>();
            Assert.False(result.Done);
            Assert.Contains("was not promoted", result.Why, StringComparison.Ordinal);
            Assert.Equal(ReplicationRole.Replica, target.App.Services.GetRequiredService<ReplicationNode>().Role);
            // Fenced: the role, then the term file records term 2, then requests are answered as by a replica (the handover is over).
            await WaitUntilAsync(() => node.Role == ReplicationRole.Replica && primary.Availability.AnswersAsReplica,
                () => $"the primary was not fenced after the refused switchover (shippers: {string.Join(", ", node.Shippers.Select(s => $"{s.Replica} {s.State}"))})");
            Assert.Equal(2, TermFile.Read(Path.Combine(_dir.Path, "node0"))!.Value.Term);
        }
    }

    /// <summary>
    /// Primary node0 and target node1 of a group of three whose node2 does not listen; node0 hands over to node1, and a claim
    /// of term 2 reaching node0 waits until node0's shipper to node1 had an answer in term 2 (node1 took the term): then it is
    /// let through, or (<paramref name="loseTheClaim"/>) answered 503 as a grant lost on the way would be. With
    /// <paramref name="loseTheClaim"/>, node1 also answers the first shipment of term 1 after it took term 2 with a 503 (a
    /// heartbeat lost), so that node0's shipper has its answer in term 2 at the handshake that follows, and the claim waits for that.
    /// </summary>
    private async Task<(TestServer Primary, TestServer Target, SwitchoverResult Result)> SwitchOverWhileTheTargetsTermReachesThePrimaryFirstAsync(bool loseTheClaim)
    {
        int[] ports = PersistentServices.TestSupport.LoopbackPorts.Free(3);
        var heartbeatLost = 0; // 1: a shipment of term 1 was answered 503 after node1 took term 2; 2: the next one (the handshake) was answered
        var target = await StartAsync(1, ports, ReplicationRole.Replica, app => app.Use(async (context, next) =>
        {
            if (loseTheClaim && IsAppend(context, out var header) && header.StartsWith("term=1;", StringComparison.Ordinal) &&
                context.RequestServices.GetRequiredService<ReplicationNode>().Replica is { Term: 2 })
            {
                if (Interlocked.CompareExchange(ref heartbeatLost, 1, 0) == 0)
                {
                    context.Response.StatusCode = StatusCodes.Status503ServiceUnavailable;
                    return;
                }

                await next(context);
                Interlocked.CompareExchange(ref heartbeatLost, 2, 1);
                return;
            }

            await next(context);
        }));
        var primary = await StartAsync(0, ports, ReplicationRole.Primary, app => app.Use(async (context, next) =>
        {
            if (IsAppend(context, out var header) && header.StartsWith("term=2;", StringComparison.Ordinal) && header.Contains(";candidate=", StringComparison.Ordinal))
            {
                // The state is "fenced" from the handshake's answer on (a heartbeat's answer sets it only for a moment, and before the lost one).
                var shipper = context.RequestServices.GetRequiredService<ReplicationNode>().Shippers.Single(s => s.Replica.Port == ports[1]);
                await WaitUntilAsync(() => loseTheClaim ? Volatile.Read(ref heartbeatLost) == 2 && shipper.State == "fenced" : shipper.ReplicaTerm == 2,
                    () => $"the primary's shipper to the target had no answer in term 2 (it is {shipper.State}, in term {shipper.ReplicaTerm})");
                if (loseTheClaim)
                {
                    context.Response.StatusCode = StatusCodes.Status503ServiceUnavailable;
                    return;
                }
            }

            await next(context);
        }));
        try
        {
            var session = await primary.StartSessionAsync();
            var (response, _) = await primary.SendAsync(HttpMethod.Post, "/counter/add", session, 1, new AddAmount("op1", 1));
            using (response)
            {
                Assert.Equal(HttpStatusCode.OK, response.StatusCode);
            }

            var result = await primary.App.Services.GetRequiredService<ReplicationNode>().SwitchoverAsync(new Uri($"http://127.0.0.1:{ports[1]}/"), Ct);
            if (loseTheClaim)
            {
                Assert.Equal(2, Volatile.Read(ref heartbeatLost));
            }

            return (primary, target, result);
        }
        catch
        {
            await primary.DisposeAsync();
            await target.DisposeAsync();
            throw;
        }
    }

    /// <summary>Node <paramref name="index"/> of the group on <paramref name="ports"/>, with <paramref name="intercept"/> before its endpoints; the primary heartbeats every 20 ms, so that its idle shipper asks the target soon after it took the term.</summary>
    private Task<TestServer> StartAsync(int index, int[] ports, ReplicationRole role, Action<WebApplication> intercept)
        => TestServer.StartAsync(Path.Combine(_dir.Path, $"node{index}"), o =>
        {
            o.ServiceName = "orders";
            o.Calls.PeerKey = PeerKey;
            o.Replication.Role = role;
            foreach (var other in ports.Where((_, i) => i != index))
            {
                o.Replication.Replicas.Add(new Uri($"http://127.0.0.1:{other}/"));
            }

            o.Replication.HeartbeatInterval = TimeSpan.FromMilliseconds(20);
        }, build: b => b.WebHost.UseUrls($"http://127.0.0.1:{ports[index]}"), beforePersistentServices: intercept);

    private static bool IsAppend(HttpContext context, out string header)
    {
        header = context.Request.Headers["PS-Replication"].ToString();
        return context.Request.Path == ReplicationEndpoints.AppendPath;
    }

    private static async Task WaitUntilAsync(Func<bool> condition, Func<string> why)
    {
        var deadline = DateTime.UtcNow.AddSeconds(30);
        while (!condition())
        {
            Assert.True(DateTime.UtcNow < deadline, why());
            await Task.Delay(5, Ct);
        }
    }
}
