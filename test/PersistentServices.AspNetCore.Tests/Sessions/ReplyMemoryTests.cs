using System.Net;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Sessions;

/// <summary>
/// The session memory budget (docs/capacity.md): replies above MaxBufferedReplyBytes, or over the budget, are kept in the
/// log and read back exactly on a retry: live, after a crash, and after checkpoints truncated the log.
/// </summary>
public sealed class ReplyMemoryTests : IDisposable
{
    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();

    public void Dispose() => _dir.Dispose();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static async Task<(HttpStatusCode Status, byte[] Body, HttpResponseMessage Response)> PageAsync(TestServer server, string session, long sequence, string opId, int size)
    {
        using var request = TestServer.Request(HttpMethod.Post, "/page", session, sequence, new { opId, size });
        var response = await server.Client.SendAsync(request, Ct);
        return (response.StatusCode, await response.Content.ReadAsByteArrayAsync(Ct), response);
    }

    private static string Header(HttpResponseMessage response, string name) => response.Headers.TryGetValues(name, out var values) ? values.Single() : "";

    [Fact]
    public async Task LargeReply_IsKeptInTheLog_ARetryGetsTheExactBytesAndHeaders_AndMemoryHoldsNone()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, o => o.MaxBufferedReplyBytes = 4096, behavior: _behavior);
        var session = await server.StartSessionAsync();

        var (status, first, response) = await PageAsync(server, session, 1, "a", 40_000);
        var (retryStatus, retried, retry) = await PageAsync(server, session, 1, "a", 40_000);

        Assert.Equal(HttpStatusCode.OK, status);
        Assert.Equal(PageRequest.Content("a", 1, 40_000), first);
        Assert.Equal(HttpStatusCode.OK, retryStatus);
        Assert.Equal(first, retried);
        Assert.Equal("true", Header(retry, "PS-Replayed"));
        Assert.Equal(Header(response, "X-Page"), Header(retry, "X-Page"));
        Assert.Equal("application/octet-stream", retry.Content.Headers.ContentType?.MediaType);
        Assert.Equal(1, _behavior.Count("page:a"));
        Assert.True(server.Session(session).LastReply!.InLog);
        Assert.Equal(0, server.Runtime.Sessions.Memory.HeldBytes);
        Assert.Equal(1, server.Runtime.Sessions.Memory.LoggedInFull);
    }

    [Fact]
    public async Task SmallReply_IsHeldInMemory_AndCountedAgainstTheBudgetUntilTheNextRequestReplacesIt()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        var session = await server.StartSessionAsync();

        await PageAsync(server, session, 1, "a", 1000);
        var held = server.Runtime.Sessions.Memory.HeldBytes;
        await PageAsync(server, session, 2, "b", 2000);

        Assert.InRange(held, 1000, 1000 + 1024);
        Assert.InRange(server.Runtime.Sessions.Memory.HeldBytes, 2000, 2000 + 1024);
        Assert.False(server.Session(session).LastReply!.InLog);
        Assert.Equal(0, server.Runtime.Sessions.Memory.LoggedInFull);
    }

    [Fact]
    public async Task BudgetFull_FurtherRepliesGoToTheLog_HeldBytesNeverExceedTheBudget_AndEveryRetryGetsItsReply()
    {
        const int Budget = 1 << 20;
        await using var server = await TestServer.StartAsync(_dir.Path, o =>
        {
            o.SessionMemoryBudgetBytes = Budget;
            o.MaxBufferedReplyBytes = 40 << 10;
        }, behavior: _behavior);
        var sessions = new List<string>();
        for (var i = 0; i < 40; i++)
        {
            var session = await server.StartSessionAsync();
            sessions.Add(session);
            await PageAsync(server, session, 1, "p" + i, 32 << 10);
            Assert.True(server.Runtime.Sessions.Memory.HeldBytes <= Budget);
        }

        var inLog = sessions.Count(s => server.Session(s).LastReply!.InLog);
        Assert.InRange(inLog, 40 - (Budget / (32 << 10)), 39);
        for (var i = 0; i < sessions.Count; i++)
        {
            var (status, body, retry) = await PageAsync(server, sessions[i], 1, "p" + i, 32 << 10);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(PageRequest.Content("p" + i, 1, 32 << 10), body);
            Assert.Equal("true", Header(retry, "PS-Replayed"));
        }

        using var health = await server.Client.GetAsync("/health/ready", Ct);
        Assert.Contains("Degraded", await health.Content.ReadAsStringAsync(Ct), StringComparison.Ordinal);

        // Ending sessions releases what they held.
        foreach (var session in sessions)
        {
            using var end = await server.Client.DeleteAsync($"/ps/sessions/{session}", Ct);
            Assert.Equal(HttpStatusCode.NoContent, end.StatusCode);
        }

        Assert.Equal(0, server.Runtime.Sessions.Memory.HeldBytes);
    }

    [Fact]
    public async Task ReplyLargerThanOneRecord_IsLoggedInParts_AndReadBackWhole_AlsoAfterACrash()
    {
        // The test server's records hold at most 96 KiB (MaxRequestBodyBytes 64 KiB + MaxLoggedHeaderBytes 32 KiB).
        const int Size = 300_000;
        string session;
        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            var (status, first, _) = await PageAsync(server, session, 1, "big", Size);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(PageRequest.Content("big", 1, Size), first);
            var location = server.Session(session).LastReply!.Location;
            Assert.True(location.FirstLsn < location.Lsn, "the body was not split into parts");
            var (_, retried, _) = await PageAsync(server, session, 1, "big", Size);
            Assert.Equal(first, retried);
            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            var (status, retried, retry) = await PageAsync(server, session, 1, "big", Size);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(PageRequest.Content("big", 1, Size), retried);
            Assert.Equal("true", Header(retry, "PS-Replayed"));
            Assert.True(server.Session(session).LastReply!.InLog);
        }
    }

    [Fact]
    public async Task Crash_WithRepliesInTheLog_AfterReplayTheSessionsHoldOnlyTheirLocations_AndRetriesGetTheLoggedBytes()
    {
        var sessions = new List<string>();
        var headers = new List<string>();
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.MaxBufferedReplyBytes = 4096, behavior: _behavior))
        {
            for (var i = 0; i < 8; i++)
            {
                var session = await server.StartSessionAsync();
                sessions.Add(session);
                await PageAsync(server, session, 1, "x" + i, 10_000);
                var (_, _, response) = await PageAsync(server, session, 2, "y" + i, 50_000);
                headers.Add(Header(response, "X-Page"));
            }

            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.MaxBufferedReplyBytes = 4096, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(RecoveryStage.Ready, server.Availability.Stage);
            Assert.All(sessions, s => Assert.True(server.Session(s).LastReply!.InLog));
            Assert.Equal(0, server.Runtime.Sessions.Memory.HeldBytes);
            var executions = _behavior.Count("page:y0");
            for (var i = 0; i < sessions.Count; i++)
            {
                var (status, body, retry) = await PageAsync(server, sessions[i], 2, "y" + i, 50_000);
                Assert.Equal(HttpStatusCode.OK, status);
                Assert.Equal(PageRequest.Content("y" + i, 2, 50_000), body);
                Assert.Equal(headers[i], Header(retry, "X-Page"));
            }

            Assert.Equal(executions, _behavior.Count("page:y0"));
            var (next, nextBody, _) = await PageAsync(server, sessions[0], 3, "z", 100);
            Assert.Equal(HttpStatusCode.OK, next);
            Assert.Equal(PageRequest.Content("z", 3, 100), nextBody);
        }
    }

    [Fact]
    public async Task SessionCheckpoint_ReferencesTheReplyInTheLog_AndTruncationKeepsIt_ThroughACrash()
    {
        string session;
        long replyFirst;
        await using (var server = await TestServer.StartAsync(_dir.Path, o =>
        {
            o.MaxBufferedReplyBytes = 4096;
            o.SessionCheckpointBytes = 1024;
            o.IdleCheckpointAfter = 100;
        }, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            for (var i = 1; i <= 5; i++)
            {
                await PageAsync(server, session, i, "c" + i, 20_000);
            }

            // A session checkpoint now (as after a request that crossed SessionCheckpointBytes) references the reply in the
            // log instead of copying it: the session's recovery, and so the log, starts no later than that reply.
            Assert.True(PersistentServices.Checkpoints.SessionCheckpoints.Take(server.Runtime.Log, server.Session(session)) > 0);
            var held = server.Session(session).LastReply!;
            replyFirst = held.Location.FirstLsn;
            Assert.True(held.InLog);
            Assert.Equal(replyFirst, server.Session(session).RetainLsn);
            Assert.True(server.Session(session).RecoveryLsn > replyFirst, "recovery need not scan the reply");

            var other = await server.StartSessionAsync();
            for (var i = 1; i <= 20; i++)
            {
                await PageAsync(server, other, i, "o" + i, 20_000);
            }

            await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            // Truncated up to the reply exactly: everything before it went, the reply stayed.
            Assert.Equal(replyFirst, server.Runtime.Log.BeginAddress);
            var (_, retried, _) = await PageAsync(server, session, 5, "c5", 20_000);
            Assert.Equal(PageRequest.Content("c5", 5, 20_000), retried);
            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.MaxBufferedReplyBytes = 4096, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.True(server.Runtime.Analysis!.SessionsFromCheckpoints >= 1);
            Assert.True(server.Runtime.Analysis.ScannedFrom > replyFirst, "recovery scanned the reply it only references");
            var (status, retried, retry) = await PageAsync(server, session, 5, "c5", 20_000);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(PageRequest.Content("c5", 5, 20_000), retried);
            Assert.Equal("true", Header(retry, "PS-Replayed"));
            Assert.Equal(1, _behavior.Count("page:c5"));
        }
    }

    [Fact]
    public async Task IdleSession_ItsReplyIsCopiedForward_SoTheLogIsTruncatedPastTheOriginal_AndRetriesStillGetIt()
    {
        string idle;
        long original;
        await using (var server = await TestServer.StartAsync(_dir.Path, o =>
        {
            o.MaxBufferedReplyBytes = 4096;
            o.IdleCheckpointAfter = 2;
        }, behavior: _behavior))
        {
            server.Runtime.Sessions.Memory.MinRelocationWindowBytes = 0;
            idle = await server.StartSessionAsync();
            await PageAsync(server, idle, 1, "idle", 150_000);
            original = server.Session(idle).LastReply!.Location.FirstLsn;
            var busy = await server.StartSessionAsync();

            // The log grows past the relocation window (twice the log bytes of the replies kept there) while service
            // checkpoints run; the idle session's checkpoints then copy its reply forward.
            for (var round = 1; round <= 8; round++)
            {
                await PageAsync(server, busy, round, "busy" + round, 300_000);
                await server.Runtime.Checkpointer.TakeAsync(cleanShutdown: false, Ct);
            }

            var moved = server.Session(idle).LastReply!;
            Assert.True(moved.InLog);
            Assert.True(moved.Location.FirstLsn > original, "the idle session's reply was not copied forward");
            Assert.True(server.Runtime.Log.BeginAddress > original, "the log was not truncated past the original reply");
            var (status, retried, _) = await PageAsync(server, idle, 1, "idle", 150_000);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(PageRequest.Content("idle", 1, 150_000), retried);
            await server.CrashAsync();
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.MaxBufferedReplyBytes = 4096, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            var (status, retried, _) = await PageAsync(server, idle, 1, "idle", 150_000);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(PageRequest.Content("idle", 1, 150_000), retried);
            Assert.Equal(1, _behavior.Count("page:idle"));
        }
    }

    [Fact]
    public async Task GracefulStop_CheckpointsReferenceRepliesInTheLog_TheNextStartReplaysNothingAndServesThem()
    {
        string session;
        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.MaxBufferedReplyBytes = 4096, behavior: _behavior))
        {
            session = await server.StartSessionAsync();
            await PageAsync(server, session, 1, "g", 30_000);
        }

        await using (var server = await TestServer.StartAsync(_dir.Path, o => o.MaxBufferedReplyBytes = 4096, behavior: _behavior))
        {
            await server.RecoveryCompletion;
            Assert.Equal(0, server.Runtime.Analysis!.Requests);
            Assert.True(server.Session(session).LastReply!.InLog);
            var (status, retried, _) = await PageAsync(server, session, 1, "g", 30_000);
            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(PageRequest.Content("g", 1, 30_000), retried);
        }
    }
}
