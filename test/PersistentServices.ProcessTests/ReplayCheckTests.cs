using System.Diagnostics;
using System.Net;
using System.Reflection;
using System.Security.Cryptography;
using System.Text;
using System.Text.Json;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.SharedState;
using PersistentServices.Testing;

namespace PersistentServices.ProcessTests;

/// <summary>
/// The replay check against real logs: the test service is killed with SIGKILL after sessions that use a plain static
/// counter (issue 14's beginner's mistake) and sessions that do it right; a copy of its log is checked with
/// <c>psctl replay-check</c> (the service build as a child process) and with <see cref="ReplayCheck.RunAsync"/> (in
/// process). The check must name each diverging session and its first differing request, say nothing about the healthy
/// sessions, and write neither the copy nor the service's own log directory.
/// </summary>
[Trait("Category", "Process")]
public sealed class ReplayCheckTests : IDisposable
{
    private static readonly string PsctlPath = typeof(ReplayCheckTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
        .Single(a => a.Key == "PsctlPath").Value!;

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task PsctlReplayCheck_StaticCounterSessionsAfterKill9_NamesEachDivergingSessionAndRequest_NotTheHealthyOnes()
    {
        var log = _dir.File("log");
        var sessions = await WriteLogAsync(log, tally: true);
        var copy = CopyLog(log, _dir.File("copy"));
        var logBefore = Fingerprint(log);
        var copyBefore = Fingerprint(copy);

        // The service's own configuration names its real log directory (PS_LOG_DIR): the check must not touch it.
        var (exit, output) = await RunPsctlAsync(log, "replay-check", "--log", copy, "--show-session-ids", "--show-bodies", "--report", _dir.File("report.json"), "--", "dotnet", ServiceProcess.ServicePath);

        Assert.True(exit == 1, output);
        // Sessions replay one at a time in log order: A's first request gets 1 as before, its second gets 2 where its
        // client was told 3; B, next, gets 3 where it was told 2. Each is named with its first differing request.
        Assert.Contains($"(id {sessions.A}) diverged at request 2 (LSN ", output, StringComparison.Ordinal);
        Assert.Contains($"(id {sessions.B}) diverged at request 1 (LSN ", output, StringComparison.Ordinal);
        Assert.Contains("): POST /k", output, StringComparison.Ordinal);
        Assert.Contains("{\"n\":2}", output, StringComparison.Ordinal);
        Assert.Contains("logged reply:   200, SHA-256 ", output, StringComparison.Ordinal);
        Assert.Contains("Replayed 4 sessions one at a time, in log order: 2 replayed fine, 2 diverged", output, StringComparison.Ordinal);
        Assert.Contains("Result: DIVERGED: 2 of 4 sessions", output, StringComparison.Ordinal);
        foreach (var healthy in sessions.Healthy)
        {
            Assert.DoesNotContain(healthy, output, StringComparison.Ordinal);
        }

        Assert.Equal(logBefore, Fingerprint(log));
        Assert.Equal(copyBefore, Fingerprint(copy));

        using var report = JsonDocument.Parse(await File.ReadAllBytesAsync(_dir.File("report.json"), TestContext.Current.CancellationToken));
        Assert.Equal("diverged", report.RootElement.GetProperty("result").GetString());
        var divergences = report.RootElement.GetProperty("divergences").EnumerateArray().ToList();
        Assert.Equal([sessions.A, sessions.B], divergences.Select(d => d.GetProperty("sessionId").GetString()));
        Assert.Equal([2L, 1L], divergences.Select(d => d.GetProperty("sequence").GetInt64()));
        var tags = divergences.Select(d => d.GetProperty("sessionTag").GetString()!).ToList();

        // Without --show-session-ids the report names sessions by trace tag only (ids of anonymous sessions are secrets).
        var (again, tagged) = await RunPsctlAsync(log, "replay-check", "--log", copy, "--", "dotnet", ServiceProcess.ServicePath);
        Assert.True(again == 1, tagged);
        Assert.Contains($"Session {tags[0]} diverged at request 2", tagged, StringComparison.Ordinal);
        Assert.Contains($"Session {tags[1]} diverged at request 1", tagged, StringComparison.Ordinal);
        Assert.DoesNotContain(sessions.A, tagged, StringComparison.Ordinal);
        Assert.DoesNotContain(sessions.B, tagged, StringComparison.Ordinal);

        // Without --show-bodies no body is printed (a request's body may hold a client's secrets; issue 32): only its size.
        Assert.DoesNotContain("{\"n\":2}", tagged, StringComparison.Ordinal);
        Assert.Contains("not shown: psctl replay-check --show-bodies prints it", tagged, StringComparison.Ordinal);
        Assert.Equal(logBefore, Fingerprint(log));
        Assert.Equal(copyBefore, Fingerprint(copy));
    }

    [Fact]
    public async Task PsctlReplayCheck_OnlyDeterministicSessionsAndARequestCutShortByKill9_PassesAndSaysSo_ExitsZero()
    {
        var log = _dir.File("log");
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = log };
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            var tally = await service.StartSessionAsync();
            var depositor = await service.StartSessionAsync();
            var slow = await service.StartSessionAsync();
            for (var i = 1; i <= 3; i++)
            {
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/tally", tally, i, new { account = "t", amount = 5 })).Status);
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", depositor, i, new { account = "d", amount = 10 })).Status);
            }

            // A request still running at the kill: logged (the next commit covers it), no reply logged.
            _ = service.SendAsync(HttpMethod.Post, "/slow", slow, 1, new { account = "s", amount = 60_000 });
            await Task.Delay(500, TestContext.Current.CancellationToken);
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", depositor, 4, new { account = "d", amount = 10 })).Status);
            await service.KillAsync();
        }

