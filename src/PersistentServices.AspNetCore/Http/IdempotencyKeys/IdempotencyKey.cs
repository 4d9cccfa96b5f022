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
internal sealed record IdempotencyKey(string Value, SessionId SessionId, byte[] Scope, SessionId? LegacySessionId)
{
    public const string HeaderName = "Idempotency-Key";

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
    public static bool IsKeySession(Session session) => session.OwnerVersion is KeySessionOwnerVersion or LegacyKeySessionOwnerVersion;

    /// <summary>The <see cref="SessionOwner"/> version a session's owner was hashed with (a key session's version says which).</summary>
    public static int OwnerHashVersion(Session session) => session.OwnerVersion switch
    {
        KeySessionOwnerVersion => 3,
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
    {
        key = null;
        var values = request.Headers[HeaderName];
        if (values.Count == 0)
        {
            return Presence.Absent;
        }

        if (values.Count != 1 || values[0] is not { } raw || Unquote(raw.Trim()) is not { } value || value.Length == 0 || value.Length > maxLength)
        {
            return Presence.Malformed;
        }

        foreach (var c in value)
        {
            if (c is < (char)0x20 or > (char)0x7E)
            {
                return Presence.Malformed;
            }
        }

        if (SessionOwner.Of(user, SessionOwner.CurrentVersion, identity) is not { } scope)
        {
            return Presence.Unidentified;
        }

        // A principal's keys of owner version 2 (before the authentication type was part of the owner) may still be
        // remembered: a retry across the upgrade finds the key's session there instead of running again.
        var legacy = scope.Length > 0 && SessionOwner.Of(user, 2) is { Length: > 0 } v2 ? Derive(v2, value) : (SessionId?)null;
        key = new IdempotencyKey(value, Derive(scope, value), scope, legacy);
        return Presence.Valid;
    }

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

    /// <summary>The sf-string's content (escapes <c>\"</c> and <c>\\</c>), or the text itself when it is not quoted; null when malformed.</summary>
    private static string? Unquote(string text)
    {
        if (text.Length == 0 || text[0] != '"')
        {
            // A bare key: no quote, and no comma (a comma outside quotes separates list members: "a, b" on one line is two
            // values, refused as on two lines).
            return text.Contains('"', StringComparison.Ordinal) || text.Contains(',', StringComparison.Ordinal) ? null : text;
        }

        if (text.Length < 2 || text[^1] != '"')
        {
            return null;
        }

        var builder = new StringBuilder(text.Length);
        for (var i = 1; i < text.Length - 1; i++)
        {
            var c = text[i];
            if (c == '\\')
            {
                if (++i >= text.Length - 1 || text[i] is not ('"' or '\\'))
                {
                    return null;
                }

                builder.Append(text[i]);
            }
            else if (c == '"')
            {
                return null;
            }
            else
            {
                builder.Append(c);
            }
        }

        return builder.ToString();
    }

    private static void Append(IncrementalHash hash, ReadOnlySpan<byte> bytes)
    {
        Span<byte> length = stackalloc byte[4];
        BinaryPrimitives.WriteInt32BigEndian(length, bytes.Length);
        hash.AppendData(length);
        hash.AppendData(bytes);
    }
}
