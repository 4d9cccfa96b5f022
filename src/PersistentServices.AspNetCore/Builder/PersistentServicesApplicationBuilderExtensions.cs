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
    /// <summary>
    /// Adds the persistence middleware: <c>[Persistent]</c> endpoints run exactly once per client request, with their
    /// reply forced to the log before it leaves; <c>[PersistentReadOnly]</c> endpoints see session state without logging
    /// (or the endpoint conventions <c>.Persistent()</c> and <c>.PersistentReadOnly()</c>). Maps the session endpoints
    /// (<c>POST</c> and <c>DELETE</c> on <see cref="PersistentServicesOptions.SessionsPath"/>). Call it after
    /// <c>UseAuthentication</c>/<c>UseAuthorization</c> (when used) and before mapping endpoints, on a
    /// <see cref="WebApplication"/> (or another application builder that is also the <see cref="IEndpointRouteBuilder"/>
    /// the endpoints are mapped on). Endpoints without a role are untouched.
    /// </summary>
    public static IApplicationBuilder UsePersistentServices(this IApplicationBuilder app) => app.UsePersistentServices(configureSessionEndpoints: null);

    /// <summary>
    /// <see cref="UsePersistentServices(IApplicationBuilder)"/>, with conventions for the session endpoints, for example
    /// <c>app.UsePersistentServices(sessions =&gt; sessions.RequireRateLimiting("per-client"))</c>.
    /// </summary>
    public static IApplicationBuilder UsePersistentServices(this IApplicationBuilder app, Action<IEndpointConventionBuilder>? configureSessionEndpoints)
    {
        ArgumentNullException.ThrowIfNull(app);

        // Replay routes logged requests over the application's own endpoints, so it needs the route builder they are
        // mapped on: a WebApplication is both the application builder and that route builder.
        if (app is not IEndpointRouteBuilder endpoints)
        {
            throw new InvalidOperationException(
                "UsePersistentServices() needs a WebApplication (minimal hosting), or an application builder that is also the IEndpointRouteBuilder the endpoints are mapped on: replay routes logged requests over the application's endpoints.");
        }

        var options = app.ApplicationServices.GetRequiredService<IOptions<PersistentServicesOptions>>().Value;

        // Recovery's first part (verify the log, open it, the analysis scan) starts now, alongside the rest of the
        // application's startup and the server's; requests are served only once it is done (PersistenceMiddleware holds them).
        _ = app.ApplicationServices.GetRequiredService<global::PersistentServices.Recovery.LogOpener>().StartOpening();
        var sessions = SessionEndpoints.Map(endpoints, options.SessionsPath);
        configureSessionEndpoints?.Invoke(sessions);
        if (options.Domain.Members.Count > 0)
        {
            PersistentServices.Domain.DomainEndpoints.Map(endpoints);
        }

        if (options.Replication.ConfiguredRole != ReplicationRole.None)
        {
            PersistentServices.Replication.ReplicationEndpoints.Map(endpoints);
            if (options.Replication.Failover == FailoverMode.Raft)
            {
                // Raft's messages (DotNext's HTTP transport), signed by the group's own nodes: before the persistence
                // middleware, which answers a replica's requests with 503.
                var failover = app.ApplicationServices.GetRequiredService<PersistentServices.Replication.RaftFailover>();
                app.UseWhen(static context => context.Request.Path.StartsWithSegments(PersistentServices.Replication.RaftFailover.ProtocolPath),
                    branch => branch.Run(failover.HandleAsync));
            }
        }

        return app.UseMiddleware<PersistenceMiddleware>(new Lazy<RequestDelegate>(() => BuildReplayRouter(app, endpoints)));
    }

    /// <summary>
    /// A second router over the application's endpoints, used by replay to route logged requests like live ones: it
    /// sets the matched endpoint on the context and runs nothing. Built on first use, once every endpoint is mapped
    /// (endpoints are mapped after <c>UsePersistentServices()</c>). Only public routing API: a branch of the application
    /// gets its own routing middleware (<c>UseRouting</c>), and <c>UseEndpoints</c> gives that middleware the
    /// application's endpoint data sources, the same instances, which routing's global list already holds (it skips
    /// them), so nothing is listed twice. The branch ends before <c>UseEndpoints</c>' endpoint middleware.
    /// </summary>
    private static RequestDelegate BuildReplayRouter(IApplicationBuilder app, IEndpointRouteBuilder endpoints)
    {
        var router = app.New();
        router.UseRouting();
        router.Use(static (HttpContext _, RequestDelegate _) => Task.CompletedTask);
        router.UseEndpoints(replay =>
        {
            foreach (var dataSource in endpoints.DataSources)
            {
                replay.DataSources.Add(dataSource);
            }
        });
        return router.Build();
    }
}
