namespace PersistentServices;

/// <summary>
/// Makes an endpoint persistent: each client request runs exactly once through retries, dropped connections and
/// crashes, and the session's state survives a crash ([Phoenix/App §2]; [MSP §3.1]). Put it on a controller, an action,
/// or a minimal-API endpoint (as an attribute on the handler, or with the endpoint convention
/// <see cref="Microsoft.AspNetCore.Builder.PersistentEndpointConventionBuilderExtensions.Persistent{TBuilder}(TBuilder)"/>:
/// <c>app.MapPost("/x", handler).Persistent()</c>).
/// </summary>
[AttributeUsage(AttributeTargets.Class | AttributeTargets.Method, AllowMultiple = false, Inherited = true)]
public sealed class PersistentAttribute : Attribute
{
}
