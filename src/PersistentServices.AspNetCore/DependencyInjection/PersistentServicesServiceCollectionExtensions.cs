using Microsoft.Extensions.Configuration;
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
    /// <summary>The configuration section the options are read from: <c>PersistentServices</c>.</summary>
    public const string ConfigurationSectionName = "PersistentServices";

    /// <summary>
    /// Adds crash-proof, exactly-once <c>[Persistent]</c> endpoints with options from the configuration section
    /// <c>PersistentServices</c> (<see cref="ConfigurationSectionName"/>; appsettings.json, environment variables such as
    /// <c>PersistentServices__LogDirectory</c>, <c>--PersistentServices:LogDirectory=...</c>). Options are validated at
    /// startup: <see cref="PersistentServicesOptions.LogDirectory"/> must be set. To change options in code as well, add
    /// <c>services.Configure&lt;PersistentServicesOptions&gt;(o =&gt; ...)</c> after it. Otherwise as
    /// <see cref="AddPersistentServices(IServiceCollection, Action{PersistentServicesOptions})"/>.
    /// </summary>
    public static IServiceCollection AddPersistentServices(this IServiceCollection services)
    {
        ArgumentNullException.ThrowIfNull(services);
        return services.AddPersistentServicesCore(static (options, provider) =>
            provider.GetService<IConfiguration>()?.GetSection(ConfigurationSectionName).Bind(options));
    }

    /// <summary>
    /// Adds crash-proof, exactly-once <c>[Persistent]</c> endpoints: the service's log, sessions, the recovery host
    /// (which opens and scans the log before the server accepts traffic) and a health check named
    /// <c>persistentservices</c> (tags <c>ready</c>, <c>live</c>). Options come from <paramref name="configure"/> only (to
    /// read them from configuration, use <see cref="AddPersistentServices(IServiceCollection)"/>, or bind the section in
    /// the delegate) and are validated at startup. Call <c>app.UsePersistentServices()</c> too.
    /// </summary>
    public static IServiceCollection AddPersistentServices(this IServiceCollection services, Action<PersistentServicesOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(services);
        ArgumentNullException.ThrowIfNull(configure);
        return services.AddPersistentServicesCore((options, _) => configure(options));
    }

    private static IServiceCollection AddPersistentServicesCore(this IServiceCollection services, Action<PersistentServicesOptions, IServiceProvider> configure)
    {
        // The service name defaults to the application's, then the options' source: the configuration section (when the
        // host has a configuration; a bare ServiceCollection may not) or the application's delegate.
        services.AddOptions<PersistentServicesOptions>()
            .Configure<IHostEnvironment>((options, environment) => options.ServiceName = environment.ApplicationName)
            .Configure<IServiceProvider>(configure)
            .ValidateOnStart();
        services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<PersistentServicesOptions>, PersistentServicesOptionsValidator>());
        services.TryAddSingleton(TimeProvider.System);

        // The service's meter and instruments, from the host's IMeterFactory (one set per host, as ASP.NET Core's
        // rate-limiting metrics): AddMetrics is a no-op where the host already added it.
        services.AddMetrics();
        services.TryAddSingleton<PersistentServicesMetrics>();

        // Crash points for the kill tests (docs/checkpoints.md): a test program may register its own first; otherwise the
        // host's configuration arms one (PERSISTENTSERVICES_CRASH_POINT, PERSISTENTSERVICES_CRASH_AFTER, so a process
        // started by a crash test needs no code of its own), and none is armed when it names none.
        services.TryAddSingleton(static provider => CrashPointsFromConfiguration(provider.GetService<Microsoft.Extensions.Configuration.IConfiguration>()));
        services.TryAddSingleton<ServiceAvailability>();
        services.TryAddSingleton<PersistentRuntime>();
        AddAdminRefusals(services);
        services.TryAddSingleton<PersistentServices.Replication.ReplicationNode>();
        services.TryAddSingleton<PersistentServices.Replication.ReplicationHealth>();
        services.TryAddSingleton<PersistentServices.Replication.HotFollower>();
        services.TryAddSingleton<PersistentServices.Replication.RaftFailover>();
        services.TryAddSingleton<LogOpener>();

        // The client the service domain's messages (flush, recovered state numbers) go out on: created once by ServiceDomain,
        // so one handler for the service's life, connections idle for a minute closed, each request bounded by the flush
        // timeout. Only its own retry pipeline (ServiceDomain): no handler the application adds to every client
        // (ConfigureHttpClientDefaults runs before this), no per-request logging.
        services.AddHttpClient(PersistentServices.Domain.ServiceDomain.HttpClientName)
            .ConfigureHttpClient(static (provider, client) => client.Timeout = provider.GetRequiredService<IOptions<PersistentServicesOptions>>().Value.Domain.FlushTimeout)
            .ConfigurePrimaryHttpMessageHandler(static () => new System.Net.Http.SocketsHttpHandler { PooledConnectionIdleTimeout = TimeSpan.FromMinutes(1) })
            .ConfigureAdditionalHttpMessageHandlers(static (handlers, _) => handlers.Clear())
            .RemoveAllLoggers();

        // The client shipments to replicas go out on (docs/replication.md): one handler for the service's life, none of the
        // application's handlers, no per-request logging; a shipment waits for the replica's fsync, so a generous timeout.
        services.AddHttpClient(PersistentServices.Replication.ReplicationNode.HttpClientName)
            .ConfigureHttpClient(static client => client.Timeout = TimeSpan.FromSeconds(30))
            .ConfigurePrimaryHttpMessageHandler(static () => new System.Net.Http.SocketsHttpHandler { PooledConnectionIdleTimeout = TimeSpan.FromMinutes(1) })
            .ConfigureAdditionalHttpMessageHandlers(static (handlers, _) => handlers.Clear())
            .RemoveAllLoggers();

        // Time, random numbers and new ids for persistent endpoints: logged on first execution, replayed from the log.
        services.TryAddSingleton(sp => new PersistentTimeProvider(sp.GetRequiredService<TimeProvider>()));
        services.TryAddSingleton<IPersistentRandom, PersistentRandom>();
        services.TryAddSingleton<IPersistentIdGenerator, PersistentIdGenerator>();
        services.TryAddSingleton<ReplayPipeline>();
        services.TryAddSingleton<PersistentServices.Calls.CallRoles>();
        services.TryAddSingleton<PersistentServices.Domain.OrphanRecovery>();
        services.TryAddSingleton<PersistentServices.Domain.DomainHostedService>();
        services.TryAddSingleton<PersistentServices.Http.LoggedRequestPipeline>();
        services.TryAddSingleton<PersistentServices.Domain.DomainReplyGate>();
        services.TryAddSingleton<SessionReplayer>();
        services.TryAddSingleton<RecoveryHostedService>();
        services.TryAddSingleton<SessionExpiryService>();

        // The session services the request handlers, the session and admin endpoints, recovery and key expiry share: each
        // over the log host, one per service.
        services.TryAddSingleton<SessionOwners>();
        services.TryAddSingleton<PersistentServices.Http.SessionLookup>();
        services.TryAddSingleton<SessionStarter>();
        services.TryAddSingleton<Quarantines>();
        services.TryAddSingleton<PersistentServices.Http.IdempotencyKeys.IdempotencyKeyAdmission>();
        services.TryAddSingleton<PersistentServices.Http.IdempotencyKeys.GatewayKeyTrust>();
        services.TryAddSingleton<PersistentServices.Http.IdempotencyKeys.IdempotencyKeySessions>();
        services.TryAddSingleton<PersistentServices.Calls.PeerCalls>();
        services.TryAddSingleton<CheckpointHostedService>();
        PersistentServices.Testing.ReplayCheckMode.AddIfRequested(services); // only for psctl replay-check / ReplayCheck.RunAsync (before recovery)
        services.AddHostedService(sp => sp.GetRequiredService<RecoveryHostedService>());
        services.AddHostedService(sp => sp.GetRequiredService<SessionExpiryService>());
        services.AddHostedService<PersistentServices.Http.IdempotencyKeys.IdempotencyKeyExpiryService>();
        services.AddHostedService(sp => sp.GetRequiredService<CheckpointHostedService>());
        services.AddHostedService(sp => sp.GetRequiredService<PersistentServices.Domain.DomainHostedService>());
        services.AddHostedService(sp => sp.GetRequiredService<PersistentServices.Replication.RaftFailover>());
        // Readiness (recovered, not draining, not faulted) and liveness (only a faulted log or a failed recovery), apart, so
        // that a probe per tag restarts a pod for a fault and only holds traffic back while it recovers or drains.
        services.AddHealthChecks()
            .AddCheck<PersistentServicesHealthCheck>("persistentservices", tags: ["ready"])
            .AddCheck<PersistentServicesLivenessCheck>("persistentservices-live", tags: ["live"]);
        return services;
    }

    /// <summary>
    /// The admin endpoints' refusals by the authorization middleware as <c>admin-forbidden</c> problems with event 1164
    /// (<see cref="AdminAuthorizationResultHandler"/>): it wraps the application's result handler registered so far, or
    /// ASP.NET's default. One the application registers after <c>AddPersistentServices</c> replaces it (its refusals are
    /// then what that handler writes; the endpoints' own check still answers with the problem).
    /// </summary>
    private static void AddAdminRefusals(IServiceCollection services)
    {
        if (services.Any(static d => d.ServiceType == typeof(AdminAuthorizationResultHandler)))
        {
            return;
        }

        var existing = services.LastOrDefault(static d => d.ServiceType == typeof(Microsoft.AspNetCore.Authorization.IAuthorizationMiddlewareResultHandler) && !d.IsKeyedService);
        services.AddSingleton(provider => new AdminAuthorizationResultHandler(existing switch
        {
            { ImplementationInstance: Microsoft.AspNetCore.Authorization.IAuthorizationMiddlewareResultHandler instance } => instance,
            { ImplementationFactory: { } factory } => (Microsoft.AspNetCore.Authorization.IAuthorizationMiddlewareResultHandler)factory(provider),
            { ImplementationType: { } type } => (Microsoft.AspNetCore.Authorization.IAuthorizationMiddlewareResultHandler)ActivatorUtilities.CreateInstance(provider, type),
            _ => new Microsoft.AspNetCore.Authorization.Policy.AuthorizationMiddlewareResultHandler(),
        }));
        services.AddSingleton<Microsoft.AspNetCore.Authorization.IAuthorizationMiddlewareResultHandler>(static provider => provider.GetRequiredService<AdminAuthorizationResultHandler>());
    }

    /// <summary>The crash point the host's configuration arms (docs/checkpoints.md), or none.</summary>
    /// <exception cref="InvalidOperationException">The hit count is not a non-negative integer.</exception>
    private static PersistentServices.Checkpoints.CrashPoints CrashPointsFromConfiguration(Microsoft.Extensions.Configuration.IConfiguration? configuration)
    {
        var point = configuration?[PersistentServices.Checkpoints.CrashPoints.PointKey];
        if (string.IsNullOrEmpty(point))
        {
            return PersistentServices.Checkpoints.CrashPoints.None;
        }

        var after = configuration![PersistentServices.Checkpoints.CrashPoints.AfterKey];
        if (string.IsNullOrEmpty(after))
        {
            return new PersistentServices.Checkpoints.CrashPoints(point);
        }

        return int.TryParse(after, System.Globalization.NumberStyles.None, System.Globalization.CultureInfo.InvariantCulture, out var hits)
            ? new PersistentServices.Checkpoints.CrashPoints(point, hits)
            : throw new InvalidOperationException(
                $"{PersistentServices.Checkpoints.CrashPoints.AfterKey} must be a non-negative integer (the hits to let pass before {point} fires), not '{after}'.");
    }
}
