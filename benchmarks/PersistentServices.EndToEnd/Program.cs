using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Reflection;
using System.Text;
using System.Text.Json;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices;
using PersistentServices.EndToEnd;
using PersistentServices.Hosting;

// End-to-end benchmark over real HTTP on loopback. Modes:
//   throughput (default): plain vs [Persistent] vs [PersistentReadOnly] endpoints of one in-process Kestrel server, with 1 and
//       64 concurrent client sessions (closed loop): requests/s, p50/p99 latency, log forces per request.
//   state: an endpoint doing 0, 1, 4 read+write of state per request, the state in shared variables vs a durable SQLite
//       row vs Redis ([MSP §5]: Psession and StateServer), with 1 and 64 sessions.
//   domain: two services as child processes, an end request to A making 1..4 calls to B: NoLog, pessimistic,
//       locally optimistic (one domain), Psession (SQLite), StateServer (Redis) ([MSP §5] Fig. 13-14); then throughput
//       against the rate at which B is SIGKILLed (Fig. 15b).
//   recovery: drives N logged requests into the sample service (a child process), SIGKILLs it, restarts it and
//       measures restart -> ready (log verified and scanned) -> all sessions replayed.
//   encryption: the [Persistent] endpoint of two in-process servers, one whose log is in clear and one whose log is
//       encrypted (LogOptions.Encryption), alternated in ABBA rounds: requests/s, p50/p99, CPU and log bytes per request.
// Usage: dotnet run -c Release --project benchmarks/PersistentServices.EndToEnd -- [throughput] [--seconds 10] [--sessions 1,64] [--kinds plain,persistent,readonly]
//        dotnet run -c Release --project benchmarks/PersistentServices.EndToEnd -- recovery [--requests 100000] [--sessions 1000]
//        dotnet run -c Release --project benchmarks/PersistentServices.EndToEnd -- encryption [--seconds 8] [--sessions 1,64] [--rounds 4]
//        [--saved-log DIR]: the first run saves the killed service's log (and the session ids) in DIR; later runs restart
//        on a copy of it instead of driving again (restart measurements of one log, before and after a change);
//        with PS_BENCH_COLD_LOG=1 the copy's pages are evicted from the page cache, as a kill -9 leaves an O_DIRECT log;
//        PS_BENCH_SAMPLE=path/to/PersistentServices.Sample.dll runs another build of the sample (a ReadyToRun publish);
//        PS_BENCH_LOG_KEY=<base64 key> gives the sample an encrypted log (a saved log must have been written with it).
//        dotnet run -c Release --project benchmarks/PersistentServices.EndToEnd -- domain [--seconds 5] [--sessions 1,16] [--calls 1,2,3,4]
//            [--configs nolog,pessimistic,optimistic,psession,stateserver] [--crash-every 0,10,5,2.5] [--crash-seconds 20]
//            [--phases on]   (p50 of each traced step in A and B: request, distributed flush, force, HTTP in and out by path)
//            [--log-roots DIR_A,DIR_B]   (A's logs under DIR_A, B's under DIR_B: two file systems, as services on two machines)
var mode = args.Length > 0 && !args[0].StartsWith("--", StringComparison.Ordinal) ? args[0] : "throughput";
if (mode is not ("throughput" or "state" or "recovery" or "domain" or "serve" or "member" or "encryption"))
{
    Console.Error.WriteLine($"unknown mode '{mode}': throughput (default), state, recovery, domain, encryption or serve");
    return 2;
}

string? Option(string name) => args.SkipWhile(a => a != name).Skip(1).FirstOrDefault();

if (mode == "member")
{
    return await DomainComparison.ServeMemberAsync(Option);
}

