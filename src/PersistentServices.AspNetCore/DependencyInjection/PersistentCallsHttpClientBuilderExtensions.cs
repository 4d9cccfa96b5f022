using System.Net;
using Microsoft.Extensions.DependencyInjection.Extensions;
using Microsoft.Extensions.Http.Resilience;
using Microsoft.Extensions.Options;
using PersistentServices;
using PersistentServices.Calls;
using PersistentServices.Hosting;
using Polly;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Makes a named or typed <see cref="HttpClient"/> call the deployment's other persistent services exactly once.</summary>
public static class PersistentCallsHttpClientBuilderExtensions
{
    /// <summary>
    /// Calls this client makes from inside <c>[Persistent]</c> requests become persistent calls (docs/calls.md): a
    /// deterministic call id, the caller's log forced before a call to a persistent service, the reply logged and answered
    /// from the log in replay, retries with the same id until a reply arrives (a resilience pipeline: per-attempt timeout,
    /// exponential backoff with jitter; <see cref="PersistentCallOptions"/>), and each attempt signed with
    /// <see cref="PersistentCallOptions.PeerKey"/>. The client's name identifies the callee in call ids: keep it stable.
    /// Calls made outside persistent requests pass through unchanged.
    /// </summary>
    public static IHttpClientBuilder AddPersistentCalls(this IHttpClientBuilder builder)
    {
        ArgumentNullException.ThrowIfNull(builder);
        builder.Services.TryAddSingleton<CallRoles>();
        var callee = builder.Name;
        builder.AddHttpMessageHandler(sp => new PersistentCallHandler(
            sp.GetRequiredService<PersistentRuntime>(), sp.GetRequiredService<CallRoles>(), callee));
        builder.AddResilienceHandler("persistent-calls", static (pipeline, context) =>
        {
            var options = context.ServiceProvider.GetRequiredService<IOptions<PersistentServicesOptions>>().Value.Calls;
            pipeline.AddRetry(new HttpRetryStrategyOptions
            {
                MaxRetryAttempts = int.MaxValue,
                BackoffType = DelayBackoffType.Exponential,
                UseJitter = true,
                Delay = options.RetryDelay,
                MaxDelay = options.MaxRetryDelay,
                ShouldHandle = static args => ValueTask.FromResult(args.Outcome switch
                {
                    { Exception: HttpRequestException or Polly.Timeout.TimeoutRejectedException } => true,

                    // 503: the callee recovers or stops; 409 with Retry-After: our earlier attempt still runs there.
                    { Result.StatusCode: HttpStatusCode.ServiceUnavailable or HttpStatusCode.TooManyRequests } => true,
                    { Result: { StatusCode: HttpStatusCode.Conflict } conflict } => conflict.Headers.RetryAfter is not null,
                    _ => false,
                }),
            });
            pipeline.AddTimeout(options.AttemptTimeout);
        });
        builder.AddHttpMessageHandler(sp => new PeerSigningHandler(sp.GetRequiredService<PersistentRuntime>()));
        return builder;
    }
}
