using System.Collections.Concurrent;
using System.Diagnostics;
using System.Diagnostics.Metrics;
using System.Net;
using System.Net.Http.Json;
using System.Reflection;
using System.Text.Json;
using Microsoft.Extensions.DependencyInjection;
using static PersistentServices.ProcessTests.ReplicationLoad;

namespace PersistentServices.ProcessTests;

/// <summary>
/// Log shipping with real processes (docs/replication.md): a primary and two replicas of one service, each its own log
/// directory, eight clients under load. The primary is SIGKILLed and its whole log directory deleted; the replica with
/// the longest log is promoted (psctl, signed with the peer key) and serves every session with every acknowledged
/// request exactly once. The old primary, started again on an empty directory with its old configuration, learns of
/// the new term from the group and starts as a replica, acknowledging nothing; restarted, it rejoins and catches up. And a replica promoted while
/// the old primary still serves: the new term is claimed at a majority first, so nothing the old primary acknowledged is
/// lost and it acknowledges nothing after.
/// </summary>
[Trait("Category", "Process")]
public sealed class ReplicationTests : IDisposable
{
    private const string PeerKey = "replication-test-peer-key-0123456789";
    private static readonly string PsctlPath = typeof(ReplicationTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
        .Single(a => a.Key == "PsctlPath").Value!;

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private Dictionary<string, string> Node(string name, string role, IEnumerable<int> others) => new()
    {
        ["PS_LOG_DIR"] = _dir.File(name),
        ["PS_SERVICE_NAME"] = "orders",
        ["PS_PEER_KEY"] = PeerKey,
        ["PS_REPLICATION"] = role,
        ["PS_REPLICAS"] = string.Join(',', others.Select(p => $"http://127.0.0.1:{p}")),
        ["PS_SERVICE_CHECKPOINT_SECONDS"] = "1",
    };

    [Fact]
    public async Task PrimaryKilledAndItsLogDeleted_TheLongestReplicaIsPromoted_NothingAcknowledgedIsLost_TheOldPrimaryRejoinsAsAReplica()
    {
        var ct = TestContext.Current.CancellationToken;
        int[] ports = TestSupport.LoopbackPorts.Free(3);
        var a = Node("a", "Primary", [ports[1], ports[2]]);
        var b = Node("b", "Replica", [ports[0], ports[2]]);
        var c = Node("c", "Replica", [ports[0], ports[1]]);
        await using var replicaB = await ServiceProcess.StartAsync(b, ports[1], waitUntilReady: false);
        await using var replicaC = await ServiceProcess.StartAsync(c, ports[2], waitUntilReady: false);
        var primary = await ServiceProcess.StartAsync(a, ports[0]);

        // Eight clients, each its own session, tally (session state) and deposit (shared state) in turn, until the kill.
        const int clients = 8;
        var sessions = new string[clients];
        for (var i = 0; i < clients; i++)
        {
            sessions[i] = await primary.StartSessionAsync();
        }

        var acknowledged = new long[clients];
        using var stop = new CancellationTokenSource();
        var load = Enumerable.Range(0, clients).Select(i => Task.Run(async () =>
        {
            for (long seq = 1; seq <= 400 && !stop.IsCancellationRequested; seq++)
            {
                try
                {
                    var (status, _, _) = await primary.SendAsync(HttpMethod.Post, Path(seq), sessions[i], seq, Body(i));
                    if (status != HttpStatusCode.OK)
                    {
                        return;
                    }

                    acknowledged[i] = seq;
                }
                catch (HttpRequestException)
                {
                    return; // the primary is gone: this request may or may not have run; it is resent below
                }
            }
        }, ct)).ToArray();

        await Task.Delay(TimeSpan.FromSeconds(2), ct);
        await primary.KillAsync();
        await stop.CancelAsync();
        await Task.WhenAll(load);
        await primary.DisposeAsync();
        Assert.True(acknowledged.Sum() > 40, $"the load ran: {string.Join(", ", acknowledged)}");

        // The primary's node is lost: its whole log directory.
        Directory.Delete(_dir.File("a"), recursive: true);

        // Promote the replica that holds the most (each holds a prefix of the primary's log).
        var statusB = await StatusAsync(replicaB);
        var statusC = await StatusAsync(replicaC);
        Assert.Equal("Replica", statusB.GetProperty("role").GetString());
        var endB = statusB.GetProperty("replica").GetProperty("durableUntil").GetInt64();
        var endC = statusC.GetProperty("replica").GetProperty("durableUntil").GetInt64();
        var (promoted, other) = endB >= endC ? (replicaB, replicaC) : (replicaC, replicaB);
        var promotedAt = Stopwatch.GetTimestamp();
        var (exit, output) = await RunPsctlAsync("replication", "promote", $"http://127.0.0.1:{promoted.Port}", "--service", "orders", "--term", "2");
        Assert.True(exit == 0, output);
        await promoted.WaitUntilReadyAsync();
        var readyAfter = Stopwatch.GetElapsedTime(promotedAt);

        // Every client resends what it had not seen answered (the same number): it runs once, or is answered from the log;
        // then each session's tally counts its tally requests, each account's balance its deposits: exactly once.
        await AssertExactlyOnceAsync(promoted, sessions, acknowledged);

        // The old primary comes back on an empty directory with its old configuration: it asks the group first, learns of the
        // new term and starts as a replica (before that change, its first shipment fenced it); it acknowledges nothing
        // either way (a session start needs its record durable, which it never is there).
        await using (var old = await ServiceProcess.StartAsync(a, ports[0], waitUntilReady: false))
        {
            await WaitAsync(async () => (await StatusAsync(old)).ValueKind == JsonValueKind.Object, old);
            using var start = await old.Client.PostAsync("/ps/sessions", null, ct);
            Assert.NotEqual(HttpStatusCode.Created, start.StatusCode);
            await WaitAsync(async () => (await StatusAsync(old)).GetProperty("role").GetString() == "Replica", old);
            Assert.Contains("another node took over while this one was away; it starts as a replica", old.Output, StringComparison.Ordinal);
            await old.KillAsync();
        }

        // Restarted, its directory says replica of term 2: the new primary resets it (it held another history) and ships.
        await using var rejoined = await ServiceProcess.StartAsync(a, ports[0], waitUntilReady: false);
        await WaitAsync(async () =>
        {
            var primaryStatus = await StatusAsync(promoted);
            var end = primaryStatus.GetProperty("primary").GetProperty("localDurableUntil").GetInt64();
            var replica = (await StatusAsync(rejoined)).GetProperty("replica");
            return replica.ValueKind == JsonValueKind.Object && replica.GetProperty("durableUntil").GetInt64() == end && replica.GetProperty("contentTerm").GetInt64() == 2;
        }, rejoined);
        var otherStatus = await StatusAsync(other);
        Assert.Equal(2, otherStatus.GetProperty("term").GetInt64());
        TestContext.Current.TestOutputHelper?.WriteLine($"acknowledged {acknowledged.Sum()} requests; promoted replica ready {readyAfter.TotalMilliseconds:F0} ms after the promotion");
    }

    [Fact]
    public async Task AKilledPrimaryRestartedWhileItsGroupIsTooSlowToAnswer_WaitsForAMajority_AndStartsAsAReplica()
    {
        // Issue 51: a restarted primary asks the group which terms it saw before it serves. It asked each node once, for a
        // second or two, and decided on what it had: on a loaded host (the answers late) a killed primary came back as the
        // primary of its old term and was fenced by its first shipment instead of rejoining. Now it asks again until a
        // majority of the group answered. Here both other nodes are paused (SIGSTOP) while it starts, and resumed only once it
        // says it waits (event 1460): it then learns of term 2 and starts as a replica.
        int[] ports = TestSupport.LoopbackPorts.Free(3);
        var a = Node("a", "Primary", [ports[1], ports[2]]);
        await using var replicaB = await ServiceProcess.StartAsync(Node("b", "Replica", [ports[0], ports[2]]), ports[1], waitUntilReady: false);
        await using var replicaC = await ServiceProcess.StartAsync(Node("c", "Replica", [ports[0], ports[1]]), ports[2], waitUntilReady: false);
        await using (var primary = await ServiceProcess.StartAsync(a, ports[0]))
        {
            var session = await primary.StartSessionAsync();
            Assert.Equal(HttpStatusCode.OK, (await primary.SendAsync(HttpMethod.Post, Path(1), session, 1, Body(0))).Status);

            // The acknowledgement needed one replica; both hold the log before the kill, so either can be promoted.
            var end = (await StatusAsync(primary)).GetProperty("primary").GetProperty("localDurableUntil").GetInt64();
            foreach (var replica in new[] { replicaB, replicaC })
            {
                await WaitAsync(async () => (await StatusAsync(replica)).GetProperty("replica").GetProperty("durableUntil").GetInt64() >= end, replica);
            }

            await primary.KillAsync();
        }

        var (exit, output) = await RunPsctlAsync("replication", "promote", $"http://127.0.0.1:{replicaB.Port}", "--service", "orders", "--term", "2");
        Assert.True(exit == 0, output);
        await replicaB.WaitUntilReadyAsync();
        await WaitAsync(async () => (await StatusAsync(replicaC)).GetProperty("term").GetInt64() == 2, replicaC);

        await replicaB.SignalAsync("STOP");
        await replicaC.SignalAsync("STOP");
        var paused = true;
        try
        {
            await using var old = await ServiceProcess.StartAsync(a, ports[0], waitUntilReady: false);
            await WaitAsync(() => Task.FromResult(old.Output.Contains("waits for a majority of its group", StringComparison.Ordinal)), old);
            await replicaC.SignalAsync("CONT");
            await replicaB.SignalAsync("CONT");
            paused = false;
            await WaitAsync(async () => (await StatusAsync(old)).GetProperty("role").GetString() == "Replica", old);
            Assert.Contains("another node took over while this one was away; it starts as a replica", old.Output, StringComparison.Ordinal);
            Assert.Equal(2, (await StatusAsync(old)).GetProperty("term").GetInt64());
            Assert.DoesNotContain("is fenced by term", old.Output, StringComparison.Ordinal);
        }
        finally
        {
            if (paused)
            {
                await replicaC.SignalAsync("CONT");
                await replicaB.SignalAsync("CONT");
            }
        }
    }

    [Fact]
    public async Task PromotedWhileTheOldPrimaryServes_TheOldPrimaryIsFenced_AndNothingItAcknowledgedIsLost()
    {
        // The old primary is alive (as when it is cut off from the operator, not from every node): the promotion claims the
        // new term at a majority first, so the old primary gets nothing more acknowledged, and is fenced.
        var ct = TestContext.Current.CancellationToken;
        int[] ports = TestSupport.LoopbackPorts.Free(3);
        await using var replicaB = await ServiceProcess.StartAsync(Node("b", "Replica", [ports[0], ports[2]]), ports[1], waitUntilReady: false);
        await using var replicaC = await ServiceProcess.StartAsync(Node("c", "Replica", [ports[0], ports[1]]), ports[2], waitUntilReady: false);
        await using var primary = await ServiceProcess.StartAsync(Node("a", "Primary", [ports[1], ports[2]]), ports[0]);
        const int clients = 8;
        var sessions = new string[clients];
        for (var i = 0; i < clients; i++)
        {
            sessions[i] = await primary.StartSessionAsync();
        }

        var acknowledged = new long[clients];
        var load = Enumerable.Range(0, clients).Select(i => Task.Run(async () =>
        {
            for (long seq = 1; seq <= 2000; seq++)
            {
                try
                {
                    var (status, _, _) = await primary.SendAsync(HttpMethod.Post, Path(seq), sessions[i], seq, Body(i));
                    if (status != HttpStatusCode.OK)
                    {
                        return; // fenced: 503, nothing acknowledged
                    }

                    acknowledged[i] = seq;
                }
                catch (HttpRequestException)
                {
                    return;
                }
            }
        }, ct)).ToArray();

        await Task.Delay(TimeSpan.FromSeconds(1.5), ct);
        ServiceProcess? promoted = null;
        var attempts = new List<string>();
        for (var term = 2; term < 8 && promoted is null; term++)
        {
            var endB = (await StatusAsync(replicaB)).GetProperty("replica").GetProperty("durableUntil").GetInt64();
            var endC = (await StatusAsync(replicaC)).GetProperty("replica").GetProperty("durableUntil").GetInt64();
            var candidate = endB >= endC ? replicaB : replicaC;
            var (exit, output) = await RunPsctlAsync("replication", "promote", $"http://127.0.0.1:{candidate.Port}", "--service", "orders", "--term", $"{term}");
            attempts.Add($"term {term} at {candidate.Port}: exit {exit} {output.Trim()}");
            if (exit == 0)
            {
                promoted = candidate;
            }
        }

        Assert.True(promoted is not null, string.Join("\n", attempts));
        await Task.WhenAll(load);
        await WaitAsync(async () => (await StatusAsync(primary)).GetProperty("role").GetString() == "Replica", primary);
        Assert.True(acknowledged.Sum() > 40, $"the load ran: {string.Join(", ", acknowledged)}");

        // The old primary answers nothing from its log any more.
        var (afterFence, _, _) = await primary.SendAsync(HttpMethod.Post, Path(acknowledged[0] + 1), sessions[0], acknowledged[0] + 1, Body(0));
        Assert.Equal(HttpStatusCode.ServiceUnavailable, afterFence);

        await promoted.WaitUntilReadyAsync();
        await AssertExactlyOnceAsync(promoted, sessions, acknowledged);
        TestContext.Current.TestOutputHelper?.WriteLine($"acknowledged {acknowledged.Sum()} requests; promotions: {string.Join(" | ", attempts)}");
    }

    [Fact]
    public async Task APrimaryWhoseReplicaIsGone_StopsGracefully_AcknowledgesNothing_AnswersSessionStartsWithinReplyTimeout_AndServesOnceItIsBack()
    {
        // A group of two (docs/replication.md). With its replica gone the primary still drains and exits 0 at once (its
        // checkpoints need only its own disk; they waited for the replica until the shutdown timeout, 30 s, before); it
        // acknowledges nothing while the replica is away (503 reply-pending, the request goes on), and a session start gets
        // 503 reply-pending within ReplyTimeout too, with no session id (nothing started); once the replica is back the same
        // request is answered, having run once, and a session start is acknowledged and serves.
        int[] ports = TestSupport.LoopbackPorts.Free(2);
        var a = Node("a", "Primary", [ports[1]]);
        a["PS_REPLY_TIMEOUT_MS"] = "1000";
        var b = Node("b", "Replica", [ports[0]]);
        string session;
        await using (var replica = await ServiceProcess.StartAsync(b, ports[1], waitUntilReady: false))
        await using (var primary = await ServiceProcess.StartAsync(a, ports[0]))
        {
            session = await primary.StartSessionAsync();
            for (var seq = 1; seq <= 2; seq++)
            {
                Assert.Equal(HttpStatusCode.OK, (await primary.SendAsync(HttpMethod.Post, "/tally", session, seq, Body(0))).Status);
            }

            await replica.KillAsync();
            var stopping = Stopwatch.StartNew();
            Assert.Equal(0, await primary.TerminateAsync(TimeSpan.FromSeconds(20)));
            Assert.True(stopping.Elapsed < TimeSpan.FromSeconds(10), $"the drain took {stopping.Elapsed} with the replica gone:\n{primary.RecentOutput()}");
        }

        await using (var replica = await ServiceProcess.StartAsync(b, ports[1], waitUntilReady: false))
        await using (var primary = await ServiceProcess.StartAsync(a, ports[0]))
        {
            await replica.KillAsync();
            var (status, body, _) = await primary.SendAsync(HttpMethod.Post, "/tally", session, 3, Body(0));

            // Readiness says why nothing is acknowledged (degraded: the service is up, its replica is not).
            await WaitAsync(async () =>
            {
                using var health = await primary.Client.GetAsync("/health/ready", TestContext.Current.CancellationToken);
                return await health.Content.ReadAsStringAsync(TestContext.Current.CancellationToken) == "Degraded";
            }, primary);
            Assert.Equal(HttpStatusCode.ServiceUnavailable, status);
            Assert.EndsWith("reply-pending", body.GetProperty("type").GetString(), StringComparison.Ordinal);

            // A session start: 503 reply-pending within ReplyTimeout (1 s), no id handed out, not a wait until the replica returns.
            var starting = Stopwatch.StartNew();
            using (var start = await primary.Client.PostAsync("/ps/sessions", null, TestContext.Current.CancellationToken))
            {
                starting.Stop();
                Assert.Equal(HttpStatusCode.ServiceUnavailable, start.StatusCode);
                var problem = await start.Content.ReadFromJsonAsync<JsonElement>(TestContext.Current.CancellationToken);
                Assert.EndsWith("reply-pending", problem.GetProperty("type").GetString(), StringComparison.Ordinal);
                Assert.False(start.Headers.Contains("PS-Session"));
                Assert.True(starting.Elapsed < TimeSpan.FromSeconds(5), $"the session start was answered after {starting.Elapsed} (ReplyTimeout 1 s)");
            }

            await using var back = await ServiceProcess.StartAsync(b, ports[1], waitUntilReady: false);
            var (resent, reply, _) = await primary.SendUntilAnsweredAsync("/tally", session, 3, Body(0));
            Assert.Equal(HttpStatusCode.OK, resent);
            Assert.Equal(3, reply.GetProperty("count").GetInt64());

            // The replica is back: a session start is acknowledged and its session serves.
            var fresh = await primary.StartSessionAsync();
            Assert.Equal(HttpStatusCode.OK, (await primary.SendAsync(HttpMethod.Post, "/tally", fresh, 1, Body(0))).Status);
        }
    }

    [Fact]
    public async Task ClientGivenTheGroupsNodes_FollowsThePromotedReplica_WithoutChangingItsAddress_EachRequestRunsOnce()
    {
        // The .NET client (docs/client.md, "Replication groups") configured with the group's three nodes and the primary
        // as its base address. The primary is killed; a request sent meanwhile finds it refusing and the replicas
        // answering 503 replica, and is retried; the longest replica is promoted; the same request is served there (the
        // same session and number) and the next goes there at once. Each /tally reply counts the session's requests.
        var ct = TestContext.Current.CancellationToken;
        int[] ports = TestSupport.LoopbackPorts.Free(3);
        await using var replicaB = await ServiceProcess.StartAsync(Node("b", "Replica", [ports[0], ports[2]]), ports[1], waitUntilReady: false);
        await using var replicaC = await ServiceProcess.StartAsync(Node("c", "Replica", [ports[0], ports[1]]), ports[2], waitUntilReady: false);
        await using var primary = await ServiceProcess.StartAsync(Node("a", "Primary", [ports[1], ports[2]]), ports[0]);

        var name = "orders-" + Guid.NewGuid().ToString("N")[..6];
        var changes = new ConcurrentQueue<string>();
        using var listener = new MeterListener();
        listener.InstrumentPublished = (instrument, l) =>
        {
            if (instrument is { Name: "persistentservices.client.replication.node_changes", Meter.Name: "PersistentServices.Client" })
            {
                l.EnableMeasurementEvents(instrument);
            }
        };
        listener.SetMeasurementEventCallback<long>((_, _, tags, _) =>
        {
            var mine = false;
            string? node = null;
            foreach (var tag in tags)
            {
                mine |= tag.Key == "client" && (string?)tag.Value == name;
                node = tag.Key == "node" ? (string?)tag.Value : node;
            }

            if (mine)
            {
                changes.Enqueue(node!);
            }
        });
        listener.Start();

        var services = new ServiceCollection();
        services.AddHttpClient(name, c => c.BaseAddress = new Uri($"http://127.0.0.1:{ports[0]}"))
            .AddPersistentSessions(o =>
            {
                o.StoreDirectory = _dir.File("client-store");
                o.ReplicationGroups.Add([.. ports.Select(p => new Uri($"http://127.0.0.1:{p}"))]);
                o.RetryDelay = TimeSpan.FromMilliseconds(100);
                o.MaxRetryDelay = TimeSpan.FromSeconds(1);
                o.AttemptTimeout = TimeSpan.FromSeconds(10);
                o.MaxRetryAttempts = 120;
            });
        await using var provider = services.BuildServiceProvider();
        var http = provider.GetRequiredService<IHttpClientFactory>().CreateClient(name);

        async Task<long> TallyAsync()
        {
            using var response = await http.PostAsJsonAsync("/tally", Body(0), ct);
            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
            return (await response.Content.ReadFromJsonAsync<JsonElement>(ct)).GetProperty("count").GetInt64();
        }

        for (var i = 1; i <= 3; i++)
        {
            Assert.Equal(i, await TallyAsync());
        }

        await primary.KillAsync();
        var during = TallyAsync();
        await Task.Delay(TimeSpan.FromSeconds(1.5), ct);
        Assert.False(during.IsCompleted, "a request was answered while no node served"); // a replica answered nothing

        var endB = (await StatusAsync(replicaB)).GetProperty("replica").GetProperty("durableUntil").GetInt64();
        var endC = (await StatusAsync(replicaC)).GetProperty("replica").GetProperty("durableUntil").GetInt64();
        var promoted = endB >= endC ? replicaB : replicaC;
        var (exit, output) = await RunPsctlAsync("replication", "promote", $"http://127.0.0.1:{promoted.Port}", "--service", "orders", "--term", "2");
        Assert.True(exit == 0, output);

        Assert.Equal(4, await during.WaitAsync(TimeSpan.FromSeconds(60), ct)); // it ran once: the fourth of the session
        Assert.Equal(5, await TallyAsync());
        Assert.Equal($"http://127.0.0.1:{ports[0]}/", http.BaseAddress!.ToString());
        Assert.Equal([$"http://127.0.0.1:{ports[0]}", $"http://127.0.0.1:{promoted.Port}"], changes);
        await provider.GetRequiredKeyedService<PersistentServices.Client.PersistentSessionClient>(name).CloseIdleSessionsAsync(ct);
    }

    [Fact]
    public async Task CallsGivenTheGroupsNodes_FollowThePromotedReplica_EachCreditRunsOnce()
    {
        // Persistent calls between services (docs/calls.md, "Calling a replicated service"): a caller whose calls follow the
        // group (PersistentServices__Calls__ReplicationGroups, bound from configuration) pays through "orders", the
        // primary its client's address. The primary is killed; a payment made meanwhile waits (the replicas answer 503
        // replica, the dead node refuses); the longest replica is promoted; the payment's credit lands there with the
        // same call id, and the next payment's goes there at once. Every credit ran once on the group.
        var ct = TestContext.Current.CancellationToken;
        int[] ports = TestSupport.LoopbackPorts.Free(3);
        await using var replicaB = await ServiceProcess.StartAsync(Node("b", "Replica", [ports[0], ports[2]]), ports[1], waitUntilReady: false);
        await using var replicaC = await ServiceProcess.StartAsync(Node("c", "Replica", [ports[0], ports[1]]), ports[2], waitUntilReady: false);
        await using var primary = await ServiceProcess.StartAsync(Node("a", "Primary", [ports[1], ports[2]]), ports[0]);
        var callerEnvironment = new Dictionary<string, string>
        {
            ["PS_LOG_DIR"] = _dir.File("payer"),
            ["PS_SERVICE_NAME"] = "payer",
            ["PS_PEER_KEY"] = PeerKey,
            ["PS_CALLEE_URL"] = $"http://127.0.0.1:{ports[0]}",
            ["PS_CALLEE_SERVICE"] = "orders",
        };
        for (var n = 0; n < ports.Length; n++)
        {
            callerEnvironment[$"PersistentServices__Calls__ReplicationGroups__0__{n}"] = $"http://127.0.0.1:{ports[n]}";
        }

        await using var caller = await ServiceProcess.StartAsync(callerEnvironment);
        var session = await caller.StartSessionAsync();

        async Task PayAsync(string op, long seq)
        {
            var (status, body, _) = await caller.SendAsync(HttpMethod.Post, "/pay", session, seq, new { account = op, amount = 10 });
            Assert.True(status == HttpStatusCode.OK, $"/pay {op}: {(int)status} {body}\n{caller.RecentOutput()}");
        }

        await PayAsync("op-1", 1);
        await primary.KillAsync();
        var during = PayAsync("op-2", 2);
        await Task.Delay(TimeSpan.FromSeconds(1.5), ct);
        Assert.False(during.IsCompleted, "a payment was answered while no node of the group served"); // a replica ran nothing

        var endB = (await StatusAsync(replicaB)).GetProperty("replica").GetProperty("durableUntil").GetInt64();
        var endC = (await StatusAsync(replicaC)).GetProperty("replica").GetProperty("durableUntil").GetInt64();
        var promoted = endB >= endC ? replicaB : replicaC;
        var (exit, output) = await RunPsctlAsync("replication", "promote", $"http://127.0.0.1:{promoted.Port}", "--service", "orders", "--term", "2");
        Assert.True(exit == 0, output);

        await during.WaitAsync(TimeSpan.FromSeconds(60), ct);
        await PayAsync("op-3", 3);
        foreach (var op in new[] { "op-1", "op-2", "op-3" })
        {
            var (status, body, _) = await promoted.SendAsync(HttpMethod.Get, $"/bank/credits/{op}", null, null);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.True(body.GetProperty("count").GetInt32() == 1, $"{op} credited {body.GetProperty("count").GetInt32()} times");
        }

        Assert.Contains($"calls now go to http://127.0.0.1:{promoted.Port}", caller.RecentOutput(60_000), StringComparison.Ordinal);
    }

    private static async Task WaitAsync(Func<Task<bool>> condition, ServiceProcess node)
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

            await Task.Delay(100, TestContext.Current.CancellationToken);
        }

        Assert.Fail($"not within 30 s:\n{node.RecentOutput()}");
    }

    private static Task<(int Exit, string Output)> RunPsctlAsync(params string[] args) => RunPsctlWithKeyAsync(PeerKey, args);

    /// <summary>Runs psctl with <paramref name="peerKey"/> as the service's peer key (PSCTL_PEER_KEY); its exit status and output.</summary>
    internal static async Task<(int Exit, string Output)> RunPsctlWithKeyAsync(string peerKey, params string[] args)
    {
        var start = new ProcessStartInfo("dotnet", [PsctlPath, .. args]) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        start.Environment["PSCTL_PEER_KEY"] = peerKey;
        using var process = Process.Start(start)!;
        var stdout = process.StandardOutput.ReadToEndAsync(TestContext.Current.CancellationToken);
        var stderr = process.StandardError.ReadToEndAsync(TestContext.Current.CancellationToken);
        await process.WaitForExitAsync(TestContext.Current.CancellationToken);
        return (process.ExitCode, await stdout + await stderr);
    }
}
