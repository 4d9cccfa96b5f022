using System.ComponentModel;
using PersistentServices.Sessions;

namespace PersistentServices;

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
