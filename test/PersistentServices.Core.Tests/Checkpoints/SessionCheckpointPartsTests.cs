using Google.Protobuf;
using PersistentServices.Checkpoints;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Checkpoints;

/// <summary>
/// Session checkpoints whose state does not fit one record (docs/checkpoints.md "A state larger than a record"): the
/// state goes into parts written before the checkpoint, the log is kept from the first part, and reading it back checks
/// every part.
/// </summary>
public sealed class SessionCheckpointPartsTests
{
    private static readonly SessionStateKey<string> Text = new("Tests.Large.Text");
    private static readonly SessionStateKey<long> Count = new("Tests.Large.Count");

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static Session NewSession(int textChars)
    {
        var session = new Session(SessionId.NewRandom(), [1, 2], DateTimeOffset.UnixEpoch, replaying: false);
        session.SetState(Text, string.Create(textChars, 0, (span, _) =>
        {
            for (var i = 0; i < span.Length; i++)
            {
                span[i] = (char)('a' + (i * 7 % 26));
            }
        }));
        session.SetState(Count, 42);
        return session;
    }

    private static async Task<SessionCheckpoint> ReadBackAsync(DurableLog log, long lsn)
    {
        await log.WaitUntilDurableAsync(lsn, Ct);
        return (await log.ReadAsync(lsn, Ct)).Parse(SessionCheckpoint.Parser);
    }

    [Theory]
    [InlineData(100)]     // one record
    [InlineData(20_000)]  // parts: the small log's records hold at most 4096 bytes
    public async Task Take_StateOfAnySize_IsReadBackExactly_AndTheLogIsKeptFromItsFirstRecord(int textChars)
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var session = NewSession(textChars);

        var lsn = SessionCheckpoints.Take(log, session);

        var record = await ReadBackAsync(log, lsn);
        var inParts = textChars > 4000;
        Assert.Equal(inParts, record.StatePartLsns.Count > 1);
        Assert.Equal(inParts, SessionCheckpoints.StateInParts(record));
        Assert.Equal(lsn, session.RecoveryLsn);
        Assert.Equal(inParts ? record.StatePartLsns[0] : lsn, session.RetainLsn);
        Assert.True(record.StatePartLsns.All(part => part < lsn));

        var restored = SessionCheckpoints.Restore(record, lsn, session.Codec);
        Assert.Equal(inParts, restored.PendingCheckpoint is not null);
        Assert.Equal(session.RetainLsn, restored.RetainLsn);
        var table = new SessionTable(new SessionMemory(1 << 20, 4096));
        table.TryAdd(restored);
        Assert.Equal(inParts ? 1 : 0, await SessionCheckpoints.ReadPendingStatesAsync(log, table, Ct));
        Assert.Null(restored.PendingCheckpoint);
        Assert.Equal(session.GetState(Text), restored.GetState(Text));
        Assert.Equal(42, restored.GetState(Count));

        // A later checkpoint in one record lets the parts go.
        session.SetState(Text, "small");
        var next = SessionCheckpoints.Take(log, session);
        Assert.Equal(next, session.RetainLsn);
    }

    [Fact]
    public async Task ReadState_APartThatIsNotOne_OrOfAnotherSession_OrMissingBytes_IsCorruptionNamingTheLsn()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var session = NewSession(20_000);
        var lsn = SessionCheckpoints.Take(log, session);
        var other = NewSession(20_000);
        var otherLsn = SessionCheckpoints.Take(log, other);
        var record = await ReadBackAsync(log, lsn);
        var otherRecord = await ReadBackAsync(log, otherLsn);

        // The checkpoint itself where a part should be.
        var notAPart = record.Clone();
        notAPart.StatePartLsns[1] = lsn;
        var ex = await Assert.ThrowsAsync<LogCorruptionException>(async () => await SessionCheckpoints.ReadStateAsync(log, notAPart, lsn, Ct));
        Assert.Contains($"LSN {lsn}", ex.Message, StringComparison.Ordinal);

        var foreign = record.Clone();
        foreign.StatePartLsns[1] = otherRecord.StatePartLsns[1];
        ex = await Assert.ThrowsAsync<LogCorruptionException>(async () => await SessionCheckpoints.ReadStateAsync(log, foreign, lsn, Ct));
        Assert.Contains($"LSN {otherRecord.StatePartLsns[1]}", ex.Message, StringComparison.Ordinal);

        var short_ = record.Clone();
        short_.StatePartLsns.RemoveAt(short_.StatePartLsns.Count - 1);
        ex = await Assert.ThrowsAsync<LogCorruptionException>(async () => await SessionCheckpoints.ReadStateAsync(log, short_, lsn, Ct));
        Assert.Contains("bytes of its", ex.Message, StringComparison.Ordinal);

        // Read in full, a second read does nothing.
        await SessionCheckpoints.ReadStateAsync(log, record, lsn, Ct);
        Assert.False(SessionCheckpoints.StateInParts(record));
        Assert.Equal(2, record.State.Count);
        await SessionCheckpoints.ReadStateAsync(log, record, lsn, Ct);
        Assert.Equal(2, record.State.Count);
    }

    [Fact]
    public async Task Append_ACheckpointTooLargeEvenWithoutItsState_IsRefusedWithAClearError_AndNothingIsLogged()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var session = NewSession(100);
        var record = SessionCheckpoints.Capture(session);
        record.LastReply = new LoggedReply { StatusCode = 200, Body = ByteString.CopyFrom(new byte[10_000]) };
        var tail = log.TailAddress;

        var ex = Assert.Throws<InvalidOperationException>(() => SessionCheckpoints.Append(log, record));
        Assert.Contains("even without its state", ex.Message, StringComparison.Ordinal);
        Assert.Equal(tail, log.TailAddress);
        Assert.Equal(2, record.State.Count);
    }
}
