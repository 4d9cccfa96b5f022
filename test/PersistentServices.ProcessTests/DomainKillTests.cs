using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Text.Json;

namespace PersistentServices.ProcessTests;

/// <summary>
/// The service domain as an outside driver uses it (issue 49): members as real processes in a chain (A → B → C, or
/// A → B → C → D) or a fan-out (A → B and A → C → D), four end clients each paying in a session of its own and resending
/// the same request on any failure, and a killer that does not wait for the members to recover each other: every
/// 0.5–2.5 s one member, or two at once in a third of the kills, is stopped (SIGKILL, or SIGTERM in one kill in five)
/// and restarted at once without waiting until it is ready. With <c>PS_DOMAIN_LOAD</c> (default 2) CPU burners and a
/// disk writer of the test's own load the host meanwhile, as a shared production node is. Checked from outside: every
/// acknowledged payment counted exactly once at every member, an unacknowledged one the same everywhere (0 or 1),
/// conservation (A's total and every member's balance), each session's tally 1, 2, 3, … in its serial order, no balance
/// reported to two payments (an orphan reply), no client answered anything but 200 or 503, and every session alive at the
/// end. Knobs: <c>PS_DOMAIN_SEED</c>, <c>PS_DOMAIN_KILLS</c>, <c>PS_DOMAIN_TOPOLOGY</c> (chain3, chain4, fanout),
/// <c>PS_DOMAIN_LOAD</c>, <c>PS_DOMAIN_DUMP</c> (every incarnation's output to a file on a failure).
/// </summary>
[Trait("Category", "Process")]
public sealed class DomainKillTests : IDisposable
{
    private const string PeerKey = "test-peer-key-of-this-deployment-0123456789";
    private const int Amount = 100;
    private const int Credit = 90; // the amount less the functional fee (a tenth)
    private const int CalmPayments = 10; // payments each client makes after the kills, with every member up
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    public static TheoryData<string, int> Plans => new()
    {
        { "chain3", 11 },
        { "fanout", 99 },
    };

