using System.Net;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Recovery;

/// <summary>Shared variables and logged nondeterminism across a restart on the same log.</summary>
public sealed class SharedStateRecoveryTests : IDisposable
{
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task Restart_SharedVariablesRollForward_ReplayedReadsReproduceEveryReply()
    {
        var sessions = new string[6];
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.SharedCheckpointInterval = 7, behavior: _behavior))
        {
            for (var s = 0; s < sessions.Length; s++)
            {
                sessions[s] = await server.StartSessionAsync();
            }

            await Task.WhenAll(sessions.Select(async (session, s) =>
            {
                for (var i = 1; i <= 10; i++)
                {
                    var (response, _) = await server.SendAsync(HttpMethod.Post, "/shared/add", session, i, new { opId = $"s{s}-{i}", amount = 1 });
                    Assert.Equal(HttpStatusCode.OK, response.StatusCode);
                }
            }));

            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Availability.Stage);

            var (_, state) = await server.SendAsync(HttpMethod.Get, "/shared", sessions[0], null);
            Assert.Equal(60, state.GetProperty("total").GetInt64());
            Assert.Equal(10, state.GetProperty("calls").GetInt32());
            Assert.StartsWith("s", state.GetProperty("lastWriter").GetString(), StringComparison.Ordinal);
            var (next, nextBody) = await server.SendAsync(HttpMethod.Post, "/shared/add", sessions[1], 11, new { opId = "late", amount = 5 });
            Assert.Equal(HttpStatusCode.OK, next.StatusCode);
            Assert.Equal(65, nextBody.GetProperty("total").GetInt64());
            Assert.Equal(11, nextBody.GetProperty("calls").GetInt32());
        }
    }

    /// <summary>
    /// Two services in one process (issue 33): each request, live or replayed, reaches the shared variables of the service
    /// that runs it, never the other's, though both use the same static handles (<c>SharedTestController.Total</c> and the
    /// generated <c>LastWriter</c>).
    /// </summary>
    [Fact]
    public async Task TwoServicesInOneProcess_EachSeesItsOwnSharedVariables_LiveAndInReplay()
    {
        var dirA = Path.Combine(_dir.Path, "a");
        var dirB = Path.Combine(_dir.Path, "b");
        await using var b = await TestServer.StartAsync(dirB, behavior: _behavior);
        string sessionA;
        await using (var a = await TestServer.StartAsync(dirA, behavior: _behavior))
        {
            sessionA = await a.StartSessionAsync();
            var sessionB = await b.StartSessionAsync();
            for (var i = 1; i <= 3; i++)
            {
                var (toA, bodyA) = await a.SendAsync(HttpMethod.Post, "/shared/add", sessionA, i, new { opId = "a" + i, amount = 1 });
                var (toB, bodyB) = await b.SendAsync(HttpMethod.Post, "/shared/add", sessionB, i, new { opId = "b" + i, amount = 10 });
                Assert.Equal(HttpStatusCode.OK, toA.StatusCode);
                Assert.Equal(HttpStatusCode.OK, toB.StatusCode);
                Assert.Equal(i, bodyA.GetProperty("total").GetInt64());
                Assert.Equal(10 * i, bodyB.GetProperty("total").GetInt64());
            }

            Assert.Equal(3, a.Shared(() => SharedTestController.Total.Read()));
            Assert.Equal(30, b.Shared(() => SharedTestController.Total.Read()));
            Assert.Equal("a3", a.Shared(() => SharedTestController.LastWriter));
            Assert.Equal("b3", b.Shared(() => SharedTestController.LastWriter));
            await a.CrashAsync();
        }

        // A recovers and replays its session while B goes on serving: replay reads A's logged values into A's store.
        await using (var a = await TestServer.StartAsync(dirA, behavior: _behavior))
        {
            await a.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, a.Availability.Stage);
            var (stateA, bodyA) = await a.SendAsync(HttpMethod.Get, "/shared", sessionA, null);
            Assert.Equal(HttpStatusCode.OK, stateA.StatusCode);
            Assert.Equal(3, bodyA.GetProperty("total").GetInt64());
            Assert.Equal("a3", bodyA.GetProperty("lastWriter").GetString());
            Assert.Equal(3, bodyA.GetProperty("calls").GetInt32());
            var (next, nextBody) = await a.SendAsync(HttpMethod.Post, "/shared/add", sessionA, 4, new { opId = "a4", amount = 1 });
            Assert.Equal(HttpStatusCode.OK, next.StatusCode);
            Assert.Equal(4, nextBody.GetProperty("total").GetInt64());
            Assert.Equal(30, b.Shared(() => SharedTestController.Total.Read()));
            Assert.Equal("b3", b.Shared(() => SharedTestController.LastWriter));
        }
    }

    [Fact]
    public async Task Restart_RequestCutShortByTheCrash_ReplayFinishesIt_AndItsReplyIsLoggedAndDurableBeforeAnyoneSeesIt()
    {
        // Crash image: the log directory copied while session A's request has logged its update but not its reply
        // (another session's forced reply made A's records durable). A SIGKILL at that moment leaves the same files.
        var crashImage = Path.Combine(_dir.Path, "crash-image");
        var logDir = Path.Combine(_dir.Path, "log");
        string a;
        await using (var server = await TestServer.StartAsync(logDir, behavior: _behavior))
        {
            a = await server.StartSessionAsync();
            var b = await server.StartSessionAsync();
            var cutShort = server.SendAsync(HttpMethod.Post, "/shared/add-gated", a, 1, new { opId = "a-1", amount = 5 });
            await WaitUntilAsync(() => server.Shared(() => SharedTestController.Total.Read()) == 5); // A's update is logged; A waits at the gate
            var (forced, _) = await server.SendAsync(HttpMethod.Post, "/shared/add", b, 1, new { opId = "b-1", amount = 1 });
            Assert.Equal(HttpStatusCode.OK, forced.StatusCode);
            CopyDirectory(logDir, crashImage);
            _behavior.Gate.TrySetResult();
            await cutShort;
        }

        await WaitUntilAsync(() => _behavior.Count("shared/add-gated:completed") == 1); // live: once, after its reply

        await using (var server = await TestServer.StartAsync(crashImage, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            var session = server.Session(a);

            // The replay ran A's request to its end (live past its logged records); its reply is now logged and durable,
            // so a second crash cannot take back what a retry is about to be told.
            Assert.True(session.LoggedReplies.ContainsKey(1), "the reply of the request finished by replay was not logged");
            Assert.True(server.Runtime.Log.DurableUntil > session.StateNumber, "the reply was handed out before it was durable");
            Assert.Equal(1, _behavior.Count("shared/add-gated:completed")); // replay runs no OnCompleted callback
            var (retry, body) = await server.SendAsync(HttpMethod.Post, "/shared/add-gated", a, 1, new { opId = "a-1", amount = 5 });
            Assert.Equal(HttpStatusCode.OK, retry.StatusCode);
            Assert.Equal("true", retry.Headers.GetValues("PS-Replayed").Single());
            Assert.Equal(5, body.GetProperty("total").GetInt64()); // from the logged read (0), as before the crash

            // The reply replay finished reached a client for the first time: its OnCompleted callback runs, once.
            await WaitUntilAsync(() => _behavior.Count("shared/add-gated:completed") == 2);
            Assert.Equal(HttpStatusCode.OK, (await server.SendAsync(HttpMethod.Post, "/shared/add-gated", a, 1, new { opId = "a-1", amount = 5 })).Response.StatusCode);
            await Task.Delay(200, TestContext.Current.CancellationToken);
            Assert.Equal(2, _behavior.Count("shared/add-gated:completed"));
        }
    }

    private static async Task WaitUntilAsync(Func<bool> condition)
    {
        for (var i = 0; i < 500 && !condition(); i++)
        {
            await Task.Delay(10, TestContext.Current.CancellationToken);
        }

        Assert.True(condition(), "condition not reached within 5 s");
    }

    private static void CopyDirectory(string from, string to)
    {
        Directory.CreateDirectory(to);
        foreach (var file in Directory.GetFiles(from))
        {
            if (Path.GetFileName(file) != "directory.lock")
            {
                File.Copy(file, Path.Combine(to, Path.GetFileName(file)));
            }
        }
    }

    [Fact]
    public async Task Restart_EndpointUsingTimeRandomAndIds_ReplaysToTheSameReply()
    {
        string session;
        string reply;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/shared/stamp", session, 1);
            reply = (await server.SendAsync(HttpMethod.Post, "/shared/stamp", session, 2)).Body.GetRawText();

            await server.CrashAsync();
        }

        await Task.Delay(50, TestContext.Current.CancellationToken);
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Availability.Stage);

            var (retry, body) = await server.SendAsync(HttpMethod.Post, "/shared/stamp", session, 2);
            Assert.Equal("true", retry.Headers.GetValues("PS-Replayed").Single());
            Assert.Equal(reply, body.GetRawText());
        }
    }

    [Fact]
    public async Task ReadOnly_WritingSharedState_Fails()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        var session = await server.StartSessionAsync();

        var (response, _) = await server.SendAsync(HttpMethod.Post, "/shared/readonly-write", session, null);
        var (_, state) = await server.SendAsync(HttpMethod.Get, "/shared", session, null);

        Assert.Equal(HttpStatusCode.InternalServerError, response.StatusCode);
        Assert.Equal(0, state.GetProperty("total").GetInt64());
    }
}
