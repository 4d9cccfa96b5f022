using OpenTelemetry.Metrics;

namespace Bookstore.Services;

/// <summary>
/// The gateway in front of the bookstore (<c>Bookstore serve gateway</c>, started by the launcher with <c>--gateway</c>;
/// docs/gateway.md): PersistentServices.Gateway with the services it is told in configuration section
/// <c>PersistentGateway</c> (each behind its path prefix: <c>/pricegrabber</c>, <c>/bookseller</c>, <c>/store-1</c> …). It
/// holds the buyer's requests while a service restarts and resends them with their identity; it logs nothing.
/// </summary>
internal static class GatewayHost
{
    public static async Task<int> RunAsync(string[] args)
    {
        var builder = WebApplication.CreateBuilder(args);
        builder.Logging.UseSingleLineConsole();
        builder.Logging.AddFilter("Yarp", LogLevel.Warning);
        builder.Services.AddSingleton(builder.Configuration.GetSection("Bookstore").Get<ComponentSettings>() ?? new ComponentSettings());
        builder.Services.AddHostedService<ParentWatch>();
        builder.Services.AddPersistentGateway();
        builder.Services.AddHealthChecks();
        builder.Services.AddOpenTelemetry().WithMetrics(metrics => metrics
            .AddMeter("Microsoft.AspNetCore.Hosting", "System.Net.Http")
            .AddPrometheusExporter());

        var app = builder.Build();

        // The gateway's own probes, before the gateway (the services' probes are reached under their prefixes).
        app.MapHealthChecks(OperationsPaths.Live);
        app.MapHealthChecks(OperationsPaths.Ready);
        app.MapPrometheusScrapingEndpoint(OperationsPaths.Metrics);
        app.MapPersistentGateway();
        await app.RunAsync();
        return 0;
    }
}
