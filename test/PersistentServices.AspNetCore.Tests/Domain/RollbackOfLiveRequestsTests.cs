using System.Net;
using System.Text.Json;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Domain;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;

namespace PersistentServices.AspNetCore.Tests.Domain;

/// <summary>
/// Issue 33's LoggedReplies question: a session rolled back (orphan recovery) replays requests that ran live, in this
/// process, with no restart in between, so the reply hashes its replay compares with and its test for a request the
/// crash cut short come from what live execution recorded (<c>Session.LoggedReplies</c>), not from an analysis scan.
/// Until live execution recorded them, the replay compared nothing and took the session's last request, answered and
/// logged, for one cut short: it ran it live again and logged its reply a second time.
/// </summary>
/// <remarks>
/// The rollback is driven through <see cref="OrphanRecovery"/> directly (as a learned recovered state number would), on
/// a service outside any domain: no record of the session depends on the lost state, so the replay goes through every
/// request, as a rollback replays the requests before the first orphan record.
/// </remarks>
public sealed class RollbackOfLiveRequestsTests : IDisposable
{
    private static readonly RecoveredStateNumber Lost = new("B", new StateId(1, 4096));

    private readonly TempDirectory _dir = new();
    private readonly TestBehavior _behavior = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task Rollback_LastRequestRanLive_IsReplayedNotRunLiveAgain_ItsReplyLoggedOnce()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        await server.RecoveryCompletion;
        var id = await server.StartSessionAsync();
        await server.SendAsync(HttpMethod.Post, "/cart/add", id, 1, new { item = "a" });
        var (_, lastBody) = await server.SendAsync(HttpMethod.Post, "/cart/add", id, 2, new { item = "b" });
        var session = server.Session(id);
        Assert.True(session.LoggedReplies.ContainsKey(2), "live execution did not record the reply hash of request 2");

        await RollBackAsync(server, session);

        Assert.Null(session.Diverged);
        Assert.Equal(1, await CountReplyRecordsAsync(server, session.IdBytes, sequence: 2));
        var (duplicate, duplicateBody) = await server.SendAsync(HttpMethod.Post, "/cart/add", id, 2, new { item = "b" });
        Assert.Equal(HttpStatusCode.OK, duplicate.StatusCode);
        Assert.Equal(lastBody.GetRawText(), duplicateBody.GetRawText());
        var (next, nextBody) = await server.SendAsync(HttpMethod.Post, "/cart/add", id, 3, new { item = "c" });
        Assert.Equal(HttpStatusCode.OK, next.StatusCode);
        Assert.Equal(["a", "b", "c"], nextBody.GetProperty("items").EnumerateArray().Select(e => e.GetString()!).ToArray());
    }

    [Fact]
    public async Task Rollback_ReplayOfLiveRequestsAnswersDifferently_IsADivergence_TheHashesWereCompared()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        await server.RecoveryCompletion;
        var id = await server.StartSessionAsync();
        await server.SendAsync(HttpMethod.Post, "/cart/add", id, 1, new { item = "a" });
        await server.SendAsync(HttpMethod.Post, "/cart/add", id, 2, new { item = "b" });
        var session = server.Session(id);

        // The endpoint now answers differently (as code that reads the clock would): its replay's replies differ from the logged ones.
        _behavior.Salt = "-changed";
        await RollBackAsync(server, session);

        var failure = await Assert.ThrowsAnyAsync<Exception>(() => session.Ready);
        var divergence = Assert.IsType<ReplayDivergenceException>(failure);
        Assert.Equal(1, divergence.Sequence);
        Assert.Equal(1, await CountReplyRecordsAsync(server, session.IdBytes, sequence: 2));
    }

    [Fact]
    public async Task Rollbacks_ForOneLoss_PastMaxRollbacksPerLoss_QuarantineTheSession_AndEndTheLoop()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        await server.RecoveryCompletion;
        var id = await server.StartSessionAsync();
        await server.SendAsync(HttpMethod.Post, "/cart/add", id, 1, new { item = "a" });
        var session = server.Session(id);

        // A session that depends on the same lost state after every rollback (only a defect makes it so): each rollback
        // up to the cap runs, and the one after it quarantines the session instead of rolling back again.
        for (var rollback = 1; rollback <= OrphanRecovery.MaxRollbacksPerLoss; rollback++)
        {
            await RollBackAsync(server, session);
            Assert.Null(session.Diverged);
        }

        await RollBackAsync(server, session);
        var divergence = Assert.IsType<ReplayDivergenceException>(session.Diverged);
        Assert.Contains($"again after each of {OrphanRecovery.MaxRollbacksPerLoss} rollbacks", divergence.Message, StringComparison.Ordinal);
        var (refused, _) = await server.SendAsync(HttpMethod.Post, "/cart/add", id, 2, new { item = "b" });
        Assert.Equal(HttpStatusCode.InternalServerError, refused.StatusCode); // session-diverged
    }

    [Fact]
    public async Task Rollbacks_ForDifferentLosses_AreCountedApart_NoQuarantine()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, behavior: _behavior);
        await server.RecoveryCompletion;
        var id = await server.StartSessionAsync();
        await server.SendAsync(HttpMethod.Post, "/cart/add", id, 1, new { item = "a" });
        var session = server.Session(id);

        // Each crash of a member is a loss of its own: a session rolled back once per crash, however many crashes, is fine.
        for (var crash = 1; crash <= OrphanRecovery.MaxRollbacksPerLoss + 4; crash++)
        {
            await RollBackAsync(server, session, new RecoveredStateNumber("B", new StateId(crash, 4096)));
        }

        Assert.Null(session.Diverged);
        var (next, body) = await server.SendAsync(HttpMethod.Post, "/cart/add", id, 2, new { item = "b" });
        Assert.Equal(HttpStatusCode.OK, next.StatusCode);
        Assert.Equal(["a", "b"], body.GetProperty("items").EnumerateArray().Select(e => e.GetString()!).ToArray());
    }

    private static async Task RollBackAsync(TestServer server, PersistentServices.Sessions.Session session, RecoveredStateNumber? lost = null)
    {
        var orphans = server.App.Services.GetRequiredService<OrphanRecovery>();
        orphans.Schedule(session, lost ?? Lost);
        await orphans.WhenIdleAsync().WaitAsync(TimeSpan.FromSeconds(30), Ct);
    }

    private static async Task<int> CountReplyRecordsAsync(TestServer server, Google.Protobuf.ByteString sessionId, long sequence)
    {
        var log = server.Runtime.Log;
        if (log.TailAddress > log.DurableUntil)
        {
            await log.WaitUntilDurableAsync(log.TailAddress - 1, Ct);
        }

        var count = 0;
        await foreach (var record in log.ScanAsync(log.BeginAddress, cancellationToken: Ct))
        {
            if (record.Kind == RecordKind.Reply && record.Parse(ReplySent.Parser) is var reply && reply.SessionId == sessionId && reply.Sequence == sequence)
            {
                count++;
            }
        }

        return count;
    }
}