if (mode == "serve")
{
    // The same endpoints on a fixed port, for a load generator in another process (benchmarks/wrk/run.sh).
    using var allocations = Environment.GetEnvironmentVariable("PS_BENCH_ALLOC_TICKS") == "1" ? new PersistentServices.EndToEnd.AllocationSampler() : null;
    using var commits = Environment.GetEnvironmentVariable("PS_BENCH_COMMIT_STATS") == "1" ? new PersistentServices.EndToEnd.CommitStats() : null;
    var allocatedAtStart = GC.GetTotalAllocatedBytes();
    var serveDir = Option("--log") ?? Path.Combine(Path.GetTempPath(), "ps-e2e-serve-" + Guid.NewGuid().ToString("N")[..8]);
    await using var served = await BenchServer.StartAsync(serveDir, $"http://127.0.0.1:{Option("--port") ?? "5090"}");
    Console.WriteLine($"serving on {served.BaseAddress} with the log in {serveDir}; SIGTERM or Ctrl+C stops it");
    var stop = new TaskCompletionSource();
    using var sigterm = System.Runtime.InteropServices.PosixSignalRegistration.Create(System.Runtime.InteropServices.PosixSignal.SIGTERM, c => { c.Cancel = true; stop.TrySetResult(); });
    using var sigint = System.Runtime.InteropServices.PosixSignalRegistration.Create(System.Runtime.InteropServices.PosixSignal.SIGINT, c => { c.Cancel = true; stop.TrySetResult(); });
    await stop.Task;
    commits?.Print(Console.Out);
    if (allocations is not null)
    {
        Console.WriteLine($"allocated since start: {GC.GetTotalAllocatedBytes() - allocatedAtStart:N0} bytes");
        allocations.Print(Console.Out);
    }

    return 0;
}

Console.WriteLine($"# PersistentServices end-to-end benchmark: {mode}");
Console.WriteLine();
Console.WriteLine($"- machine: {Environment.ProcessorCount} cores, {GC.GetGCMemoryInfo().TotalAvailableMemoryBytes / (1 << 30)} GiB, {System.Runtime.InteropServices.RuntimeInformation.OSDescription}, .NET {Environment.Version}");
Console.WriteLine($"- command: dotnet run -c Release --project benchmarks/PersistentServices.EndToEnd -- {string.Join(' ', args)}");
Console.WriteLine();

if (mode == "state")
{
    await StateComparison.RunAsync(
        int.Parse(Option("--seconds") ?? "5", CultureInfo.InvariantCulture),
        (Option("--sessions") ?? "1,64").Split(',').Select(s => int.Parse(s, CultureInfo.InvariantCulture)).ToArray());
    return 0;
}

if (mode == "domain")
{
    static int[] Ints(string text) => [.. text.Split(',').Select(s => int.Parse(s, CultureInfo.InvariantCulture))];
    await DomainComparison.RunAsync(
        seconds: int.Parse(Option("--seconds") ?? "5", CultureInfo.InvariantCulture),
        sessionCounts: Ints(Option("--sessions") ?? "1,16"),
        callCounts: Ints(Option("--calls") ?? "1,2,3,4"),
        configs: (Option("--configs") ?? "nolog,pessimistic,optimistic,psession,stateserver").Split(','),
        crashPeriods: [.. (Option("--crash-every") ?? "0,10,5,2.5").Split(',', StringSplitOptions.RemoveEmptyEntries).Select(s => double.Parse(s, CultureInfo.InvariantCulture))],
        crashSeconds: int.Parse(Option("--crash-seconds") ?? "20", CultureInfo.InvariantCulture),
        phases: Option("--phases") is "on" or "true",
        logRoots: Option("--log-roots")?.Split(','));
    return 0;
}

if (mode == "encryption")
{
    await EncryptionComparison.RunAsync(
        int.Parse(Option("--seconds") ?? "8", CultureInfo.InvariantCulture),
        (Option("--sessions") ?? "1,64").Split(',').Select(s => int.Parse(s, CultureInfo.InvariantCulture)).ToArray(),
        int.Parse(Option("--rounds") ?? "4", CultureInfo.InvariantCulture));
    return 0;
}

