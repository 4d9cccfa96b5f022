using System.Buffers.Binary;
using System.Security.Claims;
using System.Security.Cryptography;
using System.Text;

namespace PersistentServices.Sessions;

/// <summary>
/// Binds a session to the principal that started it: a session answers only that principal (to anyone else it does not
/// exist). Anonymous sessions have no owner; their id is a bearer secret.
/// </summary>
internal static class SessionOwner
{
    /// <summary>The owner hash sessions started by this build carry.</summary>
    public const int CurrentVersion = 2;

    /// <summary>
    /// Version 2: SHA-256 over the length-prefixed issuer, type and value of the principal's identifying claim (the first
    /// of <see cref="ClaimTypes.NameIdentifier"/>, <c>sub</c>, or the identity's name claim). Typed and issued, so one
    /// authentication scheme's <c>Name</c> can never equal another's <c>NameIdentifier</c>. Empty when anonymous.
    /// </summary>
    public static byte[] Of(ClaimsPrincipal user, int version = CurrentVersion)
    {
        if (user.Identity is not { IsAuthenticated: true } identity)
        {
            return [];
        }

        if (version == 0)
        {
            var legacy = user.FindFirst(ClaimTypes.NameIdentifier)?.Value ?? user.FindFirst("sub")?.Value ?? identity.Name;
            return legacy is null ? [] : SHA256.HashData(Encoding.UTF8.GetBytes("principal:" + legacy));
        }

        var nameType = (identity as ClaimsIdentity)?.NameClaimType ?? ClaimsIdentity.DefaultNameClaimType;
        var claim = user.FindFirst(ClaimTypes.NameIdentifier) ?? user.FindFirst("sub") ?? user.FindFirst(nameType);
        if (claim is null)
        {
            return [];
        }

        using var hash = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
        Append(hash, "ps-owner/2");
        Append(hash, claim.Issuer);
        Append(hash, claim.Type);
        Append(hash, claim.Value);
        return hash.GetHashAndReset();
    }

    /// <summary>True when <paramref name="user"/> may use a session owned by <paramref name="owner"/> (hashed with <paramref name="version"/>).</summary>
    public static bool Owns(ClaimsPrincipal user, byte[] owner, int version)
        => owner.Length == 0 || CryptographicOperations.FixedTimeEquals(owner, Of(user, version));

    private static void Append(IncrementalHash hash, string value)
    {
        var bytes = Encoding.UTF8.GetBytes(value);
        Span<byte> length = stackalloc byte[4];
        BinaryPrimitives.WriteInt32BigEndian(length, bytes.Length);
        hash.AppendData(length);
        hash.AppendData(bytes);
    }
}
