using System.Net;

namespace PersistentServices.ProcessTests;

/// <summary>
/// Ordinary ASP.NET Core features and ordinary faults on the request path, each against a real service process that is
/// killed with SIGKILL and restarted, checked from the client side.
/// </summary>
[Trait("Category", "Process")]
public sealed class RequestPathTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task DiskFull_AfterAFailedWrite_NothingStatefulIsAnsweredFromMemory_AndARestartServesWhatWasAcknowledged()
    {
        var faultFile = _dir.File("disk-full");
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log"), ["PS_FAULT_FILE"] = faultFile };
        string session;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            session = await service.StartSessionAsync();
            for (var seq = 1; seq <= 20; seq++)
            {
                var (status, body, _) = await service.SendAsync(HttpMethod.Post, "/deposit", session, seq, new { account = "a", amount = 1 });
                Assert.Equal(HttpStatusCode.OK, status);
                Assert.Equal(seq, body.GetProperty("balance").GetInt64());
            }

            await File.WriteAllTextAsync(faultFile, "full", TestContext.Current.CancellationToken);
            var (failed, _, _) = await service.SendAsync(HttpMethod.Post, "/deposit", session, 21, new { account = "a", amount = 1 });
            Assert.Equal(HttpStatusCode.ServiceUnavailable, failed);

            // The failed deposit changed memory, but it was never durable: no stateful reply may show it.
            Assert.Equal(HttpStatusCode.ServiceUnavailable, (await service.SendAsync(HttpMethod.Get, "/balances", null, null)).Status);
            Assert.Equal(HttpStatusCode.ServiceUnavailable, (await service.SendAsync(HttpMethod.Get, "/balances", session, null)).Status);
            Assert.Equal(HttpStatusCode.ServiceUnavailable, (await service.SendAsync(HttpMethod.Post, "/deposit", session, 21, new { account = "a", amount = 1 })).Status);
            using var health = await service.Client.GetAsync("/health/ready", TestContext.Current.CancellationToken);
            Assert.Equal(HttpStatusCode.ServiceUnavailable, health.StatusCode); // readiness fails: the orchestrator restarts the process
            await service.KillAsync();
        }

        File.Delete(faultFile); // the disk was grown
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            var (status, body, _) = await service.SendAsync(HttpMethod.Get, "/balances", session, null);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(20, body.GetProperty("a").GetInt64());

            // The client retries deposit 21 as it was told: it executes once.
            var (retried, retriedBody, _) = await service.SendAsync(HttpMethod.Post, "/deposit", session, 21, new { account = "a", amount = 1 });
            Assert.Equal(HttpStatusCode.OK, retried);
            Assert.Equal(21, retriedBody.GetProperty("balance").GetInt64());
            Assert.Equal(21, (await service.SendAsync(HttpMethod.Get, "/balances", null, null)).Body.GetProperty("a").GetInt64());
        }
    }

    [Fact]
    public async Task OnStartingThrows_ReplyIs500_ItsRetryGetsThatSame500_AndTheServiceRecoversAfterKill()
    {
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log") };
        string session;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            session = await service.StartSessionAsync();
            var (first, _, _) = await service.SendAsync(HttpMethod.Post, "/onstarting-throws", session, 1);
            Assert.Equal(HttpStatusCode.InternalServerError, first);
            var (retry, _, retryResponse) = await service.SendAsync(HttpMethod.Post, "/onstarting-throws", session, 1);
            Assert.Equal(HttpStatusCode.InternalServerError, retry);
            Assert.Equal("true", retryResponse.Headers.GetValues("PS-Replayed").Single());
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", session, 2, new { account = "a", amount = 5 })).Status);
            await service.KillAsync();
        }

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            var (retry, body, _) = await service.SendAsync(HttpMethod.Post, "/deposit", session, 2, new { account = "a", amount = 5 });
            Assert.Equal(HttpStatusCode.OK, retry);
            Assert.Equal(5, body.GetProperty("balance").GetInt64());
            Assert.Equal(HttpStatusCode.InternalServerError, (await service.SendAsync(HttpMethod.Post, "/onstarting-throws", session, 3)).Status);
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", session, 4, new { account = "a", amount = 5 })).Status);
            Assert.False(service.HasExited);
        }
    }

    [Fact]
    public async Task OnCompleted_RunsOnceWhenTheReplyGoesToTheClient_NeverAgainInRecovery_AndAThrowingOneStopsNothing()
    {
        var notifications = _dir.File("notifications.txt");
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log"), ["PS_NOTIFY_FILE"] = notifications };
        string[] sessions;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            sessions = [await service.StartSessionAsync(), await service.StartSessionAsync()];
            for (var i = 1; i <= 20; i++)
            {
                foreach (var session in sessions)
                {
                    Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/notify", session, i, new { text = $"{session[..4]}-{i}" })).Status);
                }
            }

            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/oncompleted-throws", sessions[0], 21)).Status);
            await WaitForLinesAsync(notifications, 40);
            await service.KillAsync();
        }

        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            // Both sessions replayed (a request waits for its session's replay) and the service serves.
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/notify", sessions[0], 22, new { text = "after-restart" })).Status);
            Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/notify", sessions[1], 21, new { text = "after-restart-2" })).Status);
            await WaitForLinesAsync(notifications, 42);
            await Task.Delay(500, TestContext.Current.CancellationToken);
            var lines = await File.ReadAllLinesAsync(notifications, TestContext.Current.CancellationToken);
            Assert.Equal(42, lines.Length);
            Assert.Equal(42, lines.Distinct().Count());
        }
    }

    [Fact]
    public async Task ChainedUpdates_KilledInsideThem_RecoverOnOneCoreEveryTime()
    {
        for (var run = 0; run < 3; run++)
        {
            var log = _dir.File($"log-{run}");
            string[] sessions;
            await using (var service = await ServiceProcess.StartAsync(new Dictionary<string, string> { ["PS_LOG_DIR"] = log, ["PS_BLOCK_CHAIN"] = "1" }))
            {
                sessions = [await service.StartSessionAsync(), await service.StartSessionAsync(), await service.StartSessionAsync()];
                var links = new[] { ("x", "y"), ("y", "z"), ("z", "w") };
                var inFlight = sessions.Select((s, i) => service.SendAsync(HttpMethod.Post, "/chain", s, 1, new { from = links[i].Item1, to = links[i].Item2 })).ToList();

                // Each request now holds its first variable (read for update logged, write not); another session's
                // request commits the log, so those reads are durable when the process dies.
                while ((await service.SendAsync(HttpMethod.Get, "/chain/blocked", null, null)).Body.GetInt32() < 3)
                {
                    await Task.Delay(20, TestContext.Current.CancellationToken);
                }

                var other = await service.StartSessionAsync();
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/deposit", other, 1, new { account = "a", amount = 1 })).Status);
                await service.KillAsync();
                foreach (var request in inFlight)
                {
                    await Assert.ThrowsAnyAsync<Exception>(() => request);
                }
            }

            var oneCore = new Dictionary<string, string> { ["PS_LOG_DIR"] = log, ["PS_REPLAY_PARALLELISM"] = "1", ["DOTNET_PROCESSOR_COUNT"] = "1" };
            await using (var service = await ServiceProcess.StartAsync(oneCore))
            {
                // Each retry waits for its session's replay, which finishes the interrupted chain live.
                var replies = await Task.WhenAll(sessions.Select((s, i) => service.SendAsync(HttpMethod.Post, "/chain", s, 1, new { from = new[] { "x", "y", "z" }[i], to = new[] { "y", "z", "w" }[i] })));
                Assert.All(replies, r => Assert.Equal(HttpStatusCode.OK, r.Status));
                var values = (await service.SendAsync(HttpMethod.Get, "/chain/values", null, null)).Body;
                Assert.Equal(1, values.GetProperty("x").GetInt64());
                Assert.Equal(11, values.GetProperty("y").GetInt64());
                Assert.Equal(11, values.GetProperty("z").GetInt64());
                Assert.Equal(10, values.GetProperty("w").GetInt64());
                Assert.Equal(HttpStatusCode.OK, (await service.SendAsync(HttpMethod.Post, "/chain", sessions[0], 2, new { from = "w", to = "x" })).Status);
            }
        }
    }

    private static async Task WaitForLinesAsync(string file, int count)
    {
        for (var i = 0; i < 100; i++)
        {
            if (File.Exists(file) && (await File.ReadAllLinesAsync(file, TestContext.Current.CancellationToken)).Length >= count)
            {
                return;
            }

            await Task.Delay(50, TestContext.Current.CancellationToken);
        }
    }
}
