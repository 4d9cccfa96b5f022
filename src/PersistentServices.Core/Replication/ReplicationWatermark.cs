namespace PersistentServices.Replication;

/// <summary>
/// How far the primary's log is held durably by enough replicas (synchronous replication, docs/replication.md): each
/// replica's durable end as it last reported it, and <see cref="Until"/>, the end that <see cref="Required"/> of them
/// hold. <see cref="Log.DurableLog.WaitUntilDurableAsync"/> waits for it after the local commit, so nothing is
/// acknowledged before the replicas hold it (as PostgreSQL's synchronous standbys: a commit returns once the standbys
/// it waits for have flushed it). With <see cref="Required"/> 0 (asynchronous replication) it never holds anything back.
/// A fence (a replica answered for a newer primary) fails every waiter and every later wait, and faults the log.
/// </summary>
internal sealed class ReplicationWatermark
{
    private readonly long[] _replicas;
    private readonly Lock _lock = new();
    private readonly List<Waiter> _waiters = [];
    private Action<LogFaultedException>? _onFenced;
    private long _until;
    private long _localUntil;
    private LogFaultedException? _fault;

    /// <param name="replicas">How many replicas the primary ships to.</param>
    /// <param name="required">How many of them must hold a record before it is durable: 1 to <paramref name="replicas"/>, or 0 (asynchronous).</param>
    public ReplicationWatermark(int replicas, int required)
    {
        ArgumentOutOfRangeException.ThrowIfNegativeOrZero(replicas);
        ArgumentOutOfRangeException.ThrowIfNegative(required);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(required, replicas);
        _replicas = new long[replicas];
        Required = required;
        _until = required == 0 ? long.MaxValue : 0;
    }

    /// <summary>How many replicas must hold a record before it is durable (0: asynchronous replication).</summary>
    public int Required { get; }

    /// <summary>How many replicas the primary ships to.</summary>
    public int Replicas => _replicas.Length;

    /// <summary>Every record below this is held durably by <see cref="Required"/> replicas (<see cref="long.MaxValue"/> when none is required).</summary>
    public long Until => Volatile.Read(ref _until);

    /// <summary>What this disk holds durably (the log reports it after each commit): what may be shipped.</summary>
    public long LocalUntil => Volatile.Read(ref _localUntil);

    /// <summary>The fence, once a replica answered for a newer primary.</summary>
    public LogFaultedException? Fault => Volatile.Read(ref _fault);

    /// <summary>Fires after every local commit that advanced <see cref="LocalUntil"/> (the shippers wake on it).</summary>
    public event Action? LocalAdvanced;

    /// <summary>The durable end replica <paramref name="replica"/> last reported.</summary>
    public long ReplicaUntil(int replica) => Volatile.Read(ref _replicas[replica]);

    /// <summary>The log's local commit reached <paramref name="until"/>.</summary>
    public void LocallyDurable(long until)
    {
        long current;
        do
        {
            current = Volatile.Read(ref _localUntil);
            if (until <= current)
            {
                return;
            }
        }
        while (Interlocked.CompareExchange(ref _localUntil, until, current) != current);

        LocalAdvanced?.Invoke();
    }

    /// <summary>Replica <paramref name="replica"/> holds everything below <paramref name="durableUntil"/> durably.</summary>
    public void Report(int replica, long durableUntil)
    {
        List<Waiter>? ready = null;
        lock (_lock)
        {
            if (_fault is not null || durableUntil <= _replicas[replica])
            {
                return;
            }

            _replicas[replica] = durableUntil;
            if (Required == 0)
            {
                return;
            }

            // The Required-th largest durable end: what Required replicas hold.
            var sorted = (long[])_replicas.Clone();
            Array.Sort(sorted);
            var until = sorted[^Required];
            if (until <= _until)
            {
                return;
            }

            Volatile.Write(ref _until, until);
            for (var i = _waiters.Count - 1; i >= 0; i--)
            {
                if (_waiters[i].Lsn < until)
                {
                    (ready ??= []).Add(_waiters[i]);
                    _waiters.RemoveAt(i);
                }
            }
        }

        if (ready is not null)
        {
            foreach (var waiter in ready)
            {
                waiter.TrySetResult();
            }
        }
    }

    /// <summary>Completes when <see cref="Required"/> replicas hold the record at <paramref name="lsn"/>.</summary>
    /// <exception cref="LogFaultedException">The primary was fenced, or its log faulted, before they did.</exception>
    public ValueTask WaitAsync(long lsn, CancellationToken cancellationToken = default)
    {
        if (lsn < Until)
        {
            return default;
        }

        Waiter waiter;
        lock (_lock)
        {
            if (lsn < _until)
            {
                return default;
            }

            if (_fault is { } fault)
            {
                return ValueTask.FromException(fault);
            }

            waiter = new Waiter(lsn);
            _waiters.Add(waiter);
        }

        return new ValueTask(cancellationToken.CanBeCanceled ? waiter.Task.WaitAsync(cancellationToken) : waiter.Task);
    }

    /// <summary>A replica answered for a newer primary (or the log faulted): nothing more becomes durable here.</summary>
    public void Fence(LogFaultedException error)
    {
        Action<LogFaultedException>? fenced;
        List<Waiter> failed;
        lock (_lock)
        {
            if (_fault is not null)
            {
                return;
            }

            _fault = error;
            fenced = _onFenced;
            failed = [.. _waiters];
            _waiters.Clear();
        }

        foreach (var waiter in failed)
        {
            waiter.TrySetException(error);
        }

        fenced?.Invoke(error);
    }

    /// <summary>Runs <paramref name="fenced"/> when the watermark faults (the log faults itself with it).</summary>
    internal void OnFenced(Action<LogFaultedException> fenced) => _onFenced = fenced;

    private sealed class Waiter(long lsn) : TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously)
    {
        public long Lsn { get; } = lsn;
    }
}
