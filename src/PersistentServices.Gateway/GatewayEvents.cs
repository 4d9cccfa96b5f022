using Microsoft.Extensions.Logging;

namespace PersistentServices.Gateway;

/// <summary>Log messages of the gateway (event ids 1400–1419; docs/architecture.md lists every package's range).</summary>
internal static partial class GatewayEvents
{
    [LoggerMessage(1400, LogLevel.Debug, "Holding {Method} {Path} for service {Service}: instance {Ordinal} {Reason}; resending in {DelayMs} ms")]
    public static partial void Holding(ILogger logger, string method, string path, string service, int ordinal, string reason, long delayMs);

    [LoggerMessage(1401, LogLevel.Warning, "Held {Method} {Path} for service {Service} past HoldTime: instance {Ordinal}, {HoldMs} ms ({Reason}); answered {Status}")]
    public static partial void HoldExpired(ILogger logger, string method, string path, string service, int ordinal, long holdMs, string reason, int status);

    [LoggerMessage(1402, LogLevel.Warning, "{Method} {Path} for service {Service} may have executed at instance {Ordinal} ({Reason}) and carries no identity the service honours: not resent, answered 502")]
    public static partial void NotResent(ILogger logger, string method, string path, string service, int ordinal, string reason);

    [LoggerMessage(1403, LogLevel.Information, "Session of service {Service} names instance {Ordinal}, which is not configured: answered 404")]
    public static partial void UnknownOwner(ILogger logger, string service, int ordinal);

    [LoggerMessage(1404, LogLevel.Warning, "Buffered request bodies would exceed MaxBufferedBytes ({MaxBufferedBytes}): {Method} {Path} answered 503 before it was sent")]
    public static partial void BufferFull(ILogger logger, long maxBufferedBytes, string method, string path);

    [LoggerMessage(1407, LogLevel.Warning, "Buffered request bodies of one client address would exceed MaxBufferedBytesPerClient ({MaxBufferedBytesPerClient}): {Method} {Path} answered 503 before it was sent")]
    public static partial void ClientBufferFull(ILogger logger, long maxBufferedBytesPerClient, string method, string path);

    [LoggerMessage(1405, LogLevel.Information, "Held request {Method} {Path} for service {Service} answered by instance {Ordinal} after {Attempts} sends and {HeldMs} ms")]
    public static partial void Released(ILogger logger, string method, string path, string service, int ordinal, int attempts, long heldMs);

    [LoggerMessage(1408, LogLevel.Warning, "Refused {Method} {Path} from {Client}: the services' control plane is not forwarded from outside (PersistentGatewayOptions.ForwardControlPlane); answered 404")]
    public static partial void ControlPlaneRefused(ILogger logger, string method, string path, string client);

    [LoggerMessage(1406, LogLevel.Information, "Gateway started: {Services} services, {Instances} instances, hold time {HoldTime}")]
    public static partial void Started(ILogger logger, int services, int instances, TimeSpan holdTime);
}