if (mode == "recovery")
{
    await RecoveryRun.RunAsync(
        requests: int.Parse(Option("--requests") ?? "100000", CultureInfo.InvariantCulture),
        sessions: int.Parse(Option("--sessions") ?? "1000", CultureInfo.InvariantCulture),
        checkpointBytes: Option("--checkpoint-bytes") is { } bytes ? int.Parse(bytes, CultureInfo.InvariantCulture) : null,
        savedLog: Option("--saved-log"));
    return 0;
}

var seconds = int.Parse(Option("--seconds") ?? "10", CultureInfo.InvariantCulture);
var kinds = (Option("--kinds") ?? "plain,persistent,readonly").Split(',');
var sessionCounts = (Option("--sessions") ?? "1,64").Split(',').Select(s => int.Parse(s, CultureInfo.InvariantCulture)).ToArray();
var logDir = Path.Combine(Path.GetTempPath(), "ps-e2e-" + Guid.NewGuid().ToString("N")[..8]);
await using var server = await BenchServer.StartAsync(logDir);
Console.WriteLine($"- server: in-process Kestrel on {server.BaseAddress} (HTTP/1.1), log in {logDir}; clients in the same process; every kind warmed, then {seconds} s per cell after 2 s warm-up");
Console.WriteLine();
Console.WriteLine("| endpoint | sessions | requests/s | p50 (ms) | p99 (ms) | log forces per request | CPU per request (µs, client + server) | allocated per request (bytes, client + server) | vs plain (req/s) |");
Console.WriteLine("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
foreach (var sessions in sessionCounts)
{
    // Warm every kind first (JIT tiers, connections, thread pool), so the order of the measured cells does not favour any.
    foreach (var kind in kinds)
    {
        await LoadRun.RunAsync(server, kind, sessions, TimeSpan.FromSeconds(2));
    }

    double plainRate = 0;
    foreach (var kind in kinds)
    {
        var result = await LoadRun.RunAsync(server, kind, sessions, TimeSpan.FromSeconds(seconds));
        if (kind == "plain" || plainRate == 0)
        {
            plainRate = result.RequestsPerSecond;
        }

        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"| {kind} | {sessions} | {result.RequestsPerSecond:N0} | {result.P50:F3} | {result.P99:F3} | {result.ForcesPerRequest:F3} | {result.CpuMicrosecondsPerRequest:F1} | {result.AllocatedBytesPerRequest:N0} | {result.RequestsPerSecond / plainRate:F2} |"));
    }
}

Directory.Delete(logDir, recursive: true);
return 0;

namespace PersistentServices.EndToEnd
{
    /// <summary>The endpoints measured: the same tiny work behind each kind of endpoint.</summary>
    public sealed partial class BenchSession
    {
        [SessionState]
        public partial long Count { get; set; }
    }

    internal sealed class BenchServer : IAsyncDisposable
    {
        private BenchServer(WebApplication app) => App = app;

        public WebApplication App { get; }

        public Uri BaseAddress => new(App.Urls.First());

        public PersistentRuntime Runtime => App.Services.GetRequiredService<PersistentRuntime>();

        public static async Task<BenchServer> StartAsync(string logDirectory, string url = "http://127.0.0.1:0", string? encryptionKey = null)
        {
            var builder = WebApplication.CreateBuilder();
            builder.WebHost.UseUrls(url);
            builder.Logging.ClearProviders();
            builder.Logging.AddSimpleConsole(o => o.SingleLine = true); // warnings and errors only: a fault shows
            builder.Logging.SetMinimumLevel(LogLevel.Warning);
            builder.Services.AddSingleton<BenchSession>();
            builder.Services.AddPersistentServices(o =>
            {
                o.LogDirectory = logDirectory;
                o.Log.Encryption.Key = encryptionKey;
            });
            var app = builder.Build();
            app.UsePersistentServices();
            app.MapPost("/plain", (Item body, BenchSession _) => Results.Ok(new { count = body.N }));
            app.MapPost("/persistent", [Persistent] (Item body, BenchSession session) => Results.Ok(new { count = session.Count += body.N }));
            app.MapPost("/readonly", [PersistentReadOnly] (Item body, BenchSession session) => Results.Ok(new { count = session.Count + body.N }));
            await app.StartAsync();
            return new BenchServer(app);
        }

