using System.Buffers.Binary;
using PersistentServices.Log;

namespace PersistentServices.Checkpoints;

/// <summary>
/// The log anchor (MSP §3.4; Phoenix/App §4.3 "a well-known file"): the LSN of the newest durable service checkpoint,
/// in the file <c>anchor</c> of the log directory. 16 bytes: "PSA1", the LSN (little-endian), a CRC-32C of both. Written
/// only after the checkpoint record is durable, atomically (temp file, fsync, rename, fsync the directory).
/// </summary>
internal static class AnchorFile
{
    public const string FileName = "anchor";
    private const uint Magic = 0x31415350; // "PSA1"

    public static string PathIn(string directory) => Path.Combine(directory, FileName);

    public static void Write(string directory, long lsn, UnixFileMode mode = DurableFile.OwnerOnly)
    {
        Span<byte> content = stackalloc byte[16];
        BinaryPrimitives.WriteUInt32LittleEndian(content, Magic);
        BinaryPrimitives.WriteInt64LittleEndian(content[4..], lsn);
        BinaryPrimitives.WriteUInt32LittleEndian(content[12..], Crc32C.Compute(content[..12]));
        DurableFile.WriteAtomically(PathIn(directory), content, mode);
    }

    /// <summary>The anchored LSN; null when there is no anchor (a log from before checkpoints, or a new one).</summary>
    /// <exception cref="LogCorruptionException">The file exists but is damaged.</exception>
    public static long? Read(string directory)
    {
        var path = PathIn(directory);
        if (!File.Exists(path))
        {
            return null;
        }

        var content = File.ReadAllBytes(path);
        if (content.Length != 16 || BinaryPrimitives.ReadUInt32LittleEndian(content) != Magic ||
            BinaryPrimitives.ReadUInt32LittleEndian(content.AsSpan(12)) != Crc32C.Compute(content.AsSpan(0, 12)))
        {
            throw new LogCorruptionException(
                $"The log anchor '{path}' is damaged ({content.Length} bytes). It names where recovery starts; the log cannot be trusted to start elsewhere. Restore the directory from a backup (docs/operations.md).",
                0);
        }

        return BinaryPrimitives.ReadInt64LittleEndian(content.AsSpan(4));
    }
}
