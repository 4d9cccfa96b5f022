using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text.Json;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Data.Sqlite;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.Hosting;
using PersistentServices.SharedState;
using StackExchange.Redis;

namespace PersistentServices.EndToEnd;

/// <summary>
/// [MSP §5] Fig. 13–15's shape with two services as real processes on loopback: an end client calls service A, whose
/// request calls service B k times (k = 1..4 intra-domain calls); B keeps state per caller session. Configurations:
/// <list type="bullet">
/// <item><c>nolog</c>: plain endpoints, state in memory, plain HttpClient (NoLog: no recovery at all).</item>
/// <item><c>pessimistic</c>: [Persistent] endpoints, calls through AddPersistentCalls(), A and B in no domain: A forces
/// before each call to B (multi-call rule: B is called again in the request), B forces before each reply to A.</item>
/// <item><c>optimistic</c>: the same two services in one domain: nothing is forced inside the domain, A's reply to the end
/// client waits for a distributed flush of its DV (A's log and B's).</item>
/// <item><c>psession</c>: plain endpoints, each service keeps the session's state in a SQLite row (WAL, synchronous=FULL),
/// one transaction per request (Psession).</item>
/// <item><c>stateserver</c>: plain endpoints, state in a redis-server (GET + SET, in memory, not durable) through
/// StackExchange.Redis (StateServer).</item>
/// </list>
/// The crash-rate part (Fig. 15b's shape) kills B with SIGKILL at a fixed period and restarts it while clients retry with
/// the same session and number; it checks from the outside that every end request applied its k credits exactly once.
/// </summary>
internal static class DomainComparison
{
    private const string PeerKey = "benchmark-peer-key-not-a-secret-0123456789";
    private const int RedisPort = 6399;

