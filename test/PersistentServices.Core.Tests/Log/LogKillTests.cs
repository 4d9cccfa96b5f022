using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Reflection;
using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.CrashChild;
using PersistentServices.Log.Records;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Log;

/// <summary>
/// Kills a real child process (SIGKILL) that appends from several writers, at random moments (including while it
/// is still opening the log), then checks from the outside that every LSN it reported durable is present with its
/// exact bytes; appends more and reopens again; repeats on the same directory (RELIABILITY.md rows 1–2).
/// Iterations: PS_LOG_KILLS (default 30) within PS_LOG_KILL_SECONDS (default 60) per test.
/// </summary>
[Trait("Category", "Crash")]
public sealed class LogKillTests
{
    private const int Writers = 8;
    private const int MaxPayload = 3000;

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static int Kills => int.TryParse(Environment.GetEnvironmentVariable("PS_LOG_KILLS"), out var n) ? n : 30;

    private static TimeSpan Budget => TimeSpan.FromSeconds(int.TryParse(Environment.GetEnvironmentVariable("PS_LOG_KILL_SECONDS"), out var s) ? s : 60);

    /// <summary>The child seals its records with this key (base64) when the variable is set.</summary>
    private const string CrashChildLogKey = "PS_CRASH_CHILD_LOG_KEY";

    private static string ChildPath => typeof(LogKillTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "CrashChildPath").Value!;

    [Fact]
    public async Task Kill_AtRandomMoments_EveryDurableRecordSurvivesWithItsBytes()
    {
        var stats = await RunAsync(dropUnflushed: false, seed: 11);
        Assert.True(stats.Kills >= Math.Min(Kills, 5), $"only {stats.Kills} kills ran");
        Assert.True(stats.ChildRecords > 0, "the child acknowledged no record: the test checked nothing");
    }

    [Fact]
    public async Task Kill_ThenDropEverythingAfterTheDurableTail_EveryDurableRecordSurvives()
    {
        var stats = await RunAsync(dropUnflushed: true, seed: 23);
        Assert.True(stats.Kills >= Math.Min(Kills, 5), $"only {stats.Kills} kills ran");
        Assert.True(stats.ChildRecords > 0, "the child acknowledged no record: the test checked nothing");
    }

    /// <summary>
    /// The same with the log's records sealed (LogOptions.Encryption, issue 32): kills, torn tails and dropped unflushed
    /// writes are found by the envelope's checksum as before, and every acknowledged record opens with its bytes; none of
    /// the payloads appears in clear in the files.
    /// </summary>
    [Fact]
    public async Task Kill_Encrypted_ThenDropEverythingAfterTheDurableTail_EveryDurableRecordSurvives_NoneInClear()
    {
        var key = Convert.ToBase64String(System.Security.Cryptography.RandomNumberGenerator.GetBytes(32));
        var stats = await RunAsync(dropUnflushed: true, seed: 37, key);
        Assert.True(stats.Kills >= Math.Min(Kills, 5), $"only {stats.Kills} kills ran");
        Assert.True(stats.ChildRecords > 0, "the child acknowledged no record: the test checked nothing");
        Assert.True(stats.ClearPayloadsSearched > 0, "no payload was searched for in the files");
    }

    private static LogOptions Options(string directory, string? key)
    {
        var options = LogTestOptions.Small(directory);
        options.Encryption.Key = key;
        return options;
    }

    private static async Task<KillStats> RunAsync(bool dropUnflushed, int seed, string? key = null)
    {
        using var dir = new TempDirectory();
        var random = new Random(seed);
        var acknowledged = new Dictionary<long, Payload>();
        var stats = new KillStats();
        var clock = Stopwatch.StartNew();
        uint ownTag = 1u << 31;

        for (var iteration = 0; iteration < Kills && clock.Elapsed < Budget; iteration++)
        {
            var lines = await RunChildUntilKilledAsync(dir.Path, TimeSpan.FromMilliseconds(random.Next(30, 1200)), key);
            stats.Kills++;
            long durableTail = 0;
            foreach (var line in lines)
            {
                var parts = line.Split(' ');
                if (parts is not ["D", var lsnText, var numberText, var durableText, "."])
                {
                    continue;
                }

                var lsn = long.Parse(lsnText, CultureInfo.InvariantCulture);
                var number = long.Parse(numberText, CultureInfo.InvariantCulture);
                durableTail = Math.Max(durableTail, long.Parse(durableText, CultureInfo.InvariantCulture));
                var payload = new Payload { Tag = (uint)number, Data = ByteString.CopyFrom(CrashPayload.For(number, MaxPayload)) };
                Assert.True(acknowledged.TryAdd(lsn, payload), $"LSN {lsn} was reported durable twice");
                stats.ChildRecords++;
            }

            if (dropUnflushed)
            {
                stats.BytesDropped += DropAfterDurableTail(dir.Path, durableTail, random);
            }

            // Reopen, check everything acknowledged so far, append more, reopen and check again.
            await using (var log = await DurableLog.OpenAsync(Options(dir.Path, key), cancellationToken: Ct))
            {
                await AssertAllPresentAsync(log, acknowledged);
                for (var i = 0; i < 5; i++)
                {
                    var payload = new Payload { Tag = ownTag++, Data = ByteString.CopyFrom(CrashPayload.For(ownTag, 200)) };
                    var lsn = log.Append(RecordKind.Payload, payload);
                    await log.WaitUntilDurableAsync(lsn, Ct);
                    acknowledged.Add(lsn, payload);
                }
            }

            await using (var log = await DurableLog.OpenAsync(Options(dir.Path, key), cancellationToken: Ct))
            {
                stats.RecordsChecked += await AssertAllPresentAsync(log, acknowledged);
            }

            if (key is not null)
            {
                stats.ClearPayloadsSearched += AssertNoPayloadInClear(dir.Path, acknowledged.Values);
            }
        }

        TestContext.Current.TestOutputHelper?.WriteLine(
            $"kills {stats.Kills}, records acknowledged by the child {stats.ChildRecords}, record checks {stats.RecordsChecked}, " +
            $"lost 0, bytes dropped after the durable tail {stats.BytesDropped}, {clock.Elapsed.TotalSeconds:F1} s");
        return stats;
    }

