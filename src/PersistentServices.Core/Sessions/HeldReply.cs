namespace PersistentServices.Sessions;

/// <summary>
/// What a session keeps so that a retry of its last request gets the reply again ([MSP §3.1] buffered reply): the reply
/// itself (in memory, counted against the session memory budget), or only where the log holds it in full
/// ([Phoenix/App §4.4]: "only LSNs are filled in; actual reply messages are only read when they are required to reply to
/// a duplicate call"). Only a session's last reply is ever kept.
/// </summary>
internal sealed class HeldReply
{
    private IReadOnlyList<(Func<object, Task> Callback, object State)>? _deferredOnCompleted;

    private HeldReply(BufferedReply? reply, ReplyLocation location)
    {
        Reply = reply;
        Location = location;
    }

    /// <summary>The reply, in memory; null when only the log holds it (<see cref="Location"/>).</summary>
    public BufferedReply? Reply { get; }

    /// <summary>Where the log holds the reply, when <see cref="Reply"/> is null.</summary>
    public ReplyLocation Location { get; }

    /// <summary>True when a duplicate must read the reply back from the log.</summary>
    public bool InLog => Reply is null;

    /// <summary>Memory counted against the session memory budget: the reply's, or nothing for a reply in the log.</summary>
    public long MemoryBytes => Reply?.MemoryBytes ?? 0;

    /// <summary>Log bytes the reply takes when only the log holds it (0 when it is in memory).</summary>
    public long LogBytes => Reply is null ? Location.LogBytes : 0;

    public static HeldReply InMemory(BufferedReply reply) => new(reply, default);

    /// <summary>Only the location; OnCompleted callbacks deferred on <paramref name="from"/> move along.</summary>
    public static HeldReply InTheLog(ReplyLocation location, BufferedReply? from = null)
    {
        var held = new HeldReply(null, location);
        if (from?.TakeDeferredOnCompleted() is { } callbacks)
        {
            held._deferredOnCompleted = callbacks;
        }

        return held;
    }

    /// <summary>The same reply, copied to <paramref name="location"/> in the log; deferred OnCompleted callbacks move along.</summary>
    public HeldReply MovedTo(ReplyLocation location)
    {
        var moved = new HeldReply(null, location);
        if (TakeDeferredOnCompleted() is { } callbacks)
        {
            moved._deferredOnCompleted = callbacks;
        }

        return moved;
    }

    /// <summary>The deferred OnCompleted callbacks of a reply replay finished (see <see cref="BufferedReply.DeferOnCompleted"/>), once.</summary>
    public IReadOnlyList<(Func<object, Task> Callback, object State)>? TakeDeferredOnCompleted()
        => Reply is { } reply ? reply.TakeDeferredOnCompleted() : Interlocked.Exchange(ref _deferredOnCompleted, null);
}
