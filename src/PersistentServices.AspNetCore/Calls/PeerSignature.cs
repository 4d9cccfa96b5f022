using System.Buffers.Binary;
using System.Globalization;
using System.Security.Cryptography;
using System.Text;

namespace PersistentServices.Calls;

/// <summary>
/// Signs and verifies calls between the deployment's services (docs/calls.md, "Who may call"): HMAC-SHA256 with the
/// shared <see cref="PersistentCallOptions.PeerKey"/> over a timestamp and everything a callee acts on (method, path and
/// query, caller, session, number, role, the DV inside a domain, a SHA-256 of the body), each field length-prefixed. Header
/// <c>PS-Signature: t=&lt;unix ms&gt;,v1=&lt;hex&gt;</c>. A callee honours call ids, roles and implicit sessions only from a
/// request whose signature verifies and whose timestamp is within <see cref="PersistentCallOptions.SignatureWindow"/>.
/// </summary>
internal static class PeerSignature
{
    public static string Sign(byte[] key, long unixMs, string method, string pathAndQuery, string caller, string session, string sequence, string role, string dv, ReadOnlySpan<byte> body)
        => $"t={unixMs.ToString(CultureInfo.InvariantCulture)},v1={Convert.ToHexStringLower(Mac(key, unixMs, method, pathAndQuery, caller, session, sequence, role, dv, body))}";

    /// <summary>Null when the signature is valid; otherwise why it is not.</summary>
    public static string? Verify(byte[] key, string? header, DateTimeOffset now, TimeSpan window, string method, string pathAndQuery, string caller, string session, string sequence, string role, string dv, ReadOnlySpan<byte> body)
    {
        var comma = header?.IndexOf(",v1=", StringComparison.Ordinal) ?? -1;
        if (header is null || !header.StartsWith("t=", StringComparison.Ordinal) || comma < 0)
        {
            return "no PS-Signature header (t=<unix ms>,v1=<hex>)";
        }

        if (!long.TryParse(header.AsSpan(2, comma - 2), NumberStyles.None, CultureInfo.InvariantCulture, out var unixMs))
        {
            return "a malformed timestamp";
        }

        if ((now - DateTimeOffset.FromUnixTimeMilliseconds(unixMs)).Duration() > window)
        {
            return "a timestamp outside the signature window (a replayed or delayed message, or clocks apart)";
        }

        Span<byte> given = stackalloc byte[32];
        if (Convert.FromHexString(header.AsSpan(comma + 4), given, out _, out var written) != System.Buffers.OperationStatus.Done || written != 32)
        {
            return "a malformed signature";
        }

        var expected = Mac(key, unixMs, method, pathAndQuery, caller, session, sequence, role, dv, body);
        return CryptographicOperations.FixedTimeEquals(expected, given) ? null : "a signature that does not match (another key, or a changed request)";
    }

    private static byte[] Mac(byte[] key, long unixMs, string method, string pathAndQuery, string caller, string session, string sequence, string role, string dv, ReadOnlySpan<byte> body)
    {
        using var mac = IncrementalHash.CreateHMAC(HashAlgorithmName.SHA256, key);
        Span<byte> number = stackalloc byte[8];
        BinaryPrimitives.WriteInt64BigEndian(number, unixMs);
        mac.AppendData(number);
        foreach (var field in (ReadOnlySpan<string>)[method, pathAndQuery, caller, session, sequence, role, dv])
        {
            var bytes = Encoding.UTF8.GetBytes(field);
            BinaryPrimitives.WriteInt32BigEndian(number, bytes.Length);
            mac.AppendData(number[..4]);
            mac.AppendData(bytes);
        }

        mac.AppendData(SHA256.HashData(body));
        return mac.GetHashAndReset();
    }
}
