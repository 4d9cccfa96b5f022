using System.Globalization;

[assembly: CollectionBehavior(DisableTestParallelization = true)]

namespace PersistentServices.Bookstore.Tests;

/// <summary>
/// The bookstore sample's one command end to end (six service processes on loopback, the buyer's loops, the
/// reconciliation with what the buyer was told). The crash test SIGKILLs one service at a time, at random, for
/// <c>BOOKSTORE_CRASH_SECONDS</c> (default 45) of buyer loops, in logging configuration <c>BOOKSTORE_CRASH_CONFIG</c>
/// (default d; a, b, c as in the sample's README).
/// </summary>
public sealed class BookstoreTests
{
    private static string CrashConfig => Environment.GetEnvironmentVariable("BOOKSTORE_CRASH_CONFIG") is { Length: 1 } c ? c : "d";

    private static int CrashSeconds => int.TryParse(Environment.GetEnvironmentVariable("BOOKSTORE_CRASH_SECONDS"), NumberStyles.None, CultureInfo.InvariantCulture, out var s) && s > 0 ? s : 45;

    [Fact]
    [Trait("Category", "Process")]
    public async Task Run_WithoutKills_ReconcilesAndStopsEveryService()
    {
        var run = await BookstoreRun.RunAsync(["--loops", "5"], TimeSpan.FromMinutes(3));

        Assert.Equal(0, run.ExitCode);
        Assert.Equal(5, run["loops"]);
        Assert.Equal(0, run["mismatches"]);
        Assert.Equal(0, run["duplicates"]);
        Assert.Equal(5 * 6, run["store_executions"]);  // 3 reserves and 3 releases per loop
        Assert.Equal(5 * 4, run["seller_executions"]); // 3 adds and 1 empty per loop
        Assert.Equal(6, run.ServicePids.Count);
        Assert.Empty(run.LiveServices());
        Assert.Contains(run.Output, l => l.StartsWith("log forces per loop (configuration d): 14.0 ", StringComparison.Ordinal));
    }

    [Fact]
    [Trait("Category", "Crash")]
    public async Task Run_RandomServiceKilledDuringLoops_StateReconcilesAndNoCallRunsTwice()
    {
        var seed = Environment.TickCount & 0xFFFF;
        var run = await BookstoreRun.RunAsync(
            ["--chaos", "--chaos-interval", "0.3-2.5", "--seconds", CrashSeconds.ToString(CultureInfo.InvariantCulture), "--seed", seed.ToString(CultureInfo.InvariantCulture), "--config", CrashConfig],
            TimeSpan.FromSeconds(CrashSeconds + 150));

        Assert.True(run.Result.Count > 0, "no RESULT line");
        Assert.Equal(0, run["mismatches"]);
        Assert.Equal(0, run["duplicates"]);
        Assert.Equal(0, run.ExitCode);
        Assert.True(run["kills"] >= 3, $"only {run["kills"]} kills (seed {seed})");
        Assert.True(run["loops"] >= 1, $"no loop finished (seed {seed})");
        Assert.Equal(run["kills"], run["restarts"]);
        Assert.Empty(run.LiveServices());
    }

    [Fact]
    [Trait("Category", "Crash")]
    public async Task Run_EveryServiceUpgradedInTurnUnderLoad_StateReconcilesAndPlainClientErrorsAreCounted()
    {
        // --upgrade: each service stopped gracefully (drain) and started as the next build, whose /basket/add replies carry
        // a field the first build's do not; the log is carried over. Without a gateway a client that never retries sees
        // the restarts (connection refused): --plain-clients counts them, the run still reconciles exactly.
        var run = await BookstoreRun.RunAsync(["--upgrade", "--plain-clients", "--seconds", "20"], TimeSpan.FromMinutes(4));

        Assert.True(run.Result.Count > 0, "no RESULT line");
        Assert.Equal(0, run["mismatches"]);
        Assert.Equal(0, run["duplicates"]);
        Assert.Equal(0, run.ExitCode);
        Assert.True(run["upgrades"] >= 3, $"only {run["upgrades"]} upgrades");
        Assert.Equal(0, run["restarts"]);
        Assert.True(run.Result.ContainsKey("client_errors"), "no client_errors count");
        Assert.Contains(run.Output, l => l.StartsWith("latency: ", StringComparison.Ordinal));
        Assert.Empty(run.LiveServices());
    }

    [Fact]
    [Trait("Category", "Crash")]
    public async Task Run_ThroughTheGateway_KillsAndUpgradesUnderEightBuyers_PlainClientsSeeNoError()
    {
        // --gateway: the buyers reach PriceGrabber and BookSeller through ps-gateway, which holds each request while its
        // service restarts (a kill or an upgrade) and resends it with its identity. A client that never retries must see
        // no error, and nothing may be lost or run twice.
        var seed = Environment.TickCount & 0xFFFF;
        var run = await BookstoreRun.RunAsync(
            ["--gateway", "--plain-clients", "--buyers", "8", "--chaos", "--chaos-interval", "1-3", "--upgrade", "--seconds", "30", "--seed", seed.ToString(CultureInfo.InvariantCulture)],
            TimeSpan.FromMinutes(5));

        Assert.True(run.Result.Count > 0, "no RESULT line");
        Assert.Equal(0, run["mismatches"]);
        Assert.Equal(0, run["duplicates"]);
        Assert.Equal(0, run["client_errors"]);
        Assert.Equal(0, run.ExitCode);
        Assert.True(run["kills"] + run["upgrades"] >= 2, $"only {run["kills"]} kills and {run["upgrades"]} upgrades (seed {seed})");
        Assert.True(run["loops"] >= 1, $"no loop finished (seed {seed})");
        Assert.Empty(run.LiveServices());
    }

