using System.Diagnostics;
using System.Net;
using System.Reflection;
using System.Security.Cryptography;
using System.Text;
using System.Text.RegularExpressions;

namespace PersistentServices.ProcessTests;

/// <summary>
/// Issue 32, finding 7, offline: an operator finds, inspects and repairs quarantined sessions of a stopped service with
/// <c>psctl sessions</c>, and the next start serves them as repaired. The test service's <c>/now</c> replies with the
/// clock, so its replay after <c>kill -9</c> diverges and its sessions (and an Idempotency-Key sent to it) are quarantined;
/// the service is stopped, psctl runs as a child process on its log, the service starts again and each client sees the
/// repair: a discarded session is gone (404), a released one serves its next request (its last one gets 410), a discarded
/// key is an expired key (410, never run again); health is Healthy, and an acknowledged deposit of another session stands.
/// </summary>
[Trait("Category", "Process")]
public sealed class OperatorRepairTests : IDisposable
{
    private static readonly string PsctlPath = typeof(OperatorRepairTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
        .Single(a => a.Key == "PsctlPath").Value!;

    private readonly TempDirectory _dir = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task PsctlSessions_QuarantinedSessionsOfAStoppedLog_DiscardedAndReleased_TheNextStartServesThemAsRepaired()
    {
        var log = _dir.File("log");
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = log };
        string discarded, released, healthy;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            discarded = await service.StartSessionAsync();
            released = await service.StartSessionAsync();
            healthy = await service.StartSessionAsync();
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/now", discarded, 1)).Status);
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/now", released, 1)).Status);
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", healthy, 1, new { account = "a", amount = 5 })).Status);
            Assert.Equal(HttpStatusCode.OK, await KeyedNowAsync(service, "op-1"));
            await service.KillAsync();
        }

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            // The replays of /now diverge: those sessions and the key are quarantined, their markers logged; the others serve.
            await WaitForHealthAsync(service, "Degraded");
            var (diverged, problem, _) = await service.SendAsync(HttpMethod.Post, "/now", discarded, 2);
            Assert.Equal(HttpStatusCode.InternalServerError, diverged);
            Assert.Equal("urn:persistentservices:problem:session-diverged", problem.GetProperty("type").GetString());

