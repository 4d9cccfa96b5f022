using System.Buffers.Binary;
using System.Security.Claims;
using System.Security.Cryptography;
using System.Text;
using Microsoft.AspNetCore.Http;
using PersistentServices.Sessions;

namespace PersistentServices.Http.IdempotencyKeys;

/// <summary>
/// An <c>Idempotency-Key</c> request header (IETF draft-ietf-httpapi-idempotency-key-header): the key as the client sent
/// it, and the one-request "key session" it maps to. The mapping is deterministic, so a repeat after a restart finds the
/// same session in the recovered log; it is scoped per principal (the owner hash of <see cref="SessionOwner"/>), so two
/// callers using the same key never meet, and one caller's key cannot read another's reply.
/// </summary>
internal sealed record IdempotencyKey(string Value, SessionId SessionId, byte[] Scope, SessionId? LegacySessionId, bool Generated = false)
{
    public const string HeaderName = IdempotencyKeyHeader.Name;

    /// <summary>
    /// The <see cref="Session.OwnerVersion"/> of a key session, logged in its SessionStarted and checkpoint records: the
    /// session belongs to one key (one request; no session-protocol request may use it; its own retention,
    /// <see cref="IdempotencyKeyOptions"/>), and its owner is hashed as <see cref="SessionOwner"/> version 3 does (with the
    /// authentication type; an unidentified principal is refused). Key sessions started before carry 40: owner version 2.
    /// </summary>
    public const int KeySessionOwnerVersion = KeySessions.OwnerVersion;

    /// <summary>Key sessions started by builds before owner version 3.</summary>
    public const int LegacyKeySessionOwnerVersion = KeySessions.LegacyOwnerVersion;

    /// <summary>True when <paramref name="session"/> is a key session.</summary>
    public static bool IsKeySession(Session session) => KeySessions.IsKeySession(session);

    /// <summary>The <see cref="Session.OwnerVersion"/> of a key session whose key a gateway generated (<see cref="Generated"/>).</summary>
    public const int GatewayKeySessionOwnerVersion = KeySessions.GatewayOwnerVersion;

    /// <summary>True when <paramref name="session"/> is the key session of a key a gateway generated.</summary>
    public static bool IsGatewayKeySession(Session session) => session.OwnerVersion == GatewayKeySessionOwnerVersion;

    /// <summary>The <see cref="SessionOwner"/> version a session's owner was hashed with (a key session's version says which).</summary>
    public static int OwnerHashVersion(Session session) => session.OwnerVersion switch
    {
        KeySessionOwnerVersion or GatewayKeySessionOwnerVersion => 3,
        LegacyKeySessionOwnerVersion => 2,
        var version => version,
    };

    /// <summary>The header's state on a request.</summary>
    public enum Presence
    {
        Absent,
        Valid,
        Malformed,

        /// <summary>A valid key from an authenticated principal that no claim identifies (refused: it would share keys with every such principal).</summary>
        Unidentified,
    }

    /// <summary>
    /// Reads the header: one value, either a structured-field string (<c>"…"</c>, as the draft specifies) or a bare token
    /// (what most clients send), 1 to <paramref name="maxLength"/> printable ASCII characters (0x20–0x7E, the characters of a structured-field string).
    /// </summary>
    public static Presence TryRead(HttpRequest request, ClaimsPrincipal user, int maxLength, OwnerIdentityOptions identity, out IdempotencyKey? key)
        => TryRead(request, user, maxLength, identity, gateways: null, out key);

    /// <summary>
    /// <see cref="TryRead(HttpRequest, ClaimsPrincipal, int, OwnerIdentityOptions, out IdempotencyKey?)"/>; a key that
    /// <paramref name="gateways"/> finds signed by a gateway of the deployment is <see cref="Generated"/>: its session id is
    /// derived in a scope of its own, so no client's own key (and no forged one) ever names the same session.
    /// </summary>
    public static Presence TryRead(HttpRequest request, ClaimsPrincipal user, int maxLength, OwnerIdentityOptions identity, GatewayKeyTrust? gateways, out IdempotencyKey? key)
    {
        key = null;
        switch (IdempotencyKeyHeader.Parse(request.Headers[HeaderName], maxLength, out var parsed))
        {
            case IdempotencyKeyHeader.Syntax.Absent:
                return Presence.Absent;
            case IdempotencyKeyHeader.Syntax.Malformed:
                return Presence.Malformed;
        }

        var value = parsed!;
        if (SessionOwner.Of(user, SessionOwner.CurrentVersion, identity) is not { } scope)
        {
            return Presence.Unidentified;
        }

        if (value.StartsWith(GatewayKeySignature.KeyPrefix, StringComparison.Ordinal) && gateways is not null && gateways.Generated(request, value))
        {
            key = new IdempotencyKey(value, Derive([.. GatewayScopeTag, .. scope], value), scope, null, Generated: true);
            return Presence.Valid;
        }

        // A principal's keys of owner version 2 (before the authentication type was part of the owner) may still be
        // remembered: a retry across the upgrade finds the key's session there instead of running again.
        var legacy = scope.Length > 0 && SessionOwner.Of(user, 2) is { Length: > 0 } v2 ? Derive(v2, value) : (SessionId?)null;
        key = new IdempotencyKey(value, Derive(scope, value), scope, legacy);
        return Presence.Valid;
    }

    /// <summary>Put before the scope of a generated key when its session id is derived: no client's own key derives the same id.</summary>
    private static ReadOnlySpan<byte> GatewayScopeTag => "ps-gateway-key/1:"u8;

    /// <summary>SHA-256 over ("ps-idempotency-key/1", scope, key), length-prefixed; its first 16 bytes are the session id.</summary>
    public static SessionId Derive(byte[] scope, string key)
    {
        using var hash = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
        Append(hash, "ps-idempotency-key/1"u8);
        Append(hash, scope);
        Append(hash, Encoding.UTF8.GetBytes(key));
        Span<byte> digest = stackalloc byte[32];
        hash.GetHashAndReset(digest);
        return SessionId.FromBytes(digest[..16]);
    }

    private static void Append(IncrementalHash hash, ReadOnlySpan<byte> bytes)
    {
        Span<byte> length = stackalloc byte[4];
        BinaryPrimitives.WriteInt32BigEndian(length, bytes.Length);
        hash.AppendData(length);
        hash.AppendData(bytes);
    }
}
