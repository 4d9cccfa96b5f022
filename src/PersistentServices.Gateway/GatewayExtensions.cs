using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Microsoft.Extensions.Configuration;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using PersistentServices.Gateway;

namespace Microsoft.Extensions.DependencyInjection
{
    /// <summary>Registers the PersistentServices gateway (docs/gateway.md).</summary>
    public static class PersistentGatewayServiceCollectionExtensions
    {
        /// <summary>The configuration section the gateway's options bind from: <c>PersistentGateway</c>.</summary>
        public const string ConfigurationSectionName = "PersistentGateway";

        /// <summary>
        /// Adds the gateway: its options (bound from the <c>PersistentGateway</c> configuration section, then
        /// <paramref name="configure"/>), validated at startup, and YARP's forwarder. Map it with
        /// <c>app.MapPersistentGateway()</c>.
        /// </summary>
        public static IServiceCollection AddPersistentGateway(this IServiceCollection services, Action<PersistentGatewayOptions>? configure = null)
        {
            ArgumentNullException.ThrowIfNull(services);
            var options = services.AddOptions<PersistentGatewayOptions>()
                .Configure<IConfiguration>((o, configuration) => configuration.GetSection(ConfigurationSectionName).Bind(o))
                .ValidateOnStart();
            if (configure is not null)
            {
                options.Configure(configure);
            }

            services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<PersistentGatewayOptions>, PersistentGatewayOptionsValidator>());
            services.TryAddSingleton(TimeProvider.System);
            services.AddHttpForwarder();

            // Bodies are kept to be resent; a client that trickles one is closed (docs/gateway.md, "Configuration").
            services.AddOptions<KestrelServerOptions>().Configure<IOptions<PersistentGatewayOptions>>((kestrel, gateway) =>
                kestrel.Limits.MinRequestBodyDataRate = new MinDataRate(gateway.Value.MinRequestBodyDataRate, TimeSpan.FromSeconds(5)));

            // Every failed send is the gateway's own event (held: debug; not resent or held past HoldTime: a warning), so
            // YARP's warning with a stack trace for each one (HttpForwarder[48]) is left out.
            services.Configure<LoggerFilterOptions>(o => o.AddFilter("Yarp.ReverseProxy.Forwarder.HttpForwarder", LogLevel.Error));
            services.TryAddSingleton(sp => new GatewayTopology(sp.GetRequiredService<IOptions<PersistentGatewayOptions>>().Value));
            services.TryAddSingleton<GatewayForwarder>();
            return services;
        }
    }
}

namespace Microsoft.AspNetCore.Builder
{
    /// <summary>Maps the PersistentServices gateway (docs/gateway.md).</summary>
    public static class PersistentGatewayEndpointRouteBuilderExtensions
    {
        /// <summary>
        /// Maps every path to the gateway (at the lowest priority: the application's own endpoints, such as the gateway's
        /// health checks, win). Each request goes to the service whose path prefix it matches, to the instance that owns it.
        /// </summary>
        public static IEndpointConventionBuilder MapPersistentGateway(this IEndpointRouteBuilder endpoints)
        {
            ArgumentNullException.ThrowIfNull(endpoints);
            var forwarder = endpoints.ServiceProvider.GetRequiredService<GatewayForwarder>();
            var options = endpoints.ServiceProvider.GetRequiredService<IOptions<PersistentGatewayOptions>>().Value;
            var logger = endpoints.ServiceProvider.GetRequiredService<ILoggerFactory>().CreateLogger("PersistentServices.Gateway");
            GatewayEvents.Started(logger, options.Services.Count, options.Services.Sum(s => s.Value.Instances.Count), options.HoldTime);
            return endpoints.MapFallback(forwarder.InvokeAsync);
        }
    }
}
