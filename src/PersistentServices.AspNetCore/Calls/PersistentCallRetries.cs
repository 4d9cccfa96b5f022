using System.Net;
using Polly.Timeout;

namespace PersistentServices.Calls;

/// <summary>
/// What a persistent call retries (docs/calls.md, condition 4): the callee out of reach (connection refused or reset, no
/// answer within <see cref="PersistentCallOptions.AttemptTimeout"/>), recovering or stopping (503), shedding load (429),
/// or still running an earlier attempt of the same call (409 with <c>Retry-After</c>). Any other answer is the call's reply.
/// </summary>
internal static partial class PersistentCallRetries
{
    [Microsoft.Extensions.Logging.LoggerMessage(1376, Microsoft.Extensions.Logging.LogLevel.Warning,
        "A persistent call to '{Callee}' is waiting for its callee (attempt {Attempt}: {Outcome}); it is asked again with the same id until it answers")]
    public static partial void CallWaits(Microsoft.Extensions.Logging.ILogger logger, string callee, int attempt, string outcome);

    /// <summary>
    /// An exception a later attempt may not get: the callee was out of reach, or did not answer in time. Besides
    /// <see cref="HttpRequestException"/>, a bare <see cref="System.Net.Sockets.SocketException"/> or <see cref="IOException"/>:
    /// SocketsHttpHandler lets one escape unwrapped when the callee's socket closes while the connection is being set up
    /// (seen: "Transport endpoint is not connected" from <c>Socket.RemoteEndPoint</c> in <c>HttpConnectionPool.ConnectAsync</c>,
    /// a store draining for an upgrade), and the call's id makes asking again safe.
    /// </summary>
    public static bool IsTransient(Exception exception)
        => exception is HttpRequestException or TimeoutRejectedException or OperationCanceledException or System.Net.Sockets.SocketException or IOException;

    /// <summary>An answer that is not the call's reply: ask again.</summary>
    public static bool IsRetryable(HttpResponseMessage response)
        => response.StatusCode is HttpStatusCode.ServiceUnavailable or HttpStatusCode.TooManyRequests
           || (response.StatusCode == HttpStatusCode.Conflict && response.Headers.RetryAfter is not null);
}
