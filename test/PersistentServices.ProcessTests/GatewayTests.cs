using System.Buffers.Text;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Reflection;
using System.Text;
using System.Text.Json;

namespace PersistentServices.ProcessTests;

/// <summary>
/// The gateway (ps-gateway, a child process) in front of the test service's instances, each killed with SIGKILL and
/// restarted on its log while clients that never retry send requests through the gateway (docs/gateway.md). Every
/// request is sent once; any error or non-2xx counts. Lost and duplicated operations are checked from the client side:
/// each reply's running balance or tally must be exactly one more than the client's previous reply, and the final
/// state must equal what the clients were told.
/// </summary>
[Trait("Category", "Process")]
public sealed class GatewayTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose() => _dir.Dispose();

    private static int EnvInt(string name, int fallback)
        => Environment.GetEnvironmentVariable(name) is { Length: > 0 } text ? int.Parse(text, CultureInfo.InvariantCulture) : fallback;

    private Dictionary<string, string> InstanceEnvironment(int ordinal, bool withOrdinal) => new()
    {
        ["PS_LOG_DIR"] = _dir.File($"log-{ordinal}"),
        ["PS_MAX_SESSIONS"] = "1000000", // every key and session comes from the gateway's one address
        ["PS_INSTANCE_ORDINAL"] = withOrdinal ? ordinal.ToString(CultureInfo.InvariantCulture) : "",
        ["PS_PEER_KEY"] = GroupPeerKey, // the gateway signs the keys it generates with it
    };

    /// <summary>
    /// kill -9 of the only instance, PS_GATEWAY_KILLS times (default 10), under 8 plain clients: 4 send deposits with no
    /// identity at all (curl-like; the gateway gives each a key), 4 use sessions and send each numbered request once.
    /// </summary>
    [Fact]
    public async Task PlainClients_ThroughKill9s_SeeNoError_NothingLostOrDuplicated()
    {
        var kills = EnvInt("PS_GATEWAY_KILLS", 10);
        var environment = InstanceEnvironment(0, withOrdinal: false);
        var service = await ServiceProcess.StartAsync(environment);
        var port = service.Port;
        await using var gateway = await GatewayProcess.StartAsync([(0, port)]);
        var run = new PlainClientRun(gateway.Client, depositClients: 4, sessionClients: 4, expectOwner: false);
        var clients = run.Start();
        try
        {
            for (var kill = 0; kill < kills; kill++)
            {
                await run.WaitForProgressAsync(20, () => service.RecentOutput());
                await service.KillAsync();
                await service.DisposeAsync();
                service = await ServiceProcess.StartAsync(environment, port);
            }

            await run.WaitForProgressAsync(20, () => service.RecentOutput());
        }
        finally
        {
            run.Stop();
            await Task.WhenAll(clients);
            await service.DisposeAsync();
        }

        await using var final = await ServiceProcess.StartAsync(environment, port);
        await run.AssertStateAsync(final.Client, gateway.Output);
        TestContext.Current.TestOutputHelper?.WriteLine($"gateway, {kills} kills: {run.Summary}; {Holds(gateway.Output)}");
    }

    /// <summary>
    /// A replication group behind the gateway (docs/replication.md, docs/gateway.md "Replicas"): instance 0 is a primary
    /// and two replicas, each its own log directory. The primary is SIGKILLed and its log directory deleted under 8 plain
    /// clients; the longest replica is promoted (as an operator or a consensus engine would, signed with the peer key). The
    /// gateway held every request meanwhile and finds the new primary by trying the group's nodes (a replica answers 503
    /// replica): 0 client errors, 0 lost, 0 duplicated, checked on the new primary.
    /// </summary>
    [Fact]
    public async Task PlainClients_ThroughThePrimarysLossAndAPromotion_SeeNoError_NothingLostOrDuplicated()
    {
        int[] ports = TestSupport.LoopbackPorts.Free(3);
        Dictionary<string, string> Node(int n, string role) => GroupNode(n, role, ports);

        await using var b = await ServiceProcess.StartAsync(Node(1, "Replica"), ports[1], waitUntilReady: false);
        await using var c = await ServiceProcess.StartAsync(Node(2, "Replica"), ports[2], waitUntilReady: false);
        var a = await ServiceProcess.StartAsync(Node(0, "Primary"), ports[0]);
        await using var gateway = await GatewayProcess.StartAsync([(0, string.Join(',', ports.Select(p => $"http://127.0.0.1:{p}")))]);
        var run = new PlainClientRun(gateway.Client, depositClients: 4, sessionClients: 4, expectOwner: true);
        var clients = run.Start();
        ServiceProcess promoted;
        try
        {
            await run.WaitForProgressAsync(100, () => a.RecentOutput());
            await a.KillAsync();
            await a.DisposeAsync();
            Directory.Delete(_dir.File("log-0"), recursive: true);

            var ends = new long[2];
            for (var i = 0; i < 2; i++)
            {
                using var status = await new[] { b, c }[i].GetReplicationStatusAsync(Ct);
                ends[i] = (await status.Content.ReadFromJsonAsync<JsonElement>(Ct)).GetProperty("replica").GetProperty("durableUntil").GetInt64();
            }

            promoted = ends[0] >= ends[1] ? b : c;
            var (exit, output) = await ReplicationTests.RunPsctlWithKeyAsync(GroupPeerKey, "replication", "promote", $"http://127.0.0.1:{promoted.Port}", "--service", "test", "--term", "2");
            Assert.True(exit == 0, output);

            await run.WaitForProgressAsync(100, () => promoted.RecentOutput());
        }
        finally
        {
            run.Stop();
            await Task.WhenAll(clients);
        }

        await run.AssertStateAsync(promoted.Client, gateway.Output);
        TestContext.Current.TestOutputHelper?.WriteLine($"gateway, primary lost and a replica promoted: {run.Summary}; {Holds(gateway.Output)}");
    }

    /// <summary>
    /// A planned handover (docs/replication.md, "Switchover") behind ps-gateway: the same group and clients that never
    /// retry; the primary hands its role to the replica that holds the most (psctl replication switchover) while they
    /// send. The gateway passes over the handing-over primary, the replica being promoted and the fenced old primary
    /// (each 503 replica) and holds the requests until the new primary answers: 0 client errors, 0 lost, 0 duplicated.
    /// </summary>
    [Fact]
    public async Task PlainClients_ThroughASwitchover_SeeNoError_NothingLostOrDuplicated()
    {
        int[] ports = TestSupport.LoopbackPorts.Free(3);
        ServiceProcess[] nodes = [null!, null!, null!];
        await using var b = nodes[1] = await ServiceProcess.StartAsync(GroupNode(1, "Replica", ports), ports[1], waitUntilReady: false);
        await using var c = nodes[2] = await ServiceProcess.StartAsync(GroupNode(2, "Replica", ports), ports[2], waitUntilReady: false);
        await using var a = nodes[0] = await ServiceProcess.StartAsync(GroupNode(0, "Primary", ports), ports[0]);
        await using var gateway = await GatewayProcess.StartAsync([(0, string.Join(',', ports.Select(p => $"http://127.0.0.1:{p}")))]);
        var run = new PlainClientRun(gateway.Client, depositClients: 4, sessionClients: 4, expectOwner: true);
        var clients = run.Start();
        ServiceProcess promoted;
        string answer;
        try
        {
            await run.WaitForProgressAsync(100, () => a.RecentOutput());
            (var exit, answer) = await ReplicationTests.RunPsctlWithKeyAsync(GroupPeerKey, "replication", "switchover", $"http://127.0.0.1:{ports[0]}", "--service", "test");
            Assert.True(exit == 0, $"{answer}\n{a.RecentOutput()}");
            var primary = JsonDocument.Parse(answer).RootElement.GetProperty("primary").GetString();
            promoted = nodes[Array.FindIndex(ports, p => primary == $"http://127.0.0.1:{p}/")];
            await run.WaitForProgressAsync(100, () => promoted.RecentOutput());
        }
        finally
        {
            run.Stop();
            await Task.WhenAll(clients);
        }

        await run.AssertStateAsync(promoted.Client, gateway.Output);
        TestContext.Current.TestOutputHelper?.WriteLine($"gateway, a switchover ({answer.Trim()}): {run.Summary}; {Holds(gateway.Output)}");
    }

    /// <summary>
    /// Issue 51's nemesis through the gateway, with plain clients that never retry: a three-node Raft group is instance 0
    /// behind the gateway, and its primary is faulted one fault at a time, drawn from a printed seed (PS_NEMESIS_SEED
    /// replays it; PS_GATEWAY_NEMESIS_FAULTS sets how many, 8 in the suite): kill -9, kill -9 with its log directory deleted,
    /// a pause (SIGSTOP until the clients progress again, then SIGCONT) and a switchover to a random replica. Only a killed
    /// node is started again, as a restarter would; a paused or switched-over one, fenced, must become a replica in the
    /// process it had (in-process demotion). 0 client errors, 0 lost, 0 duplicated, checked on the last primary.
    /// </summary>
    [Fact]
    public async Task PlainClients_ThroughANemesisOfARaftGroup_SeeNoError_NothingLostOrDuplicated_AndOnlyKilledNodesAreRestarted()
    {
        var faults = EnvInt("PS_GATEWAY_NEMESIS_FAULTS", 8);
        var seed = EnvInt("PS_NEMESIS_SEED", Random.Shared.Next(1, 100_000));
        var random = new Random(seed);
        string[] kinds = ["kill", "kill, log deleted", "pause", "switchover"];
        int[] ports = TestSupport.LoopbackPorts.Free(3);
        Dictionary<string, string> Node(int n) => new(GroupNode(n, "None", ports))
        {
            ["PS_FAILOVER"] = "Raft",
            ["PS_ADDRESS"] = $"http://127.0.0.1:{ports[n]}",
            ["PS_INITIAL_PRIMARY"] = $"http://127.0.0.1:{ports[0]}",
            ["PS_REPLICAS"] = string.Join(',', ports.Select(p => $"http://127.0.0.1:{p}")),
            ["PS_SWITCHOVER_TIMEOUT_MS"] = "1000",
            ["PS_SERVICE_CHECKPOINT_SECONDS"] = "1",
        };

        ServiceProcess[] nodes = [null!, null!, null!];
        nodes[1] = await ServiceProcess.StartAsync(Node(1), ports[1], waitUntilReady: false);
        nodes[2] = await ServiceProcess.StartAsync(Node(2), ports[2], waitUntilReady: false);
        nodes[0] = await ServiceProcess.StartAsync(Node(0), ports[0]);
        await using var gateway = await GatewayProcess.StartAsync([(0, string.Join(',', ports.Select(p => $"http://127.0.0.1:{p}")))]);
        var run = new PlainClientRun(gateway.Client, depositClients: 4, sessionClients: 4, expectOwner: true);
        var clients = run.Start();
        var paused = -1;
        var log = new List<string>();
        try
        {
            for (var round = 0; round < faults; round++)
            {
                var primary = await GroupPrimaryAsync(nodes);
                await run.WaitForProgressAsync(30 + random.Next(50), () => nodes[primary].RecentOutput());
                var kind = round < kinds.Length ? kinds[(round + seed) % kinds.Length] : kinds[random.Next(kinds.Length)];
                var target = (primary + 1 + random.Next(2)) % 3;
                var process = nodes[primary].ProcessId;
                switch (kind)
                {
                    case "kill":
                    case "kill, log deleted":
                        await nodes[primary].KillAsync();
                        if (kind != "kill")
                        {
                            Directory.Delete(_dir.File("log-" + primary.ToString(CultureInfo.InvariantCulture)), recursive: true);
                        }

                        break;
                    case "pause":
                        await nodes[primary].SignalAsync("STOP");
                        paused = primary;
                        break;
                    default:
                        var (exit, answer) = await ReplicationTests.RunPsctlWithKeyAsync(GroupPeerKey, "replication", "switchover", $"http://127.0.0.1:{ports[primary]}",
                            "--service", "test", "--to", $"http://127.0.0.1:{ports[target]}");
                        kind = exit == 0 ? kind : "switchover (refused)";
                        break;
                }

                // The clients are served again (by another node, once the group has promoted one), and see no error.
                var clock = Stopwatch.StartNew();
                await run.WaitForProgressAsync(20, () => string.Join("\n----\n", nodes.Select(n => n.RecentOutput())));
                log.Add($"round {round}: {kind} of node {primary}, 20 more replies within {clock.ElapsedMilliseconds} ms");
                if (clock.ElapsedMilliseconds > 1000)
                {
                    // A slow one: what the gateway held meanwhile, and why.
                    log.Add(string.Join('\n', gateway.Output.Split('\n').TakeLast(12).Select(l => "    " + l.Trim())));
                    for (var i = 0; i < nodes.Length; i++)
                    {
                        var lines = nodes[i].Output.Split('\n');
                        log.Add(string.Join('\n', lines.Select((l, j) => (l, j)).Where(x => x.l.Contains("Replication", StringComparison.Ordinal)).TakeLast(14)
                            .Select(x => $"    node{i} {x.l.Trim()} {(x.j + 1 < lines.Length ? lines[x.j + 1].Trim() : "")}")));
                    }
                }

                if (paused >= 0)
                {
                    await nodes[paused].SignalAsync("CONT");
                    paused = -1;
                }

                if (kind.StartsWith("kill", StringComparison.Ordinal))
                {
                    var old = nodes[primary];
                    Volatile.Write(ref nodes[primary], await ServiceProcess.StartAsync(Node(primary), ports[primary], waitUntilReady: false));
                    await old.DisposeAsync();
                }
                else if (kind == "switchover (refused)")
                {
                    continue;
                }

                // Back as a replica of the newest term; a paused or switched-over node in the process it had.
                var deadline = DateTime.UtcNow.AddSeconds(60);
                while (!await ReplicationLoad.IsCaughtUpReplicaAsync(nodes[primary]))
                {
                    Assert.True(DateTime.UtcNow < deadline, $"round {round} ({kind}): node {primary} did not rejoin as a replica:\n{nodes[primary].RecentOutput()}");
                    await Task.Delay(50, Ct);
                }

                Assert.True(kind.StartsWith("kill", StringComparison.Ordinal) || nodes[primary].ProcessId == process, $"node {primary} was restarted");
            }

            await run.WaitForProgressAsync(20, () => string.Join("\n----\n", nodes.Select(n => n.RecentOutput())));
        }
        finally
        {
            run.Stop();
            await Task.WhenAll(clients);
            if (paused >= 0)
            {
                await nodes[paused].SignalAsync("CONT");
            }
        }

        try
        {
            var last = await GroupPrimaryAsync(nodes);
            await run.AssertStateAsync(nodes[last].Client, gateway.Output);
            var term = (await ReplicationLoad.StatusAsync(nodes[last])).GetProperty("term").GetInt64();
            TestContext.Current.TestOutputHelper?.WriteLine(
                $"gateway nemesis, seed {seed}, {faults} faults, term {term} at the end: {run.Summary}; {Holds(gateway.Output)}\n{string.Join('\n', log)}");
        }
        finally
        {
            foreach (var node in nodes)
            {
                await node.DisposeAsync();
            }
        }
    }

    /// <summary>The node of a group that answers as the primary of the newest term (waiting up to 30 s for one).</summary>
    private static async Task<int> GroupPrimaryAsync(ServiceProcess[] nodes)
    {
        var deadline = DateTime.UtcNow.AddSeconds(30);
        while (true)
        {
            var (best, newest, primaryTerm) = (-1, -1L, -1L);
            for (var i = 0; i < nodes.Length; i++)
            {
                try
                {
                    using var timeout = CancellationTokenSource.CreateLinkedTokenSource(Ct);
                    timeout.CancelAfter(TimeSpan.FromSeconds(2));
                    var status = await ReplicationLoad.StatusAsync(nodes[i]).WaitAsync(timeout.Token);
                    var term = status.GetProperty("term").GetInt64();
                    newest = Math.Max(newest, term);
                    if (status.GetProperty("role").GetString() == "Primary" && term > primaryTerm)
                    {
                        (best, primaryTerm) = (i, term);
                    }
                }
                catch (Exception ex) when (ex is HttpRequestException or OperationCanceledException)
                {
                }
            }

            if (best >= 0 && primaryTerm >= newest)
            {
                return best;
            }

            Assert.True(DateTime.UtcNow < deadline, "no primary within 30 s:\n" + string.Join("\n----\n", nodes.Select(n => n.RecentOutput())));
            await Task.Delay(50, Ct);
        }
    }

    private const string GroupPeerKey = "gateway-replication-test-key-0123456789";

    /// <summary>Node <paramref name="n"/> of a replication group of three that is instance 0 behind the gateway (manual failover).</summary>
    private Dictionary<string, string> GroupNode(int n, string role, int[] ports) => new(InstanceEnvironment(n, withOrdinal: false))
    {
        ["PS_INSTANCE_ORDINAL"] = "0", // the group is one instance: every node serves instance 0's sessions
        ["PS_SERVICE_NAME"] = "test",
        ["PS_PEER_KEY"] = GroupPeerKey,
        ["PS_REPLICATION"] = role,
        ["PS_REPLICAS"] = string.Join(',', ports.Where((_, i) => i != n).Select(p => $"http://127.0.0.1:{p}")),
    };

    /// <summary>
    /// Through the gateway each client keeps its own per-address share of the session table (the gateway sets
    /// X-Forwarded-For; the service trusts it from loopback): one address starting sessions until it is refused leaves a
    /// second address served. Without the header both would be the gateway's one address, and the second refused too.
    /// </summary>
    [Fact]
    public async Task ThroughTheGateway_OneClientsSessionFlood_LeavesASecondClientServed()
    {
        var environment = InstanceEnvironment(0, withOrdinal: false);
        environment["PS_MAX_SESSIONS"] = "1000";
        environment["PS_MAX_SESSIONS_PER_ADDRESS"] = "20";
        await using var service = await ServiceProcess.StartAsync(environment);
        await using var gateway = await GatewayProcess.StartAsync([(0, service.Port)]);
        using var flooder = ClientFrom("127.0.0.2", gateway.Client.BaseAddress!);
        using var other = ClientFrom("127.0.0.3", gateway.Client.BaseAddress!);

        var started = 0;
        HttpStatusCode last;
        do
        {
            using var response = await flooder.PostAsync("/ps/sessions", null, Ct);
            last = response.StatusCode;
            started += response.IsSuccessStatusCode ? 1 : 0;
        }
        while (last != HttpStatusCode.TooManyRequests && started <= 20);

        Assert.Equal((20, HttpStatusCode.TooManyRequests), (started, last));
        using var served = await other.PostAsync("/ps/sessions", null, Ct);
        Assert.True(served.IsSuccessStatusCode, $"the second address got {(int)served.StatusCode}: {await served.Content.ReadAsStringAsync(Ct)}");
    }

    /// <summary>A client whose connections come from <paramref name="local"/> (any 127.0.0.0/8 address is this host's).</summary>
    private static HttpClient ClientFrom(string local, Uri baseAddress) => new(new SocketsHttpHandler
    {
        ConnectCallback = async (context, token) =>
        {
            var socket = new System.Net.Sockets.Socket(System.Net.Sockets.AddressFamily.InterNetwork, System.Net.Sockets.SocketType.Stream, System.Net.Sockets.ProtocolType.Tcp) { NoDelay = true };
            try
            {
                socket.Bind(new IPEndPoint(IPAddress.Parse(local), 0));
                await socket.ConnectAsync(context.DnsEndPoint, token);
                return new System.Net.Sockets.NetworkStream(socket, ownsSocket: true);
            }
            catch
            {
                socket.Dispose();
                throw;
            }
        },
    })
    { BaseAddress = baseAddress, Timeout = TimeSpan.FromSeconds(30) };

    /// <summary>
    /// A rolling upgrade of the one instance, PS_GATEWAY_UPGRADES times (default 5), under the same 8 plain clients: SIGTERM
    /// (the graceful drain), then a restart on the same log into the other build (PS_VERSION 1 and 2 alternate: version 2
    /// adds a field to /deposit's reply, docs/upgrades.md).
    /// </summary>
    [Fact]
    public async Task PlainClients_ThroughRollingUpgrades_SeeNoError_NothingLostOrDuplicated()
    {
        var upgrades = EnvInt("PS_GATEWAY_UPGRADES", 5);
        var environment = InstanceEnvironment(0, withOrdinal: false);
        environment["PS_VERSION"] = "1";
        var service = await ServiceProcess.StartAsync(environment);
        var port = service.Port;
        await using var gateway = await GatewayProcess.StartAsync([(0, port)]);
        var run = new PlainClientRun(gateway.Client, depositClients: 4, sessionClients: 4, expectOwner: false);
        var clients = run.Start();
        try
        {
            for (var upgrade = 0; upgrade < upgrades; upgrade++)
            {
                await run.WaitForProgressAsync(20, () => service.RecentOutput());
                Assert.Equal(0, await service.TerminateAsync(TimeSpan.FromSeconds(60)));
                await service.DisposeAsync();
                environment["PS_VERSION"] = upgrade % 2 == 0 ? "2" : "1";
                service = await ServiceProcess.StartAsync(environment, port);
            }

            await run.WaitForProgressAsync(20, () => service.RecentOutput());
        }
        finally
        {
            run.Stop();
            await Task.WhenAll(clients);
        }

        await run.AssertStateAsync(service.Client, gateway.Output);
        await service.DisposeAsync();
        TestContext.Current.TestOutputHelper?.WriteLine($"gateway, {upgrades} rolling upgrades: {run.Summary}; {Holds(gateway.Output)}");
    }

    /// <summary>
    /// Three instances (ordinals 0, 1, 2), six session clients through the gateway, PS_GATEWAY_OWNER_KILLS kills
    /// (default 6) of the instances in turn: every reply comes from the session's owner (the gateway's
    /// <c>PS-Gateway-Instance</c> header equals the id's first byte), and afterwards each session exists on its owner only.
    /// </summary>
    [Fact]
    public async Task ThreeInstances_EachSessionServedByItsOwner_ThroughKillsOfAnyInstance()
    {
        var kills = EnvInt("PS_GATEWAY_OWNER_KILLS", 6);
        var services = new ServiceProcess[3];
        for (var i = 0; i < 3; i++)
        {
            services[i] = await ServiceProcess.StartAsync(InstanceEnvironment(i, withOrdinal: true));
        }

        var ports = services.Select(s => s.Port).ToArray();
        await using var gateway = await GatewayProcess.StartAsync([(0, ports[0]), (1, ports[1]), (2, ports[2])]);
        var run = new PlainClientRun(gateway.Client, depositClients: 0, sessionClients: 6, expectOwner: true);
        var clients = run.Start();
        try
        {
            for (var kill = 0; kill < kills; kill++)
            {
                var victim = kill % 3;
                await run.WaitForProgressAsync(12, () => services[victim].RecentOutput());
                await services[victim].KillAsync();
                await services[victim].DisposeAsync();
                services[victim] = await ServiceProcess.StartAsync(InstanceEnvironment(victim, withOrdinal: true), ports[victim]);
            }

            await run.WaitForProgressAsync(12, () => gateway.Output);
        }
        finally
        {
            run.Stop();
            await Task.WhenAll(clients);
        }

        try
        {
            await run.AssertStateAsync(gateway.Client, gateway.Output);
            var owners = run.Sessions.Select(s => Base64Url.DecodeFromChars(s.Key)[0]).ToList();
            Assert.Equal([0, 0, 1, 1, 2, 2], owners.Order().Select(o => (int)o));
            foreach (var (session, acknowledged) in run.Sessions)
            {
                var owner = Base64Url.DecodeFromChars(session)[0];
                for (var i = 0; i < 3; i++)
                {
                    var (status, body, _) = await services[i].SendAsync(HttpMethod.Get, "/tally", session, null);
                    if (i == owner)
                    {
                        Assert.Equal(HttpStatusCode.OK, status);
                        Assert.Equal(acknowledged, body.GetProperty("count").GetInt64());
                    }
                    else
                    {
                        Assert.Equal(HttpStatusCode.NotFound, status); // the session lives on its owner only
                    }
                }
            }
        }
        finally
        {
            foreach (var service in services)
            {
                await service.DisposeAsync();
            }
        }

        TestContext.Current.TestOutputHelper?.WriteLine($"gateway, 3 instances, {kills} kills: {run.Summary}; {Holds(gateway.Output)}");
    }

    /// <summary>
    /// Issue 50, finding 1: with its defaults the gateway stopped serving plain requests after 10,000 (its generated keys
    /// counted against its one address's MaxSessionsPerAddress and were kept 48 h). Service and gateway with their default
    /// options (the peer key set: the gateway signs its keys), 16 clients without identity, PS_GATEWAY_PLAIN_REQUESTS requests
    /// (default 12,000, beyond the old limit): every one 2xx, and every balance what its client was told.
    /// </summary>
    [Fact]
    public async Task PlainClients_WithDefaultOptions_BeyondTheOldLimit_NoAdmissionError()
    {
        var requests = EnvInt("PS_GATEWAY_PLAIN_REQUESTS", 12_000);
        var environment = InstanceEnvironment(0, withOrdinal: false);
        environment.Remove("PS_MAX_SESSIONS"); // the service's defaults: MaxSessions 100,000, a tenth of it per address
        await using var service = await ServiceProcess.StartAsync(environment);
        await using var gateway = await GatewayProcess.StartAsync([(0, service.Port)], holdTime: null);
        var run = new PlainClientRun(gateway.Client, depositClients: 16, sessionClients: 0, expectOwner: false);
        var clock = Stopwatch.StartNew();
        var clients = run.Start();
        try
        {
            for (var done = 0; done < requests; done += 2000)
            {
                await run.WaitForProgressAsync(Math.Min(2000, requests - done), () => service.RecentOutput());
            }
        }
        finally
        {
            run.Stop();
            await Task.WhenAll(clients);
        }

        await run.AssertStateAsync(service.Client, gateway.Output);
        TestContext.Current.TestOutputHelper?.WriteLine($"plain clients, defaults: {run.Summary} in {clock.Elapsed.TotalSeconds:F0} s; {Holds(gateway.Output)}");
    }

    /// <summary>
    /// Issue 50, findings 2 and 3, against two real instances: one key in every spelling docs/client.md allows (bare,
    /// quoted, with spaces) runs once; PS-Seq without PS-Session gets the service's 400 on every send and never runs.
    /// </summary>
    [Fact]
    public async Task OneKeyInEverySpelling_AcrossTwoInstances_RunsOnce_AndASequenceWithoutASessionNever()
    {
        await using var first = await ServiceProcess.StartAsync(InstanceEnvironment(0, withOrdinal: true));
        await using var second = await ServiceProcess.StartAsync(InstanceEnvironment(1, withOrdinal: true));
        await using var gateway = await GatewayProcess.StartAsync([(0, first.Port), (1, second.Port)]);

        for (var k = 0; k < 8; k++)
        {
            foreach (var spelling in (string[])[$"spell-{k}", $"\"spell-{k}\"", $"  spell-{k} ", $" \"spell-{k}\" "])
            {
                using var request = new HttpRequestMessage(HttpMethod.Post, "/deposit") { Content = JsonContent.Create(new { account = $"spell-{k}", amount = 1 }) };
                request.Headers.TryAddWithoutValidation("Idempotency-Key", spelling);
                using var response = await gateway.Client.SendAsync(request, Ct);
                Assert.Equal(HttpStatusCode.OK, response.StatusCode);
                Assert.Equal(1, (await response.Content.ReadFromJsonAsync<JsonElement>(Ct)).GetProperty("balance").GetInt64());
            }
        }

        for (var send = 0; send < 2; send++)
        {
            using var request = new HttpRequestMessage(HttpMethod.Post, "/deposit") { Content = JsonContent.Create(new { account = "seq-only", amount = 1 }) };
            request.Headers.Add("PS-Seq", "1");
            using var response = await gateway.Client.SendAsync(request, Ct);
            Assert.Equal(HttpStatusCode.BadRequest, response.StatusCode);
            Assert.Contains("session-header", await response.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);
        }

        var balances = new[] { first, second }.Select(s => s.Client.GetFromJsonAsync<Dictionary<string, long>>("/balances", Ct));
        var all = (await Task.WhenAll(balances)).SelectMany(b => b!).GroupBy(b => b.Key).ToDictionary(g => g.Key, g => g.Sum(b => b.Value));
        Assert.All(Enumerable.Range(0, 8), k => Assert.Equal(1, all.GetValueOrDefault($"spell-{k}")));
        Assert.Equal(0, all.GetValueOrDefault("seq-only"));
    }

    /// <summary>
    /// Issue 50, finding 4: 300 connections from one address each announcing 1 MiB and trickling took the gateway from 82 to
    /// 417 MiB. Now a declared length is taken from the budget before a byte is read (one address: its eighth of
    /// MaxBufferedBytes, 8 MiB), the rest are refused at once, and the trickling ones are closed by MinRequestBodyDataRate;
    /// meanwhile another address is served.
    /// </summary>
    [Fact]
    public async Task TrickledBodies_StayWithinTheBudget_AnotherClientIsServed()
    {
        const int connections = 300;
        await using var service = await ServiceProcess.StartAsync(InstanceEnvironment(0, withOrdinal: false));
        await using var gateway = await GatewayProcess.StartAsync([(0, service.Port)], holdTime: null);
        using (var warm = await gateway.Client.PostAsJsonAsync("/deposit", new { account = "warm", amount = 1 }, Ct))
        {
            Assert.Equal(HttpStatusCode.OK, warm.StatusCode);
        }

        var before = gateway.ResidentBytes();
        var address = gateway.Client.BaseAddress!;
        var sockets = new List<System.Net.Sockets.Socket>();
        var peak = before;
        try
        {
            var head = Encoding.ASCII.GetBytes("POST /deposit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{");
            for (var i = 0; i < connections; i++)
            {
                var socket = new System.Net.Sockets.Socket(System.Net.Sockets.AddressFamily.InterNetwork, System.Net.Sockets.SocketType.Stream, System.Net.Sockets.ProtocolType.Tcp);
                await socket.ConnectAsync(address.Host, address.Port, Ct);
                await socket.SendAsync(head, Ct);
                sockets.Add(socket);
            }

            // Each connection is answered 503 at once, or was let in within the address's share and trickles on.
            var answers = sockets.Select(AnswerAsync).ToList();
            var waited = Stopwatch.StartNew();
            while (answers.Count(a => a.IsCompleted) < connections - 8 && waited.Elapsed < TimeSpan.FromSeconds(60))
            {
                peak = Math.Max(peak, gateway.ResidentBytes());
                await Task.Delay(50, Ct);
            }

            var refused = answers.Count(a => a.IsCompletedSuccessfully && a.Result.StartsWith("HTTP/1.1 503", StringComparison.Ordinal));
            var trickling = sockets.Where((_, i) => !answers[i].IsCompleted).ToList();
            // Another address is served while they trickle.
            using var other = new HttpClient(new SocketsHttpHandler
            {
                ConnectCallback = async (context, token) =>
                {
                    var socket = new System.Net.Sockets.Socket(System.Net.Sockets.AddressFamily.InterNetwork, System.Net.Sockets.SocketType.Stream, System.Net.Sockets.ProtocolType.Tcp);
                    socket.Bind(new IPEndPoint(IPAddress.Parse("127.0.0.2"), 0));
                    await socket.ConnectAsync(context.DnsEndPoint, token);
                    return new System.Net.Sockets.NetworkStream(socket, ownsSocket: true);
                },
            }) { BaseAddress = address };
            using (var served = await other.PostAsJsonAsync("/deposit", new { account = "other", amount = 1 }, Ct))
            {
                Assert.Equal(HttpStatusCode.OK, served.StatusCode);
            }

            // The trickling ones send 1 KiB every 500 ms (2 KiB/s, below MinRequestBodyDataRate) until the gateway closes them.
            var chunk = Encoding.ASCII.GetBytes(new string(' ', 1024));
            var deadline = Stopwatch.StartNew();
            while (trickling.Count > 0 && deadline.Elapsed < TimeSpan.FromSeconds(60))
            {
                peak = Math.Max(peak, gateway.ResidentBytes());
                foreach (var socket in trickling.ToList())
                {
                    try
                    {
                        if (answers[sockets.IndexOf(socket)].IsCompleted)
                        {
                            trickling.Remove(socket); // closed by the gateway
                            continue;
                        }

                        await socket.SendAsync(chunk, Ct);
                    }
                    catch (System.Net.Sockets.SocketException)
                    {
                        trickling.Remove(socket);
                    }
                }

                await Task.Delay(500, Ct);
            }

            peak = Math.Max(peak, gateway.ResidentBytes());
            TestContext.Current.TestOutputHelper?.WriteLine(
                $"trickle: {connections} connections x 1 MiB announced: {refused} refused at once, {connections - refused} let in; gateway RSS {before >> 20} MiB before, peak {peak >> 20} MiB; " +
                $"the trickling ones closed after {deadline.Elapsed.TotalSeconds:F1} s");
            Assert.Empty(trickling);
            Assert.True(refused >= connections - 8, $"{refused} refused");
            Assert.True(peak - before < (8L << 20) + (48L << 20), $"RSS grew by {(peak - before) >> 20} MiB");
        }
        finally
        {
            foreach (var socket in sockets)
            {
                socket.Dispose();
            }
        }
    }

    /// <summary>The first bytes of the answer on <paramref name="socket"/>, or "" when the gateway closed it without one.</summary>
    private static async Task<string> AnswerAsync(System.Net.Sockets.Socket socket)
    {
        var buffer = new byte[1024];
        try
        {
            var n = await socket.ReceiveAsync(buffer, Ct);
            return Encoding.ASCII.GetString(buffer, 0, n);
        }
        catch (System.Net.Sockets.SocketException)
        {
            return "";
        }
    }

    /// <summary>How often the gateway held a request, by reason (its debug log, event 1400), and released one (1405).</summary>
    private static string Holds(string output)
    {
        var lines = output.Split('\n');
        int Count(string text) => lines.Count(l => l.Contains(text, StringComparison.Ordinal));
        return $"gateway held: refused {Count("refused the connection")}, lost in flight {Count("lost the request")}, " +
               $"unavailable {Count("answered unavailable")}, reply-pending {Count("answered reply-pending")}, key in use {Count("answered idempotency-key-in-use")}; released {Count("Held request")}; " +
               $"past HoldTime {Count("past HoldTime")}; YARP forwarder warnings {Count("Yarp.ReverseProxy.Forwarder.HttpForwarder")}";
    }

    /// <summary>Clients that never retry: each request is sent once through the gateway; anything but a 2xx is an error.</summary>
    private sealed class PlainClientRun(HttpClient gateway, int depositClients, int sessionClients, bool expectOwner)
    {
        private readonly ConcurrentQueue<string> _errors = new();
        private readonly ConcurrentDictionary<string, long> _deposits = new();
        private readonly ConcurrentDictionary<string, long> _sessions = new();
        private readonly Stopwatch _clock = Stopwatch.StartNew();
        private readonly ConcurrentBag<double> _latencies = [];
        private volatile bool _stopping;
        private long _replies;

        public IReadOnlyDictionary<string, long> Sessions => _sessions;

        public string Summary
        {
            get
            {
                var sorted = _latencies.Order().ToArray();
                var p = (double q) => sorted.Length == 0 ? 0 : sorted[Math.Min(sorted.Length - 1, (int)(q * sorted.Length))];
                return $"{_replies} replies, {_errors.Count} errors, latency p50 {p(0.5):F1} ms, p99 {p(0.99):F1} ms, max {p(1):F1} ms";
            }
        }

        public Task[] Start()
            => [.. Enumerable.Range(0, depositClients).Select(i => Task.Run(() => DepositClientAsync($"plain-{i}"))),
                .. Enumerable.Range(0, sessionClients).Select(_ => Task.Run(SessionClientAsync))];

        public void Stop() => _stopping = true;

        /// <summary>Waits until the clients received <paramref name="replies"/> more replies (progress, not time).</summary>
        public async Task WaitForProgressAsync(int replies, Func<string> output)
        {
            var target = Interlocked.Read(ref _replies) + replies;
            var deadline = DateTime.UtcNow.AddSeconds(120);
            while (Interlocked.Read(ref _replies) < target)
            {
                Assert.True(_errors.IsEmpty, "client errors:\n" + string.Join("\n", _errors));
                Assert.True(DateTime.UtcNow < deadline, $"no progress in 120 s ({Summary}):\n{output()}");
                await Task.Delay(20, Ct);
            }
        }

        public async Task AssertStateAsync(HttpClient reader, string gatewayOutput)
        {
            Assert.True(_errors.IsEmpty, $"client errors ({Summary}):\n{string.Join("\n", _errors)}\ngateway:\n{Tail(gatewayOutput)}");
            if (!_deposits.IsEmpty)
            {
                var balances = await reader.GetFromJsonAsync<Dictionary<string, long>>("/balances", Ct);
                foreach (var (account, received) in _deposits)
                {
                    Assert.Equal(received, balances!.GetValueOrDefault(account)); // 0 lost, 0 duplicated
                }
            }

            foreach (var (session, acknowledged) in _sessions)
            {
                using var request = new HttpRequestMessage(HttpMethod.Get, "/tally");
                request.Headers.Add("PS-Session", session);
                using var response = await reader.SendAsync(request, Ct);
                Assert.Equal(HttpStatusCode.OK, response.StatusCode);
                var body = await response.Content.ReadFromJsonAsync<JsonElement>(Ct);
                Assert.Equal(acknowledged, body.GetProperty("count").GetInt64());
            }
        }

        private static string Tail(string text) => text.Length <= 6000 ? text : text[^6000..];

        private async Task DepositClientAsync(string account)
        {
            long received = 0;
            _deposits[account] = 0;
            while (!_stopping)
            {
                using var request = new HttpRequestMessage(HttpMethod.Post, "/deposit") { Content = JsonContent.Create(new { account, amount = 1 }) };
                if (await SendOnceAsync(request, account) is not { } body)
                {
                    return;
                }

                var balance = body.GetProperty("balance").GetInt64();
                if (balance != received + 1)
                {
                    _errors.Enqueue($"{account}: balance {balance} after {received} deposits (lost or duplicated)");
                    return;
                }

                _deposits[account] = ++received;
            }
        }

        private async Task SessionClientAsync()
        {
            string session;
            using (var start = new HttpRequestMessage(HttpMethod.Post, "/ps/sessions"))
            {
                if (await SendOnceAsync(start, "session start") is not { } started)
                {
                    return;
                }

                session = started.GetProperty("sessionId").GetString()!;
            }

            _sessions[session] = 0;
            for (long seq = 1; !_stopping; seq++)
            {
                using var request = new HttpRequestMessage(HttpMethod.Post, "/tally") { Content = JsonContent.Create(new { account = $"op-{seq}", amount = 1 }) };
                request.Headers.Add("PS-Session", session);
                request.Headers.Add("PS-Seq", seq.ToString(CultureInfo.InvariantCulture));
                if (await SendOnceAsync(request, session, Base64Url.DecodeFromChars(session)[0]) is not { } body)
                {
                    return;
                }

                if (body.GetProperty("count").GetInt64() != seq)
                {
                    _errors.Enqueue($"{session}: count {body.GetProperty("count")} for request {seq} (lost or duplicated)");
                    return;
                }

                _sessions[session] = seq;
            }
        }

        private async Task<JsonElement?> SendOnceAsync(HttpRequestMessage request, string who, byte? owner = null)
        {
            var started = _clock.Elapsed;
            try
            {
                using var response = await gateway.SendAsync(request, Ct);
                var text = await response.Content.ReadAsStringAsync(Ct);
                if (!response.IsSuccessStatusCode)
                {
                    _errors.Enqueue($"{who}: {(int)response.StatusCode} {text}");
                    return null;
                }

                if (expectOwner && owner is { } expected && response.Headers.GetValues("PS-Gateway-Instance").Single() != expected.ToString(CultureInfo.InvariantCulture))
                {
                    _errors.Enqueue($"{who}: served by instance {response.Headers.GetValues("PS-Gateway-Instance").Single()}, owner {expected}");
                    return null;
                }

                _latencies.Add((_clock.Elapsed - started).TotalMilliseconds);
                Interlocked.Increment(ref _replies);
                return JsonDocument.Parse(text).RootElement.Clone();
            }
            catch (Exception ex) when (ex is HttpRequestException or IOException or TaskCanceledException)
            {
                _errors.Enqueue($"{who}: {ex.GetType().Name} {ex.Message}");
                return null;
            }
        }
    }

    /// <summary>ps-gateway as a child process on 127.0.0.1, configured on its command line.</summary>
    private sealed class GatewayProcess : IAsyncDisposable
    {
        private static readonly string GatewayPath = typeof(GatewayProcess).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
            .Single(a => a.Key == "GatewayPath").Value!;

        private readonly Process _process;
        private readonly StringBuilder _output = new();

        private GatewayProcess(Process process, int port)
        {
            _process = process;
            Client = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{port}"), Timeout = TimeSpan.FromSeconds(120) };
        }

        public HttpClient Client { get; }

        /// <summary>The gateway's resident set size now (VmRSS), in bytes.</summary>
        public long ResidentBytes()
        {
            foreach (var line in File.ReadLines($"/proc/{_process.Id}/status"))
            {
                if (line.StartsWith("VmRSS:", StringComparison.Ordinal))
                {
                    return long.Parse(line.Split(' ', StringSplitOptions.RemoveEmptyEntries)[1], CultureInfo.InvariantCulture) * 1024;
                }
            }

            return 0;
        }

        public string Output
        {
            get
            {
                lock (_output)
                {
                    return _output.ToString();
                }
            }
        }

        public static Task<GatewayProcess> StartAsync(IEnumerable<(int Ordinal, int Port)> instances, string? holdTime = "00:02:00")
            => StartAsync(instances.Select(i => (i.Ordinal, $"http://127.0.0.1:{i.Port}")), holdTime);

        /// <summary>Starts with each instance's address, or the comma-separated addresses of its replication group's nodes.</summary>
        public static async Task<GatewayProcess> StartAsync(IEnumerable<(int Ordinal, string Nodes)> instances, string? holdTime = "00:02:00")
        {
            var port = ServiceProcess.FreePort();
            // A hold time well above a restart on a loaded CI host (seen up to 15 s with two other builds running): the test
            // checks what the clients get, not how fast the service comes back.
            var arguments = new List<string>
            {
                GatewayPath, "--urls", $"http://127.0.0.1:{port}", "--PersistentGateway:Services:test:Persistent=true",
                $"--PersistentGateway:PeerKey={GroupPeerKey}",
            };
            if (holdTime is not null)
            {
                arguments.Add($"--PersistentGateway:HoldTime={holdTime}"); // null: the default (30 s)
            }

            foreach (var (ordinal, nodes) in instances)
            {
                arguments.Add($"--PersistentGateway:Services:test:Instances:{ordinal}={nodes}");
            }

            var start = new ProcessStartInfo("dotnet", arguments)
            {
                RedirectStandardOutput = true,
                RedirectStandardError = true,
                UseShellExecute = false,
                WorkingDirectory = Path.GetDirectoryName(GatewayPath)!,
            };
            start.Environment["DOTNET_NOLOGO"] = "1";
            start.Environment["Logging__Console__FormatterName"] = "simple";
            start.Environment["Logging__LogLevel__PersistentServices.Gateway"] = "Debug";
            var process = Process.Start(start)!;
            var gateway = new GatewayProcess(process, port);
            process.OutputDataReceived += (_, e) => gateway.Append(e.Data);
            process.ErrorDataReceived += (_, e) => gateway.Append(e.Data);
            process.BeginOutputReadLine();
            process.BeginErrorReadLine();
            var deadline = DateTime.UtcNow.AddSeconds(60);
            while (true)
            {
                Assert.False(process.HasExited, "the gateway exited:\n" + gateway.Output);
                Assert.True(DateTime.UtcNow < deadline, "the gateway was not ready in 60 s:\n" + gateway.Output);
                try
                {
                    using var response = await gateway.Client.GetAsync("/ps-gateway/health", Ct);
                    if (response.StatusCode == HttpStatusCode.OK)
                    {
                        return gateway;
                    }
                }
                catch (HttpRequestException)
                {
                }

                await Task.Delay(100, Ct);
            }
        }

        public async ValueTask DisposeAsync()
        {
            Client.Dispose();
            if (!_process.HasExited)
            {
                _process.Kill(entireProcessTree: true);
                await _process.WaitForExitAsync();
            }

            _process.Dispose();
        }

        private void Append(string? line)
        {
            if (line is not null)
            {
                lock (_output)
                {
                    _output.AppendLine(line);
                }
            }
        }
    }
}
