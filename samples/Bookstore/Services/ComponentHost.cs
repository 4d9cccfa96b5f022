using Microsoft.AspNetCore.Diagnostics.HealthChecks;
using Microsoft.AspNetCore.HttpOverrides;
using OpenTelemetry.Metrics;
using OpenTelemetry.Resources;
using PersistentServices;

namespace Bookstore.Services;

/// <summary>
/// One component as its own service process (<c>Bookstore serve &lt;component&gt;</c>, started by the launcher): the
/// library with this service's name, log directory and the deployment's peer key (configuration section
/// <c>PersistentServices</c>), the component's endpoints and clients, its liveness and readiness checks, its metrics for
/// Prometheus and its force counter.
/// </summary>
internal static class ComponentHost
{
    public static readonly string[] Components = ["store", "pricegrabber", "tax", "seller"];

    public static async Task<int> RunAsync(string component, string[] args)
    {
        if (!Components.Contains(component, StringComparer.Ordinal))
        {
            await Console.Error.WriteLineAsync($"unknown component '{component}': one of {string.Join(", ", Components)}");
            return 2;
        }

        var builder = WebApplication.CreateBuilder(args);
        builder.Logging.UseSingleLineConsole();
        // The library's own messages (recovery, sessions, refused calls) stay; each HTTP call and retry attempt is not news.
        builder.Logging.AddFilter("System.Net.Http.HttpClient", LogLevel.Warning);
        builder.Logging.AddFilter("Polly", LogLevel.Warning);
        var settings = builder.Configuration.GetSection("Bookstore").Get<ComponentSettings>() ?? new ComponentSettings();
        builder.Services.AddSingleton(settings);
        builder.Services.AddPersistentServices(options =>
        {
            builder.Configuration.GetSection("PersistentServices").Bind(options);

            // Callees of this deployment restart within a second or two: retry soon.
            options.Calls.RetryDelay = TimeSpan.FromMilliseconds(50);
            options.Calls.MaxRetryDelay = TimeSpan.FromMilliseconds(500);
        });
        builder.Services.AddSingleton<ForceCounter>();
        builder.Services.AddOpenTelemetry()
            .ConfigureResource(resource => resource.AddService(builder.Configuration["PersistentServices:ServiceName"] is { Length: > 0 } name ? name : component))
            .WithMetrics(metrics => metrics
            .AddMeter(PersistentServices.PersistentServicesTelemetry.MeterName, "Microsoft.AspNetCore.Hosting")
            .AddPrometheusExporter());
        builder.Services.AddHostedService<ParentWatch>();
        var useRoles = builder.Configuration.GetValue("PersistentServices:Calls:UseRoles", defaultValue: true);

        // With --replicas the stores (and, in configurations a and b, TaxCalculator) are replication groups: the launcher
        // names them in PersistentServices__Calls__ReplicationGroups__<g>__<n>, bound above, and each call through an
        // AddPersistentCalls() client follows its group's primary (the library's option: README.md "Replicas").
        if (component is "pricegrabber" or "seller")
        {
            // One named client per store, each a persistent-calls client of a typed StoreClient: the client's name is the
            // callee in call ids.
            foreach (var (name, url) in settings.ParseStores())
            {
                builder.Services.AddHttpClient<StoreClient>(name, c => c.BaseAddress = url).AddPersistentCalls();
            }

            builder.Services.AddSingleton<StoreDirectory>();
        }

        if (component == "seller")
        {
            // The client's name ("tax") stays the callee in call ids; its calls are signed for TaxCalculator's service name.
            builder.Services.AddHttpClient(BookSellerEndpoints.TaxClient, c => c.BaseAddress = new Uri(settings.TaxUrl ?? throw new InvalidOperationException("Bookstore:TaxUrl is required")))
                .AddPersistentCalls(BookSellerEndpoints.TaxService);
            builder.Services.AddSingleton<BasketManager>();
        }

        var app = builder.Build();

        // Behind the gateway (--gateway) every client has the gateway's address; the gateway sets X-Forwarded-For, and
        // this trusts it from loopback (ForwardedHeadersOptions' default known proxies) and from the networks the
        // deployment names (Bookstore:TrustedProxyNetworks: the pod network in k8s/base/config.yaml), so per-address
        // shares (MaxSessionsPerAddress) count each client on its own (docs/gateway.md, "Client addresses").
        var forwarded = new ForwardedHeadersOptions { ForwardedHeaders = ForwardedHeaders.XForwardedFor | ForwardedHeaders.XForwardedProto };
        foreach (var network in settings.ParseTrustedProxyNetworks())
        {
            forwarded.KnownIPNetworks.Add(network);
        }

        app.UseForwardedHeaders(forwarded);
        app.UsePersistentServices();
        var service = app.Services.GetRequiredService<Microsoft.Extensions.Options.IOptions<PersistentServicesOptions>>().Value.ServiceName;
        var forces = app.Services.GetRequiredService<ForceCounter>();
        app.MapGet("/diagnostics/forces", () => forces.Snapshot(service));
        app.MapHealthChecks(OperationsPaths.Live, new HealthCheckOptions { Predicate = check => check.Tags.Contains("live") });
        app.MapHealthChecks(OperationsPaths.Ready, new HealthCheckOptions { Predicate = check => check.Tags.Contains("ready") });
        app.MapPrometheusScrapingEndpoint(OperationsPaths.Metrics);

        switch (component)
        {
            case "store":
                BookstoreEndpoints.Map(app, service, useRoles);
                break;
            case "pricegrabber":
                PriceGrabberEndpoints.Map(app, useRoles);
                break;
            case "tax":
                TaxCalculatorEndpoints.Map(app, useRoles);
                break;
            default:
                BookSellerEndpoints.Map(app, useRoles);
                break;
        }

        await app.RunAsync();
        return 0;
    }
}

/// <summary>Stops this component when the launcher that started it is gone (killed, or its terminal closed).</summary>
internal sealed partial class ParentWatch(ComponentSettings settings, IHostApplicationLifetime lifetime, ILogger<ParentWatch> logger) : BackgroundService
{
    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        if (settings.ParentPid <= 0)
        {
            return;
        }

        using var timer = new PeriodicTimer(TimeSpan.FromSeconds(1));
        while (await timer.WaitForNextTickAsync(stoppingToken))
        {
            if (!IsAlive(settings.ParentPid))
            {
                LauncherGone(logger, settings.ParentPid);
                lifetime.StopApplication();
                return;
            }
        }
    }

    [LoggerMessage(EventId = 1, Level = LogLevel.Warning, Message = "The launcher (process {Pid}) is gone: stopping")]
    private static partial void LauncherGone(ILogger logger, int pid);

    private static bool IsAlive(int pid)
    {
        try
        {
            using var process = System.Diagnostics.Process.GetProcessById(pid);
            return !process.HasExited;
        }
        catch (ArgumentException)
        {
            return false;
        }
    }
}
