using System.Diagnostics;
using System.Globalization;
using Bookstore.Buyer;

namespace Bookstore.Launcher;

/// <summary>
/// Reproduces [Phoenix/App Table 8] in one run: for each configuration a–d a fresh deployment (fresh logs), warm-up
/// loops, then measured loops: the elapsed time per buyer loop and, from each service's force counter, the log forces
/// per loop (what requests asked for, as the paper counts) and the physical commits. Configurations are interleaved
/// over rounds (a b c d a b c d …) so a loaded machine disturbs them alike; the median time is reported. Prints
/// markdown for docs/benchmarks.md.
/// </summary>
internal static class Table8Command
{
    public static async Task<int> RunAsync(LauncherOptions options)
    {
        Console.WriteLine($"# Table 8 reproduction: {options.Stores} stores, {options.Warmup} warm-up + {options.Loops} measured loops per configuration, {options.Rounds} rounds interleaved");
        Console.WriteLine($"- machine: {Environment.ProcessorCount} cores, {System.Runtime.InteropServices.RuntimeInformation.OSDescription}, .NET {Environment.Version}");
        Console.WriteLine();
        var samples = LoggingConfiguration.All.ToDictionary(c => c.Key, _ => new List<Sample>());
        for (var round = 1; round <= options.Rounds; round++)
        {
            foreach (var configuration in LoggingConfiguration.All)
            {
                var sample = await MeasureAsync(configuration, options);
                samples[configuration.Key].Add(sample);
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"round {round} {configuration.Key}: {sample.MillisecondsPerLoop:0.0} ms/loop ({sample.CpuMillisecondsPerLoop:0.0} ms CPU), {sample.Forces.Values.Sum() / (double)options.Loops:0.00} forces/loop, {sample.Commits / (double)options.Loops:0.00} commits/loop"));
            }
        }

        Console.WriteLine();
        Console.WriteLine("| configuration | paper: elapsed | paper: forces | ours: elapsed per loop, median (min–max) | ours: CPU per loop, all processes, median | ours: log forces per loop | ours: physical commits per loop |");
        Console.WriteLine("|---|---:|---:|---:|---:|---:|---:|");
        foreach (var configuration in LoggingConfiguration.All)
        {
            var list = samples[configuration.Key];
            var times = list.Select(s => s.MillisecondsPerLoop).Order().ToList();
            var forces = list.Select(s => s.Forces.Values.Sum() / (double)options.Loops).Distinct().ToList();
            var commits = list.Select(s => s.Commits / (double)options.Loops).ToList();
            var cpu = list.Select(s => s.CpuMillisecondsPerLoop).Order().ToList();
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"| ({configuration.Key}) {configuration.Title} | {(configuration.PaperMilliseconds is { } ms ? ms + " ms" : "—")} | {(configuration.PaperForces is { } f ? f.ToString(CultureInfo.InvariantCulture) : "—")} | {times[times.Count / 2]:0.0} ms ({times[0]:0.0}–{times[^1]:0.0}) | {cpu[cpu.Count / 2]:0.0} ms | {string.Join(" / ", forces.Select(f => f.ToString("0.##", CultureInfo.InvariantCulture)))} | {commits.Average():0.0} |"));
        }

        Console.WriteLine();
        var services = samples["a"][0].Forces.Keys.ToList();
        Console.WriteLine($"| log forces per loop, by service | {string.Join(" | ", services)} |");
        Console.WriteLine($"|---|{string.Concat(services.Select(_ => "---:|"))}");
        foreach (var configuration in LoggingConfiguration.All)
        {
            var first = samples[configuration.Key][0];
            Console.WriteLine($"| ({configuration.Key}) | {string.Join(" | ", services.Select(s => (first.Forces[s] / (double)options.Loops).ToString("0.##", CultureInfo.InvariantCulture)))} |");
        }

        return 0;
    }

    private static async Task<Sample> MeasureAsync(LoggingConfiguration configuration, LauncherOptions options)
    {
        var root = Path.Combine(Path.GetTempPath(), $"bookstore-table8-{configuration.Key}-{Environment.ProcessId.ToString(CultureInfo.InvariantCulture)}");
        if (Directory.Exists(root))
        {
            Directory.Delete(root, recursive: true);
        }

        var deployment = await Deployment.StartAsync(root, options.Stores, configuration, e => Console.Error.WriteLine(e), CancellationToken.None);
        try
        {
            using var priceGrabber = new SessionClient("pricegrabber", deployment.PriceGrabber.Url);
            using var seller = new SessionClient("bookseller", deployment.Seller.Url);
            var buyer = new BookBuyer(priceGrabber, seller, [.. deployment.Stores.Select(s => s.Name)]);
            await buyer.StartAsync(CancellationToken.None);
            for (var i = 0; i < options.Warmup; i++)
            {
                await buyer.RunLoopAsync(_ => { }, CancellationToken.None);
            }

            var before = await deployment.ReadForcesAsync(CancellationToken.None);
            var cpuBefore = Cpu(deployment);
            var clock = Stopwatch.StartNew();
            for (var i = 0; i < options.Loops; i++)
            {
                await buyer.RunLoopAsync(_ => { }, CancellationToken.None);
            }

            var elapsed = clock.Elapsed;
            var cpu = Cpu(deployment) - cpuBefore;
            var after = await deployment.ReadForcesAsync(CancellationToken.None);
            if (buyer.Surprises > 0 || buyer.Retries > 0)
            {
                throw new InvalidOperationException($"configuration {configuration.Key}: {buyer.Surprises} contradicting replies, {buyer.Retries} resends (the measurement needs a quiet run)");
            }

            return new Sample(
                elapsed.TotalMilliseconds / options.Loops,
                cpu.TotalMilliseconds / options.Loops,
                after.Zip(before, (a, b) => (a.Service, Forces: a.TotalForces - b.TotalForces)).ToDictionary(x => x.Service, x => x.Forces),
                after.Sum(a => a.Commits) - before.Sum(b => b.Commits));
        }
        finally
        {
            await deployment.StopAsync();
            Directory.Delete(root, recursive: true);
        }
    }

    /// <summary>CPU time of every service process and of this one (the buyer): the cost of a loop, whatever else loads the machine.</summary>
    private static TimeSpan Cpu(Deployment deployment)
    {
        using var self = Process.GetCurrentProcess();
        return deployment.Services.Aggregate(self.TotalProcessorTime, (sum, s) => sum + s.ProcessorTime);
    }

    private sealed record Sample(double MillisecondsPerLoop, double CpuMillisecondsPerLoop, Dictionary<string, long> Forces, long Commits);
}
