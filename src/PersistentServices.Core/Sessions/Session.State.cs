namespace PersistentServices.Sessions;

/// <summary>The session's private state (<c>[SessionState]</c>) and its checkpoints ([MSP §3.2, §3.4]).</summary>
internal sealed partial class Session
{
    public T GetState<T>(SessionStateKey<T> key) => _state.TryGetValue(key.Name, out var slot) ? slot.Get<T>(key.Name, Codec) : default!;

    public void SetState<T>(SessionStateKey<T> key, T value) => _state[key.Name] = SessionStateSlot.Of(value);

    /// <summary>The session's state values as a checkpoint logs them. Only between requests (the caller holds the execution lock).</summary>
    public IEnumerable<(string Name, byte[] Bytes, Log.Records.ValueFormat Format)> EncodeState()
    {
        foreach (var (name, slot) in _state)
        {
            var (bytes, format) = slot.Encode(Codec);
            yield return (name, bytes, format);
        }
    }

    /// <summary>
    /// The session continues from a checkpoint (taken live, or met by the analysis scan): what came before it is no
    /// longer needed, so its position stream and logged reply hashes start empty; with <paramref name="restore"/> the
    /// numbers, reply and state come from the checkpoint record.
    /// </summary>
    /// <remarks>
    /// <paramref name="firstLsn"/> (or the first of <paramref name="restore"/>'s state parts) is the checkpoint's first
    /// record when its state is in parts written before it: <see cref="RetainLsn"/> keeps the log from there. A restored
    /// checkpoint whose parts were not read yet leaves the state to <see cref="RestoreCheckpointState"/> (<see cref="PendingCheckpoint"/>).
    /// </remarks>
    public void ContinueFromCheckpoint(long lsn, Log.Records.SessionCheckpoint? restore = null, long firstLsn = 0)
    {
        if (restore is { StatePartLsns.Count: > 0 })
        {
            firstLsn = restore.StatePartLsns[0];
        }

        // Written before RecoveryLsn, which RetainLsn reads first: a reader that sees the new position sees its parts.
        Volatile.Write(ref _checkpointParts, firstLsn != 0 && firstLsn < lsn ? Tuple.Create(lsn, firstLsn) : null);
        PendingCheckpoint = null;
        StateNumber = Math.Max(StateNumber, lsn);
        LoggedBytesSinceCheckpoint = 0;
        ServiceCheckpointsSinceCheckpoint = 0;
        PositionStream.Clear();
        LoggedReplies.Clear();
        _loggedFullReply = null;
        lock (_gate)
        {
            if (restore is not null)
            {
                LastSequence = restore.LastSequence;
                LastRequestHash = restore.LastRequestHash.IsEmpty ? null : restore.LastRequestHash.ToByteArray();
                LastRequestHashVersion = (int)restore.LastRequestHashVersion;
                SetLastReplyLocked(
                    restore.LastReplyLsn != 0 ? HeldReply.InTheLog(new ReplyLocation(restore.LastReplyLsn, restore.LastReplyFirstLsn != 0 ? restore.LastReplyFirstLsn : restore.LastReplyLsn, restore.LastReplyLogBytes))
                    : restore.LastReply is { } reply ? HeldReply.InMemory(BufferedReply.FromLogged(reply))
                    : null);
            }

            // A reply kept in the log is referenced, not copied: RetainLsn keeps the log from there; the scan starts here.
            RecoveryLsn = lsn;
        }

        if (restore is null)
        {
            return;
        }

        LastActivity = DateTimeOffset.FromUnixTimeMilliseconds(restore.LastActivityUnixMs);
        QuarantineReason = restore.Quarantined is { Length: > 0 } quarantined ? quarantined : null;
        Dv = Domain.DependencyVector.FromRecord(restore.Dv);
        _recoveryPoint = (LastSequence, LastRequestHash, LastRequestHashVersion, LastReply);
        CallCounters.Clear();
        foreach (var (callee, number) in restore.CallCounters)
        {
            CallCounters[callee] = number;
        }

        if (Checkpoints.SessionCheckpoints.StateInParts(restore))
        {
            _state.Clear();
            PendingCheckpoint = restore;
            return;
        }

        RestoreCheckpointState(restore);
    }

    /// <summary>
    /// A checkpoint the analysis scan restored whose state is in parts not read yet (the scan does not read the log):
    /// read after the scan (<see cref="Checkpoints.SessionCheckpoints.ReadPendingStatesAsync"/>), before any replay.
    /// </summary>
    public Log.Records.SessionCheckpoint? PendingCheckpoint { get; private set; }

    /// <summary>The state values of <paramref name="checkpoint"/> (read in full) become the session's.</summary>
    public void RestoreCheckpointState(Log.Records.SessionCheckpoint checkpoint)
    {
        PendingCheckpoint = null;
        _state.Clear();
        foreach (var value in checkpoint.State)
        {
            _state[value.Name] = SessionStateSlot.Restored(value.Value.ToByteArray(), value.ValueFormat);
        }
    }
}
