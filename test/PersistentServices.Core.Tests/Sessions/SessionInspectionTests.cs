using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;
using PersistentServices.Tests.TestSupport;

namespace PersistentServices.Tests.Sessions;

/// <summary>
/// The steps the operator's endpoints and <c>psctl sessions</c> share (docs/operations.md, "Operator repair"): naming a
/// session by id or trace tag, the state shown, the records of one session in a log, and the release checkpoint.
/// </summary>
public sealed class SessionInspectionTests
{
    private static readonly DateTimeOffset Now = new(2026, 11, 27, 12, 0, 0, TimeSpan.Zero);

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private static Session NewSession(int ownerVersion = SessionOwner.CurrentVersion, bool replaying = false) =>
        new(SessionId.NewRandom(), ownerVersion == KeySessions.OwnerVersion ? [1, 2, 3, 4, 5, 6, 7] : [], Now, replaying, ownerVersion);

    /// <summary>A checkpoint record of <paramref name="session"/> after request 1, with <paramref name="quarantined"/> and <paramref name="reply"/>.</summary>
    private static SessionCheckpoint Checkpoint(Session session, string quarantined = "", BufferedReply? reply = null) => new()
    {
        SessionId = session.IdBytes,
        Owner = ByteString.CopyFrom(session.Owner),
        OwnerVersion = (uint)session.OwnerVersion,
        LastSequence = 1,
        LastRequestHash = ByteString.CopyFrom(new byte[32]),
        LastRequestHashVersion = 2,
        LastActivityUnixMs = Now.ToUnixTimeMilliseconds(),
        StartedAtUnixMs = Now.ToUnixTimeMilliseconds(),
        LastReply = reply?.ToLogged(),
        Quarantined = quarantined,
    };

    [Fact]
    public void Find_ByIdOrTraceTag_FindsTheLiveSession_OtherwiseSaysWhy()
    {
        var table = new SessionTable();
        var session = NewSession();
        var other = NewSession();
        table.TryAdd(session);
        table.TryAdd(other);

        Assert.Equal(SessionMatch.Found, SessionInspection.Find(table, session.IdText, out var byId));
        Assert.Same(session, byId);
        Assert.Equal(SessionMatch.Found, SessionInspection.Find(table, session.TraceTag.ToUpperInvariant(), out var byTag));
        Assert.Same(session, byTag);
        Assert.Equal(SessionMatch.NotFound, SessionInspection.Find(table, SessionId.NewRandom().ToString(), out _));
        Assert.Equal(SessionMatch.NotFound, SessionInspection.Find(table, "0123456789ab", out _));
        Assert.Equal(SessionMatch.Malformed, SessionInspection.Find(table, "0123456789a", out _));
        Assert.Equal(SessionMatch.Malformed, SessionInspection.Find(table, "0123456789ag", out _));
        Assert.Equal(SessionMatch.Malformed, SessionInspection.Find(table, "", out _));

        Assert.True(session.TryEnd());
        Assert.Equal(SessionMatch.NotFound, SessionInspection.Find(table, session.TraceTag, out _));
    }

    [Fact]
    public void Summarize_SaysTheState_KindAndOwnerHash_NeverTheId()
    {
        var fresh = NewSession();
        Assert.Equal("never-used", SessionInspection.StateOf(fresh, offline: false));

        var live = NewSession();
        live.ContinueFromCheckpoint(100, Checkpoint(live, reply: new BufferedReply(200, [], [1, 2, 3])));
        Assert.Equal("live", SessionInspection.StateOf(live, offline: false));

        var replaying = NewSession(replaying: true);
        replaying.ContinueFromCheckpoint(100, Checkpoint(replaying));
        Assert.Equal("replaying", SessionInspection.StateOf(replaying, offline: false));
        Assert.Equal("live", SessionInspection.StateOf(replaying, offline: true)); // offline nothing replays: its requests are counted

        var quarantined = NewSession();
        quarantined.ContinueFromCheckpoint(200, Checkpoint(quarantined, quarantined: "diverged at request 1"));
        var summary = SessionInspection.Summarize(quarantined, offline: true);
        Assert.Equal(("quarantined", "diverged at request 1", 1L, 200L), (summary.State, summary.QuarantineReason, summary.LastSequence, summary.RecoveryLsn));
        Assert.Equal("", summary.Owner);
        Assert.Equal(quarantined.TraceTag, summary.Tag);
        Assert.DoesNotContain(quarantined.IdText, summary.ToString(), StringComparison.Ordinal);

        var key = NewSession(KeySessions.OwnerVersion);
        key.ContinueFromCheckpoint(300, Checkpoint(key, reply: QuarantineRepair.OperatorExpiredKeyReply()));
        var keySummary = SessionInspection.Summarize(key, offline: false);
        Assert.Equal(("key", "expired-key", "01020304050607"[..12]), (keySummary.Kind, keySummary.State, keySummary.Owner));
    }