    public static async Task RunAsync(int seconds, int[] sessionCounts, int[] callCounts, string[] configs, double[] crashPeriods, int crashSeconds, bool phases = false,
        string[]? logRoots = null)
    {
        if (logRoots is { Length: not 2 })
        {
            throw new ArgumentException("--log-roots takes two directories: A's and B's (for example on two file systems).");
        }

        var root = Path.Combine(Path.GetTempPath(), "ps-domain-" + Guid.NewGuid().ToString("N")[..8]);
        Directory.CreateDirectory(root);

        // Each member's logs under its own directory (two file systems: [MSP §5] ran each service on its own machine and disk).
        var logDirs = logRoots?.Select(r => Path.Combine(Path.GetFullPath(r), Path.GetFileName(root))).ToArray();
        using var redis = configs.Contains("stateserver") ? RedisServer.Start(RedisPort) : null;
        Console.WriteLine($"- services: A and B as child processes (this program's `member` mode) on 127.0.0.1, logs and SQLite files in " +
                          (logDirs is null ? root : $"{logDirs[0]} (A) and {logDirs[1]} (B)") +
                          (redis is null ? "" : $"; redis-server {redis.Version} on 127.0.0.1:{RedisPort} (no persistence), StackExchange.Redis"));
        Console.WriteLine($"- an end request to A makes k calls to B; closed loop, {seconds} s per cell after 2 s warm-up; forces = log commits of A and B per end request");
        Console.WriteLine();
        Console.WriteLine("- CPU = user + system time of A and B (Process.TotalProcessorTime) over the cell, per end request" +
                          (phases ? "; phases: p50 of each traced step in A and B (ActivityListener: its own cost is in the figures)" : ""));
        Console.WriteLine();
        Console.WriteLine("| configuration | calls to B per request | sessions | requests/s | p50 (ms) | p99 (ms) | forces per request (A + B) | CPU ms per request (A + B) |");
        Console.WriteLine("|---|---:|---:|---:|---:|---:|---:|---:|");
        var phaseLines = new List<string>();
        var p50 = new Dictionary<(string, int, int), double>();
        foreach (var config in configs)
        {
            await using var pair = await MemberPair.StartAsync(root, config, phases, logDirs);
            foreach (var sessions in sessionCounts)
            {
                foreach (var k in callCounts)
                {
                    var result = await LoadAsync(pair, k, sessions, TimeSpan.FromSeconds(seconds), crashPeriod: null);
                    p50[(config, sessions, k)] = result.P50;
                    Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"| {config} | {k} | {sessions} | {result.RequestsPerSecond:N0} | {result.P50:F2} | {result.P99:F2} | {result.ForcesPerRequest:F2} | {result.CpuMsPerRequest:F2} |"));
                    if (phases)
                    {
                        foreach (var (member, name) in new[] { (pair.A, "A"), (pair.B, "B") })
                        {
                            var steps = JsonDocument.Parse(await member.GetAsync("/bench/phases")).RootElement;
                            foreach (var step in steps.EnumerateObject())
                            {
                                phaseLines.Add(string.Create(CultureInfo.InvariantCulture,
                                    $"| {config} | {k} | {sessions} | {name} | {step.Name} | {step.Value.GetProperty("count").GetInt64() / (double)result.Measured:F2} | {step.Value.GetProperty("p50").GetDouble():F3} |"));
                            }
                        }
                    }
                }
            }
        }

        if (phaseLines.Count > 0)
        {
            Console.WriteLine();
            Console.WriteLine("| configuration | calls | sessions | member | step | per end request | p50 (ms) |");
            Console.WriteLine("|---|---:|---:|---|---|---:|---:|");
            phaseLines.ForEach(Console.WriteLine);
        }

        if (configs.Contains("optimistic") && configs.Contains("pessimistic"))
        {
            Console.WriteLine();
            Console.WriteLine("| sessions | calls | optimistic p50 / pessimistic p50 |");
            Console.WriteLine("|---:|---:|---:|");
            foreach (var sessions in sessionCounts)
            {
                foreach (var k in callCounts)
                {
                    Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"| {sessions} | {k} | {p50[("optimistic", sessions, k)] / p50[("pessimistic", sessions, k)]:F2} |"));
                }
            }
        }

        if (crashPeriods.Length > 0)
        {
            const int k = 2;
            var sessions = sessionCounts.Max();
            Console.WriteLine();
            Console.WriteLine($"Throughput against crash rate: B SIGKILLed every T seconds and restarted at once, {k} calls per request, {sessions} sessions, {crashSeconds} s per cell; clients retry with the same number.");
            Console.WriteLine();
            Console.WriteLine("| configuration | B killed every | kills | requests/s | p99 (ms) | end requests | B's credits (expected 2 per request) | orphan rollbacks in A |");
            Console.WriteLine("|---|---:|---:|---:|---:|---:|---:|---:|");
            foreach (var config in new[] { "pessimistic", "optimistic" })
            {
                foreach (var period in crashPeriods)
                {
                    await using var pair = await MemberPair.StartAsync(root, config, phases: false, logDirs);
                    Result result;
                    try
                    {
                        result = await LoadAsync(pair, k, sessions, TimeSpan.FromSeconds(crashSeconds), period > 0 ? TimeSpan.FromSeconds(period) : null);
                    }
                    catch (InvalidOperationException)
                    {
                        Console.Error.WriteLine($"--- A (last 80 lines) ---{Environment.NewLine}{pair.A.Tail(80)}{Environment.NewLine}--- B (last 40 lines) ---{Environment.NewLine}{pair.B.Tail(40)}");
                        throw;
                    }

                    var credits = await pair.TotalCreditsAsync();
                    Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"| {config} | {(period > 0 ? $"{period:F1} s" : "never")} | {result.Kills} | {result.RequestsPerSecond:N0} | {result.P99:F0} | {result.Completed:N0} | {credits:N0}{(credits == k * result.Completed ? "" : " **MISMATCH**")} | {pair.A.CountOutput("was an orphan")} |"));
                }
            }
        }

        Directory.Delete(root, recursive: true);
        foreach (var dir in logDirs ?? [])
        {
            Directory.Delete(dir, recursive: true);
        }
    }

    private sealed record Result(double RequestsPerSecond, double P50, double P99, double ForcesPerRequest, long Completed, int Kills, double CpuMsPerRequest, long Measured);

    private static async Task<Result> LoadAsync(MemberPair pair, int calls, int sessions, TimeSpan duration, TimeSpan? crashPeriod)
    {
        using var client = new HttpClient(new SocketsHttpHandler { MaxConnectionsPerServer = sessions + 4, UseCookies = false })
        {
            BaseAddress = pair.A.Url,
            Timeout = TimeSpan.FromSeconds(30),
        };
        var persistent = pair.Persistent;
        var ids = new string[sessions];
        for (var i = 0; i < sessions; i++)
        {
            if (persistent)
            {
                using var response = await client.PostAsync("/ps/sessions", null);
                response.EnsureSuccessStatusCode();
                ids[i] = response.Headers.GetValues("PS-Session").Single();
            }
            else
            {
                ids[i] = Guid.NewGuid().ToString("N");
            }
        }

        var sequences = new long[sessions];
        if (crashPeriod is null)
        {
            await DriveAsync(client, pair, calls, ids, sequences, TimeSpan.FromSeconds(2), null);
        }

        var forcesBefore = await pair.CommitsAsync();
        if (pair.Phases)
        {
            await pair.A.GetAsync("/bench/phases?reset=true");
            await pair.B.GetAsync("/bench/phases?reset=true");
        }

        var cpuBefore = pair.CpuTime();
        var latencies = new List<double>[sessions];
        using var stop = new CancellationTokenSource();
        var kills = 0;
        var killer = crashPeriod is { } period
            ? Task.Run(async () =>
            {
                while (!stop.IsCancellationRequested)
                {
                    try
                    {
                        await Task.Delay(period, stop.Token);
                    }
                    catch (OperationCanceledException)
                    {
                        return;
                    }

                    await pair.B.KillAndRestartAsync();
                    kills++;
                }
            })
            : Task.CompletedTask;
        var started = Stopwatch.GetTimestamp();
        var count = await DriveAsync(client, pair, calls, ids, sequences, duration, latencies);
        var elapsed = Stopwatch.GetElapsedTime(started).TotalSeconds;
        var cpu = pair.CpuTime() - cpuBefore;
        await stop.CancelAsync();
        await killer;
        await pair.B.WaitReadyAsync();
        var forces = await pair.CommitsAsync() - forcesBefore;
        var all = latencies.SelectMany(l => l).Order().ToArray();
        return new Result(count / elapsed, all[all.Length / 2], all[Math.Min(all.Length - 1, (int)(all.Length * 0.99))], (double)forces / count,
            sequences.Sum(), kills, cpu.TotalMilliseconds / count, count);
    }

    /// <summary>Closed loop per session; a failed attempt (connection lost, 503) is retried with the same number until it succeeds.</summary>
    private static async Task<long> DriveAsync(HttpClient client, MemberPair pair, int calls, string[] ids, long[] sequences, TimeSpan duration, List<double>[]? latencies)
    {
        var deadline = Stopwatch.GetTimestamp() + (long)(duration.TotalSeconds * Stopwatch.Frequency);
        var tasks = ids.Select((id, i) => Task.Run(async () =>
        {
            var samples = latencies is null ? null : latencies[i] = new List<double>(16_384);
            long done = 0;
            while (Stopwatch.GetTimestamp() < deadline)
            {
                var seq = ++sequences[i];
                var t0 = Stopwatch.GetTimestamp();
                for (var attempt = 0; ; attempt++)
                {
                    using var request = new HttpRequestMessage(HttpMethod.Post, $"/order?calls={calls}");
                    request.Headers.TryAddWithoutValidation(pair.Persistent ? "PS-Session" : "X-Client", id);
                    if (pair.Persistent)
                    {
                        request.Headers.TryAddWithoutValidation("PS-Seq", seq.ToString(CultureInfo.InvariantCulture));
                    }

                    try
                    {
                        using var response = await client.SendAsync(request);
                        await response.Content.ReadAsByteArrayAsync();
                        if (response.StatusCode == HttpStatusCode.OK)
                        {
                            break;
                        }

                        if (response.StatusCode is not (HttpStatusCode.ServiceUnavailable or HttpStatusCode.Conflict) || attempt > 2000)
                        {
                            throw new InvalidOperationException($"/order: {(int)response.StatusCode} after {attempt} retries");
                        }
                    }
                    catch (Exception ex) when ((ex is HttpRequestException or TaskCanceledException) && attempt < 2000)
                    {
                    }

                    await Task.Delay(20);
                }

                samples?.Add(Stopwatch.GetElapsedTime(t0).TotalMilliseconds);
                done++;
            }

            return done;
        })).ToArray();
        return (await Task.WhenAll(tasks)).Sum();
    }

    /// <summary>A and B of one configuration, each a child process with its own log.</summary>
    private sealed class MemberPair : IAsyncDisposable
    {
        private MemberPair(Member a, Member b, bool persistent, bool phases)
        {
            A = a;
            B = b;
            Persistent = persistent;
            Phases = phases;
        }

        public bool Phases { get; }

        /// <summary>CPU time (user + system) A and B used so far (the current processes).</summary>
        public TimeSpan CpuTime() => A.CpuTime() + B.CpuTime();

        public Member A { get; }

        public Member B { get; }

        public bool Persistent { get; }

        public static async Task<MemberPair> StartAsync(string root, string config, bool phases, string[]? logDirs)
        {
            var aPort = FreePort();
            var bPort = FreePort();
            var pairName = config + "-" + Guid.NewGuid().ToString("N")[..6];
            var dir = Path.Combine(root, pairName);
            string[] common = ["--config", config, "--a", $"http://127.0.0.1:{aPort}", "--b", $"http://127.0.0.1:{bPort}", "--dir", dir, .. phases ? ["--phases", "on"] : Array.Empty<string>()];
            string[] LogDir(int member) => logDirs is null ? [] : ["--log-dir", Path.Combine(logDirs[member], pairName, member == 0 ? "A" : "B", "log")];
            var b = await Member.StartAsync([.. common, "--name", "B", .. LogDir(1)], new Uri($"http://127.0.0.1:{bPort}"));
            var a = await Member.StartAsync([.. common, "--name", "A", .. LogDir(0)], new Uri($"http://127.0.0.1:{aPort}"));
            return new MemberPair(a, b, config is "pessimistic" or "optimistic", phases);
        }

        public async Task<long> CommitsAsync() => await A.StatAsync("commits") + await B.StatAsync("commits");

        public Task<long> TotalCreditsAsync() => B.StatAsync("credits");

        public async ValueTask DisposeAsync()
        {
            await A.DisposeAsync();
            await B.DisposeAsync();
        }
    }

    private sealed class Member : IAsyncDisposable
    {
        private readonly string[] _args;
        private readonly List<string> _output = [];
        private Process _process;

        private Member(string[] args, Uri url)
        {
            _args = args;
            Url = url;
            _process = Launch();
        }

        public Uri Url { get; }

        public static async Task<Member> StartAsync(string[] args, Uri url)
        {
            var member = new Member(args, url);
            await member.WaitReadyAsync();
            return member;
        }

        /// <summary>The member's last <paramref name="lines"/> lines of output (for a failure message).</summary>
        public string Tail(int lines)
        {
            lock (_output)
            {
                return string.Join(Environment.NewLine, _output.TakeLast(lines));
            }
        }

        public int CountOutput(string text)
        {
            lock (_output)
            {
                return _output.Count(l => l.Contains(text, StringComparison.Ordinal));
            }
        }

        public async Task KillAndRestartAsync()
        {
            _process.Kill(entireProcessTree: true); // SIGKILL
            await _process.WaitForExitAsync();
            _process.Dispose();
            _process = Launch();
            await WaitReadyAsync();
        }

        public async Task WaitReadyAsync()
        {
            using var http = new HttpClient { BaseAddress = Url, Timeout = TimeSpan.FromSeconds(5) };
            var deadline = Stopwatch.StartNew();
            while (deadline.Elapsed < TimeSpan.FromMinutes(2))
            {
                if (_process.HasExited)
                {
                    throw new InvalidOperationException($"member {string.Join(' ', _args)} exited with {_process.ExitCode}:\n{string.Join('\n', _output.TakeLast(30))}");
                }

                try
                {
                    using var response = await http.GetAsync("/bench/ready");
                    if (response.StatusCode == HttpStatusCode.OK)
                    {
                        return;
                    }
                }
                catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException)
                {
                }

                await Task.Delay(20);
            }

            throw new TimeoutException("member did not become ready");
        }

        public TimeSpan CpuTime()
        {
            _process.Refresh();
            return _process.TotalProcessorTime;
        }

        public async Task<string> GetAsync(string path)
        {
            using var http = new HttpClient { BaseAddress = Url, Timeout = TimeSpan.FromSeconds(30) };
            return await http.GetStringAsync(path);
        }

        public async Task<long> StatAsync(string name)
        {
            using var http = new HttpClient { BaseAddress = Url, Timeout = TimeSpan.FromSeconds(30) };
            var stats = JsonDocument.Parse(await http.GetStringAsync("/bench/stats"));
            return stats.RootElement.GetProperty(name).GetInt64();
        }

        public async ValueTask DisposeAsync()
        {
            _process.Kill(entireProcessTree: true);
            await _process.WaitForExitAsync();
            _process.Dispose();
        }

        private Process Launch()
        {
            var self = Environment.ProcessPath!;
            var start = Path.GetFileNameWithoutExtension(self) == "dotnet"
                ? new ProcessStartInfo(self) { ArgumentList = { typeof(Member).Assembly.Location } }
                : new ProcessStartInfo(self);
            start.ArgumentList.Add("member");
            foreach (var arg in _args)
            {
                start.ArgumentList.Add(arg);
            }

            start.RedirectStandardOutput = true;
            start.RedirectStandardError = true;
            start.UseShellExecute = false;
            var process = new Process { StartInfo = start };
            process.OutputDataReceived += (_, e) =>
            {
                if (e.Data is not null)
                {
                    lock (_output)
                    {
                        _output.Add(e.Data);
                    }
                }
            };
            process.ErrorDataReceived += (_, e) =>
            {
                if (e.Data is not null)
                {
                    lock (_output)
                    {
                        _output.Add(e.Data);
                    }
                }
            };
            process.Start();
            process.BeginOutputReadLine();
            process.BeginErrorReadLine();
            return process;
        }
    }

    private static int FreePort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }

    /// <summary>The `member` mode: service A or B of one configuration (arguments from <see cref="MemberPair"/>).</summary>
    public static async Task<int> ServeMemberAsync(Func<string, string?> option)
    {
        var config = option("--config")!;
        var name = option("--name")!;
        var aUrl = new Uri(option("--a")!);
        var bUrl = new Uri(option("--b")!);
        var dir = Path.Combine(option("--dir")!, name);
        Directory.CreateDirectory(dir);
        var persistent = config is "pessimistic" or "optimistic";

        var builder = WebApplication.CreateBuilder();
        builder.WebHost.UseUrls((name == "A" ? aUrl : bUrl).ToString());
        builder.Logging.ClearProviders();
        builder.Logging.AddSimpleConsole(o => o.SingleLine = true);
        builder.Logging.SetMinimumLevel(LogLevel.Warning);
        builder.Services.AddSingleton<DomainBenchSession>();
        builder.Services.AddPersistentServices(o =>
        {
            o.LogDirectory = option("--log-dir") ?? Path.Combine(dir, "log");
            o.ServiceName = name;
            o.Calls.PeerKey = PeerKey;
            o.Calls.RetryDelay = TimeSpan.FromMilliseconds(20);
            o.Calls.MaxRetryDelay = TimeSpan.FromMilliseconds(500);
            if (config == "optimistic")
            {
                o.Domain.Members["A"] = aUrl;
                o.Domain.Members["B"] = bUrl;
            }
        });
        var http = builder.Services.AddHttpClient("B", c =>
        {
            c.BaseAddress = bUrl;
            c.Timeout = Timeout.InfiniteTimeSpan;
        });
        if (persistent)
        {
            http.AddPersistentCalls();
        }

        SqliteState? sqlite = config == "psession" ? new SqliteState(Path.Combine(dir, "state.db")) : null;
        using var redis = config == "stateserver" ? await ConnectionMultiplexer.ConnectAsync($"127.0.0.1:{RedisPort}") : null;
        var memory = new ConcurrentDictionary<string, long>();

        using var phases = option("--phases") is null ? null : new PhaseRecorder();
        var app = builder.Build();
        app.UsePersistentServices();
        var runtime = app.Services.GetRequiredService<PersistentRuntime>();
        if (phases is not null)
        {
            app.MapGet("/bench/phases", (bool? reset) => reset == true ? Results.Ok(phases.Reset()) : Results.Ok(phases.Summary()));
        }

        app.MapGet("/bench/ready", () => runtime.Availability.CanServe(RequestKind.SessionResource) || !persistent ? Results.Ok() : Results.StatusCode(503));
        app.MapGet("/bench/stats", [PersistentReadOnly] () => Results.Ok(new { commits = runtime.Log.Commits, credits = persistent ? Credits.Read() : 0 }));

        if (persistent)
        {
#pragma warning disable PS0202 // the "B" client has AddPersistentCalls(): logged, deduplicated calls
            app.MapPost("/order", [Persistent] async (int calls, DomainBenchSession session, IHttpClientFactory clients) =>
            {
                var b = clients.CreateClient("B");
                for (var i = 0; i < calls; i++)
                {
                    using var response = await b.PostAsync("/credit", null);
                    response.EnsureSuccessStatusCode();
                }

                return Results.Ok(new { orders = ++session.Orders });
            });
#pragma warning restore PS0202
            app.MapPost("/credit", [Persistent] (DomainBenchSession session) =>
            {
                Credits.Update(c => c + 1);
                return Results.Ok(new { credits = ++session.Orders });
            });
        }
        else
        {
            app.MapPost("/order", async (int calls, HttpContext context, IHttpClientFactory clients) =>
            {
                var client = context.Request.Headers["X-Client"].ToString();
                var b = clients.CreateClient("B");
                for (var i = 0; i < calls; i++)
                {
                    using var request = new HttpRequestMessage(HttpMethod.Post, "/credit");
                    request.Headers.TryAddWithoutValidation("X-Client", client);
                    using var response = await b.SendAsync(request);
                    response.EnsureSuccessStatusCode();
                }

                return Results.Ok(new { orders = await IncrementAsync("A:" + client) });
            });
            app.MapPost("/credit", async (HttpContext context) =>
                Results.Ok(new { credits = await IncrementAsync("B:" + context.Request.Headers["X-Client"].ToString()) }));
        }

        async Task<long> IncrementAsync(string key)
        {
            if (sqlite is not null)
            {
                return sqlite.Increment(key);
            }

            if (redis is not null)
            {
                var db = redis.GetDatabase();
                var value = (long?)await db.StringGetAsync(key) ?? 0;
                await db.StringSetAsync(key, value + 1);
                return value + 1;
            }

            return memory.AddOrUpdate(key, 1, (_, v) => v + 1);
        }

        await app.RunAsync();
        sqlite?.Dispose();
        return 0;
    }

    private static readonly SharedVariable<long> Credits = new("PersistentServices.EndToEnd.DomainBench.Credits");

    /// <summary>One row per session in SQLite (WAL, synchronous=FULL), read and written in one transaction per request.</summary>
    private sealed class SqliteState : IDisposable
    {
        private readonly string _connectionString;

        public SqliteState(string path)
        {
            _connectionString = new SqliteConnectionStringBuilder { DataSource = path, Pooling = true, DefaultTimeout = 60 }.ToString();
            using var connection = Open();
            Execute(connection, "PRAGMA journal_mode=WAL;");
            Execute(connection, "CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, value INTEGER NOT NULL);");
        }

        public long Increment(string key)
        {
            using var connection = Open();
            using var transaction = connection.BeginTransaction(deferred: false);
            using var read = connection.CreateCommand();
            read.Transaction = transaction;
            read.CommandText = "SELECT value FROM sessions WHERE id = $id";
            read.Parameters.AddWithValue("$id", key);
            var value = read.ExecuteScalar() is long v ? v + 1 : 1;
            using var write = connection.CreateCommand();
            write.Transaction = transaction;
            write.CommandText = "INSERT INTO sessions (id, value) VALUES ($id, $value) ON CONFLICT(id) DO UPDATE SET value = $value";
            write.Parameters.AddWithValue("$value", value);
            write.Parameters.AddWithValue("$id", key);
            write.ExecuteNonQuery();
            transaction.Commit();
            return value;
        }

        public void Dispose() => SqliteConnection.ClearAllPools();

        private SqliteConnection Open()
        {
            var connection = new SqliteConnection(_connectionString);
            connection.Open();
            Execute(connection, "PRAGMA synchronous=FULL;");
            return connection;
        }

        private static void Execute(SqliteConnection connection, string sql)
        {
            using var command = connection.CreateCommand();
            command.CommandText = sql;
            command.ExecuteNonQuery();
        }
    }
}

