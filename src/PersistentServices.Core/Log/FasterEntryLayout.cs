using System.Buffers.Binary;
using FASTER.core;

namespace PersistentServices.Log;

/// <summary>
/// FasterLog's on-disk entry layout with <c>LogChecksumType.PerEntry</c> (FASTER 2.6.5, FasterLog.cs
/// SetHeader/VerifyChecksum/GetLength; docs/log-format.md "FASTER layer"):
/// <code>
///  0  uint64  XOR of the 8-byte words of bytes [8, 12 + length), then of each trailing byte
///  8  int32   length of the payload; negative for a commit record
/// 12  ...     payload, padded to a multiple of 4
/// </code>
/// Entries never cross a page; a zero length inside a page is padding up to the page's end; an entry at a
/// page's start with zero length marks a page never written. The first valid address is 64.
/// Our recovery reads the segment files with this layout before FASTER opens them (LogRecoveryScanner).
/// </summary>
internal static class FasterEntryLayout
{
    public const int HeaderSize = 12;
    public const long FirstValidAddress = 64;

    public static int Align(int length) => (length + 3) & ~3;

    public static int EntrySize(int payloadLength) => HeaderSize + Align(payloadLength);

    public static int ReadLength(ReadOnlySpan<byte> header) => BinaryPrimitives.ReadInt32LittleEndian(header[8..]);

    /// <summary>Same XOR as FASTER's Utility.XorBytes over [8, 12 + length).</summary>
    // Runs over every record when a log opens: optimized at once, not first as tier-0 code (recovery time).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    public static bool ChecksumMatches(ReadOnlySpan<byte> entry, int payloadLength)
    {
        var stored = BinaryPrimitives.ReadUInt64LittleEndian(entry);
        return stored == Xor(entry.Slice(8, payloadLength + 4));
    }

    // Runs over every record when a log opens: optimized at once, not first as tier-0 code (recovery time).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    private static ulong Xor(ReadOnlySpan<byte> bytes)
    {
        ulong result = 0;
        while (bytes.Length >= 8)
        {
            result ^= BinaryPrimitives.ReadUInt64LittleEndian(bytes);
            bytes = bytes[8..];
        }

        // FASTER XORs each trailing byte into the low byte (Utility.XorBytes).
        foreach (var b in bytes)
        {
            result ^= b;
        }

        return result;
    }

    /// <summary>Parses a commit record's payload (FasterLogRecoveryInfo). Null when it does not parse or its checksum fails.</summary>
    public static FasterLogRecoveryInfo? TryParseCommit(ReadOnlySpan<byte> payload)
    {
        try
        {
            var info = new FasterLogRecoveryInfo();
            using var reader = new BinaryReader(new MemoryStream(payload.ToArray()));
            info.Initialize(reader);
            return info;
        }
        catch (FasterException)
        {
            return null;
        }
        catch (IOException)
        {
            return null;
        }
        catch (ArgumentException)
        {
            return null;
        }
    }
}
