namespace PersistentServices.Sessions;

/// <summary>Admission ([MSP §3.1]): which request number runs next, duplicates of the last one, one request at a time.</summary>
internal sealed partial class Session
{
    /// <summary>
    /// True when no request of the session is admitted and unfinished: a checkpoint may be taken (with the execution
    /// lock held, so none starts meanwhile).
    /// </summary>
    public bool IsBetweenRequests
    {
        get
        {
            lock (_gate)
            {
                return _executing is null && (LastSequence == 0 || LastReply is not null);
            }
        }
    }

    /// <summary>
    /// A session created by another service's call: its numbering starts at <paramref name="firstSequence"/> (the
    /// caller's per-callee call number), so the previous number counts as answered. Before any request.
    /// </summary>
    public void StartNumberingAt(long firstSequence)
    {
        lock (_gate)
        {
            if (LastSequence == 0 && firstSequence > 1)
            {
                LastSequence = firstSequence - 1;
                _numberingBase = LastSequence;
            }
        }
    }

    private long _numberingBase;

    /// <summary>True when a retry of <paramref name="sequence"/> must be compared with a hash of an older version (<see cref="RequestIdentity.HashVersion0"/>).</summary>
    public bool NeedsVersion0Hash(long sequence) => sequence == Volatile.Read(ref _lastSequence) && LastRequestHashVersion == 0;

    /// <summary>
    /// Decides what to do with request <paramref name="sequence"/>; claims it when it is the next one.
    /// <paramref name="version0Hash"/> is the request's hash as older builds computed it, when <see cref="NeedsVersion0Hash"/>.
    /// </summary>
    public Admission Admit(long sequence, byte[] requestHash, byte[]? version0Hash = null)
    {
        lock (_gate)
        {
            var expected = LastSequence + 1;
            if (Ended)
            {
                return new Admission(AdmitOutcome.Ended, expected);
            }

            // A rollback (orphan recovery) that began after the caller waited for the session resets its numbering to the
            // recovery point while it replays: admitting against that would refuse the client's next number as a gap.
            if (!_ready.Task.IsCompletedSuccessfully)
            {
                return new Admission(AdmitOutcome.NotReady, expected);
            }

            if (sequence == LastSequence && LastSequence > 0)
            {
                var compared = LastRequestHashVersion == 0 ? version0Hash : requestHash;
                if (LastRequestHash is null || compared is null || !compared.AsSpan().SequenceEqual(LastRequestHash))
                {
                    return new Admission(AdmitOutcome.Mismatch, expected);
                }

                if (_executing is { } running)
                {
                    if (running == ExecutingUnwatched)
                    {
                        _executing = running = new TaskCompletionSource<BufferedReply>(TaskCreationOptions.RunContinuationsAsynchronously);
                    }

                    return new Admission(AdmitOutcome.DuplicateInFlight, expected, Pending: running.Task);
                }

                if (_lastReply is { InLog: true } inLog)
                {
                    // Keeps the log from the reply's first record on until ReadHeldReplyAsync has read it.
                    _logReads++;
                    var first = inLog.Location.FirstLsn;
                    _logReadPin = _logReadPin == 0 ? first : Math.Min(_logReadPin, first);
                }

                return new Admission(AdmitOutcome.Duplicate, expected, Reply: _lastReply);
            }

            if (sequence < LastSequence)
            {
                return new Admission(AdmitOutcome.Stale, expected);
            }

            if (sequence > expected)
            {
                return new Admission(AdmitOutcome.Gap, expected);
            }

            if (_executing is not null)
            {
                return new Admission(AdmitOutcome.Busy, expected);
            }

            LastSequence = sequence;
            LastRequestHash = requestHash;
            LastRequestHashVersion = RequestIdentity.CurrentVersion;
            SetLastReplyLocked(null);
            _executing = ExecutingUnwatched;
            return new Admission(AdmitOutcome.Execute, expected);
        }
    }

    /// <summary>
    /// Records the reply of the executing request and releases duplicates waiting for it. A reply logged in full
    /// (<see cref="BufferedReply.Location"/>) is kept only as its location; else it is held in memory, with the bytes
    /// <see cref="TryHoldInMemory"/> reserved for it.
    /// </summary>
    public void Complete(BufferedReply reply)
    {
        TaskCompletionSource<BufferedReply>? executing;
        lock (_gate)
        {
            SetLastReplyLocked(Hold(reply));
            executing = _executing;
            _executing = null;
        }

        if (executing != ExecutingUnwatched)
        {
            executing?.TrySetResult(reply);
        }
    }

    /// <summary>The executing request could not complete (the log faulted): duplicates waiting for it fail too.</summary>
    public void Abandon(Exception error)
    {
        TaskCompletionSource<BufferedReply>? executing;
        lock (_gate)
        {
            executing = _executing;
            _executing = null;
            _table?.Memory.Release(_reservedBytes);
            _reservedBytes = 0;
        }

        if (executing != ExecutingUnwatched)
        {
            executing?.TrySetException(error);
        }
    }
}
