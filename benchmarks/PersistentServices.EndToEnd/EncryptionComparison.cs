using System.Globalization;
using System.Security.Cryptography;

namespace PersistentServices.EndToEnd;

/// <summary>
/// The cost of LogOptions.Encryption end to end (issue 32): one in-process server whose log is in clear and one whose log
/// is encrypted, the same [Persistent] endpoint, the same clients; the two alternate in ABBA rounds (clear, sealed, sealed,
/// clear, ...) for each number of sessions, so that the drift of a shared host and of the thread pool falls on both.
/// </summary>
internal static class EncryptionComparison
{
    public static async Task RunAsync(int seconds, int[] sessionCounts, int rounds)
    {
        var root = Path.Combine(Path.GetTempPath(), "ps-e2e-encryption-" + Guid.NewGuid().ToString("N")[..8]);
        try
        {
            await RunAsync(root, seconds, sessionCounts, rounds);
        }
        finally
        {
            Directory.Delete(root, recursive: true);
        }
    }

    private static async Task RunAsync(string root, int seconds, int[] sessionCounts, int rounds)
    {
        var key = Convert.ToBase64String(RandomNumberGenerator.GetBytes(32));
        await using var clear = await BenchServer.StartAsync(Path.Combine(root, "clear"));
        await using var sealedServer = await BenchServer.StartAsync(Path.Combine(root, "sealed"), encryptionKey: key);
        var servers = new[] { ("clear", clear), ("sealed", sealedServer) };
        Console.WriteLine($"- servers: two in-process Kestrel servers ({clear.BaseAddress}, log in clear; {sealedServer.BaseAddress}, log sealed with key " +
                          $"{sealedServer.Runtime.Log.EncryptionKeyId}), logs under {root}; clients in the same process; {rounds} ABBA rounds of {seconds} s per cell after a 2 s warm-up each");
        Console.WriteLine();
        Console.WriteLine("| sessions | round | log | requests/s | p50 (ms) | p99 (ms) | CPU per request (µs) | log bytes per request | log forces per request |");
        Console.WriteLine("|---:|---:|---|---:|---:|---:|---:|---:|---:|");
        var summary = new List<string>();
        foreach (var sessions in sessionCounts)
        {
            foreach (var (_, server) in servers)
            {
                await LoadRun.RunAsync(server, "persistent", sessions, TimeSpan.FromSeconds(2)); // warm both first
            }

            var results = servers.ToDictionary(s => s.Item1, _ => new List<LoadResult>());
            for (var round = 0; round < rounds; round++)
            {
                foreach (var (name, server) in round % 2 == 0 ? servers : [.. servers.Reverse()])
                {
                    var result = await LoadRun.RunAsync(server, "persistent", sessions, TimeSpan.FromSeconds(seconds));
                    results[name].Add(result);
                    Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                        $"| {sessions} | {round + 1} | {name} | {result.RequestsPerSecond:N0} | {result.P50:F3} | {result.P99:F3} | {result.CpuMicrosecondsPerRequest:F1} | {result.LogBytesPerRequest:N0} | {result.ForcesPerRequest:F3} |"));
                }
            }

            double Mean(string name, Func<LoadResult, double> f) => results[name].Average(f);
            summary.Add(string.Create(CultureInfo.InvariantCulture,
                $"| {sessions} | {Mean("clear", r => r.RequestsPerSecond):N0} | {Mean("sealed", r => r.RequestsPerSecond):N0} | {Mean("sealed", r => r.RequestsPerSecond) / Mean("clear", r => r.RequestsPerSecond):F3} | " +
                $"{Mean("clear", r => r.P50):F3} / {Mean("sealed", r => r.P50):F3} | {Mean("clear", r => r.CpuMicrosecondsPerRequest):F1} / {Mean("sealed", r => r.CpuMicrosecondsPerRequest):F1} | " +
                $"{Mean("sealed", r => r.CpuMicrosecondsPerRequest) / Mean("clear", r => r.CpuMicrosecondsPerRequest):F3} | {Mean("clear", r => r.LogBytesPerRequest):N0} / {Mean("sealed", r => r.LogBytesPerRequest):N0} |"));
        }

        Console.WriteLine();
        Console.WriteLine("| sessions | clear requests/s (mean) | sealed requests/s (mean) | sealed / clear | p50 clear / sealed (ms) | CPU per request clear / sealed (µs) | CPU sealed / clear | log bytes per request clear / sealed |");
        Console.WriteLine("|---:|---:|---:|---:|---|---|---:|---|");
        summary.ForEach(Console.WriteLine);
    }
}