    [Theory]
    [MemberData(nameof(Plans))]
    [Trait("Category", "Crash")]
    public async Task Transfers_WhileMembersAreKilledWithoutWaitingForRecovery_OnALoadedHost_ExactlyOnceEverywhere(string topology, int defaultSeed)
    {
        topology = Environment.GetEnvironmentVariable("PS_DOMAIN_TOPOLOGY") is { Length: > 0 } t ? t : topology;
        var seed = int.TryParse(Environment.GetEnvironmentVariable("PS_DOMAIN_SEED"), out var given) ? given : defaultSeed;
        var kills = int.TryParse(Environment.GetEnvironmentVariable("PS_DOMAIN_KILLS"), out var k) ? k : 12;
        var burners = int.TryParse(Environment.GetEnvironmentVariable("PS_DOMAIN_LOAD"), out var l) ? l : 2;
        var (names, env, creditedBy) = Topology(topology);
        var ports = names.Zip(TestSupport.LoopbackPorts.Free(names.Length)).ToDictionary(p => p.First, p => p.Second);
        var environments = env(ports);

        var running = new ConcurrentDictionary<string, ServiceProcess>();
        foreach (var name in names.Reverse())
        {
            running[name] = await ServiceProcess.StartAsync(environments[name], ports[name]);
        }

        var random = new Random(seed);
        var history = new ConcurrentQueue<string>();
        var slowStops = new ConcurrentQueue<string>(); // the output of a member that took over 15 s from SIGTERM to exit
        var acknowledged = new ConcurrentBag<(int Client, string Op, long Balance, long Payments)>();
        var violations = new ConcurrentQueue<string>();
        var clock = Stopwatch.StartNew();
        var waits = new ConcurrentBag<(TimeSpan From, TimeSpan To)>();
        var killLog = new List<string>();
        var termTimes = new List<TimeSpan>();
        var calm = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        var calmWaits = new ConcurrentBag<TimeSpan>();
        var unavailable = 0;
        var passed = false;
        using var load = HostLoad.Start(burners, _dir.File("disk-writer"));
        try
        {
            const int sessionCount = 4;
            var sessions = new string[sessionCount];
            for (var c = 0; c < sessionCount; c++)
            {
                sessions[c] = await running["A"].StartSessionAsync();
            }

            var killer = Task.Run(async () =>
            {
                for (var kill = 0; kill < kills; kill++)
                {
                    await Task.Delay(random.Next(500, 2500), TestContext.Current.CancellationToken);
                    var victims = names.OrderBy(_ => random.Next()).Take(random.Next(3) == 0 ? 2 : 1).ToList();
                    var term = random.Next(5) == 0;
                    await Task.WhenAll(victims.Select(async v =>
                    {
                        var old = running[v];
                        if (term)
                        {
                            try
                            {
                                var stopping = Stopwatch.StartNew();
                                await old.TerminateAsync(TimeSpan.FromSeconds(60));
                                lock (termTimes)
                                {
                                    termTimes.Add(stopping.Elapsed);
                                }

                                if (stopping.Elapsed > TimeSpan.FromSeconds(15))
                                {
                                    slowStops.Enqueue($"===== {v}, SIGTERM in kill {kill}: exited after {stopping.Elapsed.TotalSeconds:F1} s\n{old.Output}");
                                }
                            }
                            catch (OperationCanceledException)
                            {
                                violations.Enqueue($"{v} did not exit within 60 s of its SIGTERM");
                            }
                        }

                        await old.KillAsync();
                        history.Enqueue($"===== {v}, {(term ? "SIGTERM" : "SIGKILL")} in kill {kill} ({DateTime.UtcNow:HH:mm:ss.fff})\n{old.Output}");
                        await old.DisposeAsync();

                        // Restarted at once, not waited for: the next kill may find it still recovering.
                        running[v] = await ServiceProcess.StartAsync(environments[v], ports[v], waitUntilReady: false);
                    }));
                    lock (killLog)
                    {
                        killLog.Add($"{string.Concat(victims)}{(term ? "(TERM)" : "")}");
                    }

                }
            }, TestContext.Current.CancellationToken);

            // Each client pays in its own session, one payment at a time, resending the same number on any failure (as the
            // outside driver did) until it is answered; once the kills are over it finishes the payment it is on and stops.
            var deadline = DateTime.UtcNow.AddMinutes(8);
            var clients = Enumerable.Range(0, sessionCount).Select(c => Task.Run(async () =>
            {
                var seq = 1L;
                var calmPayments = 0;
                while ((!calm.Task.IsCompleted || calmPayments < CalmPayments) && DateTime.UtcNow < deadline)
                {
                    var inCalm = calm.Task.IsCompleted;
                    var op = $"c{c}-{seq}";
                    var from = clock.Elapsed;
                    while (true)
                    {
                        if (DateTime.UtcNow >= deadline)
                        {
                            violations.Enqueue($"{op} (number {seq}) not answered before the deadline: session stuck");
                            return seq - 1;
                        }

                        try
                        {
                            var reply = await running["A"].SendAsync(HttpMethod.Post, "/pay?light=true", sessions[c], seq, new { account = op, amount = Amount });
                            if (reply.Status == HttpStatusCode.OK)
                            {
                                acknowledged.Add((c, op, reply.Body.GetProperty("balance").GetInt64(), reply.Body.GetProperty("payments").GetInt64()));
                                waits.Add((from, clock.Elapsed));
                                if (inCalm)
                                {
                                    calmPayments++;
                                    calmWaits.Add(clock.Elapsed - from);
                                }

                                break;
                            }

                            if (reply.Status != HttpStatusCode.ServiceUnavailable)
                            {
                                violations.Enqueue($"{op} (number {seq}): {(int)reply.Status} {(reply.Body.ValueKind == JsonValueKind.Undefined ? "" : reply.Body.ToString())}");
                            }

                            Interlocked.Increment(ref unavailable);
                        }
                        catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException or ObjectDisposedException)
                        {
                            // A is being killed or restarted: the same request with the same number again.
                        }

                        await Task.Delay(100, TestContext.Current.CancellationToken);
                    }

                    seq++;
                }

                return seq - 1;
            }, TestContext.Current.CancellationToken)).ToArray();

            // The kills are over: once every member is ready again (the load still on), each client makes CalmPayments more,
            // whose waits are those of a domain with every member up.
            await killer;
            foreach (var member in running.Values)
            {
                await member.WaitUntilReadyAsync();
            }

            calm.SetResult();
            var started = await Task.WhenAll(clients);
            load.Dispose();

            string Output() => string.Join("\n", running.Select(r => $"{r.Key}:\n{r.Value.RecentOutput(3000)}"));

            // Answers other than 200 and 503 (and stuck sessions), one line per kind with its count and first example.
            var failures = violations.GroupBy(v => System.Text.RegularExpressions.Regex.Replace(v, @"^c\d+-\d+ \(number \d+\): (\d+)( \{[^}]*""type"":""([^""]*)"")?.*$", "$1 $3"))
                .Select(g => $"{g.Count()} x {g.Key}: e.g. {g.First()[..Math.Min(g.First().Length, 300)]}").ToList();

            // Every payment a client started was answered (the last of each after the kills), and only with 200 or 503.
            if (started.Sum() != acknowledged.Count)
            {
                failures.Add($"clients started {started.Sum()} payments, {acknowledged.Count} were acknowledged");
            }

            // Each session counted its own payments once each, in its serial order.
            for (var c = 0; c < sessionCount; c++)
            {
                var mine = acknowledged.Where(a => a.Client == c).OrderBy(a => int.Parse(a.Op[(a.Op.IndexOf('-') + 1)..], CultureInfo.InvariantCulture)).ToList();
                if (!mine.Select(a => a.Payments).SequenceEqual(Enumerable.Range(1, mine.Count).Select(i => (long)i)))
                {
                    failures.Add($"client {c}'s tallies are {string.Join(",", mine.Select(a => a.Payments))}");
                }
            }

            // No balance reported to two payments: a reply whose effects a crash took back would make a later payment report it again.
            foreach (var twice in acknowledged.GroupBy(a => a.Balance).Where(g => g.Count() > 1))
            {
                failures.Add($"balance {twice.Key} reported to {string.Join(", ", twice.Select(a => a.Op))} (an orphan value)");
            }

            // Exactly once at every member: acknowledged ones once everywhere; any other one the same everywhere.
            var acked = acknowledged.Select(a => a.Op).ToHashSet();
            var all = Enumerable.Range(0, sessionCount).SelectMany(c => Enumerable.Range(1, (int)started[c] + 1).Select(s => $"c{c}-{s}")).ToList();
            var counts = new Dictionary<string, Dictionary<string, int>>();
            foreach (var member in names)
            {
                counts[member] = [];
                foreach (var op in all)
                {
                    var path = member == "A" ? $"/pay/count/{op}" : $"/bank/credits/{op}";
                    var (status, body, _) = await running[member].SendAsync(HttpMethod.Get, path, null, null);
                    counts[member][op] = status == HttpStatusCode.OK ? body.GetProperty("count").GetInt32() : -1;
                }
            }

            foreach (var op in all)
            {
                var perMember = names.Where(m => m == "A" || creditedBy.Contains(m)).Select(m => (m, counts[m][op])).ToList();
                if (acked.Contains(op) ? perMember.Any(p => p.Item2 != 1) : perMember.Select(p => p.Item2).Distinct().Count() > 1 || perMember.Any(p => p.Item2 > 1))
                {
                    failures.Add($"{op} ({(acked.Contains(op) ? "acknowledged" : "not acknowledged")}) counted {string.Join(", ", perMember.Select(p => $"{p.m} {p.Item2}"))}");
                }
            }

            // Conservation: A's total and every member's balance hold exactly the payments A executed.
            var executed = counts["A"].Values.Sum();
            var (totalStatus, total, _) = await running["A"].SendAsync(HttpMethod.Get, "/pay/total", null, null);
            if (totalStatus != HttpStatusCode.OK)
            {
                failures.Add($"A's total could not be read: {(int)totalStatus} {total}");
            }
            else if (total.GetProperty("total").GetInt64() != executed * (long)Amount)
            {
                failures.Add($"A's total is {total.GetProperty("total").GetInt64()} for {executed} payments");
            }

            foreach (var member in creditedBy)
            {
                var (balanceStatus, balance, _) = await running[member].SendAsync(HttpMethod.Get, "/bank/balance", null, null);
                if (balanceStatus != HttpStatusCode.OK)
                {
                    failures.Add($"{member}'s balance could not be read: {(int)balanceStatus} {balance}");
                }
                else if (balance.GetProperty("balance").GetInt64() != counts[member].Values.Sum() * (long)Credit || counts[member].Values.Sum() != executed)
                {
                    failures.Add($"{member}'s balance is {balance.GetProperty("balance").GetInt64()} for {counts[member].Values.Sum()} credits, A executed {executed}");
                }
            }

            var rollbacks = history.Sum(h => Count(h, "was an orphan")) + running.Values.Sum(r => Count(r.Output, "was an orphan"));
            var ordered = waits.Select(w => w.To - w.From).Order().ToList();
            TestContext.Current.TestOutputHelper?.WriteLine(
                $"{topology}, seed {seed}, {kills} kills ({string.Join(" ", killLog)}), load {(burners == 0 ? "none of its own" : $"{burners} burners + a disk writer")}: " +
                $"payments acknowledged {acknowledged.Count}, 503 answers {unavailable}, orphan session rollbacks {rollbacks}, " +
                $"wait for a payment: median {(ordered.Count == 0 ? 0 : ordered[ordered.Count / 2].TotalSeconds):F1} s, longest {(ordered.Count == 0 ? 0 : ordered[^1].TotalSeconds):F1} s " +
                $"({(calmWaits.IsEmpty ? 0 : calmWaits.Max().TotalSeconds):F1} s at most over the {calmWaits.Count} made with every member up after the kills), " +
                $"SIGTERM to exit at most {(termTimes.Count == 0 ? 0 : termTimes.Max().TotalSeconds):F1} s; failures {failures.Count}");
            Assert.True(failures.Count == 0, $"{string.Join("\n", failures.Take(40))}\n{Output()}");
            passed = true;
        }
        finally
        {
            if (!slowStops.IsEmpty && Environment.GetEnvironmentVariable("PS_DOMAIN_DUMP") is { Length: > 0 } slowDump)
            {
                await File.WriteAllTextAsync(slowDump + ".slow-stops", string.Join("\n", slowStops), CancellationToken.None);
            }

            if (!passed && Environment.GetEnvironmentVariable("PS_DOMAIN_DUMP") is { Length: > 0 } dump)
            {
                await File.WriteAllTextAsync(dump, string.Join("\n", history.Concat(running.Select(r => $"===== {r.Key}, still running\n{r.Value.Output}"))),
                    CancellationToken.None);
            }

            foreach (var service in running.Values)
            {
                await service.DisposeAsync();
            }
        }
    }

    /// <summary>The members, each one's environment for given ports, and the members that apply credits.</summary>
    private (string[] Names, Func<Dictionary<string, int>, Dictionary<string, Dictionary<string, string>>> Environments, string[] CreditedBy) Topology(string topology)
    {
        string[] names = topology switch
        {
            "chain3" => ["A", "B", "C"],
            "chain4" or "fanout" => ["A", "B", "C", "D"],
            _ => throw new ArgumentException($"unknown topology '{topology}' (chain3, chain4, fanout)"),
        };

        // Who calls whom: a chain relays every credit; the fan-out's A credits B and C, and C relays to D.
        var calls = topology == "fanout"
            ? new Dictionary<string, string[]> { ["A"] = ["B", "C"], ["C"] = ["D"] }
            : names[..^1].Select((n, i) => (n, names[i + 1])).ToDictionary(p => p.n, p => new[] { p.Item2 });

        return (names, ports =>
        {
            var domain = string.Join(",", names.Select(n => $"{n}=http://127.0.0.1:{ports[n]}"));
            var env = new Dictionary<string, Dictionary<string, string>>();
            foreach (var name in names)
            {
                env[name] = new Dictionary<string, string>
                {
                    ["PS_LOG_DIR"] = _dir.File(name), ["PS_SERVICE_NAME"] = name, ["PS_PEER_KEY"] = PeerKey, ["PS_DOMAIN"] = domain,
                };

                // PS_DOMAIN_TRACE=1: every domain message's DV in the members' logs (Debug events 1125-1127, 1111, 1389).
                if (Environment.GetEnvironmentVariable("PS_DOMAIN_TRACE") == "1")
                {
                    env[name]["Logging__LogLevel__PersistentServices"] = "Debug";
                }
                if (calls.TryGetValue(name, out var callees))
                {
                    env[name]["PS_CALLEE_URL"] = $"http://127.0.0.1:{ports[callees[0]]}";
                    env[name]["PS_CALLEE_NAME"] = callees[0];
                    env[name]["PS_RELAY"] = name == "A" ? "0" : "1";
                    if (callees.Length > 1)
                    {
                        env[name]["PS_CALLEE2_URL"] = $"http://127.0.0.1:{ports[callees[1]]}";
                        env[name]["PS_CALLEE2_NAME"] = callees[1];
                    }
                }
            }

            return env;
        }, names[1..]);
    }

    private static int Count(string text, string what)
    {
        var count = 0;
        for (var at = text.IndexOf(what, StringComparison.Ordinal); at >= 0; at = text.IndexOf(what, at + 1, StringComparison.Ordinal))
        {
            count++;
        }

        return count;
    }
}
