using System.ComponentModel;

namespace PersistentServices.Sessions;

/// <summary>Reads and writes <see cref="SessionStateAttribute"/> properties. Called by generated code.</summary>
[EditorBrowsable(EditorBrowsableState.Never)]
public static class SessionStateAccess
{
    /// <summary>The current session's value of <paramref name="key"/> (default when never set).</summary>
    public static T Get<T>(SessionStateKey<T> key)
    {
        ArgumentNullException.ThrowIfNull(key);
        return RequireSession(key.Name).GetState(key);
    }

    /// <summary>Sets the current session's value of <paramref name="key"/>.</summary>
    public static void Set<T>(SessionStateKey<T> key, T value)
    {
        ArgumentNullException.ThrowIfNull(key);
        var scope = PersistentScope.Current;
        if (scope?.Mode == ExecutionMode.ReadOnly)
        {
            throw new InvalidOperationException(
                $"Session state '{key.Name}' cannot be changed by a [PersistentReadOnly] request: read-only methods change no session state ([Phoenix/App §3.3]).");
        }

        RequireSession(key.Name).SetState(key, value);
    }

    private static Session RequireSession(string name)
        => PersistentScope.Current switch
        {
            { Session: { } session } => session,
            null => throw new InvalidOperationException(
                $"Session state '{name}' is only available while a [Persistent] or [PersistentReadOnly] request of a session runs (send the PS-Session header)."),
            _ => throw new SessionRequiredException(name),
        };
}

/// <summary>
/// A request that names no session (no <c>PS-Session</c> header) ran an endpoint that reads session state: the client's
/// mistake, answered <c>400 session-required</c>, not the endpoint's failure.
/// </summary>
internal sealed class SessionRequiredException(string name) : InvalidOperationException(
    $"Session state '{name}' is only available while a request of a session runs: this request sent no PS-Session header.")
{
    public string StateName { get; } = name;
}
