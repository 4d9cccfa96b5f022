namespace PersistentServices;

/// <summary>
/// Makes an endpoint persistent: each client request runs exactly once through retries, dropped connections and
/// crashes, and the session's state survives a crash ([Phoenix/App §2]; [MSP §3.1]). Put it on a controller, an action,
/// or a minimal-API endpoint (as an attribute on the handler or with <c>.WithMetadata(new PersistentAttribute())</c>).
/// </summary>
[AttributeUsage(AttributeTargets.Class | AttributeTargets.Method, AllowMultiple = false, Inherited = true)]
public sealed class PersistentAttribute : Attribute
{
}

/// <summary>
/// Marks a read-only method ([Phoenix/App §3.3]): it is not logged, forces nothing and changes no session state. It may
/// read the session's state when the request carries a session id.
/// </summary>
[AttributeUsage(AttributeTargets.Class | AttributeTargets.Method, AllowMultiple = false, Inherited = true)]
public sealed class ReadOnlyAttribute : Attribute
{
}
