using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Options;
using PersistentServices;
using PersistentServices.Http;
using PersistentServices.Sessions;

namespace Microsoft.AspNetCore.Builder;

/// <summary>Adds the persistence middleware and the session endpoints.</summary>
public static class PersistentServicesApplicationBuilderExtensions
{
    private const string GlobalEndpointRouteBuilderKey = "__GlobalEndpointRouteBuilder";

    /// <summary>
    /// Adds the persistence middleware: <c>[Persistent]</c> endpoints run exactly once per client request, with their
    /// reply forced to the log before it leaves; <c>[ReadOnly]</c> endpoints see session state without logging. Maps the
    /// session endpoints (<c>POST</c> and <c>DELETE</c> on <see cref="PersistentServicesOptions.SessionsPath"/>). Call it
    /// after <c>UseAuthentication</c>/<c>UseAuthorization</c> (when used) and before mapping endpoints, on a
    /// <see cref="WebApplication"/>. Endpoints without either attribute are untouched.
    /// </summary>
    public static IApplicationBuilder UsePersistentServices(this IApplicationBuilder app) => app.UsePersistentServices(configureSessionEndpoints: null);

    /// <summary>
    /// <see cref="UsePersistentServices(IApplicationBuilder)"/>, with conventions for the session endpoints, for example
    /// <c>app.UsePersistentServices(sessions =&gt; sessions.RequireRateLimiting("per-client"))</c>.
    /// </summary>
    public static IApplicationBuilder UsePersistentServices(this IApplicationBuilder app, Action<IEndpointConventionBuilder>? configureSessionEndpoints)
    {
        ArgumentNullException.ThrowIfNull(app);
        if (!app.Properties.TryGetValue(GlobalEndpointRouteBuilderKey, out var global) || global is not IEndpointRouteBuilder endpoints)
        {
            throw new InvalidOperationException(
                "UsePersistentServices() needs a WebApplication (minimal hosting): replay routes logged requests over the application's endpoints.");
        }

        var options = app.ApplicationServices.GetRequiredService<IOptions<PersistentServicesOptions>>().Value;

        // Recovery's first part (verify the log, open it, the analysis scan) starts now, alongside the rest of the
        // application's startup and the server's; requests are served only once it is done (PersistenceMiddleware holds them).
        _ = app.ApplicationServices.GetRequiredService<global::PersistentServices.Hosting.PersistentRuntime>().StartOpening();
        var sessions = SessionEndpoints.Map(endpoints, options.SessionsPath);
        configureSessionEndpoints?.Invoke(sessions);
        if (options.Domain.Members.Count > 0)
        {
            PersistentServices.Domain.DomainEndpoints.Map(endpoints);
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
