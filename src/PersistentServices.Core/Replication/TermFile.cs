using System.Buffers.Binary;
using PersistentServices.Log;

namespace PersistentServices.Replication;

/// <summary>
/// The highest replication term a log directory has seen (<c>term</c>, beside the log's files; docs/replication.md): a
/// replica refuses shipments of an older term, and a primary refuses to start with an older one. 16 bytes: "PST1", the
/// term (little-endian), a CRC-32C of both; written atomically (temp file, fsync, rename, fsync the directory), before
/// anything of the new term is accepted.
/// </summary>
internal static class TermFile
{
    public const string FileName = "term";
    private const uint Magic = 0x31545350; // "PST1"

    public static string PathIn(string directory) => Path.Combine(directory, FileName);

    /// <summary>The term recorded in <paramref name="directory"/>; 0 when none is.</summary>
    /// <exception cref="LogCorruptionException">The file exists but is damaged.</exception>
    public static long Read(string directory)
    {
        var path = PathIn(directory);
        if (!File.Exists(path))
        {
            return 0;
        }

        var content = File.ReadAllBytes(path);
        if (content.Length != 16 || BinaryPrimitives.ReadUInt32LittleEndian(content) != Magic ||
            BinaryPrimitives.ReadUInt32LittleEndian(content.AsSpan(12)) != Crc32C.Compute(content.AsSpan(0, 12)))
        {
            throw new LogCorruptionException(
                $"The replication term file '{path}' is damaged ({content.Length} bytes). It fences older primaries; the directory cannot be trusted without it. Restore the directory from a replica or a backup (docs/replication.md).",
                0);
        }

        return BinaryPrimitives.ReadInt64LittleEndian(content.AsSpan(4));
    }

    public static void Write(string directory, long term, UnixFileMode mode = DurableFile.OwnerOnly)
    {
        Span<byte> content = stackalloc byte[16];
        BinaryPrimitives.WriteUInt32LittleEndian(content, Magic);
        BinaryPrimitives.WriteInt64LittleEndian(content[4..], term);
        BinaryPrimitives.WriteUInt32LittleEndian(content[12..], Crc32C.Compute(content[..12]));
        DurableFile.WriteAtomically(PathIn(directory), content, mode);
    }
}
