using PersistentServices.SharedState;

namespace PersistentServices;

/// <summary>
/// One shared variable ([MSP §3.3]): a value shared by all sessions, value-logged on every read and write inside a
/// persistent request. Generated code creates one for each <see cref="SharedAttribute"/> property; declare one yourself
/// (a static field with a unique, stable name) when you need <see cref="Update"/>.
/// </summary>
/// <typeparam name="T">The variable's type; values are treated as immutable (a write replaces the value).</typeparam>
public sealed class SharedVariable<T>
{
    /// <summary>Creates the handle of the variable named <paramref name="name"/> (namespace, type and property) in whichever service runs the request that uses it.</summary>
    public SharedVariable(string name)
    {
        ArgumentException.ThrowIfNullOrEmpty(name);
        Name = name;
    }

    /// <summary>The variable's name (namespace, type and property).</summary>
    public string Name { get; }

    /// <summary>
    /// Reads the value. Inside a persistent request the read is logged with the variable's DV (and in replay the logged
    /// value is returned); in a read-only request the reply waits until the value is durable; in another request of the service it is a plain
    /// read. Outside any request of a service it throws <see cref="InvalidOperationException"/>: the handle names a
    /// variable, and only a running request says whose.
    /// </summary>
    public T Read() => SharedStateStore.RequireCurrent(Name).Read<T>(Name);

    /// <summary>Replaces the value; only inside a persistent request (logged with the writer's DV and the previous write's LSN).</summary>
    public void Write(T value) => SharedStateStore.RequireCurrent(Name).Write(Name, value);

    /// <summary>
    /// Atomically replaces the value with <paramref name="change"/>(current value) and returns the new value: one hold of
    /// the variable's lock covers the logged read and the logged write. Only inside a persistent request;
    /// <paramref name="change"/> must be deterministic (in replay it gets the logged value). Another variable may be
    /// updated inside <paramref name="change"/>; nest updates in one fixed order to avoid deadlocks.
    /// </summary>
    public T Update(Func<T, T> change)
    {
        ArgumentNullException.ThrowIfNull(change);
        return SharedStateStore.RequireCurrent(Name).Update(Name, change);
    }
}