        var copy = CopyLog(log, _dir.File("copy"));
        var work = Directory.CreateDirectory(_dir.File("work")).FullName;
        var (exit, output) = await RunPsctlAsync(log, "replay-check", "--log", copy, "--work-dir", work, "--keep-sandbox", "--", "dotnet", ServiceProcess.ServicePath);

        Assert.True(exit == 0, output);
        Assert.Contains("Replayed 2 sessions one at a time, in log order: 2 replayed fine, 0 diverged; 7 requests compared.", output, StringComparison.Ordinal);
        // What psctl's progress display read while the service ran, as the service last wrote it: the report's two sessions.
        var sandbox = Assert.Single(Directory.GetDirectories(work));
        Assert.Equal("""{"sessions":2,"replayed":2}""", await File.ReadAllTextAsync(Path.Combine(sandbox, "progress.json"), TestContext.Current.CancellationToken));
        Assert.Contains("1 more live session had nothing to replay", output, StringComparison.Ordinal); // its one request was cut short
        Assert.Contains("Not checked: 1 last request that a crash cut short", output, StringComparison.Ordinal);
        Assert.Contains("Result: passed: all 2 sessions replayed fine.", output, StringComparison.Ordinal);
        Assert.DoesNotContain("diverged at", output, StringComparison.Ordinal);
    }

    [Fact]
    public async Task PsctlReplayCheck_ALogAfterAGracefulStop_HasNothingToReplay_EvenWithTheStaticCounter_Passes()
    {
        var log = _dir.File("log");
        await using (var service = await ServiceProcess.StartAsync(new Dictionary<string, string> { ["PS_LOG_DIR"] = log }))
        {
            var a = await service.StartSessionAsync();
            var b = await service.StartSessionAsync();
            for (var i = 1; i <= 2; i++)
            {
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/k", a, i)).Status);
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/k", b, i)).Status);
            }

            Assert.Equal(0, await service.TerminateAsync(TimeSpan.FromSeconds(30))); // SIGTERM: drained, everything checkpointed
        }

        var copy = CopyLog(log, _dir.File("copy"));
        var (exit, output) = await RunPsctlAsync(log, "replay-check", "--log", copy, "--", "dotnet", ServiceProcess.ServicePath);

        Assert.True(exit == 0, output);
        Assert.Contains("Nothing to replay: 2 live sessions, none with a logged request after its latest checkpoint", output, StringComparison.Ordinal);
        Assert.Contains("Result: passed (nothing to replay).", output, StringComparison.Ordinal);
    }

    [Fact]
    public async Task ReplayCheckRunAsync_InProcessOnAStaticCounterLog_ReportsTheDivergingSessions_NotTheHealthyOne_AndOpensNoOtherDirectory()
    {
        var log = _dir.File("log");
        var sessions = await WriteLogAsync(log, tally: false);
        var copy = CopyLog(log, _dir.File("copy"));
        var copyBefore = Fingerprint(copy);
        var configured = _dir.File("configured-log");

        var report = await ReplayCheck.RunAsync(copy, () => BuildApp(configured), TestContext.Current.CancellationToken);

        Assert.Equal(ReplayCheckResult.Diverged, report.Result);
        Assert.False(report.Passed);
        Assert.Equal(3, report.Sessions);
        Assert.Equal(1, report.SessionsReplayedFine);
        Assert.Collection(
            report.Divergences,
            a =>
            {
                Assert.Equal(sessions.A, a.SessionId);
                Assert.Equal(2, a.Sequence);
                Assert.Equal("POST", a.Method);
                Assert.Equal("/k", a.Path);
                Assert.Equal(200, a.LoggedStatusCode);
                Assert.Equal(200, a.ReplayedStatusCode);
                Assert.Equal("{\"n\":2}", a.ReplayedBody);
                Assert.NotEqual(a.LoggedReplyHash, a.ReplayedReplyHash);
            },
            b =>
            {
                Assert.Equal(sessions.B, b.SessionId);
                Assert.Equal(1, b.Sequence);
                Assert.Equal("{\"n\":3}", b.ReplayedBody);
            });
        var text = report.ToString();
        Assert.Contains($"Session {report.Divergences[0].SessionTag} diverged at request 2", text, StringComparison.Ordinal);
        Assert.DoesNotContain(sessions.A, text, StringComparison.Ordinal);
        Assert.DoesNotContain(sessions.Healthy[0], text, StringComparison.Ordinal);
        Assert.False(Directory.Exists(configured), "the check opened the log directory the application configured");
        Assert.Equal(copyBefore, Fingerprint(copy));
    }

    [Fact]
    public async Task PsctlReplayCheck_TheStaticCounterWrittenToASharedVariable_ReportsTheStateDifferenceThoughTheRepliesAgree()
    {
        var log = _dir.File("log");
        string a;
        string b;
        await using (var service = await ServiceProcess.StartAsync(new Dictionary<string, string> { ["PS_LOG_DIR"] = log }))
        {
            a = await service.StartSessionAsync();
            b = await service.StartSessionAsync();
            for (var i = 1; i <= 2; i++)
            {
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/k-shared", a, i)).Status);
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/k-shared", b, i)).Status);
            }

            await service.KillAsync();
        }

        var copy = CopyLog(log, _dir.File("copy"));
        var (exit, output) = await RunPsctlAsync(log, "replay-check", "--log", copy, "--show-session-ids", "--show-bodies", "--", "dotnet", ServiceProcess.ServicePath);

        Assert.True(exit == 1, output);
        Assert.Contains($"(id {a}) diverged at request 2", output, StringComparison.Ordinal);
        Assert.Contains("wrote 2 to shared variable 'Test.LastK' where the log holds 3", output, StringComparison.Ordinal);
        Assert.Contains($"(id {b}) diverged at request 1", output, StringComparison.Ordinal);
        Assert.Contains("wrote 3 to shared variable 'Test.LastK' where the log holds 2", output, StringComparison.Ordinal);
        Assert.Contains("{\"written\":true}", output, StringComparison.Ordinal);
    }

    [Fact]
    public async Task ReplayCheck_ACopyWithCommittedDataDamaged_IsNotChecked_PsctlExitsTwo_RunAsyncThrows()
    {
        var log = _dir.File("log");
        await using (var service = await ServiceProcess.StartAsync(new Dictionary<string, string> { ["PS_LOG_DIR"] = log }))
        {
            var depositor = await service.StartSessionAsync();
            for (var i = 1; i <= 5; i++)
            {
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", depositor, i, new { account = "d", amount = 10 })).Status);
            }

            await service.KillAsync();
        }

        var copy = CopyLog(log, _dir.File("copy"));
        using (var segment = new FileStream(Path.Combine(copy, "log.0"), FileMode.Open, FileAccess.ReadWrite))
        {
            segment.Position = 300; // inside the first records, below later commit records: committed data
            var value = segment.ReadByte();
            segment.Position = 300;
            segment.WriteByte((byte)(value ^ 0x40));
        }

        var (exit, output) = await RunPsctlAsync(log, "replay-check", "--log", copy, "--", "dotnet", ServiceProcess.ServicePath);
        Assert.True(exit == 2, output);
        Assert.Contains("Result: NOT CHECKED: the copy of the log could not be opened", output, StringComparison.Ordinal);
        Assert.Contains("psctl verify", output, StringComparison.Ordinal);

        var configured = _dir.File("configured-log");
        var error = await Assert.ThrowsAsync<InvalidOperationException>(() => ReplayCheck.RunAsync(copy, () => BuildApp(configured), TestContext.Current.CancellationToken));
        Assert.Contains("could not recover the copy", error.Message, StringComparison.Ordinal);
        Assert.False(Directory.Exists(configured));
    }

    [Fact]
    public async Task CheckModeVariable_NamingARealLogDirectory_TheServiceRefusesToStart_AndTheLogIsUnchanged()
    {
        var log = _dir.File("log");
        await WriteLogAsync(log, tally: false);
        var before = Fingerprint(log);

        await using var service = await ServiceProcess.StartAsync(
            new Dictionary<string, string> { ["PS_LOG_DIR"] = log, ["PERSISTENTSERVICES_REPLAY_CHECK"] = log }, waitUntilReady: false);

        Assert.True(await service.WaitForExitAsync(TimeSpan.FromSeconds(60)), service.Output);
        Assert.NotEqual(0, service.ExitCode);
        Assert.Contains("which is not a replay check sandbox", service.Output, StringComparison.Ordinal);
        Assert.Equal(before, Fingerprint(log));
    }

    /// <summary>
    /// Sessions A and B call /k in turn (the static counter), a /deposit session (shared state, value-logged) and, with
    /// <paramref name="tally"/>, a /tally session (session state) do it right; then SIGKILL.
    /// </summary>
    private static async Task<(string A, string B, string[] Healthy)> WriteLogAsync(string log, bool tally)
    {
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = log };
        await using var service = await ServiceProcess.StartAsync(environment);
        var a = await service.StartSessionAsync();
        var b = await service.StartSessionAsync();
        var depositor = await service.StartSessionAsync();
        var tallier = tally ? await service.StartSessionAsync() : null;
        var n = 0L;
        for (var i = 1; i <= 3; i++)
        {
            foreach (var session in new[] { a, b })
            {
                var (status, body, _) = await service.SendAsync(HttpMethod.Post, "/k", session, i);
                Assert.Equal(HttpStatusCode.OK, status);
                Assert.Equal(++n, body.GetProperty("n").GetInt64());
            }

            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", depositor, i, new { account = "d", amount = 10 })).Status);
            if (tallier is not null)
            {
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/tally", tallier, i, new { account = "t", amount = 5 })).Status);
            }
        }

        await service.KillAsync();
        return (a, b, tallier is null ? [depositor] : [depositor, tallier]);
    }

    /// <summary>The endpoints of the test service that the in-process check replays, built the way its Program.cs does.</summary>
    private static WebApplication BuildApp(string logDirectory)
    {
        var builder = WebApplication.CreateBuilder();
        builder.Logging.ClearProviders();
        builder.Services.AddPersistentServices(options => options.LogDirectory = logDirectory);
        var app = builder.Build();
        app.UsePersistentServices();
        var balances = new SharedMap<string, long>("Test.Balances");
        var accounts = new SharedVariable<string[]>("Test.Accounts");
        app.MapPost("/k", [Persistent] () => new { n = ++InProcessPlain.Counter });
        app.MapPost("/deposit", [Persistent] (Deposit body) =>
        {
            accounts.Update(known => known is null ? [body.Account] : known.Contains(body.Account) ? known : [.. known, body.Account]);
            var balance = balances.Update(body.Account, b => b + body.Amount);
            return Results.Ok(new { account = body.Account, balance });
        });
        return app;
    }

    private static string CopyLog(string from, string to)
    {
        Directory.CreateDirectory(to);
        foreach (var file in Directory.GetFiles(from).Where(f => Path.GetFileName(f) != "directory.lock"))
        {
            File.Copy(file, Path.Combine(to, Path.GetFileName(file)));
        }

        return to;
    }

    /// <summary>Name, length, last write time and SHA-256 of every file: equal fingerprints mean nothing was written.</summary>
    private static string Fingerprint(string directory) => string.Join('\n', Directory.GetFiles(directory).Order(StringComparer.Ordinal).Select(f =>
        $"{Path.GetFileName(f)} {new FileInfo(f).Length} {File.GetLastWriteTimeUtc(f):O} {Convert.ToHexString(SHA256.HashData(File.ReadAllBytes(f)))}"));

    /// <summary>Runs psctl as a child process; <paramref name="serviceLog"/> is the log directory the service's own configuration names.</summary>
    private static async Task<(int Exit, string Output)> RunPsctlAsync(string serviceLog, params string[] args)
    {
        var start = new ProcessStartInfo("dotnet", [PsctlPath, .. args])
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        start.Environment["PS_LOG_DIR"] = serviceLog;
        start.Environment["DOTNET_NOLOGO"] = "1";
        using var process = Process.Start(start)!;
        var output = new StringBuilder();
        var stdout = process.StandardOutput.ReadToEndAsync(TestContext.Current.CancellationToken);
        var stderr = process.StandardError.ReadToEndAsync(TestContext.Current.CancellationToken);
        using var timeout = CancellationTokenSource.CreateLinkedTokenSource(TestContext.Current.CancellationToken);
        timeout.CancelAfter(TimeSpan.FromSeconds(120));
        await process.WaitForExitAsync(timeout.Token);
        output.Append(await stdout).Append(await stderr);
        return (process.ExitCode, output.ToString());
    }

    private sealed record Deposit(string Account, long Amount);

    /// <summary>The in-process app's plain static counter (the test service's Plain.Counter).</summary>
    private static class InProcessPlain
    {
        public static long Counter;
    }
}
