namespace PersistentServices.Sessions;

/// <summary>
/// The byte budget for what sessions hold in memory between requests: their buffered replies (body, headers and the
/// objects around them, <see cref="BufferedReply.MemoryBytes"/>). A reply larger than <see cref="MaxBufferedReplyBytes"/>,
/// or one that would take the replies held above <see cref="BudgetBytes"/>, is logged in full instead and read back from
/// the log when a duplicate needs it (docs/capacity.md). Replies in memory are reserved before they are logged, so the
/// replies held never exceed the budget, except after a restart, when replay rebuilds replies that were logged short.
/// </summary>
internal sealed class SessionMemory
{
    private long _held;
    private long _inLog;
    private long _loggedInFull;

    public SessionMemory(long budgetBytes, int maxBufferedReplyBytes)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(budgetBytes);
        ArgumentOutOfRangeException.ThrowIfNegative(maxBufferedReplyBytes);
        BudgetBytes = budgetBytes;
        MaxBufferedReplyBytes = maxBufferedReplyBytes;
    }

    /// <summary>No limit (tests and tools that host sessions without options): every reply stays in memory.</summary>
    public static SessionMemory Unlimited => new(long.MaxValue, int.MaxValue);

    /// <summary>Most bytes of replies held in memory.</summary>
    public long BudgetBytes { get; }

    /// <summary>A reply costing more than this (<see cref="BufferedReply.MemoryBytes"/>) is always logged in full.</summary>
    public int MaxBufferedReplyBytes { get; }

    /// <summary>Bytes of replies held in memory now (reserved ones included).</summary>
    public long HeldBytes => Volatile.Read(ref _held);

    /// <summary>
    /// About how many bytes of log the replies that live sessions keep there take (what the log must retain for them, and
    /// what copying all of them forward would cost).
    /// </summary>
    public long LogHeldBytes => Volatile.Read(ref _inLog);

    /// <summary>Counts log bytes of replies kept in the log (negative: released).</summary>
    public void AddInLog(long bytes)
    {
        if (bytes != 0)
        {
            Interlocked.Add(ref _inLog, bytes);
        }
    }

    /// <summary>
    /// An idle session's reply kept in the log is copied forward only once it lies this far behind the log's tail, or
    /// twice <see cref="LogHeldBytes"/> if that is more (<see cref="Checkpoints.SessionCheckpoints.TakeIdleAsync"/>).
    /// Default 64 MiB (tests lower it).
    /// </summary>
    public long MinRelocationWindowBytes { get; set; } = 64L << 20;

    /// <summary>Replies logged in full since start (because of their size or the budget).</summary>
    public long LoggedInFull => Volatile.Read(ref _loggedInFull);

    /// <summary>
    /// Decides where a reply costing <paramref name="bytes"/> is kept: true (and the bytes reserved) to hold it in memory;
    /// false to log it in full (<paramref name="reason"/> says why: its size, or the budget).
    /// </summary>
    public bool TryReserve(long bytes, out string? reason)
    {
        if (bytes > MaxBufferedReplyBytes)
        {
            reason = "size";
            Interlocked.Increment(ref _loggedInFull);
            return false;
        }

        var held = Volatile.Read(ref _held);
        while (true)
        {
            if (held + bytes > BudgetBytes)
            {
                reason = "budget";
                Interlocked.Increment(ref _loggedInFull);
                return false;
            }

            var seen = Interlocked.CompareExchange(ref _held, held + bytes, held);
            if (seen == held)
            {
                reason = null;
                return true;
            }

            held = seen;
        }
    }

    /// <summary>Counts bytes held without asking (a reply rebuilt by replay, restored from a checkpoint, or of a session joining the table).</summary>
    public void Add(long bytes)
    {
        if (bytes != 0)
        {
            Interlocked.Add(ref _held, bytes);
        }
    }

    public void Release(long bytes)
    {
        if (bytes != 0)
        {
            Interlocked.Add(ref _held, -bytes);
        }
    }
}
