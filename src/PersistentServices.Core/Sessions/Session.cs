namespace PersistentServices.Sessions;

/// <summary>What <see cref="Session.Admit"/> decided for a request's sequence number ([MSP §3.1]).</summary>
internal enum AdmitOutcome
{
    /// <summary>The next expected number: log and execute it.</summary>
    Execute,

    /// <summary>A duplicate of the last request, already answered: resend its buffered reply.</summary>
    Duplicate,

    /// <summary>A duplicate of the last request while it still executes: wait for its reply.</summary>
    DuplicateInFlight,

    /// <summary>Older than the last request: its reply is gone; never re-executed.</summary>
    Stale,

    /// <summary>Skips numbers: the client lost track.</summary>
    Gap,

    /// <summary>The next number while the previous request still executes (one request at a time per session).</summary>
    Busy,

    /// <summary>The last number again, but a different request.</summary>
    Mismatch,

    /// <summary>The session is replaying (a rollback began after the caller waited for it): wait for it again, then admit.</summary>
    NotReady,

    /// <summary>The session ended.</summary>
    Ended,
}

/// <summary>The decision for one request and what the caller needs to act on it.</summary>
/// <remarks>
/// A <see cref="AdmitOutcome.Duplicate"/> whose <see cref="Reply"/> is in the log holds the log there until the caller read
/// it with <see cref="Session.ReadHeldReplyAsync"/> (which it must call).
/// </remarks>
internal readonly record struct Admission(AdmitOutcome Outcome, long ExpectedSequence, HeldReply? Reply = null, Task<BufferedReply>? Pending = null);

/// <summary>
/// A logged request of a session: where it and the records it wrote (shared reads and writes, nondeterministic values)
/// are in the log. The session's position stream is the list of these ([MSP §3.2]).
/// </summary>
internal sealed class LoggedPosition(long requestLsn, long sequence, byte[]? requestHash = null, int requestHashVersion = RequestIdentity.CurrentVersion)
{
    public long RequestLsn { get; } = requestLsn;

    public long Sequence { get; } = sequence;

    /// <summary>The request's identity (<see cref="RequestIdentity"/>), so numbering can go back to it (orphan recovery).</summary>
    public byte[]? RequestHash { get; } = requestHash;

    public int RequestHashVersion { get; } = requestHashVersion;

    /// <summary>LSNs of the records the request wrote while it ran, in order.</summary>
    public List<long> Aux { get; } = [];

    /// <summary>
    /// Recovery: the logged request record, kept by the analysis scan so replay reads nothing again (null: read it). Kept
    /// unparsed: most kept requests are superseded by a later session checkpoint before the scan ends, and replay parses
    /// the few that are not.
    /// </summary>
    public Log.LogRecord? RequestRecord { get; set; }

    /// <summary>Recovery: the records of <see cref="Aux"/>, in order, when the analysis scan kept them.</summary>
    public List<Log.LogRecord>? AuxRecords { get; set; }
}

/// <summary>
/// One client's session ([MSP §3.1–3.2]): next expected request number, buffered reply of the last request, its
/// position stream, and its private state. Recovery rebuilds everything but the state from the log; the state is
/// rebuilt by replaying the requests.
/// </summary>
internal sealed class Session
{
    private readonly Lock _gate = new();
    private readonly Dictionary<string, SessionStateSlot> _state = new(StringComparer.Ordinal);
    private TaskCompletionSource _ready = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private TaskCompletionSource<BufferedReply>? _executing;

    // _executing while a request executes and no duplicate waits for it: the completion source a duplicate waits on is
    // made only when one arrives (most executions have none). Never completed.
    private static readonly TaskCompletionSource<BufferedReply> ExecutingUnwatched = new();

    // The buffered reply and what it costs against the session memory budget of the table the session is in.
    private HeldReply? _lastReply;
    private long _heldBytes;
    private long _logHeldBytes;
    private long _reservedBytes;
    private SessionTable? _table;

    // Duplicates reading the last reply from the log right now, and the lowest LSN they read: the log is kept from there.
    private int _logReads;
    private long _logReadPin;

