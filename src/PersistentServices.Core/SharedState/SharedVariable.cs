using System.ComponentModel;

namespace PersistentServices.SharedState;

/// <summary>
/// One shared variable (seed 000 §3.3): a value shared by all sessions, value-logged on every read and write.
/// Created by generated code for each <see cref="SharedAttribute"/> property.
/// </summary>
/// <typeparam name="T">The variable's type; values are treated as immutable (a write replaces the value).</typeparam>
[EditorBrowsable(EditorBrowsableState.Never)]
public sealed class SharedVariable<T>
{
    /// <summary>Creates (registers) the process-wide variable named <paramref name="name"/> (namespace, type and property).</summary>
    public SharedVariable(string name)
    {
        ArgumentException.ThrowIfNullOrEmpty(name);
        Name = name;
    }

    /// <summary>The variable's name (namespace, type and property).</summary>
    public string Name { get; }

    /// <summary>Reads the value (logged with the variable's DV inside persistent requests).</summary>
    public T Read() => throw new NotSupportedException("Shared variables arrive with the shared-state issue.");

    /// <summary>Replaces the value (logged with the writer's DV and the previous write's LSN).</summary>
    public void Write(T value) => throw new NotSupportedException("Shared variables arrive with the shared-state issue.");
}
