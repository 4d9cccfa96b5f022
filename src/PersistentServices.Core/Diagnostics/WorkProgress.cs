namespace PersistentServices.Diagnostics;

/// <summary>
/// How far one step of an offline tool's work has come, for a progress display (psctl): units done (bytes read or
/// copied) against the units there are. Written by the workers (two at once when a long log is walked in two), read
/// by the display's thread; <see cref="Total"/> is 0 until known, and <see cref="Done"/> may pass it (a walk that reads
/// a page again after damage), so a display caps it. <paramref name="unit"/> names what is counted when it is not bytes.
/// </summary>
internal sealed class WorkProgress(string description, string? unit = null)
{
    private long _done;
    private long _total;
    private int _finished;

    /// <summary>What the step does, for the display ("checking the log's entries").</summary>
    public string Description => description;

    /// <summary>What <see cref="Done"/> and <see cref="Total"/> count ("sessions"); null for bytes.</summary>
    public string? Unit => unit;

    public long Total
    {
        get => Volatile.Read(ref _total);
        set => Volatile.Write(ref _total, value);
    }

    public long Done => Volatile.Read(ref _done);

    /// <summary>The step ended (done, or given up): a display shows it as finished.</summary>
    public bool Finished => Volatile.Read(ref _finished) != 0;

    public void Add(long units) => Interlocked.Add(ref _done, units);

    /// <summary>How far the step has come, as its single worker learned it (replay-check polling its service).</summary>
    public void Report(long done, long total)
    {
        Volatile.Write(ref _done, done);
        Total = total;
    }

    public void Finish() => Volatile.Write(ref _finished, 1);
}
