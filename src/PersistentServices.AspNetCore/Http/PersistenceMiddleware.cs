using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Hosting;
using PersistentServices.Recovery;
using PersistentServices.Sessions;
using PersistentServices.SharedState;

namespace PersistentServices.Http;

/// <summary>
/// The persistence middleware, registered by <c>UsePersistentServices()</c> after routing: it sends each request to the
/// handler of its endpoint's role (<see cref="PersistentRequestHandler"/>, <see cref="ReadOnlyRequestHandler"/>) and
/// leaves every other endpoint untouched. It also hands the rest of the pipeline to replay
/// (<see cref="ReplayPipeline"/>), so logged requests replay through the same endpoints, filters and binding. Every
/// request it sees, and every replayed one, runs with the service's shared state entered
/// (<see cref="SharedStateStore.Enter"/>): shared state handles find this service's store, not another's in the same process.
/// </summary>
internal sealed class PersistenceMiddleware
{
    private readonly RequestDelegate _next;
    private readonly PersistentRuntime _runtime;
    private readonly ServiceAvailability _availability;
    private readonly LogOpener _opener;
    private readonly bool _useRoles;
    private readonly PersistentRequestHandler _persistent;
    private readonly ReadOnlyRequestHandler _readOnly;
    private readonly RequestDelegate _route; // RouteAsync, made into a delegate once rather than per request
    private readonly CancellationToken _stopping;

    public PersistenceMiddleware(RequestDelegate next, Lazy<RequestDelegate> router, PersistentRuntime runtime, LogOpener opener, ReplayPipeline pipeline,
        LoggedRequestPipeline logged, Domain.DomainReplyGate gate, SessionLookup lookup, SessionStarter starter, IdempotencyKeys.IdempotencyKeyAdmission keyAdmission,
        IdempotencyKeys.IdempotencyKeySessions keySessions, Calls.PeerCalls peers, Microsoft.Extensions.Hosting.IHostApplicationLifetime lifetime, ILogger<PersistenceMiddleware> logger)
    {
        _next = next;
        _stopping = lifetime.ApplicationStopping;
        _runtime = runtime;
        _availability = runtime.Availability;
        _opener = opener;
        _useRoles = runtime.Options.Calls.UseRoles;
        // The handlers, their admission and the session services they use are made once here, never per request.
        var admission = new RequestAdmission(runtime, lookup, starter, keyAdmission, keySessions, peers, logger);
        _persistent = new PersistentRequestHandler(next, runtime, admission, logged, gate, logger);
        _readOnly = new ReadOnlyRequestHandler(next, runtime, lookup, logger);
        _route = RouteAsync;
        pipeline.Register(router, context => WithSharedState(context, next));
    }

    /// <summary>
    /// Holds a request while recovery's first half runs; on a replica (docs/replication.md) nothing is held: its handlers
    /// answer 503 with <c>Retry-After</c> until it is promoted, and plain endpoints (health, the replication endpoints) run.
    /// Nor are the replication endpoints ever held: a just-promoted node opening its log must still tell the failover
    /// coordinator that it is the primary (else a second promotion would follow), and a replica's shipments need no log.
    /// </summary>
    public Task InvokeAsync(HttpContext context)
        => context.GetEndpoint() is { DisplayName: RoutingMethodNotAllowed } && context.Request.Path.StartsWithSegments(ProtocolPathPrefix)
            ? MethodNotAllowedAsync(context)
            : _availability.Stage is RecoveryStage.NotStarted or RecoveryStage.Scanning && !context.Request.Path.StartsWithSegments(Replication.ReplicationEndpoints.PathPrefix)
            ? AfterAnalysisAsync(context)
            : DispatchAsync(context);

    /// <summary>The display name of the endpoint routing picks for a path whose endpoints take other methods (ASP.NET's own).</summary>
    internal const string RoutingMethodNotAllowed = "405 HTTP Method Not Supported";

