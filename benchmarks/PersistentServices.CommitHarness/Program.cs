using System.Diagnostics;
using System.Globalization;
using System.Runtime.InteropServices;
using Google.Protobuf;
using PersistentServices;
using PersistentServices.Log;
using PersistentServices.Log.Records;

// The log's commit harness. In one run, on one disk, it measures:
//   1. raw append + fdatasync of 512 bytes (the floor a durable commit is compared with);
//   2. raw 512-byte O_DIRECT|O_DSYNC appends (how the log's device and FASTER's Linux device write);
//   3. the log's durable-commit latency with one writer (append 512-byte record + wait until durable);
//   4. durable appends/s with 1, 8 and 64 writers (each loops append + wait until durable);
//   5. how far the commit metadata's floor trails the durable end (the window in which outside damage to the log's last
//      commits goes undetected): sampled every 5 ms during the throughput runs, the bytes the written floor does not
//      cover yet and the commits the flushed floor does not cover yet; per flush, its lag behind the first commit it
//      makes durable in the floor.
// Usage: dotnet run -c Release --project benchmarks/PersistentServices.CommitHarness -- [--dir DIR] [--samples N] [--seconds S] [--writers 1,8,64] [--metadata-interval MS]
// With --compare-encryption [--rounds N] it measures 3 and 4 instead for a log in clear and a log with
// LogOptions.Encryption (records sealed with AES-256-GCM), alternating them in ABBA rounds, and then the open (the
// verification walk, which opens every sealed record) of the logs the throughput runs wrote.
var options = HarnessOptions.Parse(args);
LogRuns.MetadataInterval = options.MetadataInterval ?? LogRuns.MetadataInterval;
Directory.CreateDirectory(options.Directory);
var runDir = Path.Combine(options.Directory, "run-" + DateTime.UtcNow.ToString("yyyyMMdd-HHmmss", CultureInfo.InvariantCulture));
Directory.CreateDirectory(runDir);

Console.WriteLine($"# PersistentServices commit harness");
Console.WriteLine();
Console.WriteLine($"- machine: {Machine.Describe()}");
Console.WriteLine($"- directory: {runDir} ({Machine.FileSystemOf(runDir)})");
Console.WriteLine($"- samples per latency figure: {options.Samples} (after {options.Samples / 10} warm-up); throughput: {options.Seconds} s per writer count");
Console.WriteLine($"- LogOptions.MetadataFlushInterval: {LogRuns.MetadataInterval.TotalMilliseconds} ms");
Console.WriteLine($"- command: dotnet run -c Release --project benchmarks/PersistentServices.CommitHarness -- {string.Join(' ', args)}");
Console.WriteLine();

try
{
    if (options.CompareEncryption)
    {
        await EncryptionComparison.RunAsync(runDir, options);
        return 0;
    }

    var raw = RawWrites.AppendFdatasync(Path.Combine(runDir, "raw-fdatasync.dat"), options.Samples);
    var direct = RawWrites.AppendDirectSync(Path.Combine(runDir, "raw-direct.dat"), options.Samples);
    var commit = await LogRuns.CommitLatencyAsync(Path.Combine(runDir, "latency"), options.Samples);

    Console.WriteLine("| measurement | p50 (ms) | p99 (ms) | mean (ms) |");
    Console.WriteLine("|---|---:|---:|---:|");
    Console.WriteLine(raw.Row("raw append 512 B + fdatasync"));
    Console.WriteLine(direct.Row("raw append 512 B, O_DIRECT|O_DSYNC (the log's device)"));
    Console.WriteLine(commit.Latency.Row("log: append 512 B record + wait until durable (1 writer)"));
    Console.WriteLine();
    Console.WriteLine($"durable-commit p50 / raw fdatasync p50 = {commit.Latency.P50 / raw.P50:F2} (target <= 1.5); commit metadata writes during the latency run: {commit.MetadataWrites} ({commit.Lag.Flushes} flushed) for {commit.Commits} commits; process CPU per durable append (1 writer): {LogRuns.LastCpuMicrosecondsPerCommit:F0} µs (raw append + fdatasync: {RawWrites.LastCpuMicrosecondsPerWrite:F0} µs)");
    Console.WriteLine(commit.Lag.Describe("latency run"));
    Console.WriteLine();

    Console.WriteLine("| writers | durable appends/s | commits/s | appends per commit | mean latency (ms) | metadata flushes/s | bytes not in the written floor p99 / max | flushed floor lag p50 / p99 / max (ms) | commits not in the flushed floor p50 / p99 / max |");
    Console.WriteLine("|---:|---:|---:|---:|---:|---:|---|---|---|");
    foreach (var writers in options.Writers)
    {
        var result = await LogRuns.ThroughputAsync(Path.Combine(runDir, $"throughput-{writers}"), writers, TimeSpan.FromSeconds(options.Seconds));
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"| {writers} | {result.AppendsPerSecond:N0} | {result.CommitsPerSecond:N0} | {result.AppendsPerSecond / Math.Max(1, result.CommitsPerSecond):F1} | {result.MeanLatencyMs:F3} | " +
            $"{result.MetadataFlushesPerSecond:N0} | {result.Window.BytesP99:N0} / {result.Window.BytesMax:N0} | {result.Lag.P50Ms:F3} / {result.Lag.P99Ms:F3} / {result.Lag.MaxMs:F3} | {result.Window.CommitsP50} / {result.Window.CommitsP99} / {result.Window.CommitsMax} |"));
    }
}
finally
{
    if (!options.Keep)
    {
        Directory.Delete(runDir, recursive: true);
    }
}

