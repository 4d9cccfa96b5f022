using System.Buffers.Text;
using System.Security.Cryptography;

namespace PersistentServices.Sessions;

/// <summary>
/// A session id: 128 random bits, written as 22 base64url characters (docs/protocol.md). A service with an instance
/// ordinal (<c>PersistentServicesOptions.InstanceOrdinal</c>) writes the ordinal into the first byte and keeps 120 random
/// bits, so a gateway finds the instance that owns a session from its id alone (docs/gateway.md).
/// </summary>
internal readonly record struct SessionId(UInt128 Value)
{
    public const int TextLength = 22;

    public static SessionId NewRandom() => NewRandom(ownerOrdinal: null);

    /// <summary>A new random id; with <paramref name="ownerOrdinal"/> its first byte is that ordinal (120 random bits remain).</summary>
    public static SessionId NewRandom(byte? ownerOrdinal)
    {
        Span<byte> bytes = stackalloc byte[16];
        RandomNumberGenerator.Fill(bytes);
        if (ownerOrdinal is { } ordinal)
        {
            bytes[0] = ordinal;
        }

        return FromBytes(bytes);
    }

    /// <summary>The first byte of the id: the owning instance's ordinal when the service that started it had one.</summary>
    public byte FirstByte => (byte)(Value >> 120);

    public static SessionId FromBytes(ReadOnlySpan<byte> bytes)
    {
        if (bytes.Length != 16)
        {
            throw new ArgumentException($"A session id has 16 bytes, not {bytes.Length}.", nameof(bytes));
        }

        return new SessionId(System.Buffers.Binary.BinaryPrimitives.ReadUInt128BigEndian(bytes));
    }

    public static bool TryParse(ReadOnlySpan<char> text, out SessionId id)
    {
        id = default;
        Span<byte> bytes = stackalloc byte[16];
        if (text.Length != TextLength || !Base64Url.IsValid(text) || Base64Url.DecodeFromChars(text, bytes) != 16)
        {
            return false;
        }

        id = FromBytes(bytes);
        return true;
    }

    public byte[] ToBytes()
    {
        var bytes = new byte[16];
        System.Buffers.Binary.BinaryPrimitives.WriteUInt128BigEndian(bytes, Value);
        return bytes;
    }

    public override string ToString() => Base64Url.EncodeToString(ToBytes());
}
