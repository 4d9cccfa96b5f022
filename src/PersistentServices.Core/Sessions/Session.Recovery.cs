namespace PersistentServices.Sessions;

/// <summary>Recovery: what the analysis scan found for the session, and the end of its replay.</summary>
internal sealed partial class Session
{
    /// <summary>Analysis scan: a logged request of this session.</summary>
    public void RecoverRequest(long lsn, long sequence, byte[] requestHash, int requestHashVersion, DateTimeOffset receivedAt)
    {
        PositionStream.Add(new LoggedPosition(lsn, sequence, requestHash, requestHashVersion));
        lock (_gate)
        {
            LastSequence = sequence;
        }

        LastRequestHash = requestHash;
        LastRequestHashVersion = requestHashVersion;
        LastActivity = receivedAt;
        NoteLogged(lsn, 0);
    }

    /// <summary>Analysis scan: the reply of request <paramref name="sequence"/> was logged in full at <paramref name="location"/>.</summary>
    public void RecoverFullReply(long sequence, ReplyLocation location) => _loggedFullReply = (sequence, location);

    /// <summary>
    /// Analysis scan, at an end-of-skip record: a reply logged in full at or after <paramref name="orphanLsn"/> belongs to
    /// the skipped records, so replay's reply is kept instead.
    /// </summary>
    public void ForgetFullRepliesFrom(long orphanLsn)
    {
        if (_loggedFullReply is { } full && (full.Location.FirstLsn >= orphanLsn || full.Location.Lsn >= orphanLsn))
        {
            _loggedFullReply = null;
        }
    }

    /// <summary>
    /// Replay finished: <paramref name="lastReply"/> (the replayed reply of the last request) becomes the buffered reply;
    /// null when nothing followed the session's checkpoint, whose reply stays. When the log holds that reply in full, the
    /// session keeps only its location: a retry gets the logged bytes, and memory holds nothing. The records the analysis
    /// scan kept for replay are let go.
    /// </summary>
    public void FinishReplay(BufferedReply? lastReply)
    {
        lock (_gate)
        {
            if (lastReply is not null)
            {
                SetLastReplyLocked(lastReply.Location is null && _loggedFullReply is { } full && full.Sequence == LastSequence
                    ? HeldReply.InTheLog(full.Location, lastReply)
                    : Hold(lastReply));
            }

            _loggedFullReply = null;
        }

        ReleaseKeptRecords();
        _ready.TrySetResult();
    }

    /// <summary>
    /// A replica's hot follower (docs/replication.md) replayed the first <paramref name="replayed"/> positions of the stream,
    /// requests whose replies are logged, with <paramref name="lastReply"/> the reply of the last of them: they leave the
    /// stream (a promotion's replay goes on after them), the reply becomes the buffered one as <see cref="FinishReplay"/> would
    /// make it, and their kept records are let go. The session stays replaying (not ready) until the promotion's replay ends.
    /// </summary>
    public void AdvanceReplay(int replayed, BufferedReply lastReply)
    {
        var last = PositionStream[replayed - 1];
        lock (_gate)
        {
            SetLastReplyLocked(lastReply.Location is null && _loggedFullReply is { } full && full.Sequence == last.Sequence
                ? HeldReply.InTheLog(full.Location, lastReply)
                : Hold(lastReply));
            if (_loggedFullReply is { } replayedFull && replayedFull.Sequence <= last.Sequence)
            {
                _loggedFullReply = null;
            }
        }

        for (var i = 0; i < replayed; i++)
        {
            PositionStream[i].RequestRecord = null;
            PositionStream[i].AuxRecords = null;
        }

        PositionStream.RemoveRange(0, replayed);
    }

    /// <summary>
    /// A rollback's replay went through the whole position stream without finding an orphan record (what made the session an
    /// orphan was not in its log, or a later rollback found it already cut): the numbering goes back to the last request of
    /// the stream, where <see cref="ResetToRecoveryPoint"/> had taken it away. Without this, the session would expect
    /// its first number again and refuse its client's next request as a gap.
    /// </summary>
    public void ResumeNumberingAfterReplay()
    {
        if (PositionStream.Count == 0)
        {
            return;
        }

        var last = PositionStream[^1];
        lock (_gate)
        {
            LastSequence = last.Sequence;
            LastRequestHash = last.RequestHash;
            LastRequestHashVersion = last.RequestHashVersion;
        }
    }

    /// <summary>
    /// Replay ended in a request it could not finish: the live part of the request the crash (or a rollback) cut short was
    /// abandoned (a member refused its call as an orphan, or was out of reach). As for a live request abandoned that way,
    /// the request stays unanswered: a retry of its number gets 503 (no reply is held) until a rollback runs it again.
    /// The session's requests no longer wait.
    /// </summary>
    public void FinishReplayUnanswered()
    {
        ResumeNumberingAfterReplay();
        lock (_gate)
        {
            SetLastReplyLocked(null);
            _loggedFullReply = null;
        }

        ReleaseKeptRecords();
        _ready.TrySetResult();
    }

    /// <summary>The records the analysis scan kept for replay are let go once the session has replayed.</summary>
    private void ReleaseKeptRecords()
    {
        foreach (var position in PositionStream)
        {
            position.RequestRecord = null;
            position.AuxRecords = null;
        }
    }

    /// <summary>Replay failed: requests waiting for this session fail with <paramref name="error"/>.</summary>
    public void FailReplay(Exception error) => _ready.TrySetException(error);
}
