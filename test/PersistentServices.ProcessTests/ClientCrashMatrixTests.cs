using System.Globalization;
using System.Net;
using System.Text;
using System.Text.Json;

namespace PersistentServices.ProcessTests;

/// <summary>
/// The crash-point matrix of the exactly-once client (docs/client.md, "Crash points"): the application
/// (test/PersistentServices.ClientProgram) killed at each of its named points, the test service killed at each of its
/// request-path points and restarted, and connections cut by <see cref="LoopbackProxy"/>; for the session client and for a
/// curl-style Idempotency-Key client. Each point runs a few times with a random number of operations and a random
/// operation hit (the seed is printed). Checked from the application's side ([EOS middleware §III.B]): safety 1 (each
/// account's balance is at most 1), safety 2 (each reply the application got is 200 for its own account with balance 1),
/// safety 3 (each operation's reply reaches the application at most once) and liveness 1 (after the faults stop every
/// operation has run once and its reply reached the application; the one exception, counted apart as "lost", is a
/// session client killed after a reply's handover mark: at most once costs that reply, never its effect).
/// </summary>
[Trait("Category", "Crash")]
public sealed class ClientCrashMatrixTests : IDisposable
{
    // Runs per point (each with its own random draw); PS_MATRIX_RUNS sets all three for a longer soak.
    private static readonly int ClientRuns = Runs(2);
    private static readonly int ServerRuns = Runs(2);
    private static readonly int CutRuns = Runs(2);

    private static readonly string[] SessionClientPoints =
        ["client.request.created", "client.session.opened", "client.request.stored", "client.request.sent", "client.reply.received", "client.reply.stored", "client.reply.delivered"];

    private static readonly string[] KeyClientPoints = ["key.request.created", "key.request.sent", "key.reply.received"];

    private static readonly string[] ServerPoints = ["server.request.admitted", "server.request.logged", "server.request.executed", "server.reply.forced", "server.reply.sent"];

    private readonly TempDirectory _dir = new();
    private readonly int _seed = Environment.GetEnvironmentVariable("PS_MATRIX_SEED") is { } fixedSeed ? int.Parse(fixedSeed, CultureInfo.InvariantCulture) : Environment.TickCount;
    private readonly List<Row> _rows = [];
    private int _runId;

    // The seed first, so a run that throws (and never reaches Report) can still be rerun.
    public ClientCrashMatrixTests() => TestContext.Current.TestOutputHelper?.WriteLine($"seed {_seed} (PS_MATRIX_SEED reruns it)");

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose() => _dir.Dispose();

    private static int Runs(int standard)
        => int.TryParse(Environment.GetEnvironmentVariable("PS_MATRIX_RUNS"), NumberStyles.None, CultureInfo.InvariantCulture, out var runs) && runs > 0 ? runs : standard;

    private sealed record Row(string Client, string Fault, string Point, int Runs, int Violations, int Lost, double Seconds);

