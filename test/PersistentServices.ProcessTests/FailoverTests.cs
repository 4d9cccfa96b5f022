using System.Diagnostics;
using System.Net;
using System.Net.Http.Json;
using System.Text.Json;
using static PersistentServices.ProcessTests.ReplicationLoad;

namespace PersistentServices.ProcessTests;

/// <summary>
/// Automatic failover with real processes (docs/replication.md, "Failover"): three nodes of one service run Raft
/// (DotNext's, signed with the peer key); the Raft leader promotes the replica with the longest log when the primary stops
/// answering. Eight clients, each its own session, keep sending; a client that gets no answer (a killed node, a replica's
/// 503) resends the same request to the next node. The primary is SIGKILLed again and again; every fifth time its whole
/// log directory is deleted too (a lost node). The killed node is started again with its unchanged configuration and
/// rejoins as a replica: with its log, by partial recovery (from its end when its last bytes are the new primary's, or
/// cut back to where the new term began when it holds an unacknowledged tail of its own; docs/replication.md, "Rejoining
/// by cutting back"), not by a reset. At the end every session's state and every shared balance hold each request
/// exactly once.
/// </summary>
[Trait("Category", "Process")]
public sealed class FailoverTests : IDisposable
{
    private const string PeerKey = "failover-test-peer-key-0123456789abc";
    private const int Rounds = 50;
    private const int Clients = 8;

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    /// <summary>What every node of this test's group is given on top of <see cref="Node"/> (a nemesis run's trace).</summary>
    private Dictionary<string, string>? _extra;

    /// <summary>One configuration for every node but its own address, as a StatefulSet's pods get it.</summary>
    private Dictionary<string, string> Node(int index, int[] ports)
    {
        var node = NodeBase(index, ports);
        foreach (var (key, value) in _extra ?? [])
        {
            node[key] = value;
        }

        return node;
    }

    private Dictionary<string, string> NodeBase(int index, int[] ports) => new()
    {
        ["PS_SWITCHOVER_TIMEOUT_MS"] = "1000",
        ["PS_LOG_DIR"] = _dir.File($"node{index}"),
        ["PS_SERVICE_NAME"] = "orders",
        ["PS_PEER_KEY"] = PeerKey,
        ["PS_REPLICATION"] = "None",
        ["PS_FAILOVER"] = "Raft",
        ["PS_ADDRESS"] = $"http://127.0.0.1:{ports[index]}",
        ["PS_INITIAL_PRIMARY"] = $"http://127.0.0.1:{ports[0]}",
        ["PS_REPLICAS"] = string.Join(',', ports.Select(p => $"http://127.0.0.1:{p}")),
        ["PS_SERVICE_CHECKPOINT_SECONDS"] = "1",
        ["PS_REPLY_TIMEOUT_MS"] = "2000",
        ["Logging__LogLevel__Microsoft.AspNetCore"] = "Warning",
    };

    /// <summary>The group's three nodes (node 0 the initial primary, ready) and a session per client, started at the primary.</summary>
    private async Task<(int[] Ports, ServiceProcess[] Nodes, string[] Sessions)> StartGroupAsync(Dictionary<string, string>? extra = null)
    {
        _extra = extra;
        int[] ports = TestSupport.LoopbackPorts.Free(3);
        var nodes = new ServiceProcess[3];
        nodes[1] = await ServiceProcess.StartAsync(Node(1, ports), ports[1], waitUntilReady: false);
        nodes[2] = await ServiceProcess.StartAsync(Node(2, ports), ports[2], waitUntilReady: false);
        var sessions = new string[Clients];
        try
        {
            nodes[0] = await ServiceProcess.StartAsync(Node(0, ports), ports[0]);
            for (var i = 0; i < Clients; i++)
            {
                sessions[i] = await StartSessionWhenReplicatedAsync(nodes[0]);
            }
        }
        catch
        {
            foreach (var node in nodes.Where(n => n is not null))
            {
                await node.DisposeAsync();
            }

            throw;
        }

        return (ports, nodes, sessions);
    }

    /// <summary>
    /// A session started at the group's new primary. Its start is acknowledged once a replica holds it: on a loaded host the
    /// replicas, started just before, may not take shipments within the reply timeout yet, and the start is answered
    /// <c>503 reply-pending</c> with no session (nothing started): asked again until it is <c>201</c>.
    /// </summary>
    private static async Task<string> StartSessionWhenReplicatedAsync(ServiceProcess primary)
    {
        var deadline = Stopwatch.GetTimestamp() + Stopwatch.Frequency * 60;
        while (true)
        {
            using var response = await primary.Client.PostAsync("/ps/sessions", null, TestContext.Current.CancellationToken);
            if (response.StatusCode == HttpStatusCode.Created)
            {
                return (await response.Content.ReadFromJsonAsync<JsonElement>(TestContext.Current.CancellationToken)).GetProperty("sessionId").GetString()!;
            }

            var body = await response.Content.ReadAsStringAsync(TestContext.Current.CancellationToken);
            if (response.StatusCode != HttpStatusCode.ServiceUnavailable || !body.Contains("reply-pending", StringComparison.Ordinal) ||
                Stopwatch.GetTimestamp() > deadline)
            {
                Assert.Fail($"a session start answered {(int)response.StatusCode}: {body}\n{primary.RecentOutput()}");
            }

            await Task.Delay(50, TestContext.Current.CancellationToken);
        }
    }