        public async ValueTask DisposeAsync()
        {
            await App.StopAsync();
            await App.DisposeAsync();
        }
    }

    public sealed record Item(long N);

    internal sealed record LoadResult(double RequestsPerSecond, double P50, double P99, double ForcesPerRequest, long TotalRequests, double LogBytesPerRequest, double CpuMicrosecondsPerRequest, double AllocatedBytesPerRequest = 0);

    internal static class LoadRun
    {
        private static readonly byte[] Body = Encoding.UTF8.GetBytes("{\"n\":1}");
        private static readonly System.Net.Http.Headers.MediaTypeHeaderValue Json = new("application/json");

        public static Task<LoadResult> RunAsync(BenchServer server, string kind, int sessions, TimeSpan duration)
            => RunAsync(server.BaseAddress.ToString(), "/" + kind, kind == "persistent", sessions, duration, server.Runtime);

        public static async Task<LoadResult> RunAsync(string baseUrl, string path, bool persistent, int sessions, TimeSpan duration, PersistentRuntime runtime)
        {
            // No client timeout: HttpClient's per-request timeout timer is finalizable and would tax every endpoint alike.
            using var client = new HttpClient(new SocketsHttpHandler { MaxConnectionsPerServer = sessions + 4, UseCookies = false })
            {
                BaseAddress = new Uri(baseUrl),
                Timeout = Timeout.InfiniteTimeSpan,
            };
            var ids = new string[sessions];
            for (var i = 0; i < sessions; i++)
            {
                using var response = await client.PostAsync("/ps/sessions", null);
                ids[i] = response.Headers.GetValues("PS-Session").Single();
            }

            var sequences = new long[sessions];
            await DriveAsync(client, path, persistent, ids, sequences, TimeSpan.FromSeconds(2), null);
            var commitsBefore = runtime.Log.Commits;
            var tailBefore = runtime.Log.TailAddress;
            var cpuBefore = Process.GetCurrentProcess().TotalProcessorTime;
            var allocatedBefore = GC.GetTotalAllocatedBytes(precise: true);
            var latencies = new List<double>[sessions];
            var started = Stopwatch.GetTimestamp();
            var count = await DriveAsync(client, path, persistent, ids, sequences, duration, latencies);
            var elapsed = Stopwatch.GetElapsedTime(started).TotalSeconds;
            var commits = runtime.Log.Commits - commitsBefore;
            var logBytes = runtime.Log.TailAddress - tailBefore;
            var cpu = (Process.GetCurrentProcess().TotalProcessorTime - cpuBefore).TotalMicroseconds;
            var allocated = GC.GetTotalAllocatedBytes(precise: true) - allocatedBefore;
            var all = latencies.SelectMany(l => l).Order().ToArray();
            return new LoadResult(count / elapsed, all[all.Length / 2], all[Math.Min(all.Length - 1, (int)(all.Length * 0.99))], (double)commits / count, count, (double)logBytes / count, cpu / count,
                (double)allocated / count);
        }

