using System.Buffers;
using System.Buffers.Binary;
using System.Security.Cryptography;
using System.Text;

namespace PersistentServices.Sessions;

/// <summary>
/// What makes a retry "the same request" as the one first sent with its sequence number: a SHA-256 of its method, path,
/// query and body. A reused number with another request is refused (422), never executed.
/// </summary>
internal static class RequestIdentity
{
    /// <summary>The hash of every request logged by this build: each field is length-prefixed.</summary>
    public const int CurrentVersion = 2;

    /// <summary>
    /// Version 2: SHA-256 of ("ps-request/2", method, path, query, body), each as a 4-byte big-endian length and its
    /// UTF-8 bytes, so no choice of characters in one field (a decoded path may hold '\n') can imitate another split.
    /// </summary>
    public static byte[] Hash(string method, string path, string query, ReadOnlySpan<byte> body)
    {
        const string Tag = "ps-request/2";
        var length = Field(Tag) + Field(method) + Field(path) + Field(query) + 4 + body.Length;
        var rented = ArrayPool<byte>.Shared.Rent(length);
        try
        {
            var buffer = rented.AsSpan(0, length);
            var at = Write(buffer, Tag);
            at += Write(buffer[at..], method);
            at += Write(buffer[at..], path);
            at += Write(buffer[at..], query);
            BinaryPrimitives.WriteInt32BigEndian(buffer[at..], body.Length);
            body.CopyTo(buffer[(at + 4)..]);
            return SHA256.HashData(buffer);
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(rented);
        }
    }

    /// <summary>Version 0, as the first builds logged it ("method\npath\nquery\n" + body): only to recognize a retry of a request they logged.</summary>
    public static byte[] HashVersion0(string method, string path, string query, ReadOnlySpan<byte> body)
    {
        var head = $"{method}\n{path}\n{query}\n";
        var headLength = Encoding.UTF8.GetByteCount(head);
        var rented = ArrayPool<byte>.Shared.Rent(headLength + body.Length);
        try
        {
            var buffer = rented.AsSpan(0, headLength + body.Length);
            Encoding.UTF8.GetBytes(head, buffer);
            body.CopyTo(buffer[headLength..]);
            return SHA256.HashData(buffer);
        }
        finally
        {
            ArrayPool<byte>.Shared.Return(rented);
        }
    }

    private static int Field(string value) => 4 + Encoding.UTF8.GetByteCount(value);

    private static int Write(Span<byte> buffer, string value)
    {
        var written = Encoding.UTF8.GetBytes(value, buffer[4..]);
        BinaryPrimitives.WriteInt32BigEndian(buffer, written);
        return 4 + written;
    }
}
