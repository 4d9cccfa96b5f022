using System.ComponentModel;

namespace PersistentServices;

/// <summary>Identifies one <see cref="SessionStateAttribute"/> property. Used by generated code.</summary>
/// <typeparam name="T">The property's type.</typeparam>
[EditorBrowsable(EditorBrowsableState.Never)]
public sealed class SessionStateKey<T>
{
    /// <summary>Creates the key for the property named <paramref name="name"/> (namespace, type and property).</summary>
    public SessionStateKey(string name)
    {
        ArgumentException.ThrowIfNullOrEmpty(name);
        Name = name;
    }

    /// <summary>The property's full name.</summary>
    public string Name { get; }

    /// <inheritdoc/>
    public override string ToString() => Name;
}
