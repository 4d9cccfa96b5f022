using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Checkpoints;

/// <summary>
/// Session checkpoints (MSP §3.2 "Session Checkpointing"; Phoenix/App §4.2 "Saving Context States"): taken between two
/// requests of one session, holding only that session (its execution lock), never blocking others. The record holds
/// everything the session needs to go on without what came before: identity and owner, next expected number and the
/// last request's identity, the whole buffered reply, session state values, DV. It is appended, not forced: until it is
/// durable the records before it stay in the log (the log is truncated only below a durable service checkpoint that
/// lists it), so a crash that loses it only means more replay.
/// </summary>
internal static class SessionCheckpoints
{
    /// <summary>
    /// Appends <paramref name="session"/>'s checkpoint; from now on its recovery starts there. The caller holds the
    /// session's execution lock. Returns the record's LSN, or 0 when the session is not between two requests (a request
    /// was admitted and has no reply yet): then no checkpoint is taken.
    /// </summary>
    public static long Take(DurableLog log, Session session)
    {
        if (!session.IsBetweenRequests)
        {
            return 0;
        }

        var lsn = log.Append(RecordKind.SessionCheckpoint, Capture(session));
        session.ContinueFromCheckpoint(lsn);
        Diagnostics.PersistentServicesMetrics.SessionCheckpoints.Add(1);
        CrashPoints.Hit(CrashPoints.AfterSessionCheckpoint);
        return lsn;
    }

    /// <summary>
    /// <see cref="Take"/> for a session idle for a while (the service checkpoint's turn, [MSP §3.4]). A buffered reply kept
    /// in the log that lies far behind the log's tail is first copied forward (<see cref="ReplyStore.RelocateAsync"/>), so
    /// it stops holding the log back: "far" is twice the log bytes all live sessions' replies take there, at least
    /// <see cref="SessionMemory.MinRelocationWindowBytes"/>. So the log keeps at most about three times those bytes for
    /// them, and copying writes at most about half a byte per byte the log grows. The caller holds the session's execution lock.
    /// </summary>
    public static async Task<long> TakeIdleAsync(DurableLog log, Session session, CancellationToken cancellationToken)
    {
        if (!session.IsBetweenRequests)
        {
            return 0;
        }

        var memory = session.Memory;
        var window = memory is null ? 0 : Math.Max(memory.MinRelocationWindowBytes, 2 * memory.LogHeldBytes);
        if (session.LastReply is { InLog: true } held && held.Location.FirstLsn < log.TailAddress - window)
        {
            session.RelocateReply(await ReplyStore.RelocateAsync(log, held.Location, cancellationToken).ConfigureAwait(false));
        }

        return Take(log, session);
    }

    public static SessionCheckpoint Capture(Session session)
    {
        var record = new SessionCheckpoint
        {
            SessionId = session.IdBytes,
            Owner = ByteString.CopyFrom(session.Owner),
            OwnerVersion = (uint)session.OwnerVersion,
            StartedAtUnixMs = session.StartedAt.ToUnixTimeMilliseconds(),
            LastActivityUnixMs = session.LastActivity.ToUnixTimeMilliseconds(),
            LastSequence = session.LastSequence,
            LastRequestHash = session.LastRequestHash is { } hash ? ByteString.CopyFrom(hash) : ByteString.Empty,
            LastRequestHashVersion = (uint)session.LastRequestHashVersion,
            Dv = session.Dv.ToRecord(),
        };

        record.CallCounters.Add(session.CallCounters);

        // A reply kept in the log is referenced, not copied: the session's recovery then keeps the log from its first record.
        switch (session.LastReply)
        {
            case { Reply: { } inMemory }:
                record.LastReply = inMemory.ToLogged();
                break;
            case { Location: var location }:
                record.LastReplyLsn = location.Lsn;
                record.LastReplyFirstLsn = location.FirstLsn;
                record.LastReplyLogBytes = location.LogBytes;
                break;
        }

        foreach (var (name, bytes, format) in session.EncodeState())
        {
            record.State.Add(new SessionStateValue { Name = name, Value = ByteString.CopyFrom(bytes), ValueFormat = format });
        }

        return record;
    }

    /// <summary>Analysis scan: a session known only from its checkpoint (its start was truncated away).</summary>
    public static Session Restore(SessionCheckpoint record, long lsn, Serialization.ValueCodec codec)
    {
        var session = new Session(
            SessionId.FromBytes(record.SessionId.Span),
            record.Owner.ToByteArray(),
            DateTimeOffset.FromUnixTimeMilliseconds(record.StartedAtUnixMs),
            replaying: true,
            (int)record.OwnerVersion,
            codec);
        session.ContinueFromCheckpoint(lsn, record);
        return session;
    }
}
