using Microsoft.Extensions.Logging;

namespace PersistentServices.Http.IdempotencyKeys;

/// <summary>Log messages of Idempotency-Key requests (event ids 1150–1159, in the sessions and middleware range).</summary>
internal static partial class IdempotencyKeyEvents
{
    [LoggerMessage(1150, LogLevel.Debug, "Started key session {SessionTag} for an Idempotency-Key request")]
    public static partial void KeySessionStarted(ILogger logger, string sessionTag);

    [LoggerMessage(1151, LogLevel.Debug, "Refused an Idempotency-Key request of key session {SessionTag}: {Outcome}")]
    public static partial void KeyRequestRefused(ILogger logger, string sessionTag, string outcome);

    [LoggerMessage(1152, LogLevel.Debug, "Key session {SessionTag} expired: its reply is dropped, a repeat gets 410")]
    public static partial void KeyExpired(ILogger logger, string sessionTag);

    [LoggerMessage(1153, LogLevel.Debug, "Key session {SessionTag} forgotten (both retentions passed)")]
    public static partial void KeyForgotten(ILogger logger, string sessionTag);
}
