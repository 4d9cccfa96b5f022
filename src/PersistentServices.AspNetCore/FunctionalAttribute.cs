namespace PersistentServices;

/// <summary>
/// A functional endpoint or controller (Phoenix/App §3.2.2): stateless and pure, given the same request it always gives
/// the same reply, and it calls only functional services. It is not logged and keeps no last-call table; persistent
/// callers neither force their log before calling it nor log its reply (Algorithm 4: replay calls it again). Its
/// replies say <c>PS-Role: functional</c>. On a minimal-API endpoint or route group, the endpoint convention
/// <see cref="Microsoft.AspNetCore.Builder.PersistentEndpointConventionBuilderExtensions.Functional{TBuilder}(TBuilder)"/> does the same.
/// </summary>
[AttributeUsage(AttributeTargets.Class | AttributeTargets.Method, AllowMultiple = false, Inherited = true)]
public sealed class FunctionalAttribute : Attribute
{
}