        private static async Task<long> DriveAsync(HttpClient client, string path, bool persistent, string[] ids, long[] sequences, TimeSpan duration, List<double>[]? latencies)
        {
            var deadline = Stopwatch.GetTimestamp() + (long)(duration.TotalSeconds * Stopwatch.Frequency);
            var tasks = ids.Select((id, i) => Task.Run(async () =>
            {
                var samples = latencies is null ? null : latencies[i] = new List<double>(16_384);
                long done = 0;
                while (Stopwatch.GetTimestamp() < deadline)
                {
                    using var request = new HttpRequestMessage(HttpMethod.Post, path) { Content = new ByteArrayContent(Body) };
                    request.Content.Headers.ContentType = Json;
                    request.Headers.TryAddWithoutValidation("PS-Session", id);
                    if (persistent)
                    {
                        request.Headers.TryAddWithoutValidation("PS-Seq", (++sequences[i]).ToString(CultureInfo.InvariantCulture));
                    }

                    var t0 = Stopwatch.GetTimestamp();
                    using var response = await client.SendAsync(request);
                    await response.Content.ReadAsByteArrayAsync();
                    if (response.StatusCode != HttpStatusCode.OK)
                    {
                        throw new InvalidOperationException($"{path}: {response.StatusCode}");
                    }

                    samples?.Add(Stopwatch.GetElapsedTime(t0).TotalMilliseconds);
                    done++;
                }

                return done;
            })).ToArray();
            return (await Task.WhenAll(tasks)).Sum();
        }
    }

    /// <summary>Recovery time of the sample (a real process) after SIGKILL with many logged requests.</summary>
    internal static class RecoveryRun
    {
        public static async Task RunAsync(int requests, int sessions, int? checkpointBytes, string? savedLog)
        {
            var settings = checkpointBytes is { } b ? new[] { $"--PersistentServices:SessionCheckpointBytes={b}" } : [];
            // PS_BENCH_SAMPLE: another build of the sample (a ReadyToRun publish: docs/operations.md "Start time after a crash").
            var sample = Environment.GetEnvironmentVariable("PS_BENCH_SAMPLE") is { Length: > 0 } other
                ? other
                : typeof(RecoveryRun).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "SamplePath").Value!;
            var logDir = Path.Combine(Path.GetTempPath(), "ps-recovery-" + Guid.NewGuid().ToString("N")[..8]);
            const string url = "http://127.0.0.1:5099";
            using var client = new HttpClient { BaseAddress = new Uri(url), Timeout = TimeSpan.FromSeconds(30) };
            var idsFile = savedLog is null ? null : Path.Combine(savedLog, "session-ids.txt");
            Process service;
            List<string> output;
            string[] ids;
            int perSession;
            long logBytes;
            if (idsFile is not null && File.Exists(idsFile))
            {
                // Restart on a copy of a saved log: the same bytes for every run.
                var lines = File.ReadAllLines(idsFile);
                perSession = int.Parse(lines[0], CultureInfo.InvariantCulture);
                ids = lines[1..];
                sessions = ids.Length;
                CopyDirectory(savedLog!, logDir);
                File.Delete(Path.Combine(logDir, "session-ids.txt"));
                if (Environment.GetEnvironmentVariable("PS_BENCH_COLD_LOG") == "1")
                {
                    // As after a kill -9: the log's pages were written with O_DIRECT and are not in the page cache (the
                    // runtime's and the application's files are, as on a node that restarts a container).
                    foreach (var file in Directory.GetFiles(logDir))
                    {
                        using var handle = File.OpenHandle(file, FileMode.Open, FileAccess.ReadWrite);
                        RandomAccess.FlushToDisk(handle);
                        _ = PosixFadvise((int)handle.DangerousGetHandle(), 0, 0, 4 /* POSIX_FADV_DONTNEED */);
                    }
                }

                logBytes = Directory.GetFiles(logDir, "log.*").Sum(f => new FileInfo(f).Length);
                Console.WriteLine($"- service: {sample} on {url}, log copied from {savedLog} ({perSession * sessions:N0} persistent requests over {sessions:N0} sessions) to {logDir}; " +
                                  $"session checkpoints {(checkpointBytes is { } sb ? (sb == int.MaxValue ? "off" : $"every {sb:N0} bytes") : "at the default threshold")}");
            }
            else
            {
                Console.WriteLine($"- service: {sample} on {url}, log in {logDir}; {requests:N0} persistent requests over {sessions:N0} sessions, 64 concurrent clients; " +
                                  $"session checkpoints {(checkpointBytes is { } cb ? (cb == int.MaxValue ? "off" : $"every {cb:N0} bytes") : "at the default threshold")}");
                Console.WriteLine();

                service = Start(sample, url, logDir, settings, out output);
                await WaitReadyAsync(client, requireReplayed: true);
                ids = new string[sessions];
                for (var i = 0; i < sessions; i++)
                {
                    using var response = await client.PostAsync("/ps/sessions", null);
                    if (!response.Headers.TryGetValues("PS-Session", out var id))
                    {
                        throw new InvalidOperationException($"session start {i}: {(int)response.StatusCode} {await response.Content.ReadAsStringAsync()}");
                    }

                    ids[i] = id.Single();
                }

                var load = Stopwatch.StartNew();
                perSession = requests / sessions;
                var next = -1;
                var count = perSession;
                await Task.WhenAll(Enumerable.Range(0, 64).Select(_ => Task.Run(async () =>
                {
                    int s;
                    while ((s = Interlocked.Increment(ref next)) < ids.Length)
                    {
                        for (var seq = 1; seq <= count; seq++)
                        {
                            using var request = new HttpRequestMessage(HttpMethod.Post, "/counter/add")
                            {
                                Content = JsonContent.Create(new { opId = $"s{s}-{seq}", amount = seq }),
                            };
                            request.Headers.TryAddWithoutValidation("PS-Session", ids[s]);
                            request.Headers.TryAddWithoutValidation("PS-Seq", seq.ToString(CultureInfo.InvariantCulture));
                            using var response = await client.SendAsync(request);
                            response.EnsureSuccessStatusCode();
                        }
                    }
                })));
                Console.WriteLine($"logged {perSession * sessions:N0} requests in {load.Elapsed.TotalSeconds:F1} s ({perSession * sessions / load.Elapsed.TotalSeconds:N0} requests/s)");
                logBytes = Directory.GetFiles(logDir, "log.*").Sum(f => new FileInfo(f).Length);

                service.Kill(entireProcessTree: true); // SIGKILL
                await service.WaitForExitAsync();
                service.Dispose();
                if (savedLog is not null)
                {
                    CopyDirectory(logDir, savedLog);
                    File.WriteAllLines(idsFile!, [perSession.ToString(CultureInfo.InvariantCulture), .. ids]);
                    Console.WriteLine($"saved the log in {savedLog}");
                }
            }

