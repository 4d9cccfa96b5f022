using System.Net;
using System.Net.Http.Json;
using System.Text.RegularExpressions;

namespace PersistentServices.ProcessTests;

/// <summary>
/// Sessions at scale against a real service process (docs/capacity.md): replies kept in the log instead of memory come
/// back byte for byte after SIGKILL and restart, also once checkpoints copied them forward and truncated the log; a flood
/// of never-used sessions frees its slots after the unused retention.
/// </summary>
[Trait("Category", "Process")]
public sealed partial class SessionScaleTests : IDisposable
{
    private const int PageBytes = 256 << 10;
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    /// <summary>What the test service's /page returns (test/PersistentServices.TestService, Page.Content).</summary>
    private static byte[] Page(string opId, long count, int size)
    {
        var bytes = new byte[size];
        var state = BitConverter.ToUInt64(System.Security.Cryptography.SHA256.HashData(System.Text.Encoding.UTF8.GetBytes(opId + "/" + count))) | 1;
        for (var i = 0; i < size; i++)
        {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            bytes[i] = (byte)state;
        }

        return bytes;
    }

    private static async Task<(HttpStatusCode Status, byte[] Body, bool Replayed)> PageAsync(ServiceProcess service, string session, long sequence, string opId, int size = PageBytes)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, "/page") { Content = JsonContent.Create(new { opId, size }) };
        request.Headers.TryAddWithoutValidation("PS-Session", session);
        request.Headers.TryAddWithoutValidation("PS-Seq", sequence.ToString(System.Globalization.CultureInfo.InvariantCulture));
        using var response = await service.Client.SendAsync(request, Ct);
        return (response.StatusCode, await response.Content.ReadAsByteArrayAsync(Ct), response.Headers.TryGetValues("PS-Replayed", out var replayed) && replayed.Single() == "true");
    }

    private static async Task AssertEveryRetryGetsItsReplyAsync(ServiceProcess service, List<string> sessions, long sequence)
    {
        for (var i = 0; i < sessions.Count; i++)
        {
            var (status, body, replayed) = await PageAsync(service, sessions[i], sequence, $"p{i}-{sequence}");
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.True(replayed, $"retry of session {i} was executed again");
            Assert.True(Page($"p{i}-{sequence}", sequence, PageBytes).AsSpan().SequenceEqual(body), $"session {i}: the retried reply differs from the original");
        }
    }

    [Fact]
    public async Task LargeReplies_DefaultOptions_KillAndRestart_EveryRetryGetsItsExactReply()
    {
        const int Sessions = 200;
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log") };
        var sessions = new List<string>();
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            var before = service.ResidentBytes();
            for (var i = 0; i < Sessions; i++)
            {
                var session = await service.StartSessionAsync();
                sessions.Add(session);
                var (status, body, _) = await PageAsync(service, session, 1, $"p{i}-1");
                Assert.Equal(HttpStatusCode.OK, status);
                Assert.Equal(PageBytes, body.Length);
            }

            var after = service.ResidentBytes();
            TestContext.Current.TestOutputHelper?.WriteLine($"RSS {before >> 20} MiB -> {after >> 20} MiB after {Sessions} sessions with {PageBytes >> 10} KiB replies");
            await AssertEveryRetryGetsItsReplyAsync(service, sessions, 1);
            await service.KillAsync();
        }

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            await AssertEveryRetryGetsItsReplyAsync(service, sessions, 1);
            var (next, nextBody, replayed) = await PageAsync(service, sessions[0], 2, "p0-2");
            Assert.Equal(HttpStatusCode.OK, next);
            Assert.False(replayed);
            Assert.Equal(Page("p0-2", 2, PageBytes), nextBody);
        }
    }

    [Fact]
    public async Task LargeReplies_AfterIdleCheckpointsCopiedThemForwardAndTruncatedTheLog_KillAndRestart_EveryRetryGetsItsExactReply()
    {
        var environment = new Dictionary<string, string>
        {
            ["PS_LOG_DIR"] = _dir.File("log"),
            ["PS_SESSION_CHECKPOINT_BYTES"] = "1024",
            ["PS_SERVICE_CHECKPOINT_SECONDS"] = "1",
            ["PS_IDLE_CHECKPOINT_AFTER"] = "1",
        };
        var sessions = new List<string>();
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            for (var i = 0; i < 20; i++)
            {
                var session = await service.StartSessionAsync();
                sessions.Add(session);
                Assert.Equal(HttpStatusCode.OK, (await PageAsync(service, session, 1, $"p{i}-1")).Status);
            }

            // Another session grows the log by more than the relocation window (64 MiB) while service checkpoints run (every
            // second) and checkpoint the idle sessions, copying their replies forward once they lie that far behind, so the
            // log's start moves past where they were first written.
            var busy = await service.StartSessionAsync();
            var deadline = DateTime.UtcNow.AddSeconds(90);
            for (var seq = 1; DateTime.UtcNow < deadline && (seq <= 400 || ForcedIdleSessions(service.Output) < 2 * sessions.Count); seq++)
            {
                Assert.Equal(HttpStatusCode.OK, (await PageAsync(service, busy, seq, $"busy-{seq}")).Status);
            }

            Assert.True(ForcedIdleSessions(service.Output) >= 2 * sessions.Count, $"the idle sessions were not checkpointed twice:\n{service.Output}");
            await AssertEveryRetryGetsItsReplyAsync(service, sessions, 1);
            await service.KillAsync();
        }

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            await AssertEveryRetryGetsItsReplyAsync(service, sessions, 1);
            Assert.Equal(HttpStatusCode.OK, (await PageAsync(service, sessions[^1], 2, "next")).Status);
        }
    }

    [Fact]
    public async Task FloodOfNeverUsedSessions_FillsTheCap_ThenItsSlotsFreeAfterTheUnusedRetention()
    {
        var environment = new Dictionary<string, string>
        {
            ["PS_LOG_DIR"] = _dir.File("log"),
            ["PS_MAX_SESSIONS"] = "200",
            ["PS_UNUSED_SESSION_SECONDS"] = "5",
        };
        await using var service = await ServiceProcess.StartAsync(environment);
        for (var i = 0; i < 200; i++)
        {
            await service.StartSessionAsync();
        }

        using var refused = await service.Client.PostAsync("/ps/sessions", null, Ct);
        Assert.Equal((HttpStatusCode)429, refused.StatusCode);
        var retryAfter = refused.Headers.RetryAfter!.Delta!.Value;
        Assert.InRange(retryAfter, TimeSpan.FromSeconds(1), TimeSpan.FromSeconds(6));

        // A second client asks again when told to: a slot is free by then (the sweep runs every second here).
        await Task.Delay(retryAfter + TimeSpan.FromSeconds(1), Ct);
        using var started = await service.Client.PostAsync("/ps/sessions", null, Ct);
        Assert.Equal(HttpStatusCode.Created, started.StatusCode);
    }

    /// <summary>Idle sessions checkpointed by service checkpoints so far (event 1390's "forced N idle sessions").</summary>
    private static int ForcedIdleSessions(string output) => ForcedPattern().Matches(output).Sum(m => int.Parse(m.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture));

    [GeneratedRegex(@"forced (\d+) idle sessions")]
    private static partial Regex ForcedPattern();
}
