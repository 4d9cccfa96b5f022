using System.Collections.Concurrent;
using System.Diagnostics;
using System.Globalization;
using System.Reflection;
using System.Text.RegularExpressions;

namespace PersistentServices.CrashTests;

/// <summary>
/// Runs ps-crash-harness (a child process) against the sample service: the harness SIGKILLs and restarts the sample
/// again and again while 8 client sessions send persistent requests, then checks from the client side that every
/// acknowledged operation executed exactly once (counter scenario: session state) and that the shared inventory follows
/// one serial order (inventory scenario: shared state). Kills per scenario: PS_CRASH_KILLS (default 100) within
/// PS_CRASH_SECONDS (default 420).
/// </summary>
[Trait("Category", "Crash")]
public sealed partial class CrashHarnessTests
{
    private static int Kills => FromEnvironment("PS_CRASH_KILLS", 100);

    private static int Seconds => FromEnvironment("PS_CRASH_SECONDS", 420);

    private static string HarnessPath => Metadata("HarnessPath");

    private static string SamplePath => Metadata("SamplePath");

    [Fact]
    public async Task Sample_KilledRepeatedly_EveryAcknowledgedOpExecutedExactlyOnce()
    {
        var run = await RunHarnessAsync(
            ["--kills", Invariant(Kills), "--max-seconds", Invariant(Seconds), "--sessions", "8"],
            TimeSpan.FromSeconds(Seconds + 120));

        AssertPassed(run);
    }

    [Fact]
    public async Task SharedInventory_KilledRepeatedly_AcknowledgedRepliesAndStateFollowOneSerialOrder()
    {
        // 8 sessions adjust 4 shared SKUs (shared variables) while the service is SIGKILLed; after every recovery nothing
        // acknowledged may be missing, and at the end every acknowledged reply and the final stock must be explained by
        // one serial order of the acknowledged requests (ticket order).
        var run = await RunHarnessAsync(
            ["--scenario", "inventory", "--kills", Invariant(Kills), "--max-seconds", Invariant(Seconds), "--sessions", "8"],
            TimeSpan.FromSeconds(Seconds + 120));

        AssertPassed(run);
    }

    [Fact]
    public async Task Harness_SharedInventoryOnAnEmptyLog_ReportsLostAdjustments()
    {
        var run = await RunHarnessAsync(
            ["--scenario", "inventory", "--kills", "2", "--max-seconds", "120", "--sessions", "2", "--min-uptime-ms", "1000", "--max-uptime-ms", "1500", "--fresh-log-each-restart"],
            TimeSpan.FromSeconds(240));

        Assert.Equal(1, run.ExitCode);
        Assert.True(run.Lost > 0 || run.Violations > 0, "the serial-order checker did not notice that the service forgot acknowledged adjustments");
    }

    private static void AssertPassed(HarnessRun run)
    {
        // The failure message carries the harness's own findings, so a CI log shows what went wrong, not only counts.
        var findings = string.Join(Environment.NewLine, run.Output
            .Where(l => l.StartsWith("VIOLATION ", StringComparison.Ordinal) || l.Contains("LOST", StringComparison.Ordinal) || l.Contains("DUPLICATED", StringComparison.Ordinal))
            .Take(20));
        Assert.True(run.Lost == 0 && run.Duplicated == 0 && run.Violations == 0,
            $"lost {run.Lost}, duplicated {run.Duplicated}, violations {run.Violations}:{Environment.NewLine}{findings}");
        Assert.Equal(0, run.ExitCode);
        Assert.True(run.Acknowledged > 0, "no operation was acknowledged: the test checked nothing");
        if (run.StoppedOnTimeBound)
        {
            // Slow machine: fewer kills fit, but never so few that the test passes vacuously.
            Assert.True(run.Kills >= Math.Min(Kills, 50), $"the time bound stopped the harness after only {run.Kills} kills");
        }
        else
        {
            Assert.True(run.Kills >= Kills, $"only {run.Kills} of {Kills} kills ran");
        }
    }