            var restart = Stopwatch.StartNew();
            service = Start(sample, url, logDir, settings, out output);
            await WaitReadyAsync(client, requireReplayed: false);
            var ready = restart.Elapsed;

            // A new client: a session started and one persistent request served, while the old sessions replay.
            using (var start = await client.PostAsync("/ps/sessions", null))
            {
                using var first = new HttpRequestMessage(HttpMethod.Post, "/counter/add") { Content = JsonContent.Create(new { opId = "new", amount = 1 }) };
                first.Headers.TryAddWithoutValidation("PS-Session", start.Headers.GetValues("PS-Session").Single());
                first.Headers.TryAddWithoutValidation("PS-Seq", "1");
                using var served = await client.SendAsync(first);
                served.EnsureSuccessStatusCode();
            }

            var newServed = restart.Elapsed;
            await WaitReadyAsync(client, requireReplayed: true);
            var replayed = restart.Elapsed;

            // Check one session from the outside.
            using var check = new HttpRequestMessage(HttpMethod.Get, "/counter");
            check.Headers.TryAddWithoutValidation("PS-Session", ids[sessions / 2]);
            using var state = await client.SendAsync(check);
            var body = await state.Content.ReadFromJsonAsync<JsonElement>();
            var expectedTotal = (long)perSession * (perSession + 1) / 2;

