using System.Net;
using System.Text.Json;

namespace PersistentServices.ProcessTests;

/// <summary>
/// Checkpoints, graceful drain and upgrades against a real service process: SIGTERM drains, a new version whose replies
/// differ starts on the drained log, a session whose replay diverges is quarantined, and a crash at each named point of
/// checkpointing, truncation, drain and recovery leaves a state that a second recovery reproduces.
/// </summary>
[Trait("Category", "Process")]
public sealed class CheckpointTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task KillDuringLoad_OfALongLog_TwoWalkersVerifyIt_AndEverySessionRecoversExactly()
    {
        // 64 KiB log pages, so that a few hundred KiB of log is "long". Sessions at rest since the first phase hold the
        // log's begin far below the anchored scan start, so the restart's verification splits the kept log between two
        // walkers (docs/log-format.md "Recovery") and the analysis scan takes its records from the walk
        // (docs/checkpoints.md "Where recovery reads the log"); then everything must be exactly as acknowledged.
        var environment = new Dictionary<string, string>
        {
            ["PS_LOG_DIR"] = _dir.File("log"),
            ["PS_LOG_PAGE_SIZE_BITS"] = "16",
            ["PS_SESSION_CHECKPOINT_BYTES"] = "2048",
            ["PS_SERVICE_CHECKPOINT_SECONDS"] = "1",
            ["PS_IDLE_CHECKPOINT_AFTER"] = "1000",
        };
        var resting = new string[12];
        string active;
        long sent = 0;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            for (var s = 0; s < resting.Length; s++)
            {
                resting[s] = await service.StartSessionAsync();
                for (var i = 1; i <= 15; i++)
                {
                    Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/tally", resting[s], i, new { account = $"r{s}", amount = 1 })).Status);
                }
            }

            // A service checkpoint that finds them all at rest (then nothing moves them: none is used again).
            await WaitForAtRestCheckpointAsync(service, 12);

            active = await service.StartSessionAsync();
            for (var i = 0; i < 1000; i++)
            {
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/tally", active, ++sent, new { account = "active", amount = 1 })).Status);
            }

            // The drain checkpoints the active session; the others stay at rest where they are, far below.
            Assert.Equal(0, await service.TerminateAsync(TimeSpan.FromSeconds(30)));
        }

        long acknowledged;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            // A service checkpoint of this start that lists them at rest: the anchor's scan start is then above the first
            // phase (recovery's own checkpoint lists no session at rest: none is ready while it is taken).
            await WaitForAtRestCheckpointAsync(service, 12);
            for (var i = 0; i < 400; i++)
            {
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/tally", active, ++sent, new { account = "active", amount = 1 })).Status);
            }

            // SIGKILL while the next request may be in flight.
            acknowledged = sent;
            var inFlight = service.SendAsync(HttpMethod.Post, "/tally", active, ++sent, new { account = "active", amount = 1 });
            await service.KillAsync();
            try
            {
                if ((await inFlight).Status == HttpStatusCode.OK)
                {
                    acknowledged = sent;
                }
            }
            catch (HttpRequestException)
            {
            }
        }

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            Assert.Matches(@"committed records verified in \d+ ms by 2 walker\(s\)", service.Output);
            // The scan's line may reach our reader of the child's stdout after its readiness answers 200.
            await WaitForOutputAsync(service, o => o.Contains("Analysis scan:", StringComparison.Ordinal));
            Assert.Matches(@"Analysis scan: 13 live sessions \(1[23] at rest read directly", service.Output);

            // The retry of the last request gets its reply (executed once); nothing before it was lost or repeated.
            var (retry, body, _) = await service.SendAsync(HttpMethod.Post, "/tally", active, sent, new { account = "active", amount = 1 });
            Assert.Equal(HttpStatusCode.OK, retry);
            Assert.Equal(sent, body.GetProperty("count").GetInt64());
            Assert.True(acknowledged >= sent - 1);
            foreach (var session in resting)
            {
                var (status, tally, _) = await service.SendAsync(HttpMethod.Get, "/tally", session, null);
                Assert.Equal(HttpStatusCode.OK, status);
                Assert.Equal(15, tally.GetProperty("count").GetInt64());
            }
        }
    }

    /// <summary>Waits (30 s at most) until the service's log shows a service checkpoint listing at least <paramref name="atRest"/> sessions at rest.</summary>
    private static async Task WaitForAtRestCheckpointAsync(ServiceProcess service, int atRest)
    {
        var listed = new System.Text.RegularExpressions.Regex(@"\((\d+) sessions and \d+ shared variables at rest");
        var deadline = DateTime.UtcNow.AddSeconds(30);
        while (!listed.Matches(service.Output).Any(m => int.Parse(m.Groups[1].Value, System.Globalization.CultureInfo.InvariantCulture) >= atRest))
        {
            Assert.True(DateTime.UtcNow < deadline, $"no service checkpoint listed {atRest} sessions at rest:{Environment.NewLine}{service.RecentOutput()}");
            await Task.Delay(100, TestContext.Current.CancellationToken);
        }
    }

    [Fact]
    public async Task Sigterm_RunningRequestsFinish_NewOnesGet503_AndANewVersionWithOtherRepliesReplaysNothing()
    {
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log") };
        var sessions = new string[3];
        var lastReplies = new string[3];
        string tallySession;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            for (var s = 0; s < sessions.Length; s++)
            {
                sessions[s] = await service.StartSessionAsync();
                for (var i = 1; i <= 5; i++)
                {
                    var (status, body, _) = await service.SendAsync(HttpMethod.Post, "/deposit", sessions[s], i, new { account = $"a{s}", amount = 1 });
                    Assert.Equal(HttpStatusCode.OK, status);
                    lastReplies[s] = body.GetRawText();
                }
            }

            tallySession = await service.StartSessionAsync();
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/tally", tallySession, 1, new { account = "t", amount = 7 })).Status);
            var slowSession = await service.StartSessionAsync();
            var slow = service.SendAsync(HttpMethod.Post, "/slow", slowSession, 1, new { account = "s", amount = 1500 });
            await Task.Delay(300, TestContext.Current.CancellationToken);

            var exit = service.TerminateAsync(TimeSpan.FromSeconds(30));
            await Task.Delay(200, TestContext.Current.CancellationToken);
            // A request that still reaches the stopping service gets 503 + Retry-After; a new connection is refused.
            try
            {
                var refused = await service.SendAsync(HttpMethod.Post, "/deposit", sessions[0], 6, new { account = "a0", amount = 1 });
                Assert.Equal(HttpStatusCode.ServiceUnavailable, refused.Status);
                Assert.NotNull(refused.Response.Headers.RetryAfter);
            }
            catch (HttpRequestException)
            {
            }

            var (slowStatus, _, _) = await slow; // the running request finished, its reply went out
            Assert.Equal(HttpStatusCode.OK, slowStatus);
            Assert.Equal(0, await exit);
            Assert.Contains("Drained", service.Output, StringComparison.Ordinal);
        }

        environment["PS_VERSION"] = "2";
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            // The scan's line may reach our reader of the child's stdout after its readiness answers 200.
            await WaitForOutputAsync(service, o => o.Contains("Analysis scan:", StringComparison.Ordinal));
            Assert.Matches("Analysis scan: \\d+ live sessions \\(\\d+ at rest read directly, and \\d+ shared variables\\), 0 logged requests", service.Output);
            for (var s = 0; s < sessions.Length; s++)
            {
                // The retry of each session's last request gets the bytes the old version sent.
                var (status, body, _) = await service.SendAsync(HttpMethod.Post, "/deposit", sessions[s], 5, new { account = $"a{s}", amount = 1 });
                Assert.Equal(HttpStatusCode.OK, status);
                Assert.Equal(lastReplies[s], body.GetRawText());
                var (next, nextBody, _) = await service.SendAsync(HttpMethod.Post, "/deposit", sessions[s], 6, new { account = $"a{s}", amount = 1 });
                Assert.Equal(HttpStatusCode.OK, next);
                Assert.Equal(6, nextBody.GetProperty("balance").GetInt64());
                Assert.Equal(2, nextBody.GetProperty("version").GetInt32());
            }

            var (tallyStatus, tally, _) = await service.SendAsync(HttpMethod.Get, "/tally", tallySession, null);
            Assert.Equal(HttpStatusCode.OK, tallyStatus);
            Assert.Equal(7, tally.GetProperty("count").GetInt64()); // session state came back from the drain's checkpoint
            Assert.False(service.HasExited);
        }
    }

    [Fact]
    public async Task Crash_ASessionWhoseReplayDiverges_IsQuarantined_EveryOtherSessionAndTheSharedStateServe()
    {
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log") };
        string clock;
        string depositor;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            clock = await service.StartSessionAsync();
            depositor = await service.StartSessionAsync();
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/now", clock, 1)).Status);
            for (var i = 1; i <= 3; i++)
            {
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", depositor, i, new { account = "d", amount = 10 })).Status);
            }

            await service.KillAsync();
        }

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            var (diverged, problem, _) = await service.SendAsync(HttpMethod.Post, "/now", clock, 2);
            Assert.Equal(HttpStatusCode.InternalServerError, diverged);
            Assert.Equal("urn:persistentservices:problem:session-diverged", problem.GetProperty("type").GetString());
            var (served, body, _) = await service.SendAsync(HttpMethod.Post, "/deposit", depositor, 4, new { account = "d", amount = 10 });
            Assert.Equal(HttpStatusCode.OK, served);
            Assert.Equal(40, body.GetProperty("balance").GetInt64());
            using var health = await service.Client.GetAsync("/health/ready", TestContext.Current.CancellationToken);
            Assert.Equal("Degraded", await health.Content.ReadAsStringAsync(TestContext.Current.CancellationToken));
            Assert.Contains("quarantined", service.Output, StringComparison.Ordinal);
        }
    }

    [Fact]
    public async Task KilledFiveTimes_DvsOfSessionsAndSharedVariablesKeepOneOwnEntry_NotOnePerRestart()
    {
        // Every restart is a new epoch; a DV entry of an earlier epoch of the service itself is durable by then and must
        // go, or every logged shared access grows by one entry per restart (docs/domains.md).
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log") };
        string depositor;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            depositor = await service.StartSessionAsync();
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", depositor, 1, new { account = "d", amount = 1 })).Status);
            await service.KillAsync();
        }

        for (var restart = 1; restart <= 5; restart++)
        {
            await using var service = await ServiceProcess.StartAsync(environment);
            var (status, body, _) = await service.SendAsync(HttpMethod.Post, "/deposit", depositor, restart + 1, new { account = "d", amount = 1 });
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(restart + 1, body.GetProperty("balance").GetInt64());
            if (restart < 5)
            {
                await service.KillAsync();
                continue;
            }

            var (_, dv, _) = await service.SendAsync(HttpMethod.Get, "/debug/dv", depositor, null);
            Assert.Equal(1, dv.GetProperty("session").GetInt32());
            Assert.Equal(1, dv.GetProperty("accounts").GetInt32());
        }
    }

    /// <summary>
    /// A session state larger than a log record (docs/checkpoints.md "A state larger than a record"): its checkpoints are
    /// written in parts; the requests that take them succeed; the parts are kept while their checkpoint is the session's
    /// latest, through truncations as another session logs; after SIGKILL, and after a graceful stop, the state is exact.
    /// </summary>
    [Fact]
    public async Task LargeSessionState_IsCheckpointedInParts_AndRecoversExactly_AfterKillAndAfterDrain()
    {
        const int Ops = 8;
        var environment = SmallCheckpoints(); // every request of the session checkpoints it; idle ones after each service checkpoint
        string session;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            session = await service.StartSessionAsync();
            for (var i = 1; i <= Ops; i++)
            {
                var (status, body, _) = await service.SendAsync(HttpMethod.Post, "/tally", session, i, new { account = LargeOp(i), amount = 1 });
                Assert.True(status == HttpStatusCode.OK, $"request {i}: {status}\n{service.Output}");
                Assert.Equal(i, body.GetProperty("ops").GetInt32());
            }

            // Another session logs while service checkpoints (every second) truncate the log and checkpoint the idle large
            // session again (new parts each time, the old ones let go).
            var busy = await service.StartSessionAsync();
            var deadline = DateTime.UtcNow.AddSeconds(30);
            for (var seq = 1; DateTime.UtcNow < deadline && (seq <= 100 || Count(service.Output, "Truncated the log") < 4); seq++)
            {
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/tally", busy, seq, new { account = "b", amount = 1 })).Status);
            }

            Assert.True(Count(service.Output, "Truncated the log") >= 4, service.Output);
            await AssertLargeStateAsync(service, session, Ops);
            await service.KillAsync();
        }

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            Assert.Matches(@"\(1 checkpointed session states read from parts\)", service.Output);
            await AssertLargeStateAsync(service, session, Ops);
            var (status, body, _) = await service.SendAsync(HttpMethod.Post, "/tally", session, Ops + 1, new { account = LargeOp(Ops + 1), amount = 1 });
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(Ops + 1, body.GetProperty("ops").GetInt32());
            Assert.Equal(0, await service.TerminateAsync(TimeSpan.FromSeconds(30)));
        }

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            Assert.Matches(@"0 logged requests, .*\(1 checkpointed session states read from parts\)", service.Output);
            await AssertLargeStateAsync(service, session, Ops + 1);
        }

        // 300,000 characters each: eight make a state of about 2.4 MB, three parts at the default 1 MiB record.
        static string LargeOp(int i) => i.ToString("D4", System.Globalization.CultureInfo.InvariantCulture) + new string((char)('a' + (i % 26)), 300_000);

        static async Task AssertLargeStateAsync(ServiceProcess service, string session, int ops)
        {
            var (status, digest, _) = await service.SendAsync(HttpMethod.Get, "/tally/digest", session, null);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(ops, digest.GetProperty("count").GetInt64());
            Assert.Equal(ops, digest.GetProperty("ops").GetInt32());
            var expected = System.Security.Cryptography.SHA256.HashData(System.Text.Encoding.UTF8.GetBytes(string.Join("\n", Enumerable.Range(1, ops).Select(LargeOp))));
            Assert.Equal(Convert.ToHexString(expected), digest.GetProperty("sha256").GetString());
        }
    }

    private static int Count(string text, string what)
    {
        var count = 0;
        for (var at = text.IndexOf(what, StringComparison.Ordinal); at >= 0; at = text.IndexOf(what, at + what.Length, StringComparison.Ordinal))
        {
            count++;
        }

        return count;
    }

    public static TheoryData<string> RunningCrashPoints =>
    [
        "session-checkpoint.appended",
        "service-checkpoint.appended",
        "service-checkpoint.durable",
        "anchor.written",
        "log.truncated",
    ];

    [Theory]
    [MemberData(nameof(RunningCrashPoints))]
    public async Task CrashPoint_WhileServing_RecoveryServesExactlyTheAcknowledgedState_AndASecondRecoveryTheSame(string point)
    {
        var environment = SmallCheckpoints();
        environment["PERSISTENTSERVICES_CRASH_POINT"] = point;
        environment["PERSISTENTSERVICES_CRASH_AFTER"] = "1"; // not the checkpoint recovery takes at start: one taken while serving
        // The first service checkpoint while serving comes one interval after the start: 3 s, so that the clients' sessions
        // have started by then on a loaded CI host (with 1 s, starting four sessions in a cold process lost that race twice).
        environment["PS_SERVICE_CHECKPOINT_SECONDS"] = "3";
        var clients = new Clients(4);
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            await clients.StartAsync(service);
            var deadline = DateTime.UtcNow.AddSeconds(20);
            while (!service.HasExited && DateTime.UtcNow < deadline)
            {
                await clients.DepositOnceEachAsync(service);
            }

            Assert.True(await service.WaitForExitAsync(TimeSpan.FromSeconds(10)), $"crash point {point} was never reached:\n{service.Output}");
            Assert.Contains($"crash point {point}", service.Output, StringComparison.Ordinal);
        }

        environment.Remove("PERSISTENTSERVICES_CRASH_POINT");
        await RecoverTwiceAsync(environment, clients);
    }

    public static TheoryData<string> RecoveryCrashPoints => ["recovery.scanned", "recovery.replaying"];

    [Theory]
    [MemberData(nameof(RecoveryCrashPoints))]
    public async Task CrashPoint_DuringRecovery_ASecondRecoveryServesExactlyTheAcknowledgedState(string point)
    {
        var environment = SmallCheckpoints();
        // Keep requests to replay: no session reaches the checkpoint threshold, and no idle session is checkpointed (with
        // IdleCheckpointAfter = 1 a slow host's service checkpoint could checkpoint all three after their last deposit,
        // leave nothing to replay, and the replay crash point was then never reached: seen once in CI).
        environment["PS_SESSION_CHECKPOINT_BYTES"] = "1048576";
        environment["PS_IDLE_CHECKPOINT_AFTER"] = "1000000";
        var clients = new Clients(3);
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            await clients.StartAsync(service);
            for (var i = 0; i < 10; i++)
            {
                await clients.DepositOnceEachAsync(service);
            }

            await service.KillAsync();
        }

        environment["PERSISTENTSERVICES_CRASH_POINT"] = point;
        await using (var service = await ServiceProcess.StartAsync(environment, waitUntilReady: false))
        {
            if (point == "recovery.replaying")
            {
                await service.WaitUntilReadyAsync().ContinueWith(_ => { }, TaskScheduler.Default); // replay starts once the app started
            }

            Assert.True(await service.WaitForExitAsync(TimeSpan.FromSeconds(30)), $"crash point {point} was never reached:\n{service.Output}");
            Assert.Contains($"crash point {point}", service.Output, StringComparison.Ordinal);
        }

        environment.Remove("PERSISTENTSERVICES_CRASH_POINT");
        await RecoverTwiceAsync(environment, clients);
    }

    /// <summary>
    /// Shared variables at rest (docs/checkpoints.md): idle balances are checkpointed and listed at rest by a service
    /// checkpoint; after <c>kill -9</c> recovery reads them directly, and every balance, and the next deposit, is exact.
    /// </summary>
    [Fact]
    public async Task Kill_WithSharedVariablesAtRest_RecoveryReadsThemDirectly_AndEveryBalanceIsExact()
    {
        var environment = new Dictionary<string, string>
        {
            ["PS_LOG_DIR"] = _dir.File("log"), ["PS_SERVICE_CHECKPOINT_SECONDS"] = "1", ["PS_IDLE_CHECKPOINT_AFTER"] = "1",
        };
        string session;
        var first = "";
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            session = await service.StartSessionAsync();
            var seq = 1L;
            foreach (var account in new[] { "a0", "a1", "a2", "a0", "a1", "a2" })
            {
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", session, seq++, new { account, amount = 1 })).Status);
            }

            // One service checkpoint after the deposits; then a deposit to a0 only, so the next one forces the idle
            // balances' checkpoints and lists them at rest.
            await WaitForOutputAsync(service, o => CountOf(o, "Service checkpoint at") >= 2);
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", session, seq, new { account = "a0", amount = 1 })).Status);
            await WaitForOutputAsync(service, o => System.Text.RegularExpressions.Regex.IsMatch(o, "sessions and [1-9]\\d* shared variables at rest read directly"));
            await service.KillAsync();
            first = service.Output;
        }

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            // The scan's line may reach our reader of the child's stdout after its readiness answers 200.
            await WaitForOutputAsync(service, o => o.Contains("Analysis scan:", StringComparison.Ordinal));
            Assert.True(System.Text.RegularExpressions.Regex.IsMatch(service.Output, "Analysis scan: \\d+ live sessions \\(\\d+ at rest read directly, and [1-9]\\d* shared variables\\)"),
                "the first run's checkpoints:\n" + string.Join("\n", first.Split('\n').Where(l => l.Contains("checkpoint", StringComparison.OrdinalIgnoreCase) || l.Contains("crash", StringComparison.OrdinalIgnoreCase))) +
                "\nthe restart:\n" + service.Output);
            var (status, balances, _) = await service.SendAsync(HttpMethod.Get, "/balances", null, null);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(3, balances.GetProperty("a0").GetInt64());
            Assert.Equal(2, balances.GetProperty("a1").GetInt64());
            Assert.Equal(2, balances.GetProperty("a2").GetInt64());
            var (next, nextBody, _) = await service.SendAsync(HttpMethod.Post, "/deposit", session, 8, new { account = "a1", amount = 1 });
            Assert.Equal(HttpStatusCode.OK, next);
            Assert.Equal(3, nextBody.GetProperty("balance").GetInt64());
        }
    }

    private static int CountOf(string text, string what)
    {
        var count = 0;
        for (var at = text.IndexOf(what, StringComparison.Ordinal); at >= 0; at = text.IndexOf(what, at + what.Length, StringComparison.Ordinal))
        {
            count++;
        }

        return count;
    }

    private static async Task WaitForOutputAsync(ServiceProcess service, Func<string, bool> seen)
    {
        var deadline = DateTime.UtcNow.AddSeconds(30);
        while (!seen(service.Output))
        {
            Assert.True(DateTime.UtcNow < deadline, "the service did not log what the test waits for within 30 s:\n" + service.RecentOutput());
            await Task.Delay(100, TestContext.Current.CancellationToken);
        }
    }

    [Fact]
    public async Task CrashPoint_DuringTheDrain_RecoveryServesExactlyTheAcknowledgedState()
    {
        var environment = SmallCheckpoints();
        var clients = new Clients(3);
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            await clients.StartAsync(service);
            for (var i = 0; i < 10; i++)
            {
                await clients.DepositOnceEachAsync(service);
            }

            await service.KillAsync();
        }

        environment["PERSISTENTSERVICES_CRASH_POINT"] = "drain.checkpointed";
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            await clients.ResolveAsync(service);
            var exit = await service.TerminateAsync(TimeSpan.FromSeconds(30));
            Assert.NotEqual(0, exit);
            Assert.Contains("crash point drain.checkpointed", service.Output, StringComparison.Ordinal);
        }

        environment.Remove("PERSISTENTSERVICES_CRASH_POINT");
        await RecoverTwiceAsync(environment, clients);
    }

    private Dictionary<string, string> SmallCheckpoints() => new()
    {
        ["PS_LOG_DIR"] = _dir.File("log"),
        ["PS_SESSION_CHECKPOINT_BYTES"] = "2048",
        ["PS_SERVICE_CHECKPOINT_SECONDS"] = "1",
        ["PS_IDLE_CHECKPOINT_AFTER"] = "1",
    };

    /// <summary>Two restarts (the second after a SIGKILL): each serves exactly what the clients were told.</summary>
    private static async Task RecoverTwiceAsync(Dictionary<string, string> environment, Clients clients)
    {
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            await clients.ResolveAsync(service);
            await clients.AssertStateAsync(service);
            await clients.DepositOnceEachAsync(service);
            await service.KillAsync();
        }

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            await clients.ResolveAsync(service);
            await clients.AssertStateAsync(service);
        }
    }

    /// <summary>
    /// Sessions that each deposit 1 into their own account and add to their own tally, one numbered request at a time,
    /// remembering what they were told; a request without a reply is resent with its number after a restart.
    /// </summary>
    private sealed class Clients(int count)
    {
        private readonly string[] _sessions = new string[count];
        private readonly long[] _deposits = new long[count];
        private readonly long[] _tallies = new long[count];
        private readonly long[] _next = new long[count];
        private readonly bool[] _inDoubt = new bool[count];

        public async Task StartAsync(ServiceProcess service)
        {
            for (var i = 0; i < count; i++)
            {
                _sessions[i] = await service.StartSessionAsync();
                _next[i] = 1;
            }
        }

        public async Task DepositOnceEachAsync(ServiceProcess service)
        {
            for (var i = 0; i < count && !service.HasExited; i++)
            {
                await SendAsync(service, i);
            }
        }

        /// <summary>Resends every request that got no reply, until it gets one.</summary>
        public async Task ResolveAsync(ServiceProcess service)
        {
            for (var i = 0; i < count; i++)
            {
                for (var attempt = 0; _inDoubt[i]; attempt++)
                {
                    Assert.True(attempt < 100, $"request {_next[i]} of client {i} never got a reply:\n{service.Output}");
                    await SendAsync(service, i);
                }
            }
        }

        public async Task AssertStateAsync(ServiceProcess service)
        {
            var (status, balances, _) = await service.SendAsync(HttpMethod.Get, "/balances", null, null);
            Assert.Equal(HttpStatusCode.OK, status);
            for (var i = 0; i < count; i++)
            {
                var balance = balances.TryGetProperty($"c{i}", out var b) ? b.GetInt64() : 0;
                Assert.Equal(_deposits[i], balance);
                var (_, tally, _) = await service.SendAsync(HttpMethod.Get, "/tally", _sessions[i], null);
                Assert.Equal(_tallies[i], tally.GetProperty("count").GetInt64());
            }
        }

        /// <summary>Odd numbers deposit 1 into the client's own shared account, even numbers add 1 to its session tally.</summary>
        private async Task SendAsync(ServiceProcess service, int i)
        {
            var seq = _next[i];
            var deposit = seq % 2 == 1;
            _inDoubt[i] = true;
            try
            {
                var (status, body, _) = await service.SendAsync(HttpMethod.Post, deposit ? "/deposit" : "/tally", _sessions[i], seq, new { account = $"c{i}", amount = 1 });
                if (status != HttpStatusCode.OK)
                {
                    await Task.Delay(50, TestContext.Current.CancellationToken);
                    return;
                }

                _inDoubt[i] = false;
                _next[i]++;
                if (deposit)
                {
                    Assert.Equal(++_deposits[i], body.GetProperty("balance").GetInt64());
                }
                else
                {
                    Assert.Equal(++_tallies[i], body.GetProperty("count").GetInt64());
                }
            }
            catch (HttpRequestException)
            {
                await Task.Delay(50, TestContext.Current.CancellationToken);
            }
        }
    }
}