return 0;

internal sealed record HarnessOptions(string Directory, int Samples, int Seconds, int[] Writers, bool Keep, TimeSpan? MetadataInterval, bool CompareEncryption = false, int Rounds = 4)
{
    public static HarnessOptions Parse(string[] args)
    {
        var directory = Path.Combine(Environment.CurrentDirectory, "artifacts", "commit-harness");
        var samples = 5000;
        var seconds = 5;
        int[] writers = [1, 8, 64];
        var keep = false;
        TimeSpan? metadataInterval = null;
        var compareEncryption = false;
        var rounds = 4;
        for (var i = 0; i < args.Length; i++)
        {
            switch (args[i])
            {
                case "--dir": directory = args[++i]; break;
                case "--samples": samples = int.Parse(args[++i], CultureInfo.InvariantCulture); break;
                case "--seconds": seconds = int.Parse(args[++i], CultureInfo.InvariantCulture); break;
                case "--writers": writers = args[++i].Split(',').Select(w => int.Parse(w, CultureInfo.InvariantCulture)).ToArray(); break;
                case "--keep": keep = true; break;
                case "--metadata-interval": metadataInterval = TimeSpan.FromMilliseconds(double.Parse(args[++i], CultureInfo.InvariantCulture)); break;
                case "--compare-encryption": compareEncryption = true; break;
                case "--rounds": rounds = int.Parse(args[++i], CultureInfo.InvariantCulture); break;
                default: throw new ArgumentException($"unknown argument '{args[i]}'; see the comment at the top of Program.cs");
            }
        }

        return new HarnessOptions(directory, samples, seconds, writers, keep, metadataInterval, compareEncryption, rounds);
    }
}

internal sealed class Latencies(List<double> samplesMs)
{
    private readonly double[] _sorted = [.. samplesMs.Order()];

    public double P50 => Percentile(0.50);

    public double P99 => Percentile(0.99);

    public double Mean => _sorted.Average();

    public string Row(string name) => string.Create(CultureInfo.InvariantCulture, $"| {name} | {P50:F3} | {P99:F3} | {Mean:F3} |");

    private double Percentile(double p) => _sorted[Math.Min(_sorted.Length - 1, (int)(p * _sorted.Length))];
}

internal static partial class RawWrites
{
    private const int RecordSize = 512;

    public static double LastCpuMicrosecondsPerWrite { get; private set; }

    public static Latencies AppendFdatasync(string path, int samples)
    {
        var cpuBefore = System.Diagnostics.Process.GetCurrentProcess().TotalProcessorTime;
        using var handle = File.OpenHandle(path, FileMode.CreateNew, FileAccess.Write);
        var buffer = new byte[RecordSize];
        Random.Shared.NextBytes(buffer);
        var fd = (int)handle.DangerousGetHandle();
        var result = new List<double>(samples);
        long offset = 0;
        for (var i = 0; i < samples + samples / 10; i++)
        {
            var started = Stopwatch.GetTimestamp();
            RandomAccess.Write(handle, buffer, offset);
            if (Fdatasync(fd) != 0)
            {
                throw new IOException($"fdatasync failed: errno {Marshal.GetLastPInvokeError()}");
            }

            var elapsed = Stopwatch.GetElapsedTime(started).TotalMilliseconds;
            offset += RecordSize;
            if (i >= samples / 10)
            {
                result.Add(elapsed);
            }
        }

        LastCpuMicrosecondsPerWrite = (System.Diagnostics.Process.GetCurrentProcess().TotalProcessorTime - cpuBefore).TotalMicroseconds / (samples + samples / 10);
        return new Latencies(result);
    }

