using System.Globalization;
using PersistentServices.SharedState;

namespace PersistentServices;

/// <summary>
/// Keyed shared state: a map whose entries are independent shared variables, each read, written, logged, locked
/// and checkpointed on its own like a <see cref="SharedAttribute"/> property ([MSP §3.3]). Entry <c>k</c> of a
/// map named <c>N</c> is the variable <c>N[k]</c>. Declare one as a static field with a unique, stable name:
/// <code>public static readonly SharedMap&lt;string, int&gt; Stock = new("Bookstore.Stock");</code>
/// </summary>
/// <typeparam name="TKey">Key type; its invariant-culture text names the entry.</typeparam>
/// <typeparam name="TValue">Value type; values are treated as immutable.</typeparam>
public sealed class SharedMap<TKey, TValue>
    where TKey : notnull
{
    /// <summary>Creates the handle of the map named <paramref name="name"/>.</summary>
    public SharedMap(string name)
    {
        ArgumentException.ThrowIfNullOrEmpty(name);
        Name = name;
    }

    /// <summary>The map's name.</summary>
    public string Name { get; }

    /// <summary>Reads the entry for <paramref name="key"/> (the type's default when it was never written).</summary>
    public TValue Get(TKey key) => SharedStateStore.RequireCurrent(Name).Read<TValue>(EntryName(key));

    /// <summary>Replaces the entry for <paramref name="key"/>; only inside a persistent request.</summary>
    public void Set(TKey key, TValue value) => SharedStateStore.RequireCurrent(Name).Write(EntryName(key), value);

    /// <summary>Atomically replaces the entry for <paramref name="key"/> with <paramref name="change"/>(current value); see <see cref="SharedVariable{T}.Update"/>.</summary>
    public TValue Update(TKey key, Func<TValue, TValue> change)
    {
        ArgumentNullException.ThrowIfNull(change);
        return SharedStateStore.RequireCurrent(Name).Update(EntryName(key), change);
    }

    /// <summary>The shared variable behind the entry for <paramref name="key"/>.</summary>
    public string EntryName(TKey key)
    {
        ArgumentNullException.ThrowIfNull(key);
        var text = key is IFormattable formattable ? formattable.ToString(null, CultureInfo.InvariantCulture) : key.ToString();
        return $"{Name}[{text}]";
    }
}
