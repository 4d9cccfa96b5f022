using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Reflection;
using System.Text;
using PersistentServices.Tool.Tests.TestSupport;

namespace PersistentServices.Tool.Tests;

/// <summary>
/// Damage from outside, tested the way issue 15 found it: a real service (the sample, or the app at PS_DAMAGE_APP: any app
/// serving the sample's <c>/counter</c> endpoints and <c>/health/ready</c>) takes deposits from four client sessions and is
/// killed with SIGKILL once every deposit was acknowledged (with PS_DAMAGE_UNDER_LOAD=1: while deposits are in flight);
/// then, on copies of its log directory, one damage of a random kind at a random position each, <c>psctl verify</c>, and a
/// restart. Every trial must end in one of two outcomes: the service refuses to start, exiting with code 70 after one clear
/// log message (and verify agrees), or it serves exactly the acknowledged state (and verify agrees). Never a third.
/// Trials: PS_DAMAGE_TRIALS (default 14, two of each kind) within PS_DAMAGE_SECONDS (default 180); PS_DAMAGE_SEED.
/// </summary>
[Trait("Category", "Crash")]
public sealed class OutsideDamageTests
{
    private const int Sessions = 4;
    private const int TrialsPerRound = 7;
    private static readonly DamageKind[] Kinds = Enum.GetValues<DamageKind>();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static int Trials => int.TryParse(Environment.GetEnvironmentVariable("PS_DAMAGE_TRIALS"), out var n) ? n : 14;

    private static TimeSpan Budget => TimeSpan.FromSeconds(int.TryParse(Environment.GetEnvironmentVariable("PS_DAMAGE_SECONDS"), out var s) ? s : 180);

    private static bool UnderLoad => Environment.GetEnvironmentVariable("PS_DAMAGE_UNDER_LOAD") == "1";

    private static string AppPath => Environment.GetEnvironmentVariable("PS_DAMAGE_APP") is { Length: > 0 } app
        ? app
        : typeof(OutsideDamageTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "SamplePath").Value!;

    [Fact]
    public async Task DamageFromOutside_RandomKindsAndPositions_RefusedWithExitCode70OrServesExactlyTheAcknowledgedState()
    {
        var seed = int.TryParse(Environment.GetEnvironmentVariable("PS_DAMAGE_SEED"), out var fixedSeed) ? fixedSeed : Environment.TickCount;
        var random = new Random(seed);
        using var root = new TempDirectory();
        using var client = new HttpClient { Timeout = TimeSpan.FromSeconds(15) };
        var clock = Stopwatch.StartNew();
        var outcomes = Kinds.ToDictionary(k => k, _ => new int[3]);
        var third = new List<string>();
        var trial = 0;
        var round = 0;
        long acknowledgedOps = 0;
        while (trial < Trials && clock.Elapsed < Budget)
        {
            var pristine = Path.Combine(root.Path, $"round-{round++}");
            var state = await DepositThenKillAsync(client, pristine, random);
            acknowledgedOps += state.Sum(s => s.Acknowledged.Count);
            for (var k = 0; k < TrialsPerRound && trial < Trials && clock.Elapsed < Budget; k++, trial++)
            {
                var kind = Kinds[trial % Kinds.Length];
                var directory = Path.Combine(root.Path, $"trial-{trial}");
                CopyDirectory(pristine, directory);
                var damage = OutsideDamage.Apply(kind, directory, random);

                var report = new StringWriter();
                var verify = Cli.Run(["verify", directory], report, report);
                var (outcome, detail) = await RestartAndCheckAsync(client, directory, state);
                var agrees = (outcome, verify) is (Outcome.Refused, Cli.Refused) or (Outcome.Served, Cli.Clean);
                if (outcome == Outcome.Third || !agrees)
                {
                    outcome = Outcome.Third;
                    third.Add($"trial {trial} ({kind}: {damage}): {detail}; psctl verify exited {verify}:{Environment.NewLine}{report}");
                }

                outcomes[kind][(int)outcome]++;
                TestContext.Current.TestOutputHelper?.WriteLine($"trial {trial}: {kind}: {damage} -> {outcome} (verify {verify}); {detail}");
                Directory.Delete(directory, recursive: true);
            }
        }

        var table = new StringBuilder();
        table.AppendLine(CultureInfo.InvariantCulture, $"seed {seed}, {trial} trials in {clock.Elapsed.TotalSeconds:F0} s, {round} services killed {(UnderLoad ? "under load" : "after the last acknowledgement")}, {acknowledgedOps} deposits acknowledged, app {Path.GetFileName(AppPath)}");
        table.AppendLine("| damage | trials | refused, exit 70 | served the acknowledged state | third outcome |");
        table.AppendLine("|---|---:|---:|---:|---:|");
        foreach (var (kind, counts) in outcomes)
        {
            table.AppendLine(CultureInfo.InvariantCulture, $"| {kind} | {counts.Sum()} | {counts[0]} | {counts[1]} | {counts[2]} |");
        }

        TestContext.Current.TestOutputHelper?.WriteLine(table.ToString());
        Assert.True(trial >= Math.Min(Trials, Kinds.Length), $"only {trial} trials ran");
        Assert.True(third.Count == 0, $"{third.Count} trials ended in a third outcome:{Environment.NewLine}{string.Join(Environment.NewLine, third)}{Environment.NewLine}{table}");
    }

