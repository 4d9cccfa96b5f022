using System.Security.Claims;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Hosting;
using PersistentServices.Http;

namespace PersistentServices.Sessions;

/// <summary>
/// Session owners as the application identifies its principals (<see cref="PersistentServicesOptions.OwnerClaimType"/>,
/// <see cref="PersistentServicesOptions.OwnerIdentity"/>; <see cref="SessionOwner"/> hashes them): who owns what a
/// request starts, whether a request may use a session, and the refusal of a principal no claim identifies. One per
/// service (a DI singleton), so "warn once" about an unidentified principal is per service.
/// </summary>
internal sealed partial class SessionOwners(PersistentRuntime runtime, ILoggerFactory loggers)
{
    private readonly ILogger _logger = loggers.CreateLogger("PersistentServices.Sessions");
    private int _unidentifiedWarned;

    /// <summary>The owner of what <paramref name="user"/> starts: empty when anonymous, null when authenticated but unidentified.</summary>
    public byte[]? Of(ClaimsPrincipal user)
        => SessionOwner.Of(user, SessionOwner.CurrentVersion, runtime.Options.OwnerIdentityOptions);

    /// <summary>
    /// Whose share of the session table a session or key started by this request counts against: an authenticated owner's
    /// (<see cref="PersistentServicesOptions.MaxSessionsPerOwner"/>), else the client address's
    /// (<see cref="PersistentServicesOptions.MaxSessionsPerAddress"/>; an IPv6 client by its /64, which one client
    /// usually holds whole). No bucket (only <see cref="PersistentServicesOptions.MaxSessions"/>) when the connection has
    /// no IP address (a Unix socket, an in-memory test server).
    /// </summary>
    public (byte[] Bucket, int? Share, bool ByAddress) AdmissionBucket(HttpContext context, byte[] owner)
    {
        if (owner.Length > 0)
        {
            return (owner, runtime.Options.EffectiveMaxSessionsPerOwner, false);
        }

        if (context.Connection.RemoteIpAddress is not { } address)
        {
            return ([], null, true);
        }

        if (address.IsIPv4MappedToIPv6)
        {
            address = address.MapToIPv4();
        }

        var bytes = address.GetAddressBytes();
        var prefix = address.AddressFamily == System.Net.Sockets.AddressFamily.InterNetworkV6 ? bytes.AsSpan(0, 8) : bytes.AsSpan();
        Span<byte> tagged = stackalloc byte[prefix.Length + 1];
        tagged[0] = (byte)prefix.Length;
        prefix.CopyTo(tagged[1..]);
        return (System.Security.Cryptography.SHA256.HashData(tagged), runtime.Options.EffectiveMaxSessionsPerAddress, true);
    }

    /// <summary>True when <paramref name="user"/> may use <paramref name="session"/> (an anonymous session: whoever holds its id).</summary>
    public bool Owns(ClaimsPrincipal user, Session session)
        => SessionOwner.Owns(user, session.Owner, Http.IdempotencyKeys.IdempotencyKey.OwnerHashVersion(session), runtime.Options.OwnerIdentityOptions);

    /// <summary>
    /// 403 <c>owner-unidentified</c>: an authenticated principal that no claim identifies gets no session and no key (it
    /// would share them with every other such principal). Logged as a warning the first time, at debug level after that.
    /// </summary>
    public Task UnidentifiedAsync(HttpContext context)
    {
        var identity = context.User.Identity;
        var claims = string.Join(", ", context.User.Claims.Select(c => c.Type).Distinct(StringComparer.Ordinal).Take(8));
        if (Interlocked.Exchange(ref _unidentifiedWarned, 1) == 0)
        {
            OwnerUnidentified(_logger, identity?.AuthenticationType ?? "", claims);
        }
        else
        {
            OwnerUnidentifiedAgain(_logger, identity?.AuthenticationType ?? "", claims);
        }

        return ProtocolProblems.WriteAsync(context, 403, "owner-unidentified", "Caller not identified",
            $"The caller is authenticated ({identity?.AuthenticationType}) but carries no claim that identifies it (NameIdentifier, sub, its name claim" +
            (runtime.Options.OwnerClaimType is { } type ? $", or the configured '{type}'" : "") +
            "), so sessions and Idempotency-Keys cannot be bound to it. The service's operator sets PersistentServicesOptions.OwnerClaimType " +
            "(or OwnerIdentity) to the claim that identifies its callers.");
    }

    [LoggerMessage(1115, LogLevel.Warning,
        "Refused an authenticated caller ({AuthenticationType}) that no claim identifies as a session owner (its claims: {ClaimTypes}); set PersistentServicesOptions.OwnerClaimType or OwnerIdentity")]
    private static partial void OwnerUnidentified(ILogger logger, string authenticationType, string claimTypes);

    [LoggerMessage(1116, LogLevel.Debug, "Refused an authenticated caller ({AuthenticationType}) that no claim identifies as a session owner (its claims: {ClaimTypes})")]
    private static partial void OwnerUnidentifiedAgain(ILogger logger, string authenticationType, string claimTypes);
}
