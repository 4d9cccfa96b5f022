using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Reflection;
using PersistentServices.Tool.Tests.TestSupport;

namespace PersistentServices.Tool.Tests;

/// <summary>
/// The backup procedure of docs/operations.md, done to a real service while it serves: copy <c>commit.meta</c>, then the
/// segment files in order; <c>psctl verify</c> the copy (and copy again if it refuses); restore it into a service of its own. The restored service must
/// serve, for every session, a prefix of what the session sent that holds at least every deposit acknowledged before the
/// copy began.
/// </summary>
[Trait("Category", "Crash")]
public sealed class BackupTests
{
    private const int Sessions = 4;
    private const int Copies = 5;

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static string AppPath => Environment.GetEnvironmentVariable("PS_DAMAGE_APP") is { Length: > 0 } app
        ? app
        : typeof(BackupTests).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>().Single(a => a.Key == "SamplePath").Value!;

    [Fact]
    public async Task CopyInTheDocumentedOrder_WhileTheServiceServes_RestoresEverythingAcknowledgedBeforeTheCopy()
    {
        using var root = new TempDirectory();
        using var client = new HttpClient { Timeout = TimeSpan.FromSeconds(15) };
        var random = new Random(5);
        var live = Path.Combine(root.Path, "live");
        var copies = new List<(string Directory, int[] AcknowledgedBefore)>();
        List<ClientSession> sessions = [];
        await using (var service = ServiceProcess.Start(AppPath, live))
        {
            Assert.True(await service.WaitReadyOrExitAsync(client, TimeSpan.FromSeconds(60), Ct), string.Join(Environment.NewLine, service.Output));
            for (var i = 0; i < Sessions; i++)
            {
                using var response = await client.PostAsync(new Uri(service.BaseAddress, "/ps/sessions"), null, Ct);
                response.EnsureSuccessStatusCode();
                sessions.Add(new ClientSession((await response.Content.ReadFromJsonAsync<SessionReply>(Ct))!.SessionId, int.MaxValue, tolerateFailure: false));
            }

            using var stop = new CancellationTokenSource();
            var deposits = sessions.Select((s, i) => Task.Run(() => s.DepositAsync(client, service.BaseAddress, new Random(i), stop.Token))).ToArray();
            for (var c = 0; c < Copies; c++)
            {
                await Task.Delay(random.Next(100, 400), Ct);
                var before = sessions.Select(s => s.Acknowledged.Count).ToArray();
                var copy = Path.Combine(root.Path, $"copy-{c.ToString(CultureInfo.InvariantCulture)}");
                for (var attempt = 1; ; attempt++)
                {
                    // Step 3 of the procedure: verify the copy; a refusal means a write raced the copy: copy again.
                    CopyInTheDocumentedOrder(live, copy);
                    var report = new StringWriter();
                    var verdict = Cli.Run(["verify", copy], report, report);
                    TestContext.Current.TestOutputHelper?.WriteLine($"copy {c}, attempt {attempt}: psctl verify exited {verdict}");
                    if (verdict == Cli.Clean)
                    {
                        break;
                    }

                    Assert.True(attempt < 3, $"three copies in a row were refused:{Environment.NewLine}{report}");
                    Directory.Delete(copy, recursive: true);
                }

                copies.Add((copy, before));
            }

            await stop.CancelAsync();
            await Task.WhenAll(deposits);
        }

        foreach (var (copy, before) in copies)
        {
            await using var restored = ServiceProcess.Start(AppPath, copy);
            Assert.True(await restored.WaitReadyOrExitAsync(client, TimeSpan.FromSeconds(60), Ct), string.Join(Environment.NewLine, restored.Output));
            for (var i = 0; i < sessions.Count; i++)
            {
                using var request = new HttpRequestMessage(HttpMethod.Get, new Uri(restored.BaseAddress, "/counter"));
                request.Headers.Add("PS-Session", sessions[i].Id);
                using var response = await client.SendAsync(request, Ct);
                Assert.Equal(HttpStatusCode.OK, response.StatusCode);
                var served = (await response.Content.ReadFromJsonAsync<CounterState>(Ct))!;
                var sent = sessions[i].Acknowledged.Select(d => d.OpId).ToList();
                if (sessions[i].InFlight is { } pending)
                {
                    sent.Add(pending.OpId);
                }

                Assert.True(served.Operations.Count >= before[i], $"{copy}: session {i} restored {served.Operations.Count} deposits, but {before[i]} were acknowledged before the copy began");
                Assert.Equal(sent.Take(served.Operations.Count), served.Operations);
            }
        }
    }

    /// <summary>docs/operations.md: <c>commit.meta</c> first, then every <c>log.N</c> in increasing N; not the lock file.</summary>
    private static void CopyInTheDocumentedOrder(string from, string to)
    {
        Directory.CreateDirectory(to);
        File.Copy(Path.Combine(from, "commit.meta"), Path.Combine(to, "commit.meta"));
        foreach (var segment in Directory.GetFiles(from, "log.*")
            .Select(f => (Path: f, Number: int.Parse(Path.GetExtension(f)[1..], CultureInfo.InvariantCulture)))
            .OrderBy(f => f.Number))
        {
            File.Copy(segment.Path, Path.Combine(to, Path.GetFileName(segment.Path)));
        }
    }
}
