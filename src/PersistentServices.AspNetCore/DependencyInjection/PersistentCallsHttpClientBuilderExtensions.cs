using System.Net;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Http.Resilience;
using Microsoft.Extensions.Options;
using PersistentServices;
using PersistentServices.Calls;
using PersistentServices.Hosting;
using Microsoft.Extensions.Logging;
using Polly;
using Polly.Telemetry;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Makes a named or typed <see cref="HttpClient"/> call the deployment's other persistent services exactly once.</summary>
public static class PersistentCallsHttpClientBuilderExtensions
{
    /// <summary>
    /// Calls this client makes from inside <c>[Persistent]</c> requests become persistent calls (docs/calls.md): a
    /// deterministic call id, the caller's log forced before a call to a persistent service, the reply logged and answered
    /// from the log in replay, retries with the same id until a reply arrives (a resilience pipeline: per-attempt timeout,
    /// exponential backoff with jitter; <see cref="PersistentCallOptions"/>), and each attempt signed with
    /// <see cref="PersistentCallOptions.PeerKey"/> for the callee. The client's name identifies the callee in call ids: keep
    /// it stable. The client's name is also the callee's <see cref="PersistentServicesOptions.ServiceName"/>, which the
    /// signature names and the callee checks: when it is another, use <see cref="AddPersistentCalls(IHttpClientBuilder, string)"/>.
    /// Calls made outside persistent requests pass through unchanged. Every attempt, of a persistent call or not, to a node of
    /// one of <see cref="PersistentCallOptions.ReplicationGroups"/> goes to the group's serving node (docs/calls.md,
    /// "Calling a replicated service").
    /// </summary>
    public static IHttpClientBuilder AddPersistentCalls(this IHttpClientBuilder builder)
    {
        ArgumentNullException.ThrowIfNull(builder);
        return builder.AddPersistentCalls(builder.Name);
    }

    /// <summary>
    /// <see cref="AddPersistentCalls(IHttpClientBuilder)"/> for a callee whose <see cref="PersistentServicesOptions.ServiceName"/>
    /// is <paramref name="calleeService"/>, not the client's name: every call is signed for that service, which refuses a
    /// call signed for another (docs/calls.md, "Who may call"), and in a service domain it is the member the calls go to.
    /// The client's name still identifies the callee in call ids.
    /// </summary>
    public static IHttpClientBuilder AddPersistentCalls(this IHttpClientBuilder builder, string calleeService)
    {
        ArgumentNullException.ThrowIfNull(builder);
        ArgumentException.ThrowIfNullOrWhiteSpace(calleeService);
        builder.Services.TryAddSingleton<CallRoles>();
        builder.Services.TryAddSingleton<CallReplicationGroups>();
        var callee = builder.Name;

        // The call is retried until a reply arrives (condition 4): .NET's default HttpClient.Timeout of 100 s would cut it
        // off (PersistentCallHandler ignores the client's token inside persistent requests anyway, for a Timeout set later).
        builder.ConfigureHttpClient(static client => client.Timeout = Timeout.InfiniteTimeSpan);
        builder.AddHttpMessageHandler(sp => new PersistentCallHandler(
            sp.GetRequiredService<PersistentRuntime>(), sp.GetRequiredService<CallRoles>(), callee, calleeService,
            sp.GetRequiredService<ILoggerFactory>().CreateLogger<PersistentCallHandler>()));
        builder.Services.TryAddEnumerable(ServiceDescriptor.Singleton<IConfigureOptions<TelemetryOptions>, QuietRetryTelemetry>());
        builder.AddResilienceHandler(PipelineName, static (pipeline, context) =>
        {
            var availability = context.ServiceProvider.GetRequiredService<ServiceAvailability>();
            var options = context.ServiceProvider.GetRequiredService<IOptions<PersistentServicesOptions>>().Value.Calls;
            var logger = context.ServiceProvider.GetRequiredService<ILoggerFactory>().CreateLogger<PersistentCallHandler>();
            var callee = context.BuilderName;
            pipeline.AddRetry(new HttpRetryStrategyOptions
            {
                MaxRetryAttempts = int.MaxValue,
                BackoffType = DelayBackoffType.Exponential,
                UseJitter = true,
                Delay = options.RetryDelay,
                MaxDelay = options.MaxRetryDelay,

                // Not after the drain's DrainRetryTime: the handler then abandons the request (finished after the restart).
                ShouldHandle = args => ValueTask.FromResult(availability.CanServe(RequestKind.CallRetry) && args.Outcome switch
                {
                    // Out of reach or no answer in time (PersistentCallRetries.IsTransient), never the caller's own cancellation.
                    { Exception: { } exception } => exception is not OperationCanceledException && PersistentCallRetries.IsTransient(exception),
                    { Result: { } response } => PersistentCallRetries.IsRetryable(response),
                    _ => false,
                }),

                // One warning when a call first has to wait, and one every 10 attempts after that (Polly's own events for this
                // pipeline are debug-level: QuietRetryTelemetry), not two for every attempt of a callee down for minutes.
                OnRetry = args =>
                {
                    if (args.AttemptNumber % 10 == 0)
                    {
                        PersistentCallRetries.CallWaits(logger, callee, args.AttemptNumber + 1, args.Outcome.Result is { } answer ? $"{(int)answer.StatusCode}" : args.Outcome.Exception?.Message ?? "");
                    }

                    return default;
                },
            });
            pipeline.AddTimeout(options.AttemptTimeout);
        });
        builder.AddHttpMessageHandler(sp => new PeerSigningHandler(sp.GetRequiredService<PersistentRuntime>(), calleeService));

        // Innermost: each attempt goes to its replication group's serving node (PersistentCallOptions.ReplicationGroups), once
        // around the group, the signed message unchanged but for its host; outside every group it is sent as it is.
        builder.AddHttpMessageHandler(sp => new ReplicationGroupCallHandler(sp.GetRequiredService<CallReplicationGroups>()));
        return builder;
    }

    /// <summary>The name of the resilience pipeline <see cref="AddPersistentCalls(IHttpClientBuilder)"/> adds (Polly names it <c>{client}-persistent-calls</c>).</summary>
    internal const string PipelineName = "persistent-calls";

    /// <summary>
    /// Polly's events of the persistent-calls pipelines at debug level: a call is retried until its callee answers, so a
    /// callee down for minutes would otherwise log two warnings per attempt for every waiting call. The handler logs its own.
    /// Other pipelines keep their severities (an application's own provider is kept for them).
    /// </summary>
    private sealed class QuietRetryTelemetry : IConfigureOptions<TelemetryOptions>
    {
        public void Configure(TelemetryOptions options)
        {
            var previous = options.SeverityProvider;
            options.SeverityProvider = args =>
                args.Source.PipelineName?.EndsWith("-" + PipelineName, StringComparison.Ordinal) == true && args.Event.Severity > ResilienceEventSeverity.Debug
                    ? ResilienceEventSeverity.Debug
                    : previous?.Invoke(args) ?? args.Event.Severity;
        }
    }
}
