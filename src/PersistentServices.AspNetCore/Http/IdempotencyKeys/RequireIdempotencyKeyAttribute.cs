namespace PersistentServices;

/// <summary>
/// On a <c>[Persistent]</c> endpoint: a request must be deduplicated by the caller, either with an <c>Idempotency-Key</c>
/// header or as a request of a session (<c>PS-Session</c>/<c>PS-Seq</c>); a request with neither gets
/// <c>400 idempotency-key-missing</c> (problem details) and is not executed. Without this attribute such a request gets
/// <c>400 session-header</c>, which names both ways as well. docs/client.md. On a minimal-API endpoint or route group,
/// the endpoint convention
/// <see cref="Microsoft.AspNetCore.Builder.PersistentEndpointConventionBuilderExtensions.RequireIdempotencyKey{TBuilder}(TBuilder)"/>
/// does the same.
/// </summary>
[AttributeUsage(AttributeTargets.Class | AttributeTargets.Method, AllowMultiple = false, Inherited = true)]
public sealed class RequireIdempotencyKeyAttribute : Attribute
{
}
