using Microsoft.AspNetCore.Authorization;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.Hosting;
using PersistentServices.Sessions;

namespace Microsoft.AspNetCore.Builder;

/// <summary>Maps the operator's endpoints: find, inspect, discard and release sessions (docs/operations.md, "Operator repair").</summary>
public static class PersistentServicesAdminEndpointRouteBuilderExtensions
{
    /// <summary>
    /// Maps the PersistentServices admin endpoints under <paramref name="pattern"/>, behind the authorization policy
    /// <paramref name="authorizationPolicy"/> (required: the endpoints are never mapped without one):
    /// <c>GET {pattern}/sessions</c> lists the live sessions by trace tag (paged; <c>?state=quarantined</c> finds the
    /// quarantined ones), <c>GET {pattern}/sessions/{tag-or-id}</c> shows one with its logged requests and replies (bodies only
    /// with <c>?bodies=true</c>), <c>POST {pattern}/sessions/{tag-or-id}/discard</c> ends a quarantined session (a quarantined
    /// Idempotency-Key becomes an expired key) and <c>POST {pattern}/sessions/{tag-or-id}/release</c> lets it serve again with
    /// no state. Each repair is logged in the service's log and to <c>ILogger</c> with the acting principal. Off unless
    /// mapped; needs <c>AddAuthorization</c> with the policy registered, and <c>UseAuthorization()</c> after
    /// <c>UseAuthentication()</c>.
    /// </summary>
    /// <param name="endpoints">The application (a <see cref="WebApplication"/>) or a route group.</param>
    /// <param name="authorizationPolicy">The name of a registered authorization policy that admits operators only.</param>
    /// <param name="pattern">Where the endpoints go; default <c>/ps/admin</c>.</param>
    /// <returns>The endpoints' group, for more conventions (rate limiting, a host requirement).</returns>
    /// <exception cref="ArgumentException"><paramref name="authorizationPolicy"/> is empty, or <paramref name="pattern"/> is not a path.</exception>
    /// <exception cref="InvalidOperationException">
    /// <c>AddPersistentServices</c> or <c>AddAuthorization</c> was not called, or no policy named
    /// <paramref name="authorizationPolicy"/> is registered.
    /// </exception>
    public static IEndpointConventionBuilder MapPersistentServicesAdmin(this IEndpointRouteBuilder endpoints, string authorizationPolicy, string pattern = "/ps/admin")
    {
        ArgumentNullException.ThrowIfNull(endpoints);
        if (string.IsNullOrWhiteSpace(authorizationPolicy))
        {
            throw new ArgumentException(
                "The admin endpoints need the name of an authorization policy that admits operators only (for example AddAuthorization(o => o.AddPolicy(\"ops\", " +
                "p => p.RequireRole(\"ops\")))); they are never mapped without one.", nameof(authorizationPolicy));
        }

        if (string.IsNullOrWhiteSpace(pattern) || pattern[0] != '/' || (pattern.Length > 1 && pattern[^1] == '/') || pattern.Contains('{', StringComparison.Ordinal))
        {
            throw new ArgumentException($"The admin endpoints' pattern must be a path such as \"/ps/admin\": starting with '/', not ending with one, without route parameters (was \"{pattern}\").",
                nameof(pattern));
        }

        var services = endpoints.ServiceProvider;
        if (services.GetService<IServiceProviderIsService>() is { } registered && !registered.IsService(typeof(PersistentRuntime)))
        {
            throw new InvalidOperationException("MapPersistentServicesAdmin needs AddPersistentServices() in the application's services.");
        }

        if (services.GetService<IAuthorizationPolicyProvider>() is not { } policies)
        {
            throw new InvalidOperationException(
                $"MapPersistentServicesAdmin needs authorization: call builder.Services.AddAuthorization(o => o.AddPolicy(\"{authorizationPolicy}\", …)) and app.UseAuthorization().");
        }

        // A policy name that is not registered fails here, at startup, rather than at the first request. (A policy provider
        // that answers asynchronously is asked at each request instead, where a missing policy throws: never an open endpoint.)
        var policy = policies.GetPolicyAsync(authorizationPolicy);
        if (policy.IsCompletedSuccessfully && policy.Result is null)
        {
            throw new InvalidOperationException(
                $"MapPersistentServicesAdmin: no authorization policy named '{authorizationPolicy}' is registered. Register it with " +
                $"builder.Services.AddAuthorization(o => o.AddPolicy(\"{authorizationPolicy}\", p => …)).");
        }

        return AdminEndpoints.Map(endpoints, pattern, authorizationPolicy);
    }
}
