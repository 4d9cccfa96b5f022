using Microsoft.AspNetCore.Http;
using PersistentServices.Http;

namespace Microsoft.AspNetCore.Builder;

/// <summary>Adds the persistence middleware.</summary>
public static class PersistentServicesApplicationBuilderExtensions
{
    private const string GlobalEndpointRouteBuilderKey = "__GlobalEndpointRouteBuilder";

    /// <summary>
    /// Adds the persistence middleware: <c>[Persistent]</c> endpoints run exactly once per client request, with their
    /// reply forced to the log before it leaves; <c>[ReadOnly]</c> endpoints see session state without logging; the
    /// session resource is served. Call it after <c>UseAuthentication</c>/<c>UseAuthorization</c> (when used) and before
    /// mapping endpoints, on a <see cref="WebApplication"/>. Endpoints without either attribute are untouched.
    /// </summary>
    public static IApplicationBuilder UsePersistentServices(this IApplicationBuilder app)
    {
        ArgumentNullException.ThrowIfNull(app);
        if (!app.Properties.TryGetValue(GlobalEndpointRouteBuilderKey, out var endpoints))
        {
            throw new InvalidOperationException(
                "UsePersistentServices() needs a WebApplication (minimal hosting): replay routes logged requests over the application's endpoints.");
        }

        // A second router over the same endpoints, used by replay to route logged requests like live ones. Built on
        // first use: the routing middleware snapshots the endpoint data sources when it is built, and the endpoints
        // are mapped after this call.
        // WebApplication.New() drops the global route builder from branches, so put it back: this router must see the
        // application's endpoints.
        var router = app.New();
        router.Properties[GlobalEndpointRouteBuilderKey] = endpoints;
        router.UseRouting();
        router.Run(static _ => Task.CompletedTask);
        return app.UseMiddleware<PersistenceMiddleware>(new Lazy<RequestDelegate>(router.Build));
    }
}