    // Analysis scan: the latest reply of this session logged in full, so replay hands out the logged reply, not a copy.
    private (long Sequence, ReplyLocation Location)? _loggedFullReply;
    private long _recoveryLsn;

    /// <summary>The latest checkpoint's LSN and its first state part's, when its state is in parts (else null); one reference, read atomically.</summary>
    private Tuple<long, long>? _checkpointParts;

    public Session(SessionId id, byte[] owner, DateTimeOffset startedAt, bool replaying, int ownerVersion = SessionOwner.CurrentVersion, Serialization.ValueCodec? codec = null)
    {
        Id = id;
        Owner = owner;
        AdmissionBucket = owner;
        OwnerVersion = ownerVersion;
        StartedAt = startedAt;
        Codec = codec ?? Serialization.JsonValueCodec.Instance;
        LastActivity = startedAt;
        if (!replaying)
        {
            _ready.SetResult();
        }
    }

    public SessionId Id { get; }

    /// <summary>The id as it is written in log records.</summary>
    public Google.Protobuf.ByteString IdBytes => _idBytes ??= Google.Protobuf.ByteString.CopyFrom(Id.ToBytes());

    private Google.Protobuf.ByteString? _idBytes;

    /// <summary>The id as clients send it (base64url), computed once.</summary>
    public string IdText => _idText ??= Id.ToString();

    private string? _idText;

    /// <summary>The id's short hash for traces (<see cref="Diagnostics.PersistentServicesTracing.SessionTag"/>), computed once.</summary>
    public string TraceTag => _traceTag ??= Diagnostics.PersistentServicesTracing.SessionTag(Id);

    private string? _traceTag;

    /// <summary>SHA-256 of the owning principal's identifier; empty when the session was started anonymously.</summary>
    public byte[] Owner { get; }

    /// <summary>
    /// Whose share of the session table this session counts against (<see cref="SessionTable.TryReserve"/>): its owner when
    /// authenticated; for an anonymous session started or keyed live, a hash of the client's address (not logged: a
    /// recovered anonymous session counts against no share, only against the table). Empty: no share.
    /// </summary>
    public byte[] AdmissionBucket { get; set; }

    /// <summary>How <see cref="Owner"/> was hashed (<see cref="SessionOwner"/>): sessions started by older builds keep theirs.</summary>
    public int OwnerVersion { get; }

    /// <summary>Number of the last request accepted (0 before the first). The next expected number is one more.</summary>
    public long LastSequence
    {
        get => Volatile.Read(ref _lastSequence);
        private set
        {
            // Never used (no request yet) or used: the table counts never-used sessions (guarded by _gate).
            if ((_lastSequence == 0) != (value == 0))
            {
                _table?.CountUnused(value == 0 ? 1 : -1);
            }

            Volatile.Write(ref _lastSequence, value);
        }
    }

    private long _lastSequence;

    /// <summary>True before the session's first request.</summary>
    public bool NeverUsed => LastSequence == 0;

    /// <summary>When the session expires unless a request comes: a never-used one after <paramref name="unusedRetention"/>, others after <paramref name="idleRetention"/>.</summary>
    public DateTimeOffset ExpiresAt(TimeSpan idleRetention, TimeSpan unusedRetention) => LastActivity + (NeverUsed ? unusedRetention : idleRetention);

    public byte[]? LastRequestHash { get; private set; }

    /// <summary>How <see cref="LastRequestHash"/> was computed (<see cref="RequestIdentity"/>): a request logged by an older build keeps its.</summary>
    public int LastRequestHashVersion { get; private set; } = RequestIdentity.CurrentVersion;

    /// <summary>The buffered reply of <see cref="LastSequence"/>, once it completed: in memory, or where the log holds it.</summary>
    public HeldReply? LastReply => Volatile.Read(ref _lastReply);

    /// <summary>Bytes of this session's buffered reply counted against the session memory budget.</summary>
    public long HeldBytes => Volatile.Read(ref _heldBytes);

    public DateTimeOffset LastActivity { get; set; }