    [Fact]
    public async Task KillingThePrimaryFiftyTimesUnderLoad_AReplicaTakesOverEachTime_NothingAcknowledgedIsLostOrDuplicated()
    {
        var ct = TestContext.Current.CancellationToken;
        var (ports, nodes, sessions) = await StartGroupAsync();
        try
        {

            // Each client: the next request until it is answered, at the node that answered last, else the next one.
            await using var load = new FollowingClients(nodes, sessions);

            var gaps = new List<double>();
            var lost = 0;
            int cutBack = 0, reset = 0, resetLost = 0, partial = 0;
            for (var round = 0; round < Rounds; round++)
            {
                var primary = await PrimaryAsync(nodes);
                await Task.Delay(TimeSpan.FromMilliseconds(300), ct); // some load on this primary
                await nodes[primary].KillAsync(); // returns once the process is gone: an answer after this is another node's
                var killedAt = Stopwatch.GetTimestamp();
                var killedWall = DateTime.Now;
                var loseNode = round % 5 == 4;
                if (loseNode)
                {
                    Directory.Delete(_dir.File($"node{primary}"), recursive: true);
                    lost++;
                }

                // Served again: some client's request answered after the kill.
                var deadline = Stopwatch.GetTimestamp() + Stopwatch.Frequency * 30;
                while (load.FirstAnswerAfter(killedAt) is null)
                {
                    if (Stopwatch.GetTimestamp() >= deadline)
                    {
                        Assert.Fail($"round {round}: no request answered within 30 s of the primary's kill:\n{Diagnose(nodes)}"); // the nodes' status only then
                    }

                    await Task.Delay(5, ct);
                }

                var first = load.FirstAnswerAfter(killedAt)!.Value;
                gaps.Add(Stopwatch.GetElapsedTime(killedAt, first.At).TotalMilliseconds);

                // One line per failover, on the wall clock the nodes' logs use, so a slow one can be followed in them.
                TestContext.Current.TestOutputHelper?.WriteLine(
                    $"round {round}: node {primary} killed at {killedWall:HH:mm:ss.fff}{(loseNode ? " (log deleted)" : "")}, node {first.Node} answered {gaps[^1]:F0} ms later");

                // The killed node comes back with its configuration unchanged: it learns the newer term and rejoins as a replica.
                var old = nodes[primary];
                Volatile.Write(ref nodes[primary], await ServiceProcess.StartAsync(Node(primary, ports), ports[primary], waitUntilReady: false));
                await old.DisposeAsync();
                (int Cuts, int Resets) rejoin = default;
                await WaitAsync(async () =>
                {
                    if ((await StatusAsync(nodes[primary])) is { } s && s.GetProperty("role").GetString() == "Replica" &&
                        s.GetProperty("replica") is { ValueKind: JsonValueKind.Object } r && r.GetProperty("durableUntil").GetInt64() > 0 &&
                        r.GetProperty("contentTerm").GetInt64() == s.GetProperty("term").GetInt64())
                    {
                        // How its copy caught up since this process opened it: cut back, reset, or neither (from its end).
                        rejoin = (r.GetProperty("cuts").GetInt32(), r.GetProperty("resets").GetInt32());
                        return true;
                    }

                    return false;
                }, nodes);
                var how = rejoin.Resets > 0 ? "reset" : rejoin.Cuts > 0 ? "cut back" : "partial from its end";
                (cutBack, reset, resetLost, partial) = how switch
                {
                    "reset" when loseNode => (cutBack, reset, resetLost + 1, partial),
                    "reset" => (cutBack, reset + 1, resetLost, partial),
                    "cut back" => (cutBack + 1, reset, resetLost, partial),
                    _ => (cutBack, reset, resetLost, partial + 1),
                };
                TestContext.Current.TestOutputHelper?.WriteLine($"round {round}: node {primary} rejoined: {how}");
            }

            await load.StopAsync();
            var serving = nodes[await PrimaryAsync(nodes)];
            var acknowledged = load.Acknowledged;
            await AssertExactlyOnceAsync(serving, sessions, acknowledged);
            gaps.Sort();
            TestContext.Current.TestOutputHelper?.WriteLine(
                $"{Rounds} failovers ({lost} with the node's log directory deleted; {Demotions(nodes)} demotions in their process by the nodes running at the end, none restarted but the killed), " +
                $"{acknowledged.Sum()} requests acknowledged, {load.Resends} resends; " +
                $"kill to the first answer: p50 {gaps[gaps.Count / 2]:F0} ms, p90 {gaps[gaps.Count * 9 / 10]:F0} ms, max {gaps[^1]:F0} ms; " +
                $"rejoins of the killed node: {cutBack} cut back, {partial} partial from its end, {reset} reset with its log, {resetLost} reset after its log was deleted");

            // A killed primary that kept its log rejoins by partial recovery: its unacknowledged tail is cut back, its log is
            // not reset. A reset is left for a copy that ends below the new primary's begin (the checkpoint after its
            // promotion truncated past it: 0 or 1 of 50 in three runs), a tail whose bytes below the cut point differ, or a cut
            // point the group's history does not know. Every rejoin after a deleted log is a reset (it holds nothing).
            Assert.Equal(lost, resetLost);
            Assert.True(cutBack > 0, $"no rejoin was cut back ({partial} partial, {reset} reset)");
            Assert.True(reset * 4 <= cutBack + reset, $"{reset} rejoins with a log were reset, {cutBack} cut back: cutting back is not the common case");
        }
        finally
        {
            foreach (var node in nodes)
            {
                await node.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task ANemesis_KillsPausesLostDisksAndSwitchovers_UnderLoad_NothingAcknowledgedIsLostOrDuplicated_AndAPrimaryServesAfterEachFault()
    {
        // Issue 51, item 7 (the bounded version): one fault at a time on the primary of a three-node Raft group under eight
        // clients that follow the primary: kill -9, kill -9 with its log directory deleted, a pause (SIGSTOP until another
        // node serves, then SIGCONT), and a switchover to a random replica (psctl). A killed node is started again, as a
        // restarter would; nothing else is ever restarted: a paused or switched-over one, fenced, demotes itself in its
        // process. Each must rejoin as a replica. The order is drawn from a seed (printed; PS_NEMESIS_SEED replays it),
        // every kind at least once; PS_NEMESIS_FAULTS runs more by hand (12 in the suite). Checked from the clients' side:
        // every acknowledged request ran exactly once, and after every fault some node other than the faulted one served.
        var ct = TestContext.Current.CancellationToken;
        var faults = int.TryParse(Environment.GetEnvironmentVariable("PS_NEMESIS_FAULTS"), out var f) ? f : 12;
        var seed = int.TryParse(Environment.GetEnvironmentVariable("PS_NEMESIS_SEED"), out var s) ? s : Random.Shared.Next(1, 100_000);
        var random = new Random(seed);
        TestContext.Current.TestOutputHelper?.WriteLine($"nemesis seed {seed}, {faults} faults");
        string[] kinds = ["kill", "kill, log deleted", "pause", "switchover"];
        var waits = kinds.ToDictionary(k => k, _ => new List<double>());
        var (ports, nodes, sessions) = await StartGroupAsync(Environment.GetEnvironmentVariable("PS_NEMESIS_TRACE") == "1"
            ? new Dictionary<string, string> { ["Logging__LogLevel__PersistentServices.Replication.RaftFailover"] = "Debug" }
            : null);
        var paused = -1;
        try
        {
            // A client gives a node half a second (a paused one never answers), then sends the same request to the next node.
            await using var load = new FollowingClients(nodes, sessions, requestTimeout: TimeSpan.FromMilliseconds(500));
            int demotions = 0, refusedSwitchovers = 0;
            for (var round = 0; round < faults; round++)
            {
                var primary = await PrimaryAsync(nodes);
                await Task.Delay(TimeSpan.FromMilliseconds(200 + random.Next(300)), ct); // some load on this primary
                var kind = round < kinds.Length ? kinds[(round + seed) % kinds.Length] : kinds[random.Next(kinds.Length)];
                var target = (primary + 1 + random.Next(2)) % 3;
                var started = Stopwatch.GetTimestamp();
                var startedWall = DateTime.Now;
                var refused = false;
                switch (kind)
                {
                    case "kill":
                        await nodes[primary].KillAsync();
                        break;
                    case "kill, log deleted":
                        await nodes[primary].KillAsync();
                        Directory.Delete(_dir.File($"node{primary}"), recursive: true);
                        break;
                    case "pause":
                        await nodes[primary].SignalAsync("STOP");
                        paused = primary;
                        break;
                    default:
                        var (exit, answer) = await SwitchoverAsync(ports, from: primary, to: target);
                        refused = exit != 0; // not caught up within SwitchoverTimeout under load: refused, and the primary serves again
                        refusedSwitchovers += refused ? 1 : 0;
                        if (refused)
                        {
                            TestContext.Current.TestOutputHelper?.WriteLine($"round {round}: switchover refused: {answer.Trim()}");
                        }

                        break;
                }

                // Served again: an answer after the fault by another node (by the same one after a refused switchover).
                var deadline = Stopwatch.GetTimestamp() + Stopwatch.Frequency * 30;
                (int Node, long At)? first;
                while ((first = load.Answers.Where(a => a.At > started && (refused || a.Node != primary)).Select(a => ((int, long)?)a).FirstOrDefault()) is null)
                {
                    if (Stopwatch.GetTimestamp() >= deadline)
                    {
                        Assert.Fail($"round {round} ({kind}): no other node served within 30 s\n{Diagnose(nodes)}"); // not on every turn: a paused node's status hangs
                    }

                    await Task.Delay(5, ct);
                }

                var waited = Stopwatch.GetElapsedTime(started, first.Value.At).TotalMilliseconds;
                if (!refused)
                {
                    waits[kind].Add(waited);
                }

                TestContext.Current.TestOutputHelper?.WriteLine(
                    $"round {round}: {kind} of node {primary} at {startedWall:HH:mm:ss.fff}{(kind == "switchover" ? $" to node {target}" : "")}, node {first.Value.Node} served {waited:F0} ms later");
                if (waited > 1000)
                {
                    // A slow one: what the other nodes logged meanwhile (with PS_NEMESIS_TRACE=1, the coordinator's rounds too).
                    TestContext.Current.TestOutputHelper?.WriteLine(During(nodes, except: primary, startedWall, startedWall.AddMilliseconds(waited + 100)));
                }

                if (refused)
                {
                    continue;
                }

                // The faulted node comes back: a killed one is started again; a paused one resumes, hears of the newer term, is
                // fenced and demotes itself; a switched-over one is fenced already and demotes itself. Nothing but the killed is
                // restarted: every node must be a replica of the newest term, in the process it had.
                if (paused >= 0)
                {
                    await nodes[paused].SignalAsync("CONT");
                    paused = -1;
                }

                var process = nodes[primary].ProcessId;
                if (kind.StartsWith("kill", StringComparison.Ordinal))
                {
                    var old = nodes[primary];
                    Volatile.Write(ref nodes[primary], await ServiceProcess.StartAsync(Node(primary, ports), ports[primary], waitUntilReady: false));
                    await old.DisposeAsync();
                }
                else
                {
                    demotions++;
                }

                await WaitAsync(async () => await RejoinedAsync(nodes[primary]), nodes);
                Assert.True(kind.StartsWith("kill", StringComparison.Ordinal) || nodes[primary].ProcessId == process, Diagnose(nodes));
            }

            await load.StopAsync();
            var serving = nodes[await PrimaryAsync(nodes)];
            await AssertExactlyOnceAsync(serving, sessions, load.Acknowledged);
            var terms = (await StatusAsync(serving)).GetProperty("term").GetInt64();
            TestContext.Current.TestOutputHelper?.WriteLine(
                $"{faults} faults (seed {seed}), {load.Acknowledged.Sum()} requests acknowledged, {load.Resends} resends, {demotions} paused or switched-over primaries " +
                $"rejoined in their process (none restarted), " +
                $"{refusedSwitchovers} switchovers refused, term {terms} at the end; fault to another node's first answer: " +
                string.Join("; ", waits.Where(w => w.Value.Count > 0).Select(w =>
                {
                    var sorted = w.Value.Order().ToList();
                    return $"{w.Key} ({sorted.Count}): p50 {sorted[sorted.Count / 2]:F0} ms, max {sorted[^1]:F0} ms";
                })));
        }
        finally
        {
            if (paused >= 0)
            {
                await nodes[paused].SignalAsync("CONT");
            }

            foreach (var node in nodes)
            {
                await node.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task AnOldPrimaryCutOffPastItsFailover_AcknowledgesNothingThatIsLost_AndNothingAfterItResumes()
    {
        // The primary is paused (SIGSTOP): to the rest of the group it is gone, as when it is cut off; its clients' requests
        // wait in its sockets. The Raft leader promotes a replica, whose term a majority takes. Resumed (SIGCONT), the old
        // primary runs what it had been sent, but whatever it answers 200 must be on the new primary (its acknowledgement
        // needs a replica, which now refuses its term), and once it has heard of the new term it answers nothing with 200.
        var ct = TestContext.Current.CancellationToken;
        int[] ports = TestSupport.LoopbackPorts.Free(3);
        var nodes = new ServiceProcess[3];
        nodes[1] = await ServiceProcess.StartAsync(Node(1, ports), ports[1], waitUntilReady: false);
        nodes[2] = await ServiceProcess.StartAsync(Node(2, ports), ports[2], waitUntilReady: false);
        nodes[0] = await ServiceProcess.StartAsync(Node(0, ports), ports[0]);
        try
        {
            var old = nodes[0];
            var sessions = new string[Clients];
            for (var i = 0; i < Clients; i++)
            {
                sessions[i] = await old.StartSessionAsync();
            }

            // Each client sends to the old primary only, and counts what it answers 200.
            var acknowledged = new long[Clients];
            var afterResume = 0;
            var resumed = false;
            var load = Enumerable.Range(0, Clients).Select(i => Task.Run(async () =>
            {
                for (var seq = 1L; seq <= 100_000; seq++)
                {
                    try
                    {
                        var (status, _, _) = await old.SendAsync(HttpMethod.Post, Path(seq), sessions[i], seq, Body(i));
                        if (status != HttpStatusCode.OK)
                        {
                            return;
                        }

                        acknowledged[i] = seq;
                        if (Volatile.Read(ref resumed))
                        {
                            Interlocked.Increment(ref afterResume);
                        }
                    }
                    catch (HttpRequestException)
                    {
                        return;
                    }
                }
            }, ct)).ToArray();

            await Task.Delay(TimeSpan.FromSeconds(1.5), ct);
            await old.SignalAsync("STOP");
            var promoted = -1;
            await WaitAsync(async () =>
            {
                foreach (var i in new[] { 1, 2 })
                {
                    if ((await StatusAsync(nodes[i])).GetProperty("role").GetString() == "Primary")
                    {
                        promoted = i;
                        return true;
                    }
                }

                return false;
            }, nodes);
            await nodes[promoted].WaitUntilReadyAsync();
            Volatile.Write(ref resumed, true);
            await old.SignalAsync("CONT");
            await Task.WhenAll(load);

            // It heard of the newer term: fenced (and demoted in its process), and a new request gets no 200.
            await WaitAsync(async () => (await StatusAsync(old)).GetProperty("role").GetString() == "Replica", nodes);
            var (afterFence, _, _) = await old.SendAsync(HttpMethod.Post, Path(acknowledged[0] + 1), sessions[0], acknowledged[0] + 1, Body(0));
            Assert.NotEqual(HttpStatusCode.OK, afterFence);

            // Everything any client saw acknowledged, by the old primary before or after its pause, is on the new one, once.
            await AssertExactlyOnceAsync(nodes[promoted], sessions, acknowledged);
            TestContext.Current.TestOutputHelper?.WriteLine(
                $"{acknowledged.Sum()} requests acknowledged by the old primary, {afterResume} of them after it resumed (replicated before its pause); node{promoted} promoted");
        }
        finally
        {
            foreach (var node in nodes)
            {
                await node.SignalAsync("CONT");
                await node.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task ASecondSwitchoverBeforeTheOldPrimaryRestarts_HandsOver_TheOldPrimariesRejoinWithoutARestart_AndOneIsPromotedAgain()
    {
        // Issue 51's repro: psctl replication switchover node0 -> node1, then node1 -> node2 before node0 restarts. node2's
        // claim of term 3 has node2 and the primary handing over (node1), which grants it without being fenced first. Before:
        // 409 "this primary was fenced meanwhile", every node a replica. Nothing is restarted: each old primary demotes itself
        // and rejoins as a replica in its own process (before, each waited for a restart), so the new primary acknowledges
        // with them; then node0, demoted in its process, is promoted again in it and serves the session exactly once.
        var (ports, nodes, sessions) = await StartGroupAsync();
        try
        {
            var processes = nodes.Select(n => n.ProcessId).ToArray();
            var (first, firstAnswer) = await SwitchoverAsync(ports, from: 0, to: 1);
            Assert.True(first == 0, $"{firstAnswer}\n{Diagnose(nodes)}");
            Assert.Equal(1, await PrimaryAsync(nodes));

            var (second, secondAnswer) = await SwitchoverAsync(ports, from: 1, to: 2);
            Assert.True(second == 0, $"{secondAnswer}\n{Diagnose(nodes)}");
            Assert.Equal(3, JsonDocument.Parse(secondAnswer).RootElement.GetProperty("term").GetInt64());
            Assert.Equal(2, await PrimaryAsync(nodes));
            Assert.Contains("grants the switchover's claim of term 3", nodes[1].Output, StringComparison.Ordinal);

            await WaitAsync(async () => await RejoinedAsync(nodes[0]) && await RejoinedAsync(nodes[1]), nodes);
            Assert.Equal(processes, nodes.Select(n => n.ProcessId).ToArray());
            Assert.Contains("without a restart", nodes[0].Output, StringComparison.Ordinal);
            Assert.Contains("without a restart", nodes[1].Output, StringComparison.Ordinal);
            var (status, body, _) = await nodes[2].SendUntilAnsweredAsync("/deposit", sessions[0], 1, Body(0));
            Assert.True(status == HttpStatusCode.OK, $"{status} {body}\n{Diagnose(nodes)}");
            Assert.Equal(1, body.GetProperty("balance").GetInt64());

            var (third, thirdAnswer) = await SwitchoverAsync(ports, from: 2, to: 0);
            Assert.True(third == 0, $"{thirdAnswer}\n{Diagnose(nodes)}");
            Assert.Equal(4, JsonDocument.Parse(thirdAnswer).RootElement.GetProperty("term").GetInt64());
            Assert.Equal(0, await PrimaryAsync(nodes));
            var (next, nextBody, _) = await nodes[0].SendUntilAnsweredAsync("/deposit", sessions[0], 2, Body(0));
            Assert.True(next == HttpStatusCode.OK, $"{next} {nextBody}\n{Diagnose(nodes)}");
            Assert.Equal(2, nextBody.GetProperty("balance").GetInt64());
            var (again, againBody, _) = await nodes[0].SendUntilAnsweredAsync("/deposit", sessions[0], 2, Body(0));
            Assert.True(again == HttpStatusCode.OK, $"{again} {againBody}\n{Diagnose(nodes)}");
            Assert.Equal(2, againBody.GetProperty("balance").GetInt64()); // request 2's reply again: it ran once
            var (third3, thirdBody, _) = await nodes[0].SendUntilAnsweredAsync("/deposit", sessions[0], 3, Body(0));
            Assert.True(third3 == HttpStatusCode.OK, $"{third3} {thirdBody}\n{Diagnose(nodes)}");
            Assert.Equal(3, thirdBody.GetProperty("balance").GetInt64());
            Assert.Equal(processes, nodes.Select(n => n.ProcessId).ToArray());
            await WaitAsync(async () => await RejoinedAsync(nodes[2]), nodes);
        }
        finally
        {
            foreach (var node in nodes)
            {
                await node.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task ASwitchoverWhileAReplicaDoesNotListen_HandsOver_AndTheGroupKeepsAPrimary()
    {
        // Issue 51: a switchover while the group's third node does not listen (stopped, or restarting). The target's claim of
        // term 2 reaches the target and the primary handing over, a majority of three: promoted. Before, the primary was
        // fenced by the claim and did not count, so the claim had one vote in three and every node answered as a replica.
        var (ports, nodes, sessions) = await StartGroupAsync();
        try
        {
            Assert.Equal(0, await nodes[2].TerminateAsync(TimeSpan.FromSeconds(20)));
            var (exit, answer) = await SwitchoverAsync(ports, from: 0, to: 1);
            Assert.True(exit == 0, $"{answer}\n{Diagnose(nodes)}");
            Assert.Equal(2, JsonDocument.Parse(answer).RootElement.GetProperty("term").GetInt64());
            Assert.Equal(1, await PrimaryAsync(nodes));

            // node2 comes back and rejoins; the new primary acknowledges with it.
            await RestartAsync(nodes, ports, 2);
            var (status, body, _) = await nodes[1].SendUntilAnsweredAsync("/deposit", sessions[0], 1, Body(0));
            Assert.True(status == HttpStatusCode.OK, $"{status} {body}\n{Diagnose(nodes)}");
        }
        finally
        {
            foreach (var node in nodes)
            {
                await node.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task ACapturedSwitchover_ReplayedToTheNewPrimary_IsRefused_AndTheGroupKeepsItsPrimary()
    {
        // Issue 51: a signed switchover captured on its way to node0 (made as psctl makes it: node0, term 1, to node1) and
        // sent again to the new primary fenced it before (it named neither node nor term). Now it names both, and a node
        // takes each signed message once: at node1, and at node0 once it demoted itself to a replica of term 2, it is for
        // another term (409 replication-stale-term), and node1 stays the primary of term 2.
        var (ports, nodes, _) = await StartGroupAsync();
        try
        {
            var header = $"term=1;node=http://127.0.0.1:{ports[0]}/;to=http://127.0.0.1:{ports[1]}/";
            var signature = PersistentServices.Calls.PeerSignature.Sign(System.Text.Encoding.UTF8.GetBytes(PeerKey), DateTimeOffset.UtcNow.ToUnixTimeMilliseconds(),
                PersistentServices.Calls.PeerSignature.V2,
                new PersistentServices.Calls.PeerMessage("POST", "/ps/replication/switchover", "orders", "orders", "", "", "replication", header, "application/octet-stream"), []);
            HttpRequestMessage Captured()
            {
                var request = new HttpRequestMessage(HttpMethod.Post, "/ps/replication/switchover") { Content = new ByteArrayContent([]) };
                request.Content.Headers.ContentType = new System.Net.Http.Headers.MediaTypeHeaderValue("application/octet-stream");
                request.Headers.Add("PS-Replication", header);
                request.Headers.Add("PS-Caller", "orders");
                request.Headers.Add("PS-Callee", "orders");
                request.Headers.Add("PS-Signature", signature);
                return request;
            }

            using (var first = Captured())
            using (var handedOver = await nodes[0].Client.SendAsync(first, TestContext.Current.CancellationToken))
            {
                Assert.True(handedOver.StatusCode == HttpStatusCode.OK, await handedOver.Content.ReadAsStringAsync(TestContext.Current.CancellationToken));
            }

            Assert.Equal(1, await PrimaryAsync(nodes));

            // node0, fenced by the handover, demotes itself to a replica of term 2 in its process: there too the message is for
            // another term now (a replay at the same node of the same term is refused as such: ReplicationEndpointsTests).
            await WaitAsync(async () => await RejoinedAsync(nodes[0]), nodes);
            foreach (var (node, type) in new[] { (1, "replication-stale-term"), (0, "replication-stale-term"), (2, "replication-stale-term") })
            {
                using var replay = Captured();
                using var refused = await nodes[node].Client.SendAsync(replay, TestContext.Current.CancellationToken);
                var body = await refused.Content.ReadAsStringAsync(TestContext.Current.CancellationToken);
                Assert.True(refused.StatusCode == HttpStatusCode.Conflict, $"node{node}: {(int)refused.StatusCode} {body}");
                Assert.Equal("urn:persistentservices:problem:" + type, JsonDocument.Parse(body).RootElement.GetProperty("type").GetString());
            }

            Assert.Equal(1, await PrimaryAsync(nodes));
            Assert.Equal(2, (await StatusAsync(nodes[1])).GetProperty("term").GetInt64());
        }
        finally
        {
            foreach (var node in nodes)
            {
                await node.DisposeAsync();
            }
        }
    }

    [Fact]
    public async Task AHungPrimary_IsReplaced_WithoutWaitingForItsClaimAnswer()
    {
        // Issue 51: a primary paused (SIGSTOP) accepts connections and answers nothing. The coordinator finds no primary within
        // its rounds, and the promotion's claim completes once a majority (the candidate and the other replica) granted the
        // term: it does not wait for the paused node's answer up to the claim timeout (5 s), which made a hung primary take
        // 6.6-7.9 s to replace. The test measures from the SIGSTOP to the new primary's first 200 and fails at 4.5 s (the claim
        // timeout alone was 5 s); the figure is printed.
        var (ports, nodes, sessions) = await StartGroupAsync();
        var stopped = false;
        try
        {
            // A coordinator exists (a replica leads Raft: the primary never does) before the primary hangs.
            await WaitAsync(() => Task.FromResult(nodes.Any(n => n.Output.Contains("(the failover coordinator) is now http", StringComparison.Ordinal))), nodes);
            var started = Stopwatch.GetTimestamp();
            await nodes[0].SignalAsync("STOP");
            stopped = true;
            var served = -1;
            while (served < 0)
            {
                if (Stopwatch.GetElapsedTime(started) > TimeSpan.FromSeconds(30))
                {
                    Assert.Fail($"no new primary within 30 s\n{Diagnose(nodes[1..])}"); // not node0's status: it is paused
                }

                foreach (var i in new[] { 1, 2 })
                {
                    var (status, _, _) = await nodes[i].SendAsync(HttpMethod.Post, Path(1), sessions[0], 1, Body(0));
                    if (status == HttpStatusCode.OK)
                    {
                        served = i;
                        break;
                    }
                }

                if (served < 0)
                {
                    await Task.Delay(10, TestContext.Current.CancellationToken);
                }
            }

            var elapsed = Stopwatch.GetElapsedTime(started);
            TestContext.Current.TestOutputHelper?.WriteLine($"SIGSTOP of the primary to node{served}'s first 200: {elapsed.TotalMilliseconds:F0} ms");
            if (elapsed >= TimeSpan.FromSeconds(4.5))
            {
                Assert.Fail($"{elapsed.TotalMilliseconds:F0} ms from the SIGSTOP to node{served}'s first 200\n{Diagnose(nodes[1..])}");
            }

        }
        finally
        {
            if (stopped)
            {
                await nodes[0].SignalAsync("CONT");
            }

            foreach (var node in nodes)
            {
                await node.DisposeAsync();
            }
        }
    }

    private static Task<(int Exit, string Output)> SwitchoverAsync(int[] ports, int from, int to)
        => ReplicationTests.RunPsctlWithKeyAsync(PeerKey, "replication", "switchover", $"http://127.0.0.1:{ports[from]}", "--service", "orders",
            "--to", $"http://127.0.0.1:{ports[to]}");

    [Fact]
    public async Task ARollingUpgradeBySwitchover_UnderLoad_NothingAcknowledgedIsLostOrDuplicated_AndTheOldPrimaryRejoins()
    {
        // The upgrade of a group (docs/upgrades.md, "A replicated service"): each replica stopped (SIGTERM) and started again
        // as the new version, then the primary's role handed to a caught-up replica (psctl replication switchover), then the old
        // primary restarted as the new version; and once more with the new primary's own SIGTERM, which hands over by itself
        // (Failover = Raft). The new version's /deposit replies differ (PS_VERSION 2 adds a field): the switchover checkpoints
        // every session first (Replication.CheckpointBeforeSwitchover), so the new primary replays nothing the old version ran,
        // and no session diverges. Eight clients follow the primary throughout; every request any of them saw acknowledged is
        // there once at the end.
        var ct = TestContext.Current.CancellationToken;
        var (ports, nodes, sessions) = await StartGroupAsync();
        try
        {

            await using var load = new FollowingClients(nodes, sessions);
            await Task.Delay(TimeSpan.FromSeconds(1), ct);

            // 1. The replicas, one at a time. While the first is down, a switchover to it is refused (its port refuses
            //    connections: it cannot catch up, and the switchover does not wait its timeout for it) and the primary serves again.
            string refusal = "";
            foreach (var r in new[] { 1, 2 })
            {
                Assert.Equal(0, await nodes[r].TerminateAsync(TimeSpan.FromSeconds(20)));
                if (r == 1)
                {
                    var (exit, output) = await ReplicationTests.RunPsctlWithKeyAsync(PeerKey, "replication", "switchover", $"http://127.0.0.1:{ports[0]}", "--service", "orders",
                        "--to", $"http://127.0.0.1:{ports[1]}");
                    Assert.True(exit == 1, output);
                    Assert.Contains("refuses connections", output, StringComparison.Ordinal);
                    refusal = output;
                    var refusedAt = Stopwatch.GetTimestamp();
                    await WaitAsync(() => Task.FromResult(load.FirstAnswerAfter(refusedAt, node: 0) is not null), nodes);
                }

                await RestartAsync(nodes, ports, r, version: "2");
            }

            // 2. The switchover, to the replica that holds the most.
            var switchAt = Stopwatch.GetTimestamp();
            var (switched, answer) = await ReplicationTests.RunPsctlWithKeyAsync(PeerKey, "replication", "switchover", $"http://127.0.0.1:{ports[0]}", "--service", "orders");
            Assert.True(switched == 0, $"{answer}\n{Diagnose(nodes)}");
            var handover = JsonDocument.Parse(answer).RootElement;
            var promoted = Array.FindIndex(ports, p => handover.GetProperty("primary").GetString() == $"http://127.0.0.1:{p}/");
            Assert.True(promoted > 0, answer);
            Assert.Contains("the next primary replays nothing this one ran", nodes[0].Output, StringComparison.Ordinal);
            Assert.Equal(2, handover.GetProperty("term").GetInt64());
            await WaitAsync(() => Task.FromResult(load.FirstAnswerAfter(switchAt, promoted) is not null), nodes);
            var (pause, toFirstAnswer) = Pause(load, switchAt, from: 0, to: promoted);

            // 3. The old primary: fenced by the promotion, it demotes itself to a replica (of the old version) in its process;
            //    then the upgrade restarts it with the new version, and it rejoins as a replica.
            await WaitAsync(async () => await RejoinedAsync(nodes[0]), nodes);
            Assert.Equal(0, await nodes[0].TerminateAsync(TimeSpan.FromSeconds(20)));
            var rejoinedBy = await RestartAsync(nodes, ports, 0, version: "2");

            // 4. The new primary's SIGTERM hands the role over before it exits: no detection delay.
            var stopAt = Stopwatch.GetTimestamp();
            Assert.Equal(0, await nodes[promoted].TerminateAsync(TimeSpan.FromSeconds(20)));
            var third = await PrimaryAsync(nodes);
            Assert.NotEqual(promoted, third);
            Assert.True(nodes[promoted].Output.Contains("switched over", StringComparison.Ordinal),
                string.Join('\n', nodes[promoted].Output.Split('\n').Where(l => l.Contains("Replication", StringComparison.Ordinal) || l.Contains("Drain", StringComparison.Ordinal)).TakeLast(30)));
            await WaitAsync(() => Task.FromResult(load.FirstAnswerAfter(stopAt, third) is not null), nodes);
            var (stopPause, stopToFirstAnswer) = Pause(load, stopAt, from: promoted, to: third);
            await RestartAsync(nodes, ports, promoted, version: "2");

            // The replica that stayed one through the first switchover followed the old version's log with the new code: its
            // follower stopped at the first reply that differed, and started over once the switchover's checkpoint was anchored
            // in its copy. Now every replica's follower follows (docs/replication.md, "Hot followers").
            var stayed = 3 - promoted;
            await WaitAsync(async () =>
            {
                foreach (var i in Enumerable.Range(0, nodes.Length).Where(i => i != third))
                {
                    var replay = (await StatusAsync(nodes[i])).GetProperty("replica").GetProperty("replay");
                    if (replay.GetProperty("stoppedBecause").ValueKind != JsonValueKind.Null || replay.GetProperty("appliedUntil").GetInt64() == 0)
                    {
                        return false;
                    }
                }

                return true;
            }, nodes);
            Assert.Contains("a newer checkpoint is anchored in the copy", nodes[stayed].Output, StringComparison.Ordinal);

            await load.StopAsync();
            await AssertExactlyOnceAsync(nodes[third], sessions, load.Acknowledged);
            TestContext.Current.TestOutputHelper?.WriteLine(
                $"{load.Acknowledged.Sum()} requests acknowledged, {load.Resends} resends. Switchover (psctl, node0 to node{promoted}): {handover.GetProperty("waitedMs").GetDouble():F0} ms " +
                $"refusing before the promotion; psctl started to the first answer of the new primary {toFirstAnswer:F0} ms; no answer at all for {pause:F0} ms; the old primary " +
                $"rejoined by {rejoinedBy} recovery. SIGTERM of node{promoted} to node{third}'s first answer {stopToFirstAnswer:F0} ms, no answer for {stopPause:F0} ms. " +
                $"Refused while the target was down: {refusal.Trim()}");
        }
        finally
        {
            foreach (var node in nodes)
            {
                await node.DisposeAsync();
            }
        }
    }

    /// <summary>
    /// Around a handover begun at <paramref name="since"/>: the longest time no client had an answer (the last answer of
    /// node <paramref name="from"/> to the first of node <paramref name="to"/>), and the time from <paramref name="since"/>
    /// to that first answer, in milliseconds.
    /// </summary>
    private static (double Pause, double ToFirstAnswer) Pause(FollowingClients load, long since, int from, int to)
    {
        var first = load.FirstAnswerAfter(since, to)!.Value.At;
        var last = load.Answers.Where(a => a.Node == from && a.At < first).Select(a => a.At).DefaultIfEmpty(since).Max();
        return (Stopwatch.GetElapsedTime(last, first).TotalMilliseconds, Stopwatch.GetElapsedTime(since, first).TotalMilliseconds);
    }

    /// <summary>
    /// Starts node <paramref name="index"/> again (its configuration unchanged but, when given, the service's
    /// <paramref name="version"/>) and waits until it holds the newest term's log as a replica; how it caught up.
    /// </summary>
    private async Task<string> RestartAsync(ServiceProcess[] nodes, int[] ports, int index, string? version = null)
    {
        var old = nodes[index];
        var environment = Node(index, ports);
        if (version is not null)
        {
            environment["PS_VERSION"] = version;
        }

        Volatile.Write(ref nodes[index], await ServiceProcess.StartAsync(environment, ports[index], waitUntilReady: false));
        await old.DisposeAsync();
        await WaitAsync(async () => await RejoinedAsync(nodes[index]), nodes);
        return nodes[index].Output.Contains("is reset by its primary", StringComparison.Ordinal) ? "total" : "partial";
    }

    /// <summary>Whether a node is a replica that holds the newest term's log (it rejoined: restarted, or demoted in its process).</summary>
    private static Task<bool> RejoinedAsync(ServiceProcess node) => ReplicationLoad.IsCaughtUpReplicaAsync(node);

    /// <summary>How many times the nodes running now demoted themselves from a fenced primary to a replica (their logs say so).</summary>
    private static int Demotions(ServiceProcess[] nodes)
        => nodes.Sum(n => n.Output.Split("without a restart").Length - 1);

    /// <summary>The node that answers as the primary of the newest term (waiting for one).</summary>
    private static async Task<int> PrimaryAsync(ServiceProcess[] nodes)
    {
        var deadline = DateTime.UtcNow.AddSeconds(30);
        while (DateTime.UtcNow < deadline)
        {
            var best = -1;
            var newest = -1L;
            var primaryTerm = -1L;
            for (var i = 0; i < nodes.Length; i++)
            {
                try
                {
                    var status = await StatusAsync(nodes[i]);
                    var term = status.GetProperty("term").GetInt64();
                    newest = Math.Max(newest, term);
                    if (status.GetProperty("role").GetString() == "Primary" && term > primaryTerm)
                    {
                        (best, primaryTerm) = (i, term);
                    }
                }
                catch (HttpRequestException)
                {
                }
            }

            if (best >= 0 && primaryTerm >= newest)
            {
                return best;
            }

            await Task.Delay(50, TestContext.Current.CancellationToken);
        }

        Assert.Fail($"no primary within 30 s:\n{Diagnose(nodes)}");
        return -1;
    }

    /// <summary>The log lines the nodes (but <paramref name="except"/>) wrote between two wall-clock times (their console's HH:mm:ss.fff stamps), each with its message line.</summary>
    private static string During(ServiceProcess[] nodes, int except, DateTime from, DateTime to)
    {
        var lines = new List<string>();
        for (var i = 0; i < nodes.Length; i++)
        {
            if (i == except)
            {
                continue;
            }

            var output = nodes[i].Output.Split('\n');
            for (var j = 0; j < output.Length; j++)
            {
                if (output[j].Length > 12 && TimeOnly.TryParseExact(output[j][..12], "HH:mm:ss.fff", out var at) &&
                    at >= TimeOnly.FromDateTime(from) && at <= TimeOnly.FromDateTime(to))
                {
                    lines.Add($"  node{i} {output[j].Trim()} {(j + 1 < output.Length ? output[j + 1].Trim() : "")}");
                }
            }
        }

        return string.Join('\n', lines.OrderBy(l => l[8..], StringComparer.Ordinal).Select(l => l.Length > 600 ? l[..600] : l));
    }

    /// <summary>What each node says of its replication now, and its last log lines (what tells why a wait failed).</summary>
    private static string Diagnose(ServiceProcess[] nodes)
        => string.Join("\n----\n", nodes.Select((n, i) =>
        {
            string status;
            try
            {
                using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(2)); // a paused node answers nothing
                using var response = n.GetReplicationStatusAsync(timeout.Token).GetAwaiter().GetResult();
                status = response.Content.ReadAsStringAsync().GetAwaiter().GetResult();
            }
            catch (Exception ex) when (ex is HttpRequestException or OperationCanceledException)
            {
                status = ex.Message;
            }

            var lines = n.Output.Split('\n').Where(l => !l.TrimStart().StartsWith("at ", StringComparison.Ordinal) && !l.Contains("cannot make requests durable", StringComparison.Ordinal) &&
                                                           !l.Contains("PersistenceMiddleware[1105]", StringComparison.Ordinal));
            return $"node{i} (port {n.Port}): {status}\n{string.Join('\n', lines.TakeLast(40))}";
        }));

    private static async Task WaitAsync(Func<Task<bool>> condition, ServiceProcess[] nodes)
    {
        var deadline = DateTime.UtcNow.AddSeconds(30);
        while (DateTime.UtcNow < deadline)
        {
            try
            {
                if (await condition())
                {
                    return;
                }
            }
            catch (HttpRequestException)
            {
            }

            await Task.Delay(50, TestContext.Current.CancellationToken);
        }

        Assert.Fail($"not within 30 s:\n{Diagnose(nodes)}");
    }
}