    public static unsafe Latencies AppendDirectSync(string path, int samples)
    {
        // O_DIRECT | O_DSYNC, opened as the log's device opens its segments (.NET's FileOptions cannot ask for O_DIRECT).
        using var handle = PersistentServices.Log.DurableFile.OpenSegment(path, create: true);
        var memory = (byte*)NativeMemory.AlignedAlloc(RecordSize, 4096);
        try
        {
            var buffer = new Span<byte>(memory, RecordSize);
            Random.Shared.NextBytes(buffer);
            var result = new List<double>(samples);
            long offset = 0;
            for (var i = 0; i < samples + samples / 10; i++)
            {
                var started = Stopwatch.GetTimestamp();
                RandomAccess.Write(handle, buffer, offset);
                var elapsed = Stopwatch.GetElapsedTime(started).TotalMilliseconds;
                offset += RecordSize;
                if (i >= samples / 10)
                {
                    result.Add(elapsed);
                }
            }

            return new Latencies(result);
        }
        finally
        {
            NativeMemory.AlignedFree(memory);
        }
    }

    [LibraryImport("libc", EntryPoint = "fdatasync", SetLastError = true)]
    private static partial int Fdatasync(int fd);
}

internal static class LogRuns
{
    /// <summary>A Payload whose envelope-included record is 512 bytes.</summary>
    private static readonly Payload Record = new() { Tag = 1, Data = ByteString.CopyFrom(new byte[487]) };

    public static double LastCpuMicrosecondsPerCommit { get; private set; }

    public static TimeSpan MetadataInterval { get; set; } = new LogOptions().MetadataFlushInterval;

    private static LogOptions Options(string directory, string? key)
    {
        var options = new LogOptions { Directory = directory, MetadataFlushInterval = MetadataInterval };
        options.Encryption.Key = key;
        return options;
    }

    /// <summary>Opens the log in <paramref name="directory"/> (the verification walk reads every record), closes it; the open's time.</summary>
    public static async Task<(double Milliseconds, long Records, long Bytes)> OpenAsync(string directory, string? key)
    {
        var started = Stopwatch.GetTimestamp();
        await using var log = await DurableLog.OpenAsync(Options(directory, key));
        var elapsed = Stopwatch.GetElapsedTime(started).TotalMilliseconds;
        return (elapsed, log.OpenReport.RecordsVerified, log.DurableUntil - log.BeginAddress);
    }

    public static async Task<(Latencies Latency, long Commits, long MetadataWrites, MetadataLag Lag)> CommitLatencyAsync(string directory, int samples, string? key = null)
    {
        if (Record.CalculateSize() + RecordEnvelope.HeaderSize != 512)
        {
            throw new InvalidOperationException("the harness record must be 512 bytes");
        }

        await using var log = await DurableLog.OpenAsync(Options(directory, key));
        var result = new List<double>(samples);
        var cpuBefore = System.Diagnostics.Process.GetCurrentProcess().TotalProcessorTime;
        for (var i = 0; i < samples + samples / 10; i++)
        {
            var started = Stopwatch.GetTimestamp();
            var lsn = log.Append(RecordKind.Payload, Record);
            await log.WaitUntilDurableAsync(lsn);
            var elapsed = Stopwatch.GetElapsedTime(started).TotalMilliseconds;
            if (i >= samples / 10)
            {
                result.Add(elapsed);
            }
        }

        LastCpuMicrosecondsPerCommit = (System.Diagnostics.Process.GetCurrentProcess().TotalProcessorTime - cpuBefore).TotalMicroseconds / (samples + samples / 10);
        return (new Latencies(result), log.Commits, log.MetadataWrites, log.MetadataLag);
    }

