using Microsoft.AspNetCore.Authorization;
using Microsoft.AspNetCore.Authorization.Policy;
using Microsoft.AspNetCore.Http;

namespace PersistentServices.Sessions;

/// <summary>Marks the admin endpoints (<see cref="AdminEndpoints.Map"/>) for <see cref="AdminAuthorizationResultHandler"/>.</summary>
internal sealed record AdminEndpointMetadata(string Policy);

/// <summary>
/// The authorization middleware's answer to a refused admin request: what the application's handler (ASP.NET's default,
/// or one it registered before <c>AddPersistentServices</c>) does, the challenge or forbid of the policy's schemes, and
/// then, when that left a bare <c>401</c>/<c>403</c> not yet sent, the <c>admin-forbidden</c> problem with event 1164, as
/// the endpoints' own check answers (docs/operations.md, "Operator repair"). A challenge that redirects (a cookie
/// scheme's login page) or writes its own body is left as it is. Every other endpoint and every allowed request goes to
/// the application's handler unchanged.
/// </summary>
internal sealed class AdminAuthorizationResultHandler(IAuthorizationMiddlewareResultHandler inner) : IAuthorizationMiddlewareResultHandler
{
    public async Task HandleAsync(RequestDelegate next, HttpContext context, AuthorizationPolicy policy, PolicyAuthorizationResult authorizeResult)
    {
        await inner.HandleAsync(next, context, policy, authorizeResult).ConfigureAwait(false);
        if (authorizeResult.Succeeded || context.GetEndpoint()?.Metadata.GetMetadata<AdminEndpointMetadata>() is not { } admin ||
            context.Response.HasStarted || context.Response.StatusCode is not (StatusCodes.Status401Unauthorized or StatusCodes.Status403Forbidden))
        {
            return;
        }

        await AdminEndpoints.RefuseAsync(context, admin.Policy, byMiddleware: true).ConfigureAwait(false);
    }
}
