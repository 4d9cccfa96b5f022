using System.Globalization;
using System.Security.Cryptography;
using PersistentServices;

/// <summary>
/// The cost of LogOptions.Encryption on the commit path (issue 32): the durable-commit latency with one writer and the
/// durable appends/s with each writer count, for a log in clear and a sealed log, alternated in ABBA rounds (clear, sealed,
/// sealed, clear, ...) so that a shared host's drift falls on both alike; then the open of the logs the throughput runs
/// wrote (the verification walk opens every sealed record), alternated the same way.
/// </summary>
internal static class EncryptionComparison
{
    public static async Task RunAsync(string runDir, HarnessOptions options)
    {
        var key = Convert.ToBase64String(RandomNumberGenerator.GetBytes(32));
        string?[] configs = [null, key];
        static string Name(string? k) => k is null ? "clear" : "sealed";
        var latency = configs.ToDictionary(Name, _ => new List<(double P50, double P99, double Mean, double Cpu)>());
        var throughput = configs.ToDictionary(Name, _ => options.Writers.ToDictionary(w => w, _ => new List<double>()));
        var lastLogs = new Dictionary<string, string>();

        Console.WriteLine($"ABBA rounds: {options.Rounds}; a 512-byte record in clear is {512 + PersistentServices.Log.RecordEnvelope.SealedOverhead} bytes sealed (key id, salt, nonce, tag)");
        Console.WriteLine();
        Console.WriteLine("| round | log | commit p50 (ms) | p99 (ms) | mean (ms) | CPU per durable append, 1 writer (µs) | " + string.Join(" | ", options.Writers.Select(w => $"appends/s, {w} writers")) + " |");
        Console.WriteLine("|---:|---|---:|---:|---:|---:|" + string.Concat(options.Writers.Select(_ => "---:|")));
        for (var round = 0; round < options.Rounds; round++)
        {
            var order = round % 2 == 0 ? configs : [.. configs.Reverse()];
            foreach (var config in order)
            {
                var name = Name(config);
                var cell = Path.Combine(runDir, $"r{round}-{name}");
                var commit = await LogRuns.CommitLatencyAsync(Path.Combine(cell, "latency"), options.Samples, config);
                var cpu = LogRuns.LastCpuMicrosecondsPerCommit;
                latency[name].Add((commit.Latency.P50, commit.Latency.P99, commit.Latency.Mean, cpu));
                var rates = new List<double>();
                foreach (var writers in options.Writers)
                {
                    var directory = Path.Combine(cell, $"throughput-{writers}");
                    var result = await LogRuns.ThroughputAsync(directory, writers, TimeSpan.FromSeconds(options.Seconds), config);
                    throughput[name][writers].Add(result.AppendsPerSecond);
                    rates.Add(result.AppendsPerSecond);
                    if (writers == options.Writers.Max())
                    {
                        if (lastLogs.TryGetValue(name, out var previous))
                        {
                            Directory.Delete(previous, recursive: true);
                        }

                        lastLogs[name] = directory;
                    }
                    else
                    {
                        Directory.Delete(directory, recursive: true);
                    }
                }

                Directory.Delete(Path.Combine(cell, "latency"), recursive: true);
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"| {round + 1} | {name} | {commit.Latency.P50:F3} | {commit.Latency.P99:F3} | {commit.Latency.Mean:F3} | {cpu:F0} | {string.Join(" | ", rates.Select(r => r.ToString("N0", CultureInfo.InvariantCulture)))} |"));
            }
        }

        Console.WriteLine();
        Console.WriteLine("| measurement | clear (mean of rounds) | sealed (mean of rounds) | sealed / clear |");
        Console.WriteLine("|---|---:|---:|---:|");
        void Row(string what, double clear, double sealedValue, string format) => Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"| {what} | {clear.ToString(format, CultureInfo.InvariantCulture)} | {sealedValue.ToString(format, CultureInfo.InvariantCulture)} | {sealedValue / clear:F3} |"));
        Row("commit p50 (ms), 1 writer", latency["clear"].Average(l => l.P50), latency["sealed"].Average(l => l.P50), "F3");
        Row("commit p99 (ms), 1 writer", latency["clear"].Average(l => l.P99), latency["sealed"].Average(l => l.P99), "F3");
        Row("commit mean (ms), 1 writer", latency["clear"].Average(l => l.Mean), latency["sealed"].Average(l => l.Mean), "F3");
        Row("CPU per durable append (µs), 1 writer", latency["clear"].Average(l => l.Cpu), latency["sealed"].Average(l => l.Cpu), "F1");
        foreach (var writers in options.Writers)
        {
            Row($"durable appends/s, {writers} writers", throughput["clear"][writers].Average(), throughput["sealed"][writers].Average(), "N0");
        }

        // The open of the last round's largest logs: the verification walk (CRC of every record; for the sealed log, every
        // tag checked and every body opened), alternated, three times each.
        Console.WriteLine();
        Console.WriteLine("| open (verification walk) | records | log bytes | ms (3 opens, ABBA) | records/s (mean) |");
        Console.WriteLine("|---|---:|---:|---|---:|");
        var opens = configs.ToDictionary(Name, _ => new List<(double Ms, long Records, long Bytes)>());
        for (var i = 0; i < 3; i++)
        {
            foreach (var config in i % 2 == 0 ? configs : [.. configs.Reverse()])
            {
                opens[Name(config)].Add(await LogRuns.OpenAsync(lastLogs[Name(config)], config));
            }
        }

        foreach (var (name, runs) in opens)
        {
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"| {name} | {runs[0].Records:N0} | {runs[0].Bytes:N0} | {string.Join(" / ", runs.Select(r => r.Ms.ToString("F0", CultureInfo.InvariantCulture)))} | {runs.Average(r => r.Records / (r.Ms / 1000)):N0} |"));
        }
    }
}
