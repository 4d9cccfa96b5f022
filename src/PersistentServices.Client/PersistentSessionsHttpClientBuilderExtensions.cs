using System.Net;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Http.Resilience;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;
using Microsoft.Extensions.Options;
using PersistentServices.Client;
using Polly;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Makes a named <see cref="HttpClient"/> call <c>[Persistent]</c> endpoints exactly once (docs/client.md).</summary>
public static class PersistentSessionsHttpClientBuilderExtensions
{
    /// <summary>
    /// Requests through this client open sessions at the services they go to (a pool per service, one request at a time
    /// each), are numbered, stored in the client's durable store before they are sent, sent again with the same numbers
    /// on timeouts, dropped connections, <c>503</c> (the service recovers) and <c>429</c>, honouring <c>Retry-After</c>,
    /// and their replies are stored before they are returned. The next request of a session acknowledges its last reply.
    /// After the process restarts, resolve <see cref="PersistentSessionClient"/> as a keyed service under the client's name
    /// and call <see cref="PersistentSessionClient.RecoverAsync"/>. The client's <see cref="HttpClient.Timeout"/> is set to
    /// infinite (the retries have their own per-attempt timeout); cancel a call with its token. When the host stops, the
    /// client's idle sessions are ended at their services (<see cref="PersistentSessionClient.CloseIdleSessionsAsync"/>).
    /// Requests to a node of one of <see cref="PersistentClientOptions.ReplicationGroups"/> go to the node of its group that
    /// serves (the primary), passing over nodes that refuse the connection or answer that they are replicas.
    /// </summary>
    public static IHttpClientBuilder AddPersistentSessions(this IHttpClientBuilder builder, Action<PersistentClientOptions> configure)
    {
        ArgumentNullException.ThrowIfNull(builder);
        ArgumentNullException.ThrowIfNull(configure);
        var name = builder.Name;
        builder.Services.AddOptions<PersistentClientOptions>(name).Configure(configure).ValidateOnStart();
        builder.Services.TryAddEnumerable(ServiceDescriptor.Singleton<IValidateOptions<PersistentClientOptions>, PersistentClientOptionsValidator>());
        // The client's meter and instruments from the host's IMeterFactory (AddMetrics: a no-op where the host added it).
        builder.Services.AddMetrics();
        builder.Services.TryAddSingleton<ClientMetrics>();
        builder.Services.TryAddKeyedSingleton(name, (sp, _) => new PersistentSessionClient(
            name,
            sp.GetRequiredService<IOptionsMonitor<PersistentClientOptions>>().Get(name),
            sp.GetRequiredService<IHttpClientFactory>(),
            sp.GetService<ILoggerFactory>()?.CreateLogger<PersistentSessionClient>() ?? NullLogger<PersistentSessionClient>.Instance,
            sp.GetRequiredService<ClientMetrics>(),
            sp.GetService<PersistentServices.Checkpoints.CrashPoints>()));
        builder.Services.AddSingleton<Microsoft.Extensions.Hosting.IHostedService>(sp => new PersistentSessionsStopper(sp.GetRequiredKeyedService<PersistentSessionClient>(name)));
        builder.ConfigureHttpClient(client => client.Timeout = Timeout.InfiniteTimeSpan);
        builder.AddHttpMessageHandler(sp => new PersistentSessionHandler(sp.GetRequiredKeyedService<PersistentSessionClient>(name)));
        builder.AddResilienceHandler("persistent-sessions", (pipeline, context) =>
        {
            var options = context.ServiceProvider.GetRequiredService<IOptionsMonitor<PersistentClientOptions>>().Get(name);
            var metrics = context.ServiceProvider.GetRequiredService<ClientMetrics>();
            pipeline.AddRetry(new HttpRetryStrategyOptions
            {
                MaxRetryAttempts = options.MaxRetryAttempts,
                BackoffType = DelayBackoffType.Exponential,
                UseJitter = true,
                Delay = options.RetryDelay,
                MaxDelay = options.MaxRetryDelay,
                ShouldRetryAfterHeader = true,
                ShouldHandle = static args => ValueTask.FromResult(args.Outcome switch
                {
                    { Exception: HttpRequestException or Polly.Timeout.TimeoutRejectedException } => true,

                    // 503: the service recovers, stops or lost its log; 429: too many sessions; 409 with Retry-After: our earlier attempt still runs.
                    { Result.StatusCode: HttpStatusCode.ServiceUnavailable or HttpStatusCode.TooManyRequests } => true,
                    { Result: { StatusCode: HttpStatusCode.Conflict } conflict } => conflict.Headers.RetryAfter is not null,
                    _ => false,
                }),
                OnRetry = args =>
                {
                    metrics.Retries.Add(1, ClientMetrics.Tag(name));
                    args.Context.GetRequestMessage()?.Options.Set(PersistentRequestOptions.Retried, true);
                    return default;
                },
            });
            pipeline.AddTimeout(options.AttemptTimeout);
        });

        // Inside the pipeline: each attempt to a replication group goes to its serving node, once around the group.
        builder.AddHttpMessageHandler(sp => new ReplicationGroupHandler(sp.GetRequiredKeyedService<PersistentSessionClient>(name)));
        return builder;
    }
}