    public static async Task<ThroughputResult> ThroughputAsync(string directory, int writers, TimeSpan duration, string? key = null)
    {
        await using var log = await DurableLog.OpenAsync(Options(directory, key));

        // Warm up, then measure, sampling how much durable work the commit metadata does not cover yet.
        await RunAsync(log, writers, TimeSpan.FromSeconds(1));
        var commitsBefore = log.Commits;
        var flushesBefore = log.MetadataLag.Flushes;
        using var stop = new CancellationTokenSource();
        var sampler = Task.Run(async () =>
        {
            var commits = new List<long>();
            var bytes = new List<long>();
            while (!stop.IsCancellationRequested)
            {
                commits.Add(log.CommitsAfterFlushedFloor);
                bytes.Add(Math.Max(0, log.DurableUntil - log.MetadataFloor));
                await Task.Delay(5);
            }

            return new FloorWindow(commits, bytes);
        });
        var (appends, totalLatencyMs) = await RunAsync(log, writers, duration);
        await stop.CancelAsync();
        var window = await sampler;
        var commits = log.Commits - commitsBefore;
        return new ThroughputResult(appends / duration.TotalSeconds, commits / duration.TotalSeconds, totalLatencyMs / Math.Max(1, appends),
            (log.MetadataLag.Flushes - flushesBefore) / duration.TotalSeconds, log.MetadataLag, window);
    }

    private static async Task<(long Appends, double TotalLatencyMs)> RunAsync(DurableLog log, int writers, TimeSpan duration)
    {
        var deadline = Stopwatch.GetTimestamp() + (long)(duration.TotalSeconds * Stopwatch.Frequency);
        var tasks = Enumerable.Range(0, writers).Select(_ => Task.Run(async () =>
        {
            long count = 0;
            double latency = 0;
            while (Stopwatch.GetTimestamp() < deadline)
            {
                var started = Stopwatch.GetTimestamp();
                var lsn = log.Append(RecordKind.Payload, Record);
                await log.WaitUntilDurableAsync(lsn);
                latency += Stopwatch.GetElapsedTime(started).TotalMilliseconds;
                count++;
            }

            return (count, latency);
        })).ToArray();
        var results = await Task.WhenAll(tasks);
        return (results.Sum(r => r.count), results.Sum(r => r.latency));
    }
}

internal sealed record ThroughputResult(
    double AppendsPerSecond, double CommitsPerSecond, double MeanLatencyMs, double MetadataFlushesPerSecond, MetadataLag Lag, FloorWindow Window);

/// <summary>Samples: commits durable but not yet in the flushed floor; bytes durable but not yet in the written floor.</summary>
internal sealed class FloorWindow(List<long> commits, List<long> bytes)
{
    private readonly long[] _commits = [.. commits.Order()];
    private readonly long[] _bytes = [.. bytes.Order()];

    public long CommitsP50 => At(_commits, 0.5);

    public long CommitsP99 => At(_commits, 0.99);

    public long CommitsMax => _commits.Length == 0 ? 0 : _commits[^1];

    public long BytesP99 => At(_bytes, 0.99);

    public long BytesMax => _bytes.Length == 0 ? 0 : _bytes[^1];

    private static long At(long[] sorted, double p) => sorted.Length == 0 ? 0 : sorted[Math.Min(sorted.Length - 1, (int)(p * sorted.Length))];
}

internal static class MetadataLagText
{
    public static string Describe(this MetadataLag lag, string run) => string.Create(CultureInfo.InvariantCulture,
        $"commit metadata ({run}): {lag.Writes} writes, {lag.Flushes} flushes; lag of the flushed floor behind the first commit each flush covers p50 {lag.P50Ms:F3} ms, p99 {lag.P99Ms:F3} ms, max {lag.MaxMs:F3} ms; commits per flush mean {lag.MeanCommitsPerFlush:F1}, max {lag.MaxCommitsPerFlush}");
}

internal static class Machine
{
    public static string Describe()
    {
        var cpu = File.Exists("/proc/cpuinfo")
            ? File.ReadLines("/proc/cpuinfo").FirstOrDefault(l => l.StartsWith("model name", StringComparison.Ordinal))?.Split(':', 2)[1].Trim()
            : null;
        return $"{Environment.ProcessorCount} cores ({cpu ?? "unknown CPU"}), {GC.GetGCMemoryInfo().TotalAvailableMemoryBytes / (1 << 30)} GiB, {RuntimeInformation.OSDescription}, .NET {Environment.Version}";
    }

    public static string FileSystemOf(string path)
    {
        if (!File.Exists("/proc/mounts"))
        {
            return "unknown filesystem";
        }

        var full = Path.GetFullPath(path);
        var best = File.ReadLines("/proc/mounts")
            .Select(l => l.Split(' '))
            .Where(p => p.Length > 2 && full.StartsWith(p[1], StringComparison.Ordinal))
            .MaxBy(p => p[1].Length);
        return best is null ? "unknown filesystem" : $"{best[2]} on {best[0]} mounted at {best[1]}";
    }
}
