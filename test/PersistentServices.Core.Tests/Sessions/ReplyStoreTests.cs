using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Sessions;

public sealed class ReplyStoreTests
{
    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static BufferedReply Reply(int size)
    {
        var body = new byte[size];
        new Random(size).NextBytes(body);
        return new BufferedReply(201, [new("Content-Type", ["application/octet-stream"]), new("X-Page", ["a", "b"])], body);
    }

    private static (Session Session, LoggedPosition Position) NewSession(SessionTable table)
    {
        var session = new Session(SessionId.NewRandom(), [], DateTimeOffset.UnixEpoch, replaying: false);
        table.TryAdd(session);
        session.Admit(1, [1]);
        return (session, new LoggedPosition(100, 1));
    }

    [Theory]
    [InlineData(1000)]      // one record
    [InlineData(20_000)]    // parts: the small log's records hold at most 4096 bytes
    public async Task AppendReply_AboveTheThreshold_IsLoggedInFull_AndReadBackExactly(int size)
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var table = new SessionTable(new SessionMemory(1 << 20, 100));
        var (session, position) = NewSession(table);
        var reply = Reply(size);

        var lsn = SessionRecords.AppendReply(log, session, position, reply);
        session.Complete(reply);
        await log.WaitUntilDurableAsync(lsn, Ct);

        var held = session.LastReply!;
        Assert.True(held.InLog);
        Assert.Equal(lsn, held.Location.Lsn);
        Assert.Equal(size > 4000, held.Location.FirstLsn < lsn);
        // The reply's records hold the log (truncation stops below them), also once it was copied forward while a
        // duplicate was reading the old copy.
        session.RecoveryLsn = lsn + 1_000_000;
        Assert.Equal(held.Location.FirstLsn, session.RetainLsn);
        var admission = session.Admit(1, [1]);
        Assert.Equal(AdmitOutcome.Duplicate, admission.Outcome);
        session.RelocateReply(new ReplyLocation(lsn + 500_000, lsn + 500_000, held.Location.LogBytes));
        Assert.Equal(held.Location.FirstLsn, session.RetainLsn);
        var read = await session.ReadHeldReplyAsync(log, admission.Reply!, Ct);
        Assert.Equal(lsn + 500_000, session.RetainLsn);
        Assert.Equal(reply.Body, read.Body);
        Assert.Equal(reply.StatusCode, read.StatusCode);
        Assert.Equal(["a", "b"], read.Headers.Single(h => h.Key == "X-Page").Value);
        Assert.Equal(reply.Hash, read.Hash);
        Assert.Equal(0, table.Memory.HeldBytes);
    }

    [Fact]
    public async Task AppendReply_Small_KeepsTheShortRecord()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var (session, position) = NewSession(new SessionTable(new SessionMemory(1 << 20, 4096)));

        var lsn = SessionRecords.AppendReply(log, session, position, Reply(100));
        await log.WaitUntilDurableAsync(lsn, Ct);

        var record = (await log.ReadAsync(lsn, Ct)).Parse(ReplySent.Parser);
        Assert.Null(record.FullReply);
        Assert.Empty(record.BodyPartLsns);
    }

    [Fact]
    public async Task RelocateAsync_CopiesTheReplyAndItsParts_TheCopyReadsBackTheSame()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var (session, position) = NewSession(new SessionTable(new SessionMemory(1 << 20, 100)));
        var reply = Reply(10_000);
        var lsn = SessionRecords.AppendReply(log, session, position, reply);
        await log.WaitUntilDurableAsync(lsn, Ct);

        var copy = await ReplyStore.RelocateAsync(log, reply.Location!.Value, Ct);

        Assert.True(copy.FirstLsn > lsn);
        Assert.True(copy.Lsn > copy.FirstLsn);
        var read = await ReplyStore.ReadAsync(log, copy, Ct);
        Assert.Equal(reply.Body, read.Body);
    }

    [Fact]
    public async Task ReadAsync_ARecordThatIsNotAReply_IsCorruption()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var lsn = log.Append(RecordKind.Payload, new Payload { Tag = 1, Data = ByteString.CopyFrom(1, 2, 3) });
        await log.WaitUntilDurableAsync(lsn, Ct);

        var error = await Assert.ThrowsAsync<LogCorruptionException>(() => ReplyStore.ReadAsync(log, new ReplyLocation(lsn, lsn), Ct));
        Assert.Equal(lsn, error.Address);
    }
}