    public DateTimeOffset StartedAt { get; }

    /// <summary>How session state is written into checkpoints (and read back from them).</summary>
    public Serialization.ValueCodec Codec { get; }

    /// <summary>
    /// Where this session's recovery starts: its latest checkpoint record, or its SessionStarted record before its first
    /// checkpoint (MSP §3.4: what the service checkpoint lists).
    /// </summary>
    public long RecoveryLsn
    {
        get => Volatile.Read(ref _recoveryLsn);
        set => Volatile.Write(ref _recoveryLsn, value);
    }

    /// <summary>
    /// Where the log must be kept from for this session: <see cref="RecoveryLsn"/>, or lower, the first record of its
    /// buffered reply kept in the log ([Phoenix/App §4.4]), or of a reply a duplicate is reading from the log right now.
    /// Truncation never removes a reply a retry may still need; recovery's scan need not read it (a checkpoint references it).
    /// </summary>
    public long RetainLsn
    {
        get
        {
            var lsn = RecoveryLsn;
            if (Volatile.Read(ref _checkpointParts) is { Item1: var checkpointLsn, Item2: var firstPart } && checkpointLsn == lsn)
            {
                lsn = firstPart; // its latest checkpoint's state parts
            }

            if (Volatile.Read(ref _lastReply) is { InLog: true } held && held.Location.FirstLsn < lsn)
            {
                lsn = held.Location.FirstLsn;
            }

            var pin = Volatile.Read(ref _logReadPin);
            return pin != 0 && pin < lsn ? pin : lsn;
        }
    }

    /// <summary>The budget of the table the session is in (null outside a table).</summary>
    internal SessionMemory? Memory => _table?.Memory;

    /// <summary>
    /// Per callee (the caller's name for it): the number of this session's last persistent call to it. A call's id is
    /// (this service, this session, callee, number): deterministic, so replay and retries send the same id ([Phoenix/App
    /// §2.2] condition 2). Rebuilt by replay; saved in checkpoints.
    /// </summary>
    public Dictionary<string, long> CallCounters { get; } = new(StringComparer.Ordinal);

    /// <summary>Bytes this session logged since its latest checkpoint (MSP §3.2: a checkpoint is taken when they pass a threshold).</summary>
    public long LoggedBytesSinceCheckpoint { get; set; }

    /// <summary>Service checkpoints taken since this session's latest checkpoint (an idle session's is forced after a few).</summary>
    public int ServiceCheckpointsSinceCheckpoint { get; set; }

    /// <summary>LSN of the session's latest log record (its state number, [MSP §3.1]).</summary>
    public long StateNumber { get; set; }

    /// <summary>The session's dependency vector ([MSP §3.2]: one DV per session, so sessions recover separately).</summary>
    public Domain.DependencyVector Dv { get; set; } = Domain.DependencyVector.Empty;

    /// <summary>The session's logged requests, in order.</summary>
    public List<LoggedPosition> PositionStream { get; } = [];

    /// <summary>Logged reply hashes by sequence number (from ReplySent records), for replay's divergence check.</summary>
    public Dictionary<long, (int StatusCode, byte[] Hash)> LoggedReplies { get; } = [];

    /// <summary>Recovery: this session crashed inside an update and reserves the variables it held (replayed first).</summary>
    public bool HoldsReservations { get; set; }

    /// <summary>Held while a request (persistent or read-only) runs: one request at a time per session.</summary>
    public SemaphoreSlim ExecutionLock { get; } = new(1, 1);

    /// <summary>Completes when the session's replay finished (at once for sessions started after recovery).</summary>
    public Task Ready => _ready.Task;

    public bool Ended { get; private set; }

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

    /// <summary>
    /// Before the reply of the executing request is logged: true when it may be held in memory (its bytes are then
    /// reserved in the budget of the session's table), false when it must be logged in full (<paramref name="reason"/>:
    /// "size" or "budget"). A session in no table holds every reply.
    /// </summary>
    public bool TryHoldInMemory(BufferedReply reply, out string? reason)
    {
        lock (_gate)
        {
            reason = null;
            if (_table is not { } table)
            {
                return true;
            }

            var bytes = reply.MemoryBytes;
            if (!table.Memory.TryReserve(bytes, out reason))
            {
                return false;
            }

            table.Memory.Release(_reservedBytes);
            _reservedBytes = bytes;
            return true;
        }
    }

