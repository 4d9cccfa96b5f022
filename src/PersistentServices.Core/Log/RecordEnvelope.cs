using System.Buffers.Binary;
using PersistentServices.Log.Records;

namespace PersistentServices.Log;

/// <summary>Flags in a record's envelope.</summary>
[Flags]
internal enum RecordFlags : byte
{
    None = 0,

    /// <summary>A reader that does not know the record's kind may skip it instead of stopping.</summary>
    SkippableIfUnknown = 1,
}

/// <summary>
/// The fixed header in front of every record body (docs/log-format.md, "Envelope"):
/// <code>
///  0  uint32  CRC-32C over bytes [4, 20 + bodyLength)
///  4  uint8   format version: 1 (body in clear) or 2 (body sealed)
///  5  uint8   flags (RecordFlags)
///  6  uint16  record kind (RecordKind)
///  8  int64   LSN: the record's own log address
/// 16  int32   body length (as stored: for version 2, the sealed fields below)
/// 20  ...     version 1: the body, the kind's protobuf message
/// </code>
/// A sealed record (version 2, written when the log has a key: <see cref="LogEncryptionOptions"/>) stores its body as
/// <code>
/// 20  uint32  key id (<see cref="LogKey"/>)
/// 24  16      salt of the data key (<see cref="RecordSealer"/>)
/// 40  12      nonce, random
/// 52  n - 48  ciphertext of the body (AES-256-GCM; associated data: bytes [4, 40))
/// ... 16      tag
/// </code>
/// The CRC covers the stored bytes either way, so a torn or damaged record is found without the key; the tag proves, with
/// the key, that the body and the header are the ones written. All integers little-endian.
/// </summary>
internal static class RecordEnvelope
{
    public const int HeaderSize = 20;

    /// <summary>A record whose body is in clear: what every build writes without a key, and all the first builds wrote.</summary>
    public const byte PlainFormatVersion = 1;

    /// <summary>A record whose body is sealed (AES-256-GCM) under a log key.</summary>
    public const byte SealedFormatVersion = 2;

    /// <summary>The newest envelope layout this build reads.</summary>
    public const byte CurrentFormatVersion = SealedFormatVersion;

    public const int KeyIdOffset = 20;
    public const int SaltOffset = 24;
    public const int SaltSize = 16;
    public const int NonceOffset = 40;
    public const int NonceSize = 12;
    public const int CiphertextOffset = 52;
    public const int TagSize = 16;

    /// <summary>Bytes a sealed record stores beyond its body: key id, salt, nonce, tag.</summary>
    public const int SealedOverhead = 4 + SaltSize + NonceSize + TagSize;

    /// <summary>The associated data of a sealed record: version, flags, kind, LSN, stored length, key id, salt.</summary>
    public static readonly Range AssociatedData = 4..NonceOffset;

    private const int CrcOffset = 0;
    private const int VersionOffset = 4;
    private const int FlagsOffset = 5;
    private const int KindOffset = 6;
    private const int LsnOffset = 8;
    private const int LengthOffset = 16;

    /// <summary>Writes header and body into <paramref name="destination"/> (exactly HeaderSize + body.Length bytes).</summary>
    // Runs over every record when a log opens: optimized at once, not first as tier-0 code (recovery time).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    public static void Write(Span<byte> destination, long lsn, RecordKind kind, RecordFlags flags, ReadOnlySpan<byte> body)
    {
        destination[VersionOffset] = PlainFormatVersion;
        destination[FlagsOffset] = (byte)flags;
        BinaryPrimitives.WriteUInt16LittleEndian(destination[KindOffset..], checked((ushort)kind));
        BinaryPrimitives.WriteInt64LittleEndian(destination[LsnOffset..], lsn);
        BinaryPrimitives.WriteInt32LittleEndian(destination[LengthOffset..], body.Length);
        body.CopyTo(destination[HeaderSize..]);
        var crc = Crc32C.Compute(destination[VersionOffset..(HeaderSize + body.Length)]);
        BinaryPrimitives.WriteUInt32LittleEndian(destination[CrcOffset..], crc);
    }

    /// <summary>
    /// Writes a sealed record (version 2) into <paramref name="destination"/>: exactly HeaderSize + SealedOverhead +
    /// body.Length bytes. The CRC is computed over the stored (sealed) bytes.
    /// </summary>
    public static void WriteSealed(Span<byte> destination, long lsn, RecordKind kind, RecordFlags flags, ReadOnlySpan<byte> body, RecordSealer sealer)
    {
        var stored = SealedOverhead + body.Length;
        destination[VersionOffset] = SealedFormatVersion;
        destination[FlagsOffset] = (byte)flags;
        BinaryPrimitives.WriteUInt16LittleEndian(destination[KindOffset..], checked((ushort)kind));
        BinaryPrimitives.WriteInt64LittleEndian(destination[LsnOffset..], lsn);
        BinaryPrimitives.WriteInt32LittleEndian(destination[LengthOffset..], stored);
        sealer.Seal(destination[..(HeaderSize + stored)], body);
        var crc = Crc32C.Compute(destination[VersionOffset..(HeaderSize + stored)]);
        BinaryPrimitives.WriteUInt32LittleEndian(destination[CrcOffset..], crc);
    }

