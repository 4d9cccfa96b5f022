using System.Net;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Recovery;

/// <summary>Shared variables and logged nondeterminism across a restart on the same log.</summary>
public sealed class SharedStateRecoveryTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public SharedStateRecoveryTests() => TestBehavior.Reset();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task Restart_SharedVariablesRollForward_ReplayedReadsReproduceEveryReply()
    {
        var sessions = new string[6];
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.SharedCheckpointInterval = 7))
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
        }

        await using (var server = await TestServer.StartAsync(_dir.Path))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Runtime.Stage);

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

    [Fact]
    public async Task Restart_EndpointUsingTimeRandomAndIds_ReplaysToTheSameReply()
    {
        string session;
        string reply;
        await using (var server = await TestServer.StartAsync(_dir.Path))
        {
            session = await server.StartSessionAsync();
            await server.SendAsync(HttpMethod.Post, "/shared/stamp", session, 1);
            reply = (await server.SendAsync(HttpMethod.Post, "/shared/stamp", session, 2)).Body.GetRawText();
        }

        await Task.Delay(50, TestContext.Current.CancellationToken);
        await using (var server = await TestServer.StartAsync(_dir.Path))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Runtime.Stage);

            var (retry, body) = await server.SendAsync(HttpMethod.Post, "/shared/stamp", session, 2);
            Assert.Equal("true", retry.Headers.GetValues("PS-Replayed").Single());
            Assert.Equal(reply, body.GetRawText());
        }
    }

    [Fact]
    public async Task ReadOnly_WritingSharedState_Fails()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        var session = await server.StartSessionAsync();

        var (response, _) = await server.SendAsync(HttpMethod.Post, "/shared/readonly-write", session, null);
        var (_, state) = await server.SendAsync(HttpMethod.Get, "/shared", session, null);

        Assert.Equal(HttpStatusCode.InternalServerError, response.StatusCode);
        Assert.Equal(0, state.GetProperty("total").GetInt64());
    }
}
