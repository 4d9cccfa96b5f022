namespace PersistentServices.Diagnostics;

/// <summary>
/// How far one step of an offline tool's work has come, for a progress display (psctl): units done (bytes read or
/// copied) against the units there are. Written by the workers (two at once when a long log is walked in two), read
/// by the display's thread; <see cref="Total"/> is 0 until known, and <see cref="Done"/> may pass it (a walk that reads
/// a page again after damage), so a display caps it.
/// </summary>
internal sealed class WorkProgress(string description)
{
    private long _done;
    private long _total;
    private int _finished;

    /// <summary>What the step does, for the display ("checking the log's entries").</summary>
    public string Description => description;

    public long Total
    {
        get => Volatile.Read(ref _total);
        set => Volatile.Write(ref _total, value);
    }

    public long Done => Volatile.Read(ref _done);

    /// <summary>The step ended (done, or given up): a display shows it as finished.</summary>
    public bool Finished => Volatile.Read(ref _finished) != 0;

    public void Add(long units) => Interlocked.Add(ref _done, units);

    public void Finish() => Volatile.Write(ref _finished, 1);
}
