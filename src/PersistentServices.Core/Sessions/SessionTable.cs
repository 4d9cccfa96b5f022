using System.Collections.Concurrent;

namespace PersistentServices.Sessions;

/// <summary>Why a session could not start.</summary>
internal enum StartRefusal
{
    None,

    /// <summary>The service holds its most sessions.</summary>
    ServiceFull,

    /// <summary>The caller (an authenticated principal, or an anonymous client's address) holds its share of the sessions.</summary>
    OwnerFull,
}

/// <summary>
/// The service's live sessions, by id, and what admission needs to know about them: how many there are (never-used ones
/// too), how many each admission bucket holds (an authenticated owner, or an anonymous client's address:
/// <see cref="Session.AdmissionBucket"/>), and the memory their buffered replies take
/// (<see cref="SessionMemory"/>). A start reserves its slot before its record is logged, so concurrent starts never
/// exceed a cap; sessions recovered from the log join whatever the caps say.
/// </summary>
internal sealed class SessionTable
{
    private readonly ConcurrentDictionary<SessionId, Session> _sessions = new();
    private readonly Dictionary<byte[], OwnerSessions> _owners = new(OwnerComparer.Instance);
    private readonly Lock _ownersGate = new();

    // Sessions whose start record is being logged and who have not joined the table yet: a lower bound of each record's
    // LSN (the log's tail before it was appended), so a service checkpoint taken meanwhile never starts recovery after it.
    private readonly List<long> _startsInFlight = [];
    private readonly Lock _startsGate = new();
    private int _slots;
    private int _unused;

    /// <summary>
    /// Held by a caller that finds, starts or ends a session as one step with its own lookup (the Idempotency-Key path:
    /// a request never starts a second session for a key whose first is being forgotten). One per table, so two services
    /// in one process never wait for each other.
    /// </summary>
    public Lock FindOrStartGate { get; } = new();

    public SessionTable()
        : this(SessionMemory.Unlimited)
    {
    }

    public SessionTable(SessionMemory memory) => Memory = memory;

    /// <summary>The budget the sessions' buffered replies are counted against.</summary>
    public SessionMemory Memory { get; }

    /// <summary>Live sessions.</summary>
    public int Count => _sessions.Count;

    /// <summary>Live sessions that have not received a request yet.</summary>
    public int NeverUsed => Volatile.Read(ref _unused);

    /// <summary>Live sessions plus starts in flight (what the caps are checked against).</summary>
    public int Slots => Volatile.Read(ref _slots);

    public ICollection<Session> All => _sessions.Values;

    /// <summary>The live sessions, enumerated without a snapshot (a sweep over many sessions allocates nothing).</summary>
    public IEnumerable<Session> Enumerate()
    {
        foreach (var (_, session) in _sessions)
        {
            yield return session;
        }
    }

    public bool TryGet(SessionId id, out Session session) => _sessions.TryGetValue(id, out session!);

    /// <summary>A session recovered from the log (or added without a reservation): it joins whatever the caps say.</summary>
    /// <summary>
    /// A session's start is about to be logged (<paramref name="tail"/>: the log's tail now, a lower bound of its record's
    /// LSN). Until <see cref="EndStart"/>, <see cref="OldestStartInFlight"/> is at most <paramref name="tail"/>.
    /// </summary>
    public long BeginStart(long tail)
    {
        lock (_startsGate)
        {
            _startsInFlight.Add(tail);
        }

        return tail;
    }

    /// <summary>The session whose start <see cref="BeginStart"/> announced joined the table, or will not.</summary>
    public void EndStart(long token)
    {
        lock (_startsGate)
        {
            _startsInFlight.Remove(token);
        }
    }

    /// <summary>The lowest LSN a start record not yet in the table may have (<see cref="long.MaxValue"/>: none).</summary>
    public long OldestStartInFlight
    {
        get
        {
            lock (_startsGate)
            {
                return _startsInFlight.Count == 0 ? long.MaxValue : _startsInFlight.Min();
            }
        }
    }

    public bool TryAdd(Session session)
    {
        if (!_sessions.TryAdd(session.Id, session))
        {
            return false;
        }

        Interlocked.Increment(ref _slots);
        AddToOwner(session, reserved: false);
        session.Attach(this);
        return true;
    }