    private static async Task<int> AssertAllPresentAsync(DurableLog log, Dictionary<long, Payload> acknowledged)
    {
        var found = new Dictionary<long, LogRecord>();
        await foreach (var record in log.ScanAsync(log.BeginAddress, cancellationToken: Ct))
        {
            found[record.Lsn] = record;
        }

        foreach (var (lsn, payload) in acknowledged)
        {
            Assert.True(found.TryGetValue(lsn, out var record), $"acknowledged record at LSN {lsn} was lost (log durable until {log.DurableUntil})");
            Assert.Equal(RecordKind.Payload, record.Kind);
            Assert.Equal(payload, record.Parse(Payload.Parser));
        }

        return acknowledged.Count;
    }

    /// <summary>
    /// Simulates losing writes that were not flushed: cuts the segment files at a random point at or after the durable
    /// tail (what the child saw durable, and what the commit metadata recorded, which is only written after a commit).
    /// </summary>
    private static long DropAfterDurableTail(string directory, long reportedDurable, Random random)
    {
        var (metadata, _) = CommitMetadataFile.Read(Path.Combine(directory, CommitMetadataFile.FileName));
        var floor = Math.Max(reportedDurable, metadata?.CommittedUntil ?? 0);
        var segments = SegmentFiles.List(directory);
        if (segments.Count == 0 || floor == 0)
        {
            return 0;
        }

        var last = segments.Keys.Max();
        var end = ((long)last << 16) + segments[last];
        if (end <= floor)
        {
            return 0;
        }

        var cut = random.Next(3) == 0 ? floor : floor + (long)(random.NextDouble() * (end - floor));
        SegmentFiles.TruncateTail(directory, LogTestOptions.Small(directory), cut);
        return end - cut;
    }

    /// <summary>Searches the segment files for the first 32 bytes of the acknowledged payloads that have as many; returns how many were searched.</summary>
    private static int AssertNoPayloadInClear(string directory, IEnumerable<Payload> payloads)
    {
        var files = SegmentFiles.List(directory).Keys.Select(id => File.ReadAllBytes(SegmentFiles.PathOf(SegmentFiles.BasePath(directory), id))).ToList();
        var searched = 0;
        foreach (var payload in payloads.Where(p => p.Data.Length >= 32).TakeLast(50))
        {
            var probe = payload.Data.Span[..32].ToArray();
            Assert.All(files, file => Assert.Equal(-1, file.AsSpan().IndexOf(probe)));
            searched++;
        }

        return searched;
    }

    private static async Task<List<string>> RunChildUntilKilledAsync(string directory, TimeSpan lifetime, string? key)
    {
        var lines = new ConcurrentQueue<string>();
        using var process = new Process
        {
            StartInfo = new ProcessStartInfo("dotnet")
            {
                ArgumentList = { ChildPath, directory, Writers.ToString(CultureInfo.InvariantCulture), "14", "16", MaxPayload.ToString(CultureInfo.InvariantCulture) },
                RedirectStandardOutput = true,
                RedirectStandardError = true,
                UseShellExecute = false,
            },
        };
        if (key is not null)
        {
            process.StartInfo.Environment[CrashChildLogKey] = key; // the environment, as a service takes it from a Secret
        }

        var errors = new ConcurrentQueue<string>();
        process.OutputDataReceived += (_, e) =>
        {
            if (e.Data is not null)
            {
                lines.Enqueue(e.Data);
            }
        };
        process.ErrorDataReceived += (_, e) =>
        {
            if (e.Data is not null)
            {
                errors.Enqueue(e.Data);
            }
        };
        process.Start();
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        await Task.Delay(lifetime, Ct);
        if (process.HasExited)
        {
            Assert.Fail($"the child exited by itself with code {process.ExitCode}: {string.Join(Environment.NewLine, errors)}");
        }

        process.Kill(entireProcessTree: true); // SIGKILL on Linux
        await process.WaitForExitAsync(Ct);
        return [.. lines];
    }

    private sealed class KillStats
    {
        public int Kills { get; set; }

        public long ChildRecords { get; set; }

        public long RecordsChecked { get; set; }

        public long BytesDropped { get; set; }

        public int ClearPayloadsSearched { get; set; }
    }
}
