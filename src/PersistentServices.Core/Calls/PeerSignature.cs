using System.Buffers.Binary;
using System.Globalization;
using System.Security.Cryptography;
using System.Text;

namespace PersistentServices.Calls;

/// <summary>What a signature covers besides the timestamp and the body: the message's identity, its sender and its receiver.</summary>
/// <param name="Method">The HTTP method.</param>
/// <param name="PathAndQuery">The path and query, as sent.</param>
/// <param name="Caller">The sending service (<c>PS-Caller</c>).</param>
/// <param name="Callee">The service it is meant for (<c>PS-Callee</c>; <c>v2</c> only).</param>
/// <param name="Session">The session the call is made on (<c>PS-Session</c>), or empty.</param>
/// <param name="Sequence">The call's number (<c>PS-Seq</c>), or empty.</param>
/// <param name="Role">The caller's role (<c>PS-Role</c>; <c>domain</c> for domain messages).</param>
/// <param name="Dv">The DV (<c>PS-DV</c>), or empty.</param>
/// <param name="ContentType">The body's <c>Content-Type</c>, or empty (<c>v2</c> only).</param>
internal readonly record struct PeerMessage(
    string Method, string PathAndQuery, string Caller, string Callee, string Session, string Sequence, string Role, string Dv, string ContentType);

/// <summary>
/// The format of signatures on calls between the deployment's services and on domain messages (docs/calls.md, "Who may
/// call"): HMAC-SHA256 with a peer key, header <c>PS-Signature: t=&lt;unix ms&gt;,v2=&lt;hex&gt;</c>.
/// <list type="bullet">
/// <item><c>v2</c> covers a label naming the format, the timestamp, the method, path and query, caller, <b>callee</b>,
///   session, number, role, DV and <b>Content-Type</b>, each length-prefixed, and a SHA-256 of the body;</item>
/// <item><c>v1</c> (before issue 32) covers the timestamp, method, path and query, caller, session, number, role and DV,
///   length-prefixed, and the body's SHA-256: no callee, no content type, no label. Only sent and accepted when
///   <c>PersistentCallOptions.LegacySignatures</c> says so.</item>
/// </list>
/// The two MACs are over different inputs (the label, the added fields), so neither is ever taken for the other.
/// </summary>
internal static class PeerSignature
{
    public const string V1 = "v1";
    public const string V2 = "v2";

    private static readonly byte[] V2Label = Encoding.ASCII.GetBytes("PS-Signature v2\n");

    public static string Sign(byte[] key, long unixMs, string version, in PeerMessage message, ReadOnlySpan<byte> body)
    {
        Span<byte> bodyHash = stackalloc byte[32];
        SHA256.HashData(body, bodyHash);
        var mac = version == V1 ? MacV1(key, unixMs, message, bodyHash) : MacV2(key, unixMs, message, bodyHash);
        return $"t={unixMs.ToString(CultureInfo.InvariantCulture)},{version}={Convert.ToHexStringLower(mac)}";
    }

    /// <summary>The parts of a <c>PS-Signature</c> header; null (with <paramref name="error"/>) when it is not one.</summary>
    public static (long UnixMs, string Version, byte[] Mac)? Parse(string? header, out string? error)
    {
        error = null;
        if (string.IsNullOrEmpty(header))
        {
            error = "no PS-Signature header (t=<unix ms>,v2=<hex>)";
            return null;
        }

        var comma = header.IndexOf(',', StringComparison.Ordinal);
        if (!header.StartsWith("t=", StringComparison.Ordinal) || comma < 0 ||
            !long.TryParse(header.AsSpan(2, comma - 2), NumberStyles.None, CultureInfo.InvariantCulture, out var unixMs))
        {
            error = "a malformed PS-Signature header (t=<unix ms>,v2=<hex>)";
            return null;
        }

        var rest = header.AsSpan(comma + 1);
        var version = rest.StartsWith("v2=", StringComparison.Ordinal) ? V2 : rest.StartsWith("v1=", StringComparison.Ordinal) ? V1 : null;
        var mac = new byte[32];
        if (version is null || rest.Length != 3 + 64 ||
            Convert.FromHexString(rest[3..], mac, out _, out var written) != System.Buffers.OperationStatus.Done || written != 32)
        {
            error = "a malformed signature (t=<unix ms>,v2=<64 hex digits>)";
            return null;
        }

        return (unixMs, version, mac);
    }

    /// <summary>Whether <paramref name="given"/> is the MAC of the message with <paramref name="key"/>, in constant time.</summary>
    public static bool Matches(byte[] key, long unixMs, string version, in PeerMessage message, ReadOnlySpan<byte> bodyHash, ReadOnlySpan<byte> given)
        => CryptographicOperations.FixedTimeEquals(version == V1 ? MacV1(key, unixMs, message, bodyHash) : MacV2(key, unixMs, message, bodyHash), given);

    private static byte[] MacV2(byte[] key, long unixMs, in PeerMessage m, ReadOnlySpan<byte> bodyHash)
    {
        using var mac = IncrementalHash.CreateHMAC(HashAlgorithmName.SHA256, key);
        mac.AppendData(V2Label);
        AppendTime(mac, unixMs);
        foreach (var field in (ReadOnlySpan<string>)[m.Method, m.PathAndQuery, m.Caller, m.Callee, m.Session, m.Sequence, m.Role, m.Dv, m.ContentType])
        {
            AppendField(mac, field);
        }

        mac.AppendData(bodyHash);
        return mac.GetHashAndReset();
    }

    /// <summary>The format before issue 32, byte for byte (no label, no callee, no content type).</summary>
    private static byte[] MacV1(byte[] key, long unixMs, in PeerMessage m, ReadOnlySpan<byte> bodyHash)
    {
        using var mac = IncrementalHash.CreateHMAC(HashAlgorithmName.SHA256, key);
        AppendTime(mac, unixMs);
        foreach (var field in (ReadOnlySpan<string>)[m.Method, m.PathAndQuery, m.Caller, m.Session, m.Sequence, m.Role, m.Dv])
        {
            AppendField(mac, field);
        }

        mac.AppendData(bodyHash);
        return mac.GetHashAndReset();
    }

    private static void AppendTime(IncrementalHash mac, long unixMs)
    {
        Span<byte> number = stackalloc byte[8];
        BinaryPrimitives.WriteInt64BigEndian(number, unixMs);
        mac.AppendData(number);
    }

    private static void AppendField(IncrementalHash mac, string field)
    {
        var bytes = Encoding.UTF8.GetBytes(field);
        Span<byte> length = stackalloc byte[4];
        BinaryPrimitives.WriteInt32BigEndian(length, bytes.Length);
        mac.AppendData(length);
        mac.AppendData(bytes);
    }
}