/// <summary>Session state of the domain benchmark's services.</summary>
public sealed partial class DomainBenchSession
{
    [SessionState]
    public partial long Orders { get; set; }
}

/// <summary>
/// The <c>--phases</c> diagnostic of the domain benchmark: durations of the library's spans (request, distributed flush,
/// log force) and of HTTP in and out by path, recorded by an <see cref="ActivityListener"/>; p50 per step.
/// </summary>
internal sealed class PhaseRecorder : IDisposable
{
    private readonly ActivityListener _listener;
    private ConcurrentDictionary<string, ConcurrentBag<double>> _steps = new();

    public PhaseRecorder()
    {
        _listener = new ActivityListener
        {
            ShouldListenTo = source => source.Name is "PersistentServices" or "System.Net.Http" or "Microsoft.AspNetCore",
            Sample = (ref ActivityCreationOptions<ActivityContext> _) => ActivitySamplingResult.AllDataAndRecorded,
            ActivityStopped = Record,
        };
        ActivitySource.AddActivityListener(_listener);
    }

    public object Reset()
    {
        _steps = new();
        return new { };
    }

    public Dictionary<string, object> Summary() => _steps.Where(s => !s.Key.Contains("/bench/", StringComparison.Ordinal)).ToDictionary(
        s => s.Key,
        s =>
        {
            var sorted = s.Value.Order().ToArray();
            return (object)new { count = sorted.Length, p50 = sorted.Length == 0 ? 0 : sorted[sorted.Length / 2] };
        });

    public void Dispose() => _listener.Dispose();

    private void Record(Activity activity)
    {
        var name = activity.Source.Name switch
        {
            "PersistentServices" => activity.OperationName,
            "System.Net.Http" => "http out " + PathOf(activity),
            _ => "http in " + PathOf(activity),
        };
        _steps.GetOrAdd(name, _ => []).Add(activity.Duration.TotalMilliseconds);
    }

    private static string PathOf(Activity activity)
    {
        if (activity.GetTagItem("url.path") is string path)
        {
            return path;
        }

        return activity.GetTagItem("url.full") is string full && Uri.TryCreate(full, UriKind.Absolute, out var uri) ? uri.AbsolutePath : activity.DisplayName;
    }
}
