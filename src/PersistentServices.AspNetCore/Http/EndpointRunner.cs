using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>A reply as an endpoint produced it, and the OnCompleted callbacks it registered.</summary>
internal readonly record struct CapturedReply(BufferedReply Reply, IReadOnlyList<(Func<object, Task> Callback, object State)> OnCompleted);

/// <summary>
/// The one way the persistence layer runs an endpoint, for live execution, read-only requests and replay alike: the
/// reply is captured in memory (status, headers, body) while the endpoint runs inside its <see cref="PersistentScope"/>,
/// and the features it replaced are restored afterwards. Live execution and replay must produce the same reply from the
/// same request; running both through this one step is what keeps them the same.
/// <list type="bullet">
/// <item>A logged request (live or replay) reads its logged body and never sees its client disconnect
///   (<see cref="UninterruptibleLifetime"/>): it runs to the end, and its reply waits for the retry.</item>
/// <item>An exception from the endpoint or from an <c>OnStarting</c> callback is an endpoint failure: the reply becomes the
///   empty 500 plain ASP.NET Core would send, and for a logged request that 500 is logged and buffered like any reply.
///   A read-only request's exception propagates, as it would without the library.</item>
/// <item>A <see cref="RequestAbandonedException"/> (a call the host's stop abandoned, a member out of reach, an orphan) is
///   not the endpoint's failure: it propagates, and the request is abandoned (503). So does an abandonment the endpoint
///   caught (<see cref="RequestExecution.Abandoned"/>): what it answered instead is discarded.</item>
/// <item><c>OnCompleted</c> callbacks are not run here: the caller decides when a reply really goes to a client.</item>
/// </list>
/// </summary>
internal static class EndpointRunner
{
    public static async Task<CapturedReply> RunAsync(HttpContext context, RequestDelegate next, PersistentScope scope, byte[]? loggedBody, ILogger logger)
    {
        var capture = new ResponseCapture();
        var features = new FeatureSwap(context, capture, loggedBody);
        try
        {
            using (PersistentScope.Enter(scope))
            {
                try
                {
                    await next(context).ConfigureAwait(false);
                    await capture.RunOnStartingAsync().ConfigureAwait(false);
                }
                catch (Exception ex) when (scope.Mode != ExecutionMode.ReadOnly && ex is not RequestAbandonedException && scope.Execution?.Abandoned is null)
                {
                    LogFailure(context, scope, logger, ex);
                    capture.Reset(StatusCodes.Status500InternalServerError);
                }

                // Abandoned while it ran, even when the endpoint caught the exception and answered: that answer is not the
                // request's outcome (a later run finishes the request), so it is never logged or sent.
                if (scope.Execution?.Abandoned is { } abandoned)
                {
                    System.Runtime.ExceptionServices.ExceptionDispatchInfo.Throw(abandoned);
                }

                return new CapturedReply(capture.Freeze(), capture.OnCompletedCallbacks);
            }
        }
        finally
        {
            features.Restore();
        }
    }

    private static void LogFailure(HttpContext context, PersistentScope scope, ILogger logger, Exception error)
    {
        var session = scope.Session?.TraceTag ?? "";
        var position = scope.Execution?.Position;
        if (scope.Mode == ExecutionMode.Replay)
        {
            AspNetCoreEvents.ReplayedEndpointThrew(logger, position?.Sequence ?? 0, session, position?.RequestLsn ?? 0, error);
        }
        else
        {
            AspNetCoreEvents.EndpointThrew(logger, context.GetEndpoint()?.DisplayName ?? "", position?.Sequence ?? 0, session, error);
        }
    }

    /// <summary>Installs the capture (and, for a logged request, its logged body and an uninterruptible lifetime); restores what it replaced.</summary>
    private readonly struct FeatureSwap
    {
        private readonly HttpContext _context;
        private readonly IHttpResponseFeature? _response;
        private readonly IHttpResponseBodyFeature? _responseBody;
        private readonly bool _logged;
        private readonly IHttpRequestLifetimeFeature? _lifetime;
        private readonly IRequestBodyPipeFeature? _requestPipe;
        private readonly Stream? _requestBody;

        public FeatureSwap(HttpContext context, ResponseCapture capture, byte[]? loggedBody)
        {
            _context = context;
            var features = context.Features;
            _response = features.Get<IHttpResponseFeature>();
            _responseBody = features.Get<IHttpResponseBodyFeature>();
            features.Set<IHttpResponseFeature>(capture);
            features.Set<IHttpResponseBodyFeature>(capture);
            _logged = loggedBody is not null;
            if (loggedBody is not null)
            {
                _lifetime = features.Get<IHttpRequestLifetimeFeature>();
                _requestPipe = features.Get<IRequestBodyPipeFeature>();
                _requestBody = context.Request.Body;
                features.Set<IHttpRequestLifetimeFeature>(UninterruptibleLifetime.Instance);
                context.Request.Body = new MemoryStream(loggedBody, writable: false);
                features.Set<IRequestBodyPipeFeature>(new LoggedBodyPipe(loggedBody));
            }
        }

        public void Restore()
        {
            var features = _context.Features;
            features.Set(_response);
            features.Set(_responseBody);
            if (_logged)
            {
                features.Set(_lifetime);
                _context.Request.Body = _requestBody!;
                features.Set(_requestPipe);
            }
        }
    }
}
