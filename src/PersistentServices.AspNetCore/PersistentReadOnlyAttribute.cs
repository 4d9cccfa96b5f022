namespace PersistentServices;

/// <summary>
/// Marks a read-only method ([Phoenix/App §3.3]): it is not logged, forces nothing and changes no session state. It may
/// read the session's state when the request carries a session id. Put it on a controller, an action, or a minimal-API
/// endpoint (as an attribute on the handler, or with the endpoint convention
/// <see cref="Microsoft.AspNetCore.Builder.PersistentEndpointConventionBuilderExtensions.PersistentReadOnly{TBuilder}(TBuilder)"/>).
/// Its replies say <c>PS-Role: read-only</c>.
/// </summary>
[AttributeUsage(AttributeTargets.Class | AttributeTargets.Method, AllowMultiple = false, Inherited = true)]
public sealed class PersistentReadOnlyAttribute : Attribute
{
}
