using PersistentServices.Domain;

namespace PersistentServices.Sessions;

/// <summary>The ambient context of a persistent or read-only request: its session, how it runs, and what it logs.</summary>
internal sealed class PersistentScope
{
    private static readonly AsyncLocal<PersistentScope?> Ambient = new();

    public PersistentScope(Session? session, ExecutionMode mode, RequestExecution? execution = null)
    {
        Session = session;
        Mode = mode;
        Execution = execution;
    }

    /// <summary>The scope of the code running now, or null outside persistent and read-only requests.</summary>
    public static PersistentScope? Current => Ambient.Value;

    public Session? Session { get; }

    public ExecutionMode Mode { get; }

    /// <summary>The logged request being executed or replayed (null for read-only requests).</summary>
    public RequestExecution? Execution { get; }

    /// <summary>Read-only requests: the highest LSN of shared state the reply shows; the reply waits until it is durable.</summary>
    public long ReadOnlyDependsOn { get; set; }

    /// <summary>Read-only requests in a domain: the DVs of the shared values the reply shows (flushed before it leaves).</summary>
    public Domain.DependencyVector ReadOnlyDv { get; set; } = Domain.DependencyVector.Empty;

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
