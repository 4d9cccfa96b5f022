using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Options;
using PersistentServices;
using Microsoft.Extensions.Hosting;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Nondeterminism;
using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Registers PersistentServices.</summary>
public static class PersistentServicesServiceCollectionExtensions
{
    /// <summary>
    /// Adds crash-proof, exactly-once <c>[Persistent]</c> endpoints: the service's log, sessions, the recovery host
    /// (which opens and scans the log before the server accepts traffic) and a health check named
    /// <c>persistentservices</c> (tags <c>ready</c>, <c>live</c>). Options are validated at startup.
    /// Call <c>app.UsePersistentServices()</c> too.
    /// </summary>
    public static IServiceCollection AddPersistentServices(this IServiceCollection services, Action<PersistentServicesOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(services);
        ArgumentNullException.ThrowIfNull(configure);

        services.AddOptions<PersistentServicesOptions>()
            .Configure<IHostEnvironment>((options, environment) => options.ServiceName = environment.ApplicationName)
            .Configure(configure)
            .ValidateOnStart();
        services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<PersistentServicesOptions>, PersistentServicesOptionsValidator>());
        services.TryAddSingleton(TimeProvider.System);
        services.TryAddSingleton<PersistentRuntime>();

        // Time, random numbers and new ids for persistent endpoints: logged on first execution, replayed from the log.
        services.TryAddSingleton(sp => new PersistentTimeProvider(sp.GetRequiredService<TimeProvider>()));
        services.TryAddSingleton<IPersistentRandom, PersistentRandom>();
        services.TryAddSingleton<IPersistentIdGenerator, PersistentIdGenerator>();
        services.TryAddSingleton<ReplayPipeline>();
        services.TryAddSingleton<PersistentServices.Calls.CallRoles>();
        services.TryAddSingleton<PersistentServices.Domain.OrphanRecovery>();
        services.TryAddSingleton<PersistentServices.Domain.DomainHostedService>();
        services.TryAddSingleton<SessionReplayer>();
        services.TryAddSingleton<RecoveryHostedService>();
        services.TryAddSingleton<SessionExpiryService>();
        services.TryAddSingleton<CheckpointHostedService>();
        PersistentServices.Testing.ReplayCheckMode.AddIfRequested(services); // only for psctl replay-check / ReplayCheck.RunAsync (before recovery)
        services.AddHostedService(sp => sp.GetRequiredService<RecoveryHostedService>());
        services.AddHostedService(sp => sp.GetRequiredService<SessionExpiryService>());
        services.AddHostedService<PersistentServices.Http.IdempotencyKeys.IdempotencyKeyExpiryService>();
        services.AddHostedService(sp => sp.GetRequiredService<CheckpointHostedService>());
        services.AddHostedService(sp => sp.GetRequiredService<PersistentServices.Domain.DomainHostedService>());
        // Readiness (recovered, not draining, not faulted) and liveness (only a faulted log or a failed recovery), apart, so
        // that a probe per tag restarts a pod for a fault and only holds traffic back while it recovers or drains.
        services.AddHealthChecks()
            .AddCheck<PersistentServicesHealthCheck>("persistentservices", tags: ["ready"])
            .AddCheck<PersistentServicesLivenessCheck>("persistentservices-live", tags: ["live"]);
        return services;
    }
}
