namespace PersistentServices.Sessions;

/// <summary>How the current request runs.</summary>
internal enum ExecutionMode
{
    /// <summary>A logged request executing for the first time.</summary>
    Live,

    /// <summary>A logged request re-executed from the log during recovery (seed 000 §4.1 "Logged Request Replay").</summary>
    Replay,

    /// <summary>A read-only request (seed 001 §3.3): not logged, changes no session state.</summary>
    ReadOnly,
}

/// <summary>The ambient context of a persistent or read-only request: its session and how it runs.</summary>
internal sealed class PersistentScope
{
    private static readonly AsyncLocal<PersistentScope?> Ambient = new();

    public PersistentScope(Session? session, ExecutionMode mode)
    {
        Session = session;
        Mode = mode;
    }

    /// <summary>The scope of the code running now, or null outside persistent and read-only requests.</summary>
    public static PersistentScope? Current => Ambient.Value;

    public Session? Session { get; }

    public ExecutionMode Mode { get; }

    /// <summary>Makes <paramref name="scope"/> current until the returned value is disposed.</summary>
    public static Restore Enter(PersistentScope scope)
    {
        var previous = Ambient.Value;
        Ambient.Value = scope;
        return new Restore(previous);
    }

    public readonly struct Restore(PersistentScope? previous) : IDisposable
    {
        public void Dispose() => Ambient.Value = previous;
    }
}