    [Fact]
    public async Task Harness_ServiceRestartsOnAnEmptyLog_ReportsLostOps()
    {
        // The self-test: a service that forgets everything on restart must make the harness fail.
        var run = await RunHarnessAsync(
            ["--kills", "3", "--max-seconds", "120", "--sessions", "2", "--min-uptime-ms", "2500", "--max-uptime-ms", "3500", "--fresh-log-each-restart"],
            TimeSpan.FromSeconds(240));

        Assert.Equal(1, run.ExitCode);
        Assert.True(run.Kills >= 1, "no kill ran");

        // Forgetting shows either as acknowledged ops missing from the final state or, when the restart forgot the
        // session itself (on a slow machine possibly before any op was acknowledged), as an established session
        // answered "session not found". Both must be reported.
        var forgotSession = run.Output.Any(l => l.StartsWith("VIOLATION ", StringComparison.Ordinal) && l.Contains("session-not-found", StringComparison.Ordinal));
        Assert.True(run.Lost > 0 || forgotSession, "the harness did not notice that the service forgot acknowledged operations or sessions");
    }

    private static async Task<HarnessRun> RunHarnessAsync(string[] arguments, TimeSpan timeout)
    {
        Assert.True(File.Exists(HarnessPath), $"harness not built: {HarnessPath}");
        Assert.True(File.Exists(SamplePath), $"sample not built: {SamplePath}");
        var output = new ConcurrentQueue<string>();
        using var process = new Process
        {
            StartInfo = new ProcessStartInfo("dotnet")
            {
                // The sample's own directory, so it finds its appsettings.json (content root = working directory).
                WorkingDirectory = Path.GetDirectoryName(SamplePath)!,
                RedirectStandardOutput = true,
                RedirectStandardError = true,
                UseShellExecute = false,
            },
        };
        foreach (var argument in (string[])[HarnessPath, "--service", "dotnet", "--service-args", $"\"{SamplePath}\"", .. arguments])
        {
            process.StartInfo.ArgumentList.Add(argument);
        }

        process.OutputDataReceived += (_, e) =>
        {
            if (e.Data is not null)
            {
                output.Enqueue(e.Data);
            }
        };
        process.ErrorDataReceived += (_, e) =>
        {
            if (e.Data is not null)
            {
                output.Enqueue($"stderr: {e.Data}");
            }
        };

        var clock = Stopwatch.StartNew();
        process.Start();
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        using var bound = CancellationTokenSource.CreateLinkedTokenSource(TestContext.Current.CancellationToken);
        bound.CancelAfter(timeout);
        var timedOut = false;
        try
        {
            await process.WaitForExitAsync(bound.Token);
        }
        catch (OperationCanceledException)
        {
            timedOut = true;
            process.Kill(entireProcessTree: true); // the harness and the service it runs
            await process.WaitForExitAsync(CancellationToken.None);
        }

        var lines = output.ToList();
        var log = TestContext.Current.TestOutputHelper;
        log?.WriteLine($"dotnet {string.Join(' ', process.StartInfo.ArgumentList)}");
        foreach (var line in lines)
        {
            log?.WriteLine(line);
        }

        log?.WriteLine($"harness exit code {process.ExitCode}, {clock.Elapsed.TotalSeconds:F1} s");
        Assert.False(timedOut, $"the harness did not finish within {timeout.TotalSeconds:F0} s");

        var result = lines.LastOrDefault(l => l.StartsWith("RESULT ", StringComparison.Ordinal));
        Assert.NotNull(result);
        var match = ResultLine().Match(result);
        Assert.True(match.Success, $"malformed result line: {result}");
        return new HarnessRun(
            process.ExitCode,
            Parse(match, "kills"),
            Parse(match, "acknowledged"),
            Parse(match, "lost"),
            Parse(match, "duplicated"),
            Parse(match, "violations"),
            lines.Contains("stop reason: time bound"),
            lines);
    }

    private static long Parse(Match match, string group) => long.Parse(match.Groups[group].Value, CultureInfo.InvariantCulture);

    private static string Invariant(int value) => value.ToString(CultureInfo.InvariantCulture);

    private static int FromEnvironment(string name, int fallback)
        => int.TryParse(Environment.GetEnvironmentVariable(name), NumberStyles.None, CultureInfo.InvariantCulture, out var value) && value > 0 ? value : fallback;

    private static string Metadata(string key)
        => typeof(CrashHarnessTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == key).Value!;

    [GeneratedRegex(@"^RESULT kills=(?<kills>\d+) acknowledged=(?<acknowledged>\d+) lost=(?<lost>\d+) duplicated=(?<duplicated>\d+) violations=(?<violations>\d+)$")]
    private static partial Regex ResultLine();

    private sealed record HarnessRun(int ExitCode, long Kills, long Acknowledged, long Lost, long Duplicated, long Violations, bool StoppedOnTimeBound,
        IReadOnlyList<string> Output);
}