    /// <summary>
    /// Reads back the reply of a <see cref="AdmitOutcome.Duplicate"/> whose buffered reply is in the log (exactly the bytes
    /// logged, verified against the logged hash), then lets the log go on truncating.
    /// </summary>
    public async Task<BufferedReply> ReadHeldReplyAsync(Log.DurableLog log, HeldReply held, CancellationToken cancellationToken)
    {
        try
        {
            return await ReplyStore.ReadAsync(log, held.Location, cancellationToken).ConfigureAwait(false);
        }
        finally
        {
            lock (_gate)
            {
                if (--_logReads == 0)
                {
                    Volatile.Write(ref _logReadPin, 0);
                }
            }
        }
    }

    /// <summary>An idle checkpoint copied the reply kept in the log to <paramref name="location"/>, so the log before it can go.</summary>
    public void RelocateReply(ReplyLocation location)
    {
        lock (_gate)
        {
            if (_lastReply is { InLog: true } held)
            {
                SetLastReplyLocked(held.MovedTo(location));
            }
        }
    }

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
        StateNumber = lsn;
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

    /// <summary>Incremented when the session rolls back (orphan recovery): a request admitted before that no longer applies.</summary>
    public int Generation => Volatile.Read(ref _generation);

    private int _generation;

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

    /// <summary>The divergence that quarantined this session (its requests get <c>session-diverged</c>); null otherwise.</summary>
    public Recovery.ReplayDivergenceException? Diverged { get; private set; }

    /// <summary>Replay diverged: the session is quarantined; the others go on.</summary>
    public void Quarantine(Recovery.ReplayDivergenceException divergence)
    {
        Diverged = divergence;
        _ready.TrySetException(divergence);
    }

    /// <summary>Marks the session ended; returns false when a request is executing.</summary>
    public bool TryEnd()
    {
        lock (_gate)
        {
            if (_executing is not null)
            {
                return false;
            }

            Ended = true;
            return true;
        }
    }

    /// <summary>Joins <paramref name="table"/>: its reply bytes count against the table's budget, and it counts as never used until its first request.</summary>
    internal void Attach(SessionTable table)
    {
        lock (_gate)
        {
            _table = table;
            table.Memory.Add(_heldBytes + _reservedBytes);
            table.Memory.AddInLog(_logHeldBytes);
            if (LastSequence == 0)
            {
                table.CountUnused(1);
            }
        }
    }

    /// <summary>Leaves its table (the session ended): its reply no longer counts.</summary>
    internal void Detach()
    {
        lock (_gate)
        {
            if (_table is { } table)
            {
                table.Memory.Release(_heldBytes + _reservedBytes);
                table.Memory.AddInLog(-_logHeldBytes);
                if (LastSequence == 0)
                {
                    table.CountUnused(-1);
                }
            }

            _table = null;
        }
    }

    /// <summary>How a completed reply is kept: its location when it was logged in full, else itself.</summary>
    private static HeldReply Hold(BufferedReply reply) => reply.Location is { } location ? HeldReply.InTheLog(location, reply) : HeldReply.InMemory(reply);

    /// <summary>Replaces the buffered reply; the budget counts the new one (using the bytes reserved for it) instead of the old one.</summary>
    private void SetLastReplyLocked(HeldReply? reply)
    {
        var bytes = reply?.MemoryBytes ?? 0;
        var logBytes = reply?.LogBytes ?? 0;
        _table?.Memory.Add(bytes - _heldBytes - _reservedBytes);
        _table?.Memory.AddInLog(logBytes - _logHeldBytes);
        _heldBytes = bytes;
        _logHeldBytes = logBytes;
        _reservedBytes = 0;
        Volatile.Write(ref _lastReply, reply);
    }

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
