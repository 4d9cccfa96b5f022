using System.Buffers.Binary;
using System.Security.Claims;
using System.Security.Cryptography;
using System.Text;

namespace PersistentServices.Sessions;

/// <summary>
/// How an authenticated principal is identified as a session owner when it carries none of the usual identifying claims
/// (<see cref="ClaimTypes.NameIdentifier"/>, <c>sub</c>, its name claim): an API-key handler's principal with only a
/// <c>client_id</c>, say. <see cref="ClaimType"/> names the claim to use instead; <see cref="Resolve"/> computes an
/// identity. Set at most one.
/// </summary>
internal sealed record OwnerIdentityOptions(string? ClaimType, Func<ClaimsPrincipal, string?>? Resolve)
{
    public static readonly OwnerIdentityOptions Default = new(null, null);
}

/// <summary>
/// Binds a session to the principal that started it: a session answers only that principal (to anyone else it does not
/// exist). Anonymous sessions have no owner; their id is a bearer secret. An authenticated principal always has an
/// owner: one this class cannot identify is refused (<see cref="Of"/> returns null), never taken for anonymous.
/// </summary>
internal static class SessionOwner
{
    /// <summary>The owner hash sessions started by this build carry.</summary>
    public const int CurrentVersion = 3;

    /// <summary>
    /// The owner of a session started by <paramref name="user"/>: empty for an anonymous caller; null for an authenticated
    /// principal that cannot be identified (version 3: none of the identifying claims and no configured identity).
    /// <list type="bullet">
    /// <item>Version 3: SHA-256 over the length-prefixed authentication type, then either the issuer, type and value of the
    ///   identifying claim (<paramref name="identity"/>'s claim type when configured, else the first of
    ///   <see cref="ClaimTypes.NameIdentifier"/>, <c>sub</c>, the identity's name claim) or the configured identity's value.
    ///   The authentication type keeps two schemes that issue the same name identifier apart.</item>
    /// <item>Version 2 (sessions started before): the same without the authentication type, and empty (anonymous) when no
    ///   claim identified the principal.</item>
    /// <item>Version 0: the oldest, a hash of the claim's value only.</item>
    /// </list>
    /// </summary>
    public static byte[]? Of(ClaimsPrincipal user, int version = CurrentVersion, OwnerIdentityOptions? identity = null)
    {
        if (user.Identity is not { IsAuthenticated: true } principal)
        {
            return [];
        }

        if (version == 0)
        {
            var legacy = user.FindFirst(ClaimTypes.NameIdentifier)?.Value ?? user.FindFirst("sub")?.Value ?? principal.Name;
            return legacy is null ? [] : SHA256.HashData(Encoding.UTF8.GetBytes("principal:" + legacy));
        }

        var nameType = (principal as ClaimsIdentity)?.NameClaimType ?? ClaimsIdentity.DefaultNameClaimType;
        if (version is 1 or 2)
        {
            var v2 = user.FindFirst(ClaimTypes.NameIdentifier) ?? user.FindFirst("sub") ?? user.FindFirst(nameType);
            return v2 is null ? [] : Hash("ps-owner/2", null, v2.Issuer, v2.Type, v2.Value);
        }

        identity ??= OwnerIdentityOptions.Default;
        var scheme = principal.AuthenticationType ?? "";
        if (identity.Resolve is { } resolve)
        {
            return resolve(user) is { Length: > 0 } custom ? Hash("ps-owner/3", scheme, "custom", "", custom) : null;
        }

        var claim = identity.ClaimType is { } configured
            ? user.FindFirst(configured)
            : user.FindFirst(ClaimTypes.NameIdentifier) ?? user.FindFirst("sub") ?? user.FindFirst(nameType);
        return claim is { Value.Length: > 0 } ? Hash("ps-owner/3", scheme, claim.Issuer, claim.Type, claim.Value) : null;
    }

    /// <summary>True when <paramref name="user"/> may use a session owned by <paramref name="owner"/> (hashed with <paramref name="version"/>).</summary>
    public static bool Owns(ClaimsPrincipal user, byte[] owner, int version, OwnerIdentityOptions? identity = null)
        => owner.Length == 0 || (Of(user, version, identity) is { } mine && CryptographicOperations.FixedTimeEquals(owner, mine));

    private static byte[] Hash(string tag, string? scheme, string issuer, string type, string value)
    {
        using var hash = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
        Append(hash, tag);
        if (scheme is not null)
        {
            Append(hash, scheme);
        }

        Append(hash, issuer);
        Append(hash, type);
        Append(hash, value);
        return hash.GetHashAndReset();
    }

    private static void Append(IncrementalHash hash, string value)
    {
        var bytes = Encoding.UTF8.GetBytes(value);
        Span<byte> length = stackalloc byte[4];
        BinaryPrimitives.WriteInt32BigEndian(length, bytes.Length);
        hash.AppendData(length);
        hash.AppendData(bytes);
    }
}
