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

        var (lsn, firstLsn) = Append(log, Capture(session));
        session.ContinueFromCheckpoint(lsn, firstLsn: firstLsn);
        log.Metrics?.SessionCheckpoints.Add(1);
        log.CrashPoints.Hit(CrashPoints.AfterSessionCheckpoint);
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

    /// <summary>
    /// A quarantined session's marker: who owns it, how far its numbering went (its last logged request) and why it is
    /// quarantined; no state, no reply, no DV. Once logged it is the session's recovery point, so the session no longer
    /// holds the log back, and every later recovery quarantines it again without replaying anything.
    /// </summary>
    public static SessionCheckpoint CaptureQuarantineMarker(Session session, string reason)
    {
        var last = session.PositionStream.Count > 0 ? session.PositionStream[^1] : null;
        var hash = last is not null ? last.RequestHash : session.LastRequestHash;
        return new SessionCheckpoint
        {
            SessionId = session.IdBytes,
            Owner = ByteString.CopyFrom(session.Owner),
            OwnerVersion = (uint)session.OwnerVersion,
            StartedAtUnixMs = session.StartedAt.ToUnixTimeMilliseconds(),
            LastActivityUnixMs = session.LastActivity.ToUnixTimeMilliseconds(),
            LastSequence = Math.Max(session.LastSequence, last?.Sequence ?? 0),
            LastRequestHash = hash is null ? ByteString.Empty : ByteString.CopyFrom(hash),
            LastRequestHashVersion = (uint)(last?.RequestHashVersion ?? session.LastRequestHashVersion),
            Quarantined = reason,
        };
    }

    /// <summary>Bytes of a state part record besides its data: session id, field tags and lengths.</summary>
    private const int PartOverheadBytes = 64;

    /// <summary>
    /// Appends <paramref name="record"/>; a state too large for one record goes first into <c>SessionCheckpointPart</c>
    /// records the checkpoint lists (as a large reply body goes into body parts). Returns the checkpoint's LSN and the
    /// first LSN it needs: its first part's, or its own. The parts are only ever read through the checkpoint, which is
    /// committed after them (the log commits a prefix), so a crash between them leaves parts nothing refers to.
    /// </summary>
    /// <exception cref="InvalidOperationException">The checkpoint does not fit one record even without its state.</exception>
    public static (long Lsn, long FirstLsn) Append(DurableLog log, SessionCheckpoint record)
    {
        var limit = log.MaxRecordBytes;
        if (record.CalculateSize() <= limit)
        {
            var lsn = log.Append(RecordKind.SessionCheckpoint, record);
            return (lsn, lsn);
        }

        var state = new SessionCheckpointState();
        state.State.Add(record.State);
        record.State.Clear();
        var bytes = state.ToByteArray();
        var partBytes = limit - PartOverheadBytes;
        var parts = (bytes.Length + partBytes - 1) / partBytes;
        if (record.CalculateSize() + (parts * 11) + 11 > limit)
        {
            record.State.Add(state.State);
            throw new InvalidOperationException(
                $"A session checkpoint does not fit a log record of {limit} bytes even without its state ({record.CalculateSize()} bytes): raise PersistentServicesOptions.MaxRequestBodyBytes.");
        }

        for (var offset = 0; offset < bytes.Length; offset += partBytes)
        {
            var part = new SessionCheckpointPart
            {
                SessionId = record.SessionId,
                Data = UnsafeByteOperations.UnsafeWrap(bytes.AsMemory(offset, Math.Min(partBytes, bytes.Length - offset))),
            };
            record.StatePartLsns.Add(log.Append(RecordKind.SessionCheckpointPart, part));
        }

        record.StateBytes = bytes.Length;
        log.Metrics?.SessionCheckpointParts.Add(record.StatePartLsns.Count);
        return (log.Append(RecordKind.SessionCheckpoint, record), record.StatePartLsns[0]);
    }

    /// <summary>True when <paramref name="record"/>'s state is in parts not read yet (<see cref="ReadStateAsync"/>).</summary>
    public static bool StateInParts(SessionCheckpoint record) => record.StatePartLsns.Count > 0 && record.State.Count == 0;

    /// <summary>
    /// Reads the state of a checkpoint written in parts into <paramref name="record"/>'s <c>state</c>: each part verified by
    /// the log (CRC-32C, its own LSN), of the right kind and session, and the whole of the length the checkpoint gives;
    /// anything else is corruption and names the LSN. Does nothing for a checkpoint in one record.
    /// </summary>
    public static async ValueTask ReadStateAsync(DurableLog log, SessionCheckpoint record, long checkpointLsn, CancellationToken cancellationToken)
    {
        if (!StateInParts(record))
        {
            return;
        }

        if (record.StateBytes is < 0 or > int.MaxValue)
        {
            throw new LogCorruptionException($"The session checkpoint at LSN {checkpointLsn} gives a state of {record.StateBytes} bytes.", checkpointLsn);
        }

        var bytes = new byte[record.StateBytes];
        var filled = 0;
        foreach (var partLsn in record.StatePartLsns)
        {
            var partRecord = await log.ReadAsync(partLsn, cancellationToken).ConfigureAwait(false);
            if (partRecord.Kind != RecordKind.SessionCheckpointPart)
            {
                throw new LogCorruptionException(
                    $"A part of the session checkpoint at LSN {checkpointLsn} should be at LSN {partLsn}, but that record is a {partRecord.Kind}.", partLsn);
            }

            var part = partRecord.Parse(SessionCheckpointPart.Parser);
            if (!part.SessionId.Span.SequenceEqual(record.SessionId.Span) || part.Data.Length > bytes.Length - filled)
            {
                throw new LogCorruptionException($"The part at LSN {partLsn} does not belong to the session checkpoint at LSN {checkpointLsn}.", partLsn);
            }

            part.Data.Span.CopyTo(bytes.AsSpan(filled));
            filled += part.Data.Length;
        }

        if (filled != bytes.Length)
        {
            throw new LogCorruptionException(
                $"The parts of the session checkpoint at LSN {checkpointLsn} hold {filled} bytes of its {bytes.Length}-byte state.", checkpointLsn);
        }

        record.State.Add(SessionCheckpointState.Parser.ParseFrom(bytes).State);
    }

    /// <summary>
    /// After the analysis scan: reads the state of every session restored from a checkpoint written in parts (the scan
    /// applies records without reading the log, so it leaves those for here).
    /// </summary>
    public static async ValueTask<int> ReadPendingStatesAsync(DurableLog log, SessionTable sessions, CancellationToken cancellationToken)
    {
        var read = 0;
        foreach (var session in sessions.All)
        {
            if (session.PendingCheckpoint is { } pending)
            {
                await ReadStateAsync(log, pending, session.RecoveryLsn, cancellationToken).ConfigureAwait(false);
                session.RestoreCheckpointState(pending);
                read++;
            }
        }

        return read;
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
