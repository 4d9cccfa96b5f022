using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Domain;
using PersistentServices.Http;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.Http;

/// <summary>The steps live execution and replay share (<see cref="LoggedRequestSteps"/>), one at a time, on a running service's log and session.</summary>
public sealed class LoggedRequestStepsTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task MergeDv_TheArrivedDvJoinsTheSessions_NullMergesNothing()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var session = server.Session(await server.StartSessionAsync());
        var before = session.Dv;

        LoggedRequestSteps.MergeDv(server.Runtime, session, null);
        Assert.Same(before, session.Dv);

        LoggedRequestSteps.MergeDv(server.Runtime, session, DependencyVector.Empty.With("B", new StateId(2, 4096)));
        LoggedRequestSteps.MergeDv(server.Runtime, session, DependencyVector.Empty.With("C", new StateId(1, 512)));

        Assert.Equal(new StateId(2, 4096), session.Dv["B"]);
        Assert.Equal(new StateId(1, 512), session.Dv["C"]);
    }

    [Fact]
    public async Task BeginExecution_AtTheLoggedPosition_LiveWithoutCursor_ReplayWithIt()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var session = server.Session(await server.StartSessionAsync());
        var position = new LoggedPosition(requestLsn: server.Runtime.Log.TailAddress, sequence: 1);

        var live = LoggedRequestSteps.BeginExecution(server.Runtime, session, position, cursor: null);
        var cursor = new ReplayCursor([], allowLiveTail: false, session.TraceTag, 1, position.RequestLsn);
        var replayed = LoggedRequestSteps.BeginExecution(server.Runtime, session, position, cursor);

        Assert.Same(position, live.Position);
        Assert.Same(session, live.Session);
        Assert.Same(server.Runtime.Log, live.Log);
        Assert.Null(live.Cursor);
        Assert.Same(cursor, replayed.Cursor);
        Assert.Same(position, replayed.Position);
    }

    [Fact]
    public async Task LogReply_AppendsTheShortReplyRecord_AndRecordsItsHashForReplay()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        await server.RecoveryCompletion;
        var session = server.Session(await server.StartSessionAsync());
        var position = new LoggedPosition(requestLsn: server.Runtime.Log.TailAddress, sequence: 4);
        var execution = LoggedRequestSteps.BeginExecution(server.Runtime, session, position, cursor: null);
        var reply = new BufferedReply(201, [], [1, 2, 3]);

        var lsn = LoggedRequestSteps.LogReply(server.Runtime, execution, reply);

        Assert.True(session.LoggedReplies.TryGetValue(4, out var logged));
        Assert.Equal(201, logged.StatusCode);
        Assert.Equal(reply.Hash, logged.Hash);
        await server.Runtime.Log.WaitUntilDurableAsync(lsn, Ct);
        var record = await server.Runtime.Log.ReadAsync(lsn, Ct);
        Assert.Equal(RecordKind.Reply, record.Kind);
        var sent = record.Parse(ReplySent.Parser);
        Assert.Equal(4, sent.Sequence);
        Assert.Equal(201, sent.StatusCode);
        Assert.Equal(position.RequestLsn, sent.RequestLsn);
        Assert.Equal(session.IdBytes, sent.SessionId);
        Assert.Equal(reply.Hash, sent.ReplyHash.ToByteArray());
    }
}
