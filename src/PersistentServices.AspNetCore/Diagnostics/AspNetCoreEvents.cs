using Microsoft.Extensions.Logging;

namespace PersistentServices.Diagnostics;

/// <summary>Log messages of the ASP.NET Core integration (event ids 1100–1299).</summary>
internal static partial class AspNetCoreEvents
{
    [LoggerMessage(1100, LogLevel.Information, "Started session {SessionId}")]
    public static partial void SessionStarted(ILogger logger, string sessionId);

    [LoggerMessage(1101, LogLevel.Information, "Ended session {SessionId} ({Reason})")]
    public static partial void SessionEnded(ILogger logger, string sessionId, string reason);

    [LoggerMessage(1102, LogLevel.Debug, "Refused request {Sequence} of session {SessionId}: {Outcome}")]
    public static partial void RequestRefused(ILogger logger, long sequence, string sessionId, string outcome);

    [LoggerMessage(1103, LogLevel.Error, "Persistent endpoint '{Endpoint}' threw while executing request {Sequence} of session {SessionId}; the reply is 500")]
    public static partial void EndpointThrew(ILogger logger, string endpoint, long sequence, string sessionId, Exception exception);

    [LoggerMessage(1104, LogLevel.Error, "The log is unavailable; persistent request {Sequence} of session {SessionId} gets 503")]
    public static partial void LogUnavailable(ILogger logger, long sequence, string sessionId, Exception? exception);

    [LoggerMessage(1200, LogLevel.Information,
        "Analysis scan: {Sessions} live sessions, {Requests} logged requests, {Records} records in {ElapsedMs} ms; accepting new sessions")]
    public static partial void AnalysisDone(ILogger logger, int sessions, long requests, long records, long elapsedMs);

    [LoggerMessage(1201, LogLevel.Information, "Replayed {Sessions} sessions ({Requests} requests) in {ElapsedMs} ms; recovery finished")]
    public static partial void ReplayDone(ILogger logger, int sessions, long requests, long elapsedMs);

    [LoggerMessage(1202, LogLevel.Critical, "Recovery failed; the service stops (fail-stop)")]
    public static partial void RecoveryFailed(ILogger logger, Exception exception);

    [LoggerMessage(1203, LogLevel.Critical,
        "UsePersistentServices() was not called, so logged requests cannot be replayed; call app.UsePersistentServices() before mapping endpoints")]
    public static partial void PipelineMissing(ILogger logger);

    [LoggerMessage(1204, LogLevel.Warning, "Replayed request {Sequence} of session {SessionId} (LSN {Lsn}) threw, as a 500 reply; its logged reply is compared")]
    public static partial void ReplayedEndpointThrew(ILogger logger, long sequence, string sessionId, long lsn, Exception exception);
}
