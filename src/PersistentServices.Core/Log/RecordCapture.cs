namespace PersistentServices.Log;

/// <summary>
/// Keeps the records the open's verification walk reads from <see cref="From"/> on (and single records before it, asked
/// for by LSN), so that recovery's analysis scan takes them from memory instead of reading and verifying the same bytes a
/// second time through FASTER's iterator (docs/checkpoints.md "Where recovery reads the log"). Bodies are copied into shared chunks of memory (no array per
/// record); capture stops once <c>budgetBytes</c> are kept, and what follows is read from the log as before. After the
/// walk only committed records are kept: <see cref="Complete"/> drops a torn tail.
/// </summary>
internal sealed class RecordCapture(long from, IEnumerable<long>? singles = null, long budgetBytes = RecordCapture.DefaultBudgetBytes) : ILogScanVisitor
{
    /// <summary>Record bytes kept at most (what does not fit is read from the log afterwards).</summary>
    public const long DefaultBudgetBytes = 256L << 20;

    private const int ChunkSize = 1 << 16;

    private readonly List<LogRecord> _records = [];
    private readonly HashSet<long> _wanted = singles is null ? [] : [.. singles.Where(lsn => lsn < from)];
    private readonly System.Collections.Concurrent.ConcurrentDictionary<long, LogRecord> _singles = new();
    private byte[] _chunk = [];
    private int _chunkUsed;
    private long _bytes;
    private bool _full;

    /// <summary>The first LSN captured: every intact record at or after it, in log order, until the budget is spent.</summary>
    public long From { get; } = from;

    /// <summary>
    /// Where the captured run ends (valid after <see cref="Complete"/>): every committed record in [<see cref="From"/>,
    /// <see cref="Until"/>) is in <see cref="Records"/>; records from here on must be read from the log.
    /// </summary>
    public long Until { get; private set; }

    /// <summary>The captured committed records, in log order (after <see cref="Complete"/>).</summary>
    public IReadOnlyList<LogRecord> Records => _records;

    /// <summary>A record below <see cref="From"/> asked for by its LSN (a session or shared variable at rest), when it was committed.</summary>
    public bool TryGetSingle(long lsn, [System.Diagnostics.CodeAnalysis.MaybeNullWhen(false)] out LogRecord record) => _singles.TryGetValue(lsn, out record);

    // Runs for every record of the open's walk: optimized at once, not first as tier-0 code (recovery time).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    public void Record(RecordHeader header, ReadOnlySpan<byte> body)
    {
        if (header.Lsn < From)
        {
            // Below the run: two walkers may visit these at once (LogRecoveryScanner walks a long log in two halves).
            if (_wanted.Count > 0 && _wanted.Contains(header.Lsn))
            {
                _singles[header.Lsn] = LogRecord.FromVerified(header, body.ToArray());
            }

            return;
        }

        if (_full)
        {
            return;
        }

        if (_bytes + body.Length > budgetBytes)
        {
            _full = true;
            Until = header.Lsn;
            return;
        }

        _records.Add(LogRecord.FromVerified(header, Copy(body)));
        _bytes += body.Length;
    }

    public void Committed(long until)
    {
        // Nothing here: two walkers report commits out of order; what is committed is decided once, by Complete.
    }

    /// <summary>The walk ended with every record before <paramref name="committedUntil"/> committed: drops the rest.</summary>
    public void Complete(long committedUntil)
    {
        var committed = _records.FindIndex(r => r.Lsn >= committedUntil);
        if (committed >= 0)
        {
            _records.RemoveRange(committed, _records.Count - committed);
        }

        foreach (var lsn in _singles.Keys.Where(lsn => lsn >= committedUntil).ToList())
        {
            _singles.TryRemove(lsn, out _);
        }

        Until = _full ? Math.Min(Until, committedUntil) : committedUntil;
        Until = Math.Max(Until, From);
    }

    /// <summary>Forgets everything captured (the walk starts over).</summary>
    public void Reset()
    {
        _records.Clear();
        _singles.Clear();
        _chunk = [];
        _chunkUsed = 0;
        _bytes = 0;
        _full = false;
        Until = 0;
    }

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    private ReadOnlyMemory<byte> Copy(ReadOnlySpan<byte> body)
    {
        if (body.Length > ChunkSize / 4)
        {
            return body.ToArray();
        }

        if (_chunk.Length - _chunkUsed < body.Length)
        {
            _chunk = GC.AllocateUninitializedArray<byte>(ChunkSize);
            _chunkUsed = 0;
        }

        var copy = _chunk.AsMemory(_chunkUsed, body.Length);
        body.CopyTo(copy.Span);
        _chunkUsed += body.Length;
        return copy;
    }
}