    /// <summary>Starts a fresh service, makes deposits from four sessions, kills it (SIGKILL); returns what was acknowledged.</summary>
    private static async Task<List<ClientSession>> DepositThenKillAsync(HttpClient client, string directory, Random random)
    {
        await using var service = ServiceProcess.Start(AppPath, directory);
        Assert.True(await service.WaitReadyOrExitAsync(client, TimeSpan.FromSeconds(60), Ct), $"the service did not start:{Environment.NewLine}{string.Join(Environment.NewLine, service.Output)}");
        var sessions = new List<ClientSession>();
        for (var i = 0; i < Sessions; i++)
        {
            using var response = await client.PostAsync(new Uri(service.BaseAddress, "/ps/sessions"), null, Ct);
            response.EnsureSuccessStatusCode();
            var started = await response.Content.ReadFromJsonAsync<SessionReply>(Ct);
            // Under load the sessions deposit until the service is killed; otherwise a few dozen deposits each, all acknowledged.
            sessions.Add(new ClientSession(started!.SessionId, UnderLoad ? int.MaxValue : random.Next(5, 60), tolerateFailure: UnderLoad));
        }

        using var stop = new CancellationTokenSource();
        var seeds = sessions.Select(_ => random.Next()).ToArray();
        var deposits = sessions.Select((session, i) => Task.Run(() => session.DepositAsync(client, service.BaseAddress, new Random(seeds[i]), stop.Token))).ToArray();
        if (UnderLoad)
        {
            await Task.Delay(random.Next(100, 800), Ct);
            await service.KillAsync();
            await stop.CancelAsync();
        }

        await Task.WhenAll(deposits);
        await service.KillAsync();
        return sessions;
    }

    private static async Task<(Outcome Outcome, string Detail)> RestartAndCheckAsync(HttpClient client, string directory, List<ClientSession> sessions)
    {
        await using var service = ServiceProcess.Start(AppPath, directory);
        bool ready;
        try
        {
            ready = await service.WaitReadyOrExitAsync(client, TimeSpan.FromSeconds(60), Ct);
        }
        catch (TimeoutException ex)
        {
            return (Outcome.Third, ex.Message);
        }

        if (!ready)
        {
            var output = service.Output;
            var critical = output.Where(l => l.StartsWith("crit:", StringComparison.Ordinal)).ToList();

            // The health check service logs each unhealthy probe (this test probes /health/ready while the service starts):
            // one line each, no stack trace. Any other error message is a second message.
            var errors = output.Count(l => l.StartsWith("fail:", StringComparison.Ordinal) && !l.Contains("HealthChecks", StringComparison.Ordinal));
            var problems = new List<string>();
            if (service.ExitCode != 70)
            {
                problems.Add($"exit code {service.ExitCode}, not 70");
            }

            if (critical.Count != 1 || errors > 0)
            {
                problems.Add($"{critical.Count} critical and {errors} error messages, not one message");
            }

            if (output.Any(l => l.Contains("Unhandled exception", StringComparison.Ordinal) || l.TrimStart().StartsWith("at ", StringComparison.Ordinal)))
            {
                problems.Add("a stack trace or an unhandled exception");
            }

            var message = string.Join(" ", output.SkipWhile(l => !l.StartsWith("crit:", StringComparison.Ordinal)).Skip(1).TakeWhile(l => l.StartsWith(' ')).Select(l => l.Trim()));
            if (!message.Contains("psctl verify", StringComparison.Ordinal))
            {
                problems.Add("the message does not point to psctl verify");
            }

            return problems.Count == 0
                ? (Outcome.Refused, message)
                : (Outcome.Third, string.Join("; ", problems) + $"; output:{Environment.NewLine}{string.Join(Environment.NewLine, output)}");
        }

        foreach (var session in sessions)
        {
            using var request = new HttpRequestMessage(HttpMethod.Get, new Uri(service.BaseAddress, "/counter"));
            request.Headers.Add("PS-Session", session.Id);
            using var response = await client.SendAsync(request, Ct);
            if (response.StatusCode != HttpStatusCode.OK)
            {
                return (Outcome.Third, $"session {session.Id} answered {(int)response.StatusCode}: {await response.Content.ReadAsStringAsync(Ct)} (acknowledged: {session.Acknowledged.Count} deposits)");
            }

            var served = (await response.Content.ReadFromJsonAsync<CounterState>(Ct))!;
            var acknowledged = session.Acknowledged.Select(d => d.OpId).ToList();
            var exact = served.Operations.SequenceEqual(acknowledged) && served.Total == session.Acknowledged.Sum(d => d.Amount);
            var plusInFlight = session.InFlight is { } pending && served.Operations.SequenceEqual([.. acknowledged, pending.OpId]) &&
                served.Total == session.Acknowledged.Sum(d => d.Amount) + pending.Amount;
            if (!exact && !plusInFlight)
            {
                var lost = acknowledged.Except(served.Operations).Count();
                return (Outcome.Third, $"session {session.Id} serves {served.Operations.Count} operations (total {served.Total}) but {acknowledged.Count} were acknowledged; {lost} acknowledged deposits lost");
            }
        }

        return (Outcome.Served, $"all {sessions.Sum(s => s.Acknowledged.Count)} acknowledged deposits served");
    }

    private static void CopyDirectory(string from, string to)
    {
        Directory.CreateDirectory(to);
        foreach (var file in Directory.GetFiles(from).Where(f => Path.GetFileName(f) != "directory.lock"))
        {
            File.Copy(file, Path.Combine(to, Path.GetFileName(file)));
        }
    }

    private enum Outcome
    {
        Refused,
        Served,
        Third,
    }
}
