namespace PersistentServices;

/// <summary>
/// Marks a <c>partial</c> property as a shared variable: one value shared by all sessions, value-logged on every read
/// and write ([MSP §3.3]). Allowed as a static member of a <c>[Persistent]</c> controller or as a member of a
/// <see cref="SharedStateAttribute"/> class registered as a singleton. Values are immutable from the library's point of
/// view: a write replaces the value.
/// </summary>
[AttributeUsage(AttributeTargets.Property, AllowMultiple = false, Inherited = false)]
public sealed class SharedAttribute : Attribute
{
}

/// <summary>
/// Marks a class holding <see cref="SharedAttribute"/> properties. Register it as a singleton; every instance reads
/// and writes the same shared variables (named after the class and property).
/// </summary>
[AttributeUsage(AttributeTargets.Class, AllowMultiple = false, Inherited = false)]
public sealed class SharedStateAttribute : Attribute
{
}