    /// <summary>
    /// Reserves a slot for a session started in <paramref name="owner"/>'s admission bucket: refused when the service holds
    /// <paramref name="maxSessions"/> sessions, or the bucket <paramref name="maxPerOwner"/>. A reserved slot is then used by
    /// <see cref="TryAddReserved"/> (with the session's <see cref="Session.AdmissionBucket"/> set to the same bucket) or
    /// given back by <see cref="ReleaseReserved"/>.
    /// </summary>
    public StartRefusal TryReserve(byte[] owner, int maxSessions, int? maxPerOwner)
    {
        var slots = Volatile.Read(ref _slots);
        while (true)
        {
            if (slots >= maxSessions)
            {
                return StartRefusal.ServiceFull;
            }

            var seen = Interlocked.CompareExchange(ref _slots, slots + 1, slots);
            if (seen == slots)
            {
                break;
            }

            slots = seen;
        }

        if (owner.Length > 0)
        {
            lock (_ownersGate)
            {
                if (!_owners.TryGetValue(owner, out var sessions))
                {
                    _owners[owner] = sessions = new OwnerSessions();
                }

                if (maxPerOwner is { } max && sessions.Count >= max)
                {
                    RemoveIfEmpty(owner, sessions);
                    Interlocked.Decrement(ref _slots);
                    return StartRefusal.OwnerFull;
                }

                sessions.Reserved++;
            }
        }

        return StartRefusal.None;
    }

    /// <summary>
    /// Adds a session whose slot <see cref="TryReserve"/> reserved; false (the slot stays reserved: give it back with
    /// <see cref="ReleaseReserved"/>) when a session with its id is already live (a concurrent start of a caller's session).
    /// </summary>
    public bool TryAddReserved(Session session)
    {
        if (!_sessions.TryAdd(session.Id, session))
        {
            return false;
        }

        AddToOwner(session, reserved: true);
        session.Attach(this);
        return true;
    }

    /// <summary>The start failed: its reserved slot is free again.</summary>
    public void ReleaseReserved(byte[] owner)
    {
        Interlocked.Decrement(ref _slots);
        if (owner.Length > 0)
        {
            lock (_ownersGate)
            {
                if (_owners.TryGetValue(owner, out var sessions))
                {
                    sessions.Reserved--;
                    RemoveIfEmpty(owner, sessions);
                }
            }
        }
    }

    public bool Remove(SessionId id)
    {
        if (!_sessions.TryRemove(id, out var session))
        {
            return false;
        }

        Interlocked.Decrement(ref _slots);
        session.Detach();
        var bucket = session.AdmissionBucket;
        if (bucket.Length > 0)
        {
            lock (_ownersGate)
            {
                if (_owners.TryGetValue(bucket, out var sessions))
                {
                    sessions.Live.Remove(session);
                    RemoveIfEmpty(bucket, sessions);
                }
            }
        }

        return true;
    }

    /// <summary>Live sessions of an admission bucket (starts in flight included).</summary>
    public int CountOf(byte[] owner)
    {
        lock (_ownersGate)
        {
            return _owners.TryGetValue(owner, out var sessions) ? sessions.Count : 0;
        }
    }

    /// <summary>The live sessions of an admission bucket, copied.</summary>
    public Session[] SessionsOf(byte[] owner)
    {
        lock (_ownersGate)
        {
            return _owners.TryGetValue(owner, out var sessions) ? [.. sessions.Live] : [];
        }
    }

    /// <summary>A session was used for the first time (-1) or counts as never used (+1).</summary>
    internal void CountUnused(int delta) => Interlocked.Add(ref _unused, delta);

    private void AddToOwner(Session session, bool reserved)
    {
        var bucket = session.AdmissionBucket;
        if (bucket.Length == 0)
        {
            return;
        }

        lock (_ownersGate)
        {
            if (!_owners.TryGetValue(bucket, out var sessions))
            {
                _owners[bucket] = sessions = new OwnerSessions();
            }

            if (reserved)
            {
                sessions.Reserved--;
            }

            sessions.Live.Add(session);
        }
    }

    private void RemoveIfEmpty(byte[] owner, OwnerSessions sessions)
    {
        if (sessions.Count == 0)
        {
            _owners.Remove(owner);
        }
    }

    private sealed class OwnerSessions
    {
        public HashSet<Session> Live { get; } = new(ReferenceEqualityComparer.Instance);

        public int Reserved { get; set; }

        public int Count => Live.Count + Reserved;
    }

    /// <summary>Owners are SHA-256 hashes: equal by content; their first bytes are a good hash.</summary>
    private sealed class OwnerComparer : IEqualityComparer<byte[]>
    {
        public static readonly OwnerComparer Instance = new();

        public bool Equals(byte[]? x, byte[]? y) => x.AsSpan().SequenceEqual(y);

        public int GetHashCode(byte[] obj) => obj.Length >= 4 ? BitConverter.ToInt32(obj, 0) : obj.Length;
    }
}