    [Fact]
    public async Task SessionClientKilledAtEachClientPoint_Safety123_Liveness1()
    {
        var random = new Random(_seed);
        await using var service = await ServiceProcess.StartAsync(new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log") });
        foreach (var point in SessionClientPoints)
        {
            var started = DateTime.UtcNow;
            int violations = 0, lost = 0;
            var notes = new List<string>();
            for (var run = 0; run < ClientRuns; run++)
            {
                var (ops, k) = Draw(random, point == "client.session.opened");
                var store = _dir.File($"store-{_runId}");

                // t8 exists apart from t12 only on a resend by RecoverAsync (a live call makes both one forced write): the
                // application is first killed with the k-th reply received and not stored, then killed again during recovery,
                // right after that reply is stored.
                var recoveryPoint = point == "client.reply.stored";
                var first = new ClientTests.ClientRun(store, service.Port, string.Join(',', ops), crashPoint: recoveryPoint ? "client.reply.received" : point, crashAfter: k - 1);
                var firstExit = await first.ExitAsync();
                var killed = first;
                if (recoveryPoint)
                {
                    killed = new ClientTests.ClientRun(store, service.Port, "recover", crashPoint: point);
                    firstExit = await killed.ExitAsync();
                }

                if (firstExit == 0 || !killed.Errors.Contains($"crash point {point}", StringComparison.Ordinal))
                {
                    violations++;
                    notes.Add($"{ops[0]}: did not crash at {point} (exit {firstExit})");
                }

                var target = ops[k - 1];
                if (point is "client.request.created" or "client.session.opened" && (await BalancesAsync(service)).GetValueOrDefault(target) != 0)
                {
                    violations++;
                    notes.Add($"{target}: ran although it was never stored");
                }

                // The application runs again as a real one would: RecoverAsync hands back what was pending, then it sends
                // every operation it has no reply for, the one whose reply was handed over just before the kill included:
                // the client must refuse that one (PersistentOperationRepeatedException), never run it twice.
                var lostOp = point == "client.reply.delivered" ? target : null;
                var again = ops.Skip(k - 1).ToList();
                var second = new ClientTests.ClientRun(store, service.Port, again.Count == 0 ? "recover" : string.Join(',', again),
                    environment: new Dictionary<string, string> { ["PS_SKIP_RECOVERED"] = "1" });
                if (await second.ExitAsync() != 0)
                {
                    violations++;
                    notes.Add($"{ops[0]}: the second run failed: {second.Errors}");
                }

                violations += Check(first.Lines.Concat(killed == first ? [] : killed.Lines).Concat(second.Lines), await BalancesAsync(service), ops, lostOp, notes);
                lost += lostOp is null ? 0 : 1;
            }

            Record("session", "client killed", point, ClientRuns, violations, lost, started, notes);
        }

        Report();
    }

    [Fact]
    public async Task KeyClientKilledAtEachClientPoint_Safety123_Liveness1()
    {
        var random = new Random(_seed + 1);
        await using var service = await ServiceProcess.StartAsync(new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log") });
        foreach (var point in KeyClientPoints)
        {
            var started = DateTime.UtcNow;
            var violations = 0;
            var notes = new List<string>();
            for (var run = 0; run < ClientRuns; run++)
            {
                var (ops, k) = Draw(random, once: false);
                var first = KeyRun(service.Port, ops, new Dictionary<string, string>
                {
                    ["PS_KEY_CRASH_POINT"] = point,
                    ["PS_KEY_CRASH_AFTER"] = (k - 1).ToString(CultureInfo.InvariantCulture),
                });
                var firstExit = await first.ExitAsync();
                if (firstExit == 0 || !first.Errors.Contains($"crash point {point}", StringComparison.Ordinal))
                {
                    violations++;
                    notes.Add($"{ops[0]}: did not crash at {point} (exit {firstExit})");
                }

                // The key client keeps no store: its journal is what it printed. Everything without a printed reply is sent again, same key.
                var printed = first.Lines.Select(l => l.Split(' ')).Where(p => p is ["delivered", _, ..]).Select(p => p[1]).ToHashSet(StringComparer.Ordinal);
                var second = KeyRun(service.Port, [.. ops.Where(op => !printed.Contains(op))], null);
                if (await second.ExitAsync() != 0)
                {
                    violations++;
                    notes.Add($"{ops[0]}: the second run failed: {second.Errors}");
                }

                violations += Check(first.Lines.Concat(second.Lines), await BalancesAsync(service), ops, null, notes);
            }

            Record("idempotency-key", "client killed", point, ClientRuns, violations, 0, started, notes);
        }

        Report();
    }

    [Theory]
    [InlineData("session")]
    [InlineData("idempotency-key")]
    public async Task ServiceKilledAtEachServerPoint_Safety123_Liveness1(string client)
    {
        var random = new Random(_seed + (client == "session" ? 2 : 3));
        foreach (var point in ServerPoints)
        {
            var started = DateTime.UtcNow;
            var violations = 0;
            var notes = new List<string>();
            for (var run = 0; run < ServerRuns; run++)
            {
                var (ops, k) = Draw(random, once: false);
                var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File($"log-{_runId}") };
                var crashing = new Dictionary<string, string>(environment)
                {
                    ["PERSISTENTSERVICES_CRASH_POINT"] = point,
                    ["PERSISTENTSERVICES_CRASH_AFTER"] = (k - 1).ToString(CultureInfo.InvariantCulture),
                };
                var service = await ServiceProcess.StartAsync(crashing);
                try
                {
                    var app = client == "session"
                        ? new ClientTests.ClientRun(_dir.File($"store-{_runId}"), service.Port, string.Join(',', ops))
                        : KeyRun(service.Port, ops, null);
                    await WaitForAsync(() => service.HasExited || app.Lines.Contains("done"));

                    // At server.reply.sent the service dies only after the reply is on the wire: when that was the last
                    // operation's reply the application can finish first. Give the crash point a moment to fire.
                    for (var waited = 0; !service.HasExited && waited < 5000; waited += 20)
                    {
                        await Task.Delay(20, Ct);
                    }

                    if (service.HasExited && service.Output.Contains($"crash point {point}", StringComparison.Ordinal))
                    {
                        // Restarted on the same address, without the crash point: the faults stop here.
                        var port = service.Port;
                        await service.DisposeAsync();
                        service = await ServiceProcess.StartAsync(environment, port);
                    }
                    else
                    {
                        violations++;
                        notes.Add($"{ops[0]}: the service did not crash at {point}");
                    }

                    if (await app.ExitAsync() != 0)
                    {
                        violations++;
                        notes.Add($"{ops[0]}: the application failed: {app.Errors}");
                    }

                    violations += Check(app.Lines, await BalancesAsync(service), ops, null, notes);
                }
                finally
                {
                    await service.DisposeAsync();
                }
            }

            Record(client, "service killed", point, ServerRuns, violations, 0, started, notes);
        }

        Report();
    }

    [Theory]
    [InlineData("session")]
    [InlineData("idempotency-key")]
    public async Task ConnectionsCutMidRequestAndMidReply_Safety123_Liveness1(string client)
    {
        var random = new Random(_seed + (client == "session" ? 4 : 5));
        await using var service = await ServiceProcess.StartAsync(new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log") });
        var started = DateTime.UtcNow;
        var violations = 0;
        var cuts = 0;
        var notes = new List<string>();
        for (var run = 0; run < CutRuns; run++)
        {
            var ops = Enumerable.Range(1, random.Next(6, 13)).Select(i => $"m{_runId}-{i}").ToList();
            _runId++;
            await using var proxy = new LoopbackProxy(service.Port, cutProbability: 0.2 + (random.NextDouble() * 0.2), seed: random.Next());
            var app = client == "session"
                ? new ClientTests.ClientRun(_dir.File($"store-{_runId}"), proxy.Port, string.Join(',', ops), concurrency: 2)
                : KeyRun(proxy.Port, ops, null, concurrency: 2);
            if (await app.ExitAsync() != 0)
            {
                violations++;
                notes.Add($"{ops[0]}: the application failed: {app.Errors}");
            }

            violations += Check(app.Lines, await BalancesAsync(service), ops, null, notes);
            cuts += proxy.Cuts;
        }

        Record(client, $"connections cut ({cuts} cuts)", "proxy", CutRuns, violations, 0, started, notes);
        Assert.True(cuts > 0, "the proxy cut no connection");
        Report();
    }

    /// <summary>A run's operations (3 to 6) and which of them (1-based) the fault hits.</summary>
    private (List<string> Ops, int K) Draw(Random random, bool once)
    {
        var n = random.Next(3, 7);
        var ops = Enumerable.Range(1, n).Select(i => $"x{_runId}-{i}").ToList();
        _runId++;
        return (ops, once ? 1 : random.Next(1, n + 1));
    }

    private ClientTests.ClientRun KeyRun(int port, IReadOnlyList<string> ops, Dictionary<string, string>? crash, int concurrency = 1)
    {
        var environment = new Dictionary<string, string>(crash ?? []) { ["PS_MODE"] = "key" };
        return new ClientTests.ClientRun(_dir.File($"unused-store-{_runId}"), port, string.Join(',', ops), concurrency, environment: environment);
    }

    /// <summary>Safety 1–3 and liveness 1 from the application's output and the balances the service holds; the violations found.</summary>
    private static int Check(IEnumerable<string> lines, Dictionary<string, long> balances, IReadOnlyList<string> ops, string? lostOp, List<string> notes)
    {
        var violations = 0;
        var seen = new Dictionary<string, int>(StringComparer.Ordinal);
        var refused = new Dictionary<string, string>(StringComparer.Ordinal);
        foreach (var line in lines)
        {
            var parts = line.Split(' ', 4);
            if (parts is ["failed", var failedOp, ..])
            {
                violations++;
                notes.Add($"{failedOp}: the application got an error: {line}");
            }

            if (parts is ["repeated", var repeatedOp, _, var how])
            {
                refused[repeatedOp] = how;
                continue;
            }

            if (parts is not ["delivered" or "recovered", var op, var status, var body])
            {
                continue;
            }

            seen[op] = seen.GetValueOrDefault(op) + 1;
            JsonElement reply;
            try
            {
                reply = JsonDocument.Parse(body).RootElement;
            }
            catch (JsonException)
            {
                violations++;
                notes.Add($"{op}: safety 2: the reply '{body}' is not the deposit's");
                continue;
            }

            if (status != "200" || reply.GetProperty("account").GetString() != op || reply.GetProperty("balance").GetInt64() != 1)
            {
                violations++;
                notes.Add($"{op}: safety 2: reply {status} {body}");
            }
        }

        foreach (var op in ops)
        {
            var balance = balances.GetValueOrDefault(op);
            var count = seen.GetValueOrDefault(op);
            if (balance > 1)
            {
                violations++;
                notes.Add($"{op}: safety 1: ran {balance} times");
            }
            else if (balance < 1)
            {
                violations++;
                notes.Add($"{op}: liveness 1: never ran");
            }

            if (count > 1)
            {
                violations++;
                notes.Add($"{op}: safety 3: its reply reached the application {count} times");
            }
            else if (count == 0 && op != lostOp)
            {
                violations++;
                notes.Add($"{op}: liveness 1: its reply never reached the application");
            }
            else if (count > 0 && op == lostOp)
            {
                violations++;
                notes.Add($"{op}: safety 3: handed over again after its handover mark");
            }

            if (op == lostOp && refused.GetValueOrDefault(op) != "handed-over")
            {
                violations++;
                notes.Add($"{op}: sent again after its handover, it was not refused as a finished operation");
            }
            else if (op != lostOp && refused.ContainsKey(op))
            {
                violations++;
                notes.Add($"{op}: refused as finished although its reply never reached the application");
            }
        }

        return violations;
    }

    private static async Task<Dictionary<string, long>> BalancesAsync(ServiceProcess service)
    {
        var (status, body, _) = await service.SendAsync(HttpMethod.Get, "/balances", null, null);
        Assert.Equal(HttpStatusCode.OK, status);
        return body.ValueKind == JsonValueKind.Object
            ? body.EnumerateObject().ToDictionary(p => p.Name, p => p.Value.GetInt64(), StringComparer.Ordinal)
            : [];
    }

    private void Record(string client, string fault, string point, int runs, int violations, int lost, DateTime started, List<string> notes)
    {
        _rows.Add(new Row(client, fault, point, runs, violations, lost, (DateTime.UtcNow - started).TotalSeconds));
        foreach (var note in notes)
        {
            TestContext.Current.TestOutputHelper?.WriteLine($"  {point}: {note}");
        }
    }

    /// <summary>Prints the matrix, then fails if any point had a violation.</summary>
    private void Report()
    {
        // The test's output already starts with the seed (the constructor); the console copy, read in CI's log, needs it here.
        var text = new StringBuilder();
        text.AppendLine("| client | fault | point | runs | violations | lost at handover | seconds |");
        text.AppendLine("|---|---|---|---|---|---|---|");
        foreach (var row in _rows)
        {
            text.AppendLine(CultureInfo.InvariantCulture, $"| {row.Client} | {row.Fault} | `{row.Point}` | {row.Runs} | {row.Violations} | {row.Lost} | {row.Seconds:F1} |");
        }

        TestContext.Current.TestOutputHelper?.WriteLine(text.ToString());
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"seed {_seed} (PS_MATRIX_SEED reruns it)\n{text}"));
        Assert.All(_rows, row => Assert.True(row.Violations == 0, $"{row.Point}: {row.Violations} violations (see the output)"));
    }

    private static async Task WaitForAsync(Func<bool> condition)
    {
        var deadline = DateTime.UtcNow.AddSeconds(60);
        while (!condition())
        {
            Assert.True(DateTime.UtcNow < deadline, "timed out");
            await Task.Delay(20, Ct);
        }
    }
}