            Console.WriteLine($"log size {logBytes / (1 << 20):N1} MiB");
            Console.WriteLine();
            Console.WriteLine("| measurement | time |");
            Console.WriteLine("|---|---:|");
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"| restart (process start) -> ready (log verified, analysis scan done, accepting requests) | {ready.TotalSeconds:F2} s |"));
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"| restart -> a new session served (session started + one persistent request) | {newServed.TotalSeconds:F2} s |"));
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"| restart -> all {sessions:N0} sessions recovered ({perSession * sessions:N0} requests logged) | {replayed.TotalSeconds:F2} s |"));
            Console.WriteLine();
            Console.WriteLine("service log:");
            foreach (var line in output.Where(l => l.Contains("Opened log", StringComparison.Ordinal) || l.Contains("Analysis scan", StringComparison.Ordinal) || l.Contains("Replayed", StringComparison.Ordinal) || l.Contains("Service checkpoint", StringComparison.Ordinal)))
            {
                Console.WriteLine("    " + line.Trim());
            }

            Console.WriteLine($"session {ids[sessions / 2]}: total {body.GetProperty("total").GetInt64()} (expected {expectedTotal}), operations {body.GetProperty("operations").GetArrayLength()} (expected {perSession})");
            service.Kill(entireProcessTree: true);
            await service.WaitForExitAsync();
            Directory.Delete(logDir, recursive: true);
        }

        [System.Runtime.InteropServices.DllImport("libc", EntryPoint = "posix_fadvise")]
        private static extern int PosixFadvise(int fd, long offset, long length, int advice);

        private static void CopyDirectory(string from, string to)
        {
            Directory.CreateDirectory(to);
            foreach (var file in Directory.GetFiles(from))
            {
                File.Copy(file, Path.Combine(to, Path.GetFileName(file)));
            }
        }

        private static Process Start(string sample, string url, string logDir, string[] settings, out List<string> output)
        {
            var lines = new List<string>();
            output = lines;
            var process = new Process
            {
                StartInfo = new ProcessStartInfo("dotnet")
                {
                    ArgumentList = { sample, "--urls", url, $"--PersistentServices:LogDirectory={logDir}", "--Logging:LogLevel:Default=Information",
                                   // The library's lines (log opened, analysis, replay), not one line per replayed request.
                                   "--Logging:LogLevel:Microsoft.AspNetCore=Warning", "--Sample:SessionStartBurst=100000",
                                   // Sessions are started up front and used in turns, some after minutes.
                                   "--PersistentServices:UnusedSessionRetention=01:00:00" },
                    RedirectStandardOutput = true,
                    RedirectStandardError = true,
                    UseShellExecute = false,
                },
            };
            process.OutputDataReceived += (_, e) =>
            {
                if (e.Data is not null)
                {
                    lock (lines)
                    {
                        lines.Add(e.Data);
                    }
                }
            };
            process.ErrorDataReceived += (_, _) => { };
            if (Environment.GetEnvironmentVariable("PS_BENCH_LOG_KEY") is { Length: > 0 } key)
            {
                // An encrypted log (LogOptions.Encryption), the key given as a Kubernetes Secret gives it.
                process.StartInfo.Environment["PersistentServices__Log__Encryption__Key"] = key;
            }

            foreach (var setting in settings)
            {
                process.StartInfo.ArgumentList.Add(setting);
            }

            process.Start();
            process.BeginOutputReadLine();
            process.BeginErrorReadLine();
            return process;
        }

        private static async Task WaitReadyAsync(HttpClient client, bool requireReplayed)
        {
            var deadline = Stopwatch.StartNew();
            while (deadline.Elapsed < TimeSpan.FromMinutes(5))
            {
                try
                {
                    using var response = await client.GetAsync("/health/ready");
                    if (response.StatusCode == HttpStatusCode.OK)
                    {
                        var text = await response.Content.ReadAsStringAsync();
                        if (!requireReplayed || text.Contains("\"stage\":\"Ready\"", StringComparison.Ordinal))
                        {
                            return;
                        }
                    }
                }
                catch (HttpRequestException)
                {
                }

                await Task.Delay(5);
            }

            throw new TimeoutException("the service did not become ready");
        }
    }
}
