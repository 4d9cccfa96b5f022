using PersistentServices.Sessions;

namespace PersistentServices.Tests.Sessions;

/// <summary>
/// The numbering of a session across an orphan rollback ([MSP §4.1]): the rollback resets the session to its recovery
/// point and replays its position stream; a client's next number must be admitted afterwards, never refused as a gap.
/// </summary>
public sealed class SessionRollbackTests
{
    private static Session RecoveredWithRequests(int count)
    {
        var session = new Session(SessionId.NewRandom(), [], DateTimeOffset.UnixEpoch, replaying: true);
        for (var n = 1; n <= count; n++)
        {
            session.RecoverRequest(64 * n, n, [(byte)n], RequestIdentity.CurrentVersion, DateTimeOffset.UnixEpoch);
            session.LoggedReplies[n] = (200, [(byte)n]);
        }

        session.FinishReplay(new BufferedReply(200, [], [(byte)count]));
        return session;
    }

    [Fact]
    public void Rollback_ReplayThatCutsNothing_NumberingIsTheLastReplayedRequests()
    {
        var session = RecoveredWithRequests(3);
        session.BeginRollback();
        session.ResetToRecoveryPoint(null, 1);
        Assert.Equal(0, session.LastSequence);

        // The replay went through all three requests and found no orphan record.
        session.ResumeNumberingAfterReplay();
        session.FinishReplay(new BufferedReply(200, [], [3]));

        Assert.Equal(3, session.LastSequence);
        Assert.Equal(AdmitOutcome.Duplicate, session.Admit(3, [3]).Outcome);
        Assert.Equal(AdmitOutcome.Execute, session.Admit(4, [4]).Outcome);
    }

    [Fact]
    public void Rollback_LoggedRepliesStayKnown_SoTheLastRequestIsNotTakenForOneCutShort()
    {
        var session = RecoveredWithRequests(2);
        session.BeginRollback();
        session.ResetToRecoveryPoint(null, 1);

        Assert.True(session.LoggedReplies.ContainsKey(1));
        Assert.True(session.LoggedReplies.ContainsKey(2));
        Assert.Equal(2, session.PositionStream.Count);
    }

    [Fact]
    public void Admit_WhileARollbackReplays_IsNotReady_NotAGap()
    {
        var session = RecoveredWithRequests(5);

        // A request waited for the session (ready), then the rollback began and reset the numbering before it was admitted.
        session.BeginRollback();
        session.ResetToRecoveryPoint(null, 1);
        Assert.Equal(AdmitOutcome.NotReady, session.Admit(6, [6]).Outcome);

        session.ResumeNumberingAfterReplay();
        session.FinishReplay(new BufferedReply(200, [], [5]));
        Assert.Equal(AdmitOutcome.Execute, session.Admit(6, [6]).Outcome);
    }

    [Fact]
    public void ReplayEndingInAnAbandonedRequest_LeavesItUnanswered_ARetryFindsNoReply()
    {
        var session = RecoveredWithRequests(3);
        session.BeginRollback();
        session.ResetToRecoveryPoint(null, 1);
        session.FinishReplayUnanswered();

        Assert.True(session.Ready.IsCompletedSuccessfully);
        var retry = session.Admit(3, [3]);
        Assert.Equal(AdmitOutcome.Duplicate, retry.Outcome);
        Assert.Null(retry.Reply);
    }
}
