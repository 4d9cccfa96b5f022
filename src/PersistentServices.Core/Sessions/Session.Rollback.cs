namespace PersistentServices.Sessions;

/// <summary>Orphan rollback ([MSP §4.1–4.2]): back to the recovery point, the position stream cut where the orphan begins.</summary>
internal sealed partial class Session
{
    /// <summary>Incremented when the session rolls back (orphan recovery): a request admitted before that no longer applies.</summary>
    public int Generation => Volatile.Read(ref _generation);

    private int _generation;

    /// <summary>
    /// The session's DV while its generation is still <paramref name="generation"/> (no rollback began since a request was
    /// admitted at it): what a duplicate's held reply depends on. A rollback resets the DV to its recovery point's while it
    /// replays, and a held reply sent with that DV would hide the lost state it depended on from its caller (the rollback
    /// then takes the request back while the caller keeps its reply). Read under the lock <see cref="BeginRollback"/>
    /// takes, which a rollback's reset always follows. False when a rollback began.
    /// </summary>
    public bool TryGetDv(int generation, out Domain.DependencyVector dv)
    {
        lock (_gate)
        {
            dv = Dv;
            return _generation == generation;
        }
    }

    /// <summary>
    /// Orphan recovery begins ([MSP §4.1]): requests of this session wait (as for a replay) until
    /// <see cref="FinishReplay"/>; requests already admitted are void (<see cref="Generation"/>).
    /// </summary>
    public void BeginRollback()
    {
        lock (_gate)
        {
            Interlocked.Increment(ref _generation);
            if (_ready.Task.IsCompleted)
            {
                _ready = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            }

            // A duplicate waiting for the voided execution gets 503 (the request handler's "session rolled back" type), not 500.
            if (_executing != ExecutingUnwatched)
            {
                _executing?.TrySetException(new SessionRolledBackException("The session rolls back: it depended on state a crash of another service took back."));
            }

            _executing = null;
        }
    }

    /// <summary>
    /// Back to where the session's recovery starts, before replaying its position stream again (orphan recovery): from
    /// <paramref name="checkpoint"/>, or, without one, to its start (no state, numbering from <paramref name="firstSequence"/>).
    /// The position stream is kept: replay follows it.
    /// </summary>
    public void ResetToRecoveryPoint(Log.Records.SessionCheckpoint? checkpoint, long firstSequence)
    {
        var positions = PositionStream.ToList();

        // The logged replies stay known: the replay compares each replayed reply with its logged one, and a request whose
        // reply is logged is not taken for one the crash cut short (run live, its reply logged again).
        var loggedReplies = LoggedReplies.ToList();
        if (checkpoint is not null)
        {
            ContinueFromCheckpoint(RecoveryLsn, checkpoint);
        }
        else
        {
            lock (_gate)
            {
                LastSequence = firstSequence > 1 ? firstSequence - 1 : 0;
                LastRequestHash = null;
                SetLastReplyLocked(null);
            }

            _state.Clear();
            CallCounters.Clear();
            Dv = Domain.DependencyVector.Empty;
            LoggedReplies.Clear();
            _loggedFullReply = null;
        }

        PositionStream.Clear();
        PositionStream.AddRange(positions);
        foreach (var (sequence, reply) in loggedReplies)
        {
            LoggedReplies[sequence] = reply;
        }

        _recoveryPoint = (LastSequence, LastRequestHash, LastRequestHashVersion, LastReply);
    }

    private (long Sequence, byte[]? Hash, int HashVersion, HeldReply? Reply)? _recoveryPoint;

    /// <summary>
    /// Replay stopped at an orphan record ([MSP §4.1] "Orphan Recovery End"): the positions from <paramref name="keep"/>
    /// on are skipped, and the numbering goes back to the last request kept (or to the recovery point).
    /// </summary>
    public void CutPositionStream(int keep, BufferedReply? lastKeptReply)
    {
        var lastKept = keep > 0 ? PositionStream[keep - 1] : null;
        foreach (var skipped in PositionStream.Skip(keep))
        {
            LoggedReplies.Remove(skipped.Sequence);
        }

        PositionStream.RemoveRange(keep, PositionStream.Count - keep);
        lock (_gate)
        {
            if (lastKept is not null)
            {
                LastSequence = lastKept.Sequence;
                LastRequestHash = lastKept.RequestHash;
                LastRequestHashVersion = lastKept.RequestHashVersion;

                // The replayed reply of the last request kept, held like any completed reply (in memory: replay does not
                // know whether the log holds it in full; it was within the budget when it was first written).
                SetLastReplyLocked(lastKeptReply is null ? null : Hold(lastKeptReply));
            }
            else
            {
                HeldReply? reply;
                (LastSequence, LastRequestHash, LastRequestHashVersion, reply) = _recoveryPoint ?? (_numberingBase, null, RequestIdentity.CurrentVersion, null);
                SetLastReplyLocked(reply);
            }
        }
    }
}