    [Fact]
    [Trait("Category", "Crash")]
    public async Task Run_WithTwoReplicasPerService_PrimariesKilledAndTheirLogsDeleted_FailoversLoseNothingAndPlainClientsSeeNoError()
    {
        // --replicas 2: the store and BookSeller each a primary and two replicas (Raft failover); --chaos kills primaries,
        // --lose-node deletes a killed primary's log directory before it comes back as a replica. The buyer goes through the
        // gateway (which follows BookSeller's primary), BookSeller's calls follow the store's: a client that never retries
        // sees no error, and the reconciliation finds every acknowledged request executed exactly once. One store keeps the
        // run to eight processes (about 60-80 s on the shared 2-core machine).
        var seed = Environment.TickCount & 0xFFFF;
        var run = await BookstoreRun.RunAsync(
            ["--replicas", "2", "--stores", "1", "--chaos", "--chaos-interval", "0.5-2", "--lose-node", "--gateway", "--plain-clients", "--seconds", "30",
             "--seed", seed.ToString(CultureInfo.InvariantCulture)],
            TimeSpan.FromMinutes(3));

        Assert.True(run.Result.Count > 0, "no RESULT line");
        Assert.Equal(0, run["mismatches"]);
        Assert.Equal(0, run["duplicates"]);
        Assert.Equal(0, run["client_errors"]);
        Assert.Equal(0, run.ExitCode);
        Assert.Equal(2, run["replicas"]);
        Assert.True(run["failovers"] >= 3, $"only {run["failovers"]} failovers (seed {seed})");
        Assert.True(run["failovers"] >= run["kills"], $"{run["kills"]} primaries killed, {run["failovers"]} failovers (seed {seed})");
        Assert.True(run["lost_nodes"] >= 1, $"no node came back with its log deleted (seed {seed})");
        Assert.True(run["loops"] >= 1, $"no loop finished (seed {seed})");
        Assert.Empty(run.LiveServices());
    }

    [Fact]
    [Trait("Category", "Crash")]
    public async Task Run_WithTwoReplicasPerService_ARollingUpgradeBySwitchover_ToBuildsWhoseRepliesDiffer_PlainClientsSeeNoError()
    {
        // --replicas 2 --upgrade: each group upgraded as docs/upgrades.md says, its replicas first, then its primary, whose
        // SIGTERM hands the role to an upgraded replica (a switchover that checkpoints every session first). BookSeller's
        // build 2 adds a field to /basket/add replies, so a new primary that replayed the old build's requests would diverge.
        // Eight upgrades reach BookSeller's primary (store-1's three nodes, PriceGrabber, TaxCalculator, BookSeller's three);
        // through the gateway a client that never retries sees no error, and everything acknowledged ran exactly once.
        var run = await BookstoreRun.RunAsync(
            ["--replicas", "2", "--stores", "1", "--upgrade", "--gateway", "--plain-clients", "--seconds", "60"],
            TimeSpan.FromMinutes(4));

        Assert.True(run.Result.Count > 0, "no RESULT line");
        Assert.Equal(0, run["mismatches"]);
        Assert.Equal(0, run["duplicates"]);
        Assert.Equal(0, run["client_errors"]);
        Assert.Equal(0, run.ExitCode);
        Assert.True(run["upgrades"] >= 8, $"only {run["upgrades"]} upgrades: BookSeller's primary was not reached");
        Assert.True(run["failovers"] >= 2, $"only {run["failovers"]} switchovers: not every group's primary handed over");
        Assert.Contains(run.Output, line => line.Contains("replies came from builds 1, 2", StringComparison.Ordinal));
        Assert.Empty(run.LiveServices());
    }

    [Fact]
    [Trait("Category", "Crash")]
    public async Task Run_ServicesRestartWithTheirLogDeleted_ReconciliationReportsMismatches()
    {
        // The checker itself: services that forget (their log deleted at each restart) must be noticed.
        var run = await BookstoreRun.RunAsync(
            ["--chaos", "--chaos-interval", "1-2", "--seconds", "12", "--seed", "7", "--wipe-on-restart"],
            TimeSpan.FromMinutes(3));

        Assert.True(run["kills"] >= 1);
        Assert.True(run["mismatches"] > 0, "the reconciliation did not notice services that forgot what they had acknowledged");
        Assert.Equal(3, run.ExitCode);
        Assert.Empty(run.LiveServices());
    }
}