    /// <summary>
    /// The body of a verified record: <paramref name="entry"/>'s own bytes when it is in clear; else its sealed body opened
    /// into <paramref name="scratch"/> (at least <see cref="RecordHeader.BodyLength"/> bytes). <paramref name="plain"/> is
    /// the header with the body's length in clear. Returns a reason when a sealed body fails authentication (null when
    /// intact); throws <see cref="LogEncryptionKeyException"/> when its key is not in <paramref name="keys"/>.
    /// </summary>
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    public static string? Open(ReadOnlySpan<byte> entry, RecordHeader header, LogKeyRing? keys, Span<byte> scratch, out ReadOnlySpan<byte> body, out RecordHeader plain)
    {
        if (header.KeyId is not { } keyId)
        {
            body = entry.Slice(HeaderSize, header.BodyLength);
            plain = header;
            return null;
        }

        plain = header with { BodyLength = header.BodyLength - SealedOverhead };
        if (!LogKeyRing.Open(keys, entry, header, scratch))
        {
            body = default;
            return $"the sealed record fails authentication with key {LogKey.Format(keyId)} (AES-GCM tag mismatch): its bytes were changed with their checksum recomputed, " +
                "or a different key was configured under the same key id";
        }

        body = scratch[..plain.BodyLength];
        return null;
    }

    /// <summary>
    /// Checks a record read from <paramref name="address"/>: length, CRC, LSN, format version.
    /// Returns a reason when it is damaged (null when intact). A record that is intact but of a newer
    /// format than this build reads throws <see cref="LogFormatException"/>.
    /// </summary>
    // Runs over every record when a log opens: optimized at once, not first as tier-0 code (recovery time).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    public static string? Verify(ReadOnlySpan<byte> entry, long address, out RecordHeader header)
    {
        header = default;
        if (entry.Length < HeaderSize)
        {
            return $"entry of {entry.Length} bytes is shorter than a record header";
        }

        var bodyLength = BinaryPrimitives.ReadInt32LittleEndian(entry[LengthOffset..]);
        if (bodyLength < 0 || bodyLength > entry.Length - HeaderSize)
        {
            return $"body length {bodyLength} does not fit the entry of {entry.Length} bytes";
        }

        var stored = BinaryPrimitives.ReadUInt32LittleEndian(entry[CrcOffset..]);
        var computed = Crc32C.Compute(entry[VersionOffset..(HeaderSize + bodyLength)]);
        if (stored != computed)
        {
            return $"CRC-32C mismatch (stored 0x{stored:x8}, computed 0x{computed:x8})";
        }

        var lsn = BinaryPrimitives.ReadInt64LittleEndian(entry[LsnOffset..]);
        if (lsn != address)
        {
            return $"record names LSN {lsn} but was read from address {address} (misdirected write)";
        }

        var version = entry[VersionOffset];
        if (version is 0 or > CurrentFormatVersion)
        {
            throw new LogFormatException(
                $"Record at LSN {address} has envelope format version {version}; this build reads versions 1 to {CurrentFormatVersion}. " +
                "Run a newer build of PersistentServices against this log.");
        }

        uint? keyId = null;
        if (version == SealedFormatVersion)
        {
            if (bodyLength < SealedOverhead)
            {
                return $"sealed record of {bodyLength} bytes is shorter than its key id, salt, nonce and tag ({SealedOverhead} bytes)";
            }

            keyId = BinaryPrimitives.ReadUInt32LittleEndian(entry[KeyIdOffset..]);
        }

        header = new RecordHeader(
            lsn,
            (RecordKind)BinaryPrimitives.ReadUInt16LittleEndian(entry[KindOffset..]),
            (RecordFlags)entry[FlagsOffset],
            bodyLength,
            keyId);
        return null;
    }
}

/// <summary>
/// A verified envelope header. <see cref="BodyLength"/> is the stored length as verified (for a sealed record, its sealed
/// fields), and the body's length in clear once the record is opened (<see cref="RecordEnvelope.Open"/>).
/// <see cref="KeyId"/>: the key a sealed record was written with; null for a record in clear.
/// </summary>
internal readonly record struct RecordHeader(long Lsn, RecordKind Kind, RecordFlags Flags, int BodyLength, uint? KeyId = null);
