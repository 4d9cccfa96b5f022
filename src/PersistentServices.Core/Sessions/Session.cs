namespace PersistentServices.Sessions;

/// <summary>
/// One client's session ([MSP §3.1–3.2]): next expected request number, buffered reply of the last request, its
/// position stream, and its private state. Recovery rebuilds everything but the state from the log; the state is
/// rebuilt by replaying the requests. One file per aspect: <c>Session.Admission.cs</c>, <c>.Replies.cs</c>, <c>.Recovery.cs</c>,
/// <c>.Rollback.cs</c>, <c>.Quarantine.cs</c>, <c>.State.cs</c>.
/// </summary>
internal sealed partial class Session
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
    public long LoggedBytesSinceCheckpoint { get; private set; }

    /// <summary>Service checkpoints taken since this session's latest checkpoint (an idle session's is forced after a few).</summary>
    public int ServiceCheckpointsSinceCheckpoint { get; private set; }

    /// <summary>LSN of the session's latest log record (its state number, [MSP §3.1]).</summary>
    public long StateNumber { get; private set; }

    /// <summary>
    /// The one way the log's bookkeeping of the session moves on, live, in replay and in the analysis scan: a record at
    /// <paramref name="lsn"/> (0: none that changes the state) becomes its state number when it is the latest, and
    /// <paramref name="bytes"/> more count toward its next checkpoint. A checkpoint resets the count
    /// (<see cref="ContinueFromCheckpoint"/>).
    /// </summary>
    public void NoteLogged(long lsn, long bytes)
    {
        StateNumber = Math.Max(StateNumber, lsn);
        LoggedBytesSinceCheckpoint += bytes;
    }

    /// <summary>A service checkpoint passed without a checkpoint of this session (an idle one's is forced after a few).</summary>
    public void NoteServiceCheckpoint() => ServiceCheckpointsSinceCheckpoint++;

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
}
