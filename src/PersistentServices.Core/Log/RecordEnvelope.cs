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
///  4  uint8   format version (1)
///  5  uint8   flags (RecordFlags)
///  6  uint16  record kind (RecordKind)
///  8  int64   LSN: the record's own log address
/// 16  int32   body length
/// 20  ...     body: the kind's protobuf message
/// </code>
/// All integers little-endian.
/// </summary>
internal static class RecordEnvelope
{
    public const int HeaderSize = 20;

    /// <summary>The envelope layout this build writes and the newest it reads.</summary>
    public const byte CurrentFormatVersion = 1;

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
        destination[VersionOffset] = CurrentFormatVersion;
        destination[FlagsOffset] = (byte)flags;
        BinaryPrimitives.WriteUInt16LittleEndian(destination[KindOffset..], checked((ushort)kind));
        BinaryPrimitives.WriteInt64LittleEndian(destination[LsnOffset..], lsn);
        BinaryPrimitives.WriteInt32LittleEndian(destination[LengthOffset..], body.Length);
        body.CopyTo(destination[HeaderSize..]);
        var crc = Crc32C.Compute(destination[VersionOffset..(HeaderSize + body.Length)]);
        BinaryPrimitives.WriteUInt32LittleEndian(destination[CrcOffset..], crc);
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

        header = new RecordHeader(
            lsn,
            (RecordKind)BinaryPrimitives.ReadUInt16LittleEndian(entry[KindOffset..]),
            (RecordFlags)entry[FlagsOffset],
            bodyLength);
        return null;
    }
}

/// <summary>A verified envelope header.</summary>
internal readonly record struct RecordHeader(long Lsn, RecordKind Kind, RecordFlags Flags, int BodyLength);