            // Offline means offline: psctl refuses the log the running service holds.
            var (inUse, refusal) = await PsctlAsync("sessions", "list", log);
            Assert.True(inUse == 2, refusal);
            Assert.Contains("is in use", refusal, StringComparison.Ordinal);
            Assert.Equal(0, await service.TerminateAsync(TimeSpan.FromSeconds(30)));
        }

        // Find them.
        var (listed, list) = await PsctlAsync("sessions", "list", log, "--state", "quarantined");
        Assert.True(listed == 0, list);
        Assert.Contains("(quarantined 3, Idempotency-Keys 1, expired keys 0); listed: 3", list, StringComparison.Ordinal);
        Assert.Matches($@"{Tag(discarded)}\s+session\s+quarantined\s+1\s+anonymous", list);
        var keyTag = Regex.Match(list, @"^([0-9a-f]{12})\s+key\s+quarantined", RegexOptions.Multiline).Groups[1].Value;
        Assert.NotEmpty(keyTag);
        Assert.DoesNotContain(discarded, list, StringComparison.Ordinal);

        // Inspect one. The drain's checkpoint let the log go past the requests before the marker; the marker's reason names
        // the request that diverged and how.
        var (shown, show) = await PsctlAsync("sessions", "show", log, Tag(discarded));
        Assert.True(shown == 0, show);
        Assert.Matches(@"State: quarantined: Replay of request 1 of session [0-9a-f]{12} \(LSN \d+, POST /now\) produced status 200 and a different reply", show);
        Assert.Contains("quarantine marker: ", show, StringComparison.Ordinal);

        // Repair them: discard one session, release the other (named by its id), discard the key.
        var (discard, discardOutput) = await PsctlAsync("sessions", "discard", log, Tag(discarded));
        Assert.True(discard == 0, discardOutput);
        var (release, releaseOutput) = await PsctlAsync("sessions", "release", log, released);
        Assert.True(release == 0, releaseOutput);
        var (key, keyOutput) = await PsctlAsync("sessions", "discard", log, keyTag);
        Assert.True(key == 0, keyOutput);
        var (again, againOutput) = await PsctlAsync("sessions", "discard", log, Tag(discarded));
        Assert.True(again == 1, againOutput); // gone already
        Assert.Contains("(quarantined 0, Idempotency-Keys 1, expired keys 1)", (await PsctlAsync("sessions", "list", log)).Output, StringComparison.Ordinal);

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            await WaitForHealthAsync(service, "Healthy");

            var (gone, notFound, _) = await service.SendAsync(HttpMethod.Post, "/now", discarded, 2);
            Assert.Equal(HttpStatusCode.NotFound, gone);
            Assert.Equal("urn:persistentservices:problem:session-not-found", notFound.GetProperty("type").GetString());

            var (retry, lost, _) = await service.SendAsync(HttpMethod.Post, "/now", released, 1);
            Assert.Equal(HttpStatusCode.Gone, retry);
            Assert.Equal("urn:persistentservices:problem:session-released", lost.GetProperty("type").GetString());
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/now", released, 2)).Status);

            Assert.Equal(HttpStatusCode.Gone, await KeyedNowAsync(service, "op-1"));

            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", healthy, 2, new { account = "a", amount = 7 })).Status);
            var (_, balances, _) = await service.SendAsync(HttpMethod.Get, "/balances", null, null);
            Assert.Equal(12, balances.GetProperty("a").GetInt64());
            Assert.Equal("Healthy", await HealthAsync(service));
        }
    }

    /// <summary>The trace tag of a session id, as the service and psctl print it: 12 hex digits of a SHA-256 of its 16 bytes.</summary>
    private static string Tag(string id)
    {
        var bytes = Convert.FromBase64String(id.Replace('-', '+').Replace('_', '/') + "==");
        return Convert.ToHexStringLower(SHA256.HashData(bytes).AsSpan(0, 6));
    }

    private static async Task<HttpStatusCode> KeyedNowAsync(ServiceProcess service, string key)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, "/now");
        request.Headers.TryAddWithoutValidation("Idempotency-Key", key);
        using var response = await service.Client.SendAsync(request, Ct);
        return response.StatusCode;
    }

    private static async Task<string> HealthAsync(ServiceProcess service)
    {
        using var response = await service.Client.GetAsync("/health/ready", Ct);
        return await response.Content.ReadAsStringAsync(Ct);
    }

    /// <summary>Polls the readiness check until it says <paramref name="status"/> (replay runs after the start).</summary>
    private static async Task WaitForHealthAsync(ServiceProcess service, string status)
    {
        var clock = Stopwatch.StartNew();
        string last;
        while ((last = await HealthAsync(service)) != status)
        {
            Assert.True(clock.Elapsed < TimeSpan.FromSeconds(30), $"health stayed {last}, not {status}:\n{service.RecentOutput()}");
            await Task.Delay(50, Ct);
        }
    }

    private static async Task<(int Exit, string Output)> PsctlAsync(params string[] args)
    {
        var start = new ProcessStartInfo("dotnet", [PsctlPath, .. args])
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        start.Environment["DOTNET_NOLOGO"] = "1";
        using var process = Process.Start(start)!;
        var stdout = process.StandardOutput.ReadToEndAsync(Ct);
        var stderr = process.StandardError.ReadToEndAsync(Ct);
        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(Ct);
        timeout.CancelAfter(TimeSpan.FromSeconds(120));
        await process.WaitForExitAsync(timeout.Token);
        return (process.ExitCode, new StringBuilder().Append(await stdout).Append(await stderr).ToString());
    }
}
