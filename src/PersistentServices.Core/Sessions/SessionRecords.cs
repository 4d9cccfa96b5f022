using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Sessions;

/// <summary>
/// The one place a session's own records are appended: its start, each logged request, each reply, its end
/// ([MSP §3.1–3.2]; [Phoenix/App Algorithm 3]: a long request record, a short reply record). None of them is forced
/// here: the caller waits until the record is durable before anyone learns of it.
/// </summary>
internal static class SessionRecords
{
    /// <summary>A client started <paramref name="session"/>; its state number becomes the record's LSN.</summary>
    public static long AppendStarted(DurableLog log, Session session, DateTimeOffset startedAt)
    {
        var lsn = log.Append(RecordKind.SessionStarted, new SessionStarted
        {
            SessionId = session.IdBytes,
            Owner = ByteString.CopyFrom(session.Owner),
            StartedAtUnixMs = startedAt.ToUnixTimeMilliseconds(),
            OwnerVersion = (uint)session.OwnerVersion,
            FirstSequence = session.LastSequence > 0 ? session.LastSequence + 1 : 0,
        });
        session.NoteLogged(lsn, 0);
        session.RecoveryLsn = lsn;
        return lsn;
    }

    /// <summary>
    /// A request of <paramref name="session"/> is logged before it executes; it becomes the next entry of the session's
    /// position stream ([MSP §3.2]).
    /// </summary>
    public static LoggedPosition AppendRequest(DurableLog log, Session session, LoggedRequest record, int recordSize)
    {
        var lsn = log.Append(RecordKind.Request, record);
        session.NoteLogged(0, recordSize);
        var position = new LoggedPosition(lsn, record.Sequence, record.RequestHash.ToByteArray(), (int)record.RequestHashVersion);
        session.PositionStream.Add(position);
        session.LastActivity = DateTimeOffset.FromUnixTimeMilliseconds(record.ReceivedAtUnixMs);
        return position;
    }

    /// <summary>
    /// The reply record of a request; it becomes the session's state number. Short (status and hash, not the body: a
    /// replay recomputes it) when the session may hold the reply in memory; else the reply in full, which the session
    /// then keeps only as its location (<see cref="BufferedReply.Location"/>, <see cref="ReplyStore"/>): when it costs more
    /// than <see cref="SessionMemory.MaxBufferedReplyBytes"/>, or would take the held replies above the budget.
    /// </summary>
    public static long AppendReply(DurableLog log, Session session, LoggedPosition position, BufferedReply reply)
    {
        var record = new ReplySent
        {
            SessionId = session.IdBytes,
            Sequence = position.Sequence,
            StatusCode = reply.StatusCode,
            ReplyHash = UnsafeByteOperations.UnsafeWrap(reply.Hash), // the reply's hash is never written again
            RequestLsn = position.RequestLsn,
        };

        // What the session logged for replay's sake: the short record (a reply kept in the log is not replayed).
        var shortSize = record.CalculateSize();
        var inFull = !session.TryHoldInMemory(reply, out var reason) && ReplyStore.TryAttachFullReply(log, record, reply);
        var lsn = log.Append(RecordKind.Reply, record);
        session.NoteLogged(lsn, shortSize);
        if (inFull)
        {
            reply.Location = ReplyStore.LocationOf(record, lsn, record.CalculateSize(), log.MaxRecordBytes);
            log.Metrics?.RepliesLoggedInFull.Add(1, new KeyValuePair<string, object?>("reason", reason));
        }

        return lsn;
    }

    /// <summary>
    /// End of skip ([MSP §4.1]): the session's orphan recovery ended; its records from <paramref name="orphanLsn"/> up to
    /// this one are skipped by every later recovery. Not forced: if it is lost, the next recovery skips them all again.
    /// </summary>
    public static long AppendEndOfSkip(DurableLog log, Session session, long orphanLsn)
    {
        var lsn = log.Append(RecordKind.EndOfSkip, new EndOfSkip { SessionId = session.IdBytes, OrphanLsn = orphanLsn });
        session.NoteLogged(lsn, 0);
        return lsn;
    }

    /// <summary>The session ended (its client ended it, or it expired): its records are no longer needed.</summary>
    public static long AppendEnded(DurableLog log, Session session, SessionEndReason reason, DateTimeOffset endedAt)
        => log.Append(RecordKind.SessionEnded, new SessionEnded
        {
            SessionId = session.IdBytes,
            Reason = reason,
            EndedAtUnixMs = endedAt.ToUnixTimeMilliseconds(),
        });
}