    [Fact]
    public void ReleaseCheckpoint_KeepsTheNumbering_DropsStateAndQuarantine_AnswersTheLastRequestWithTheStandIn()
    {
        var session = NewSession();
        var record = Checkpoint(session, quarantined: "diverged");
        record.State.Add(new SessionStateValue { Name = "Cart.Items", Value = ByteString.CopyFromUtf8("[\"a\"]") });
        session.ContinueFromCheckpoint(100, record);
        Assert.Equal(RepairOutcome.Ended, QuarantineRepair.OutcomeOf(session, RepairAction.Discard));
        Assert.Equal(RepairOutcome.Released, QuarantineRepair.OutcomeOf(session, RepairAction.Release));

        var released = QuarantineRepair.ReleaseCheckpoint(session, QuarantineRepair.StandInFor(session));

        Assert.Equal("", released.Quarantined);
        Assert.Empty(released.State);
        Assert.Equal(1, released.LastSequence);
        Assert.Equal(record.LastRequestHash, released.LastRequestHash);
        Assert.Equal(410, released.LastReply.StatusCode);
        Assert.Contains("session-released", released.LastReply.Body.ToStringUtf8(), StringComparison.Ordinal);

        var key = NewSession(KeySessions.OwnerVersion);
        key.ContinueFromCheckpoint(100, Checkpoint(key, quarantined: "diverged"));
        Assert.Equal(RepairOutcome.ExpiredKey, QuarantineRepair.OutcomeOf(key, RepairAction.Discard)); // a key is never ended: it would run again
        Assert.True(KeySessions.IsExpiredMarker(BufferedReply.FromLogged(QuarantineRepair.ReleaseCheckpoint(key, QuarantineRepair.StandInFor(key)).LastReply)));
    }

    [Fact]
    public async Task ReadHistory_ListsOnlyThatSessionsRecords_CountsWhatEachRequestWrote_BodiesOnlyWhenAsked()
    {
        using var dir = new TempDirectory();
        await using var log = await DurableLog.OpenAsync(LogTestOptions.Small(dir.Path), cancellationToken: Ct);
        var session = NewSession();
        var other = NewSession();
        foreach (var s in new[] { session, other })
        {
            log.Append(RecordKind.SessionStarted, new SessionStarted { SessionId = s.IdBytes, StartedAtUnixMs = 1 });
        }

        for (var sequence = 1; sequence <= 3; sequence++)
        {
            foreach (var s in new[] { session, other })
            {
                log.Append(RecordKind.Request, new LoggedRequest
                {
                    SessionId = s.IdBytes,
                    Sequence = sequence,
                    Method = "POST",
                    Path = "/pay",
                    QueryString = "?token=t",
                    Body = ByteString.CopyFrom(sequence == 2 ? [0, 1, 2] : "{\"n\":1}"u8.ToArray()),
                });
                log.Append(RecordKind.SharedWrite, new SharedWrite { Variable = "v", SessionId = s.IdBytes, Sequence = sequence });
                log.Append(RecordKind.NondeterministicValue, new NondeterministicValue { SessionId = s.IdBytes, Sequence = sequence });
                log.Append(RecordKind.Reply, new ReplySent { SessionId = s.IdBytes, Sequence = sequence, StatusCode = 200 + sequence });
            }
        }

        await log.WaitUntilDurableAsync(log.TailAddress - 1, Ct);

        var history = await SessionInspection.ReadHistoryAsync(log, session, log.BeginAddress, bodies: false, max: 100, Ct);
        Assert.Equal(["started", "request", "reply", "request", "reply", "request", "reply"], history.Records.Select(r => r.Kind));
        Assert.All(history.Records.Where(r => r.Kind == "request"), r => Assert.Equal((2, "/pay", 7 - ((r.Sequence == 2) ? 4 : 0), null, null), (r.Effects, r.Path, r.BodyBytes, r.Body, r.Query)));
        Assert.Equal([201, 202, 203], history.Records.Where(r => r.Kind == "reply").Select(r => r.Status!.Value));
        Assert.False(history.Cut);

        var withBodies = await SessionInspection.ReadHistoryAsync(log, session, log.BeginAddress, bodies: true, max: 100, Ct);
        var requests = withBodies.Records.Where(r => r.Kind == "request").ToList();
        Assert.Equal("{\"n\":1}", requests[0].Body);
        Assert.Equal("?token=t", requests[0].Query);
        Assert.Equal((null, "AAEC"), (requests[1].Body, requests[1].BodyBase64)); // not text: base64

        var cut = await SessionInspection.ReadHistoryAsync(log, session, log.BeginAddress, bodies: false, max: 2, Ct);
        Assert.Equal(2, cut.Records.Count);
        Assert.True(cut.Cut);
    }
}