    /// <summary>Where the library's own endpoints are (<c>/ps/replication</c>, <c>/ps/domain</c>, the default admin pattern).</summary>
    internal const string ProtocolPathPrefix = "/ps";

    /// <summary>
    /// Another method on one of the library's endpoints (<c>GET /ps/replication/promote</c>): routing's own 405, with its
    /// <c>Allow</c> header, and a problem details body instead of none, as every other refusal of the protocol.
    /// </summary>
    private async Task MethodNotAllowedAsync(HttpContext context)
    {
        await _next(context).ConfigureAwait(false);
        if (!context.Response.HasStarted && context.Response.StatusCode == StatusCodes.Status405MethodNotAllowed)
        {
            var allow = context.Response.Headers.Allow.ToString();
            await ProtocolProblems.WriteAsync(context, 405, "method-not-allowed", "Method not allowed",
                $"{context.Request.Method} is not accepted on {context.Request.Path.Value}" + (allow.Length > 0 ? $": it accepts {allow}." : ".")).ConfigureAwait(false);
        }
    }

    /// <summary>
    /// The server listens while recovery verifies the log and runs the analysis scan (<c>RecoveryHostedService</c>): a
    /// request that comes meanwhile waits until that is done, as it would have waited for the server to listen, so no
    /// endpoint, persistent or plain, ever sees a half-recovered service. If recovery fails, the endpoints answer 503.
    /// </summary>
    private async Task AfterAnalysisAsync(HttpContext context)
    {
        try
        {
            using var waiting = CancellationTokenSource.CreateLinkedTokenSource(context.RequestAborted, _stopping);
            await _opener.StartOpening().WaitAsync(waiting.Token).ConfigureAwait(false);
        }
        catch (OperationCanceledException) when (context.RequestAborted.IsCancellationRequested)
        {
            return; // the client went away
        }
        catch (OperationCanceledException) when (_stopping.IsCancellationRequested)
        {
            // The host stops before recovery's first part ended (a SIGTERM while it started): a request held here would hold
            // the server's stop until its shutdown timeout (30 s seen in the domain kill test, issue 49). Nothing ran.
            await ProtocolProblems.UnavailableAsync(context,
                "The service is stopping before its recovery finished. Nothing of this request ran: send it again once the service is back.").ConfigureAwait(false);
            return;
        }
        catch (Exception)
        {
            // Recovery failed: the recovery host logs it and stops the service; persistent endpoints answer 503 meanwhile.
        }

        await DispatchAsync(context).ConfigureAwait(false);
    }

    private Task DispatchAsync(HttpContext context) => WithSharedState(context, _route);

    /// <summary>Runs <paramref name="next"/> with this service's shared state entered (none while the log is not open and scanned).</summary>
    private Task WithSharedState(HttpContext context, RequestDelegate next)
        => _runtime.ServingShared is { } shared ? EnteredAsync(context, next, shared) : next(context);

    private static async Task EnteredAsync(HttpContext context, RequestDelegate next, SharedStateStore shared)
    {
        using (SharedStateStore.Enter(shared))
        {
            await next(context).ConfigureAwait(false);
        }
    }

    private Task RouteAsync(HttpContext context) => EndpointRoles.Of(context.GetEndpoint()) switch
    {
        EndpointRole.Persistent => _persistent.InvokeAsync(context),
        EndpointRole.ReadOnly => _readOnly.InvokeAsync(context),
        EndpointRole.Functional => FunctionalAsync(context),
        _ => _next(context),
    };

    /// <summary>A functional endpoint runs as a plain one; its reply tells callers they need not log or force for it (Phoenix/App Algorithm 4).</summary>
    private Task FunctionalAsync(HttpContext context)
    {
        if (_useRoles)
        {
            context.Response.Headers[ProtocolHeaders.Role] = Calls.CallRoles.Functional;
        }

        return _next(context);
    }
}
