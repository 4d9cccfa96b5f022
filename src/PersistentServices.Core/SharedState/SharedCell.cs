using PersistentServices.Domain;
using PersistentServices.Log.Records;
using PersistentServices.Serialization;

namespace PersistentServices.SharedState;

/// <summary>
/// One shared variable's state (MSP §3.3): its value, its DV, its state number (LSN of its latest write) and the
/// head of its backward chain (latest write or checkpoint). <see cref="Gate"/> is the variable's own lock, held only
/// for an access ("Shared Variable Locking": no lock table, no deadlocks).
/// </summary>
internal sealed class SharedCell(string name)
{
    private object? _value;
    private Type? _valueType;

    public string Name { get; } = name;

    public Lock Gate { get; } = new();

    /// <summary>The current value as logged; null while the variable was never written (its value is the type's default).</summary>
    public byte[]? Bytes { get; private set; }

    /// <summary>How <see cref="Bytes"/> is encoded.</summary>
    public ValueFormat Format { get; private set; }

    /// <summary>
    /// Where recovery of this variable starts: its latest checkpoint record, or its first write when it was never
    /// checkpointed (the start of its backward chain, which orphan undo may follow). 0 while never written.
    /// </summary>
    public long RecoveryLsn { get; set; }

    /// <summary>Service checkpoints taken since this variable's latest checkpoint (an idle variable's is forced after a few).</summary>
    public int ServiceCheckpointsSinceCheckpoint { get; set; }

    public DependencyVector Dv { get; set; } = DependencyVector.Empty;

    /// <summary>LSN of the latest write (or checkpoint) record: the variable's state number.</summary>
    public long StateNumber { get; set; }

    /// <summary>LSN of the latest write or checkpoint record: where the next write's backward pointer points.</summary>
    public long ChainHead { get; set; }

    public int WritesSinceCheckpoint { get; set; }

    public bool CheckpointPending { get; set; }

    /// <summary>
    /// An orphan rollback of this variable under way ([MSP §4.2]), read and set under <see cref="Gate"/>: live accesses
    /// wait for it, so that none reads the orphan value or builds a write on it while the rollback reads the backward chain.
    /// </summary>
    public Task? RollingBack { get; set; }

    /// <summary>
    /// Recovery: the session that held this variable's lock when the service crashed (its update's read is logged, its
    /// write is not). Until that session's replay writes the variable, other live accesses wait, as they would have
    /// waited for the lock; otherwise the replayed update would overwrite what they wrote from a value they never saw.
    /// </summary>
    public Sessions.SessionId? ReservedFor
    {
        get
        {
            lock (_reservation)
            {
                return _reservedFor;
            }
        }
    }

    private readonly object _reservation = new();
    private Sessions.SessionId? _reservedFor;
    private volatile bool _reserved;
    private bool _aborted;

    /// <summary>Recovery failed: a replay waiting for this reservation stops (throws) instead of running on.</summary>
    public void Abort()
    {
        lock (_reservation)
        {
            if (_reservedFor is null)
            {
                return;
            }

            _aborted = true;
            _reservedFor = null;
            _reserved = false;
            Monitor.PulseAll(_reservation);
        }
    }

    public void Reserve(Sessions.SessionId session)
    {
        lock (_reservation)
        {
            _reservedFor = session;
            _reserved = true;
        }
    }

    public void Release(Sessions.SessionId session)
    {
        if (!_reserved)
        {
            return;
        }

        lock (_reservation)
        {
            if (_reservedFor == session)
            {
                _reservedFor = null;
                _reserved = false;
                Monitor.PulseAll(_reservation);
            }
        }
    }

    /// <summary>Blocks while the variable is reserved for another session's replay (the lock it held at the crash).</summary>
    public void WaitIfReservedByOther(Sessions.SessionId session)
    {
        if (!_reserved)
        {
            return;
        }

        lock (_reservation)
        {
            while (_reservedFor is { } owner && owner != session)
            {
                Monitor.Wait(_reservation);
            }

            if (_aborted)
            {
                throw new OperationCanceledException($"Recovery failed while this request waited for shared variable '{Name}', reserved by another session's replay.");
            }
        }
    }

    /// <summary>Sets the value from its logged bytes (recovery: roll forward or roll back).</summary>
    public void SetBytes(byte[]? bytes, ValueFormat format)
    {
        Bytes = bytes;
        Format = format;
        _value = null;
        _valueType = null;
    }

    /// <summary>Sets the value from a live write; <paramref name="bytes"/> is how it was logged.</summary>
    public void SetValue<T>(T value, byte[] bytes, ValueFormat format)
    {
        Bytes = bytes;
        Format = format;
        _value = value;
        _valueType = typeof(T);
    }

    /// <summary>
    /// The value as <typeparamref name="T"/>, decoded once from its logged bytes. Values are immutable, so the same object
    /// is shared.
    /// </summary>
    /// <exception cref="ValueFormatException">The logged value does not read as <typeparamref name="T"/> (its type changed).</exception>
    public T GetValue<T>(ValueCodec codec)
    {
        if (_valueType == typeof(T))
        {
            return (T)_value!;
        }

        T value;
        try
        {
            value = Bytes is null ? default! : codec.Deserialize<T>(Bytes, Format);
        }
        catch (ValueFormatException ex)
        {
            throw SharedStateStore.Unreadable(Name, ex);
        }

        _value = value;
        _valueType = typeof(T);
        return value;
    }
}
